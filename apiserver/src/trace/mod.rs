//! `POST /apis/sdn.cozystack.io/v1alpha1/namespaces/<ns>/vpcs/<vpc>/trace`: the verdict a
//! tenant can ask for (issue 14, item 5).
//!
//! The request is a `VPCTrace` naming a flow's first packet (source, destination, protocol,
//! port or ICMP type/code); the answer is the same object with `status`: allowed or
//! dropped, by which layer, and which SecurityGroup rule (or default) decided each
//! direction. Authorization is the request's own: a `create` of `vpcs/trace` in the
//! namespace, asked of kube-apiserver by the authorization layer like every request.
//!
//! The answer is computed from the same compiled state the agents load: the VPC's world is
//! read from storage at one revision ([`world`]), compiled by `cozyplane-policy`'s
//! `SgCompiler` (the agents' compiler) for the traced VPC's partition and its connected
//! peers' only, and judged by `verdict::sg_detail`, the function the datapath tests hold the
//! kernel to. A Port being deleted is severed ([`answer::severed`]), an address no Port holds gets
//! nothing ([`answer::no_port`]); an end outside every VPC
//! makes the flow north-south, through the VPC's doors or none ([`doors`]). Per request, not incrementally: a trace is an interactive question, and its
//! cost is the objects of the VPCs involved (one storage prefix each), not the cluster's.
//!
//! [`pod`] is the default network's counterpart: `POST .../namespaces/<ns>/podtraces`, the
//! AdminNetworkPolicy / NetworkPolicy / BaselineAdminNetworkPolicy verdict of a flow of the
//! namespace's pods.

pub mod answer;
pub mod doors;
pub mod pod;
pub mod resolve;
pub mod world;

use std::sync::Arc;

use axum::body::Bytes;
use cozyplane_apis::ApiKind;
use cozyplane_apis::GROUP;
use cozyplane_apis::v1alpha1::{API_VERSION, TRACE_KIND, VPC, VPCTrace};
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use cozyplane_storage::Storage;

use crate::errors::{ApiError, Result};

/// Answers a trace of VPC `ns/name`: the request with its `status`.
pub async fn trace(
    storage: &Arc<dyn Storage>,
    kube: Option<&kube::Client>,
    ns: &str,
    name: &str,
    body: &Bytes,
) -> Result<VPCTrace> {
    let mut req: VPCTrace = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a VPCTrace: {e}")))?;
    if req.api_version != API_VERSION || req.kind != TRACE_KIND {
        return Err(ApiError::bad_request(format!(
            "the body must be apiVersion {API_VERSION}, kind {TRACE_KIND} (it is {:?}, {:?})",
            req.api_version, req.kind
        )));
    }
    let Some(mut w) = world::read(storage, ns, name).await? else {
        return Err(ApiError::not_found(&VPC::INFO, name));
    };
    let flow =
        resolve::flow(&w, &req.spec).map_err(|errs| ApiError::invalid(TRACE_KIND, GROUP, name, &errs))?;
    if (flow.src.external || flow.dst.external)
        && let Some(k) = kube
    {
        w.internal = world::cluster_ranges(k).await?;
    }
    let connected = flow.src.connected && flow.dst.connected;
    let status = if let Some(st) = answer::severed(ns, &w, &flow) {
        st
    } else if let Some(st) = connected.then(|| answer::no_port(ns, &w, &flow)).flatten() {
        st
    } else if connected {
        let vpcs = w
            .nets
            .iter()
            .filter(|n| n.connected && n.vni != 0)
            .map(|n| (n.vpc.namespace.clone(), n.vpc.name.clone(), n.vni));
        let c = SgCompiler::build(vpcs, &w.groups, &w.ports);
        let t = c.tables();
        let ep = |e: &resolve::End| Endpoint { net: e.vni, ip: e.ip };
        let d = verdict::sg_detail(&t, ep(&flow.src), ep(&flow.dst), flow.proto, flow.port);
        if flow.src.external || flow.dst.external {
            doors::judged(ns, &w, &c, &t, &flow, &d)
        } else {
            answer::judged(ns, &w, &c, &t, &flow, &d)
        }
    } else {
        answer::not_connected(ns, &w, &flow)
    };
    req.metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(ns.to_string()),
        ..Default::default()
    };
    req.status = Some(status);
    Ok(req)
}
