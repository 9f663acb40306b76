//! A player of Multus (multus-cni v4, the thin plugin with a kubeconfig: `pkg/multus`
//! `CmdAdd`/`CmdDel`, `pkg/types` `CreateCNIRuntimeConf`, `pkg/k8sclient`) and of libcni
//! (v1.3) under it, so the lab runs our plugin as Multus's delegate exactly as Multus calls it,
//! without Multus's Go binary.
//!
//! ADD of a sandbox: the Pod is read (its UID must be the one `CNI_ARGS` names); the cluster
//! network (the node's conflist, [`Node::conflist`]) is delegate 0, the "master plugin"; the
//! pod's `k8s.v1.cni.cncf.io/networks` ([`parse_networks`]) adds one delegate per element,
//! each the `spec.config` of the NetworkAttachmentDefinition it names (its `name` filled in
//! when missing, `cni-args` merged into `args.cni`). Delegate `i` gets `CNI_IFNAME` = the
//! element's `interface`, else `net<i>` (the master: the runtime's `eth0`); before it runs,
//! Multus asks the kernel for that link in the pod's netns and refuses a name that exists
//! (or one the kernel refuses: over 15 bytes, `numerical result out of range`). Its
//! `CNI_ARGS` are Multus's `IgnoreUnknown=true;K8S_POD_NAMESPACE=…;K8S_POD_NAME=…;
//! K8S_POD_INFRA_CONTAINER_ID=…;K8S_POD_UID=…` followed by every pair of the runtime's own
//! `CNI_ARGS` that does not fill an empty one of those (kubelet's five pairs all come again),
//! then `MAC=<mac>` and `IP=<ip>,<ip>` when the element asks for them. Its `runtimeConfig`
//! holds, of the capabilities its configuration declares, the runtime's (`portMappings`,
//! `bandwidth`) and for a non-master delegate the element's `ips`, `mac`, `portMappings`,
//! `bandwidth`, `infiniband-guid`, `deviceID`. `CNI_PATH` is Multus's `binDir` (the node's
//! plugin directory) before the runtime's path. A conflist runs plugin by plugin with
//! `prevResult`, as libcni runs one. When delegate `k` fails, delegates `k` down to 0 are
//! DELeted (the cluster network included) and ADD fails with Multus's error (code 999,
//! `[<ns>/<pod>/<uid>:<network>]: error adding container to network "<network>": <the
//! delegate's msg>`). Otherwise the pod's `k8s.v1.cni.cncf.io/network-status` is written
//! from every result ([`status`]) with a status update of the Pod.
//!
//! DEL: every delegate Multus cached at ADD, last first, the same environment without
//! `MAC`/`IP`, each with its ADD result as `prevResult` (libcni's cache); errors are
//! collected and joined with ` / `.
//!
//! Not played: `default-route` requests and the `v1.multus-cni.io/default-network`
//! annotation (refused, so a test cannot silently rely on them), Events, device-plugin
//! resources, namespace isolation (off by default in Multus), CHECK, GC and STATUS.

mod delegate;
mod link;
mod selection;
pub mod status;

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

pub use delegate::{Delegate, delegate_args};
pub use selection::{Selection, parse_networks};
pub use status::{NetworkStatus, create_network_statuses};

use crate::{Invocation, Node, invoke_as, kubelet_cni_args};
use delegate::{capability_args, load_delegates, plugin_confs};
use link::validate_ifname;

/// The pod annotation selecting the additional networks.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// The pod annotation Multus writes with every interface's status.
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// The annotation choosing another cluster network (not played).
const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";
/// The code of every error Multus itself returns (skel's `ErrInternal`).
pub const MULTUS_ERROR_CODE: u64 = 999;

/// `k8s.cni.cncf.io/v1` `network-attachment-definitions`.
pub fn nad_resource() -> ApiResource {
    ApiResource {
        group: "k8s.cni.cncf.io".into(),
        version: "v1".into(),
        api_version: "k8s.cni.cncf.io/v1".into(),
        kind: "NetworkAttachmentDefinition".into(),
        plural: "network-attachment-definitions".into(),
    }
}

/// The NetworkAttachmentDefinitions of namespace `ns`.
pub fn nads(kube: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(kube.clone(), ns, &nad_resource())
}

/// A NetworkAttachmentDefinition `ns/name` whose `spec.config` is `config`'s JSON text.
pub fn nad(ns: &str, name: &str, config: &Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &nad_resource()).within(ns);
    o.data = json!({ "spec": { "config": config.to_string() } });
    o
}

/// A delegate with the interface it gets and, once added, its ADD result (Multus's cache,
/// which its DEL runs from).
#[derive(Clone, Debug, PartialEq)]
pub struct Attached {
    /// The delegate.
    pub delegate: Delegate,
    /// Its `CNI_IFNAME`.
    pub ifname: String,
    /// Its ADD result, once it succeeded.
    pub result: Option<Value>,
}

/// A sandbox as the runtime hands it to Multus.
#[derive(Clone, Copy, Debug)]
pub struct Sandbox<'a> {
    /// The node (Multus runs in its network and mount namespace).
    pub node: &'a Node,
    /// `CNI_CONTAINERID`.
    pub cid: &'a str,
    /// `CNI_NETNS`.
    pub netns: &'a str,
    /// The Pod `(namespace, name, uid)` kubelet names in `CNI_ARGS`.
    pub pod: (&'a str, &'a str, &'a str),
    /// The runtime's capability arguments Multus declares (`portMappings`, `bandwidth`).
    pub runtime: &'a Value,
}

/// A successful ADD.
#[derive(Clone, Debug)]
pub struct Attachment {
    /// Every delegate in order, the cluster network first.
    pub delegates: Vec<Attached>,
    /// The network-status entries written on the Pod.
    pub status: Vec<NetworkStatus>,
}

impl Attachment {
    /// The ADD result of the delegate on `ifname`.
    pub fn result(&self, ifname: &str) -> Option<&Value> {
        self.delegates
            .iter()
            .find(|a| a.ifname == ifname)
            .and_then(|a| a.result.as_ref())
    }
}

/// A failed ADD: what Multus prints, what the failing delegate printed, and what Multus
/// cached for the runtime's DEL.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Multus's message (its error's code is always [`MULTUS_ERROR_CODE`]).
    pub msg: String,
    /// The failing delegate's `CNI_IFNAME`, exit code and stdout, when a delegate ran and failed.
    pub delegate: Option<(String, i32, Value)>,
    /// The delegates Multus's DEL runs (its cache; when it failed loading the NADs, the
    /// cluster network alone, which its DEL then reloads); empty when it failed before.
    pub cache: Vec<Attached>,
}

impl Failure {
    /// The error as Multus prints it (skel's `types.Error` of an untyped error).
    pub fn json(&self) -> Value {
        json!({ "code": MULTUS_ERROR_CODE, "msg": self.msg })
    }
}

/// Multus's CNI ADD of `sb`: see the module documentation.
pub async fn add(kube: &kube::Client, sb: &Sandbox<'_>) -> Result<Attachment, Box<Failure>> {
    let (pns, pname, puid) = sb.pod;
    let fail = |msg: String| {
        Box::new(Failure {
            msg,
            delegate: None,
            cache: Vec::new(),
        })
    };
    let cmd_err = |m: String| fail(format!("Multus: [{pns}/{pname}/{puid}]: {m}"));
    let pods: Api<Pod> = Api::namespaced(kube.clone(), pns);
    let pod = match pods.get_opt(pname).await {
        Ok(Some(p)) => p,
        // Multus v4 answers an empty result for a pod already gone.
        Ok(None) => {
            return Ok(Attachment {
                delegates: Vec::new(),
                status: Vec::new(),
            });
        }
        Err(e) => return Err(cmd_err(format!("error waiting for pod: {}", kube_msg(&e)))),
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if !puid.is_empty() && uid != puid {
        return Err(cmd_err(format!(
            "expected pod UID {puid:?} but got {uid:?} from Kube API"
        )));
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    if annotations.contains_key(DEFAULT_NETWORK_ANNOTATION) {
        return Err(fail(format!(
            "the player does not play {DEFAULT_NETWORK_ANNOTATION}"
        )));
    }
    let cluster = sb.node.conflist();
    let mut delegates = vec![Delegate {
        name: cluster["name"].as_str().unwrap_or_default().into(),
        conf: cluster,
        list: true,
        master: true,
        request: Selection::default(),
    }];
    let loaded = match annotations.get(NETWORKS_ANNOTATION) {
        None => Ok(Vec::new()),
        Some(text) => load_delegates(kube, text, pns).await,
    };
    let mut more = loaded.map_err(|e| {
        // Nothing cached yet: the runtime's DEL reloads the delegates from the Pod, fails the
        // same way, and goes on with the cluster network alone.
        let mut f = cmd_err(format!("error loading k8s delegates k8s args: {e}"));
        f.cache = vec![Attached {
            delegate: delegates[0].clone(),
            ifname: "eth0".into(),
            result: None,
        }];
        f
    })?;
    if more.iter().any(|d| d.request.default_route.is_some()) {
        return Err(fail("the player does not play default-route requests".into()));
    }
    delegates.append(&mut more);
    let mut cache: Vec<Attached> = delegates
        .into_iter()
        .enumerate()
        .map(|(i, d)| Attached {
            ifname: if !d.request.interface.is_empty() {
                d.request.interface.clone()
            } else if d.master {
                "eth0".into()
            } else {
                format!("net{i}")
            },
            delegate: d,
            result: None,
        })
        .collect();
    let mut status = Vec::new();
    for k in 0..cache.len() {
        match delegate_add(sb, &cache[k]) {
            Ok(result) => {
                let d = &cache[k].delegate;
                status.extend(
                    create_network_statuses(&result, &d.name, d.master)
                        .map_err(|e| cmd_err(format!("error setting network statuses: {e}")))?,
                );
                cache[k].result = Some(result);
            }
            Err((msg, delegate)) => {
                // Tear down every network added so far, the failed one included; errors
                // ignored (DEL must be idempotent anyway).
                let _ = del_from(sb, &cache, k);
                let net = cache[k].delegate.net_name().to_string();
                return Err(Box::new(Failure {
                    msg: format!(
                        "[{pns}/{pname}/{puid}:{net}]: error adding container to network {net:?}: {msg}"
                    ),
                    delegate,
                    cache,
                }));
            }
        }
    }
    // Multus writes nothing when no result had an interface or address (a nil list).
    if !status.is_empty() {
        set_network_status(&pods, sb.pod, &status)
            .await
            .map_err(|e| cmd_err(format!("error setting the networks status: {e}")))?;
    }
    Ok(Attachment {
        delegates: cache,
        status,
    })
}

/// Multus's CNI DEL of `sb` from its cache `delegates` (an [`Attachment`]'s, or a
/// [`Failure`]'s): every delegate, last first.
pub fn del(sb: &Sandbox<'_>, delegates: &[Attached]) -> Result<(), String> {
    match delegates.len() {
        0 => Ok(()),
        n => del_from(sb, delegates, n - 1),
    }
}

/// The pod's network-status annotation, parsed; `None` when it has none.
pub async fn network_status(
    kube: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Option<Vec<NetworkStatus>>, String> {
    let pod = Api::<Pod>::namespaced(kube.clone(), ns)
        .get(name)
        .await
        .map_err(|e| kube_msg(&e))?;
    pod.metadata
        .annotations
        .unwrap_or_default()
        .get(NETWORK_STATUS_ANNOTATION)
        .map(|t| status::parse_annotation(t))
        .transpose()
}

/// The environment of delegate `a` for `cmd` (ADD: with `MAC`/`IP` when asked).
fn invocation(sb: &Sandbox<'_>, a: &Attached, cmd: &str) -> Invocation {
    let r = &a.delegate.request;
    let mut extra = Vec::new();
    if cmd == "ADD" && !a.delegate.master {
        if !r.mac.is_empty() {
            extra.push(("MAC", r.mac.clone()));
        }
        if let Some(ips) = &r.ips {
            extra.push(("IP", ips.join(",")));
        }
    }
    let incoming = kubelet_cni_args(sb.cid, sb.pod);
    let node_path = sb.node.cni_path();
    let mut cni_path: Vec<PathBuf> = node_path.first().cloned().into_iter().collect();
    cni_path.extend(node_path);
    Invocation {
        cmd: cmd.into(),
        cid: sb.cid.into(),
        netns: sb.netns.into(),
        ifname: a.ifname.clone(),
        args: delegate_args(&incoming, sb.cid, sb.pod, &extra),
        cni_path,
    }
}

/// `DelegateAdd`: the interface name checked in the pod's netns, the MAC and addresses
/// checked, then the plugins run. The error: (message, the failing plugin's answer).
#[allow(clippy::type_complexity)]
fn delegate_add(sb: &Sandbox<'_>, a: &Attached) -> Result<Value, (String, Option<(String, i32, Value)>)> {
    let d = &a.delegate;
    let ty = d.conf["type"].as_str().unwrap_or_default();
    if let Err(e) = validate_ifname(sb.netns, &a.ifname) {
        return Err((
            format!(
                "DelegateAdd: cannot set {ty:?} interface name to {:?}: {e}",
                a.ifname
            ),
            None,
        ));
    }
    if !d.master {
        if !d.request.mac.is_empty() && selection::parse_mac(&d.request.mac).is_err() {
            return Err((
                format!("DelegateAdd: failed to parse mac address {:?}", d.request.mac),
                None,
            ));
        }
        for ip in d.request.ips.iter().flatten() {
            if selection::check_ip(ip).is_err() {
                return Err((format!("DelegateAdd: failed to parse IP address {ip:?}"), None));
            }
        }
    }
    let inv = invocation(sb, a, "ADD");
    let mut prev: Option<Value> = None;
    for mut conf in plugin_confs(d, &capability_args(sb.runtime, d)) {
        if let Some(p) = &prev {
            conf["prevResult"] = p.clone();
        }
        let (code, out) = invoke_as(sb.node, &inv, &conf);
        if code != 0 {
            return Err((plugin_msg(&out), Some((a.ifname.clone(), code, out))));
        }
        prev = Some(out);
    }
    Ok(prev.unwrap_or(Value::Null))
}

/// `delPlugins`: DEL of `cache[last]` down to `cache[0]`, every one tried, errors joined.
fn del_from(sb: &Sandbox<'_>, cache: &[Attached], last: usize) -> Result<(), String> {
    let mut errors = Vec::new();
    for a in cache[..=last].iter().rev() {
        let d = &a.delegate;
        let inv = invocation(sb, a, "DEL");
        let confs = plugin_confs(d, &capability_args(sb.runtime, d));
        for mut conf in confs.into_iter().rev() {
            if let Some(r) = &a.result {
                conf["prevResult"] = r.clone();
            }
            let (code, out) = invoke_as(sb.node, &inv, &conf);
            if code != 0 {
                let what = if d.list { "ConflistDel" } else { "DelegateDel" };
                errors.push(format!(
                    "DelegateDel: error invoking {what} - {:?}: {}",
                    d.net_name(),
                    plugin_msg(&out)
                ));
                break;
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join(" / "))
    }
}

/// What libcni makes of a failed plugin's output: its `msg` and `details`.
fn plugin_msg(out: &Value) -> String {
    match (out["msg"].as_str(), out["details"].as_str()) {
        (Some(m), Some(d)) if !d.is_empty() => format!("{m}; {d}"),
        (Some(m), _) => m.to_string(),
        _ => format!("netplugin failed: {out}"),
    }
}

/// `SetPodNetworkStatusAnnotation`: the Pod read (its UID checked), the annotation set, a
/// status update, again on a conflict.
async fn set_network_status(
    pods: &Api<Pod>,
    (ns, name, uid): (&str, &str, &str),
    statuses: &[NetworkStatus],
) -> Result<(), String> {
    let text = status::annotation_text(statuses);
    for _ in 0..5 {
        let mut pod = pods.get(name).await.map_err(|e| {
            format!(
                "SetPodNetworkStatusAnnotation: failed to query the pod {name} in out of cluster comm: {}",
                kube_msg(&e)
            )
        })?;
        let got = pod.metadata.uid.clone().unwrap_or_default();
        if !uid.is_empty() && got != uid {
            return Err(format!(
                "SetNetworkStatus: expected pod {ns}/{name} UID {uid:?} but got {got:?} from Kube API"
            ));
        }
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(NETWORK_STATUS_ANNOTATION.into(), text.clone());
        match pods.replace_status(name, &PostParams::default(), &pod).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                return Err(format!(
                    "SetPodNetworkStatusAnnotation: failed to update the pod {name} in out of cluster comm: {}",
                    kube_msg(&e)
                ));
            }
        }
    }
    Err(format!("status update failed for pod {ns}/{name}: conflicts"))
}

/// The API's message of a kube error (what client-go's error prints).
fn kube_msg(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}
