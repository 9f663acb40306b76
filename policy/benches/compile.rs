//! Compile time of the NetworkPolicy compiler at 5,000 pods × 200 policies: a full
//! compile, and one pod's label change (to a label set that exists, and to a new one).
//! `cargo bench -p cozyplane-policy --bench compile`; figures in docs/benchmarks.md.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use cozyplane_policy::np::{NamespaceInfo, NpCompiler, PodInfo};
use criterion::{BatchSize, Criterion, criterion_main};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const NAMESPACES: usize = 50;
const PODS: usize = 5_000;
const POLICIES: usize = 200;
const APPS: usize = 20;

fn labels(kv: &[(&str, String)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn world() -> (Vec<NamespaceInfo>, Vec<PodInfo>, Vec<NetworkPolicy>) {
    let nss = (0..NAMESPACES)
        .map(|n| NamespaceInfo {
            name: format!("ns{n}"),
            labels: labels(&[
                ("team", format!("t{}", n % 5)),
                ("kubernetes.io/metadata.name", format!("ns{n}")),
            ]),
        })
        .collect();
    let pods = (0..PODS)
        .map(|i| {
            let ns = i % NAMESPACES;
            let app = (i / NAMESPACES) % APPS;
            PodInfo {
                ns: format!("ns{ns}"),
                name: format!("pod{i}"),
                labels: labels(&[
                    ("app", format!("app{app}")),
                    ("tier", format!("tier{}", app % 3)),
                    ("pod-template-hash", format!("{i:x}")),
                ]),
                ips: vec![
                    format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256)
                        .parse()
                        .unwrap(),
                ],
                host_network: false,
                named_ports: vec![("http".into(), 6, 8080)],
            }
        })
        .collect();
    let sel = |k: &str, v: String| LabelSelector {
        match_labels: Some(labels(&[(k, v)])),
        match_expressions: None,
    };
    let pols = (0..POLICIES)
        .map(|p| {
            let ns = p % NAMESPACES;
            let port = |n: i32, end: Option<i32>| NetworkPolicyPort {
                protocol: Some("TCP".into()),
                port: Some(IntOrString::Int(n)),
                end_port: end,
            };
            NetworkPolicy {
                metadata: ObjectMeta {
                    namespace: Some(format!("ns{ns}")),
                    name: Some(format!("pol{p}")),
                    ..Default::default()
                },
                spec: Some(NetworkPolicySpec {
                    pod_selector: Some(sel("app", format!("app{}", p % APPS))),
                    policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
                    ingress: Some(vec![NetworkPolicyIngressRule {
                        from: Some(vec![
                            NetworkPolicyPeer {
                                pod_selector: Some(sel("tier", format!("tier{}", p % 3))),
                                namespace_selector: Some(sel("team", format!("t{}", p % 5))),
                                ..Default::default()
                            },
                            NetworkPolicyPeer {
                                ip_block: Some(IPBlock {
                                    cidr: format!("192.168.{}.0/24", p % 256),
                                    except: Some(vec![format!("192.168.{}.128/25", p % 256)]),
                                }),
                                ..Default::default()
                            },
                        ]),
                        ports: Some(vec![
                            port(80, None),
                            port(8000, Some(8999)),
                            NetworkPolicyPort {
                                protocol: Some("TCP".into()),
                                port: Some(IntOrString::String("http".into())),
                                end_port: None,
                            },
                        ]),
                    }]),
                    egress: Some(vec![NetworkPolicyEgressRule {
                        to: Some(vec![NetworkPolicyPeer {
                            pod_selector: Some(sel("app", format!("app{}", (p + 1) % APPS))),
                            ..Default::default()
                        }]),
                        ports: Some(vec![port(5432, None)]),
                    }]),
                }),
            }
        })
        .collect();
    (nss, pods, pols)
}

fn bench(c: &mut Criterion) {
    let (nss, pods, pols) = world();
    let mut g = c.benchmark_group("np_compile_5000_pods_200_policies");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("full", |b| {
        b.iter(|| black_box(NpCompiler::build(nss.clone(), pods.clone(), &pols)));
    });
    let base = NpCompiler::build(nss.clone(), pods.clone(), &pols);
    eprintln!(
        "identities {}, rule entries {}",
        base.identity_count(),
        base.tables().rules.len()
    );
    // A replica moves to another existing label set: O(1), only its address entry.
    let mut existing = pods[0].clone();
    existing.labels.insert("app".into(), "app3".into());
    g.bench_function("one_label_change_existing_set", |b| {
        b.iter_batched_ref(
            || base.clone(),
            |c| black_box(c.set_pod(existing.clone())),
            BatchSize::LargeInput,
        );
    });
    // A pod gets a label set nobody has: a new identity, as subject and as peer.
    let mut fresh = pods[0].clone();
    fresh.labels.insert("canary".into(), "true".into());
    g.bench_function("one_label_change_new_set", |b| {
        b.iter_batched_ref(
            || base.clone(),
            |c| black_box(c.set_pod(fresh.clone())),
            BatchSize::LargeInput,
        );
    });
    let mut one = base.clone();
    let d1 = one.set_pod(existing.clone()).len();
    let mut two = base.clone();
    let d2 = two.set_pod(fresh.clone()).len();
    eprintln!("diff entries: existing set {d1}, new set {d2}");
    g.finish();
}

// criterion's macro defines an undocumented pub fn.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}

criterion_main!(group::benches);
