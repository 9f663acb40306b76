//! `PodTrace`: the question a tenant asks of the default network's policy (AdminNetworkPolicy,
//! NetworkPolicy, BaselineAdminNetworkPolicy) about a flow of its pods, and the answer. Not a
//! stored kind: it is the body of `POST .../namespaces/<ns>/podtraces` (a `create` of resource
//! `podtraces` in the namespace, like a `LocalSubjectAccessReview`), answered with the same
//! object and its `status` filled in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The kind name of a pod trace request and its answer.
pub const POD_TRACE_KIND: &str = "PodTrace";

/// The resource a pod trace is a `create` of (namespaced; nothing is stored).
pub const POD_TRACE_RESOURCE: &str = "podtraces";

/// One end of the traced flow: a pod by name, or an address. Exactly one of `pod` and
/// `address`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTraceEndpoint {
    /// A pod's name, in `namespace`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod: String,
    /// The pod's namespace; empty: the request's. Only with `pod`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// An address: a pod's, a node's or one outside the cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
}

/// The flow to judge: its first packet. At least one end is a pod of the request's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTraceSpec {
    /// Who opens the flow.
    #[serde(default)]
    pub source: PodTraceEndpoint,
    /// Who receives it.
    #[serde(default)]
    pub destination: PodTraceEndpoint,
    /// `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPv6`.
    #[serde(default)]
    pub protocol: String,
    /// The destination port (TCP, UDP, SCTP: 1 to 65535; unset for ICMP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// ICMP type (0 to 255); an echo request (8, ICMPv6 128) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<i32>,
    /// ICMP code (0 to 255); 0 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<i32>,
}

/// The policy rule that decided a direction (or an `AdminNetworkPolicy` `Pass` rule that
/// handed it down). A NetworkPolicy of another namespace than the request's is `redacted`:
/// only its kind and direction are given. Admin policies are cluster objects: always named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTraceRule {
    /// `AdminNetworkPolicy`, `NetworkPolicy` or `BaselineAdminNetworkPolicy`.
    pub kind: String,
    /// The NetworkPolicy's namespace (absent for the cluster-scoped admin kinds, and when
    /// redacted).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The policy's name; empty when redacted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `ingress` or `egress`: the list of the policy's spec the rule is in.
    pub direction: String,
    /// The rule's index in that list; absent when redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
    /// The admin rule's own `name`, when it has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule_name: String,
    /// `Allow`, `Deny` or `Pass` (a NetworkPolicy rule always allows).
    pub action: String,
    /// A NetworkPolicy of another namespace: its name and rule are not shown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

/// The decision of one direction: the source's egress or the destination's ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTraceDirection {
    /// `Allowed` or `Dropped`: the policy's answer for this direction.
    pub verdict: String,
    /// The tier that decided: `AdminNetworkPolicy`, `NetworkPolicy`,
    /// `BaselineAdminNetworkPolicy`, `Default` (an admin tier selects the pod, none of its
    /// rules matched or an ANP passed, no NetworkPolicy isolates it: admitted) or `None` (no
    /// policy of any tier has this end as subject).
    pub tier: String,
    /// `Rule` (an allowing rule: `rule`), `Deny` (an admin `Deny` rule: `rule`),
    /// `DefaultDeny` (NetworkPolicy isolates the pod, no rule admits), `DefaultAllow` (tier
    /// `Default`), `NotSelected` (a pod no policy selects) or `NotSubject` (not a
    /// default-network pod: a node, a hostNetwork pod, an outside address).
    pub decision: String,
    /// The deciding rule, for `Rule` and `Deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<PodTraceRule>,
    /// The `AdminNetworkPolicy` `Pass` rule that matched first and handed the direction to
    /// the lower tiers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<PodTraceRule>,
    /// The datapath does not ask this direction: the source is an address of the
    /// destination pod's own node (kubelet probes pass every pod's ingress).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exempt: bool,
}

/// A HostFirewall rule that admitted a flow into or out of a node. HostFirewalls are cluster
/// objects of the platform's admins: always named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTraceHostFirewallRule {
    /// The HostFirewall's name; empty for the lockout failsafe (TCP to the API server's port,
    /// kept on every armed direction unless a firewall allows the lockout).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_firewall: String,
    /// `ingress` or `egress`: the list of the firewall's spec the rule is in.
    pub direction: String,
    /// The rule's index in that list (absent for the failsafe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
}

/// The node's own firewall on the flow: the destination node's ingress (a pod to a node's
/// address), or the source node's egress (a node or hostNetwork pod to a pod of another node).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTraceHostFirewall {
    /// The node whose HostFirewall is asked.
    pub node: String,
    /// `ingress` (into the node) or `egress` (out of it).
    pub direction: String,
    /// `Allowed` or `Dropped`.
    pub verdict: String,
    /// `Rule` (`rule` admits it), `Failsafe` (the API server's port), `DefaultDeny` (the
    /// direction is armed and no rule admits it), `NotArmed` (no HostFirewall selecting the node
    /// restricts the direction) or `Exempt` (IPv6 neighbour and router discovery, which no rule
    /// can cut).
    pub decision: String,
    /// The admitting rule, for `Rule` and `Failsafe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<PodTraceHostFirewallRule>,
}

/// An end of the flow as the server resolved it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTraceResolved {
    /// The address judged (absent for a pod of another namespace named by the caller).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// `Pod` (a default-network pod), `Node` (a node's address, a hostNetwork pod's) or
    /// `External` (neither).
    pub kind: String,
    /// The pod's namespace: given for a pod of the request's namespace, or one the caller
    /// named.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The pod's name, on the same terms.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod: String,
}

/// The answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTraceStatus {
    /// `Allowed` or `Dropped`: what the datapath does with the flow's first packet.
    pub verdict: String,
    /// The layer that decided: the tier or `HostFirewall` that dropped the flow (in the
    /// datapath's order: the source's egress, the node's firewall, the destination's
    /// ingress), `NodeExemption`, or for an admitted flow the tier of the destination's
    /// ingress, else of the source's egress, else `HostFirewall` when a firewall rule
    /// admitted it (`Default`, `None` when no policy applies).
    pub layer: String,
    /// The decision of that direction (`Rule`, `Deny`, `DefaultDeny`, `DefaultAllow`,
    /// `NotSelected`, `NotSubject`), the firewall's (`Rule`, `Failsafe`, `DefaultDeny`) or
    /// `NodeExempt`.
    pub reason: String,
    /// One sentence saying the same.
    pub message: String,
    /// The source as resolved.
    pub source: PodTraceResolved,
    /// The destination as resolved.
    pub destination: PodTraceResolved,
    /// The source's egress.
    pub egress: PodTraceDirection,
    /// The destination's ingress.
    pub ingress: PodTraceDirection,
    /// The source is an address of the destination pod's node: the datapath admits the flow
    /// whatever the destination's ingress policy says (kubelet probes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_exempt: bool,
    /// The node's HostFirewall, when one end of the flow is a node (absent otherwise, and
    /// for a node to its own pods, which no firewall judges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_firewall: Option<PodTraceHostFirewall>,
    /// What the answer does not cover (a node destination's HostFirewall, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A pod trace request (`spec`) and its answer (`status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTrace {
    /// `sdn.cozystack.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `PodTrace`.
    #[serde(default)]
    pub kind: String,
    /// Ignored on a request; the answer carries the namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The question.
    #[serde(default)]
    pub spec: PodTraceSpec,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodTraceStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_and_unknown_fields_are_refused() {
        let t: PodTrace = serde_json::from_value(serde_json::json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "PodTrace",
            "spec": {"source": {"pod": "a"}, "destination": {"pod": "b", "namespace": "t2"},
                     "protocol": "TCP", "port": 80}}))
        .unwrap();
        assert_eq!(t.spec.destination.namespace, "t2");
        assert_eq!(t.spec.port, Some(80));
        let bad = serde_json::from_value::<PodTrace>(serde_json::json!({
            "spec": {"source": {"pod": "a", "vpc": "x"}}}));
        assert!(bad.is_err());
        let s = serde_json::to_value(PodTraceDirection {
            verdict: "Allowed".into(),
            tier: "None".into(),
            decision: "NotSelected".into(),
            ..PodTraceDirection::default()
        })
        .unwrap();
        assert_eq!(
            s,
            serde_json::json!({"verdict": "Allowed", "tier": "None", "decision": "NotSelected"})
        );
    }
}
