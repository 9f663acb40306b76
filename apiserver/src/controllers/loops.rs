//! The reconcile passes. Each computes the desired status from the current objects (pure
//! functions, unit-tested below) and writes only differences.

use std::collections::HashMap;
use std::sync::Arc;

use cozyplane_apis::net::cidr_lists_overlap;
use serde_json::{Value, json};

use crate::errors::Result;
use crate::registry::Resource;
use crate::registry::store::{DeleteOptions, ListParams, WriteOptions};

/// The finalizer of VPCBindings.
pub const REAP_PORTS: &str = "sdn.cozystack.io/reap-ports";

pub(crate) fn find<'a>(kinds: &'a [Arc<dyn Resource>], plural: &str) -> Option<&'a Arc<dyn Resource>> {
    kinds.iter().find(|k| k.info().plural == plural)
}

pub(crate) async fn all(kinds: &[Arc<dyn Resource>], plural: &str) -> Result<Vec<Value>> {
    match find(kinds, plural) {
        Some(r) => Ok(r.list(None, &ListParams::default()).await?.items),
        None => Ok(Vec::new()),
    }
}

pub(crate) fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn ns_name(v: &Value) -> (String, String) {
    (s(v, "/metadata/namespace").into(), s(v, "/metadata/name").into())
}

/// One condition; `lastTransitionTime` is kept from `old` when the status did not change.
pub fn condition(old: &Value, ty: &str, ok: bool, reason: &str, msg: &str, generation: i64) -> Value {
    let status = if ok { "True" } else { "False" };
    let prev = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty));
    let ltt = match prev {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now()),
    };
    json!({"type": ty, "status": status, "reason": reason, "message": msg,
           "lastTransitionTime": ltt, "observedGeneration": generation})
}

fn now() -> String {
    let t = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

fn generation(v: &Value) -> i64 {
    v.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// Writes `status` through `/status` unless it is already what is stored.
async fn set_status(r: &Arc<dyn Resource>, obj: &Value, status: Value) -> Result<()> {
    if obj.get("status") == Some(&status) {
        return Ok(());
    }
    let (ns, name) = ns_name(obj);
    let ns = (!ns.is_empty()).then_some(ns);
    let st = status.clone();
    let apply = move |mut cur: Value| -> Result<Value> {
        cur["status"] = st.clone();
        Ok(cur)
    };
    match r
        .patch(ns.as_deref(), &name, &apply, true, &WriteOptions::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The desired status of a VPC.
pub fn vpc_status(vpc: &Value) -> Value {
    let vni = vpc.pointer("/status/vni").and_then(Value::as_i64).unwrap_or(0);
    let ready = vni != 0;
    let mut st = json!({
        "phase": if ready { "Ready" } else { "Pending" },
        "conditions": [condition(vpc, "Ready", ready,
            if ready { "VNIAllocated" } else { "VNIPending" },
            &if ready { format!("VNI {vni} is allocated") } else { "no VNI is allocated".into() },
            generation(vpc))],
    });
    if vni != 0 {
        st["vni"] = json!(vni);
    }
    st
}

type VpcIndex = HashMap<(String, String), Value>;

/// The desired status of a VPCPeering given every VPC and every peering.
pub fn peering_status(p: &Value, vpcs: &VpcIndex, peerings: &[Value]) -> Value {
    let (ns, _) = ns_name(p);
    let local_name = s(p, "/spec/vpcRef/name").to_string();
    let peer = (
        s(p, "/spec/peerRef/namespace").to_string(),
        s(p, "/spec/peerRef/name").to_string(),
    );
    let local = vpcs.get(&(ns.clone(), local_name.clone()));
    let remote = vpcs.get(&peer);
    let vni = |v: Option<&Value>| {
        v.and_then(|v| v.pointer("/status/vni"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let matched = peerings.iter().any(|q| {
        s(q, "/metadata/namespace") == peer.0
            && s(q, "/spec/vpcRef/name") == peer.1
            && s(q, "/spec/peerRef/namespace") == ns
            && s(q, "/spec/peerRef/name") == local_name
            && q.pointer("/metadata/deletionTimestamp").is_none()
    });
    let local_ready = vni(local) != 0;
    let peer_ready = vni(remote) != 0;
    let cidrs = |v: Option<&Value>| -> Vec<String> {
        v.and_then(|v| v.pointer("/spec/cidrs"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|c| c.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let disjoint = local.is_some() && remote.is_some() && !cidr_lists_overlap(&cidrs(local), &cidrs(remote));
    let g = generation(p);
    let c = |ty: &str, ok: bool, what: &str| {
        let msg = if ok {
            what.to_string()
        } else {
            format!("not {what}")
        };
        condition(
            p,
            ty,
            ok,
            &if ok {
                ty.to_string()
            } else {
                format!("{ty}Missing")
            },
            &msg,
            g,
        )
    };
    let ready = matched && local_ready && peer_ready && disjoint;
    let mut st = json!({
        "phase": if ready { "Ready" } else { "Pending" },
        "conditions": [
            c("PeerMatched", matched, "matched by a reciprocal peering"),
            c("VPCReady", local_ready, "local VPC ready"),
            c("PeerVPCReady", peer_ready, "peer VPC ready"),
            c("CIDRsDisjoint", disjoint, "disjoint CIDRs"),
        ],
    });
    if vni(remote) != 0 {
        st["peerVNI"] = json!(vni(remote));
    }
    st
}

fn created(v: &Value) -> (String, String) {
    (
        s(v, "/metadata/creationTimestamp").to_string(),
        s(v, "/metadata/name").to_string(),
    )
}

/// The desired status of a VPCGateway: the oldest non-deleting gateway of a VPC is the
/// boundary; the others report `Exclusive=False`.
pub fn gateway_status(gw: &Value, vpcs: &VpcIndex, gateways: &[Value]) -> Value {
    let (ns, name) = ns_name(gw);
    let vpc = s(gw, "/spec/vpcRef/name").to_string();
    let resolved = vpcs.contains_key(&(ns.clone(), vpc.clone()));
    let effective = gateways
        .iter()
        .filter(|g| {
            s(g, "/metadata/namespace") == ns
                && s(g, "/spec/vpcRef/name") == vpc
                && g.pointer("/metadata/deletionTimestamp").is_none()
        })
        .min_by_key(|g| created(g));
    let exclusive = effective.is_none_or(|e| s(e, "/metadata/name") == name);
    let g = generation(gw);
    let nat_on = gw
        .pointer("/spec/nat/enabled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let has_addr = !s(gw, "/status/natAddress").is_empty() || !s(gw, "/status/natAddress6").is_empty();
    let nat_ready = !nat_on || has_addr;
    let mut st = json!({
        "phase": if resolved && exclusive { "Ready" } else { "Pending" },
        "conditions": [
            condition(gw, "VPCResolved", resolved, "VPCResolved",
                &if resolved { format!("VPC {vpc} found") } else { format!("VPC {vpc} not found") }, g),
            condition(gw, "NATReady", nat_ready, if nat_ready { "NATReady" } else { "NATAddressPending" },
                if nat_ready { "NAT identity assigned or NAT disabled" } else { "waiting for a NAT address" }, g),
            condition(gw, "Exclusive", exclusive, if exclusive { "Exclusive" } else { "GatewayConflict" },
                &match effective {
                    Some(e) if !exclusive => format!("VPC {vpc} already has gateway {}", s(e, "/metadata/name")),
                    _ => format!("the boundary of VPC {vpc}"),
                }, g),
        ],
    });
    for k in ["natAddress", "natAddress6"] {
        if let Some(a) = gw.pointer(&format!("/status/{k}")) {
            st[k] = a.clone();
        }
    }
    st
}

/// The VPC a binding grants: `(namespace, name)`, the namespace defaulting to the binding's.
pub fn granted(b: &Value) -> (String, String) {
    let ns = match s(b, "/spec/vpcRef/namespace") {
        "" => s(b, "/metadata/namespace"),
        n => n,
    };
    (ns.to_string(), s(b, "/spec/vpcRef/name").to_string())
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

async fn set_finalizers(r: &Arc<dyn Resource>, obj: &Value, fins: Vec<String>) -> Result<()> {
    let (ns, name) = ns_name(obj);
    let apply = move |mut cur: Value| -> Result<Value> {
        cur["metadata"]["finalizers"] = json!(fins.clone());
        Ok(cur)
    };
    match r
        .patch(Some(&ns), &name, &apply, false, &WriteOptions::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn reap_bindings(kinds: &[Arc<dyn Resource>]) -> Result<()> {
    let (Some(br), Some(pr)) = (find(kinds, "vpcbindings"), find(kinds, "ports")) else {
        return Ok(());
    };
    let bindings = all(kinds, "vpcbindings").await?;
    for b in &bindings {
        let fins = finalizers(b);
        let deleting = b.pointer("/metadata/deletionTimestamp").is_some();
        let has = fins.iter().any(|f| f == REAP_PORTS);
        if !deleting && !has {
            let mut f = fins.clone();
            f.push(REAP_PORTS.into());
            set_finalizers(br, b, f).await?;
            continue;
        }
        if !deleting || !has {
            continue;
        }
        let (ns, _) = ns_name(b);
        let grant = granted(b);
        let other = bindings.iter().any(|o| {
            o != b
                && s(o, "/metadata/namespace") == ns
                && o.pointer("/metadata/deletionTimestamp").is_none()
                && granted(o) == grant
        });
        if !other {
            let sel = format!(
                "sdn.cozystack.io/vpc-namespace={},sdn.cozystack.io/vpc={},sdn.cozystack.io/pod-namespace={ns}",
                grant.0, grant.1
            );
            let params = ListParams {
                labels: crate::registry::selector::LabelSelector::parse(&sel)
                    .map_err(crate::errors::ApiError::internal)?,
                ..Default::default()
            };
            for p in pr.list(None, &params).await?.items {
                match pr
                    .delete(None, s(&p, "/metadata/name"), &DeleteOptions::default())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        set_finalizers(br, b, fins.into_iter().filter(|f| f != REAP_PORTS).collect()).await?;
    }
    Ok(())
}

/// One pass of every loop.
pub async fn pass(kinds: &[Arc<dyn Resource>]) -> Result<()> {
    let vpcs = all(kinds, "vpcs").await?;
    if let Some(r) = find(kinds, "vpcs") {
        for v in &vpcs {
            set_status(r, v, vpc_status(v)).await?;
        }
    }
    let index: VpcIndex = vpcs.iter().map(|v| (ns_name(v), v.clone())).collect();
    if let Some(r) = find(kinds, "vpcpeerings") {
        let peerings = all(kinds, "vpcpeerings").await?;
        for p in &peerings {
            set_status(r, p, peering_status(p, &index, &peerings)).await?;
        }
    }
    if let Some(r) = find(kinds, "vpcgateways") {
        let gws = all(kinds, "vpcgateways").await?;
        for g in &gws {
            set_status(r, g, gateway_status(g, &index, &gws)).await?;
        }
    }
    reap_bindings(kinds).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vpc(ns: &str, name: &str, vni: i64, cidr: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "generation": 1},
               "spec": {"cidrs": [cidr]}, "status": {"vni": vni}})
    }

    fn peering(ns: &str, local: &str, pns: &str, peer: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": format!("{local}-{peer}"), "generation": 1},
               "spec": {"vpcRef": {"name": local}, "peerRef": {"namespace": pns, "name": peer}}})
    }

    fn cond<'a>(st: &'a Value, ty: &str) -> &'a Value {
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == ty)
            .unwrap()
    }

    #[test]
    fn peering_is_ready_only_with_a_reciprocal_half_and_disjoint_cidrs() {
        let mut idx = VpcIndex::new();
        idx.insert(("a".into(), "x".into()), vpc("a", "x", 100, "10.0.0.0/24"));
        idx.insert(("b".into(), "y".into()), vpc("b", "y", 101, "10.1.0.0/24"));
        let p = peering("a", "x", "b", "y");
        let st = peering_status(&p, &idx, std::slice::from_ref(&p));
        assert_eq!(st["phase"], "Pending");
        assert_eq!(cond(&st, "PeerMatched")["reason"], "PeerMatchedMissing");
        assert_eq!(st["peerVNI"], 101);
        let q = peering("b", "y", "a", "x");
        let st = peering_status(&p, &idx, &[p.clone(), q.clone()]);
        assert_eq!(st["phase"], "Ready", "{st}");
        assert_eq!(cond(&st, "CIDRsDisjoint")["status"], "True");
        assert_eq!(cond(&st, "VPCReady")["observedGeneration"], 1);
        idx.insert(("b".into(), "y".into()), vpc("b", "y", 101, "10.0.0.0/16"));
        let st = peering_status(&p, &idx, &[p.clone(), q]);
        assert_eq!(st["phase"], "Pending");
        assert_eq!(cond(&st, "CIDRsDisjoint")["status"], "False");
    }

    #[test]
    fn the_oldest_gateway_of_a_vpc_is_exclusive() {
        let mut idx = VpcIndex::new();
        idx.insert(("a".into(), "x".into()), vpc("a", "x", 100, "10.0.0.0/24"));
        let gw = |name: &str, t: &str| {
            json!({"metadata": {"namespace": "a", "name": name, "creationTimestamp": t, "generation": 1},
                   "spec": {"vpcRef": {"name": "x"}}})
        };
        let (old, new) = (
            gw("old", "2026-01-01T00:00:00Z"),
            gw("new", "2026-01-02T00:00:00Z"),
        );
        let all = [new.clone(), old.clone()];
        let st = gateway_status(&old, &idx, &all);
        assert_eq!(
            (st["phase"].as_str(), cond(&st, "Exclusive")["status"].as_str()),
            (Some("Ready"), Some("True"))
        );
        let st = gateway_status(&new, &idx, &all);
        assert_eq!(cond(&st, "Exclusive")["reason"], "GatewayConflict");
        assert_eq!(st["phase"], "Pending");
        // A condition that keeps its status keeps its transition time.
        let mut stored = new.clone();
        stored["status"] = st.clone();
        let again = gateway_status(&stored, &idx, &all);
        assert_eq!(again, st);
    }

    #[test]
    fn bindings_grant_their_own_namespace_by_default() {
        let b = json!({"metadata": {"namespace": "c"}, "spec": {"vpcRef": {"name": "x"}}});
        assert_eq!(granted(&b), ("c".to_string(), "x".to_string()));
    }
}
