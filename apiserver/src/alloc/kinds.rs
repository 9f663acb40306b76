//! The allocators of VPC (VNI), Port (address, MAC), ServiceVIP (address) and SecurityGroup
//! (id).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cozyplane_apis::ApiKind;
use cozyplane_apis::net::claim::unescape_ip;
use cozyplane_apis::net::{Claim, ClaimKind, IpFamily, IpNet, MacAddr, parse_cidr};
use cozyplane_apis::v1alpha1::{
    Port, SecurityGroup, SecurityGroupStatus, ServiceVIP, VPC, VPCRef, VPCStatus,
};
use cozyplane_storage::{ListOptions, Op, Revision, Storage};

use super::cache::{VNI_POOL, ip_pool, sgid_pool};
use super::{
    Allocation, Allocator, ClaimKey, Cx, addr, exhausted, invalid, keys, object_key, pool, storage_error,
};
use crate::errors::Result;

/// The lowest VNI a VPC gets (0 is the default network, 1..99 are reserved).
pub const VNI_MIN: u32 = 100;
/// The highest: the top bit of the 24-bit VNI marks gateway traffic in the datapath.
pub const VNI_MAX: u32 = (1 << 23) - 1;
/// SecurityGroup ids per VPC (63 is the datapath's "world").
pub const SGID_MAX: u32 = 62;

/// The VNI ceiling; `COZYPLANE_VNI_MAX` lowers it (for exhaustion tests).
pub fn vni_max() -> u32 {
    std::env::var("COZYPLANE_VNI_MAX")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(VNI_MAX, |v| v.clamp(VNI_MIN, VNI_MAX))
}

fn owner(key: &str) -> Bytes {
    Bytes::copy_from_slice(key.as_bytes())
}

/// Reads a VPC and its storage key (`None`: no such VPC).
pub async fn read_vpc(storage: &Arc<dyn Storage>, r: &VPCRef) -> Result<Option<(VPC, String)>> {
    Ok(read_vpc_at(storage, r).await?.map(|(v, key, _)| (v, key)))
}

/// Reads a VPC, its storage key and its revision (`None`: no such VPC).
pub async fn read_vpc_at(storage: &Arc<dyn Storage>, r: &VPCRef) -> Result<Option<(VPC, String, Revision)>> {
    let key = object_key(&VPC::INFO, Some(&r.namespace), &r.name);
    match storage.get(&key).await {
        Ok(kv) => {
            let v: VPC = serde_json::from_slice(&kv.value).map_err(crate::errors::ApiError::internal)?;
            Ok(Some((v, key, kv.mod_revision)))
        }
        Err(cozyplane_storage::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(storage_error(&e)),
    }
}

/// The VNI of a VPC (0 if none).
pub fn vpc_vni(v: &VPC) -> u32 {
    v.status.as_ref().map_or(0, |s| u32::try_from(s.vni).unwrap_or(0))
}

/// The VPC's CIDRs, parsed (unparsable entries skipped).
pub fn vpc_nets(v: &VPC) -> Vec<IpNet> {
    v.spec.cidrs.iter().filter_map(|c| parse_cidr(c).ok()).collect()
}

fn avoided(cx: &Cx<'_>, prefix: &str, parse: impl Fn(&str) -> Option<u128>) -> BTreeSet<u128> {
    cx.avoid
        .iter()
        .filter_map(|k| k.strip_prefix(prefix).and_then(&parse))
        .collect()
}

/// Picks and reserves the first free value of `range` in pool `name` (claims under `prefix`,
/// `parse` naming a key's value), from the top if `down`, avoiding what this request lost.
/// A pool that looks full is re-read from storage once before `None` is believed.
async fn pick(
    cx: &Cx<'_>,
    a: &mut Allocation,
    name: &str,
    prefix: &str,
    parse: impl Fn(&str) -> Option<u128>,
    ranges: &[(u128, u128)],
    down: bool,
) -> Result<Option<u128>> {
    let avoid = avoided(cx, prefix, &parse);
    cx.cache.ready().await?;
    // Ranges in order (a VPC's several ranges of one family fill one after the other); the
    // pool is re-read from storage once, only when every range looks full.
    for fresh in [false, true] {
        if fresh {
            cx.cache.resync(cx.storage, name, prefix, &parse).await?;
        }
        let p = cx.cache.pool(name);
        let picked = ranges
            .iter()
            .find_map(|range| pool::lock(&p).pick(*range, down, &avoid));
        if let Some(v) = picked {
            a.reserve(pool::Reservation::new(p, v));
            return Ok(Some(v));
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// VPC

/// VNI allocation: lowest never-used VNI ≥ 100; a released VNI (a tombstone claim) is reused
/// only when no fresh one is left and no address claim of it remains.
pub struct VpcAllocator;

async fn reusable_vni(
    storage: &Arc<dyn Storage>,
    avoid: &BTreeSet<u128>,
    max: u32,
) -> Result<Option<(u32, Revision)>> {
    let r = storage
        .list(&keys::vni_prefix(), &ListOptions::default())
        .await
        .map_err(|e| storage_error(&e))?;
    for kv in r.items.iter().filter(|kv| kv.value.is_empty()) {
        let Some(vni) = kv
            .key
            .strip_prefix(&keys::vni_prefix())
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if vni > max || avoid.contains(&u128::from(vni)) {
            continue;
        }
        let left = storage
            .list(
                &keys::ip_prefix(vni),
                &ListOptions {
                    limit: Some(1),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| storage_error(&e))?;
        if left.items.is_empty() {
            return Ok(Some((vni, kv.mod_revision)));
        }
    }
    Ok(None)
}

#[async_trait]
impl Allocator<VPC> for VpcAllocator {
    async fn allocate(&self, vpc: &mut VPC, cx: &Cx<'_>) -> Result<Allocation> {
        let name = vpc.metadata.name.clone().unwrap_or_default();
        let key = object_key(&VPC::INFO, vpc.metadata.namespace.as_deref(), &name);
        let mut a = Allocation::default();
        let prefix = keys::vni_prefix();
        let parse = |s: &str| s.parse::<u128>().ok();
        let avoid = avoided(cx, &prefix, parse);
        let max = vni_max();
        let range = (u128::from(VNI_MIN), u128::from(max));
        let (vni, expect) = match pick(cx, &mut a, VNI_POOL, &prefix, parse, &[range], false).await? {
            Some(v) => (u32::try_from(v).unwrap_or(0), None),
            None => match reusable_vni(cx.storage, &avoid, max).await? {
                Some((v, rev)) => (v, Some(rev)),
                None => {
                    return Err(exhausted(format!(
                        "no VNI is free: all of {VNI_MIN}..={max} are held by VPCs or by Ports of deleted VPCs"
                    )));
                }
            },
        };
        a.claim(ClaimKey {
            key: keys::vni(vni),
            value: owner(&key),
            expect,
            chosen: true,
            what: format!("VNI {vni}"),
            field: None,
        });
        vpc.status = Some(VPCStatus {
            vni: i32::try_from(vni).unwrap_or_default(),
            phase: "Pending".into(),
            conditions: Vec::new(),
        });
        Ok(a)
    }

    async fn check_update(&self, new: &VPC, old: &VPC, storage: &Arc<dyn Storage>) -> Result<()> {
        super::ranges::check_update(storage, new, old).await
    }

    fn release(&self, vpc: &VPC) -> Vec<Op> {
        match vpc_vni(vpc) {
            0 => Vec::new(),
            // A tombstone, not a delete: the VNI stays out of use while Ports of it remain.
            vni => vec![Op::Put {
                key: keys::vni(vni),
                value: Bytes::new(),
            }],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Port and ServiceVIP

/// What an address allocation needs to know about its kind.
struct AddrKind {
    kind: ClaimKind,
    info: &'static cozyplane_apis::KindInfo,
    /// Walk down from the top of the range (ServiceVIPs) instead of up (Ports).
    down: bool,
}

/// The cached VPC at `vpc_key` with its revision, VNI and VNI-claim revision, when the cache
/// holds all of it consistently: the VPC has a VNI (the one `name_vni` names, if given) whose
/// claim is held by the VPC, and a CIDR that `fits` the request. Whatever would turn into an
/// error is left to a storage read, so a stale cache never fails a create.
fn cached_vpc(
    cx: &Cx<'_>,
    vpc_key: &str,
    name_vni: Option<u32>,
    fits: impl Fn(&[IpNet]) -> bool,
) -> Option<(Arc<VPC>, Revision, u32, Revision)> {
    let c = cx.cache.vpc(vpc_key)?;
    let vni = vpc_vni(&c.vpc);
    if vni == 0 || name_vni.is_some_and(|n| n != vni) || !fits(&vpc_nets(&c.vpc)) {
        return None;
    }
    let (holder, claim_rev) = cx.cache.vni_claim(vni)?;
    (holder == vpc_key.as_bytes()).then_some((c.vpc, c.revision, vni, claim_rev))
}

/// The shared address step of Port and ServiceVIP: resolves the VNI, fills `ip` and `name`.
/// Returns the claim of the address, or `None` when the request is malformed enough that
/// validation will reject it.
async fn allocate_address(
    k: &AddrKind,
    name: &mut Option<String>,
    ip_text: &mut String,
    gateway: bool,
    vref: &VPCRef,
    cx: &Cx<'_>,
    a: &mut Allocation,
) -> Result<()> {
    let kind_name = k.info.kind;
    let given = name.clone().unwrap_or_default();
    let name_claim = (!cx.name_generated)
        .then(|| Claim::parse(&given).ok())
        .flatten()
        .filter(|c| c.kind == k.kind);
    if vref.namespace.is_empty() || vref.name.is_empty() {
        return Ok(()); // validation reports the reference
    }
    let vpc_key = object_key(&VPC::INFO, Some(&vref.namespace), &vref.name);
    // The first attempt trusts the cache when it tells a consistent story (the VPC, its VNI,
    // the VNI claim held by it); both are proven by `ModRevision` guards in the transaction.
    // Anything else (a miss, a retry) reads storage, which also decides every error.
    let asked = if ip_text.is_empty() {
        None
    } else {
        cozyplane_apis::net::parse_ip(ip_text).ok()
    };
    let exact_asked = if ip_text.is_empty() {
        name_claim.map(|c| c.ip)
    } else {
        asked.filter(|ip| !ip.is_unspecified())
    };
    let fits = |nets: &[IpNet]| match exact_asked {
        Some(ip) => nets.iter().any(|n| n.contains(&ip)),
        None => match asked.map(IpFamily::of) {
            Some(f) => nets.iter().find(|n| IpFamily::of_net(n) == f),
            None => nets.first(),
        }
        .is_some_and(|n| addr::host_range(n).is_some()),
    };
    let cached = (cx.attempt == 0 && (ip_text.is_empty() || asked.is_some()))
        .then(|| cached_vpc(cx, &vpc_key, name_claim.map(|c| c.vni), fits))
        .flatten();
    let (vpc, vni) = if let Some((vpc, vpc_rev, vni, claim_rev)) = cached {
        a.guards
            .push(cozyplane_storage::Compare::ModRevision(vpc_key.clone(), vpc_rev));
        a.guards
            .push(cozyplane_storage::Compare::ModRevision(keys::vni(vni), claim_rev));
        (Some(vpc), vni)
    } else {
        let found = read_vpc_at(cx.storage, vref).await?;
        let vni = match (&found, name_claim) {
            (Some((v, _, _)), _) if vpc_vni(v) != 0 => vpc_vni(v),
            (_, Some(c)) => c.vni,
            (Some(_), None) => {
                return Err(invalid(
                    kind_name,
                    &given,
                    "spec.vpcRef",
                    &vref.name,
                    "the VPC has no VNI yet",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    kind_name,
                    &given,
                    "spec.vpcRef",
                    &format!("{}/{}", vref.namespace, vref.name),
                    "VPC not found: the server needs the VPC to allocate an address and name",
                ));
            }
        };
        if let Some(c) = name_claim
            && c.vni != vni
        {
            return Err(invalid(
                kind_name,
                &given,
                "metadata.name",
                &given,
                format!("the VNI of the name ({}) is not the VPC's ({vni})", c.vni),
            ));
        }
        if let Some((_, _, rev)) = &found {
            // The VPC as read (its CIDRs) is what the address is checked against.
            a.guards
                .push(cozyplane_storage::Compare::ModRevision(vpc_key.clone(), *rev));
        }
        // Guard on the VNI claim: no address is claimed under a VNI that is being released or
        // reused at the same time.
        match cx.storage.get(&keys::vni(vni)).await {
            Ok(kv) => {
                let holder = String::from_utf8_lossy(&kv.value).into_owned();
                if !holder.is_empty() && holder != vpc_key {
                    return Err(invalid(
                        kind_name,
                        &given,
                        "spec.vpcRef",
                        &vref.name,
                        format!("VNI {vni} belongs to {}", super::describe_owner(&holder)),
                    ));
                }
                a.guards
                    .push(cozyplane_storage::Compare::ModRevision(kv.key, kv.mod_revision));
            }
            Err(cozyplane_storage::Error::NotFound { .. }) => {
                // A VPC from before allocation, or an address claimed by name alone: mark the
                // VNI as used (tombstone) so that no new VPC gets it while the address exists.
                a.claim(ClaimKey {
                    key: keys::vni(vni),
                    value: Bytes::new(),
                    expect: None,
                    chosen: true,
                    what: format!("VNI {vni}"),
                    field: None,
                });
            }
            Err(e) => return Err(storage_error(&e)),
        }
        (found.map(|(v, _, _)| Arc::new(v)), vni)
    };
    let nets = vpc.as_deref().map(vpc_nets).unwrap_or_default();
    // What was asked for: an exact address, a family, or anything.
    let mut family: Option<IpFamily> = None;
    let mut exact: Option<IpAddr> = None;
    if ip_text.is_empty() {
        if let Some(c) = name_claim {
            exact = Some(c.ip);
        }
    } else {
        match cozyplane_apis::net::parse_ip(ip_text) {
            Ok(ip) if ip.is_unspecified() => family = Some(IpFamily::of(ip)),
            Ok(ip) => exact = Some(ip),
            Err(_) => return Ok(()), // validation reports spec.ip
        }
    }
    // Several ranges per family: filled in the listed order; the gateway is the first's.
    let ranges = super::ranges::in_order(&nets, family);
    let net = ranges.first().copied();
    if exact.is_none() && gateway {
        exact = net.as_ref().map(addr::gateway);
    }
    let ip = if let Some(ip) = exact {
        if !nets.is_empty() && !nets.iter().any(|n| n.contains(&ip)) {
            return Err(invalid(
                kind_name,
                &given,
                "spec.ip",
                &ip.to_string(),
                format!(
                    "not in the VPC's CIDRs ({})",
                    vpc.as_ref().map(|v| v.spec.cidrs.join(", ")).unwrap_or_default()
                ),
            ));
        }
        a.claim(ClaimKey {
            key: keys::ip(vni, ip),
            value: Bytes::new(), // filled below, once the name is known
            expect: None,
            chosen: false,
            what: format!("address {ip} of VNI {vni}"),
            field: Some(("spec.ip", ip.to_string())),
        });
        ip
    } else {
        let Some(net) = net else {
            return Err(invalid(
                kind_name,
                &given,
                "spec.ip",
                ip_text,
                match family {
                    Some(f) => format!("the VPC has no {f} CIDR"),
                    None => "the VPC has no CIDR to allocate from".into(),
                },
            ));
        };
        let f = IpFamily::of_net(&net);
        let prefix = keys::ip_prefix(vni);
        let parse = move |s: &str| {
            unescape_ip(s)
                .filter(|ip| IpFamily::of(*ip) == f)
                .map(addr::to_int)
        };
        let host_ranges: Vec<(u128, u128)> = ranges.iter().filter_map(addr::host_range).collect();
        let Some(v) = pick(cx, a, &ip_pool(vni, f), &prefix, parse, &host_ranges, k.down).await? else {
            let listed: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            return Err(exhausted(format!(
                "no free address left in {} of VPC {}/{} (VNI {vni})",
                listed.join(", "),
                vref.namespace,
                vref.name
            )));
        };
        let ip = addr::from_int(f, v);
        a.claim(ClaimKey {
            key: keys::ip(vni, ip),
            value: Bytes::new(),
            expect: None,
            chosen: true,
            what: format!("address {ip} of VNI {vni}"),
            field: None,
        });
        ip
    };
    *ip_text = cozyplane_apis::net::canonical_ip(ip);
    let claim_name = match k.kind {
        ClaimKind::Port => Claim::port(vni, ip),
        ClaimKind::ServiceVIP => Claim::service_vip(vni, ip),
    }
    .name();
    if cx.name_generated || given.is_empty() || name_claim.is_some() {
        a.name_chosen = exact.is_none();
        a.name_derived = exact.is_some() && (cx.name_generated || given.is_empty());
        *name = Some(claim_name.clone());
    }
    let key = object_key(k.info, None, name.as_deref().unwrap_or_default());
    for c in &mut a.claims {
        if c.value.is_empty() && c.key.starts_with(&keys::ip_prefix(vni)) {
            c.value = owner(&key);
        }
    }
    Ok(())
}

/// Releases the address claim of a `v…`/`sv…` named object.
fn release_address(name: Option<&str>) -> Vec<Op> {
    match name.and_then(|n| Claim::parse(n).ok()) {
        Some(c) => {
            vec![Op::Delete {
                key: keys::ip(c.vni, c.ip),
            }]
        }
        None => Vec::new(),
    }
}

/// Port IPAM: an address (lowest free of the VPC's CIDR of the requested family, or exactly
/// `spec.ip`), the claim name, and a MAC.
pub struct PortAllocator;

#[async_trait]
impl Allocator<Port> for PortAllocator {
    async fn allocate(&self, p: &mut Port, cx: &Cx<'_>) -> Result<Allocation> {
        let mut a = Allocation::default();
        let k = AddrKind {
            kind: ClaimKind::Port,
            info: &Port::INFO,
            down: false,
        };
        let vref = p.spec.vpc_ref.clone();
        allocate_address(
            &k,
            &mut p.metadata.name,
            &mut p.spec.ip,
            p.spec.gateway,
            &vref,
            cx,
            &mut a,
        )
        .await?;
        let key = object_key(&Port::INFO, None, p.metadata.name.as_deref().unwrap_or_default());
        if p.spec.mac.is_empty() {
            let mut mac = random_mac();
            while cx.avoid.contains(&keys::mac(&mac.to_string())) {
                mac = random_mac();
            }
            p.spec.mac = mac.to_string();
            a.claim(ClaimKey {
                key: keys::mac(&p.spec.mac),
                value: owner(&key),
                expect: None,
                chosen: true,
                what: format!("MAC {mac}"),
                field: None,
            });
        } else if let Ok(mac) = p.spec.mac.parse::<MacAddr>()
            && mac.to_string() == p.spec.mac
        {
            a.claim(ClaimKey {
                key: keys::mac(&p.spec.mac),
                value: owner(&key),
                expect: None,
                chosen: false,
                what: format!("MAC {mac}"),
                field: Some(("spec.mac", mac.to_string())),
            });
        }
        Ok(a)
    }

    fn release(&self, p: &Port) -> Vec<Op> {
        let mut ops = release_address(p.metadata.name.as_deref());
        if !p.spec.mac.is_empty() {
            ops.push(Op::Delete {
                key: keys::mac(&p.spec.mac),
            });
        }
        ops
    }
}

/// A random locally administered unicast MAC (`x2:…`, `x6:…`, `xa:…`, `xe:…`).
pub fn random_mac() -> MacAddr {
    let mut b: [u8; 6] = rand::random();
    b[0] = (b[0] & 0xfc) | 0x02;
    MacAddr(b)
}

/// ServiceVIP: an address walked down from the top of the VPC's CIDR, and the claim name.
pub struct ServiceVipAllocator;

#[async_trait]
impl Allocator<ServiceVIP> for ServiceVipAllocator {
    async fn allocate(&self, v: &mut ServiceVIP, cx: &Cx<'_>) -> Result<Allocation> {
        let mut a = Allocation::default();
        let k = AddrKind {
            kind: ClaimKind::ServiceVIP,
            info: &ServiceVIP::INFO,
            down: true,
        };
        let vref = v.spec.vpc_ref.clone();
        allocate_address(&k, &mut v.metadata.name, &mut v.spec.ip, false, &vref, cx, &mut a).await?;
        Ok(a)
    }

    fn release(&self, v: &ServiceVIP) -> Vec<Op> {
        release_address(v.metadata.name.as_deref())
    }
}

// ---------------------------------------------------------------------------------------------
// SecurityGroup

/// SecurityGroup ids: lowest free of 1..=62 among the groups of the same VPC.
pub struct SecurityGroupAllocator;

#[async_trait]
impl Allocator<SecurityGroup> for SecurityGroupAllocator {
    async fn allocate(&self, sg: &mut SecurityGroup, cx: &Cx<'_>) -> Result<Allocation> {
        let mut a = Allocation::default();
        let ns = sg.metadata.namespace.clone().unwrap_or_default();
        let vpc = sg.spec.vpc_ref.name.clone();
        if vpc.is_empty() {
            return Ok(a); // validation reports it
        }
        let name = sg.metadata.name.clone().unwrap_or_default();
        let key = object_key(&SecurityGroup::INFO, Some(&ns), &name);
        let prefix = keys::sgid_prefix(&ns, &vpc);
        let parse = |s: &str| s.parse::<u128>().ok();
        let range = (1, u128::from(SGID_MAX));
        let Some(id) = pick(cx, &mut a, &sgid_pool(&ns, &vpc), &prefix, parse, &[range], false).await? else {
            return Err(exhausted(format!(
                "VPC {ns}/{vpc} already has {SGID_MAX} SecurityGroups: no group id is free"
            )));
        };
        let id = u32::try_from(id).unwrap_or(0);
        a.claim(ClaimKey {
            key: keys::sgid(&ns, &vpc, id),
            value: owner(&key),
            expect: None,
            chosen: true,
            what: format!("group id {id}"),
            field: None,
        });
        sg.status = Some(SecurityGroupStatus {
            id: i32::try_from(id).unwrap_or_default(),
            phase: "Ready".into(),
            conditions: Vec::new(),
        });
        Ok(a)
    }

    fn release(&self, sg: &SecurityGroup) -> Vec<Op> {
        let id = sg.status.as_ref().map_or(0, |s| s.id);
        let ns = sg.metadata.namespace.clone().unwrap_or_default();
        if id <= 0 || sg.spec.vpc_ref.name.is_empty() {
            return Vec::new();
        }
        vec![Op::Delete {
            key: keys::sgid(&ns, &sg.spec.vpc_ref.name, u32::try_from(id).unwrap_or(0)),
        }]
    }
}
