use std::net::IpAddr;

use serde_json::json;

use super::*;

fn svc(v: serde_json::Value) -> Service {
    let mut base = json!({"metadata": {"namespace": "ns", "name": "web"},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]}});
    merge(&mut base, v);
    serde_json::from_value(base).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// A slice of `family` with port `http`=`port` and endpoints `(addr, node, ready, serving,
/// terminating)`.
fn slice(family: &str, port: i32, eps: &[(&str, &str, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = eps
        .iter()
        .map(|(a, n, r, s, t)| {
            json!({"addresses": [a], "nodeName": n,
                   "conditions": {"ready": r, "serving": s, "terminating": t}})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "ns", "name": format!("web-{family}"),
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": family,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

fn me() -> Me {
    Me {
        node: "n1".into(),
        zone: Some("z1".into()),
    }
}

fn backends(out: &BTreeMap<Frontend, Want>, vip: &str, port: u16) -> Vec<String> {
    let f = Frontend {
        net: 0,
        vip: vip.parse().unwrap(),
        proto: 6,
        port,
    };
    out.get(&f)
        .unwrap_or_else(|| panic!("no frontend {vip}:{port} in {out:?}"))
        .backends
        .iter()
        .map(|b| format!("{}:{}", b.1, b.2))
        .collect()
}

#[test]
fn each_family_is_its_own_frontend_with_its_own_endpoints_at_the_named_port() {
    let s = svc(json!({"spec": {"clusterIPs": ["10.96.0.10", "fd96::10"],
                                "ipFamilyPolicy": "RequireDualStack"}}));
    let v4 = slice(
        "IPv4",
        8080,
        &[
            ("10.244.1.2", "n1", true, true, false),
            ("10.244.2.2", "n2", true, true, false),
        ],
    );
    let v6 = slice("IPv6", 8080, &[("fd44::2", "n2", true, true, false)]);
    let (out, refused) = frontends(&s, &[&v4, &v6], &me());
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(out.len(), 2);
    assert_eq!(
        backends(&out, "10.96.0.10", 80),
        ["10.244.1.2:8080", "10.244.2.2:8080"]
    );
    assert_eq!(backends(&out, "fd96::10", 80), ["fd44::2:8080"]);
    assert!(out.values().all(|w| w.affinity == 0));
}

#[test]
fn terminating_endpoints_serve_only_when_none_is_ready() {
    let s = svc(json!({}));
    let both = slice(
        "IPv4",
        80,
        &[
            ("10.244.1.2", "n1", true, true, false),
            ("10.244.1.3", "n1", false, true, true),
        ],
    );
    assert_eq!(
        backends(&frontends(&s, &[&both], &me()).0, "10.96.0.10", 80),
        ["10.244.1.2:80"]
    );
    let draining = slice(
        "IPv4",
        80,
        &[
            ("10.244.1.3", "n1", false, true, true),
            ("10.244.1.4", "n1", false, false, true),
        ],
    );
    assert_eq!(
        backends(&frontends(&s, &[&draining], &me()).0, "10.96.0.10", 80),
        ["10.244.1.3:80"],
        "serving and terminating, not the one that stopped serving"
    );
    let none = slice("IPv4", 80, &[("10.244.1.5", "n1", false, false, false)]);
    assert!(backends(&frontends(&s, &[&none], &me()).0, "10.96.0.10", 80).is_empty());
}

#[test]
fn internal_traffic_policy_local_and_preferences_with_their_fallback() {
    let eps = slice(
        "IPv4",
        80,
        &[
            ("10.244.1.2", "n1", true, true, false),
            ("10.244.2.2", "n2", true, true, false),
        ],
    );
    let remote_only = slice("IPv4", 80, &[("10.244.2.2", "n2", true, true, false)]);
    let local = svc(json!({"spec": {"internalTrafficPolicy": "Local", "externalIPs": ["192.0.2.10"]}}));
    let out = frontends(&local, &[&eps], &me()).0;
    assert_eq!(backends(&out, "10.96.0.10", 80), ["10.244.1.2:80"]);
    assert_eq!(
        backends(&out, "192.0.2.10", 80).len(),
        2,
        "an external IP is no ClusterIP: every endpoint"
    );
    assert!(
        backends(&frontends(&local, &[&remote_only], &me()).0, "10.96.0.10", 80).is_empty(),
        "Local with no local endpoint: nothing (refused)"
    );
    let prefer = svc(json!({"spec": {"trafficDistribution": "PreferSameNode"}}));
    assert_eq!(
        backends(&frontends(&prefer, &[&eps], &me()).0, "10.96.0.10", 80),
        ["10.244.1.2:80"]
    );
    assert_eq!(
        backends(&frontends(&prefer, &[&remote_only], &me()).0, "10.96.0.10", 80),
        ["10.244.2.2:80"],
        "no preferred endpoint: all of them"
    );
}

#[test]
fn services_that_are_not_ours_or_have_no_address_make_nothing() {
    let eps = slice("IPv4", 80, &[("10.244.1.2", "n1", true, true, false)]);
    for s in [
        svc(json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}})),
        svc(
            json!({"spec": {"type": "ExternalName", "externalName": "example.org",
                            "clusterIP": "", "clusterIPs": []}}),
        ),
        svc(json!({"metadata": {"labels": {PROXY_NAME_LABEL: "other"}}})),
    ] {
        let (out, refused) = frontends(&s, &[&eps], &me());
        assert!(out.is_empty() && refused.is_empty(), "{s:?}: {out:?} {refused:?}");
    }
}

#[test]
fn bad_ports_protocols_and_addresses_are_refused_and_the_rest_is_kept() {
    let s = svc(json!({"spec": {
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                  {"name": "big", "port": 70000, "protocol": "TCP"},
                  {"name": "x", "port": 81, "protocol": "ICMP"},
                  {"name": "s", "port": 82, "protocol": "SCTP"}],
        "externalIPs": ["not-an-ip"]},
        "status": {"loadBalancer": {"ingress": [{"ip": "bogus"}, {"ip": "198.51.100.7"},
                                                {"ip": "198.51.100.8", "ipMode": "Proxy"}]}}}));
    let eps = slice("IPv4", 80, &[("10.244.1.2", "n1", true, true, false)]);
    let (out, refused) = frontends(&s, &[&eps], &me());
    assert_eq!(
        refused,
        vec![
            Refused::Address("not-an-ip".into()),
            Refused::Address("bogus".into()),
            Refused::Port(70000),
            Refused::Protocol("ICMP".into()),
            Refused::Protocol("SCTP".into()),
        ]
    );
    let vips: Vec<String> = out
        .keys()
        .map(|f| format!("{}:{}/{}", f.vip, f.port, f.net))
        .collect();
    assert_eq!(
        vips,
        [
            "10.96.0.10:80/0".to_string(),
            "198.51.100.7:80/0".to_string(),
            format!("198.51.100.7:80/{EXTERNAL_NET}"),
        ],
        "the load balancer IP from inside and from outside"
    );
}

#[test]
fn client_ip_affinity_takes_its_timeout_or_the_default() {
    let eps = slice("IPv4", 80, &[("10.244.1.2", "n1", true, true, false)]);
    let with = svc(json!({"spec": {"sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 30}}}}));
    let without = svc(json!({"spec": {"sessionAffinity": "ClientIP"}}));
    assert!(
        frontends(&with, &[&eps], &me())
            .0
            .values()
            .all(|w| w.affinity == 30)
    );
    assert!(
        frontends(&without, &[&eps], &me())
            .0
            .values()
            .all(|w| w.affinity == DEFAULT_AFFINITY_SECONDS)
    );
}

#[test]
fn a_node_port_is_a_frontend_on_every_node_address_of_the_services_families() {
    let eps = slice("IPv4", 8080, &[("10.244.2.2", "n2", true, true, false)]);
    let s = svc(
        json!({"spec": {"type": "NodePort", "externalTrafficPolicy": "Local",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}}),
    );
    let all: Vec<IpAddr> = ["192.168.10.1", "192.168.10.2", "fd00::1"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let nodes = NodeAddrs {
        all,
        mine: vec!["192.168.10.1".parse().unwrap()],
    };
    let (out, refused) = frontends_with(&s, &[&eps], &me(), &nodes);
    assert!(refused.is_empty(), "{refused:?}");
    let vips: Vec<String> = out
        .keys()
        .filter(|f| f.net == 0)
        .map(|f| format!("{}:{}", f.vip, f.port))
        .collect();
    assert_eq!(
        vips,
        ["10.96.0.10:80", "192.168.10.1:30080", "192.168.10.2:30080"],
        "no IPv6 node address: the Service is IPv4 only"
    );
    let outside: Vec<(String, usize)> = out
        .iter()
        .filter(|(f, _)| f.net == EXTERNAL_NET)
        .map(|(f, w)| (format!("{}:{}", f.vip, f.port), w.backends.len()))
        .collect();
    assert_eq!(
        outside,
        [("192.168.10.1:30080".to_string(), 0)],
        "from outside: this node's NodePort only, and its endpoint is on n2"
    );
    assert_eq!(
        backends(&out, "192.168.10.1", 30080),
        ["10.244.2.2:8080"],
        "from inside the cluster every endpoint serves, whatever externalTrafficPolicy says"
    );
    let clusterip = svc(json!({"spec": {"ports": [{"name": "http", "port": 80, "nodePort": 30080}]}}));
    assert_eq!(
        frontends_with(&clusterip, &[&eps], &me(), &nodes).0.len(),
        1,
        "a ClusterIP Service has no NodePort"
    );
}
