//! `policy.networking.k8s.io/v1alpha1`: the upstream network-policy-api kinds cozyplane
//! enforces, `AdminNetworkPolicy` and `BaselineAdminNetworkPolicy` (issue 29).
//!
//! Not cozyplane's own group: the kinds are served by kube-apiserver from the project's
//! CustomResourceDefinitions, which the chart installs (vendored from network-policy-api
//! v0.1.8, `charts/cozyplane/crds/`). These are the wire types the agent watches, with
//! [`kube_core::Resource`] so `kube::Api::<AdminNetworkPolicy>::all(client)` works. Fields
//! the project marks experimental (`namedPort`, `nodes`, `domainNames`) are read too; what
//! the datapath cannot enforce is refused by the policy compiler, failing closed as the
//! API's comments ask.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The group.
pub const GROUP: &str = "policy.networking.k8s.io";
/// The version.
pub const VERSION: &str = "v1alpha1";
/// The network-policy-api release whose CRDs the chart vendors.
pub const UPSTREAM_RELEASE: &str = "v0.1.8";

/// `AdminNetworkPolicySubject`: exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// Every pod of the namespaces selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    /// The pods selected in the namespaces selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPod>,
}

/// `NamespacedPod`: pods by namespace AND pod labels (empty selectors select all).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedPod {
    /// The namespaces.
    #[serde(default)]
    pub namespace_selector: LabelSelector,
    /// The pods within them.
    #[serde(default)]
    pub pod_selector: LabelSelector,
}

/// `AdminNetworkPolicyPort`: exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPort {
    /// One port of one protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_number: Option<PortNumber>,
    /// A container port name (experimental upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named_port: Option<String>,
    /// `[start, end]` of one protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range: Option<PortRange>,
}

/// `Port`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortNumber {
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// 1–65535.
    pub port: i32,
}

/// `PortRange`, inclusive.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortRange {
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// First port.
    pub start: i32,
    /// Last port.
    pub end: i32,
}

/// `AdminNetworkPolicyIngressPeer` (also BANP's): exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressPeer {
    /// Every pod of the namespaces selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    /// The pods selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPod>,
}

/// `AdminNetworkPolicyEgressPeer` (also BANP's): exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressPeer {
    /// Every pod of the namespaces selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    /// The pods selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPod>,
    /// The addresses of the nodes selected (`status.addresses`; experimental upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<LabelSelector>,
    /// CIDRs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<String>>,
    /// DNS names (experimental upstream; not enforced by cozyplane: the rule fails closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_names: Option<Vec<String>>,
}

/// An ingress rule (ANP: `Allow`, `Deny`, `Pass`; BANP: `Allow`, `Deny`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    /// For observability.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What a match does.
    pub action: String,
    /// Sources; any one matching is enough.
    #[serde(default)]
    pub from: Vec<IngressPeer>,
    /// The subject's ports; absent: every port and protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<PolicyPort>>,
}

/// An egress rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressRule {
    /// For observability.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What a match does.
    pub action: String,
    /// Destinations; any one matching is enough.
    #[serde(default)]
    pub to: Vec<EgressPeer>,
    /// Destination ports; absent: every port and protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<PolicyPort>>,
}

/// `AdminNetworkPolicySpec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdminNetworkPolicySpec {
    /// 0–1000; lower is checked first.
    pub priority: i32,
    /// The pods the policy applies to.
    #[serde(default)]
    pub subject: Subject,
    /// In order: the first matching rule decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<IngressRule>,
    /// In order: the first matching rule decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressRule>,
}

/// `BaselineAdminNetworkPolicySpec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BaselineAdminNetworkPolicySpec {
    /// The pods the policy applies to.
    #[serde(default)]
    pub subject: Subject,
    /// In order: the first matching rule decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<IngressRule>,
    /// In order: the first matching rule decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressRule>,
}

/// The status both kinds carry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// One condition per implementation.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// `AdminNetworkPolicy`: cluster-scoped, above every namespace's NetworkPolicy.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct AdminNetworkPolicy {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: AdminNetworkPolicySpec,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PolicyStatus>,
}

/// `BaselineAdminNetworkPolicy`: the singleton `default`, below NetworkPolicy.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct BaselineAdminNetworkPolicy {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: BaselineAdminNetworkPolicySpec,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PolicyStatus>,
}

/// The one name a BaselineAdminNetworkPolicy may have.
pub const BANP_NAME: &str = "default";

macro_rules! cluster_resource {
    ($kind:ident, $plural:literal) => {
        // By hand: the wire form carries `apiVersion` and `kind` (kube-apiserver refuses a
        // create without them), which the struct does not hold.
        impl Serialize for $kind {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let mut st = s.serialize_struct(stringify!($kind), 5)?;
                st.serialize_field("apiVersion", "policy.networking.k8s.io/v1alpha1")?;
                st.serialize_field("kind", stringify!($kind))?;
                st.serialize_field("metadata", &self.metadata)?;
                st.serialize_field("spec", &self.spec)?;
                if let Some(status) = &self.status {
                    st.serialize_field("status", status)?;
                }
                st.end()
            }
        }

        impl kube_core::Resource for $kind {
            type DynamicType = ();
            type Scope = kube_core::ClusterResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(stringify!($kind))
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("policy.networking.k8s.io/v1alpha1")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

cluster_resource!(AdminNetworkPolicy, "adminnetworkpolicies");
cluster_resource!(BaselineAdminNetworkPolicy, "baselineadminnetworkpolicies");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_upstream_shape() {
        let anp: AdminNetworkPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": {"name": "a"},
            "spec": {
                "priority": 5,
                "subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"x": "y"}}}},
                "egress": [{"name": "r", "action": "Pass",
                            "to": [{"networks": ["10.0.0.0/8"]}, {"nodes": {}}],
                            "ports": [{"portRange": {"protocol": "UDP", "start": 1, "end": 9}}]}]
            }
        }))
        .unwrap();
        assert_eq!(anp.spec.priority, 5);
        let r = &anp.spec.egress[0];
        assert_eq!(r.action, "Pass");
        assert_eq!(r.to[0].networks.as_deref(), Some(&["10.0.0.0/8".to_string()][..]));
        assert!(r.to[1].nodes.is_some());
        assert_eq!(r.ports.as_ref().unwrap()[0].port_range.as_ref().unwrap().end, 9);
        let wire = serde_json::to_value(&anp).unwrap();
        assert_eq!(wire["apiVersion"], "policy.networking.k8s.io/v1alpha1");
        assert_eq!(wire["kind"], "AdminNetworkPolicy");
        assert_eq!(serde_json::from_value::<AdminNetworkPolicy>(wire).unwrap(), anp);
        use kube_core::Resource;
        assert_eq!(AdminNetworkPolicy::plural(&()), "adminnetworkpolicies");
        assert_eq!(
            BaselineAdminNetworkPolicy::api_version(&()),
            "policy.networking.k8s.io/v1alpha1"
        );
    }
}
