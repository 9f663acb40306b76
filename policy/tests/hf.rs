//! HostFirewalls compile into entries whose verdicts are the documented semantics: node
//! ingress and egress by CIDR/except, protocol, port and range, both families; unselected
//! nodes and unarmed directions stay open; refused constructs allow nothing.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{
    HostFirewall, HostFirewallEgressRule, HostFirewallIngressRule, HostFirewallPeer, HostFirewallPort,
    HostFirewallSpec,
};
use cozyplane_policy::Reason;
use cozyplane_policy::hf::{HfCompiler, NodeInfo};
use cozyplane_policy::model::{POL_F_HF_EGRESS, POL_F_HF_INGRESS, proto};
use cozyplane_policy::verdict;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

fn peer(cidr: &str, except: &[&str]) -> HostFirewallPeer {
    HostFirewallPeer {
        cidr: cidr.into(),
        except: except.iter().map(ToString::to_string).collect(),
    }
}

fn port(p: &str, n: i32, end: i32) -> HostFirewallPort {
    HostFirewallPort {
        protocol: p.into(),
        port: n,
        end_port: end,
    }
}

fn fw(
    name: &str,
    types: &[&str],
    ingress: Vec<HostFirewallIngressRule>,
    egress: Vec<HostFirewallEgressRule>,
) -> HostFirewall {
    HostFirewall {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: HostFirewallSpec {
            node_selector: LabelSelector {
                match_labels: Some([("role".to_string(), "worker".to_string())].into()),
                match_expressions: None,
            },
            policy_types: types.iter().map(ToString::to_string).collect(),
            ingress,
            egress,
        },
        status: None,
    }
}

fn node(role: &str) -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        labels: [("role".to_string(), role.to_string())].into(),
        addresses: vec!["10.10.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
    }
}

fn compiler(role: &str) -> HfCompiler {
    let mut c = HfCompiler::new(node(role));
    c.set_firewall(&fw(
        "api-guard",
        &[],
        vec![HostFirewallIngressRule {
            from: vec![],
            ports: vec![port("TCP", 6443, 0)],
        }],
        vec![],
    ));
    c.set_firewall(&fw(
        "ssh",
        &[],
        vec![
            HostFirewallIngressRule {
                from: vec![peer("192.168.0.0/16", &["192.168.5.0/24"])],
                ports: vec![port("TCP", 22, 0)],
            },
            HostFirewallIngressRule {
                from: vec![peer("10.0.0.0/8", &[])],
                ports: vec![port("TCP", 30000, 32767)],
            },
            HostFirewallIngressRule {
                from: vec![peer("fd00::/64", &[])],
                ports: vec![port("UDP", 53, 0)],
            },
            HostFirewallIngressRule {
                from: vec![peer("::/0", &[])],
                ports: vec![port("UDP", 123, 0)],
            },
        ],
        vec![],
    ));
    c.set_firewall(&fw(
        "out",
        &["Egress"],
        vec![],
        vec![HostFirewallEgressRule {
            to: vec![peer("10.20.0.0/16", &[])],
            ports: vec![port("TCP", 443, 0)],
        }],
    ));
    c
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn inbound(c: &HfCompiler, src: &str, dst: &str, pr: u8, port: u16) -> bool {
    verdict::hf(c.tables(), ip(src), ip(dst), pr, port).allowed()
}

#[test]
fn ingress_by_cidr_except_protocol_port_and_range_in_both_families() {
    let c = compiler("worker");
    assert_eq!(c.tables().state_flags, POL_F_HF_INGRESS | POL_F_HF_EGRESS);
    let node = "10.10.0.1";
    assert!(
        inbound(&c, "1.2.3.4", node, proto::TCP, 6443),
        "guard rule from anywhere"
    );
    assert!(
        inbound(&c, "2001:db8::9", "fd00::1", proto::TCP, 6443),
        "any includes IPv6"
    );
    assert!(!inbound(&c, "1.2.3.4", node, proto::TCP, 22));
    assert!(inbound(&c, "192.168.1.1", node, proto::TCP, 22));
    assert!(!inbound(&c, "192.168.5.5", node, proto::TCP, 22), "except");
    assert!(!inbound(&c, "192.168.1.1", node, proto::UDP, 22), "protocol");
    assert!(inbound(&c, "10.1.1.1", node, proto::TCP, 31000), "range");
    assert!(inbound(&c, "10.1.1.1", node, proto::TCP, 32767), "range end");
    assert!(!inbound(&c, "10.1.1.1", node, proto::TCP, 29999), "below range");
    assert!(inbound(&c, "fd00::5", "fd00::1", proto::UDP, 53), "IPv6 CIDR");
    assert!(
        !inbound(&c, "2001:db8::1", "fd00::1", proto::UDP, 53),
        "IPv6 ingress is filtered"
    );
    assert!(inbound(&c, "2001:db8::1", "fd00::1", proto::UDP, 123), "::/0");
    assert!(!inbound(&c, "1.2.3.4", node, proto::UDP, 123), "::/0 is not IPv4");
    assert!(
        inbound(&c, "1.2.3.4", "10.99.0.1", proto::TCP, 22),
        "not the node: not HF's"
    );
}

#[test]
fn egress_is_gated_only_when_armed() {
    let c = compiler("worker");
    assert!(inbound(&c, "10.10.0.1", "10.20.1.1", proto::TCP, 443));
    assert!(!inbound(&c, "10.10.0.1", "10.30.0.1", proto::TCP, 443));
    let mut c = c;
    let d = c.remove_firewall("out");
    assert!(d.narrows() || d.state_flags.is_some());
    assert_eq!(c.tables().state_flags, POL_F_HF_INGRESS);
    assert!(
        inbound(&c, "10.10.0.1", "10.30.0.1", proto::TCP, 443),
        "egress disarmed"
    );
}

#[test]
fn an_unselected_node_is_open() {
    let c = compiler("control-plane");
    assert_eq!(c.tables().state_flags, 0);
    assert!(c.tables().rules.is_empty());
    assert!(inbound(&c, "1.2.3.4", "10.10.0.1", proto::TCP, 22));
}

#[test]
fn removing_a_rule_narrows_only_its_entries() {
    let mut c = compiler("worker");
    let before = c.tables().rules.len();
    let d = c.remove_firewall("ssh");
    assert!(d.narrows());
    assert!(
        !d.rules.remove.is_empty() && d.rules.remove.len() < before,
        "{} of {before}",
        d.rules.remove.len()
    );
    assert!(!inbound(&c, "192.168.1.1", "10.10.0.1", proto::TCP, 22));
    assert!(inbound(&c, "1.2.3.4", "10.10.0.1", proto::TCP, 6443));
}

#[test]
fn refused_constructs_allow_nothing_and_are_reported() {
    let mut c = HfCompiler::new(node("worker"));
    c.set_firewall(&fw(
        "bad",
        &[],
        vec![
            HostFirewallIngressRule {
                from: vec![peer("nope", &[])],
                ports: vec![port("TCP", 22, 0)],
            },
            HostFirewallIngressRule {
                from: vec![],
                ports: vec![port("GRE", 0, 0), port("TCP", 90, 80), port("ICMP", 8, 9)],
            },
        ],
        vec![],
    ));
    let reasons: Vec<Reason> = c.warnings().iter().map(|w| w.reason.clone()).collect();
    assert!(reasons.contains(&Reason::Cidr("nope".into())), "{reasons:?}");
    assert!(reasons.contains(&Reason::Protocol("GRE".into())), "{reasons:?}");
    assert!(reasons.contains(&Reason::EndPort(9)), "{reasons:?}");
    assert!(reasons.contains(&Reason::Port("90-80".into())), "{reasons:?}");
    for (src, pr, port) in [
        ("1.2.3.4", proto::TCP, 22),
        ("1.2.3.4", proto::TCP, 85),
        ("1.2.3.4", proto::UDP, 53),
        ("1.2.3.4", proto::ICMP, 8 << 8),
    ] {
        assert!(!inbound(&c, src, "10.10.0.1", pr, port), "{pr}/{port} widened");
    }
}

// ICMP and ICMPv6 rules by message type (the verdict's port is `type << 8 | code`), and a
// rule without ports admits every protocol, ICMP included.
#[test]
fn icmp_rules_admit_by_message_type_and_a_rule_without_ports_admits_it_all() {
    let mut c = HfCompiler::new(node("worker"));
    c.set_firewall(&fw(
        "ping",
        &["Ingress"],
        vec![
            HostFirewallIngressRule {
                from: vec![peer("192.168.0.0/16", &[]), peer("2001:db8::/32", &[])],
                ports: vec![port("ICMP", 8, 0), port("ICMPv6", 128, 0)],
            },
            HostFirewallIngressRule {
                from: vec![peer("10.77.0.0/16", &[])],
                ports: vec![],
            },
        ],
        vec![],
    ));
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    let (node4, node6) = ("10.10.0.1", "fd00::1");
    assert!(
        inbound(&c, "192.168.1.1", node4, proto::ICMP, 8 << 8),
        "echo request"
    );
    assert!(
        inbound(&c, "192.168.1.1", node4, proto::ICMP, 8 << 8 | 3),
        "any code"
    );
    assert!(
        !inbound(&c, "192.168.1.1", node4, proto::ICMP, 13 << 8),
        "timestamp"
    );
    assert!(
        !inbound(&c, "1.2.3.4", node4, proto::ICMP, 8 << 8),
        "outside the CIDR"
    );
    assert!(
        inbound(&c, "2001:db8::7", node6, proto::ICMPV6, 128 << 8),
        "echo request v6"
    );
    assert!(
        !inbound(&c, "2001:db8::7", node6, proto::ICMPV6, 8 << 8),
        "ICMPv6 type 8 is no rule's"
    );
    assert!(
        !inbound(&c, "192.168.1.1", node4, proto::TCP, 8 << 8),
        "no TCP rule"
    );
    for (pr, port) in [
        (proto::ICMP, 8 << 8),
        (proto::ICMP, 13 << 8),
        (proto::TCP, 22),
        (proto::UDP, 53),
        (proto::SCTP, 9),
    ] {
        assert!(inbound(&c, "10.77.3.4", node4, pr, port), "no ports: {pr}/{port}");
    }
}

#[test]
fn restricted_directions_keep_the_api_server_port_unless_overridden() {
    use cozyplane_apis::v1alpha1::ALLOW_LOCKOUT_ANNOTATION;
    // Both directions closed, no rule at all.
    let closed = || fw("closed", &["Ingress", "Egress"], vec![], vec![]);
    let mut c = HfCompiler::new(node("worker"));
    c.set_firewall(&closed());
    assert_eq!(c.tables().state_flags, POL_F_HF_INGRESS | POL_F_HF_EGRESS);
    for (src, dst) in [("192.0.2.7", "10.10.0.1"), ("2001:db8::7", "fd00::1")] {
        assert!(inbound(&c, src, dst, proto::TCP, 6443), "failsafe in: {src}");
        assert!(!inbound(&c, src, dst, proto::TCP, 22), "closed in: {src}");
        assert!(!inbound(&c, src, dst, proto::UDP, 6443), "TCP only: {src}");
        assert!(inbound(&c, dst, src, proto::TCP, 6443), "failsafe out: {src}");
        assert!(!inbound(&c, dst, src, proto::TCP, 443), "closed out: {src}");
    }
    // The override on any firewall selecting the node turns the failsafe off.
    let mut over = fw("over", &["Ingress"], vec![], vec![]);
    over.metadata.annotations = Some([(ALLOW_LOCKOUT_ANNOTATION.to_string(), "true".to_string())].into());
    let d = c.set_firewall(&over);
    assert!(d.narrows(), "losing the failsafe narrows");
    assert!(!inbound(&c, "192.0.2.7", "10.10.0.1", proto::TCP, 6443));
    assert!(!inbound(&c, "10.10.0.1", "192.0.2.7", proto::TCP, 6443));
    c.remove_firewall("over");
    assert!(inbound(&c, "192.0.2.7", "10.10.0.1", proto::TCP, 6443));
    // An unarmed direction has no failsafe entry: it is open anyway.
    let mut c = HfCompiler::new(node("worker"));
    c.set_firewall(&fw("in", &["Ingress"], vec![], vec![]));
    assert_eq!(c.tables().state_flags, POL_F_HF_INGRESS);
    assert!(inbound(&c, "10.10.0.1", "192.0.2.7", proto::UDP, 53));
}

/// The trace API names the rule a verdict's id stands for: each admitting rule by firewall,
/// direction and index, the failsafe by the empty name, nothing for an unknown id.
#[test]
fn a_verdicts_rule_id_names_its_rule() {
    use cozyplane_policy::Dir;
    use cozyplane_policy::verdict::Check;
    let c = compiler("worker");
    let rid = |src: &str, dst: &str, pr: u8, port: u16| {
        let v = verdict::hf(c.tables(), ip(src), ip(dst), pr, port);
        match (v.ingress, v.egress) {
            (Check::Rule(r), _) | (_, Check::Rule(r)) => r,
            other => panic!("{src} -> {dst}:{port}: no rule admitted it: {other:?}"),
        }
    };
    let node = "10.10.0.1";
    assert_eq!(
        c.rule_of(rid("10.1.1.1", node, proto::TCP, 31000)),
        Some(("ssh".into(), Dir::Ingress, 1))
    );
    assert_eq!(
        c.rule_of(rid("2001:db8::1", "fd00::1", proto::UDP, 123)),
        Some(("ssh".into(), Dir::Ingress, 3))
    );
    assert_eq!(
        c.rule_of(rid(node, "10.20.1.1", proto::TCP, 443)),
        Some(("out".into(), Dir::Egress, 0))
    );
    // 6443 from anywhere: api-guard's rule and the failsafe share the entry; either names a
    // rule that admits it.
    let r = c.rule_of(rid("1.2.3.4", node, proto::TCP, 6443)).unwrap();
    assert!(
        r == ("api-guard".into(), Dir::Ingress, 0) || r == (String::new(), Dir::Ingress, 0),
        "{r:?}"
    );
    assert_eq!(c.rule_of(0xdead_beef), None);
    // A node the firewalls do not select has none of their rules.
    let other = compiler("control-plane");
    assert_eq!(other.rule_of(rid("10.1.1.1", node, proto::TCP, 31000)), None);
}

/// With no rule of its own on the API server's port, a verdict admitting it names the
/// lockout failsafe (the empty name).
#[test]
fn the_failsafe_is_named_by_the_empty_name() {
    use cozyplane_policy::Dir;
    use cozyplane_policy::verdict::Check;
    let mut c = HfCompiler::new(node("worker"));
    c.set_firewall(&fw(
        "ssh-only",
        &[],
        vec![HostFirewallIngressRule {
            from: vec![],
            ports: vec![port("TCP", 22, 0)],
        }],
        vec![],
    ));
    let v = verdict::hf(c.tables(), ip("1.2.3.4"), ip("10.10.0.1"), proto::TCP, 6443);
    let Check::Rule(r) = v.ingress else {
        panic!("the API server's port is not admitted: {v:?}");
    };
    assert_eq!(c.rule_of(r), Some((String::new(), Dir::Ingress, 0)));
}
