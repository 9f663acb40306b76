//! The invariant checker: scans storage and reports every allocation that is not sound.
//!
//! Sound means: every claim key names a stored owner that holds exactly that value (no
//! half-claimed address after a crash), every owner holds its claims, and no VNI, address
//! (per VNI, across Ports and ServiceVIPs), MAC or group id (per VPC) is held twice. Used by
//! the concurrency and crash tests; cheap enough to run against a live store.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cozyplane_apis::ApiKind;
use cozyplane_apis::net::Claim;
use cozyplane_apis::net::claim::escape_ip;
use cozyplane_apis::v1alpha1::{Port, SecurityGroup, ServiceVIP, VPC};
use cozyplane_storage::{KeyValue, ListOptions, Storage};
use serde::de::DeserializeOwned;

use super::{CLAIMS, keys, object_key};

/// What the scan found.
#[derive(Debug, Default)]
pub struct Report {
    /// Claim keys seen.
    pub claims: usize,
    /// Objects seen: VPCs, Ports, ServiceVIPs, SecurityGroups.
    pub objects: usize,
    /// Every violation, human-readable.
    pub problems: Vec<String>,
}

async fn list_all(storage: &Arc<dyn Storage>, prefix: &str) -> cozyplane_storage::Result<Vec<KeyValue>> {
    Ok(storage.list(prefix, &ListOptions::default()).await?.items)
}

fn objects<T: DeserializeOwned + ApiKind>(
    kvs: Vec<KeyValue>,
    problems: &mut Vec<String>,
) -> Vec<(String, T)> {
    kvs.into_iter()
        .filter_map(|kv| match serde_json::from_slice::<T>(&kv.value) {
            Ok(o) => Some((kv.key, o)),
            Err(e) => {
                problems.push(format!("{}: undecodable: {e}", kv.key));
                None
            }
        })
        .collect()
}

fn prefix_of(info: &cozyplane_apis::KindInfo) -> String {
    let k = object_key(info, None, "");
    if info.namespaced {
        k
    } else {
        k.trim_end_matches('/').to_string() + "/"
    }
}

/// Scans `storage`. Claims and objects are read in two lists; run it on a quiet store.
pub async fn scan(storage: &Arc<dyn Storage>) -> cozyplane_storage::Result<Report> {
    let mut r = Report::default();
    let claims: HashMap<String, String> = list_all(storage, CLAIMS)
        .await?
        .into_iter()
        .map(|kv| (kv.key, String::from_utf8_lossy(&kv.value).into_owned()))
        .collect();
    r.claims = claims.len();
    let p = &mut r.problems;
    let vpcs: Vec<(String, VPC)> = objects(list_all(storage, &prefix_of(&VPC::INFO)).await?, p);
    let ports: Vec<(String, Port)> = objects(list_all(storage, &prefix_of(&Port::INFO)).await?, p);
    let vips: Vec<(String, ServiceVIP)> = objects(list_all(storage, &prefix_of(&ServiceVIP::INFO)).await?, p);
    let sgs: Vec<(String, SecurityGroup)> =
        objects(list_all(storage, &prefix_of(&SecurityGroup::INFO)).await?, p);
    r.objects = vpcs.len() + ports.len() + vips.len() + sgs.len();

    // Each owner's expected claims.
    let mut expected: HashMap<String, String> = HashMap::new();
    let mut expect = |p: &mut Vec<String>, claim: String, owner: &str| {
        if let Some(prev) = expected.insert(claim.clone(), owner.to_string()) {
            p.push(format!("{claim} is held by both {prev} and {owner}"));
        }
    };
    for (key, v) in &vpcs {
        let vni = super::kinds::vpc_vni(v);
        if vni != 0 {
            expect(p, keys::vni(vni), key);
        }
    }
    let addr_owner = |p: &mut Vec<String>, key: &str, name: Option<&str>, kind| match name.map(Claim::parse) {
        Some(Ok(c)) if c.kind == kind => Some(keys::ip(c.vni, c.ip)),
        _ => {
            p.push(format!("{key}: the name is not an address claim"));
            None
        }
    };
    for (key, port) in &ports {
        if let Some(c) = addr_owner(
            p,
            key,
            port.metadata.name.as_deref(),
            cozyplane_apis::net::ClaimKind::Port,
        ) {
            if let Ok(ip) = cozyplane_apis::net::parse_ip(&port.spec.ip)
                && !c.ends_with(&format!("/{}", escape_ip(ip)))
            {
                p.push(format!("{key}: spec.ip {} does not match the name", port.spec.ip));
            }
            expect(p, c, key);
        }
        if port.spec.mac.is_empty() {
            p.push(format!("{key}: no MAC"));
        } else {
            expect(p, keys::mac(&port.spec.mac), key);
        }
    }
    for (key, vip) in &vips {
        if let Some(c) = addr_owner(
            p,
            key,
            vip.metadata.name.as_deref(),
            cozyplane_apis::net::ClaimKind::ServiceVIP,
        ) {
            expect(p, c, key);
        }
    }
    for (key, sg) in &sgs {
        let id = sg.status.as_ref().map_or(0, |s| s.id);
        if id > 0 {
            let ns = sg.metadata.namespace.clone().unwrap_or_default();
            expect(
                p,
                keys::sgid(&ns, &sg.spec.vpc_ref.name, u32::try_from(id).unwrap_or(0)),
                key,
            );
        }
    }
    // Owners hold their claims…
    for (claim, owner) in &expected {
        match claims.get(claim) {
            Some(v) if v == owner => {}
            Some(v) => p.push(format!("{owner} should hold {claim}, which names {v:?}")),
            None => p.push(format!("{owner} holds no claim {claim}")),
        }
    }
    // …and every claim has its owner (tombstones of released VNIs excepted).
    let live: HashSet<&String> = expected.keys().collect();
    for (claim, owner) in &claims {
        if owner.is_empty() {
            if !claim.starts_with(&keys::vni_prefix()) {
                p.push(format!("{claim} is claimed by nobody"));
            }
            continue;
        }
        if !live.contains(claim) {
            p.push(format!(
                "{claim} names {owner}, which does not hold it (half-claimed)"
            ));
        }
    }
    Ok(r)
}
