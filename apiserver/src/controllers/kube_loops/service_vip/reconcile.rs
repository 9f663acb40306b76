//! The ServiceVIP loop's decisions and writes: what a Service should have ([`Decision`]), the
//! ServiceVIPs created, updated and deleted to match, their `status.backends`, and the
//! attachment annotation and Event on the Service.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cozyplane_apis::v1alpha1::{ServiceVIP, ServiceVIPBackend, ServiceVIPBackendPort, ServiceVIPPort};
use k8s_openapi::api::core::v1::{Event, ObjectReference, Service};
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::{
    ATTACHED, ATTACHMENT_ANNOTATION, Key, LABEL_SVC, LABEL_SVC_NS, LABEL_VPC, LABEL_VPC_NS,
    NO_BINDING_REASON, Shared, annotated_vpc, key_of,
};
use crate::controllers::kube_loops::{index_get, index_set};
use crate::errors::{ApiError, Result};
use crate::rbac::server as rbac;
use crate::registry::Resource;
use crate::registry::store::{DeleteOptions, WriteOptions};

/// What a Service should have, decided from the caches.
#[derive(Debug, PartialEq)]
enum Decision {
    /// No ServiceVIP; the attachment annotation (if annotated) and whether to emit the Event.
    None(Option<String>, bool),
    /// One ServiceVIP per family of the VPC.
    Attached { vpc: Key, v4: bool, v6: bool },
}

fn family_ip(v4: bool) -> &'static str {
    if v4 { "0.0.0.0" } else { "::" }
}

fn is_v4(ip: &str) -> Option<bool> {
    ip.parse::<std::net::IpAddr>().ok().map(|a| a.is_ipv4())
}

/// The Service's TCP and UDP ports as a ServiceVIP lists them.
fn vip_ports(svc: &Service) -> Vec<ServiceVIPPort> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                    (proto == "TCP" || proto == "UDP").then(|| ServiceVIPPort {
                        name: p.name.clone().unwrap_or_default(),
                        protocol: proto,
                        port: p.port,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn affinity(svc: &Service) -> String {
    match svc.spec.as_ref().and_then(|s| s.session_affinity.as_deref()) {
        Some("ClientIP") => "ClientIP".into(),
        _ => String::new(),
    }
}

/// The reconciler of ServiceVIPs.
pub(super) struct Reconciler {
    pub(super) shared: Arc<Shared>,
    pub(super) vips: Arc<dyn Resource>,
    pub(super) kube: kube::Client,
}

#[async_trait::async_trait]
impl crate::controllers::queue::Reconcile<Key> for Reconciler {
    async fn reconcile(&self, k: &Key) -> Result<()> {
        self.service(k).await
    }
}

impl Reconciler {
    fn decide(&self, svc: Option<&Service>) -> Decision {
        let sh = &self.shared;
        let Some(svc) = svc.filter(|s| s.metadata.deletion_timestamp.is_none()) else {
            return Decision::None(None, false);
        };
        let Some(vpc) = annotated_vpc(svc) else {
            return Decision::None(None, false);
        };
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
            return Decision::None(
                Some("Headless: a headless Service gets no ServiceVIP".into()),
                false,
            );
        }
        if !sh.bound(&ns, &vpc) {
            let why = format!(
                "{NO_BINDING_REASON}: namespace {ns} has no VPCBinding for VPC {}/{}",
                vpc.0, vpc.1
            );
            return Decision::None(Some(why), true);
        }
        let Some(v) = sh.vpcs.get(&vpc.0, &vpc.1) else {
            return Decision::None(
                Some(format!("VPCNotFound: VPC {}/{} does not exist", vpc.0, vpc.1)),
                false,
            );
        };
        let fams: Vec<bool> = v
            .spec
            .cidrs
            .iter()
            .filter_map(|c| is_v4(c.split('/').next()?))
            .collect();
        Decision::Attached {
            vpc,
            v4: fams.contains(&true),
            v6: fams.contains(&false),
        }
    }

    async fn service(&self, k: &Key) -> Result<()> {
        let sh = &self.shared;
        if !sh.ready() {
            return Ok(());
        }
        let svc = sh.services.get(&ObjectRef::new(&k.1).within(&k.0));
        let existing: Vec<Arc<ServiceVIP>> = index_get(&sh.vips_of, k)
            .iter()
            .filter_map(|n| {
                sh.vips.get("", n).or_else(|| {
                    sh.fresh
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get(n)
                        .cloned()
                })
            })
            .filter(|v| v.metadata.deletion_timestamp.is_none())
            .collect();
        let decision = self.decide(svc.as_deref());
        let mut keep: BTreeMap<bool, Arc<ServiceVIP>> = BTreeMap::new();
        if let Decision::Attached { vpc, v4, v6 } = &decision {
            for v in &existing {
                let Some(fam) = is_v4(&v.spec.ip) else { continue };
                let wanted = if fam { *v4 } else { *v6 };
                let same_vpc = v.spec.vpc_ref.namespace == vpc.0 && v.spec.vpc_ref.name == vpc.1;
                if wanted && same_vpc && !keep.contains_key(&fam) {
                    keep.insert(fam, v.clone());
                }
            }
        }
        for v in &existing {
            if !keep.values().any(|k| k.metadata.name == v.metadata.name) {
                let name = v.metadata.name.clone().unwrap_or_default();
                tracing::info!(servicevip = %name, service = %format!("{}/{}", k.0, k.1), "deleting a ServiceVIP");
                match self.vips.delete(None, &name, &DeleteOptions::default()).await {
                    Err(e) if !e.is_not_found() => return Err(e),
                    _ => {}
                }
            }
        }
        let attachment = match &decision {
            Decision::None(why, _) => why.clone(),
            Decision::Attached { .. } => Some(ATTACHED.to_string()),
        };
        if let Some(svc) = &svc {
            let event = matches!(decision, Decision::None(_, true));
            self.annotate(svc, attachment, event).await?;
        }
        let (Decision::Attached { vpc, v4, v6 }, Some(svc)) = (&decision, &svc) else {
            return Ok(());
        };
        for fam in [true, false] {
            if !(if fam { *v4 } else { *v6 }) {
                continue;
            }
            match keep.get(&fam) {
                None => self.create(svc, vpc, fam).await?,
                Some(v) => self.update(svc, vpc, v).await?,
            }
        }
        Ok(())
    }

    async fn create(&self, svc: &Service, vpc: &Key, v4: bool) -> Result<()> {
        let (ns, name) = key_of(&svc.metadata);
        let body = json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "ServiceVIP",
            "metadata": {
                "generateName": "sv",
                "labels": {
                    LABEL_VPC: vpc.1, LABEL_VPC_NS: vpc.0, LABEL_SVC_NS: ns, LABEL_SVC: name,
                },
            },
            "spec": {
                "vpcRef": { "namespace": vpc.0, "name": vpc.1 },
                "ip": family_ip(v4),
                "serviceRef": { "namespace": ns, "name": name },
                "ports": vip_ports(svc),
                "sessionAffinity": affinity(svc),
            },
        });
        let created = self.vips.create(None, body, &WriteOptions::server()).await?;
        if let Ok(v) = serde_json::from_value::<ServiceVIP>(created.clone())
            && let Some(n) = v.metadata.name.clone()
        {
            let sh = &self.shared;
            let seen = sh.vips.get("", &n).is_some();
            if !seen {
                sh.fresh
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(n.clone(), Arc::new(v));
                index_set(&sh.vips_of, (ns.clone(), name.clone()), &n, true);
            }
        }
        tracing::info!(
            servicevip = %created["metadata"]["name"].as_str().unwrap_or_default(),
            ip = %created["spec"]["ip"].as_str().unwrap_or_default(),
            service = %format!("{ns}/{name}"),
            "ServiceVIP created"
        );
        Ok(())
    }

    async fn update(&self, svc: &Service, vpc: &Key, v: &ServiceVIP) -> Result<()> {
        let name = v.metadata.name.clone().unwrap_or_default();
        let (ports, aff) = (vip_ports(svc), affinity(svc));
        if v.spec.ports != ports || v.spec.session_affinity != aff {
            let (p, a) = (json!(ports), aff.clone());
            let set = move |mut cur: Value| -> Result<Value> {
                cur["spec"]["ports"] = p.clone();
                cur["spec"]["sessionAffinity"] = json!(a.clone());
                Ok(cur)
            };
            self.vips
                .patch(None, &name, &set, false, &WriteOptions::server())
                .await?;
        }
        let v4 = is_v4(&v.spec.ip).unwrap_or(true);
        let backends = self.backends(svc, vpc, v4, &ports);
        let phase = if backends.is_empty() { "Pending" } else { "Ready" };
        let have = v.status.as_ref();
        if have.is_some_and(|s| s.backends == backends && s.phase == phase) {
            return Ok(());
        }
        let (b, ph) = (json!(backends), phase.to_string());
        let set = move |mut cur: Value| -> Result<Value> {
            if !cur.get("status").is_some_and(Value::is_object) {
                cur["status"] = json!({});
            }
            cur["status"]["backends"] = b.clone();
            cur["status"]["phase"] = json!(ph.clone());
            Ok(cur)
        };
        match self
            .vips
            .patch(None, &name, &set, true, &WriteOptions::server())
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The ready endpoints of the Service's slices whose pods hold an address of `vpc` in the
    /// family, each with the target port of every Service port it serves.
    fn backends(
        &self,
        svc: &Service,
        vpc: &Key,
        v4: bool,
        ports: &[ServiceVIPPort],
    ) -> Vec<ServiceVIPBackend> {
        let sh = &self.shared;
        let key = key_of(&svc.metadata);
        let not_ready_too = svc
            .spec
            .as_ref()
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false);
        let mut out: BTreeMap<String, BTreeSet<(String, i32, i32)>> = BTreeMap::new();
        for slice in index_get(&sh.slices_of, &key) {
            let Some(s) = sh.slices.get(&ObjectRef::new(&slice).within(&key.0)) else {
                continue;
            };
            let slice_ports = s.ports.as_deref().unwrap_or_default();
            for e in s.endpoints.iter().flatten() {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !(ready || not_ready_too) {
                    continue;
                }
                let Some(r) = e.target_ref.as_ref().filter(|r| r.kind.as_deref() == Some("Pod")) else {
                    continue;
                };
                let pod = (
                    r.namespace.clone().unwrap_or_else(|| key.0.clone()),
                    r.name.clone().unwrap_or_default(),
                );
                let Some(ip) = sh.pod_address(&pod, vpc, v4) else {
                    continue;
                };
                for p in ports {
                    let target = slice_ports.iter().find(|sp| {
                        sp.name.clone().unwrap_or_default() == p.name
                            && sp.protocol.clone().unwrap_or_else(|| "TCP".into()) == p.protocol
                    });
                    if let Some(t) = target.and_then(|t| t.port) {
                        out.entry(ip.clone())
                            .or_default()
                            .insert((p.protocol.clone(), p.port, t));
                    }
                }
            }
        }
        out.into_iter()
            .map(|(ip, ps)| ServiceVIPBackend {
                ip,
                ports: ps
                    .into_iter()
                    .map(|(protocol, port, target_port)| ServiceVIPBackendPort {
                        protocol,
                        port,
                        target_port,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Writes the attachment annotation when it changes (removes it from a Service no longer
    /// annotated for a VPC), with a Warning Event when `event` and the reason is new.
    async fn annotate(&self, svc: &Service, want: Option<String>, event: bool) -> Result<()> {
        let (ns, name) = key_of(&svc.metadata);
        let have = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ATTACHMENT_ANNOTATION))
            .cloned();
        if have == want {
            return Ok(());
        }
        let api = rbac::SERVICES
            .uses("patch")
            .api_namespaced::<Service>(self.kube.clone(), &ns);
        let patch = json!({ "metadata": { "annotations": { ATTACHMENT_ANNOTATION: want } } });
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|e| ApiError::unavailable(format!("annotating Service {ns}/{name}: {e}")))?;
        if event && let Some(why) = &want {
            let (reason, message) = why.split_once(": ").unwrap_or((NO_BINDING_REASON, why));
            let ev = crate::controllers::kube_loops::events::warning(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    generate_name: Some(format!("{name}.")),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Service".into()),
                    namespace: Some(ns.clone()),
                    name: Some(name.clone()),
                    uid: svc.metadata.uid.clone(),
                    ..Default::default()
                },
                reason,
                message.into(),
            );
            let events = rbac::EVENTS
                .uses("create")
                .api_namespaced::<Event>(self.kube.clone(), &ns);
            if let Err(e) = events.create(&PostParams::default(), &ev).await {
                tracing::warn!(service = %format!("{ns}/{name}"), "recording an Event: {e}");
            }
        }
        Ok(())
    }
}
