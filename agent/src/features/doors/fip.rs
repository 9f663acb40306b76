//! Floating IPs turned into the datapath's 1:1 NAT maps (`bpf/lib/fip.h`):
//! `sdn_fip_in[public] → {net, target}` and `sdn_fip_out[{net, target}] → public`, on every
//! node (whichever node the address is attracted to delivers it). The ranges no door ever
//! NATs to are `sdn_internal` ([`crate::core::watch::internal`]).
//!
//! A FloatingIP is programmed when
//! * it has an address (`status.address`, filled from its owned Service by the server),
//! * its target is live: a Port of its VPC holds `spec.target` (the Port also says where
//!   the target is; delivery finds it through `sdn_endpoints`/`sdn_remotes`),
//! * it is exclusive: of the FloatingIPs of one namespace for the same `{vpc, target}`, the
//!   oldest (creation time, then name) wins; the others get nothing,
//! * address and target are of one family (no NAT46).
//!
//! The watches live in [`crate::features::doors`]; this module is the decision and the writes.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use cozyplane_apis::v1alpha1::FloatingIP;
use cozyplane_bpf::maps::fip_in::FipInMap;
use cozyplane_bpf::maps::fip_out::FipOutMap;

use crate::core::watch::{name_of, pinned as read_pinned, plan};

/// A VPC or an object by `(namespace, name)`.
pub(crate) type ObjKey = (String, String);

/// What the decision needs of a FloatingIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FipRow {
    /// `(namespace, spec.vpcRef.name)`.
    pub(crate) vpc: ObjKey,
    /// `spec.target`, if it parses.
    pub(crate) target: Option<IpAddr>,
    /// `status.address`, if set and parseable.
    pub(crate) address: Option<IpAddr>,
    /// Age order: creation time (RFC 3339 text sorts by time), then name.
    pub(crate) age: (String, String),
}

pub(crate) fn fip_row(f: &FloatingIP) -> Option<(ObjKey, FipRow)> {
    if f.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let key = name_of(&f.metadata);
    let address = f.status.as_ref().and_then(|s| s.address.parse::<IpAddr>().ok());
    Some((
        key.clone(),
        FipRow {
            vpc: (key.0.clone(), f.spec.vpc_ref.name.clone()),
            target: f.spec.target.parse().ok(),
            address,
            age: (age_of(&f.metadata), key.1),
        },
    ))
}

/// The creation time as sortable text (`""` sorts first: an object the API has not
/// stamped is taken as oldest, which only a test can produce).
pub(crate) fn age_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    m.creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

/// The Floating IP entries this node should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desired {
    /// public → (net, target).
    pub(crate) inbound: HashMap<IpAddr, (u32, IpAddr)>,
    /// (net, target) → public.
    pub(crate) outbound: HashMap<(u32, IpAddr), IpAddr>,
}

/// The entries for `fips`, given each VPC's VNI and the live Ports `(vpc, ip)`.
pub(crate) fn desired<'a>(
    vnis: &HashMap<ObjKey, u32>,
    ports: impl IntoIterator<Item = (&'a ObjKey, IpAddr)>,
    fips: &HashMap<ObjKey, FipRow>,
) -> Desired {
    let live: HashSet<(&ObjKey, IpAddr)> = ports.into_iter().collect();
    // Oldest first: the first FloatingIP of a {vpc, target} wins it, and an address
    // claimed twice (two Services cannot share one, but status is only text) stays with
    // the older.
    let mut rows: Vec<&FipRow> = fips.values().collect();
    rows.sort_by(|a, b| a.age.cmp(&b.age));
    let mut d = Desired::default();
    let mut claimed: HashSet<(&ObjKey, IpAddr)> = HashSet::new();
    for r in rows {
        let Some(target) = r.target else { continue };
        if !claimed.insert((&r.vpc, target)) {
            continue;
        }
        let (Some(address), Some(&vni)) = (r.address, vnis.get(&r.vpc)) else {
            continue;
        };
        // Same family, or an IPv4 address of an IPv6 target, which the datapath translates
        // (NAT46/64, lib/fip.h); never an IPv6 address of an IPv4 target.
        let pairs = address.is_ipv4() == target.is_ipv4() || address.is_ipv4();
        if vni == 0 || !pairs || !live.contains(&(&r.vpc, target)) {
            continue;
        }
        if d.inbound.contains_key(&address) {
            tracing::warn!(%address, "two FloatingIPs claim one address; the older keeps it");
            continue;
        }
        d.inbound.insert(address, (vni, target));
        d.outbound.insert((vni, target), address);
    }
    d
}

/// What is pinned now: adopted at start, so a restart removes only what the API lacks.
pub(crate) fn pinned(pin_dir: &Path) -> Desired {
    Desired {
        inbound: read_pinned(FipInMap::from_pin(pin_dir), FipInMap::entries).collect(),
        outbound: read_pinned(FipOutMap::from_pin(pin_dir), FipOutMap::entries).collect(),
    }
}

/// Writes the difference. Removals first for the outbound half (a target that lost its
/// address stops wearing it at once), the inbound half after the new outbound entries.
pub(crate) fn sync(pin_dir: &Path, want: &Desired, applied: &mut Desired, prunable: bool) {
    let (Ok(mut inbound), Ok(mut outbound)) = (FipInMap::from_pin(pin_dir), FipOutMap::from_pin(pin_dir))
    else {
        tracing::warn!(
            "sdn_fip_in/sdn_fip_out are not pinned under {}",
            pin_dir.display()
        );
        return;
    };
    let (write_out, remove_out) = plan(&want.outbound, &applied.outbound, |_| prunable);
    for (net, ip) in remove_out {
        match outbound.remove(net, ip) {
            Ok(()) => {
                applied.outbound.remove(&(net, ip));
            }
            Err(e) => tracing::warn!(net, %ip, "sdn_fip_out remove: {e}"),
        }
    }
    let (write_in, remove_in) = plan(&want.inbound, &applied.inbound, |_| prunable);
    for public in remove_in {
        match inbound.remove(public) {
            Ok(()) => {
                applied.inbound.remove(&public);
                tracing::info!(%public, "floating IP removed");
            }
            Err(e) => tracing::warn!(%public, "sdn_fip_in remove: {e}"),
        }
    }
    for ((net, ip), public) in write_out {
        match outbound.upsert(net, ip, public) {
            Ok(()) => {
                applied.outbound.insert((net, ip), public);
            }
            Err(e) => tracing::warn!(net, %ip, "sdn_fip_out upsert: {e}"),
        }
    }
    for (public, (net, ip)) in write_in {
        match inbound.upsert(public, net, ip) {
            Ok(()) => {
                applied.inbound.insert(public, (net, ip));
                tracing::info!(%public, net, target = %ip, "floating IP programmed");
            }
            Err(e) => tracing::warn!(%public, "sdn_fip_in upsert: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjKey {
        (ns.into(), name.into())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn row(vpc: &str, target: &str, address: Option<&str>, age: (&str, &str)) -> FipRow {
        FipRow {
            vpc: key("t1", vpc),
            target: target.parse().ok(),
            address: address.map(ip),
            age: (age.0.into(), age.1.into()),
        }
    }

    fn vnis() -> HashMap<ObjKey, u32> {
        HashMap::from([(key("t1", "a"), 100), (key("t1", "b"), 200)])
    }

    fn live(ports: &[(&str, &str)]) -> Vec<(ObjKey, IpAddr)> {
        ports.iter().map(|(v, a)| (key("t1", v), ip(a))).collect()
    }

    fn run(fips: &[(&str, FipRow)], ports: &[(&str, &str)]) -> Desired {
        let fips: HashMap<ObjKey, FipRow> = fips.iter().map(|(n, r)| (key("t1", n), r.clone())).collect();
        let ports = live(ports);
        desired(&vnis(), ports.iter().map(|(k, a)| (k, *a)), &fips)
    }

    #[test]
    fn an_addressed_floating_ip_of_a_live_target_is_programmed_both_ways() {
        let d = run(
            &[(
                "f",
                row(
                    "a",
                    "10.0.0.5",
                    Some("203.0.113.10"),
                    ("2026-01-01T00:00:00Z", "f"),
                ),
            )],
            &[("a", "10.0.0.5")],
        );
        assert_eq!(
            d.inbound,
            HashMap::from([(ip("203.0.113.10"), (100, ip("10.0.0.5")))])
        );
        assert_eq!(
            d.outbound,
            HashMap::from([((100, ip("10.0.0.5")), ip("203.0.113.10"))])
        );
    }

    #[test]
    fn an_ipv4_address_of_an_ipv6_target_is_programmed_for_translation() {
        let d = run(
            &[("f", row("a", "fd00::5", Some("203.0.113.10"), ("1", "f")))],
            &[("a", "fd00::5")],
        );
        assert_eq!(
            d.inbound,
            HashMap::from([(ip("203.0.113.10"), (100, ip("fd00::5")))])
        );
        assert_eq!(
            d.outbound,
            HashMap::from([((100, ip("fd00::5")), ip("203.0.113.10"))])
        );
    }

    #[test]
    fn no_address_no_live_target_or_a_family_mismatch_programs_nothing() {
        let cases = [
            row("a", "10.0.0.5", None, ("1", "f")),
            row("a", "10.0.0.6", Some("203.0.113.10"), ("1", "f")),
            row("a", "10.0.0.5", Some("2001:db8::10"), ("1", "f")),
            row("c", "10.0.0.5", Some("203.0.113.10"), ("1", "f")),
        ];
        for r in cases {
            assert_eq!(
                run(&[("f", r.clone())], &[("a", "10.0.0.5"), ("c", "10.0.0.5")]),
                Desired::default(),
                "{r:?}"
            );
        }
    }

    #[test]
    fn the_older_floating_ip_for_a_target_wins_and_the_loser_gets_nothing() {
        let older = row(
            "a",
            "10.0.0.5",
            Some("203.0.113.10"),
            ("2026-01-01T00:00:00Z", "z"),
        );
        let newer = row(
            "a",
            "10.0.0.5",
            Some("203.0.113.11"),
            ("2026-01-02T00:00:00Z", "a"),
        );
        let d = run(&[("z", older), ("a", newer)], &[("a", "10.0.0.5")]);
        assert_eq!(
            d.inbound.keys().copied().collect::<Vec<_>>(),
            [ip("203.0.113.10")]
        );
        // The winner is decided by age even when it has no address yet: the loser waits.
        let older = row("a", "10.0.0.5", None, ("2026-01-01T00:00:00Z", "z"));
        let newer = row(
            "a",
            "10.0.0.5",
            Some("203.0.113.11"),
            ("2026-01-02T00:00:00Z", "a"),
        );
        assert_eq!(
            run(&[("z", older), ("a", newer)], &[("a", "10.0.0.5")]),
            Desired::default()
        );
        // The same address in another VPC is another target.
        let a = row("a", "10.0.0.5", Some("203.0.113.10"), ("1", "x"));
        let b = row("b", "10.0.0.5", Some("203.0.113.12"), ("2", "y"));
        let d = run(&[("x", a), ("y", b)], &[("a", "10.0.0.5"), ("b", "10.0.0.5")]);
        assert_eq!(d.outbound.len(), 2);
    }
}
