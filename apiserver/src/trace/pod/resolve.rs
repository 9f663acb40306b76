//! A pod trace's spec turned into the flow the verdict judges, or every field error at once (a
//! 422 with one cause each): a pod that does not exist, has finished or has no address of the
//! flow's family, an address that does not parse, ends of two families, neither end a pod of
//! the request's namespace, a protocol or port out of range.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{PodTraceEndpoint, PodTraceSpec};
use k8s_openapi::api::core::v1::Pod;

use super::world::{PodWorld, finished};
use crate::trace::resolve::protocol_port;
use crate::validation::field::{FieldError, FieldErrors, FieldPath};

/// What an address is to the default network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A pod of the default network (not hostNetwork): it has an identity.
    Pod,
    /// A node's address, or a hostNetwork pod's (the same thing to policy).
    Node,
    /// Neither.
    External,
}

/// One end of the flow.
#[derive(Clone, Debug)]
pub struct End {
    /// Its address.
    pub ip: IpAddr,
    /// What it is.
    pub kind: Kind,
    /// The pod: named by the caller, or holding the address.
    pub pod: Option<(String, String)>,
    /// The caller named the pod (its existence is then no secret to the caller).
    pub named: bool,
    /// The pod's node (`spec.nodeName`), or the node a `Node` end is (or runs on).
    pub node: Option<String>,
}

/// The flow to judge.
#[derive(Clone, Debug)]
pub struct Flow {
    /// The source.
    pub src: End,
    /// The destination.
    pub dst: End,
    /// IP protocol number.
    pub proto: u8,
    /// The destination port, or ICMP `type << 8 | code`.
    pub port: u16,
}

/// An end as given, before its address family is chosen.
enum Given<'a> {
    Pod(&'a Pod, Vec<IpAddr>),
    Address(IpAddr),
}

fn key(p: &Pod) -> (String, String) {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

fn ips(p: &Pod) -> Vec<IpAddr> {
    cozyplane_policy::np::PodInfo::from_k8s(p).ips
}

fn given<'a>(
    w: &'a PodWorld,
    ns: &str,
    e: &PodTraceEndpoint,
    path: &FieldPath,
    errs: &mut FieldErrors,
) -> Option<Given<'a>> {
    if !e.namespace.is_empty() && e.pod.is_empty() {
        errs.push(FieldError::forbidden(
            path.child("namespace"),
            "only with pod: an address needs no namespace",
        ));
        return None;
    }
    match (e.pod.is_empty(), e.address.is_empty()) {
        (true, true) => {
            errs.push(FieldError::required(path.clone(), "a pod or an address"));
            None
        }
        (false, false) => {
            errs.push(FieldError::forbidden(
                path.child("address"),
                "give a pod or an address, not both",
            ));
            None
        }
        (false, true) => {
            let pod_ns = if e.namespace.is_empty() { ns } else { &e.namespace };
            let Some(p) = w
                .pods
                .iter()
                .find(|p| key(p) == (pod_ns.to_string(), e.pod.clone()))
            else {
                errs.push(FieldError::invalid(
                    path.child("pod"),
                    &e.pod,
                    format!("no pod of namespace {pod_ns} has this name"),
                ));
                return None;
            };
            if finished(p) {
                errs.push(FieldError::invalid(
                    path.child("pod"),
                    &e.pod,
                    "the pod has finished (Succeeded or Failed): it holds no address",
                ));
                return None;
            }
            let addrs = ips(p);
            if addrs.is_empty() {
                errs.push(FieldError::invalid(
                    path.child("pod"),
                    &e.pod,
                    "the pod has no address yet",
                ));
                return None;
            }
            Some(Given::Pod(p, addrs))
        }
        (true, false) => match e.address.parse::<IpAddr>() {
            Ok(ip) => Some(Given::Address(ip.to_canonical())),
            Err(_) => {
                errs.push(FieldError::invalid(
                    path.child("address"),
                    &e.address,
                    "must be an IPv4 or IPv6 address",
                ));
                None
            }
        },
    }
}

/// What holds `ip`: a live pod of the default network, else a node (or hostNetwork pod), with
/// the node it is (or runs on).
fn classify(w: &PodWorld, ip: IpAddr) -> (Kind, Option<&Pod>, Option<String>) {
    let mut host = None;
    for p in w.live_pods().filter(|p| ips(p).contains(&ip)) {
        let host_network = p.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        if !host_network {
            return (Kind::Pod, Some(p), node_of(p));
        }
        host = host.or_else(|| node_of(p));
    }
    let node = w
        .nodes
        .iter()
        .find(|n| {
            n.status
                .iter()
                .flat_map(|s| s.addresses.iter().flatten())
                .any(|a| a.address.parse::<IpAddr>().is_ok_and(|a| a.to_canonical() == ip))
        })
        .and_then(|n| n.metadata.name.clone());
    match node.or(host) {
        Some(n) => (Kind::Node, None, Some(n)),
        None => (Kind::External, None, None),
    }
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn end(w: &PodWorld, g: &Given<'_>, v6: bool, path: &FieldPath, errs: &mut FieldErrors) -> Option<End> {
    match g {
        Given::Address(ip) => {
            let (kind, pod, node) = classify(w, *ip);
            Some(End {
                ip: *ip,
                kind,
                pod: pod.map(key),
                named: false,
                node,
            })
        }
        Given::Pod(p, addrs) => {
            let Some(ip) = addrs.iter().find(|a| a.is_ipv6() == v6) else {
                let (_, name) = key(p);
                errs.push(FieldError::invalid(
                    path.child("pod"),
                    &name,
                    format!("the pod has no {} address", if v6 { "IPv6" } else { "IPv4" }),
                ));
                return None;
            };
            let host_network = p.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
            Some(End {
                ip: *ip,
                kind: if host_network { Kind::Node } else { Kind::Pod },
                pod: Some(key(p)),
                named: true,
                node: node_of(p),
            })
        }
    }
}

/// The address family of the flow: an address end's, else the protocol's (ICMP, ICMPv6), else
/// IPv4 when both pods have it.
fn family(src: &Given<'_>, dst: &Given<'_>, protocol: &str) -> bool {
    for g in [src, dst] {
        if let Given::Address(ip) = g {
            return ip.is_ipv6();
        }
    }
    match protocol {
        "ICMPv6" => true,
        "ICMP" => false,
        _ => {
            let has_v4 = |g: &Given<'_>| match g {
                Given::Pod(_, a) => a.iter().any(IpAddr::is_ipv4),
                Given::Address(ip) => ip.is_ipv4(),
            };
            !(has_v4(src) && has_v4(dst))
        }
    }
}

/// The flow of `spec` asked in namespace `ns`, or every field error.
pub fn flow(w: &PodWorld, ns: &str, spec: &PodTraceSpec) -> Result<Flow, FieldErrors> {
    let mut errs = FieldErrors::new();
    let root = FieldPath::new("spec");
    let (sp, dp) = (root.child("source"), root.child("destination"));
    let src = given(w, ns, &spec.source, &sp, &mut errs);
    let dst = given(w, ns, &spec.destination, &dp, &mut errs);
    let mut v6 = None;
    let (mut s, mut d) = (None, None);
    if let (Some(gs), Some(gd)) = (&src, &dst) {
        let six = family(gs, gd, &spec.protocol);
        v6 = Some(six);
        s = end(w, gs, six, &sp, &mut errs);
        d = end(w, gd, six, &dp, &mut errs);
    }
    if let (Some(s), Some(d)) = (&s, &d) {
        if s.ip.is_ipv4() != d.ip.is_ipv4() {
            errs.push(FieldError::invalid(
                dp.child("address"),
                &d.ip.to_string(),
                "must be of the source's address family",
            ));
        }
        let mine =
            |e: &End| e.pod.as_ref().is_some_and(|(pns, _)| pns == ns) && (e.named || e.kind == Kind::Pod);
        if !mine(s) && !mine(d) {
            errs.push(FieldError::invalid(
                sp.clone(),
                &s.ip.to_string(),
                format!("one end of the flow must be a pod of namespace {ns}"),
            ));
        }
    }
    let (number, port) = protocol_port(
        &spec.protocol,
        spec.port,
        (spec.icmp_type, spec.icmp_code),
        v6,
        &root,
        &mut errs,
    );
    match (s, d) {
        (Some(src), Some(dst)) if errs.is_empty() => Ok(Flow {
            src,
            dst,
            proto: number,
            port,
        }),
        _ => Err(errs),
    }
}
