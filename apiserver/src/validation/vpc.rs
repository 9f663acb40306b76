//! `VPC`: name, address ranges and MTU.
//!
//! Rules (the Go server checked none of them):
//! - `metadata.name` is a DNS-1123 label: VPC names are written into label values
//!   (`sdn.cozystack.io/vpc` on Ports) and referenced by `vpcRef`s, which are DNS labels;
//! - `spec.cidrs` is required; each entry is a canonical range (`10.0.0.0/24`, not
//!   `10.0.0.1/24` or `010.0.0.0/24`; the message names the canonical form); an IPv4
//!   range is at most /30 and an IPv6 range at most /126 long (room for the network address,
//!   the `.1` gateway leg and at least one Port); no range touches a reserved range (loopback,
//!   link-local, multicast, the NAT64 prefix the datapath stores IPv4 in, …);
//! - at most [`MAX_RANGES_PER_FAMILY`] ranges per family (secondary ranges, as a public cloud's
//!   secondary CIDR blocks): every range is routed, and Port IPAM fills them in the listed
//!   order. No two ranges of one VPC repeat or overlap (an address must name one range);
//! - on update, a range that still holds allocated addresses (Ports, ServiceVIPs) may not be
//!   removed or shrunk so that they fall outside every range: [`validate_vpc_ranges_in_use`],
//!   fed by the server with the VPC's address claims;
//! - `spec.mtu` is 0 (the node's default) or between [`MIN_MTU`] and [`MAX_MTU`];
//! - `spec.dhcp`, when set, follows [`super::dhcp`];
//! - `spec.dns64` needs an IPv6 range in `spec.cidrs` (`Forbidden` otherwise): it synthesizes
//!   AAAA records for the VPC's IPv6 pods, and a VPC without IPv6 has none. Turning it on or
//!   off is an update like any other.
//!
//! The spec stays mutable, as in the Go server. Nothing is defaulted: `mtu: 0` means "the node
//! default" and is resolved per node by the agent, so storing a number would be wrong.

use std::net::IpAddr;

use cozyplane_apis::net::{IpFamily, IpNet, cidrs_overlap, parse_cidr};
use cozyplane_apis::v1alpha1::{VPC, VPCSpec};

use super::common;
use super::field::{FieldError, FieldErrors, FieldPath};
use super::meta::{NameRule, validate_object_meta_named, validate_object_meta_update};

/// The smallest MTU a VPC may set: the IPv6 minimum link MTU (RFC 8200).
pub const MIN_MTU: i32 = 1280;
/// The largest MTU a VPC may set: a jumbo frame.
pub const MAX_MTU: i32 = 9000;
/// The longest IPv4 prefix of a VPC range (4 addresses).
pub const MAX_IPV4_PREFIX: u8 = 30;
/// The longest IPv6 prefix of a VPC range (4 addresses).
pub const MAX_IPV6_PREFIX: u8 = 126;
/// How many ranges of one family a VPC may hold.
pub const MAX_RANGES_PER_FAMILY: usize = 5;
/// Holders named in a "range in use" message; the rest are counted.
const HOLDERS_NAMED: usize = 3;

/// Validates a new VPC: metadata and spec.
pub fn validate_vpc(vpc: &VPC) -> FieldErrors {
    let mut errs = validate_object_meta_named(&vpc.metadata, true, NameRule::Dns1123Label);
    errs.extend(validate_vpc_spec(&vpc.spec, &FieldPath::new("spec")));
    errs
}

/// Validates an update of a VPC: the create rules and the metadata update rules; the spec is
/// mutable.
pub fn validate_vpc_update(new: &VPC, old: &VPC) -> FieldErrors {
    let mut errs = validate_vpc(new);
    errs.extend(validate_object_meta_update(&new.metadata, &old.metadata));
    errs
}

/// Validates a VPC spec at `path`.
pub fn validate_vpc_spec(spec: &VPCSpec, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let cidrs_path = path.child("cidrs");
    if spec.cidrs.is_empty() {
        errs.push(FieldError::required(
            cidrs_path.clone(),
            "at least one address range (IPv4 and/or IPv6)",
        ));
    }
    let mut earlier: Vec<(usize, IpNet)> = Vec::new();
    for (i, text) in spec.cidrs.iter().enumerate() {
        let p = cidrs_path.index(i);
        let Some(net) = common::canonical_cidr(&mut errs, p.clone(), text) else {
            continue;
        };
        let family = IpFamily::of_net(&net);
        let max = match family {
            IpFamily::V4 => MAX_IPV4_PREFIX,
            IpFamily::V6 => MAX_IPV6_PREFIX,
        };
        if net.prefix_len() > max {
            errs.push(FieldError::invalid(
                p.clone(),
                text,
                format!(
                    "an {family} range must have a prefix length of at most {max}, to hold the network \
                     address, the gateway and at least one Port"
                ),
            ));
        } else if let Some(msg) = common::reserved_overlap(&net) {
            errs.push(FieldError::invalid(p.clone(), text, msg));
        } else if earlier.iter().any(|(_, other)| *other == net) {
            errs.push(FieldError::duplicate(p.clone(), text));
        } else if let Some((j, other)) = earlier.iter().find(|(_, other)| cidrs_overlap(other, &net)) {
            errs.push(FieldError::invalid(
                p.clone(),
                text,
                format!("overlaps {} ({other})", cidrs_path.index(*j)),
            ));
        } else {
            let same: Vec<usize> = earlier
                .iter()
                .filter(|(_, other)| IpFamily::of_net(other) == family)
                .map(|(j, _)| *j)
                .collect();
            if same.len() >= MAX_RANGES_PER_FAMILY {
                errs.push(FieldError::invalid(
                    p.clone(),
                    text,
                    format!(
                        "a VPC has at most {MAX_RANGES_PER_FAMILY} {family} ranges, and {} already hold \
                         {MAX_RANGES_PER_FAMILY}",
                        same.iter()
                            .map(|j| cidrs_path.index(*j).to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
                continue; // one cause per extra range, each naming the first five
            }
        }
        earlier.push((i, net));
    }
    if spec.mtu != 0 && !(MIN_MTU..=MAX_MTU).contains(&spec.mtu) {
        errs.push(FieldError::invalid_int(
            path.child("mtu"),
            spec.mtu.into(),
            format!("must be 0 (the node default) or between {MIN_MTU} and {MAX_MTU}, inclusive"),
        ));
    }
    if let Some(dhcp) = &spec.dhcp {
        errs.extend(super::dhcp::validate_guest_config(dhcp, &path.child("dhcp")));
    }
    // A range that does not parse has its own cause; any IPv6 one, even a refused one, is
    // enough not to add this one.
    let has_ipv6 = spec
        .cidrs
        .iter()
        .filter_map(|c| parse_cidr(c).ok())
        .any(|n| IpFamily::of_net(&n) == IpFamily::V6);
    if spec.dns64 && !has_ipv6 {
        errs.push(FieldError::forbidden(
            path.child("dns64"),
            "DNS64 synthesizes AAAA records for IPv6 clients: the VPC needs an IPv6 range in spec.cidrs",
        ));
    }
    errs
}

/// The ranges of `old` that an update to `new` takes away from addresses still allocated in
/// them: each such range is `Forbidden` at its index in `old` (`spec.cidrs[1]`), naming the
/// holders. `held` are the VPC's address claims with their holders (`Port v100.10-1-0-2`). A
/// range removed, or replaced by a smaller one, is fine as long as every held address of it
/// stays inside some range of `new`; a reordering changes nothing.
pub fn validate_vpc_ranges_in_use(new: &VPCSpec, old: &VPCSpec, held: &[(IpAddr, String)]) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let kept: Vec<IpNet> = new.cidrs.iter().filter_map(|c| parse_cidr(c).ok()).collect();
    let path = FieldPath::new("spec").child("cidrs");
    for (i, text) in old.cidrs.iter().enumerate() {
        let Ok(net) = parse_cidr(text) else { continue };
        let mut orphans: Vec<&(IpAddr, String)> = held
            .iter()
            .filter(|(ip, _)| net.contains(ip) && !kept.iter().any(|k| k.contains(ip)))
            .collect();
        if orphans.is_empty() {
            continue;
        }
        orphans.sort();
        let mut named: Vec<String> = orphans
            .iter()
            .take(HOLDERS_NAMED)
            .map(|(ip, holder)| format!("{holder} ({ip})"))
            .collect();
        if orphans.len() > HOLDERS_NAMED {
            named.push(format!("{} more", orphans.len() - HOLDERS_NAMED));
        }
        errs.push(FieldError::forbidden(
            path.index(i),
            format!(
                "range {text} still holds {} allocated address{} outside the new ranges: {}; delete \
                 them before removing or shrinking the range",
                orphans.len(),
                if orphans.len() == 1 { "" } else { "es" },
                named.join(", ")
            ),
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::validation::ErrorType;
    use crate::validation::test_util::assert_errors;

    fn vpc(cidrs: &[&str], mtu: i32) -> VPC {
        let mut v = VPC::new(
            "blue",
            VPCSpec {
                cidrs: cidrs.iter().map(|c| (*c).to_owned()).collect(),
                mtu,
                dhcp: None,
                dns64: false,
            },
        );
        v.metadata.namespace = Some("tenant-a".into());
        v
    }

    #[test]
    fn dhcp_is_checked_at_its_path() {
        let mut v = vpc(&["10.0.0.0/24"], 0);
        v.spec.dhcp = Some(Box::new(cozyplane_apis::v1alpha1::GuestConfig {
            mtu: 100,
            ..Default::default()
        }));
        assert_errors(&validate_vpc(&v), &[("spec.dhcp.mtu", ErrorType::Invalid)]);
        v.spec.dhcp = Some(Default::default());
        assert_errors(&validate_vpc(&v), &[]);
    }

    #[test]
    fn dns64_needs_an_ipv6_range() {
        let mut v = vpc(&["10.0.0.0/24"], 0);
        v.spec.dns64 = true;
        let errs = validate_vpc(&v);
        assert_errors(&errs, &[("spec.dns64", ErrorType::Forbidden)]);
        assert!(
            errs.iter()
                .next()
                .unwrap()
                .message()
                .contains("needs an IPv6 range"),
            "{errs:?}"
        );
        // IPv6-only and dual-stack VPCs may turn it on.
        for cidrs in [&["fd00:10::/64"][..], &["10.0.0.0/24", "fd00:10::/64"]] {
            let mut v = vpc(cidrs, 0);
            v.spec.dns64 = true;
            assert_errors(&validate_vpc(&v), &[]);
        }
        // On update it may be turned on and off; dropping the last IPv6 range while it is on
        // is refused at spec.dns64.
        let old = vpc(&["10.0.0.0/24", "fd00:10::/64"], 0);
        let mut on = old.clone();
        on.spec.dns64 = true;
        assert_errors(&validate_vpc_update(&on, &old), &[]);
        assert_errors(&validate_vpc_update(&old, &on), &[]);
        let mut v4_only = on.clone();
        v4_only.spec.cidrs.pop();
        assert_errors(
            &validate_vpc_update(&v4_only, &on),
            &[("spec.dns64", ErrorType::Forbidden)],
        );
    }

    #[test]
    fn valid_vpcs_pass() {
        assert_errors(&validate_vpc(&vpc(&["10.0.0.0/24"], 0)), &[]);
        assert_errors(&validate_vpc(&vpc(&["10.0.0.0/24", "fd00:10::/64"], 1500)), &[]);
        assert_errors(&validate_vpc(&vpc(&["fd00::/126", "192.168.0.0/30"], 9000)), &[]);
        assert_errors(&validate_vpc(&vpc(&["10.0.0.0/8"], 1280)), &[]);
    }

    #[test]
    fn cidrs_are_required() {
        assert_errors(
            &validate_vpc(&vpc(&[], 0)),
            &[("spec.cidrs", ErrorType::Required)],
        );
    }

    #[test]
    fn cidrs_must_be_canonical() {
        let errs = validate_vpc(&vpc(&["10.0.0.1/8"], 0));
        assert_errors(&errs, &[("spec.cidrs[0]", ErrorType::Invalid)]);
        assert_eq!(
            errs.iter().next().unwrap().message(),
            r#"spec.cidrs[0]: Invalid value: "10.0.0.1/8": must be canonical (10.0.0.0/8)"#
        );
        for bad in [
            "FD00::/64",
            "fd00:0::/64",
            "10.0.0.0/024",
            "10.0.0.0",
            "10.0.0.0/33",
            "x",
        ] {
            assert_errors(
                &validate_vpc(&vpc(&[bad], 0)),
                &[("spec.cidrs[0]", ErrorType::Invalid)],
            );
        }
        assert_errors(
            &validate_vpc(&vpc(&[""], 0)),
            &[("spec.cidrs[0]", ErrorType::Required)],
        );
    }

    #[test]
    fn prefix_lengths_and_reserved_ranges() {
        for bad in [
            "10.0.0.0/31",
            "10.0.0.1/32",
            "fd00::/127",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "0.0.0.0/0",
            "224.0.0.0/24",
            "64:ff9b::/96",
            "fe80::/64",
            "::ffff:10.0.0.0/120",
        ] {
            let errs = validate_vpc(&vpc(&[bad], 0));
            // A non-canonical spelling may be reported as such instead; either way one cause.
            assert_errors(&errs, &[("spec.cidrs[0]", ErrorType::Invalid)]);
        }
    }

    #[test]
    fn ranges_may_not_repeat_or_overlap() {
        assert_errors(
            &validate_vpc(&vpc(&["10.0.0.0/24", "10.0.0.0/24"], 0)),
            &[("spec.cidrs[1]", ErrorType::Duplicate)],
        );
        let errs = validate_vpc(&vpc(&["10.0.0.0/16", "10.0.1.0/24"], 0));
        assert_errors(&errs, &[("spec.cidrs[1]", ErrorType::Invalid)]);
        assert!(
            errs.iter()
                .next()
                .unwrap()
                .detail
                .contains("overlaps spec.cidrs[0]")
        );
        // The overlap is found whichever range comes first, and past other ranges.
        let errs = validate_vpc(&vpc(
            &["10.1.0.0/24", "fd00::/64", "10.0.1.0/24", "10.0.0.0/16"],
            0,
        ));
        assert_errors(&errs, &[("spec.cidrs[3]", ErrorType::Invalid)]);
        assert!(
            errs.iter()
                .next()
                .unwrap()
                .detail
                .contains("overlaps spec.cidrs[2]")
        );
        assert_errors(
            &validate_vpc(&vpc(&["fd00::/64", "fd00:0:0:0:8000::/65"], 0)),
            &[("spec.cidrs[1]", ErrorType::Invalid)],
        );
    }

    #[test]
    fn up_to_five_ranges_per_family() {
        let five4 = [
            "10.0.0.0/24",
            "10.1.0.0/24",
            "10.2.0.0/24",
            "10.3.0.0/24",
            "10.4.0.0/24",
        ];
        let five6 = ["fd00::/64", "fd01::/64", "fd02::/64", "fd03::/64", "fd04::/64"];
        let all: Vec<&str> = five4.iter().chain(five6.iter()).copied().collect();
        assert_errors(&validate_vpc(&vpc(&all, 0)), &[]);
        // A sixth of a family is refused at its own index; the other family is unaffected.
        let mut six = all.clone();
        six.insert(5, "10.5.0.0/24");
        let errs = validate_vpc(&vpc(&six, 0));
        assert_errors(&errs, &[("spec.cidrs[5]", ErrorType::Invalid)]);
        let detail = &errs.iter().next().unwrap().detail;
        assert!(detail.contains("at most 5 IPv4 ranges"), "{detail}");
        assert!(detail.contains("spec.cidrs[0], spec.cidrs[1]"), "{detail}");
        let mut six6 = five6.to_vec();
        six6.push("fd05::/64");
        six6.push("fd06::/64");
        assert_errors(
            &validate_vpc(&vpc(&six6, 0)),
            &[
                ("spec.cidrs[5]", ErrorType::Invalid),
                ("spec.cidrs[6]", ErrorType::Invalid),
            ],
        );
    }

    fn held(entries: &[(&str, &str)]) -> Vec<(IpAddr, String)> {
        entries
            .iter()
            .map(|(ip, who)| (ip.parse().unwrap(), (*who).to_owned()))
            .collect()
    }

    #[test]
    fn a_used_range_cannot_be_removed() {
        let old = vpc(&["10.0.0.0/30", "10.1.0.0/24", "fd00::/64"], 0).spec;
        let h = held(&[
            ("10.0.0.2", "Port v100.10-0-0-2"),
            ("10.1.0.3", "Port v100.10-1-0-3"),
            ("10.1.0.2", "Port v100.10-1-0-2"),
        ]);
        let new = vpc(&["10.0.0.0/30", "fd00::/64"], 0).spec;
        let errs = validate_vpc_ranges_in_use(&new, &old, &h);
        assert_errors(&errs, &[("spec.cidrs[1]", ErrorType::Forbidden)]);
        let msg = errs.iter().next().unwrap().message();
        assert!(
            msg.contains("10.1.0.0/24 still holds 2 allocated addresses")
                && msg.contains("Port v100.10-1-0-2 (10.1.0.2), Port v100.10-1-0-3 (10.1.0.3)"),
            "{msg}"
        );
        // Shrinking a range past a held address is a removal of that part.
        let new = vpc(&["10.0.0.0/30", "10.1.0.0/31", "fd00::/64"], 0).spec;
        assert_errors(
            &validate_vpc_ranges_in_use(&new, &old, &h),
            &[("spec.cidrs[1]", ErrorType::Forbidden)],
        );
        // Both used ranges gone: both named, holders past the third counted.
        let many = held(&[
            ("10.0.0.2", "Port a"),
            ("10.1.0.2", "Port b"),
            ("10.1.0.3", "Port c"),
            ("10.1.0.4", "ServiceVIP d"),
            ("10.1.0.5", "Port e"),
        ]);
        let errs = validate_vpc_ranges_in_use(&vpc(&["fd00::/64"], 0).spec, &old, &many);
        assert_errors(
            &errs,
            &[
                ("spec.cidrs[0]", ErrorType::Forbidden),
                ("spec.cidrs[1]", ErrorType::Forbidden),
            ],
        );
        assert!(errs.iter().any(|e| e.detail.contains("1 more")));
    }

    #[test]
    fn an_unused_range_can_be_removed_and_ranges_reordered() {
        let old = vpc(&["10.0.0.0/30", "10.1.0.0/24", "10.2.0.0/24"], 0).spec;
        let h = held(&[("10.0.0.2", "Port a"), ("10.1.0.2", "Port b")]);
        let unused_gone = vpc(&["10.0.0.0/30", "10.1.0.0/24"], 0).spec;
        assert_errors(&validate_vpc_ranges_in_use(&unused_gone, &old, &h), &[]);
        let reordered = vpc(&["10.2.0.0/24", "10.1.0.0/24", "10.0.0.0/30"], 0).spec;
        assert_errors(&validate_vpc_ranges_in_use(&reordered, &old, &h), &[]);
        // A held address covered by a new, larger range stays valid.
        let grown = vpc(&["10.0.0.0/8"], 0).spec;
        assert_errors(&validate_vpc_ranges_in_use(&grown, &old, &h), &[]);
        assert_errors(&validate_vpc_ranges_in_use(&old, &old, &h), &[]);
    }

    #[test]
    fn mtu_range() {
        for bad in [-1, 1, 1279, 9001, i32::MAX] {
            assert_errors(
                &validate_vpc(&vpc(&["10.0.0.0/24"], bad)),
                &[("spec.mtu", ErrorType::Invalid)],
            );
        }
    }

    #[test]
    fn name_is_a_dns_label() {
        let mut v = vpc(&["10.0.0.0/24"], 0);
        v.metadata.name = Some("blue.green".into());
        assert_errors(&validate_vpc(&v), &[("metadata.name", ErrorType::Invalid)]);
    }

    #[test]
    fn all_problems_are_reported() {
        let mut v = vpc(&["10.0.0.1/24", "fd00::/64", "fd00::/48", "bogus"], 100);
        v.metadata.namespace = None;
        assert_errors(
            &validate_vpc(&v),
            &[
                ("metadata.namespace", ErrorType::Required),
                ("spec.cidrs[0]", ErrorType::Invalid),
                ("spec.cidrs[2]", ErrorType::Invalid),
                ("spec.cidrs[3]", ErrorType::Invalid),
                ("spec.mtu", ErrorType::Invalid),
            ],
        );
    }

    #[test]
    fn update_allows_spec_changes_but_not_renames() {
        let old = vpc(&["10.0.0.0/24"], 0);
        let new = vpc(&["10.1.0.0/24", "fd00::/64"], 1400);
        assert_errors(&validate_vpc_update(&new, &old), &[]);
        let mut renamed = new.clone();
        renamed.metadata.name = Some("green".into());
        assert_errors(
            &validate_vpc_update(&renamed, &old),
            &[("metadata.name", ErrorType::Invalid)],
        );
    }

    proptest! {
        #[test]
        fn random_cidrs_never_panic(cidrs in proptest::collection::vec("\\PC{0,45}", 0..4), mtu: i32) {
            let refs: Vec<&str> = cidrs.iter().map(String::as_str).collect();
            let _ = validate_vpc(&vpc(&refs, mtu));
        }

        #[test]
        fn address_like_cidrs_never_panic(a: [u8; 4], len in 0u8..40, six: [u16; 8]) {
            let v4 = format!("{}.{}.{}.{}/{len}", a[0], a[1], a[2], a[3]);
            let v6 = format!("{}/{}", std::net::Ipv6Addr::from(six), len * 4);
            let _ = validate_vpc(&vpc(&[&v4, &v6, &v4], 0));
        }
    }
}
