//! Checks shared by several kinds: references, addresses, ranges, protocols, ports, claim
//! names and immutability. Each pushes its errors into the caller's list and, where useful,
//! returns the parsed value so the caller can check relations between fields.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cozyplane_apis::net::{self, Claim, ClaimKind, IpNet, Ipv4Net, Ipv6Net, cidrs_overlap};
use cozyplane_apis::v1alpha1::{LocalVPCRef, VPCRef, protocol};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::field::{FieldError, FieldErrors, FieldPath};
use super::format;

/// The lowest VNI the controller allocates to a VPC.
pub(crate) const MIN_VPC_VNI: u32 = 100;
/// The highest VNI a VPC can have: VNIs are 24 bits and the top bit marks gateway traffic.
pub(crate) const MAX_VPC_VNI: u32 = (1 << 23) - 1;

/// Lowest and highest port numbers of TCP and UDP.
pub(crate) const MIN_PORT: i32 = 1;
pub(crate) const MAX_PORT: i32 = 65535;

/// Address ranges that no VPC range, VPC address or rule endpoint may touch, with why.
///
/// - IPv4 `0.0.0.0/8`, `127.0.0.0/8`, `224.0.0.0/4` and `240.0.0.0/4` (incl. broadcast),
///   IPv6 `::/128`, `::1/128`, `ff00::/8`: not unicast addresses of a host;
/// - `169.254.0.0/16` and `fe80::/10`: link-local; pods use `169.254.1.1` / `fe80::1` as their
///   gateway and ServiceVIP hairpin uses `169.254.42.1` / `fe80::2a01`;
/// - `64:ff9b::/96`: the datapath stores IPv4 addresses there (RFC 6052), so an IPv6 address in
///   it would be taken for IPv4;
/// - `::ffff:0:0/96`: IPv4-mapped IPv6, which the API always writes as IPv4.
fn reserved_ranges() -> [(IpNet, &'static str); 11] {
    let v4 = |a, b, c, d, len| IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len));
    let v6 = |segs: [u16; 8], len| IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::from(segs), len));
    [
        (v4(0, 0, 0, 0, 8), "the 'this network' range"),
        (v4(127, 0, 0, 0, 8), "the loopback range"),
        (
            v4(169, 254, 0, 0, 16),
            "the link-local range, used for pod gateways",
        ),
        (v4(224, 0, 0, 0, 4), "the multicast range"),
        (v4(240, 0, 0, 0, 4), "the reserved range (incl. broadcast)"),
        (v6([0; 8], 128), "the unspecified address"),
        (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "the loopback address"),
        (
            v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96),
            "the IPv4-mapped range (write IPv4 instead)",
        ),
        (
            IpNet::V6(net::nat64::NAT64_PREFIX),
            "the NAT64 range the datapath uses for IPv4 addresses",
        ),
        (
            v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
            "the link-local range, used for pod gateways",
        ),
        (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "the multicast range"),
    ]
}

/// The first reserved range `net` overlaps, as a sentence fragment, e.g. `must not overlap
/// 127.0.0.0/8 (the loopback range)`.
pub(crate) fn reserved_overlap(net: &IpNet) -> Option<String> {
    reserved_ranges()
        .into_iter()
        .find(|(r, _)| cidrs_overlap(r, net))
        .map(|(r, why)| format!("must not overlap {r} ({why})"))
}

/// Like [`reserved_overlap`], for one address.
pub(crate) fn reserved_address(ip: IpAddr) -> Option<String> {
    let net = IpNet::from(ip);
    reserved_ranges()
        .into_iter()
        .find(|(r, _)| r.contains(&net))
        .map(|(r, why)| format!("must not be in {r} ({why})"))
}

/// A required string field in `check`'s format.
pub(crate) fn required_str(
    errs: &mut FieldErrors,
    path: FieldPath,
    value: &str,
    check: fn(&str) -> Result<(), String>,
) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else {
        optional_str(errs, path, value, check);
    }
}

/// An optional string field: empty, or in `check`'s format.
pub(crate) fn optional_str(
    errs: &mut FieldErrors,
    path: FieldPath,
    value: &str,
    check: fn(&str) -> Result<(), String>,
) {
    if !value.is_empty()
        && let Err(msg) = check(value)
    {
        errs.push(FieldError::invalid(path, value, msg));
    }
}

/// A `VPCRef`: namespace and name both required DNS-1123 labels (the format of namespaces and
/// of VPC names).
pub(crate) fn vpc_ref(errs: &mut FieldErrors, r: &VPCRef, path: &FieldPath) {
    required_str(errs, path.child("namespace"), &r.namespace, format::dns1123_label);
    required_str(errs, path.child("name"), &r.name, format::dns1123_label);
}

/// A `LocalVPCRef`: name a required DNS-1123 label.
pub(crate) fn local_vpc_ref(errs: &mut FieldErrors, r: &LocalVPCRef, path: &FieldPath) {
    required_str(errs, path.child("name"), &r.name, format::dns1123_label);
}

/// A required IP address in canonical text form; returns it if valid.
pub(crate) fn canonical_ip(errs: &mut FieldErrors, path: FieldPath, text: &str) -> Option<IpAddr> {
    if text.is_empty() {
        errs.push(FieldError::required(path, ""));
        return None;
    }
    match net::parse_canonical_ip(text) {
        Ok(ip) => Some(ip),
        Err(net::Error::NonCanonicalIp { canonical, .. }) => {
            errs.push(FieldError::invalid(
                path,
                text,
                format!("must be canonical ({})", net::canonical_ip(canonical)),
            ));
            None
        }
        Err(_) => {
            errs.push(FieldError::invalid(
                path,
                text,
                "must be an IPv4 or IPv6 address (e.g. 10.0.0.2 or fd00::2)",
            ));
            None
        }
    }
}

/// A required canonical IP address that can be a host's: not in a [reserved range](reserved_ranges).
pub(crate) fn host_ip(errs: &mut FieldErrors, path: FieldPath, text: &str) -> Option<IpAddr> {
    let ip = canonical_ip(errs, path.clone(), text)?;
    if let Some(msg) = reserved_address(ip) {
        errs.push(FieldError::invalid(path, text, msg));
        return None;
    }
    Some(ip)
}

/// A required address range in canonical form (`10.0.0.0/24`, not `10.0.0.1/24` or
/// `FD00::/64`); returns it if valid.
pub(crate) fn canonical_cidr(errs: &mut FieldErrors, path: FieldPath, text: &str) -> Option<IpNet> {
    if text.is_empty() {
        errs.push(FieldError::required(path, ""));
        return None;
    }
    match net::parse_canonical_cidr(text) {
        Ok(net) => Some(net),
        Err(net::Error::HostBitsSet { canonical, .. } | net::Error::NonCanonicalCidr { canonical, .. }) => {
            errs.push(FieldError::invalid(
                path,
                text,
                format!("must be canonical ({canonical})"),
            ));
            None
        }
        Err(_) => {
            errs.push(FieldError::invalid(
                path,
                text,
                "must be an address range in CIDR notation (e.g. 10.0.0.0/24 or fd00::/64)",
            ));
            None
        }
    }
}

/// A required protocol from `supported`.
pub(crate) fn protocol(errs: &mut FieldErrors, path: FieldPath, value: &str, supported: &[&str]) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !supported.contains(&value) {
        errs.push(FieldError::not_supported(path, value, supported));
    }
}

/// A port number in `min..=65535`; `min` is 0 where 0 means "every port".
pub(crate) fn port_number(errs: &mut FieldErrors, path: FieldPath, port: i32, min: i32) -> bool {
    if (min..=MAX_PORT).contains(&port) {
        true
    } else {
        errs.push(FieldError::invalid_int(
            path,
            port.into(),
            format!("must be between {min} and {MAX_PORT}, inclusive"),
        ));
        false
    }
}

/// Whether `protocol` is ICMP or ICMPv6, whose rule "port" is a message type.
pub(crate) fn is_icmp(protocol: &str) -> bool {
    protocol == protocol::ICMP || protocol == protocol::ICMPV6
}

/// A rule's `port` for `protocol`: an ICMP type in 0–255 for ICMP and ICMPv6 (0: every
/// type), else a port in 0–65535 (0: every port). False (and an error) when out of range.
pub(crate) fn rule_port(errs: &mut FieldErrors, path: FieldPath, protocol: &str, port: i32) -> bool {
    if !is_icmp(protocol) {
        return port_number(errs, path, port, 0);
    }
    let ok = (0..=255).contains(&port);
    if !ok {
        errs.push(FieldError::invalid_int(
            path,
            i64::from(port),
            "must be an ICMP type between 0 and 255 (0: every type)",
        ));
    }
    ok
}

/// `new` must equal `old`.
pub(crate) fn immutable(errs: &mut FieldErrors, path: FieldPath, new: &str, old: &str) {
    if new != old {
        errs.push(FieldError::invalid(path, new, "field is immutable"));
    }
}

/// Both fields of a `VPCRef` are immutable.
pub(crate) fn immutable_vpc_ref(errs: &mut FieldErrors, path: &FieldPath, new: &VPCRef, old: &VPCRef) {
    immutable(errs, path.child("namespace"), &new.namespace, &old.namespace);
    immutable(errs, path.child("name"), &new.name, &old.name);
}

/// `metadata.name` must be the claim of `kind` on `ip` (`v<vni>.<escaped ip>` for a Port,
/// `sv<vni>.<escaped ip>` for a ServiceVIP), with a VPC VNI. Skipped when `errs` already has a
/// problem with the name, so each field gets one cause.
pub(crate) fn claim_name(errs: &mut FieldErrors, meta: &ObjectMeta, kind: ClaimKind, ip: Option<IpAddr>) {
    let path = FieldPath::new("metadata").child("name");
    if errs.has_path(path.as_str()) {
        return;
    }
    let prefix = kind.prefix();
    let example = match ip {
        Some(ip) => match kind {
            ClaimKind::Port => Claim::port(MIN_VPC_VNI, ip).name(),
            ClaimKind::ServiceVIP => Claim::service_vip(MIN_VPC_VNI, ip).name(),
        },
        None => format!("{prefix}{MIN_VPC_VNI}.10-0-0-2"),
    };
    let shape = format!(
        "must be the address claim {prefix}<VNI>.<spec.ip with '.' and ':' replaced by '-'> (e.g. {example})"
    );
    let name = meta.name.as_deref().unwrap_or_default();
    if name.is_empty() {
        // Only generateName is set: a random suffix can never produce the claim.
        errs.push(FieldError::required(path, shape));
        return;
    }
    let claim = match Claim::parse(name) {
        Ok(claim) if claim.kind == kind => claim,
        Ok(_) => {
            errs.push(FieldError::invalid(path, name, shape));
            return;
        }
        Err(net::Error::InvalidClaim { reason, .. }) => {
            errs.push(FieldError::invalid(path, name, format!("{shape}: {reason}")));
            return;
        }
        Err(e) => {
            errs.push(FieldError::invalid(path, name, format!("{shape}: {e}")));
            return;
        }
    };
    if !(MIN_VPC_VNI..=MAX_VPC_VNI).contains(&claim.vni) {
        errs.push(FieldError::invalid(
            path,
            name,
            format!("the VNI must be a VPC's, between {MIN_VPC_VNI} and {MAX_VPC_VNI}"),
        ));
        return;
    }
    if let Some(ip) = ip
        && claim.ip != ip
    {
        let want = Claim { ip, ..claim }.name();
        errs.push(FieldError::invalid(
            path,
            name,
            format!("must be {want}, the claim on spec.ip {}", net::canonical_ip(ip)),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ranges_are_networks() {
        for (net, _) in reserved_ranges() {
            assert_eq!(net, net.trunc(), "{net}");
        }
    }

    #[test]
    fn reserved_checks() {
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        assert!(reserved_overlap(&net("10.0.0.0/8")).is_none());
        assert!(reserved_overlap(&net("fd00::/8")).is_none());
        assert!(reserved_overlap(&net("0.0.0.0/0")).is_some());
        assert!(reserved_overlap(&net("169.254.0.0/24")).is_some());
        assert!(reserved_overlap(&net("64:ff9b::/120")).is_some());
        assert!(reserved_overlap(&net("::/0")).is_some());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(reserved_address(ip("10.0.0.2")).is_none());
        assert!(reserved_address(ip("255.255.255.255")).is_some());
        assert!(reserved_address(ip("::")).is_some());
        assert!(reserved_address(ip("fe80::1")).is_some());
        assert!(reserved_address(ip("2001:db8::1")).is_none());
    }
}
