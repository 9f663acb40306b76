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
fn a_node_port_is_a_frontend_on_the_node_addresses_of_the_services_families() {
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
        primary: Vec::new(),
    };
    let (out, refused) = frontends_with(&s, &[&eps], &me(), &nodes, &NodePortAddresses::All);
    assert!(refused.is_empty(), "{refused:?}");
    let vips: Vec<String> = out
        .keys()
        .filter(|f| f.net == 0)
        .map(|f| format!("{}:{}", f.vip, f.port))
        .collect();
    assert_eq!(
        vips,
        ["10.96.0.10:80", "192.168.10.1:30080"],
        "no IPv6 node address: the Service is IPv4 only; another node's NodePort of an \
         externalTrafficPolicy: Local Service is that node's to answer"
    );
    let cluster = svc(json!({"spec": {"type": "NodePort",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}}));
    let (out_cluster, _) = frontends_with(&cluster, &[&eps], &me(), &nodes, &NodePortAddresses::All);
    let vips_cluster: Vec<String> = out_cluster
        .keys()
        .filter(|f| f.net == 0)
        .map(|f| format!("{}:{}", f.vip, f.port))
        .collect();
    assert_eq!(
        vips_cluster,
        ["10.96.0.10:80", "192.168.10.1:30080", "192.168.10.2:30080"],
        "externalTrafficPolicy: Cluster: every node's NodePort is balanced here"
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
        frontends_with(&clusterip, &[&eps], &me(), &nodes, &NodePortAddresses::All)
            .0
            .len(),
        1,
        "a ClusterIP Service has no NodePort"
    );
}

#[test]
fn from_outside_cluster_serves_every_endpoint_and_local_only_this_nodes() {
    let eps = slice(
        "IPv4",
        8080,
        &[
            ("10.244.1.2", "n1", true, true, false),
            ("10.244.2.2", "n2", true, true, false),
        ],
    );
    let nodes = NodeAddrs {
        all: vec!["192.168.10.1".parse().unwrap(), "192.168.10.2".parse().unwrap()],
        mine: vec!["192.168.10.1".parse().unwrap()],
        primary: Vec::new(),
    };
    let outside = |policy: &str| -> Vec<String> {
        let s = svc(
            json!({"spec": {"type": "NodePort", "externalTrafficPolicy": policy,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}}),
        );
        let (out, refused) = frontends_with(&s, &[&eps], &me(), &nodes, &NodePortAddresses::All);
        assert!(refused.is_empty(), "{refused:?}");
        let f = out
            .iter()
            .find(|(f, _)| f.net == EXTERNAL_NET)
            .map(|(_, w)| w)
            .expect("an external frontend on this node's address");
        let mut b: Vec<String> = f.backends.iter().map(|(_, a, p)| format!("{a}:{p}")).collect();
        b.sort();
        b
    };
    assert_eq!(
        outside("Cluster"),
        ["10.244.1.2:8080", "10.244.2.2:8080"],
        "Cluster: n2's endpoint too (reached NATed to this node)"
    );
    assert_eq!(outside("Local"), ["10.244.1.2:8080"], "Local: this node's only");
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

/// The `(vip:port, net)` of every NodePort frontend (port 30080) of `out`.
fn node_port_frontends(out: &BTreeMap<Frontend, Want>) -> BTreeSet<(String, u32)> {
    out.keys()
        .filter(|f| f.port == 30080)
        .map(|f| (format!("{}:{}", f.vip, f.port), f.net))
        .collect()
}

/// What [`node_port_frontends`] should list: `(address, net)` pairs at port 30080.
fn want_node_ports(v: &[(&str, u32)]) -> BTreeSet<(String, u32)> {
    v.iter().map(|(a, n)| (format!("{a}:30080"), *n)).collect()
}

/// A dual-stack NodePort Service, the nodes n1 (this one) and n2 with an internal and an
/// external address of each family.
fn dual_stack_node_port() -> (Service, NodeAddrs) {
    let s = svc(
        json!({"spec": {"type": "NodePort", "clusterIPs": ["10.96.0.10", "fd96::10"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}}),
    );
    let nodes = NodeAddrs {
        all: ips(&[
            "192.168.10.1",
            "192.168.10.2",
            "203.0.113.1",
            "203.0.113.2",
            "fd00::1",
            "fd00::2",
        ]),
        mine: ips(&["192.168.10.1", "203.0.113.1", "fd00::1"]),
        primary: ips(&["192.168.10.1", "192.168.10.2", "fd00::1", "fd00::2"]),
    };
    (s, nodes)
}

#[test]
fn nodeport_addresses_keep_node_ports_on_the_addresses_inside_the_cidrs() {
    let (s, nodes) = dual_stack_node_port();
    let eps = slice("IPv4", 8080, &[("10.244.1.2", "n1", true, true, false)]);
    let only = NodePortAddresses::parse("192.168.10.0/24").unwrap();
    let (out, refused) = frontends_with(&s, &[&eps], &me(), &nodes, &only);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(
        node_port_frontends(&out),
        want_node_ports(&[
            ("192.168.10.1", 0),
            ("192.168.10.1", EXTERNAL_NET),
            ("192.168.10.2", 0),
            ("fd00::1", 0),
            ("fd00::1", EXTERNAL_NET),
            ("fd00::2", 0),
        ]),
        "the external addresses serve no NodePort; IPv6 has no range, so every IPv6 address does"
    );
    assert!(
        out.keys()
            .any(|f| f.vip == "10.96.0.10".parse::<IpAddr>().unwrap()),
        "the ClusterIP is no node address: untouched"
    );
    // A range of each family: IPv6 restricted too.
    let only = NodePortAddresses::parse("203.0.113.0/24, fd00::2/128").unwrap();
    let (out, _) = frontends_with(&s, &[&eps], &me(), &nodes, &only);
    assert_eq!(
        node_port_frontends(&out),
        want_node_ports(&[
            ("203.0.113.1", 0),
            ("203.0.113.1", EXTERNAL_NET),
            ("203.0.113.2", 0),
            ("fd00::2", 0),
        ])
    );
    // Unset: every address, as before the flag.
    let (out, _) = frontends_with(&s, &[&eps], &me(), &nodes, &NodePortAddresses::All);
    assert_eq!(
        node_port_frontends(&out).len(),
        nodes.all.len() + nodes.mine.len()
    );
}

#[test]
fn nodeport_addresses_primary_keeps_each_nodes_primary_addresses() {
    let (s, nodes) = dual_stack_node_port();
    let eps = slice("IPv4", 8080, &[("10.244.1.2", "n1", true, true, false)]);
    let (out, refused) = frontends_with(&s, &[&eps], &me(), &nodes, &NodePortAddresses::Primary);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(
        node_port_frontends(&out),
        want_node_ports(&[
            ("192.168.10.1", 0),
            ("192.168.10.1", EXTERNAL_NET),
            ("192.168.10.2", 0),
            ("fd00::1", 0),
            ("fd00::1", EXTERNAL_NET),
            ("fd00::2", 0),
        ]),
        "the external addresses are no node's primary"
    );
}

#[test]
fn a_nodes_primary_addresses_are_its_first_internal_else_external_of_each_family() {
    let node = |addrs: serde_json::Value| -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"addresses": addrs}})).unwrap()
    };
    let n = node(json!([
        {"type": "Hostname", "address": "n1"},
        {"type": "ExternalIP", "address": "203.0.113.1"},
        {"type": "InternalIP", "address": "192.168.10.1"},
        {"type": "InternalIP", "address": "192.168.10.9"},
        {"type": "ExternalIP", "address": "2001:db8::1"},
    ]));
    assert_eq!(primary_addresses(&n), ips(&["192.168.10.1", "2001:db8::1"]));
    let n = node(json!([
        {"type": "InternalIP", "address": "fd00::1"},
        {"type": "InternalIP", "address": "not-an-ip"},
    ]));
    assert_eq!(primary_addresses(&n), ips(&["fd00::1"]));
    assert!(primary_addresses(&node(json!([]))).is_empty());
}

#[test]
fn nodeport_addresses_parse_as_kube_proxy_reads_them_and_refuse_malformed_ones() {
    assert_eq!(NodePortAddresses::parse(""), Ok(NodePortAddresses::All));
    assert_eq!(
        NodePortAddresses::parse("primary"),
        Ok(NodePortAddresses::Primary)
    );
    assert_eq!(
        NodePortAddresses::parse("10.1.2.3/8, fd00::1/64"),
        Ok(NodePortAddresses::Cidrs(vec![
            "10.0.0.0/8".parse().unwrap(),
            "fd00::/64".parse().unwrap()
        ])),
        "host bits are dropped"
    );
    for (bad, names) in [
        ("10.0.0.0/33", "10.0.0.0/33"),
        ("10.0.0.1", "10.0.0.1"),
        ("192.168.0.0/16,bogus", "bogus"),
        ("10.0.0.0/8,", "empty entry"),
        ("primary,10.0.0.0/8", "cannot be combined"),
    ] {
        let e = NodePortAddresses::parse(bad).expect_err(bad);
        assert!(e.contains(names), "{bad}: {e}");
    }
    let only = NodePortAddresses::parse("10.0.0.0/8").unwrap();
    assert!(only.admits("10.9.9.9".parse().unwrap(), &[]));
    assert!(!only.admits("192.168.1.1".parse().unwrap(), &[]));
    assert!(
        only.admits("fd00::1".parse().unwrap(), &[]),
        "no IPv6 range: every IPv6 address"
    );
}
