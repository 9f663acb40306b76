//! `Port`: one address claimed in a VPC.
//!
//! Rules:
//! - `metadata.name` is the claim `v<vni>.<escaped spec.ip>` (as in the Go server), with a VPC
//!   VNI (100 to 2^23-1). Whoever creates a Port (the CNI plugin, controllers) names it; the
//!   server does not derive the name, because the VNI is not in the spec. `generateName` alone
//!   is therefore rejected. That the VNI is really `vpcRef`'s is not checked (it needs a read);
//! - `spec.vpcRef` namespace and name are required DNS-1123 labels;
//! - `spec.ip` is a required canonical address outside the reserved ranges (loopback,
//!   link-local, multicast, the NAT64 prefix, …);
//! - `spec.mac`, when set, is a unicast MAC other than all-zeros, written canonically
//!   (`02:00:0a:00:00:02`: lower case, `:`). Locally administered addresses (what cozyplane
//!   generates) and vendor addresses (a VM's own) are both accepted;
//! - `spec.node` is a required DNS-1123 subdomain (a Node name);
//! - `spec.nodeIP` is a required canonical host address;
//! - `spec.podNamespace` (DNS-1123 label) and `spec.podName` (DNS-1123 subdomain) are set
//!   together or not at all;
//! - `spec.dhcp`, when set, follows [`super::dhcp`];
//! - `spec.migrationTarget`, when set, names a pod (of `spec.podNamespace`) on another node
//!   than `spec.node`, with that node's address.
//!
//! On update `spec.ip` and `spec.vpcRef` are immutable; the rest follows the workload (and
//! `spec.dhcp` may change at any time: the agent answers the next request with it).

use cozyplane_apis::net::{ClaimKind, MacAddr};
use cozyplane_apis::v1alpha1::Port;

use super::common;
use super::field::{FieldError, FieldErrors, FieldPath};
use super::format;
use super::meta::{validate_object_meta, validate_object_meta_update};

/// Validates a new Port: metadata (including the claim name) and spec.
pub fn validate_port(port: &Port) -> FieldErrors {
    let mut errs = validate_object_meta(&port.metadata, false);
    let spec = &port.spec;
    let path = FieldPath::new("spec");
    common::vpc_ref(&mut errs, &spec.vpc_ref, &path.child("vpcRef"));
    let ip = common::host_ip(&mut errs, path.child("ip"), &spec.ip);
    // The name is checked against a valid ip only; a bad ip is reported once, at spec.ip.
    if ip.is_some() || spec.ip.is_empty() {
        common::claim_name(&mut errs, &port.metadata, ClaimKind::Port, ip);
    }
    validate_mac(&mut errs, path.child("mac"), &spec.mac);
    common::required_str(
        &mut errs,
        path.child("node"),
        &spec.node,
        format::dns1123_subdomain,
    );
    common::host_ip(&mut errs, path.child("nodeIP"), &spec.node_ip);
    common::optional_str(
        &mut errs,
        path.child("podNamespace"),
        &spec.pod_namespace,
        format::dns1123_label,
    );
    common::optional_str(
        &mut errs,
        path.child("podName"),
        &spec.pod_name,
        format::dns1123_subdomain,
    );
    match (spec.pod_namespace.is_empty(), spec.pod_name.is_empty()) {
        (true, false) => errs.push(FieldError::required(
            path.child("podNamespace"),
            "required when podName is set",
        )),
        (false, true) => errs.push(FieldError::required(
            path.child("podName"),
            "required when podNamespace is set",
        )),
        _ => {}
    }
    validate_interface(&mut errs, path.child("interface"), &spec.interface);
    if let Some(dhcp) = &spec.dhcp {
        errs.extend(super::dhcp::validate_guest_config(dhcp, &path.child("dhcp")));
    }
    if let Some(t) = &spec.migration_target {
        validate_migration_target(&mut errs, &path.child("migrationTarget"), t, spec);
    }
    errs
}

/// A live migration's target: a pod of the Port's namespace on another node.
fn validate_migration_target(
    errs: &mut FieldErrors,
    path: &FieldPath,
    t: &cozyplane_apis::v1alpha1::PortMigrationTarget,
    spec: &cozyplane_apis::v1alpha1::PortSpec,
) {
    common::required_str(errs, path.child("node"), &t.node, format::dns1123_subdomain);
    common::host_ip(errs, path.child("nodeIP"), &t.node_ip);
    common::required_str(
        errs,
        path.child("podNamespace"),
        &t.pod_namespace,
        format::dns1123_label,
    );
    common::required_str(
        errs,
        path.child("podName"),
        &t.pod_name,
        format::dns1123_subdomain,
    );
    if !t.node.is_empty() && t.node == spec.node {
        errs.push(FieldError::invalid(
            path.child("node"),
            &t.node,
            "must differ from spec.node: a migration's target is on another node",
        ));
    }
    if !t.pod_namespace.is_empty() && t.pod_namespace != spec.pod_namespace {
        errs.push(FieldError::invalid(
            path.child("podNamespace"),
            &t.pod_namespace,
            "must be spec.podNamespace: the workload's pods share one namespace",
        ));
    }
}

/// Validates an update of a Port: the create rules, the metadata update rules, and unchanged
/// `spec.ip` and `spec.vpcRef`.
pub fn validate_port_update(new: &Port, old: &Port) -> FieldErrors {
    let mut errs = validate_port(new);
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

fn validate_mac(errs: &mut FieldErrors, path: FieldPath, text: &str) {
    if text.is_empty() {
        return;
    }
    let detail = match text.parse::<MacAddr>() {
        Err(_) => "must be a MAC address: six hexadecimal octets separated by ':' (e.g. 02:00:0a:00:00:02)"
            .to_owned(),
        Ok(mac) if mac.is_multicast() => {
            "must be a unicast address (the lowest bit of the first octet clear)".to_owned()
        }
        Ok(mac) if mac.octets() == [0; 6] => "must not be all zeros".to_owned(),
        Ok(mac) if mac.to_string() != text => format!("must be canonical ({mac})"),
        Ok(_) => return,
    };
    errs.push(FieldError::invalid(path, text, detail));
}

/// A Linux interface name as `CNI_IFNAME` carries it (the kernel's `dev_valid_name`).
fn validate_interface(errs: &mut FieldErrors, path: FieldPath, name: &str) {
    if name.is_empty() {
        return;
    }
    let detail = if name.len() > 15 {
        "must be at most 15 characters (a Linux interface name)"
    } else if name == "." || name == ".." || name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        "must be a Linux interface name: no '/', ':' or whitespace, not '.' or '..'"
    } else {
        return;
    };
    errs.push(FieldError::invalid(path, name, detail));
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{PortSpec, VPCRef};
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn port(name: &str, ip: &str) -> Port {
        Port::new(
            name,
            PortSpec {
                vpc_ref: VPCRef {
                    namespace: "tenant-a".into(),
                    name: "blue".into(),
                },
                ip: ip.into(),
                mac: "02:00:0a:00:00:02".into(),
                node: "node-1".into(),
                node_ip: "192.168.1.10".into(),
                pod_namespace: "tenant-a".into(),
                pod_name: "web-0".into(),
                gateway: false,
                ..Default::default()
            },
        )
    }

    #[test]
    fn valid_ports_pass() {
        assert_errors(&validate_port(&port("v100.10-0-0-2", "10.0.0.2")), &[]);
        assert_errors(&validate_port(&port("v8388607.fd00-10--2", "fd00:10::2")), &[]);
        let mut bare = port("v100.10-0-0-2", "10.0.0.2");
        bare.spec.mac.clear();
        bare.spec.pod_name.clear();
        bare.spec.pod_namespace.clear();
        assert_errors(&validate_port(&bare), &[]);
        // A vendor MAC (a VM's own) is unicast and allowed.
        bare.spec.mac = "00:1b:21:00:00:01".into();
        assert_errors(&validate_port(&bare), &[]);
    }

    #[test]
    fn the_interface_is_a_linux_interface_name() {
        let mut p = port("v100.10-0-0-2", "10.0.0.2");
        for ok in ["net1", "eth0", "a-15-chars-name"] {
            p.spec.interface = ok.into();
            assert_errors(&validate_port(&p), &[]);
        }
        for bad in ["this-name-is-16c", "net/1", "net 1", "a:b", ".."] {
            p.spec.interface = bad.into();
            assert_errors(&validate_port(&p), &[("spec.interface", ErrorType::Invalid)]);
        }
    }

    #[test]
    fn a_migration_target_is_a_pod_of_the_namespace_on_another_node() {
        let mut p = port("v100.10-0-0-2", "10.0.0.2");
        let target = |node: &str, ip: &str, ns: &str, pod: &str| {
            Some(cozyplane_apis::v1alpha1::PortMigrationTarget {
                node: node.into(),
                node_ip: ip.into(),
                pod_namespace: ns.into(),
                pod_name: pod.into(),
                migration_uid: String::new(),
            })
        };
        p.spec.migration_target = target("node-2", "192.168.1.11", "tenant-a", "web-1");
        assert_errors(&validate_port(&p), &[]);
        p.spec.migration_target = target("node-1", "192.168.1.11", "tenant-a", "web-1");
        assert_errors(
            &validate_port(&p),
            &[("spec.migrationTarget.node", ErrorType::Invalid)],
        );
        p.spec.migration_target = target("", "0.0.0.0", "tenant-b", "");
        assert_errors(
            &validate_port(&p),
            &[
                ("spec.migrationTarget.node", ErrorType::Required),
                ("spec.migrationTarget.nodeIP", ErrorType::Invalid),
                ("spec.migrationTarget.podName", ErrorType::Required),
                ("spec.migrationTarget.podNamespace", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn name_must_be_the_claim_on_spec_ip() {
        for bad in [
            "web",
            "sv100.10-0-0-2",
            "v100.10-0-0-3",
            "v99.10-0-0-2",
            "v8388608.10-0-0-2",
        ] {
            assert_errors(
                &validate_port(&port(bad, "10.0.0.2")),
                &[("metadata.name", ErrorType::Invalid)],
            );
        }
        let errs = validate_port(&port("v100.10-0-0-3", "10.0.0.2"));
        assert!(errs.iter().next().unwrap().detail.contains("v100.10-0-0-2"));
        let mut generated = port("", "10.0.0.2");
        generated.metadata.name = None;
        generated.metadata.generate_name = Some("port-".into());
        assert_errors(
            &validate_port(&generated),
            &[("metadata.name", ErrorType::Required)],
        );
        // Not a subdomain at all: one cause, from the generic name rule.
        assert_errors(
            &validate_port(&port("V100.10-0-0-2", "10.0.0.2")),
            &[("metadata.name", ErrorType::Invalid)],
        );
    }

    #[test]
    fn ip_must_be_canonical_and_usable() {
        for (name, ip) in [
            ("v100.10-0-0-2", "010.0.0.2"),
            ("v100.fd00--2", "FD00::2"),
            ("v100.fd00--2", "fd00:0::2"),
            ("v100.10-0-0-2", "::ffff:10.0.0.2"),
            ("v100.127-0-0-1", "127.0.0.1"),
            ("v100.224-0-0-1", "224.0.0.1"),
            ("v100.64-ff9b--a00-2", "64:ff9b::a00:2"),
            ("v100.10-0-0-2", "10.0.0.2/32"),
        ] {
            assert_errors(
                &validate_port(&port(name, ip)),
                &[("spec.ip", ErrorType::Invalid)],
            );
        }
        let mut empty = port("v100.10-0-0-2", "");
        empty.spec.ip.clear();
        assert_errors(&validate_port(&empty), &[("spec.ip", ErrorType::Required)]);
    }

    #[test]
    fn mac_rules() {
        for bad in [
            "01:00:5e:00:00:01",
            "ff:ff:ff:ff:ff:ff",
            "00:00:00:00:00:00",
            "02:00:0A:00:00:02",
            "02-00-0a-00-00-02",
            "02:00:0a:00:00",
            "zz",
        ] {
            let mut p = port("v100.10-0-0-2", "10.0.0.2");
            p.spec.mac = bad.into();
            assert_errors(&validate_port(&p), &[("spec.mac", ErrorType::Invalid)]);
        }
    }

    #[test]
    fn node_and_pod_fields() {
        let mut p = port("v100.10-0-0-2", "10.0.0.2");
        p.spec.node.clear();
        p.spec.node_ip = "0.0.0.0".into();
        p.spec.pod_namespace.clear();
        assert_errors(
            &validate_port(&p),
            &[
                ("spec.node", ErrorType::Required),
                ("spec.nodeIP", ErrorType::Invalid),
                ("spec.podNamespace", ErrorType::Required),
            ],
        );
        let mut q = port("v100.10-0-0-2", "10.0.0.2");
        q.spec.node = "Node_1".into();
        q.spec.node_ip.clear();
        q.spec.pod_namespace = "a.b".into();
        q.spec.pod_name.clear();
        q.spec.vpc_ref.namespace.clear();
        assert_errors(
            &validate_port(&q),
            &[
                ("spec.vpcRef.namespace", ErrorType::Required),
                ("spec.node", ErrorType::Invalid),
                ("spec.nodeIP", ErrorType::Required),
                ("spec.podNamespace", ErrorType::Invalid),
                ("spec.podName", ErrorType::Required),
            ],
        );
    }

    #[test]
    fn cluster_scoped() {
        let mut p = port("v100.10-0-0-2", "10.0.0.2");
        p.metadata.namespace = Some("tenant-a".into());
        assert_errors(
            &validate_port(&p),
            &[("metadata.namespace", ErrorType::Forbidden)],
        );
    }

    #[test]
    fn ip_and_vpc_ref_are_immutable() {
        let old = port("v100.10-0-0-2", "10.0.0.2");
        let mut moved = old.clone();
        moved.spec.node = "node-2".into();
        moved.spec.node_ip = "192.168.1.11".into();
        moved.spec.pod_name = "web-1".into();
        assert_errors(&validate_port_update(&moved, &old), &[]);

        let mut changed = old.clone();
        changed.spec.ip = "10.0.0.3".into();
        changed.spec.vpc_ref.name = "green".into();
        changed.spec.vpc_ref.namespace = "tenant-b".into();
        assert_errors(
            &validate_port_update(&changed, &old),
            &[
                // The name no longer claims the new ip, either.
                ("metadata.name", ErrorType::Invalid),
                ("spec.ip", ErrorType::Invalid),
                ("spec.vpcRef.namespace", ErrorType::Invalid),
                ("spec.vpcRef.name", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn dhcp_is_checked_at_its_path_and_may_change_on_update() {
        let old = port("v100.10-0-0-2", "10.0.0.2");
        let mut new = old.clone();
        new.spec.dhcp = Some(Box::new(cozyplane_apis::v1alpha1::GuestConfig {
            dns_servers: vec!["10.0.0.53".into()],
            lease_seconds: 600,
            ..Default::default()
        }));
        assert_errors(&validate_port_update(&new, &old), &[]);
        assert_errors(&validate_port_update(&old, &new), &[]);
        new.spec.dhcp.as_mut().unwrap().dns_servers.push("bad".into());
        assert_errors(
            &validate_port(&new),
            &[("spec.dhcp.dnsServers[1]", ErrorType::Invalid)],
        );
    }

    proptest! {
        #[test]
        fn random_strings_never_panic(name in "\\PC{0,60}", ip in "\\PC{0,45}", mac in "\\PC{0,20}", node in "\\PC{0,60}") {
            let mut p = port(&name, &ip);
            p.spec.mac = mac;
            p.spec.node = node;
            p.spec.node_ip = ip.clone();
            let _ = validate_port(&p);
        }

        #[test]
        fn claim_like_names_never_panic(name in "s?v[0-9]{0,9}\\.[0-9a-f:.-]{0,40}", ip in "[0-9a-f:.]{0,40}", mac in "[0-9a-fA-F:-]{0,20}") {
            let mut p = port(&name, &ip);
            p.spec.mac = mac;
            let _ = validate_port(&p);
        }

        #[test]
        fn every_generated_claim_is_accepted(vni in 100u32..(1 << 23), host in 2u8..255) {
            let ip = std::net::IpAddr::from([10, 1, 2, host]);
            let name = cozyplane_apis::net::port_name(vni, ip);
            let errs = validate_port(&port(&name, &ip.to_string()));
            prop_assert!(errs.is_empty(), "{:?}", errs);
        }
    }
}
