//! The world of the upstream conformance suite (network-policy-api v0.1.8,
//! `conformance/base/manifests.yaml`: the "houses") and a harness that replays one
//! conformance test's steps: it applies and patches the same objects and checks each probe
//! against the test's expectation three ways — the verdict over the maps the returned diffs
//! built, over a fresh compile of the same objects, and the oracle's.

#![allow(dead_code, unreachable_pub)]

pub mod manifests;

use std::collections::BTreeMap;
use std::net::IpAddr;

use cozyplane_apis::admin_policy::{AdminNetworkPolicy, BaselineAdminNetworkPolicy, EgressRule, PolicyPort};
use cozyplane_policy::Tables;
use cozyplane_policy::model::Diff;
use cozyplane_policy::np::{NamespaceInfo, NodeInfo, NpCompiler, PodInfo};
use cozyplane_policy::verdict;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::Value;

use crate::common::admin_oracle::{self, AEnd, Cluster, ONode};
use crate::common::labels;
use crate::common::oracle::OPod;

const PREFIX: &str = "network-policy-conformance-";

/// The StatefulSets of `manifests.yaml`: (house, StatefulSet). Two replicas each
/// (`<name>-0`, `<name>-1`), labelled `conformance-house: <house>`, with the named container
/// ports `web` (TCP 80) and `dns` (UDP 53); their servers also listen on TCP 8080, UDP 5353
/// and SCTP 9003 and 9005, which are not named.
const HOUSES: [(&str, &str); 4] = [
    ("gryffindor", "harry-potter"),
    ("slytherin", "draco-malfoy"),
    ("hufflepuff", "cedric-diggory"),
    ("ravenclaw", "luna-lovegood"),
];

/// `centaur` in `forbidden-forrest`: host-network replicas, with the named ports of the
/// template at the suite's default host ports (34345 + N): `web-34345`, `web-34346` (TCP),
/// `dns-34347`, `dns-34349` (UDP).
const CENTAUR_PORTS: [(&str, &str, u16); 4] = [
    ("web-34345", "TCP", 34345),
    ("web-34346", "TCP", 34346),
    ("dns-34347", "UDP", 34347),
    ("dns-34349", "UDP", 34349),
];

/// A kind cluster's nodes (name, InternalIP); `centaur-0` and `centaur-1` run on the two
/// workers, so their pod IPs are these addresses.
const NODES: [(&str, &str); 3] = [
    ("kind-control-plane", "172.18.0.2"),
    ("kind-worker", "172.18.0.3"),
    ("kind-worker2", "172.18.0.4"),
];

fn proto_num(p: &str) -> u8 {
    crate::common::proto_num(&p.to_uppercase())
}

/// One conformance test in progress.
pub struct Houses {
    c: NpCompiler,
    /// The maps as the diffs built them.
    applied: Tables,
    namespaces: Vec<NamespaceInfo>,
    ns_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Pod name → the pod (host-network ones are not here).
    pods: BTreeMap<String, OPod>,
    /// Host-network pod name → its node's index.
    host: BTreeMap<String, usize>,
    pod_infos: Vec<PodInfo>,
    nodes: Vec<ONode>,
    anps: BTreeMap<String, AdminNetworkPolicy>,
    banp: Option<BaselineAdminNetworkPolicy>,
    nps: BTreeMap<(String, String), NetworkPolicy>,
    step: String,
    probes: usize,
    failures: Vec<String>,
}

impl Houses {
    /// `manifests.yaml` applied: the namespaces, the pods, and the nodes they run on.
    pub fn new() -> Self {
        let mut namespaces = Vec::new();
        let mut pods = BTreeMap::new();
        let mut pod_infos = Vec::new();
        let houses = HOUSES.iter().chain(&[("forbidden-forrest", "centaur")]);
        for (h, (house, set)) in houses.enumerate() {
            let ns = format!("{PREFIX}{house}");
            namespaces.push(NamespaceInfo {
                name: ns.clone(),
                labels: labels(&[("conformance-house", house), ("kubernetes.io/metadata.name", &ns)]),
            });
            for i in 0..2u8 {
                let name = format!("{set}-{i}");
                let lbl = labels(&[
                    ("conformance-house", house),
                    ("statefulset.kubernetes.io/pod-name", &name),
                    ("apps.kubernetes.io/pod-index", &i.to_string()),
                ]);
                let centaur = *set == "centaur";
                let ip: IpAddr = if centaur {
                    NODES[1 + usize::from(i)].1.parse().unwrap()
                } else {
                    format!("10.244.{}.{}", h + 1, 10 + i).parse().unwrap()
                };
                let ports: Vec<(String, String, u16)> = if centaur {
                    CENTAUR_PORTS
                        .iter()
                        .map(|(n, p, x)| (n.to_string(), p.to_string(), *x))
                        .collect()
                } else {
                    vec![("web".into(), "TCP".into(), 80), ("dns".into(), "UDP".into(), 53)]
                };
                pod_infos.push(PodInfo {
                    ns: ns.clone(),
                    name: name.clone(),
                    labels: lbl.clone(),
                    ips: vec![ip],
                    host_network: centaur,
                    named_ports: ports
                        .iter()
                        .map(|(n, p, x)| (n.clone(), proto_num(p), *x))
                        .collect(),
                });
                if !centaur {
                    let pod = OPod {
                        ns: ns.clone(),
                        labels: lbl,
                        ip,
                        ports,
                    };
                    pods.insert(name, pod);
                }
            }
        }
        let nodes: Vec<ONode> = NODES
            .iter()
            .map(|(name, ip)| {
                let mut l = labels(&[
                    ("kubernetes.io/os", "linux"),
                    ("kubernetes.io/arch", "amd64"),
                    ("kubernetes.io/hostname", name),
                ]);
                if name.ends_with("control-plane") {
                    l.insert("node-role.kubernetes.io/control-plane".into(), String::new());
                }
                ONode {
                    name: name.to_string(),
                    labels: l,
                    ips: vec![ip.parse().unwrap()],
                }
            })
            .collect();
        let host = [("centaur-0".to_string(), 1), ("centaur-1".to_string(), 2)].into();
        let ns_labels = namespaces
            .iter()
            .map(|n| (n.name.clone(), n.labels.clone()))
            .collect();
        let c = NpCompiler::build(namespaces.clone(), pod_infos.clone(), &[]);
        let applied = c.tables();
        let mut h = Self {
            c,
            applied,
            namespaces,
            ns_labels,
            pods,
            host,
            pod_infos,
            nodes,
            anps: BTreeMap::new(),
            banp: None,
            nps: BTreeMap::new(),
            step: String::new(),
            probes: 0,
            failures: Vec::new(),
        };
        for n in h.node_infos() {
            let d = h.c.set_node(n);
            h.change(&d);
        }
        h
    }

    fn node_infos(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .map(|n| NodeInfo {
                name: n.name.clone(),
                labels: n.labels.clone(),
                ips: n.ips.clone(),
            })
            .collect()
    }

    /// A change's diff applied to the maps, which must then equal the compiler's own.
    fn change(&mut self, d: &Diff) {
        d.apply(&mut self.applied);
        assert!(
            self.applied == self.c.tables(),
            "{}: the diffs do not rebuild the maps",
            self.step
        );
        let warns: Vec<_> = self.c.warnings().chain(self.c.admin_warnings()).collect();
        assert!(
            warns.is_empty(),
            "{}: the compiler refused part of the objects: {warns:?}",
            self.step
        );
    }

    /// `kubectl apply` of one manifest file.
    pub fn apply(&mut self, docs: Vec<Value>) {
        for doc in docs {
            match doc["kind"].as_str() {
                Some("AdminNetworkPolicy") => self.set_anp(serde_json::from_value(doc).unwrap()),
                Some("BaselineAdminNetworkPolicy") => self.set_banp(serde_json::from_value(doc).unwrap()),
                Some("NetworkPolicy") => {
                    let np: NetworkPolicy = serde_json::from_value(doc).unwrap();
                    let d = self.c.set_policy(&np);
                    let key = (
                        np.metadata.namespace.clone().unwrap(),
                        np.metadata.name.clone().unwrap(),
                    );
                    self.nps.insert(key, np);
                    self.change(&d);
                }
                other => panic!("unexpected kind {other:?}"),
            }
        }
    }

    fn set_anp(&mut self, a: AdminNetworkPolicy) {
        let d = self.c.set_anp(&a);
        self.anps.insert(a.metadata.name.clone().unwrap(), a);
        self.change(&d);
    }

    fn set_banp(&mut self, b: BaselineAdminNetworkPolicy) {
        let d = self.c.set_banp(&b);
        self.banp = Some(b);
        self.change(&d);
    }

    /// Get the ANP `name`, change it, patch it back (`client.MergeFrom`).
    pub fn patch_anp(&mut self, name: &str, f: impl FnOnce(&mut AdminNetworkPolicy)) {
        let mut a = self.anps[name].clone();
        f(&mut a);
        self.set_anp(a);
    }

    /// Get the BANP `default`, change it, patch it back.
    pub fn patch_banp(&mut self, f: impl FnOnce(&mut BaselineAdminNetworkPolicy)) {
        let mut b = self.banp.clone().expect("no BANP");
        f(&mut b);
        self.set_banp(b);
    }

    /// Delete a NetworkPolicy.
    pub fn delete_np(&mut self, ns: &str, name: &str) {
        assert!(self.nps.remove(&(ns.to_string(), name.to_string())).is_some());
        let d = self.c.remove_policy(ns, name);
        self.change(&d);
    }

    /// `serverPod.Status.PodIP`.
    pub fn ip(&self, pod: &str) -> IpAddr {
        match (self.pods.get(pod), self.host.get(pod)) {
            (Some(p), _) => p.ip,
            (None, Some(n)) => self.nodes[*n].ips[0],
            _ => panic!("no pod {pod}"),
        }
    }

    /// The `t.Run` the next probes belong to.
    pub fn step(&mut self, name: &str) {
        self.step = name.to_string();
    }

    fn end(&self, pod: &str) -> AEnd<'_> {
        match (self.pods.get(pod), self.host.get(pod)) {
            (Some(p), _) => AEnd::Pod(p),
            (None, Some(n)) => AEnd::Node(&self.nodes[*n], self.nodes[*n].ips[0]),
            _ => panic!("no pod {pod}"),
        }
    }

    fn fresh(&self) -> Tables {
        let mut c = NpCompiler::build(self.namespaces.clone(), self.pod_infos.clone(), self.nps.values());
        for n in self.node_infos() {
            c.set_node(n);
        }
        for a in self.anps.values() {
            c.set_anp(a);
        }
        if let Some(b) = &self.banp {
            c.set_banp(b);
        }
        c.tables()
    }

    /// `PokeServer(client, protocol, serverPod.Status.PodIP, port, shouldConnect)`.
    pub fn poke(&mut self, client: &str, proto: &str, server: &str, port: u16, should: bool) {
        self.probes += 1;
        let (src, dst) = (self.ip(client), self.ip(server));
        let pr = proto_num(proto);
        let got = verdict::np(&self.applied, src, dst, pr, port).allowed();
        let fresh = verdict::np(&self.fresh(), src, dst, pr, port).allowed();
        let cluster = Cluster {
            ns_labels: &self.ns_labels,
            nodes: &self.nodes,
            anps: &self.anps.values().cloned().collect::<Vec<_>>(),
            banp: self.banp.as_ref(),
            nps: &self.nps.values().cloned().collect::<Vec<_>>(),
        };
        let upper = proto.to_uppercase();
        let oracle = admin_oracle::allowed(&cluster, &self.end(client), &self.end(server), &upper, port);
        if (got, fresh, oracle) != (should, should, should) {
            self.failures.push(format!(
                "{}: {client} -> {server} {proto}/{port}: upstream expects {should}; compiled {got}, \
                 fresh compile {fresh}, oracle {oracle}",
                self.step
            ));
        }
    }

    /// Every probe matched; `probes` is the number of `PokeServer` calls of the upstream test.
    pub fn finish(self, probes: usize) {
        assert!(
            self.failures.is_empty(),
            "{} of {} probes differ:\n{}",
            self.failures.len(),
            self.probes,
            self.failures.join("\n")
        );
        assert_eq!(self.probes, probes, "probes replayed");
    }
}

/// `AdminNetworkPolicyPort{NamedPort: &name}`.
pub fn named(name: &str) -> PolicyPort {
    PolicyPort {
        named_port: Some(name.into()),
        ..PolicyPort::default()
    }
}

/// The rule the inline-CIDR tests prepend: allow egress to two pods' addresses, `/32`.
pub fn pod_ips_rule(h: &Houses, a: &str, b: &str) -> EgressRule {
    serde_json::from_value(serde_json::json!({
        "name": "allow-egress-to-specific-podIPs",
        "action": "Allow",
        "to": [{"networks": [format!("{}/32", h.ip(a)), format!("{}/32", h.ip(b))]}],
    }))
    .unwrap()
}
