//! What the watches' events become: the admin kinds when their CRDs are missing (404 is
//! listed-empty, and a later list is picked up), one Node watch feeding this node's
//! HostFirewall view and every node's `nodes` peers, the kube-apiserver's EndpointSlices
//! (listed before the first build, empty or not; their ready addresses), and the first build
//! from the listings.

use cozyplane_policy::model::Layer;
use kube::core::Status;
use serde_json::json;

use super::*;
use crate::features::policy::feed::Feed;

fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(
        Status::failure("the server could not find the requested resource", "NotFound")
            .with_code(code)
            .boxed(),
    )
}

fn anp(name: &str, priority: i32) -> AdminNetworkPolicy {
    serde_json::from_value(json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
        "metadata": {"name": name, "resourceVersion": "3", "uid": "u"},
        "spec": {"priority": priority, "subject": {"namespaces": {}},
                 "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]},
        "status": {"conditions": []},
    }))
    .unwrap()
}

fn node(name: &str, role: &str, ip: &str) -> lite::LiteNode {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"role": role}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
    }))
    .unwrap()
}

/// An EndpointSlice of the kube-apiserver (or of `service`): `(address, ready)`, where
/// `None` is no condition.
fn slice(name: &str, service: &str, family: &str, eps: &[(&str, Option<bool>)]) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = eps
        .iter()
        .map(|(a, ready)| match ready {
            Some(r) => json!({"addresses": [a], "conditions": {"ready": r}}),
            None => json!({"addresses": [a]}),
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "1",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": family,
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }))
    .unwrap()
}

fn ips(v: &[&str]) -> Vec<IpAddr> {
    v.iter().map(|a| a.parse().unwrap()).collect()
}

/// Every listing but the admin kinds has listed (empty).
fn listed_but_admin() -> Listings {
    let mut l = Listings::default();
    l.apiserver.synced = true;
    l.policies.synced = true;
    l.pods.synced = true;
    l.namespaces.synced = true;
    l.node.synced = true;
    l.nodes.synced = true;
    l.vpcs.synced = true;
    l.groups.synced = true;
    l.ports.synced = true;
    l.firewalls.synced = true;
    l
}

#[test]
fn a_404_is_no_crd_and_only_a_404_is() {
    for e in [
        watcher::Error::InitialListFailed(api_error(404)),
        watcher::Error::WatchStartFailed(api_error(404)),
        watcher::Error::WatchFailed(api_error(404)),
        watcher::Error::WatchError(Status::failure("gone", "NotFound").with_code(404).boxed()),
    ] {
        assert!(not_served(&e), "{e:?}");
    }
    for e in [
        watcher::Error::InitialListFailed(api_error(403)),
        watcher::Error::InitialListFailed(api_error(500)),
        watcher::Error::WatchError(Status::failure("expired", "Expired").with_code(410).boxed()),
        watcher::Error::NoResourceVersion,
    ] {
        assert!(!not_served(&e), "{e:?}");
    }
}

#[test]
fn missing_admin_crds_do_not_hold_the_policy_layers_back_and_installing_them_is_picked_up() {
    let mut l = listed_but_admin();
    assert!(!l.synced(), "the admin kinds have not answered yet");
    fn nf<K>() -> Result<Event<K>, watcher::Error> {
        Err(watcher::Error::InitialListFailed(api_error(404)))
    }
    let c = changes(&mut l, Ev::Anp(Box::new(nf())), "n1", &[]).unwrap();
    assert!(c.is_empty());
    assert!(!l.synced(), "the BANP has not answered yet");
    changes(&mut l, Ev::Banp(Box::new(nf())), "n1", &[]).unwrap();
    assert!(l.synced(), "both kinds unserved: listed and empty");
    assert!(l.anps.absent && l.banps.absent);
    // Asked again while still missing: nothing new (and no second log line).
    let (gone, news) = l.anps.absent();
    assert!(gone.is_empty() && !news);

    // Another error is not "absent": it stays an error for the caller.
    let forbidden = Err(watcher::Error::InitialListFailed(api_error(403)));
    assert!(changes(&mut l, Ev::Anp(Box::new(forbidden)), "n1", &[]).is_err());

    // The CRDs are installed: the next list is picked up.
    let mut got = Vec::new();
    for ev in [Event::Init, Event::InitApply(anp("floor", 5)), Event::InitDone] {
        got.extend(changes(&mut l, Ev::Anp(Box::new(Ok(ev))), "n1", &[]).unwrap());
    }
    assert!(
        matches!(&got[..], [Change::Anp(Step::Set((_, n), p))] if n == "floor" && p.status.is_none() && p.metadata.resource_version.is_none()),
        "{got:?}"
    );
    assert!(!l.anps.absent);
    // A status update of another implementation changes nothing the compiler reads.
    let mut again = anp("floor", 5);
    again.metadata.resource_version = Some("4".into());
    again.status = None;
    assert!(
        changes(&mut l, Ev::Anp(Box::new(Ok(Event::Apply(again)))), "n1", &[])
            .unwrap()
            .is_empty()
    );

    // The CRD is deleted (its objects with it): the next list's 404 removes what was live.
    let c = changes(&mut l, Ev::Anp(Box::new(nf())), "n1", &[]).unwrap();
    assert!(
        matches!(&c[..], [Change::Anp(Step::Gone((_, n)))] if n == "floor"),
        "{c:?}"
    );
    assert!(l.synced());
}

#[test]
fn one_node_watch_feeds_the_host_firewall_and_nodes_peers() {
    let mut l = Listings::default();
    let own = ["198.51.100.7".parse().unwrap()];
    let mut got = Vec::new();
    for ev in [
        Event::Init,
        Event::InitApply(node("n1", "edge", "192.0.2.1")),
        Event::InitApply(node("n2", "edge", "192.0.2.2")),
        Event::InitDone,
    ] {
        got.extend(changes(&mut l, Ev::Node(Box::new(Ok(ev))), "n1", &own).unwrap());
    }
    assert!(l.node.synced && l.nodes.synced);
    let hf: Vec<_> = got
        .iter()
        .filter_map(|c| match c {
            Change::Node(Step::Set(_, n)) => Some(n.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(hf.len(), 1, "only this node is the HostFirewall's: {got:?}");
    assert_eq!(hf[0].name, "n1");
    assert_eq!(
        hf[0].addresses,
        vec!["192.0.2.1".parse::<IpAddr>().unwrap(), own[0]],
        "its addresses and the agent's own"
    );
    let peers = got
        .iter()
        .filter(|c| matches!(c, Change::ClusterNode(Step::Set(..))))
        .count();
    assert_eq!(peers, 2, "every node is a `nodes` peer candidate");

    // Another node relabelled: a peer change only; this node gone: both views.
    let c = changes(
        &mut l,
        Ev::Node(Box::new(Ok(Event::Apply(node("n2", "core", "192.0.2.2"))))),
        "n1",
        &own,
    )
    .unwrap();
    assert!(
        matches!(&c[..], [Change::ClusterNode(Step::Set(_, n))] if n.labels["role"] == "core"),
        "{c:?}"
    );
    let c = changes(
        &mut l,
        Ev::Node(Box::new(Ok(Event::Delete(node("n1", "edge", "192.0.2.1"))))),
        "n1",
        &own,
    )
    .unwrap();
    assert!(
        matches!(
            &c[..],
            [Change::Node(Step::Gone(_)), Change::ClusterNode(Step::Gone(_))]
        ),
        "{c:?}"
    );
}

#[test]
fn the_first_build_compiles_admin_policies_and_nodes_as_the_compiler_does() {
    let mut l = listed_but_admin();
    let (_, _) = l.banps.absent();
    for ev in [Event::Init, Event::InitApply(anp("floor", 5)), Event::InitDone] {
        changes(&mut l, Ev::Anp(Box::new(Ok(ev))), "n1", &[]).unwrap();
    }
    for ev in [
        Event::Init,
        Event::InitApply(node("n1", "edge", "192.0.2.1")),
        Event::InitDone,
    ] {
        changes(&mut l, Ev::Node(Box::new(Ok(ev))), "n1", &[]).unwrap();
    }
    let pod: lite::LitePod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "a", "labels": {"app": "web"}},
        "status": {"podIP": "10.0.0.1"},
    }))
    .unwrap();
    for ev in [Event::Init, Event::InitApply(pod.clone()), Event::InitDone] {
        changes(&mut l, Ev::Pod(Ok(ev)), "n1", &[]).unwrap();
    }
    assert!(l.synced());
    let bare = cozyplane_policy::hf::NodeInfo {
        name: "n1".into(),
        ..Default::default()
    };
    let feed = Feed::build(&l, bare.clone());
    let t = feed.tables();
    assert!(t.rules.keys().any(|k| k.layer == Layer::Anp), "{t:#?}");

    let mut np = cozyplane_policy::np::NpCompiler::new();
    np.set_pod(pod.info());
    np.set_node(cozyplane_policy::np::NodeInfo::from_k8s(
        &node("n1", "edge", "192.0.2.1").node(),
    ));
    np.set_anp(&anp("floor", 5));
    assert_eq!(feed.np.tables(), np.tables());

    // And incrementally: the ANP removed is one diff that takes its entries out.
    let mut feed = feed;
    let (layer, d) = feed.step(Change::Anp(Step::Gone((String::new(), "floor".into()))));
    assert_eq!(layer, "anp");
    assert!(d.rules.remove.iter().any(|k| k.layer == Layer::Anp), "{d:#?}");
    assert!(!feed.tables().rules.keys().any(|k| k.layer == Layer::Anp));
}

#[test]
fn the_lookout_asks_again_within_ten_seconds() {
    let waits: Vec<u64> = Lookout::default().take(7).map(|d| d.as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 10, 10, 10]);
    let mut b = Lookout::default();
    b.nth(5);
    kube::runtime::utils::Backoff::reset(&mut b);
    assert_eq!(b.next(), Some(Duration::from_secs(1)));
}

#[test]
fn the_apiservers_endpoint_slices_are_listed_before_the_first_build_and_followed() {
    let mut l = listed_but_admin();
    l.apiserver.synced = false;
    l.anps.absent();
    l.banps.absent();
    assert!(!l.synced(), "the kube-apiserver's slices have not been listed");
    let ev = |e| Ev::Apiserver(Box::new(Ok(e)));
    // An empty list (an API server that keeps no endpoints) is a complete one.
    for e in [Event::Init, Event::InitDone] {
        assert!(changes(&mut l, ev(e), "n1", &[]).unwrap().is_empty());
    }
    assert!(l.synced(), "an empty list does not hold the build back");
    assert!(l.kube_apiserver().is_empty());

    // Its ready addresses (no condition is ready), of both families.
    let v4 = slice(
        "kubernetes",
        "kubernetes",
        "IPv4",
        &[
            ("192.0.2.10", Some(true)),
            ("192.0.2.11", Some(false)),
            ("192.0.2.12", None),
        ],
    );
    let c = changes(&mut l, ev(Event::Apply(v4.clone())), "n1", &[]).unwrap();
    assert!(
        matches!(&c[..], [Change::KubeApiserver(a)] if *a == ips(&["192.0.2.10", "192.0.2.12"])),
        "{c:?}"
    );
    let v6 = slice("kubernetes-v6", "kubernetes", "IPv6", &[("2001:db8::10", None)]);
    let c = changes(&mut l, ev(Event::Apply(v6)), "n1", &[]).unwrap();
    assert!(
        matches!(&c[..], [Change::KubeApiserver(a)] if *a == ips(&["192.0.2.10", "192.0.2.12", "2001:db8::10"])),
        "{c:?}"
    );
    // The same addresses again (a new resourceVersion): nothing; another Service's slice,
    // should the API ignore the selector: nothing either.
    let mut again = v4.clone();
    again.metadata.resource_version = Some("2".into());
    assert!(
        changes(&mut l, ev(Event::Apply(again)), "n1", &[])
            .unwrap()
            .is_empty()
    );
    let other = slice("web-abc", "web", "IPv4", &[("10.0.0.5", None)]);
    assert!(
        changes(&mut l, ev(Event::Apply(other)), "n1", &[])
            .unwrap()
            .is_empty()
    );
    // An endpoint turns ready, the IPv4 slice goes.
    let v4b = slice(
        "kubernetes",
        "kubernetes",
        "IPv4",
        &[("192.0.2.10", Some(true)), ("192.0.2.11", Some(true))],
    );
    let c = changes(&mut l, ev(Event::Apply(v4b.clone())), "n1", &[]).unwrap();
    assert!(
        matches!(&c[..], [Change::KubeApiserver(a)] if *a == ips(&["192.0.2.10", "192.0.2.11", "2001:db8::10"])),
        "{c:?}"
    );
    let c = changes(&mut l, ev(Event::Delete(v4b)), "n1", &[]).unwrap();
    assert!(
        matches!(&c[..], [Change::KubeApiserver(a)] if *a == ips(&["2001:db8::10"])),
        "{c:?}"
    );
}

#[test]
fn an_admin_policy_keeps_its_kube_apiserver_annotation_and_no_other() {
    let mut l = listed_but_admin();
    let with = |ann: serde_json::Value| -> AdminNetworkPolicy {
        let mut p = anp("api", 5);
        p.metadata.annotations = serde_json::from_value(ann).unwrap();
        p
    };
    let ev = |p| Ev::Anp(Box::new(Ok(Event::Apply(p))));
    let c = changes(
        &mut l,
        ev(with(json!({KUBE_APISERVER_ANNOTATION: "to-api", "kubectl.kubernetes.io/last-applied-configuration": "{}"}))),
        "n1",
        &[],
    )
    .unwrap();
    let [Change::Anp(Step::Set(_, p))] = &c[..] else {
        panic!("{c:?}")
    };
    assert_eq!(
        p.metadata.annotations,
        Some([(KUBE_APISERVER_ANNOTATION.to_string(), "to-api".to_string())].into())
    );
    // Another annotation changing is nothing to the compiler; this one changing is.
    assert!(
        changes(
            &mut l,
            ev(with(json!({KUBE_APISERVER_ANNOTATION: "to-api", "kubectl.kubernetes.io/last-applied-configuration": "{\"a\":1}"}))),
            "n1",
            &[],
        )
        .unwrap()
        .is_empty()
    );
    let c = changes(&mut l, ev(with(json!({}))), "n1", &[]).unwrap();
    assert!(
        matches!(&c[..], [Change::Anp(Step::Set(_, p))] if p.metadata.annotations.is_none()),
        "{c:?}"
    );
}

#[test]
fn the_first_build_and_a_step_give_the_apiservers_addresses_to_the_compiler() {
    let mut l = listed_but_admin();
    l.banps.absent();
    let api: AdminNetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "api", "annotations": {KUBE_APISERVER_ANNOTATION: "to-api"}},
        "spec": {"priority": 1, "subject": {"namespaces": {}},
                 "egress": [{"name": "to-api", "action": "Allow", "to": [{"networks": ["0.0.0.0/32"]}]},
                            {"name": "rest", "action": "Deny", "to": [{"networks": ["0.0.0.0/0"]}]}]},
    }))
    .unwrap();
    for ev in [Event::Init, Event::InitApply(api.clone()), Event::InitDone] {
        changes(&mut l, Ev::Anp(Box::new(Ok(ev))), "n1", &[]).unwrap();
    }
    let v4 = slice("kubernetes", "kubernetes", "IPv4", &[("192.0.2.10", None)]);
    changes(&mut l, Ev::Apiserver(Box::new(Ok(Event::Apply(v4)))), "n1", &[]).unwrap();
    let pod: lite::LitePod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "a", "labels": {"app": "web"}},
        "status": {"podIP": "10.0.0.1"},
    }))
    .unwrap();
    for ev in [Event::Init, Event::InitApply(pod.clone()), Event::InitDone] {
        changes(&mut l, Ev::Pod(Ok(ev)), "n1", &[]).unwrap();
    }
    assert!(l.synced());
    let mut feed = Feed::build(&l, cozyplane_policy::hf::NodeInfo::default());
    let tcp = |f: &Feed, dst: &str| {
        cozyplane_policy::verdict::np(
            &f.tables(),
            "10.0.0.1".parse().unwrap(),
            dst.parse().unwrap(),
            cozyplane_policy::model::proto::TCP,
            6443,
        )
        .allowed()
    };
    assert!(tcp(&feed, "192.0.2.10"), "the build knows the apiserver");
    assert!(!tcp(&feed, "192.0.2.20"));
    let mut np = cozyplane_policy::np::NpCompiler::new();
    np.set_pod(pod.info());
    np.set_kube_apiserver(ips(&["192.0.2.10"]));
    np.set_anp(&anp_row(&api));
    assert_eq!(feed.np.tables(), np.tables());

    // The apiserver moves: one step, one diff.
    let moved = slice("kubernetes", "kubernetes", "IPv4", &[("192.0.2.20", None)]);
    let c = changes(
        &mut l,
        Ev::Apiserver(Box::new(Ok(Event::Apply(moved)))),
        "n1",
        &[],
    )
    .unwrap();
    let mut applied = feed.tables();
    for ch in c {
        let (layer, d) = feed.step(ch);
        assert_eq!(layer, "anp");
        assert!(!d.is_empty());
        d.apply(&mut applied);
    }
    assert!(applied == feed.tables());
    assert!(tcp(&feed, "192.0.2.20") && !tcp(&feed, "192.0.2.10"));
}
