//! Several ranges per VPC, as allocation sees them: which ranges an address is taken from, in
//! which order, and whether an update may take a range away.
//!
//! A VPC lists up to five ranges per family (`spec.cidrs`); addresses are taken from the
//! ranges of the asked family in the listed order, so a secondary range is used only once the
//! ones before it are full. A range may be removed (or shrunk) only while no address claim of
//! the VPC's VNI lies in the part that goes away; the claims are the only record of what is
//! allocated, so they are what the update is checked against.

use std::net::IpAddr;
use std::sync::Arc;

use cozyplane_apis::ApiKind;
use cozyplane_apis::net::claim::unescape_ip;
use cozyplane_apis::net::{IpFamily, IpNet};
use cozyplane_apis::v1alpha1::VPC;
use cozyplane_storage::{ListOptions, Storage};

use super::kinds::vpc_vni;
use super::{describe_owner, keys, storage_error};
use crate::errors::{ApiError, Result};

/// The ranges to allocate from, in order: those of `family`, or without one, those of the
/// first range's family (a request that names no family gets the VPC's first family).
pub fn in_order(nets: &[IpNet], family: Option<IpFamily>) -> Vec<IpNet> {
    let Some(f) = family.or_else(|| nets.first().map(IpFamily::of_net)) else {
        return Vec::new();
    };
    nets.iter()
        .copied()
        .filter(|n| IpFamily::of_net(n) == f)
        .collect()
}

/// The VPC's address claims with their holders (`Port v100.10-0-0-5`).
pub async fn held(storage: &Arc<dyn Storage>, vni: u32) -> Result<Vec<(IpAddr, String)>> {
    let listed = storage
        .list(&keys::ip_prefix(vni), &ListOptions::default())
        .await
        .map_err(|e| storage_error(&e))?;
    Ok(listed
        .items
        .iter()
        .filter_map(|kv| {
            let ip = unescape_ip(kv.key.rsplit('/').next()?)?;
            let holder = String::from_utf8_lossy(&kv.value).into_owned();
            Some((ip, describe_owner(&holder)))
        })
        .collect())
}

/// Refuses (422, one cause per range) an update of a VPC whose ranges lose addresses that are
/// still allocated. Nothing is read when the ranges did not change.
pub async fn check_update(storage: &Arc<dyn Storage>, new: &VPC, old: &VPC) -> Result<()> {
    let vni = vpc_vni(old);
    if new.spec.cidrs == old.spec.cidrs || vni == 0 {
        return Ok(());
    }
    let held = held(storage, vni).await?;
    let errs = crate::validation::validate_vpc_ranges_in_use(&new.spec, &old.spec, &held);
    if errs.is_empty() {
        return Ok(());
    }
    let name = old.metadata.name.as_deref().unwrap_or_default();
    Err(ApiError::invalid(VPC::INFO.kind, VPC::INFO.group, name, &errs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(cidrs: &[&str]) -> Vec<IpNet> {
        cidrs.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn ranges_of_the_family_in_listed_order() {
        let n = nets(&["10.9.0.0/24", "fd00::/64", "10.1.0.0/24", "fd01::/64"]);
        let text = |v: Vec<IpNet>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(text(in_order(&n, None)), ["10.9.0.0/24", "10.1.0.0/24"]);
        assert_eq!(text(in_order(&n, Some(IpFamily::V6))), ["fd00::/64", "fd01::/64"]);
        let v6first = nets(&["fd00::/64", "10.0.0.0/24"]);
        assert_eq!(text(in_order(&v6first, None)), ["fd00::/64"]);
        assert!(in_order(&nets(&["10.0.0.0/24"]), Some(IpFamily::V6)).is_empty());
        assert!(in_order(&[], None).is_empty());
    }
}
