//! Ports made ahead of ADD.
//!
//! A VPC pod's Port, whose address and MAC the server allocates, is the one API round trip of
//! a VPC attach. As kube-ovn's controller allocates a pod's address when the pod is scheduled
//! rather than when the runtime calls CNI, the agent starts the Port as soon as its watch sees
//! a pod asking for a VPC bound to this node, and stamps the pod with the address
//! (`sdn.cozystack.io/vpc-ip`, `-mac`). ADD takes the Port it finds, waits for one in the
//! making, or makes one itself when the watch has not seen the pod yet. Whoever comes first
//! makes it and the other waits for the same result, so a pod gets one Port.
//!
//! Ownership: until ADD takes a Port, this table owns it (a pod deleted before its ADD has its
//! Port deleted here); from then on, the attachment's IPAM record does (DEL deletes it). ADD
//! checks the grant again with the namespace from the CNI args, and a Port made for another VPC
//! than the one ADD resolved (the annotation changed) or for another pod is deleted, not used.
//! The stamp names the Port (`v<vni>.<ip>`), so an agent restarted between the two finds the
//! prepared Port from the pod's annotations instead of making a second one.
//!
//! A pod deleted while the agent is down, before its ADD, leaves its prepared Port to the
//! server's Port claimant loop, which deletes it; the revocation feature (`features/sever`) releases it when the agent
//! is back.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use cozyplane_apis::v1alpha1::Port;
use cozyplane_cni::spec::CniError;
use k8s_openapi::api::core::v1::Pod;

use crate::core::api::secondary::VPCS_ANNOTATION;
use crate::core::api::{ApiClients, Persistent, PortAsk, ResolvedVpc, VPC_ANNOTATION, VPC_IP_ANNOTATION};

/// The workload attachment of interface `ifname` of a pod with `facts`: a secondary
/// interface's pins are its request's, not the pod's annotations (which pin its network's).
pub fn persistent_of(facts: &super::PodFacts, ifname: &str, ask: Option<&PortAsk>) -> Option<Persistent> {
    Persistent::of(facts, ifname).map(|mut w| {
        if let Some(a) = ask {
            w.pins = a.pins.clone();
        }
        w
    })
}

/// A pod `(namespace, name)` and the interface (`eth0`, or a listed secondary one).
type Key = (String, String, String);
type Made = Result<Port, CniError>;

enum State {
    /// Made or in the making; the cell is filled once.
    Open(Arc<tokio::sync::OnceCell<Made>>),
    /// ADD took the Port: the IPAM record owns it. Kept so the watch does not make another.
    Taken,
}

struct Slot {
    uid: Option<String>,
    state: State,
}

/// The table of prepared Ports, by pod `(namespace, name)` and interface.
#[derive(Default)]
pub struct Prepared(Mutex<HashMap<Key, Slot>>);

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |m| m.len());
        write!(f, "Prepared({n} pods)")
    }
}

impl Prepared {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Slot>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn key_of(pod: &Pod, ifname: &str) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
        ifname.to_string(),
    )
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The interface a runtime attaches a pod's network as: the one Ports are made ahead for.
pub const PRIMARY_IFNAME: &str = "eth0";

/// Two uids name different pods only when both are known.
fn other_pod(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a != b)
}

/// Whether `port` is the one to attach pod `ns/name` of this node to `v` with, as interface
/// `ask`'s (`None`: the pod's network).
fn fits(port: &Port, v: &ResolvedVpc, (ns, name): (&str, &str), node: &str, ask: Option<&PortAsk>) -> bool {
    let s = &port.spec;
    if s.interface != ask.map(|a| a.interface.as_str()).unwrap_or_default() {
        return false;
    }
    let held = s.pod_namespace == ns && s.pod_name == name && s.node == node;
    // A live migration's target: prepared here beside the holder (issue 27).
    let prepared = s
        .migration_target
        .as_ref()
        .is_some_and(|t| t.pod_namespace == ns && t.pod_name == name && t.node == node);
    s.vpc_ref.namespace == v.namespace && s.vpc_ref.name == v.name && (held || prepared)
}

impl ApiClients {
    /// The watch saw `pod`, bound to this node: start its Ports if it asks for VPCs (its
    /// network's and its listed secondary interfaces', issue 37), is not running yet
    /// (`status.podIP` is set after ADD) and has no Port made or in the making.
    pub fn pod_seen(&self, pod: &Pod) {
        let primary = annotation(pod, VPC_ANNOTATION).map(str::to_string);
        // A list that does not parse is left to ADD, which reports it.
        let listed = annotation(pod, VPCS_ANNOTATION)
            .and_then(|l| crate::core::api::secondary::listed(l, PRIMARY_IFNAME).ok())
            .unwrap_or_default();
        if primary.is_none() && listed.is_empty() {
            return;
        }
        let status = pod.status.as_ref();
        let started = status
            .and_then(|s| s.pod_ip.as_deref())
            .is_some_and(|ip| !ip.is_empty());
        let finished = status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        if pod.metadata.deletion_timestamp.is_some() || started || finished {
            return;
        }
        if let Some(request) = primary {
            self.prepare(pod, request, None);
        }
        for w in listed {
            self.prepare(pod, w.vpc.clone(), Some(w.ask()));
        }
    }

    /// Starts the Port of `pod`'s interface `ask` (`None`: its network, `eth0`) in VPC
    /// `request`, unless one is made or in the making.
    fn prepare(&self, pod: &Pod, request: String, ask: Option<PortAsk>) {
        let ifname = ask.as_ref().map_or(PRIMARY_IFNAME, |a| a.interface.as_str());
        let key = key_of(pod, ifname);
        let uid = pod.metadata.uid.clone();
        let cell = {
            let mut slots = self.prepared.slots();
            if let Some(slot) = slots.get(&key) {
                if !other_pod(slot.uid.as_deref(), uid.as_deref()) {
                    return;
                }
                // A new pod under the name of one whose deletion the watch missed.
                if let Some(old) = slots.remove(&key) {
                    self.release(old);
                }
            }
            let cell = Arc::new(tokio::sync::OnceCell::new());
            slots.insert(
                key.clone(),
                Slot {
                    uid,
                    state: State::Open(cell.clone()),
                },
            );
            cell
        };
        // The pod's network was stamped with its Port's address: a restarted agent finds it.
        let stamped: Option<IpAddr> = annotation(pod, VPC_IP_ANNOTATION)
            .and_then(|v| v.parse().ok())
            .filter(|_| ask.is_none());
        let persistent = persistent_of(&super::PodFacts::of(pod), ifname, ask.as_ref());
        let this = self.clone();
        tokio::spawn(async move {
            let (ns, name) = (&key.0, &key.1);
            let made = cell
                .get_or_init(|| async {
                    let v = this.resolve_vpc(ns, name, &request).await?;
                    if let Some(ip) = stamped
                        && let Some(port) = this.get_port(&cozyplane_apis::net::port_name(v.vni, ip)).await?
                        && fits(&port, &v, (ns, name), &this.node, None)
                    {
                        return Ok(port);
                    }
                    this.create_and_stamp(&v, ns, name, persistent.as_ref(), ask.as_ref())
                        .await
                })
                .await;
            if let Err(e) = made {
                // ADD tries again with what it knows then, and reports its own error.
                tracing::info!(pod = %format!("{ns}/{name}"), "no Port ahead of ADD: {e}");
            }
        });
    }

    /// The watch saw pod `ns/name` go: delete the Ports nobody took.
    pub fn pod_gone(&self, pod: &Pod) {
        let (ns, name, _) = key_of(pod, "");
        let mut slots = self.prepared.slots();
        let mine: Vec<Key> = slots
            .iter()
            .filter(|(k, s)| {
                k.0 == ns && k.1 == name && !other_pod(s.uid.as_deref(), pod.metadata.uid.as_deref())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in mine {
            if let Some(old) = slots.remove(&k) {
                self.release(old);
            }
        }
    }

    /// The pod list completed (a relist may drop pods without a delete event): forget the
    /// pods no longer bound here, deleting Ports nobody took.
    pub fn pods_listed(&self, live: impl Fn(&(String, String)) -> bool) {
        let mut slots = self.prepared.slots();
        let gone: Vec<Key> = slots
            .keys()
            .filter(|k| !live(&(k.0.clone(), k.1.clone())))
            .cloned()
            .collect();
        for k in gone {
            if let Some(old) = slots.remove(&k) {
                self.release(old);
            }
        }
    }

    /// Deletes the Port of a slot nobody took, once it is made.
    fn release(&self, slot: Slot) {
        let State::Open(cell) = slot.state else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            // Waits for a Port in the making; makes none if nothing was started.
            let made = cell
                .get_or_init(|| async {
                    Err(CniError::plain(
                        cozyplane_cni::spec::ErrorCode::Internal,
                        "pod gone",
                    ))
                })
                .await;
            if let Ok(port) = made {
                let name = port.metadata.name.clone().unwrap_or_default();
                if let Err(e) = this.discard_port(&name).await {
                    tracing::warn!(port = %name, "deleting a Port nobody attached: {e}");
                }
            }
        });
    }

    /// ADD: the Port to attach pod `ns/name` (uid from the CNI args) to VPC `v` with, as its
    /// interface `ask` (`None`: its network) — the one made ahead, else one made now. The
    /// caller owns it from here on.
    pub async fn take_port(
        &self,
        v: &ResolvedVpc,
        (ns, name): (&str, &str),
        uid: Option<&str>,
        (persistent, ask): (Option<&Persistent>, Option<&PortAsk>),
    ) -> Made {
        let ifname = ask.map_or(PRIMARY_IFNAME, |a| a.interface.as_str());
        let key = (ns.to_string(), name.to_string(), ifname.to_string());
        let cell = {
            let mut slots = self.prepared.slots();
            let slot = slots.entry(key).or_insert_with(|| Slot {
                uid: uid.map(str::to_string),
                state: State::Open(Arc::new(tokio::sync::OnceCell::new())),
            });
            if other_pod(slot.uid.as_deref(), uid) {
                let old = std::mem::replace(
                    slot,
                    Slot {
                        uid: uid.map(str::to_string),
                        state: State::Taken,
                    },
                );
                self.release(old);
                None
            } else {
                match std::mem::replace(&mut slot.state, State::Taken) {
                    State::Open(cell) => Some(cell),
                    // Taken before: an ADD retried after the first one failed and cleaned up.
                    State::Taken => None,
                }
            }
        };
        if let Some(cell) = cell {
            match cell
                .get_or_init(|| self.create_and_stamp(v, ns, name, persistent, ask))
                .await
            {
                Ok(port) if fits(port, v, (ns, name), &self.node, ask) => return Ok(port.clone()),
                Ok(port) => {
                    let stale = port.metadata.name.clone().unwrap_or_default();
                    tracing::warn!(port = %stale, pod = %format!("{ns}/{name}"), vpc = %format!("{}/{}", v.namespace, v.name),
                        "the Port made ahead is not this attachment's; making another");
                    let _ = self.discard_port(&stale).await;
                }
                // Made ahead with what the watch knew then (no binding yet, say): try now.
                Err(_) => {}
            }
        }
        self.create_and_stamp(v, ns, name, persistent, ask).await
    }

    /// Creates the Port (for a persistent attachment: takes the workload's, made if it has
    /// none) and, for the pod's network (`ask` none), stamps the pod with its address and MAC.
    async fn create_and_stamp(
        &self,
        v: &ResolvedVpc,
        ns: &str,
        name: &str,
        persistent: Option<&Persistent>,
        ask: Option<&PortAsk>,
    ) -> Made {
        let taken = match persistent {
            Some(w) => self.bind_persistent(v, ns, name, w).await?.into_iter().next(),
            None => None,
        };
        let port = match taken {
            Some(p) => p,
            None => self.create_port(v, ns, name, None, persistent, ask).await?,
        };
        if ask.is_some() {
            return Ok(port);
        }
        let ip: IpAddr = port.spec.ip.parse().map_err(|_| {
            CniError::new(
                cozyplane_cni::spec::ErrorCode::Internal,
                "the Port has no address",
                format!("{:?}: {:?}", port.metadata.name, port.spec.ip),
            )
        })?;
        self.stamp_pod(ns, name, ip, &port.spec.mac).await?;
        Ok(port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_differ_only_when_both_are_known() {
        assert!(other_pod(Some("a"), Some("b")));
        assert!(!other_pod(Some("a"), Some("a")));
        assert!(!other_pod(None, Some("b")));
        assert!(!other_pod(Some("a"), None));
    }

    #[test]
    fn a_port_fits_only_its_pod_vpc_and_node() {
        let v = ResolvedVpc {
            namespace: "t".into(),
            name: "v".into(),
            vni: 100,
            mtu: 0,
            dual_stack: false,
            ranges: Vec::new(),
        };
        let port: Port = serde_json::from_value(serde_json::json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "Port",
            "metadata": {"name": "v100.10-0-0-2"},
            "spec": {"vpcRef": {"namespace": "t", "name": "v"}, "ip": "10.0.0.2", "mac": "02:00:00:00:00:01",
                     "node": "n1", "nodeIP": "192.0.2.1", "podNamespace": "t", "podName": "p"}
        }))
        .expect("port");
        assert!(fits(&port, &v, ("t", "p"), "n1", None));
        assert!(!fits(&port, &v, ("t", "q"), "n1", None));
        assert!(!fits(&port, &v, ("u", "p"), "n1", None));
        assert!(!fits(&port, &v, ("t", "p"), "n2", None));
        let other = ResolvedVpc {
            name: "w".into(),
            ..v.clone()
        };
        assert!(!fits(&port, &other, ("t", "p"), "n1", None));
        // The pod's network's Port is no secondary interface's, and the reverse.
        let net1 = PortAsk {
            interface: "net1".into(),
            ..PortAsk::default()
        };
        assert!(!fits(&port, &v, ("t", "p"), "n1", Some(&net1)));
        let mut second = port.clone();
        second.spec.interface = "net1".into();
        assert!(fits(&second, &v, ("t", "p"), "n1", Some(&net1)));
        assert!(!fits(&second, &v, ("t", "p"), "n1", None));
    }
}
