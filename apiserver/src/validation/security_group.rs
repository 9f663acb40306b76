//! `SecurityGroup`: tenant policy inside a VPC.
//!
//! Rules:
//! - `spec.vpcRef.name` is a required DNS-1123 label, immutable on update;
//! - `spec.podSelector` is a valid label selector;
//! - each `spec.ingress[i].from` / `spec.egress[i].to` peer sets exactly one of `group` and
//!   `cidr`; `group` is an object name (DNS-1123 subdomain); `vpc` is allowed only with `group`
//!   and needs a namespace and name (DNS-1123 labels); `cidr` is a canonical range (the Go
//!   server accepted host bits; here the message names the canonical form);
//! - each `ports[j]` has protocol `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPv6` (the Go server
//!   accepted anything and the agent silently skipped other values, so a typo opened nothing
//!   without a word), and a port in 0–65535 where 0 means every port (ICMP, ICMPv6: a type in
//!   0–255, 0 every type, as the policy compiler reads it); `(protocol, port)` pairs are unique
//!   within a rule.
//!
//! Default ([`default_security_group`]): an empty port protocol becomes `TCP`, as for a
//! NetworkPolicy port.

use std::collections::HashSet;

use cozyplane_apis::v1alpha1::{SecurityGroup, SecurityGroupPeer, SecurityGroupPort, protocol};

use super::common;
use super::field::{FieldError, FieldErrors, FieldPath};
use super::format;
use super::meta::{validate_label_selector, validate_object_meta, validate_object_meta_update};

/// Protocols a SecurityGroup port may have (the ones the policy compiler and the datapath know).
pub const SECURITY_GROUP_PROTOCOLS: &[&str] = &[
    protocol::TCP,
    protocol::UDP,
    protocol::SCTP,
    protocol::ICMP,
    protocol::ICMPV6,
];

/// Validates a new SecurityGroup: metadata and spec.
pub fn validate_security_group(sg: &SecurityGroup) -> FieldErrors {
    let mut errs = validate_object_meta(&sg.metadata, true);
    let spec = &sg.spec;
    let path = FieldPath::new("spec");
    common::local_vpc_ref(&mut errs, &spec.vpc_ref, &path.child("vpcRef"));
    errs.extend(validate_label_selector(
        &spec.pod_selector,
        &path.child("podSelector"),
    ));
    for (i, rule) in spec.ingress.iter().enumerate() {
        let rp = path.child("ingress").index(i);
        validate_peer(&mut errs, &rule.from, &rp.child("from"));
        validate_ports(&mut errs, &rule.ports, &rp.child("ports"));
    }
    for (i, rule) in spec.egress.iter().enumerate() {
        let rp = path.child("egress").index(i);
        validate_peer(&mut errs, &rule.to, &rp.child("to"));
        validate_ports(&mut errs, &rule.ports, &rp.child("ports"));
    }
    errs
}

/// Validates an update of a SecurityGroup: the create rules, the metadata update rules, and an
/// unchanged `spec.vpcRef`.
pub fn validate_security_group_update(new: &SecurityGroup, old: &SecurityGroup) -> FieldErrors {
    let mut errs = validate_security_group(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    common::immutable(
        &mut errs,
        FieldPath::new("spec").child("vpcRef").child("name"),
        &new.spec.vpc_ref.name,
        &old.spec.vpc_ref.name,
    );
    errs
}

/// Sets `TCP` on rule ports without a protocol, as Kubernetes does for NetworkPolicy ports.
pub fn default_security_group(sg: &mut SecurityGroup) {
    let ingress = sg.spec.ingress.iter_mut().flat_map(|r| r.ports.iter_mut());
    let egress = sg.spec.egress.iter_mut().flat_map(|r| r.ports.iter_mut());
    for p in ingress.chain(egress) {
        if p.protocol.is_empty() {
            p.protocol = protocol::TCP.to_owned();
        }
    }
}

fn validate_peer(errs: &mut FieldErrors, peer: &SecurityGroupPeer, path: &FieldPath) {
    match (peer.group.is_empty(), peer.cidr.is_empty()) {
        (true, true) => errs.push(FieldError::required(
            path.clone(),
            "exactly one of group or cidr must be set",
        )),
        (false, false) => errs.push(FieldError::forbidden(
            path.child("cidr"),
            "may not be set together with group",
        )),
        _ => {}
    }
    common::optional_str(errs, path.child("group"), &peer.group, format::dns1123_subdomain);
    if let Some(vpc) = &peer.vpc {
        if peer.group.is_empty() {
            errs.push(FieldError::forbidden(
                path.child("vpc"),
                "may only be set together with group",
            ));
        }
        common::vpc_ref(errs, vpc, &path.child("vpc"));
    }
    if !peer.cidr.is_empty() {
        common::canonical_cidr(errs, path.child("cidr"), &peer.cidr);
    }
}

fn validate_ports(errs: &mut FieldErrors, ports: &[SecurityGroupPort], path: &FieldPath) {
    let mut seen = HashSet::new();
    for (j, p) in ports.iter().enumerate() {
        let pp = path.index(j);
        common::protocol(errs, pp.child("protocol"), &p.protocol, SECURITY_GROUP_PROTOCOLS);
        let valid = common::rule_port(errs, pp.child("port"), &p.protocol, p.port);
        if valid && !seen.insert((&p.protocol, p.port)) {
            errs.push(FieldError::duplicate(pp, &format!("{}/{}", p.protocol, p.port)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cozyplane_apis::v1alpha1::{
        LocalVPCRef, SecurityGroupEgressRule, SecurityGroupIngressRule, SecurityGroupSpec, VPCRef,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn peer(group: &str, vpc: Option<(&str, &str)>, cidr: &str) -> SecurityGroupPeer {
        SecurityGroupPeer {
            group: group.into(),
            vpc: vpc.map(|(namespace, name)| VPCRef {
                namespace: namespace.into(),
                name: name.into(),
            }),
            cidr: cidr.into(),
        }
    }

    fn port(protocol: &str, port: i32) -> SecurityGroupPort {
        SecurityGroupPort {
            protocol: protocol.into(),
            port,
        }
    }

    fn sg(ingress: Vec<SecurityGroupIngressRule>, egress: Vec<SecurityGroupEgressRule>) -> SecurityGroup {
        let mut s = SecurityGroup::new(
            "web",
            SecurityGroupSpec {
                vpc_ref: LocalVPCRef { name: "blue".into() },
                pod_selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                    match_expressions: None,
                },
                ingress,
                egress,
            },
        );
        s.metadata.namespace = Some("tenant-a".into());
        s
    }

    fn valid() -> SecurityGroup {
        sg(
            vec![
                SecurityGroupIngressRule {
                    from: peer("lb", None, ""),
                    ports: vec![port("TCP", 80), port("TCP", 443)],
                },
                SecurityGroupIngressRule {
                    from: peer("", None, "0.0.0.0/0"),
                    ports: vec![port("UDP", 0)],
                },
                SecurityGroupIngressRule {
                    from: peer("clients", Some(("tenant-b", "red")), ""),
                    ports: vec![],
                },
            ],
            vec![SecurityGroupEgressRule {
                to: peer("", None, "2001:db8::/32"),
                ports: vec![port("TCP", 5432)],
            }],
        )
    }

    #[test]
    fn valid_group_passes() {
        assert_errors(&validate_security_group(&valid()), &[]);
        assert_errors(&validate_security_group(&sg(vec![], vec![])), &[]);
    }

    #[test]
    fn peers_need_exactly_one_of_group_and_cidr() {
        let s = sg(
            vec![
                SecurityGroupIngressRule {
                    from: peer("", None, ""),
                    ports: vec![],
                },
                SecurityGroupIngressRule {
                    from: peer("lb", None, "10.0.0.0/8"),
                    ports: vec![],
                },
                SecurityGroupIngressRule {
                    from: peer("", Some(("tenant-b", "red")), "10.0.0.0/8"),
                    ports: vec![],
                },
                SecurityGroupIngressRule {
                    from: peer("Lb", Some(("", "Red")), ""),
                    ports: vec![],
                },
            ],
            vec![SecurityGroupEgressRule {
                to: peer("", None, "10.0.0.1/8"),
                ports: vec![],
            }],
        );
        assert_errors(
            &validate_security_group(&s),
            &[
                ("spec.ingress[0].from", ErrorType::Required),
                ("spec.ingress[1].from.cidr", ErrorType::Forbidden),
                ("spec.ingress[2].from.vpc", ErrorType::Forbidden),
                ("spec.ingress[3].from.group", ErrorType::Invalid),
                ("spec.ingress[3].from.vpc.namespace", ErrorType::Required),
                ("spec.ingress[3].from.vpc.name", ErrorType::Invalid),
                ("spec.egress[0].to.cidr", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn ports_need_a_known_protocol_and_range() {
        let s = sg(
            vec![SecurityGroupIngressRule {
                from: peer("lb", None, ""),
                ports: vec![
                    port("TCP", 80),
                    port("TCP", 80),
                    port("GRE", 1),
                    port("tcp", 2),
                    port("", 3),
                    port("UDP", 65536),
                    port("UDP", -1),
                    port("SCTP", 9),
                    port("ICMP", 8),
                    port("ICMPv6", 128),
                    port("ICMP", 256),
                ],
            }],
            vec![],
        );
        assert_errors(
            &validate_security_group(&s),
            &[
                ("spec.ingress[0].ports[1]", ErrorType::Duplicate),
                ("spec.ingress[0].ports[2].protocol", ErrorType::NotSupported),
                ("spec.ingress[0].ports[3].protocol", ErrorType::NotSupported),
                ("spec.ingress[0].ports[4].protocol", ErrorType::Required),
                ("spec.ingress[0].ports[5].port", ErrorType::Invalid),
                ("spec.ingress[0].ports[6].port", ErrorType::Invalid),
                ("spec.ingress[0].ports[10].port", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn selector_and_ref_are_checked() {
        let mut s = valid();
        s.spec.vpc_ref.name.clear();
        s.spec.pod_selector.match_labels = Some(BTreeMap::from([("app".to_owned(), "-".to_owned())]));
        assert_errors(
            &validate_security_group(&s),
            &[
                ("spec.vpcRef.name", ErrorType::Required),
                ("spec.podSelector.matchLabels[app]", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn vpc_ref_is_immutable() {
        let old = valid();
        let mut new = old.clone();
        new.spec.ingress.pop();
        assert_errors(&validate_security_group_update(&new, &old), &[]);
        new.spec.vpc_ref.name = "green".into();
        assert_errors(
            &validate_security_group_update(&new, &old),
            &[("spec.vpcRef.name", ErrorType::Invalid)],
        );
    }

    #[test]
    fn defaulting_sets_tcp() {
        let mut s = sg(
            vec![SecurityGroupIngressRule {
                from: peer("lb", None, ""),
                ports: vec![port("", 80), port("UDP", 53)],
            }],
            vec![SecurityGroupEgressRule {
                to: peer("db", None, ""),
                ports: vec![port("", 5432)],
            }],
        );
        default_security_group(&mut s);
        assert_eq!(s.spec.ingress[0].ports[0].protocol, "TCP");
        assert_eq!(s.spec.ingress[0].ports[1].protocol, "UDP");
        assert_eq!(s.spec.egress[0].ports[0].protocol, "TCP");
        assert_errors(&validate_security_group(&s), &[]);
    }

    proptest! {
        #[test]
        fn random_strings_never_panic(group in "\\PC{0,60}", cidr in "\\PC{0,45}", proto in "\\PC{0,6}", p: i32, key in "\\PC{0,40}") {
            let mut s = sg(
                vec![SecurityGroupIngressRule { from: peer(&group, Some((&key, &group)), &cidr), ports: vec![port(&proto, p)] }],
                vec![SecurityGroupEgressRule { to: peer(&group, None, &cidr), ports: vec![port(&proto, p)] }],
            );
            s.spec.pod_selector.match_labels = Some(BTreeMap::from([(key.clone(), group.clone())]));
            let _ = validate_security_group(&s);
        }
    }
}
