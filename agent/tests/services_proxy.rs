//! The load balancer's one writer (`core/lb`) and the Service proxy's state
//! (`features/kubeproxy/state.rs`) on real pinned maps (a private bpffs, the agent's own
//! loader): two owners share the maps and each prunes only its own frontends, also after a
//! restart that adopts the pins; backends are removed once no table names them; watch events
//! of Services, EndpointSlices and this node's pods (hostPorts) become exactly the frontends
//! and backends they describe, incrementally, and nothing is written before every watch listed. Needs root; fails
//! (never skips) without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::time::Instant;

use cozyplane_agent::core::datapath::loader::Datapath;
use cozyplane_agent::core::lb::{Frontend, Lb, Owner, Want};
use cozyplane_agent::features::kubeproxy::metrics::ServiceMetrics;
use cozyplane_agent::features::kubeproxy::model::{Me, NodeAddrs};
use cozyplane_agent::features::kubeproxy::state::{Change, Proxy};
use cozyplane_bpf::DatapathConfig;
use cozyplane_bpf::abi::{LB_BIG_SLOTS, LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::lb_backends::LbBackendsMap;
use cozyplane_bpf::maps::lb_mag_big::LbMagBigMap;
use cozyplane_bpf::maps::lb_maglev::LbMaglevMap;
use cozyplane_bpf::maps::lb_svc::LbSvcMap;
use cozyplane_lab::require_root;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;
use serde_json::json;

fn front(vip: &str, port: u16) -> Frontend {
    Frontend {
        net: 0,
        vip: vip.parse().unwrap(),
        proto: 6,
        port,
    }
}

fn want(backends: &[(&str, u16)]) -> Want {
    Want {
        backends: backends
            .iter()
            .map(|(a, p)| (0, a.parse().unwrap(), *p))
            .collect(),
        affinity: 0,
    }
}

/// What the maps hold: frontend → (flags: the owner byte and `F_*`, its table's distinct
/// backends), the table read from the map the flags name.
fn programmed(pins: &Path) -> BTreeMap<Frontend, (u32, BTreeSet<(IpAddr, u16)>)> {
    let svc = LbSvcMap::from_pin(pins).unwrap();
    let tables = LbMaglevMap::from_pin(pins).unwrap();
    let big = LbMagBigMap::from_pin(pins).unwrap();
    let bes = LbBackendsMap::from_pin(pins).unwrap();
    let mut out = BTreeMap::new();
    for f in svc.frontends().unwrap() {
        let v = svc.get(f).unwrap().unwrap();
        let t = if v.flags & LbSvc::F_BIG != 0 {
            big.get(v.id).unwrap()
        } else {
            tables.get(v.id).unwrap()
        };
        let t = t.expect("every frontend has its table");
        let set: BTreeSet<(IpAddr, u16)> = t
            .iter()
            .filter(|id| **id != 0)
            .map(|id| {
                let b = bes
                    .get(*id)
                    .unwrap()
                    .expect("a table names only written backends");
                (b.1, b.2)
            })
            .collect();
        assert_eq!(set.len() as u32, v.count, "{f:?}: count is the table's backends");
        out.insert(f, (v.flags, set));
    }
    out
}

fn backend_count(pins: &Path) -> usize {
    LbBackendsMap::from_pin(pins).unwrap().ids().unwrap().len()
}

#[test]
fn owners_share_the_maps_and_prune_only_their_own_also_after_a_restart() {
    require_root();
    let fs = common::Bpffs::new("cplbwriter");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).unwrap();
    let pins = dp.pin_dir().to_path_buf();

    let lb = Lb::new(&pins);
    let vips = BTreeMap::from([(
        Frontend {
            net: 100,
            ..front("10.0.0.250", 80)
        },
        want(&[("10.0.0.7", 8080)]),
    )]);
    lb.sync(Owner::ServiceVip, &vips, true);
    let kube = BTreeMap::from([
        (
            front("10.96.0.10", 80),
            want(&[("10.244.1.2", 8080), ("10.244.2.2", 8080)]),
        ),
        (front("10.96.0.11", 53), want(&[("10.244.1.3", 53)])),
    ]);
    let done = lb.sync(Owner::KubeService, &kube, true);
    assert_eq!((done.written, done.held), (2, 2));
    let p = programmed(&pins);
    assert_eq!(p.len(), 3);
    assert_eq!(
        p[&front("10.96.0.10", 80)].0,
        1,
        "owner byte of a Kubernetes Service"
    );
    assert_eq!(backend_count(&pins), 4);

    // A restarted agent: the Kubernetes Services list first, without one of them; the
    // ServiceVIPs' frontend is not theirs to prune.
    drop(lb);
    let lb = Lb::new(&pins);
    assert_eq!((lb.held(Owner::ServiceVip), lb.held(Owner::KubeService)), (1, 2));
    let kube2 = BTreeMap::from([(
        front("10.96.0.10", 80),
        want(&[("10.244.1.2", 8080), ("10.244.2.2", 8080)]),
    )]);
    let done = lb.sync(Owner::KubeService, &kube2, true);
    assert_eq!((done.written, done.removed), (0, 1), "unchanged is not rewritten");
    let p = programmed(&pins);
    assert_eq!(
        p.keys().map(|f| (f.net, f.vip.to_string())).collect::<Vec<_>>(),
        [(0, "10.96.0.10".to_string()), (100, "10.0.0.250".to_string())]
    );
    assert_eq!(backend_count(&pins), 3, "10.244.1.3 went with its only frontend");

    // Incremental: one backend replaced, one frontend added, one removed.
    let done = lb.update(
        Owner::KubeService,
        &[
            (
                front("10.96.0.10", 80),
                Some(want(&[("10.244.2.2", 8080), ("10.244.3.2", 8080)])),
            ),
            (front("10.96.0.12", 443), Some(want(&[]))),
            (front("10.96.0.99", 1), None),
        ],
    );
    assert_eq!((done.written, done.removed), (2, 0));
    let p = programmed(&pins);
    assert_eq!(
        p[&front("10.96.0.10", 80)].1,
        BTreeSet::from([
            ("10.244.2.2".parse().unwrap(), 8080),
            ("10.244.3.2".parse().unwrap(), 8080)
        ])
    );
    assert!(p[&front("10.96.0.12", 443)].1.is_empty(), "no endpoints: count 0");
    assert_eq!(backend_count(&pins), 3, "10.244.1.2 gone, 10.244.3.2 added");
    // Another owner cannot take or remove a frontend it does not hold.
    let done = lb.update(Owner::ServiceVip, &[(front("10.96.0.10", 80), None)]);
    assert_eq!(done.removed, 0);
    assert!(programmed(&pins).contains_key(&front("10.96.0.10", 80)));
}

/// `n` backends 10.244.0.1:8080 and on.
fn many(n: u8) -> Want {
    Want {
        backends: (1..=n)
            .map(|i| (0, IpAddr::from([10, 244, 0, i]), 8080))
            .collect(),
        affinity: 0,
    }
}

/// The frontend's id, and which maps hold a table under it: (small, big).
fn tables_of(pins: &Path, f: Frontend) -> (u32, bool, bool) {
    let v = LbSvcMap::from_pin(pins).unwrap().get(f).unwrap().unwrap();
    let small = LbMaglevMap::from_pin(pins).unwrap().get(v.id).unwrap();
    let big = LbMagBigMap::from_pin(pins).unwrap().get(v.id).unwrap();
    if let Some(t) = &small {
        assert_eq!(t.len(), LB_SLOTS);
    }
    if let Some(t) = &big {
        assert_eq!(t.len(), LB_BIG_SLOTS);
    }
    (v.id, small.is_some(), big.is_some())
}

// A frontend gets a big table from 64 backends on and keeps it down to 32; each move writes
// the new table, flags the frontend, then removes the old one, so one map holds its table at
// rest. A restart adopts a big table (nothing rewritten) and removes tables no frontend names;
// a removed frontend leaves no table in either map.
#[test]
fn many_backends_get_a_big_table_and_keep_it_until_half_are_gone() {
    require_root();
    let fs = common::Bpffs::new("cplbbig");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).unwrap();
    let pins = dp.pin_dir().to_path_buf();
    let f = front("10.96.0.20", 80);
    let small_one = front("10.96.0.21", 80);

    let lb = Lb::new(&pins);
    let set = |lb: &Lb, n: u8| {
        lb.update(Owner::KubeService, &[(f, Some(many(n)))]);
        let p = programmed(&pins);
        assert_eq!(p[&f].1.len(), usize::from(n), "{n} backends in the table");
        p[&f].0
    };
    assert_eq!(set(&lb, 63), 1, "63 backends: a small table");
    let (id, small, big) = tables_of(&pins, f);
    assert_eq!((small, big), (true, false));
    assert_eq!(set(&lb, 64), 1 | LbSvc::F_BIG, "64: big");
    assert_eq!(
        tables_of(&pins, f),
        (id, false, true),
        "same id; the small table removed"
    );
    assert_eq!(set(&lb, 32), 1 | LbSvc::F_BIG, "32: still big");
    assert_eq!(set(&lb, 31), 1, "31: small again");
    assert_eq!(tables_of(&pins, f), (id, true, false));
    assert_eq!(set(&lb, 100), 1 | LbSvc::F_BIG, "issue 26's 100");
    assert_eq!(set(&lb, 99), 1 | LbSvc::F_BIG, "one removed: the same table size");
    assert_eq!(tables_of(&pins, f), (id, false, true));

    // Leftovers an agent stopped between writes would leave: a copy of the frontend's table
    // in the map it does not name, and a big table of no frontend.
    LbMaglevMap::from_pin(&pins)
        .unwrap()
        .set(id, &[0; LB_SLOTS])
        .unwrap();
    LbMagBigMap::from_pin(&pins)
        .unwrap()
        .set(id + 1000, &vec![0; LB_BIG_SLOTS])
        .unwrap();
    drop(lb);
    let lb = Lb::new(&pins);
    let done = lb.sync(
        Owner::KubeService,
        &BTreeMap::from([(f, many(99)), (small_one, many(2))]),
        true,
    );
    assert_eq!(done.written, 1, "the big frontend adopted as it was");
    assert_eq!(tables_of(&pins, f), (id, false, true), "the stray copy removed");
    assert_eq!(
        LbMagBigMap::from_pin(&pins).unwrap().ids().unwrap(),
        vec![id],
        "the table of no frontend removed"
    );
    assert_eq!(backend_count(&pins), 99);

    let done = lb.sync(Owner::KubeService, &BTreeMap::from([(small_one, many(2))]), true);
    assert_eq!(done.removed, 1);
    assert!(LbMagBigMap::from_pin(&pins).unwrap().ids().unwrap().is_empty());
    assert_eq!(LbMaglevMap::from_pin(&pins).unwrap().ids().unwrap().len(), 1);
    assert_eq!(backend_count(&pins), 2);
}

fn service(name: &str, ip: &str, port: i32) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"clusterIP": ip, "clusterIPs": [ip],
                 "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}}))
    .unwrap()
}

fn slice(name: &str, svc: &str, eps: &[&str]) -> EndpointSlice {
    let endpoints: Vec<_> = eps
        .iter()
        .map(|a| json!({"addresses": [a], "nodeName": "n1", "conditions": {"ready": true}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "ns", "name": name,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints}))
    .unwrap()
}

fn backends_of(pins: &Path, vip: &str, port: u16) -> Vec<String> {
    programmed(pins)
        .get(&front(vip, port))
        .map(|(_, s)| s.iter().map(|(a, p)| format!("{a}:{p}")).collect())
        .unwrap_or_default()
}

#[test]
fn watch_events_become_the_frontends_they_describe() {
    require_root();
    let fs = common::Bpffs::new("cpsvcproxy");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).unwrap();
    let pins = dp.pin_dir().to_path_buf();
    let lb = Lb::new(&pins);
    let m = ServiceMetrics::default();
    let mut st = Proxy::new(Me {
        node: "n1".into(),
        zone: None,
    });
    let commit = |st: &mut Proxy, c: Change| st.commit(c, &lb, &m, Instant::now());

    // The lists: nothing is written until all three completed.
    for e in [Event::Init, Event::InitDone] {
        let c = st.pod_event(e);
        commit(&mut st, c);
    }
    for e in [Event::Init, Event::InitApply(service("web", "10.96.0.10", 80))] {
        let c = st.service_event(e);
        commit(&mut st, c);
    }
    let c = st.service_event(Event::InitDone);
    commit(&mut st, c);
    assert!(programmed(&pins).is_empty(), "the slices have not listed");
    for e in [
        Event::Init,
        Event::InitApply(slice("web-a", "web", &["10.244.1.2"])),
        Event::InitApply(slice("web-b", "web", &["10.244.2.2"])),
        Event::InitDone,
    ] {
        let c = st.slice_event(e);
        commit(&mut st, c);
    }
    assert_eq!(
        backends_of(&pins, "10.96.0.10", 80),
        ["10.244.1.2:8080", "10.244.2.2:8080"],
        "two slices of one Service"
    );

    // A slice changes, another goes, a Service comes and goes.
    let c = st.slice_event(Event::Apply(slice("web-a", "web", &["10.244.1.2", "10.244.1.9"])));
    assert_eq!(c, Change::Services(vec![("ns".into(), "web".into())]));
    commit(&mut st, c);
    let c = st.slice_event(Event::Delete(slice("web-b", "web", &[])));
    commit(&mut st, c);
    assert_eq!(
        backends_of(&pins, "10.96.0.10", 80),
        ["10.244.1.2:8080", "10.244.1.9:8080"]
    );
    let c = st.service_event(Event::Apply(service("api", "10.96.0.20", 443)));
    commit(&mut st, c);
    assert!(programmed(&pins).contains_key(&front("10.96.0.20", 443)));
    assert!(
        backends_of(&pins, "10.96.0.20", 443).is_empty(),
        "no slice: no backend"
    );
    let c = st.service_event(Event::Delete(service("web", "10.96.0.10", 80)));
    commit(&mut st, c);
    assert!(!programmed(&pins).contains_key(&front("10.96.0.10", 80)));
    assert_eq!(backend_count(&pins), 0, "no table names a backend");
    // A slice moved to another Service (its label changed) leaves the first.
    let c = st.service_event(Event::Apply(service("web", "10.96.0.10", 80)));
    commit(&mut st, c);
    let c = st.slice_event(Event::Apply(slice("web-a", "api", &["10.244.1.2"])));
    commit(&mut st, c);
    assert!(backends_of(&pins, "10.96.0.10", 80).is_empty());
    assert_eq!(backends_of(&pins, "10.96.0.20", 443), ["10.244.1.2:8080"]);

    // A pod of this node with a hostPort: this node's address at that port, from here (net 0)
    // and from outside (the external net); gone with the pod.
    let c = st.set_nodes(NodeAddrs {
        all: vec!["192.168.10.1".parse().unwrap()],
        mine: vec!["192.168.10.1".parse().unwrap()],
        primary: vec!["192.168.10.1".parse().unwrap()],
    });
    commit(&mut st, c);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"namespace": "ns", "name": "hp"},
        "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 8080, "hostPort": 8081}]}]},
        "status": {"podIPs": [{"ip": "10.244.1.7"}]}}))
    .unwrap();
    let c = st.pod_event(Event::Apply(pod.clone()));
    commit(&mut st, c);
    assert_eq!(backends_of(&pins, "192.168.10.1", 8081), ["10.244.1.7:8080"]);
    let outside = Frontend {
        net: cozyplane_agent::features::kubeproxy::model::EXTERNAL_NET,
        ..front("192.168.10.1", 8081)
    };
    assert!(
        programmed(&pins).contains_key(&outside),
        "reached from outside too"
    );
    let c = st.pod_event(Event::Delete(pod));
    commit(&mut st, c);
    assert!(!programmed(&pins).contains_key(&front("192.168.10.1", 8081)));
    assert!(!programmed(&pins).contains_key(&outside));
}
