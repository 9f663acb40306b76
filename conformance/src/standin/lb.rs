//! The stand-in as a LoadBalancer implementation: what MetalLB's controller does, on a pool.
//!
//! With [`super::Options::lb_pool`], every Service of `type: LoadBalancer` whose
//! `spec.loadBalancerClass` is unset or one of the pool's classes gets one address per family
//! it asks for (`spec.ipFamilies`, IPv4 when absent) in `status.loadBalancer.ingress`, taken
//! from the pool of that family (lowest free first; a family without a pool gets nothing). An
//! address is held by one Service only (a Service whose address another holds gets a new one);
//! it is free again once its Service is deleted or stops qualifying (type or class changed), and
//! then removed from that Service's status. Nothing is announced: in the lab a route on the
//! router plays the part of BGP or L2 attraction.

use std::collections::HashSet;
use std::net::IpAddr;

use cozyplane_apis::net::{Ipv4Net, Ipv6Net};
use cozyplane_apiserver::registry::Resource;
use cozyplane_apiserver::registry::store::WriteOptions;
use serde_json::{Value, json};

use super::Shared;

/// The address pools and the classes the stand-in answers for.
#[derive(Clone, Debug, Default)]
pub struct LbPool {
    /// IPv4 addresses to hand out (network and broadcast addresses excluded).
    pub v4: Option<Ipv4Net>,
    /// IPv6 addresses to hand out.
    pub v6: Option<Ipv6Net>,
    /// `loadBalancerClass` values served besides none.
    pub classes: Vec<String>,
}

impl LbPool {
    /// Pools from CIDR text (an empty string: no pool of that family). Panics on a bad CIDR
    /// (test setup).
    pub fn new(v4: &str, v6: &str) -> Self {
        Self {
            v4: (!v4.is_empty()).then(|| v4.parse().expect("an IPv4 CIDR")),
            v6: (!v6.is_empty()).then(|| v6.parse().expect("an IPv6 CIDR")),
            classes: Vec::new(),
        }
    }

    fn serves(&self, svc: &Value) -> bool {
        let spec = &svc["spec"];
        spec["type"] == "LoadBalancer"
            && match spec["loadBalancerClass"].as_str() {
                None | Some("") => true,
                Some(c) => self.classes.iter().any(|k| k == c),
            }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.v4.is_some_and(|n| n.contains(&a)),
            IpAddr::V6(a) => self.v6.is_some_and(|n| n.contains(&a)),
        }
    }

    fn next_free(&self, v6: bool, used: &HashSet<IpAddr>) -> Option<IpAddr> {
        if v6 {
            self.v6?.hosts().map(IpAddr::V6).find(|a| !used.contains(a))
        } else {
            self.v4?.hosts().map(IpAddr::V4).find(|a| !used.contains(a))
        }
    }
}

fn ingress_ips(svc: &Value) -> Vec<IpAddr> {
    svc.pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i["ip"].as_str()?.parse().ok())
        .collect()
}

fn wants_v6(svc: &Value) -> Vec<bool> {
    let fams: Vec<bool> = svc
        .pointer("/spec/ipFamilies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|f| f == "IPv6")
        .collect();
    if fams.is_empty() { vec![false] } else { fams }
}

/// One pass over every Service: assigns, re-assigns and releases as the module docs say.
pub async fn assign_once(st: &Shared) {
    let Some(pool) = &st.lb else { return };
    let mut services = st.reg.list("services", None).await;
    services.sort_by(|a, b| {
        let k = |s: &Value| {
            (
                s.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                s.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                s.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            )
        };
        k(a).cmp(&k(b))
    });
    // What the qualifying Services hold (older first keeps a duplicate's address).
    let mut used: HashSet<IpAddr> = HashSet::new();
    let mut kept: Vec<Vec<IpAddr>> = Vec::new();
    for s in &services {
        let mine: Vec<IpAddr> = if pool.serves(s) {
            let want = wants_v6(s);
            ingress_ips(s)
                .into_iter()
                .filter(|ip| pool.contains(*ip) && want.contains(&ip.is_ipv6()) && used.insert(*ip))
                .collect()
        } else {
            Vec::new()
        };
        kept.push(mine);
    }
    for (s, mut mine) in services.into_iter().zip(kept) {
        if pool.serves(&s) {
            for v6 in wants_v6(&s) {
                if mine.iter().any(|ip| ip.is_ipv6() == v6) {
                    continue;
                }
                if let Some(ip) = pool.next_free(v6, &used) {
                    used.insert(ip);
                    mine.push(ip);
                }
            }
        }
        let have = ingress_ips(&s);
        // Addresses from outside the pool (written by someone else) are left alone.
        let foreign: Vec<IpAddr> = have.iter().copied().filter(|ip| !pool.contains(*ip)).collect();
        let next: Vec<IpAddr> = foreign.into_iter().chain(mine).collect();
        if next == have {
            continue;
        }
        let ns = s
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = s
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut obj = s.clone();
        let ingress: Vec<Value> = next
            .iter()
            .map(|ip| json!({ "ip": ip.to_string(), "ipMode": "VIP" }))
            .collect();
        obj["status"] = json!({ "loadBalancer": { "ingress": ingress } });
        // A conflict (the Service changed meanwhile) is retried by the next pass.
        let _ = st
            .reg
            .store("services")
            .update(Some(ns), name, obj, true, &WriteOptions::server())
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_serves_its_classes_and_skips_network_and_broadcast() {
        let mut p = LbPool::new("203.0.113.0/30", "2001:db8:1::/126");
        p.classes.push("lab".into());
        assert!(p.serves(&json!({ "spec": { "type": "LoadBalancer" } })));
        assert!(p.serves(&json!({ "spec": { "type": "LoadBalancer", "loadBalancerClass": "lab" } })));
        assert!(!p.serves(&json!({ "spec": { "type": "LoadBalancer", "loadBalancerClass": "other" } })));
        assert!(!p.serves(&json!({ "spec": { "type": "ClusterIP" } })));
        let mut used = HashSet::new();
        let a = p.next_free(false, &used).unwrap();
        assert_eq!(a, "203.0.113.1".parse::<IpAddr>().unwrap());
        used.insert(a);
        assert_eq!(p.next_free(false, &used), Some("203.0.113.2".parse().unwrap()));
        used.insert("203.0.113.2".parse().unwrap());
        assert_eq!(p.next_free(false, &used), None, "the pool is exhausted");
        assert!(p.next_free(true, &used).unwrap().is_ipv6());
    }
}
