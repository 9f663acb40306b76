//! `HostFirewall`: operator policy for the nodes' own traffic.
//!
//! Rules (the Go server's, made stricter where noted):
//! - `spec.nodeSelector` is a valid label selector;
//! - `spec.policyTypes` entries are `Ingress` or `Egress`, each at most once (not checked by the
//!   Go server);
//! - each peer `cidr` is a required canonical range, and each of its `except` ranges is a
//!   canonical range strictly inside it, listed once (Go only required both to parse);
//! - each port has protocol `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPv6` (the Go server knew TCP
//!   and UDP) and a port in 0–65535 (0 = every port; ICMP, ICMPv6: the message type, 0–255,
//!   0 every type); a non-zero `endPort` needs a non-zero `port` of a protocol with ports,
//!   lies in `port..=65535` and spans at most [`MAX_PORT_RANGE`] ports; identical port
//!   entries are reported as duplicates;
//!
//! A rule set that would close the API server's port is not refused: the compiler keeps that
//! port open on every restricted node unless the firewall carries the override annotation
//! (`cozyplane_policy::hf`, docs/policy.md "Lockout protection"), so no object stored here can
//! cut a node off without saying so.
//!
//! Default ([`default_host_firewall`]): an empty port protocol becomes `TCP`, as for a
//! NetworkPolicy port. `policyTypes` is deliberately *not* defaulted: empty means "`Ingress`,
//! plus `Egress` if there are egress rules", evaluated by the agent each time, so adding egress
//! rules later also restricts egress; a stored default would freeze the first answer.

use std::collections::HashSet;

use cozyplane_apis::v1alpha1::{HostFirewall, HostFirewallPeer, HostFirewallPort, protocol};

use super::common::{self, MAX_PORT};
use super::field::{FieldError, FieldErrors, FieldPath};
use super::meta::{validate_label_selector, validate_object_meta, validate_object_meta_update};

/// Protocols a HostFirewall port may have.
pub const HOST_FIREWALL_PROTOCOLS: &[&str] = &[
    protocol::TCP,
    protocol::UDP,
    protocol::SCTP,
    protocol::ICMP,
    protocol::ICMPV6,
];
/// Values of `spec.policyTypes`.
pub const POLICY_TYPES: &[&str] = &["Ingress", "Egress"];
/// The most ports one `port`..`endPort` range may span (the datapath expands ranges).
pub const MAX_PORT_RANGE: i32 = 64;

/// Validates a new HostFirewall: metadata and spec.
pub fn validate_host_firewall(hf: &HostFirewall) -> FieldErrors {
    let mut errs = validate_object_meta(&hf.metadata, false);
    let spec = &hf.spec;
    let path = FieldPath::new("spec");
    errs.extend(validate_label_selector(
        &spec.node_selector,
        &path.child("nodeSelector"),
    ));
    let mut seen = HashSet::new();
    for (i, t) in spec.policy_types.iter().enumerate() {
        let p = path.child("policyTypes").index(i);
        if !POLICY_TYPES.contains(&t.as_str()) {
            errs.push(FieldError::not_supported(p, t, POLICY_TYPES));
        } else if !seen.insert(t) {
            errs.push(FieldError::duplicate(p, t));
        }
    }
    for (i, rule) in spec.ingress.iter().enumerate() {
        let rp = path.child("ingress").index(i);
        validate_peers(&mut errs, &rule.from, &rp.child("from"));
        validate_ports(&mut errs, &rule.ports, &rp.child("ports"));
    }
    for (i, rule) in spec.egress.iter().enumerate() {
        let rp = path.child("egress").index(i);
        validate_peers(&mut errs, &rule.to, &rp.child("to"));
        validate_ports(&mut errs, &rule.ports, &rp.child("ports"));
    }
    errs
}

/// Validates an update of a HostFirewall: the create rules and the metadata update rules.
pub fn validate_host_firewall_update(new: &HostFirewall, old: &HostFirewall) -> FieldErrors {
    let mut errs = validate_host_firewall(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    errs
}

/// Sets `TCP` on rule ports without a protocol, as Kubernetes does for NetworkPolicy ports.
pub fn default_host_firewall(hf: &mut HostFirewall) {
    let ingress = hf.spec.ingress.iter_mut().flat_map(|r| r.ports.iter_mut());
    let egress = hf.spec.egress.iter_mut().flat_map(|r| r.ports.iter_mut());
    for p in ingress.chain(egress) {
        if p.protocol.is_empty() {
            p.protocol = protocol::TCP.to_owned();
        }
    }
}

fn validate_peers(errs: &mut FieldErrors, peers: &[HostFirewallPeer], path: &FieldPath) {
    for (j, peer) in peers.iter().enumerate() {
        let pp = path.index(j);
        let outer = common::canonical_cidr(errs, pp.child("cidr"), &peer.cidr);
        let mut seen = HashSet::new();
        for (k, text) in peer.except.iter().enumerate() {
            let ep = pp.child("except").index(k);
            let Some(inner) = common::canonical_cidr(errs, ep.clone(), text) else {
                continue;
            };
            if let Some(outer) = outer
                && !(outer.contains(&inner) && inner.prefix_len() > outer.prefix_len())
            {
                errs.push(FieldError::invalid(
                    ep,
                    text,
                    format!("must be a range strictly inside cidr {outer}"),
                ));
            } else if !seen.insert(inner) {
                errs.push(FieldError::duplicate(ep, text));
            }
        }
    }
}

fn validate_ports(errs: &mut FieldErrors, ports: &[HostFirewallPort], path: &FieldPath) {
    let mut seen = HashSet::new();
    for (k, p) in ports.iter().enumerate() {
        let pp = path.index(k);
        common::protocol(errs, pp.child("protocol"), &p.protocol, HOST_FIREWALL_PROTOCOLS);
        let mut ok = common::rule_port(errs, pp.child("port"), &p.protocol, p.port);
        if p.end_port != 0 {
            let end = pp.child("endPort");
            if common::is_icmp(&p.protocol) {
                errs.push(FieldError::forbidden(end, "ICMP types have no ranges"));
                ok = false;
            } else if p.port == 0 {
                errs.push(FieldError::forbidden(end, "may not be set without port"));
                ok = false;
            } else if p.end_port < p.port || p.end_port > MAX_PORT {
                errs.push(FieldError::invalid_int(
                    end,
                    p.end_port.into(),
                    format!("must be between port ({}) and {MAX_PORT}, inclusive", p.port),
                ));
                ok = false;
            } else if i64::from(p.end_port) - i64::from(p.port) >= i64::from(MAX_PORT_RANGE) {
                errs.push(FieldError::invalid_int(
                    end,
                    p.end_port.into(),
                    format!("a range may span at most {MAX_PORT_RANGE} ports"),
                ));
                ok = false;
            }
        }
        if ok && !seen.insert((&p.protocol, p.port, p.end_port)) {
            let text = if p.end_port == 0 {
                format!("{}/{}", p.protocol, p.port)
            } else {
                format!("{}/{}-{}", p.protocol, p.port, p.end_port)
            };
            errs.push(FieldError::duplicate(pp, &text));
        }
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{HostFirewallEgressRule, HostFirewallIngressRule, HostFirewallSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn peer(cidr: &str, except: &[&str]) -> HostFirewallPeer {
        HostFirewallPeer {
            cidr: cidr.into(),
            except: except.iter().map(|e| (*e).to_owned()).collect(),
        }
    }

    fn port(protocol: &str, port: i32, end_port: i32) -> HostFirewallPort {
        HostFirewallPort {
            protocol: protocol.into(),
            port,
            end_port,
        }
    }

    fn hf(from: Vec<HostFirewallPeer>, ports: Vec<HostFirewallPort>) -> HostFirewall {
        HostFirewall::new(
            "ssh-only",
            HostFirewallSpec {
                node_selector: LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "node-role.kubernetes.io/control-plane".into(),
                        operator: "DoesNotExist".into(),
                        values: None,
                    }]),
                },
                policy_types: vec!["Ingress".into(), "Egress".into()],
                ingress: vec![HostFirewallIngressRule { from, ports }],
                egress: vec![HostFirewallEgressRule {
                    to: vec![peer("::/0", &[])],
                    ports: vec![port("UDP", 53, 0), port("TCP", 6443, 0)],
                }],
            },
        )
    }

    #[test]
    fn valid_policy_passes() {
        let h = hf(
            vec![
                peer("10.0.0.0/8", &["10.1.0.0/16", "10.2.0.0/16"]),
                peer("fd00::/8", &[]),
            ],
            vec![port("TCP", 22, 0), port("TCP", 30000, 30063), port("UDP", 0, 0)],
        );
        assert_errors(&validate_host_firewall(&h), &[]);
        // An empty spec closes ingress on every node: valid (the compiler keeps the API
        // server's port open on it; docs/policy.md, "Lockout protection").
        let empty = HostFirewall::new("empty", HostFirewallSpec::default());
        assert_errors(&validate_host_firewall(&empty), &[]);
    }

    #[test]
    fn cidrs_and_excepts() {
        let h = hf(
            vec![
                peer("", &[]),
                peer("10.0.0.1/8", &["10.1.0.0/16"]),
                peer(
                    "10.0.0.0/8",
                    &[
                        "11.0.0.0/16",
                        "10.0.0.0/8",
                        "fd00::/64",
                        "10.1.0.0/16",
                        "10.1.0.0/16",
                        "x",
                    ],
                ),
            ],
            vec![],
        );
        assert_errors(
            &validate_host_firewall(&h),
            &[
                ("spec.ingress[0].from[0].cidr", ErrorType::Required),
                ("spec.ingress[0].from[1].cidr", ErrorType::Invalid),
                ("spec.ingress[0].from[2].except[0]", ErrorType::Invalid),
                ("spec.ingress[0].from[2].except[1]", ErrorType::Invalid),
                ("spec.ingress[0].from[2].except[2]", ErrorType::Invalid),
                ("spec.ingress[0].from[2].except[4]", ErrorType::Duplicate),
                ("spec.ingress[0].from[2].except[5]", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn port_ranges() {
        let h = hf(
            vec![],
            vec![
                port("TCP", 0, 10),
                port("TCP", 100, 99),
                port("TCP", 100, 164),
                port("TCP", 100, 163),
                port("TCP", 65535, 65536),
                port("GRE", 70000, 0),
                port("TCP", 100, 163),
                port("ICMP", 8, 0),
                port("ICMPv6", 256, 0),
                port("ICMP", 8, 9),
                port("SCTP", 9, 12),
                port("ICMP", 8, 0),
            ],
        );
        assert_errors(
            &validate_host_firewall(&h),
            &[
                ("spec.ingress[0].ports[0].endPort", ErrorType::Forbidden),
                ("spec.ingress[0].ports[1].endPort", ErrorType::Invalid),
                ("spec.ingress[0].ports[2].endPort", ErrorType::Invalid),
                ("spec.ingress[0].ports[4].endPort", ErrorType::Invalid),
                ("spec.ingress[0].ports[5].protocol", ErrorType::NotSupported),
                ("spec.ingress[0].ports[5].port", ErrorType::Invalid),
                ("spec.ingress[0].ports[6]", ErrorType::Duplicate),
                ("spec.ingress[0].ports[8].port", ErrorType::Invalid),
                ("spec.ingress[0].ports[9].endPort", ErrorType::Forbidden),
                ("spec.ingress[0].ports[11]", ErrorType::Duplicate),
            ],
        );
    }

    #[test]
    fn policy_types_and_selector() {
        let mut h = hf(vec![], vec![]);
        h.spec.policy_types = vec!["Ingress".into(), "ingress".into(), "Ingress".into()];
        h.spec.node_selector.match_expressions.as_mut().unwrap()[0].operator = "Exist".into();
        h.metadata.namespace = Some("default".into());
        assert_errors(
            &validate_host_firewall(&h),
            &[
                ("metadata.namespace", ErrorType::Forbidden),
                (
                    "spec.nodeSelector.matchExpressions[0].operator",
                    ErrorType::NotSupported,
                ),
                ("spec.policyTypes[1]", ErrorType::NotSupported),
                ("spec.policyTypes[2]", ErrorType::Duplicate),
            ],
        );
    }

    #[test]
    fn defaulting_sets_tcp_and_keeps_policy_types() {
        let mut h = hf(vec![], vec![port("", 22, 0)]);
        h.spec.policy_types.clear();
        h.spec.egress[0].ports[0].protocol.clear();
        default_host_firewall(&mut h);
        assert_eq!(h.spec.ingress[0].ports[0].protocol, "TCP");
        assert_eq!(h.spec.egress[0].ports[0].protocol, "TCP");
        assert!(h.spec.policy_types.is_empty());
        assert_errors(&validate_host_firewall(&h), &[]);
    }

    #[test]
    fn update_uses_the_create_rules() {
        let old = hf(vec![], vec![port("TCP", 22, 0)]);
        assert_errors(
            &validate_host_firewall_update(&hf(vec![], vec![port("TCP", 2222, 0)]), &old),
            &[],
        );
        assert_errors(
            &validate_host_firewall_update(&hf(vec![], vec![port("TCP", -2, 0)]), &old),
            &[("spec.ingress[0].ports[0].port", ErrorType::Invalid)],
        );
    }

    proptest! {
        #[test]
        fn random_values_never_panic(cidr in "\\PC{0,45}", except in "\\PC{0,45}", proto in "\\PC{0,6}", p: i32, e: i32) {
            let h = hf(vec![peer(&cidr, &[&except, &cidr])], vec![port(&proto, p, e)]);
            let _ = validate_host_firewall(&h);
        }

        #[test]
        fn port_ranges_never_panic(p in -2i32..70000, e in -2i32..70000) {
            let _ = validate_host_firewall(&hf(vec![], vec![port("TCP", p, e)]));
        }
    }
}
