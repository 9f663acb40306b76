//! `HostFirewall` lockout protection: a rule set that would cut the nodes off from the
//! Kubernetes API server is refused (422, with the field that does it) unless the object
//! carries the override annotation [`ALLOW_LOCKOUT`]` = "true"`.
//!
//! The agents on the nodes learn of a firewall, and of its removal, through the API server:
//! a firewall that stops a node from reaching it can no longer be lifted on that node. The
//! check is static (it reads the object, not the cluster), and looks at the API server's
//! port, [`API_SERVER_PORT`] (TCP 6443):
//!
//! * **egress** armed on the selected nodes (`policyTypes` has `Egress`, or is empty and
//!   there are egress rules) and no egress rule admits TCP 6443: every selected node loses
//!   the API server (its kubelet and agent open connections to it);
//! * **ingress** armed on a selector that may select the API server's own nodes, and no
//!   ingress rule admits TCP 6443: the other nodes lose the API server. The API server's
//!   nodes are known by the control-plane role labels ([`CONTROL_PLANE_LABELS`]): an empty
//!   selector selects them, and so does one that asks for such a label (`matchLabels`, `In`,
//!   `Exists`) without excluding it; a selector on other labels only is taken not to.
//!
//! A rule admits the port when its ports are empty (every TCP and UDP port) or one of them
//! is TCP and covers 6443 (`port` 0, the port, or a range holding it). Peers are not
//! checked: a rule naming the wrong CIDRs for the nodes is the operator's to see.

use cozyplane_apis::v1alpha1::{HostFirewall, HostFirewallPort, protocol};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::field::{FieldError, FieldErrors, FieldPath};

/// The annotation that lets a lockout through: `"true"`.
pub const ALLOW_LOCKOUT: &str = "sdn.cozystack.io/allow-lockout";
/// The kube-apiserver's port the check asks for.
pub const API_SERVER_PORT: i32 = 6443;
/// Node labels that mark the nodes running the API server.
pub const CONTROL_PLANE_LABELS: &[&str] = &[
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// The lockout errors of `hf` (none when the override annotation is set).
pub fn validate_lockout(hf: &HostFirewall) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let overridden = hf
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ALLOW_LOCKOUT))
        .is_some_and(|v| v == "true");
    if overridden {
        return errs;
    }
    let spec = &hf.spec;
    let types = &spec.policy_types;
    let ingress = types.is_empty() || types.iter().any(|t| t == "Ingress");
    let egress = types.iter().any(|t| t == "Egress") || (types.is_empty() && !spec.egress.is_empty());
    let path = FieldPath::new("spec");
    if ingress
        && may_select_control_plane(&spec.node_selector)
        && !spec.ingress.iter().any(|r| admits_api(&r.ports))
    {
        errs.push(FieldError::forbidden(
            path.child("ingress"),
            format!(
                "ingress is restricted on nodes that may run the API server and no rule admits \
                 TCP {API_SERVER_PORT}: the other nodes would be cut off from it; admit the port, \
                 or set the annotation {ALLOW_LOCKOUT}=\"true\""
            ),
        ));
    }
    if egress && !spec.egress.iter().any(|r| admits_api(&r.ports)) {
        errs.push(FieldError::forbidden(
            path.child("egress"),
            format!(
                "egress is restricted and no rule admits TCP {API_SERVER_PORT}: the selected nodes \
                 would be cut off from the API server; admit the port, or set the annotation \
                 {ALLOW_LOCKOUT}=\"true\""
            ),
        ));
    }
    errs
}

/// A rule's ports admit TCP [`API_SERVER_PORT`].
fn admits_api(ports: &[HostFirewallPort]) -> bool {
    ports.is_empty()
        || ports.iter().any(|p| {
            let tcp = p.protocol.is_empty() || p.protocol == protocol::TCP;
            let end = if p.end_port == 0 { p.port } else { p.end_port };
            tcp && (p.port == 0 || (p.port..=end).contains(&API_SERVER_PORT))
        })
}

/// Whether `sel` may select a control-plane node (see the module's doc).
fn may_select_control_plane(sel: &LabelSelector) -> bool {
    let labels = sel.match_labels.as_ref();
    let exprs = sel.match_expressions.as_deref().unwrap_or_default();
    let empty = labels.is_none_or(std::collections::BTreeMap::is_empty) && exprs.is_empty();
    if empty {
        return true;
    }
    let excluded = exprs.iter().any(|e| {
        CONTROL_PLANE_LABELS.contains(&e.key.as_str())
            && matches!(e.operator.as_str(), "DoesNotExist" | "NotIn")
    });
    let asked = labels.is_some_and(|l| l.keys().any(|k| CONTROL_PLANE_LABELS.contains(&k.as_str())))
        || exprs.iter().any(|e| {
            CONTROL_PLANE_LABELS.contains(&e.key.as_str()) && matches!(e.operator.as_str(), "In" | "Exists")
        });
    asked && !excluded
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{HostFirewallEgressRule, HostFirewallIngressRule, HostFirewallSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn port(protocol: &str, port: i32, end_port: i32) -> HostFirewallPort {
        HostFirewallPort {
            protocol: protocol.into(),
            port,
            end_port,
        }
    }

    fn expr(key: &str, op: &str) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: matches!(op, "In" | "NotIn").then(|| vec![String::new()]),
        }
    }

    fn hf(
        types: &[&str],
        ingress: Vec<Vec<HostFirewallPort>>,
        egress: Vec<Vec<HostFirewallPort>>,
    ) -> HostFirewall {
        HostFirewall::new(
            "fw",
            HostFirewallSpec {
                policy_types: types.iter().map(ToString::to_string).collect(),
                ingress: ingress
                    .into_iter()
                    .map(|ports| HostFirewallIngressRule { from: vec![], ports })
                    .collect(),
                egress: egress
                    .into_iter()
                    .map(|ports| HostFirewallEgressRule { to: vec![], ports })
                    .collect(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn ingress_without_the_api_port_on_every_node_is_refused() {
        // `spec: {}` arms ingress with no rule, on every node.
        assert_errors(
            &validate_lockout(&hf(&[], vec![], vec![])),
            &[("spec.ingress", ErrorType::Forbidden)],
        );
        assert_errors(
            &validate_lockout(&hf(&["Ingress"], vec![vec![port("TCP", 22, 0)]], vec![])),
            &[("spec.ingress", ErrorType::Forbidden)],
        );
        // UDP 6443 is not the API server.
        assert_errors(
            &validate_lockout(&hf(&[], vec![vec![port("UDP", 6443, 0)]], vec![])),
            &[("spec.ingress", ErrorType::Forbidden)],
        );
    }

    #[test]
    fn rules_that_admit_the_api_port_pass() {
        for ports in [
            vec![],
            vec![port("TCP", 6443, 0)],
            vec![port("", 6443, 0)],
            vec![port("TCP", 0, 0)],
            vec![port("TCP", 6400, 6463)],
            vec![port("UDP", 53, 0), port("TCP", 6443, 0)],
        ] {
            let h = hf(&["Ingress", "Egress"], vec![ports.clone()], vec![ports.clone()]);
            assert_errors(&validate_lockout(&h), &[]);
        }
        // A range beside the port does not.
        let h = hf(&[], vec![vec![port("TCP", 6444, 6500)]], vec![]);
        assert_errors(&validate_lockout(&h), &[("spec.ingress", ErrorType::Forbidden)]);
    }

    #[test]
    fn egress_without_the_api_port_is_refused_whatever_the_selector() {
        let mut h = hf(&["Egress"], vec![], vec![vec![port("UDP", 53, 0)]]);
        h.spec.node_selector.match_labels = Some([("role".to_string(), "edge".to_string())].into());
        assert_errors(&validate_lockout(&h), &[("spec.egress", ErrorType::Forbidden)]);
        // Empty policyTypes with egress rules arms egress too (and ingress, here admitted).
        let h = hf(&[], vec![vec![]], vec![vec![port("UDP", 53, 0)]]);
        assert_errors(&validate_lockout(&h), &[("spec.egress", ErrorType::Forbidden)]);
    }

    #[test]
    fn selectors_away_from_the_control_plane_may_close_ingress() {
        let mut h = hf(&["Ingress"], vec![], vec![]);
        h.spec.node_selector.match_labels = Some([("role".to_string(), "edge".to_string())].into());
        assert_errors(&validate_lockout(&h), &[]);
        let mut h = hf(&["Ingress"], vec![], vec![]);
        h.spec.node_selector.match_expressions = Some(vec![expr(CONTROL_PLANE_LABELS[0], "DoesNotExist")]);
        assert_errors(&validate_lockout(&h), &[]);
        // Asking for the control plane is refused, by label or by expression.
        for sel in [
            LabelSelector {
                match_labels: Some([(CONTROL_PLANE_LABELS[0].to_string(), String::new())].into()),
                match_expressions: None,
            },
            LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![expr(CONTROL_PLANE_LABELS[1], "Exists")]),
            },
        ] {
            let mut h = hf(&["Ingress"], vec![], vec![]);
            h.spec.node_selector = sel;
            assert_errors(&validate_lockout(&h), &[("spec.ingress", ErrorType::Forbidden)]);
        }
    }

    #[test]
    fn the_annotation_overrides() {
        let mut h = hf(&["Ingress", "Egress"], vec![], vec![]);
        assert_eq!(validate_lockout(&h).len(), 2);
        h.metadata.annotations = Some([(ALLOW_LOCKOUT.to_string(), "true".to_string())].into());
        assert_errors(&validate_lockout(&h), &[]);
        h.metadata.annotations = Some([(ALLOW_LOCKOUT.to_string(), "yes".to_string())].into());
        assert_eq!(validate_lockout(&h).len(), 2);
    }
}
