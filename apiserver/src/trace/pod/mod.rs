//! `POST /apis/sdn.cozystack.io/v1alpha1/namespaces/<ns>/podtraces`: the verdict of the
//! default network's policy (AdminNetworkPolicy, NetworkPolicy, BaselineAdminNetworkPolicy) on
//! a flow of the namespace's pods (issue 29, item 4).
//!
//! The request is a `PodTrace` naming a flow's first packet (a pod or an address at each end,
//! one of them a pod of the namespace; protocol, port or ICMP type/code); the answer is the
//! same object with `status`: allowed or dropped, the tier that decided each direction and
//! its rule, and the node exemption. Authorization is the request's own: a `create` of
//! `podtraces` in the namespace, asked of kube-apiserver by the authorization layer like every
//! request (the shape of a `LocalSubjectAccessReview`).
//!
//! The answer is computed from what the agents compile: the Namespaces, Pods,
//! NetworkPolicies, AdminNetworkPolicies, the BaselineAdminNetworkPolicy and the Nodes are
//! listed from the kube-apiserver ([`world`]), compiled by `cozyplane-policy`'s `NpCompiler`
//! (the agents' compiler, fed the same way) and judged by `verdict::np_detail`, the function
//! the datapath tests hold the kernel to. A flow into or out of a node also meets that node's
//! HostFirewall ([`hostfw`]), compiled and judged the same way. Per request: a trace is an interactive question; its
//! cost is one list of each kind and one compile of the default network.

pub mod answer;
pub mod hostfw;
pub mod resolve;
pub mod world;

use std::sync::Arc;

use axum::body::Bytes;
use cozyplane_apis::GROUP;
use cozyplane_apis::v1alpha1::{API_VERSION, POD_TRACE_KIND, PodTrace};
use cozyplane_policy::verdict;
use cozyplane_storage::Storage;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::errors::{ApiError, Result};

/// Answers a pod trace asked in namespace `ns`: the request with its `status`. `kube` is the
/// server's kube-apiserver client; without one (standalone) the answer is 503.
pub async fn trace(
    storage: &Arc<dyn Storage>,
    kube: Option<&kube::Client>,
    ns: &str,
    body: &Bytes,
) -> Result<PodTrace> {
    let mut req: PodTrace = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a {POD_TRACE_KIND}: {e}")))?;
    if req.api_version != API_VERSION || req.kind != POD_TRACE_KIND {
        return Err(ApiError::bad_request(format!(
            "the body must be apiVersion {API_VERSION}, kind {POD_TRACE_KIND} (it is {:?}, {:?})",
            req.api_version, req.kind
        )));
    }
    let Some(client) = kube else {
        return Err(ApiError::unavailable(
            "a pod trace reads the default network's objects from the kube-apiserver, and this server has no connection to one",
        ));
    };
    let w = world::PodWorld::read(client).await?;
    let name = req.metadata.name.clone().unwrap_or_default();
    let flow = resolve::flow(&w, ns, &req.spec)
        .map_err(|errs| ApiError::invalid(POD_TRACE_KIND, GROUP, &name, &errs))?;
    let t = w.compile().tables();
    let d = verdict::np_detail(&t, flow.src.ip, flow.dst.ip, flow.proto, flow.port);
    let hf = hostfw::judge(&w, &hostfw::read(storage).await?, &flow);
    let status = answer::judged(ns, &w, &t, &flow, d, hf);
    req.metadata = ObjectMeta {
        name: req.metadata.name.take(),
        namespace: Some(ns.to_string()),
        ..ObjectMeta::default()
    };
    req.status = Some(status);
    Ok(req)
}
