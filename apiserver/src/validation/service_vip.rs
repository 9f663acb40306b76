//! `ServiceVIP`: a Service's virtual address in a VPC (written by the controller).
//!
//! Rules:
//! - `metadata.name` is the claim `sv<vni>.<escaped spec.ip>` with a VPC VNI (as for
//!   [`Port`](super::port));
//! - `spec.vpcRef` namespace and name are required DNS-1123 labels;
//! - `spec.ip` is a required canonical address outside the reserved ranges;
//! - `spec.serviceRef.namespace` is a required DNS-1123 label and `spec.serviceRef.name` a
//!   required DNS-1035 label (the format of Service names);
//! - each `spec.ports[i]` has protocol `TCP` or `UDP`, a port in 1–65535 and, if named, a
//!   DNS-1123 label name; `(protocol, port)` pairs and names are unique;
//! - `spec.sessionAffinity` is empty, `None` or `ClientIP`.
//!
//! On update `spec.ip` and `spec.vpcRef` are immutable. The status written through `/status` is
//! checked by [`validate_service_vip_status_update`]: backend addresses canonical, protocols
//! `TCP`/`UDP`, ports and target ports in 1–65535, phase `Pending`, `Ready` or empty.
//!
//! Default ([`default_service_vip`]): an empty port protocol becomes `TCP`, as for a Service.

use std::collections::HashSet;

use cozyplane_apis::net::ClaimKind;
use cozyplane_apis::v1alpha1::{ServiceVIP, ServiceVIPStatus, phase, protocol};

use super::common::{self, MIN_PORT};
use super::field::{FieldError, FieldErrors, FieldPath};
use super::format;
use super::meta::{validate_object_meta, validate_object_meta_update};

/// Protocols a ServiceVIP port may have.
pub const SERVICE_VIP_PROTOCOLS: &[&str] = &[protocol::TCP, protocol::UDP];
/// Values of `spec.sessionAffinity` (empty is also accepted and means `None`).
pub const SESSION_AFFINITIES: &[&str] = &["None", "ClientIP"];
/// Values of `status.phase` (empty is also accepted: not yet reconciled).
pub const PHASES: &[&str] = &[phase::PENDING, phase::READY];

/// Validates a new ServiceVIP: metadata (including the claim name) and spec.
pub fn validate_service_vip(vip: &ServiceVIP) -> FieldErrors {
    let mut errs = validate_object_meta(&vip.metadata, false);
    let spec = &vip.spec;
    let path = FieldPath::new("spec");
    common::vpc_ref(&mut errs, &spec.vpc_ref, &path.child("vpcRef"));
    let ip = common::host_ip(&mut errs, path.child("ip"), &spec.ip);
    if ip.is_some() || spec.ip.is_empty() {
        common::claim_name(&mut errs, &vip.metadata, ClaimKind::ServiceVIP, ip);
    }
    let svc = path.child("serviceRef");
    common::required_str(
        &mut errs,
        svc.child("namespace"),
        &spec.service_ref.namespace,
        format::dns1123_label,
    );
    common::required_str(
        &mut errs,
        svc.child("name"),
        &spec.service_ref.name,
        format::dns1035_label,
    );

    let ports = path.child("ports");
    let mut pairs = HashSet::new();
    let mut names = HashSet::new();
    for (i, p) in spec.ports.iter().enumerate() {
        let pp = ports.index(i);
        common::optional_str(&mut errs, pp.child("name"), &p.name, format::dns1123_label);
        if !p.name.is_empty() && !names.insert(&p.name) {
            errs.push(FieldError::duplicate(pp.child("name"), &p.name));
        }
        common::protocol(
            &mut errs,
            pp.child("protocol"),
            &p.protocol,
            SERVICE_VIP_PROTOCOLS,
        );
        if common::port_number(&mut errs, pp.child("port"), p.port, MIN_PORT)
            && !pairs.insert((&p.protocol, p.port))
        {
            errs.push(FieldError::duplicate(pp, &format!("{}/{}", p.protocol, p.port)));
        }
    }
    if !spec.session_affinity.is_empty() && !SESSION_AFFINITIES.contains(&spec.session_affinity.as_str()) {
        errs.push(FieldError::not_supported(
            path.child("sessionAffinity"),
            &spec.session_affinity,
            SESSION_AFFINITIES,
        ));
    }
    errs
}

/// Validates an update of a ServiceVIP: the create rules, the metadata update rules, and
/// unchanged `spec.ip` and `spec.vpcRef`.
pub fn validate_service_vip_update(new: &ServiceVIP, old: &ServiceVIP) -> FieldErrors {
    let mut errs = validate_service_vip(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    let path = FieldPath::new("spec");
    common::immutable(&mut errs, path.child("ip"), &new.spec.ip, &old.spec.ip);
    common::immutable_vpc_ref(
        &mut errs,
        &path.child("vpcRef"),
        &new.spec.vpc_ref,
        &old.spec.vpc_ref,
    );
    errs
}

/// Validates a write to `/status`: the metadata update rules and the status itself (the spec
/// is copied from the stored object by the server, so it is not checked here).
pub fn validate_service_vip_status_update(new: &ServiceVIP, old: &ServiceVIP) -> FieldErrors {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata);
    if let Some(status) = &new.status {
        errs.extend(validate_service_vip_status(status, &FieldPath::new("status")));
    }
    errs
}

/// Validates a ServiceVIP status at `path`.
pub fn validate_service_vip_status(status: &ServiceVIPStatus, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let backends = path.child("backends");
    for (i, b) in status.backends.iter().enumerate() {
        let bp = backends.index(i);
        common::host_ip(&mut errs, bp.child("ip"), &b.ip);
        let mut pairs = HashSet::new();
        for (j, p) in b.ports.iter().enumerate() {
            let pp = bp.child("ports").index(j);
            common::protocol(
                &mut errs,
                pp.child("protocol"),
                &p.protocol,
                SERVICE_VIP_PROTOCOLS,
            );
            let port_ok = common::port_number(&mut errs, pp.child("port"), p.port, MIN_PORT);
            common::port_number(&mut errs, pp.child("targetPort"), p.target_port, MIN_PORT);
            if port_ok && !pairs.insert((&p.protocol, p.port)) {
                errs.push(FieldError::duplicate(pp, &format!("{}/{}", p.protocol, p.port)));
            }
        }
    }
    if !status.phase.is_empty() && !PHASES.contains(&status.phase.as_str()) {
        errs.push(FieldError::not_supported(
            path.child("phase"),
            &status.phase,
            PHASES,
        ));
    }
    errs
}

/// Sets `TCP` on ports without a protocol, as Kubernetes does for Service ports.
pub fn default_service_vip(vip: &mut ServiceVIP) {
    for p in &mut vip.spec.ports {
        if p.protocol.is_empty() {
            p.protocol = protocol::TCP.to_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{
        ServiceRef, ServiceVIPBackend, ServiceVIPBackendPort, ServiceVIPPort, ServiceVIPSpec, VPCRef,
    };
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn port(name: &str, protocol: &str, port: i32) -> ServiceVIPPort {
        ServiceVIPPort {
            name: name.into(),
            protocol: protocol.into(),
            port,
        }
    }

    fn vip(name: &str, ip: &str) -> ServiceVIP {
        ServiceVIP::new(
            name,
            ServiceVIPSpec {
                vpc_ref: VPCRef {
                    namespace: "tenant-a".into(),
                    name: "blue".into(),
                },
                ip: ip.into(),
                service_ref: ServiceRef {
                    namespace: "tenant-a".into(),
                    name: "web".into(),
                },
                ports: vec![
                    port("http", "TCP", 80),
                    port("dns", "UDP", 53),
                    port("dns-tcp", "TCP", 53),
                ],
                session_affinity: "ClientIP".into(),
            },
        )
    }

    #[test]
    fn valid_vips_pass() {
        assert_errors(&validate_service_vip(&vip("sv100.10-0-0-254", "10.0.0.254")), &[]);
        assert_errors(&validate_service_vip(&vip("sv100.fd00--fffe", "fd00::fffe")), &[]);
    }

    #[test]
    fn name_must_be_the_service_vip_claim() {
        for bad in ["v100.10-0-0-254", "sv100.10-0-0-253", "sv0.10-0-0-254", "web"] {
            assert_errors(
                &validate_service_vip(&vip(bad, "10.0.0.254")),
                &[("metadata.name", ErrorType::Invalid)],
            );
        }
    }

    #[test]
    fn ports_and_affinity() {
        let mut v = vip("sv100.10-0-0-254", "10.0.0.254");
        v.spec.ports = vec![
            port("http", "TCP", 80),
            port("http", "TCP", 80),
            port("", "SCTP", 0),
            port("Bad_Name", "", 70000),
        ];
        v.spec.session_affinity = "Sticky".into();
        assert_errors(
            &validate_service_vip(&v),
            &[
                ("spec.ports[1].name", ErrorType::Duplicate),
                ("spec.ports[1]", ErrorType::Duplicate),
                ("spec.ports[2].protocol", ErrorType::NotSupported),
                ("spec.ports[2].port", ErrorType::Invalid),
                ("spec.ports[3].name", ErrorType::Invalid),
                ("spec.ports[3].protocol", ErrorType::Required),
                ("spec.ports[3].port", ErrorType::Invalid),
                ("spec.sessionAffinity", ErrorType::NotSupported),
            ],
        );
    }

    #[test]
    fn refs_and_ip() {
        let mut v = vip("sv100.10-0-0-254", "10.0.0.254x");
        v.spec.service_ref = ServiceRef {
            namespace: String::new(),
            name: "1web".into(),
        };
        v.spec.vpc_ref.name.clear();
        assert_errors(
            &validate_service_vip(&v),
            &[
                ("spec.vpcRef.name", ErrorType::Required),
                ("spec.ip", ErrorType::Invalid),
                ("spec.serviceRef.namespace", ErrorType::Required),
                ("spec.serviceRef.name", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn ip_and_vpc_ref_are_immutable() {
        let old = vip("sv100.10-0-0-254", "10.0.0.254");
        let mut new = old.clone();
        new.spec.ports.pop();
        new.spec.session_affinity = "None".into();
        assert_errors(&validate_service_vip_update(&new, &old), &[]);
        new.spec.ip = "10.0.0.253".into();
        new.spec.vpc_ref.namespace = "tenant-b".into();
        assert_errors(
            &validate_service_vip_update(&new, &old),
            &[
                ("metadata.name", ErrorType::Invalid),
                ("spec.ip", ErrorType::Invalid),
                ("spec.vpcRef.namespace", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn status_rules() {
        let old = vip("sv100.10-0-0-254", "10.0.0.254");
        let mut new = old.clone();
        let bp = |protocol: &str, port, target_port| ServiceVIPBackendPort {
            protocol: protocol.into(),
            port,
            target_port,
        };
        new.status = Some(ServiceVIPStatus {
            backends: vec![
                ServiceVIPBackend {
                    ip: "10.0.0.2".into(),
                    ports: vec![bp("TCP", 80, 8080), bp("UDP", 53, 53)],
                },
                ServiceVIPBackend {
                    ip: "10.0.0.3".into(),
                    ports: vec![bp("TCP", 80, 8080)],
                },
            ],
            phase: "Ready".into(),
            conditions: vec![],
        });
        assert_errors(&validate_service_vip_status_update(&new, &old), &[]);
        new.status = Some(ServiceVIPStatus {
            backends: vec![ServiceVIPBackend {
                ip: "10.0.0.02".into(),
                ports: vec![bp("TCP", 80, 0), bp("TCP", 80, 65536), bp("ICMP", -1, 1)],
            }],
            phase: "Done".into(),
            conditions: vec![],
        });
        assert_errors(
            &validate_service_vip_status_update(&new, &old),
            &[
                ("status.backends[0].ip", ErrorType::Invalid),
                ("status.backends[0].ports[0].targetPort", ErrorType::Invalid),
                ("status.backends[0].ports[1].targetPort", ErrorType::Invalid),
                ("status.backends[0].ports[1]", ErrorType::Duplicate),
                ("status.backends[0].ports[2].protocol", ErrorType::NotSupported),
                ("status.backends[0].ports[2].port", ErrorType::Invalid),
                ("status.phase", ErrorType::NotSupported),
            ],
        );
    }

    #[test]
    fn defaulting_sets_tcp() {
        let mut v = vip("sv100.10-0-0-254", "10.0.0.254");
        v.spec.ports = vec![port("a", "", 80), port("b", "UDP", 53)];
        default_service_vip(&mut v);
        assert_eq!(v.spec.ports[0].protocol, "TCP");
        assert_eq!(v.spec.ports[1].protocol, "UDP");
        assert_errors(&validate_service_vip(&v), &[]);
    }

    proptest! {
        #[test]
        fn random_strings_never_panic(name in "\\PC{0,60}", ip in "\\PC{0,45}", proto in "\\PC{0,6}", p: i32) {
            let mut v = vip(&name, &ip);
            v.spec.ports.push(port(&name, &proto, p));
            v.spec.session_affinity = proto;
            let _ = validate_service_vip(&v);
        }
    }
}
