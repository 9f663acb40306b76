//! What `multus.rs` reads from pods and nodes: pings out of one interface, a pod's routes and
//! addresses per interface, and a node's leftovers (Ports, host veths, endpoints) before and
//! after a refused ADD.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use cozyplane_apis::v1alpha1::Port;
use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_lab::{Lab, Netns, Proc};
use kube::api::Api;

pub(crate) mod bad;

/// `count` pings from `ns` out of `dev` to `to`: how many were answered.
pub(crate) fn ping_via(ns: &Netns, dev: &str, to: Ipv4Addr, count: u32) -> u32 {
    ns.ping_from(Some(dev), to, count)
}

/// Pings from `ns` to `to` out of `dev` every 10 ms for at most `secs` seconds, in the
/// background (killed by PID on drop).
pub(crate) fn pinger(ns: &Netns, dev: &str, to: Ipv4Addr, secs: u32) -> Proc {
    ns.pinger(Some(dev), to, secs)
}

/// `ip <args>` inside `ns`, its lines.
pub(crate) fn ip_lines(ns: &Netns, args: &[&str]) -> Vec<String> {
    let mut v = vec!["ip"];
    v.extend_from_slice(args);
    let out = ns.exec(&v);
    assert!(
        out.status.success(),
        "{v:?} in {}: {}",
        ns.0,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// The global addresses (`addr/len`) of `dev` in `ns`.
pub(crate) fn addrs(ns: &Netns, dev: &str) -> Vec<String> {
    ip_lines(ns, &["-o", "addr", "show", "dev", dev, "scope", "global"])
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip_while(|w| *w != "inet" && *w != "inet6");
            w.next()?;
            w.next().map(str::to_string)
        })
        .collect()
}

/// The MAC of `dev` in `ns`, from sysfs (what the interface sends with).
pub(crate) fn mac_of(ns: &Netns, dev: &str) -> String {
    let o = ns.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The names of the links in `ns` (`ip -o link`, the `@peer` part cut).
pub(crate) fn links(ns: &Netns) -> BTreeSet<String> {
    ip_lines(ns, &["-o", "link"])
        .iter()
        .filter_map(|l| {
            let name = l.split_whitespace().nth(1)?.trim_end_matches(':');
            Some(name.split('@').next()?.to_string())
        })
        .collect()
}

/// What a refused ADD must not leave on node `i` and in the API: every Port (name, IP, pod,
/// interface), the node's host veths, its endpoint entries `{net, ip}`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Leftovers {
    pub(crate) ports: BTreeSet<(String, String, String, String)>,
    pub(crate) veths: BTreeSet<String>,
    pub(crate) endpoints: BTreeSet<(u32, IpAddr)>,
}

impl Leftovers {
    pub(crate) async fn of(lab: &Lab, sdn: &kube::Client, i: usize) -> Self {
        let ports = Api::<Port>::all(sdn.clone())
            .list(&Default::default())
            .await
            .expect("list Ports")
            .items
            .into_iter()
            .map(|p| {
                let iface = port_interface(&p);
                (
                    p.metadata.name.unwrap_or_default(),
                    p.spec.ip,
                    p.spec.pod_name,
                    iface,
                )
            })
            .collect();
        let veths = lab.nodes[i].pod_veths().into_iter().collect();
        let endpoints = EndpointsMap::from_pin(&lab.nodes[i].scratch.pins())
            .expect("sdn_endpoints")
            .inner()
            .keys()
            .filter_map(Result::ok)
            .map(|k| (k.net, IpAddr::from(k.ip)))
            .collect();
        Self {
            ports,
            veths,
            endpoints,
        }
    }
}

/// A Port's `spec.interface` (issue 37's field), read through JSON so this test does not
/// depend on the field's Rust name.
pub(crate) fn port_interface(p: &Port) -> String {
    serde_json::to_value(&p.spec).expect("a Port spec")["interface"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The Ports of VPC `ns/name` held by pod `pod`.
pub(crate) async fn ports_of(sdn: &kube::Client, (ns, name): (&str, &str), pod: &str) -> Vec<Port> {
    Api::<Port>::all(sdn.clone())
        .list(&Default::default())
        .await
        .expect("list Ports")
        .items
        .into_iter()
        .filter(|p| p.spec.vpc_ref.namespace == ns && p.spec.vpc_ref.name == name && p.spec.pod_name == pod)
        .collect()
}

/// Asserts the routes of a secondary interface `dev` in `ns`: some, every IPv4 one for a
/// range of `cidrs` only, and no default route of either family.
pub(crate) fn assert_vpc_routes_only(ns: &Netns, dev: &str, cidrs: &[&str]) -> Vec<String> {
    let v4 = ip_lines(ns, &["-4", "route", "show", "dev", dev]);
    assert!(!v4.is_empty(), "{dev} has no route at all");
    for l in &v4 {
        let dst = l.split_whitespace().next().unwrap_or_default();
        assert!(
            cidrs.contains(&dst),
            "{dev} carries a route for {dst} ({l}); only {cidrs:?} expected:\n{}",
            v4.join("\n")
        );
    }
    for fam in ["-4", "-6"] {
        let d = ip_lines(ns, &[fam, "route", "show", "default", "dev", dev]);
        assert!(d.is_empty(), "{dev} has a default route ({fam}): {d:?}");
    }
    v4
}
