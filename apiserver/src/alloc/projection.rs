//! `vpcs/{name}/allocations`: a read-only view of a VPC's used and free addresses, computed
//! from the claim keys on every read and never stored.

use std::sync::Arc;

use cozyplane_apis::ApiKind;
use cozyplane_apis::net::IpFamily;
use cozyplane_apis::net::claim::unescape_ip;
use cozyplane_apis::v1alpha1::{VPC, VPCRef};
use cozyplane_storage::{ListOptions, Storage};
use serde_json::{Value, json};

use super::kinds::{read_vpc, vpc_nets, vpc_vni};
use super::{addr, describe_owner, keys, storage_error};
use crate::errors::{ApiError, Result};

/// Free ranges listed at most (a /64 has few used addresses and one huge free range).
const MAX_RANGES: usize = 256;

/// The allocations of VPC `ns/name`, as a `VPCAllocations` object.
pub async fn allocations(storage: &Arc<dyn Storage>, ns: &str, name: &str) -> Result<Value> {
    let r = VPCRef {
        namespace: ns.into(),
        name: name.into(),
    };
    let Some((vpc, _)) = read_vpc(storage, &r).await? else {
        return Err(ApiError::not_found(&VPC::INFO, name));
    };
    let vni = vpc_vni(&vpc);
    let listed = if vni == 0 {
        None
    } else {
        Some(
            storage
                .list(&keys::ip_prefix(vni), &ListOptions::default())
                .await
                .map_err(|e| storage_error(&e))?,
        )
    };
    let revision = match &listed {
        Some(l) => l.revision,
        None => storage.current_revision().await.map_err(|e| storage_error(&e))?,
    };
    let mut held: Vec<(std::net::IpAddr, String)> = listed
        .iter()
        .flat_map(|l| l.items.iter())
        .filter_map(|kv| {
            let ip = unescape_ip(kv.key.rsplit('/').next()?)?;
            Some((ip, describe_owner(&String::from_utf8_lossy(&kv.value))))
        })
        .collect();
    held.sort();
    let mut cidrs = Vec::new();
    for net in vpc_nets(&vpc) {
        let f = IpFamily::of_net(&net);
        let range = addr::host_range(&net);
        let used: Vec<&(std::net::IpAddr, String)> = held.iter().filter(|(ip, _)| net.contains(ip)).collect();
        let in_range =
            |ip: &std::net::IpAddr| range.is_some_and(|(lo, hi)| (lo..=hi).contains(&addr::to_int(*ip)));
        let used_in_range = used.iter().filter(|(ip, _)| in_range(ip)).count() as u128;
        let size = range.map_or(0, addr::range_size);
        let mut free = Vec::new();
        if let Some((lo, hi)) = range {
            let mut next = lo;
            for (ip, _) in used.iter().filter(|(ip, _)| in_range(ip)) {
                let v = addr::to_int(*ip);
                if v > next && free.len() < MAX_RANGES {
                    free.push(span(f, next, v - 1));
                }
                next = v.saturating_add(1);
            }
            if next <= hi && free.len() < MAX_RANGES {
                free.push(span(f, next, hi));
            }
        }
        let mut reserved = vec![net.network().to_string(), addr::gateway(&net).to_string()];
        if f == IpFamily::V4 {
            reserved.push(net.broadcast().to_string());
        }
        cidrs.push(json!({
            "cidr": net.to_string(),
            "family": f.as_str(),
            "size": size.to_string(),
            "used": used.len(),
            "free": size.saturating_sub(used_in_range).to_string(),
            "reserved": reserved,
            "allocations": used.iter().map(|(ip, owner)| json!({"ip": ip.to_string(), "owner": owner})).collect::<Vec<_>>(),
            "freeRanges": free,
        }));
    }
    Ok(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "VPCAllocations",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": revision.to_string()},
        "vni": vni,
        "cidrs": cidrs,
    }))
}

fn span(f: IpFamily, a: u128, b: u128) -> String {
    if a == b {
        addr::from_int(f, a).to_string()
    } else {
        format!("{}-{}", addr::from_int(f, a), addr::from_int(f, b))
    }
}
