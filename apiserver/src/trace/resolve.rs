//! A trace request's spec turned into the flow the verdict judges, or every field error at
//! once (a 422 with one cause each): a Port that is not the VPC's, no end in the traced VPC,
//! ends of two families, a protocol or port out of range. An address outside the VPC and its
//! peers is an outside end: the flow is north-south.

use std::net::IpAddr;

use cozyplane_apis::v1alpha1::{VPCRef, VPCTraceEndpoint, VPCTraceSpec};
use cozyplane_policy::model::proto;

use super::world::World;
use crate::validation::field::{FieldError, FieldErrors, FieldPath};

/// One end of the flow, placed in a VPC.
#[derive(Clone, Debug)]
pub struct End {
    /// Its address.
    pub ip: IpAddr,
    /// Its VPC.
    pub vpc: VPCRef,
    /// That VPC's VNI (the verdict's net).
    pub vni: u32,
    /// The traced VPC or a Ready peer of it.
    pub connected: bool,
    /// The traced VPC itself.
    pub local: bool,
    /// Outside every VPC of the trace (a north-south end).
    pub external: bool,
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

const PROTOCOLS: [&str; 5] = ["TCP", "UDP", "SCTP", "ICMP", "ICMPv6"];

fn end(w: &World, e: &VPCTraceEndpoint, path: &FieldPath, errs: &mut FieldErrors) -> Option<End> {
    let me = &w.nets[0];
    let ip =
        match (e.port.is_empty(), e.address.is_empty()) {
            (true, true) => {
                errs.push(FieldError::required(path.clone(), "a port or an address"));
                return None;
            }
            (false, false) => {
                errs.push(FieldError::forbidden(
                    path.child("address"),
                    "give a port or an address, not both",
                ));
                return None;
            }
            (false, true) => {
                // The same answer whether the Port is another VPC's or does not exist at all.
                let Some(p) = w.ports.iter().find(|p| {
                    p.metadata.name.as_deref() == Some(e.port.as_str()) && p.spec.vpc_ref == me.vpc
                }) else {
                    errs.push(FieldError::invalid(
                        path.child("port"),
                        &e.port,
                        format!("not a Port of VPC {}/{}", me.vpc.namespace, me.vpc.name),
                    ));
                    return None;
                };
                let Ok(ip) = p.spec.ip.parse::<IpAddr>() else {
                    errs.push(FieldError::invalid(
                        path.child("port"),
                        &e.port,
                        "the Port has no address",
                    ));
                    return None;
                };
                ip
            }
            (true, false) => {
                let Ok(ip) = e.address.parse::<IpAddr>() else {
                    errs.push(FieldError::invalid(
                        path.child("address"),
                        &e.address,
                        "must be an IPv4 or IPv6 address",
                    ));
                    return None;
                };
                ip
            }
        };
    let ip = ip.to_canonical();
    let Some((i, n)) = w
        .nets
        .iter()
        .enumerate()
        .find(|(_, n)| n.cidrs.iter().any(|c| c.contains(&ip)))
    else {
        // Outside every VPC the trace knows: a north-south end, judged with the traced VPC's
        // net and no groups (as the datapath's SecurityGroups see an outside peer).
        return Some(End {
            ip,
            vpc: VPCRef::default(),
            vni: me.vni,
            connected: true,
            local: false,
            external: true,
        });
    };
    Some(End {
        ip,
        vpc: n.vpc.clone(),
        vni: n.vni,
        connected: n.connected,
        local: i == 0,
        external: false,
    })
}

fn in_byte(v: Option<i32>, default: u8, path: FieldPath, errs: &mut FieldErrors) -> u8 {
    match v {
        None => default,
        Some(n) => u8::try_from(n).unwrap_or_else(|_| {
            errs.push(FieldError::invalid_int(
                path,
                i64::from(n),
                "must be between 0 and 255",
            ));
            0
        }),
    }
}

/// The protocol number and the port (TCP, UDP, SCTP) or ICMP `type << 8 | code` of a trace
/// spec's `protocol`, `port` and `icmp` (type, code), pushing every field error under `root`;
/// `v6` is the flow's family when an end is known (ICMP and ICMPv6 must match it). Shared by
/// the VPC and the pod trace.
pub fn protocol_port(
    protocol: &str,
    port: Option<i32>,
    icmp: (Option<i32>, Option<i32>),
    v6: Option<bool>,
    root: &FieldPath,
    errs: &mut FieldErrors,
) -> (u8, u16) {
    let pr = root.child("protocol");
    match protocol {
        p @ ("TCP" | "UDP" | "SCTP") => {
            let number = match p {
                "TCP" => proto::TCP,
                "UDP" => proto::UDP,
                _ => proto::SCTP,
            };
            for (v, f) in [(icmp.0, "icmpType"), (icmp.1, "icmpCode")] {
                if v.is_some() {
                    errs.push(FieldError::forbidden(root.child(f), "only for ICMP and ICMPv6"));
                }
            }
            let port = match port {
                None => {
                    errs.push(FieldError::required(root.child("port"), "the destination port"));
                    0
                }
                Some(n) => u16::try_from(n).ok().filter(|p| *p != 0).unwrap_or_else(|| {
                    errs.push(FieldError::invalid_int(
                        root.child("port"),
                        i64::from(n),
                        "must be between 1 and 65535",
                    ));
                    0
                }),
            };
            (number, port)
        }
        p @ ("ICMP" | "ICMPv6") => {
            let six = p == "ICMPv6";
            if v6.is_some_and(|v6| six != v6) {
                errs.push(FieldError::invalid(
                    pr.clone(),
                    p,
                    if six {
                        "ICMPv6 is for IPv6 addresses"
                    } else {
                        "ICMP is for IPv4 addresses; use ICMPv6"
                    },
                ));
            }
            if port.is_some() {
                errs.push(FieldError::forbidden(
                    root.child("port"),
                    "ICMP has no port; use icmpType and icmpCode",
                ));
            }
            let ty = in_byte(icmp.0, if six { 128 } else { 8 }, root.child("icmpType"), errs);
            let code = in_byte(icmp.1, 0, root.child("icmpCode"), errs);
            let number = if six { proto::ICMPV6 } else { proto::ICMP };
            (number, (u16::from(ty) << 8) | u16::from(code))
        }
        other => {
            errs.push(FieldError::not_supported(pr, other, &PROTOCOLS));
            (0, 0)
        }
    }
}

/// The flow of `spec` in world `w`, or every field error.
pub fn flow(w: &World, spec: &VPCTraceSpec) -> Result<Flow, FieldErrors> {
    let mut errs = FieldErrors::new();
    let root = FieldPath::new("spec");
    let src = end(w, &spec.source, &root.child("source"), &mut errs);
    let dst = end(w, &spec.destination, &root.child("destination"), &mut errs);
    if let (Some(s), Some(d)) = (&src, &dst) {
        if !s.local && !d.local {
            errs.push(FieldError::invalid(
                root.child("source"),
                &s.ip.to_string(),
                "one end of the flow must be in the traced VPC",
            ));
        }
        if s.ip.is_ipv4() != d.ip.is_ipv4() {
            errs.push(FieldError::invalid(
                root.child("destination"),
                &d.ip.to_string(),
                "must be of the source's address family",
            ));
        }
    }
    let v6 = src.as_ref().or(dst.as_ref()).map(|e| e.ip.is_ipv6());
    let (number, port) = protocol_port(
        &spec.protocol,
        spec.port,
        (spec.icmp_type, spec.icmp_code),
        v6,
        &root,
        &mut errs,
    );
    match (src, dst) {
        (Some(src), Some(dst)) if errs.is_empty() => Ok(Flow {
            src,
            dst,
            proto: number,
            port,
        }),
        _ => Err(errs),
    }
}
