//! What kubelet does in the API around a pod's sandbox, for the benches that play kubelet: the
//! Pod object made before the runtime calls CNI, and the status patched after ADD.

use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::Node;

/// The Pod object as the scheduler leaves it bound to `node`, asking for `vpc` if given.
pub fn pod_object(node: &str, ns: &str, name: &str, vpc: Option<&str>) -> Pod {
    let mut ann = serde_json::Map::new();
    if let Some(v) = vpc {
        ann.insert("sdn.cozystack.io/vpc".into(), json!(v));
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "annotations": ann },
        "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "pause" }] }
    }))
    .expect("a Pod")
}

/// Pod calls on the control plane's runtime (a kubelet thread may call from inside a node's
/// netns: the calls run as tasks there).
#[derive(Clone)]
pub struct PodApi {
    /// The kube API.
    pub kube: kube::Client,
    /// The control plane's runtime.
    pub h: tokio::runtime::Handle,
    /// kubelet sends its status patches over one HTTP/2 connection; kube-rs speaks HTTP/1.1
    /// and would open (and pay a TLS handshake for) one connection per patch in flight, a
    /// cost kubelet does not have. A few turns keep the pool to a few warm connections.
    status_turns: Arc<tokio::sync::Semaphore>,
}

impl PodApi {
    /// Calls through `kube` as tasks on `h`.
    pub fn new(kube: kube::Client, h: tokio::runtime::Handle) -> Self {
        Self {
            kube,
            h,
            status_turns: Arc::new(tokio::sync::Semaphore::new(4)),
        }
    }

    /// Creates the Pod object on `node`, asking for `vpc` if given; its `metadata.uid`.
    pub fn create_pod(&self, node: &Node, ns: &str, name: &str, vpc: Option<&str>) -> String {
        let pod = pod_object(&node.name, ns, name, vpc);
        let pods = Api::<Pod>::namespaced(self.kube.clone(), ns);
        self.h
            .block_on(
                self.h
                    .spawn(async move { pods.create(&PostParams::default(), &pod).await }),
            )
            .expect("create task")
            .expect("create pod")
            .metadata
            .uid
            .expect("uid")
    }

    /// kubelet's status patch, as a task on the control plane's runtime (kubelet's are
    /// goroutines on its one connection, not threads of their own).
    pub fn patch_status(
        &self,
        node: &Node,
        ns: &str,
        name: &str,
        ip: Ipv4Addr,
    ) -> tokio::task::JoinHandle<()> {
        let status = json!({ "status": { "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}],
            "hostIP": node.ip.to_string(), "phase": "Running" } });
        let (pods, name) = (Api::<Pod>::namespaced(self.kube.clone(), ns), name.to_string());
        let turns = self.status_turns.clone();
        self.h.spawn(async move {
            let _turn = turns.acquire().await.expect("never closed");
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("patch status");
        })
    }
}
