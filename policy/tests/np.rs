//! NetworkPolicy constructs the compiler refuses are reported and allow nothing; hostNetwork
//! pods are never subjects; a verdict names the rule that admitted it.

mod common;

use common::{World, pod_info};
use cozyplane_policy::np::NpCompiler;
use cozyplane_policy::verdict::{self, Check};
use cozyplane_policy::{Reason, model::proto};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn np(ns: &str, name: &str, spec: NetworkPolicySpec) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(spec),
    }
}

fn port(p: &str, n: Option<IntOrString>, end: Option<i32>) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(p.into()),
        port: n,
        end_port: end,
    }
}

#[test]
fn refused_constructs_are_reported_and_closed() {
    let w = World::new();
    let pol = np(
        "x",
        "bad",
        NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: None,
                ports: Some(vec![
                    port("ICMP", None, None),
                    port("TCP", Some(IntOrString::Int(90)), Some(80)),
                    port("TCP", Some(IntOrString::String("web".into())), Some(90)),
                ]),
            }]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![
                    NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: "10.0.0.0/8".into(),
                            except: None,
                        }),
                        ..Default::default()
                    },
                    NetworkPolicyPeer {
                        pod_selector: Some(LabelSelector {
                            match_labels: None,
                            match_expressions: Some(vec![LabelSelectorRequirement {
                                key: "pod".into(),
                                operator: "Near".into(),
                                values: None,
                            }]),
                        }),
                        ..Default::default()
                    },
                ]),
                ports: Some(vec![port("TCP", Some(IntOrString::String("web".into())), None)]),
            }]),
        },
    );
    let c = NpCompiler::build(w.namespaces(), w.pod_infos(), [&pol]);
    let reasons: Vec<Reason> = c.warnings().map(|w| w.reason.clone()).collect();
    for r in [
        Reason::Protocol("ICMP".into()),
        Reason::Port("90-80".into()),
        Reason::EndPort(90),
        Reason::NamedPortToBlock("web".into()),
    ] {
        assert!(reasons.contains(&r), "{r:?} not in {reasons:?}");
    }
    assert!(
        reasons.iter().any(|r| matches!(r, Reason::Selector(_))),
        "{reasons:?}"
    );
    let t = c.tables();
    let (xa, ya) = (w.pods[0].ip, w.pods[3].ip);
    for (pr, p) in [
        (proto::TCP, 80),
        (proto::TCP, 85),
        (proto::UDP, 53),
        (proto::TCP, 8080),
    ] {
        assert!(
            !verdict::np(&t, ya, xa, pr, p).allowed(),
            "ingress {pr}/{p} widened"
        );
        assert!(
            !verdict::np(&t, xa, ya, pr, p).allowed(),
            "egress {pr}/{p} widened"
        );
    }
}

#[test]
fn host_network_pods_are_not_subjects_and_rules_are_named() {
    let w = World::new();
    let deny_all = np(
        "x",
        "deny",
        NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: "192.168.0.0/16".into(),
                        except: None,
                    }),
                    ..Default::default()
                }]),
                ports: None,
            }]),
            egress: None,
        },
    );
    let mut pods = w.pod_infos();
    let mut host = pod_info(&w.pods[1]);
    host.name = "hostnet".into();
    host.host_network = true;
    host.ips = vec!["10.10.0.1".parse().unwrap()];
    pods.push(host);
    let c = NpCompiler::build(w.namespaces(), pods, [&deny_all]);
    let t = c.tables();
    let node = "10.10.0.1".parse().unwrap();
    assert_eq!(c.identity_of(node), None);
    assert!(
        verdict::np(&t, w.pods[3].ip, node, proto::TCP, 80).allowed(),
        "hostNetwork is no subject"
    );
    assert!(!verdict::np(&t, w.pods[3].ip, w.pods[0].ip, proto::TCP, 80).allowed());
    let v = verdict::np(&t, "192.168.3.3".parse().unwrap(), w.pods[0].ip, proto::TCP, 80);
    let Check::Rule(id) = v.ingress else {
        panic!("{v:?}");
    };
    assert_eq!(
        c.rule_name(id).as_deref(),
        Some("NetworkPolicy x/deny spec.ingress[0]")
    );
}
