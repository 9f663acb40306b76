//! The FloatingIP loop: one public address for one Port, asked of the cluster's LoadBalancer
//! implementation.
//!
//! Of the FloatingIPs of a namespace naming the same `{vpc, target}`, the oldest that is not
//! being deleted (ties: name) is exclusive; the others get `TargetExclusive=False`
//! (`TargetConflict`) and no Service (one they had is deleted). The exclusive one owns a
//! Service (`generateName` `<fip>-`, label `sdn.cozystack.io/floating-ip`, the family of
//! `spec.ipFamily`, else of `spec.target`, see [`super::doors`] for the rest of its shape) and
//! its EndpointSlice, whose one endpoint is `spec.target` on the node of the Port holding it,
//! Ready while that Port is live (it exists, is not being deleted and names a node). An IPv4
//! Floating IP of an IPv6 target (NAT46/64) names the assigned address itself instead, once
//! there is one: the slice's family is the Service's. The Port is found by name (the
//! VPC's VNI and the address make it), and a Port appearing, moving or going away queues the
//! FloatingIPs of its address. `status.address` is the Service's ingress; the phase is `Ready`
//! when the Service exists, an address is assigned, the target is live and the FloatingIP is
//! exclusive.

use std::net::IpAddr;
use std::sync::Arc;

use cozyplane_apis::net::{canonical_ip, port_name};
use cozyplane_apis::v1alpha1::FloatingIP;

use super::super::loops::write_status;
use super::doors::{Door, Doors, FIP_LABEL, Family, PROXY, PROXY_NAME, ingress};
use super::owned::{Ensured, WantEndpoint, WantService};
use crate::errors::Result;
use crate::registry::floating_ip::{self, Facts};

/// The exclusive FloatingIP among `fips` (those of one `{vpc, target}`).
fn winner<'a>(fips: impl IntoIterator<Item = &'a FloatingIP>) -> Option<&'a FloatingIP> {
    fips.into_iter()
        .filter(|f| f.metadata.deletion_timestamp.is_none())
        .min_by_key(|f| {
            (
                f.metadata.creation_timestamp.as_ref().map(|t| t.0),
                f.metadata.name.clone(),
            )
        })
}

fn same_target(a: &FloatingIP, b: &FloatingIP) -> bool {
    let canon = |t: &str| {
        t.parse::<IpAddr>()
            .map(canonical_ip)
            .unwrap_or_else(|_| t.to_string())
    };
    a.spec.vpc_ref.name == b.spec.vpc_ref.name && canon(&a.spec.target) == canon(&b.spec.target)
}

impl Doors {
    /// Brings FloatingIP `ns`/`name`'s Service, slice and status to what the module docs say.
    pub(super) async fn floating_ip(&self, ns: &str, name: &str) -> Result<()> {
        let door = Door::Fip((ns.to_string(), name.to_string()));
        let f = self.fips.get(ns, name);
        let have = self.services.of(&door);
        if f.is_none() && !have.is_empty() {
            // The mirror may lag the store (just started): confirm before deleting.
            match self.fips_kind.get(Some(ns), name).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let mut facts = Facts::default();
        let mut want: Option<(WantService, IpAddr)> = None;
        if let Some(f) = &f {
            let rivals: Vec<Arc<FloatingIP>> = self
                .fips
                .in_namespace(ns)
                .into_iter()
                .filter(|o| same_target(o, f))
                .collect();
            let win = winner(rivals.iter().map(|o| &**o)).and_then(|w| w.metadata.name.clone());
            if win.as_deref() != f.metadata.name.as_deref() {
                facts.winner = Some(win.unwrap_or_default());
            }
            let target = f.spec.target.parse::<IpAddr>().ok();
            facts.node = self.live_node(f, target);
            match target {
                None => facts.service_note = format!("target {:?} is not an IP address", f.spec.target),
                Some(t) if facts.winner.is_none() && f.metadata.deletion_timestamp.is_none() => {
                    let family = Family::parse(&f.spec.ip_family).unwrap_or(Family::of(t));
                    want = Some((want_service(f, family), t));
                }
                Some(_) => {}
            }
        }
        let mut sorted = have;
        sorted.sort_by_key(|s| {
            (
                s.metadata.creation_timestamp.as_ref().map(|t| t.0),
                s.metadata.name.clone(),
            )
        });
        let mut keep = None;
        for s in sorted {
            if want.is_some() && keep.is_none() {
                keep = Some(s);
            } else {
                let n = s.metadata.name.clone().unwrap_or_default();
                self.delete_service(ns, &n).await?;
            }
        }
        if let (Some(f), Some((w, target))) = (&f, want) {
            let generation = f.metadata.generation.unwrap_or(1);
            let family = w.family;
            let prior = if keep.is_none() {
                self.refusal(&door, family, generation)
                    .map(|why| format!("the cluster refused the Service: {why}"))
            } else {
                None
            };
            let svc = match prior {
                Some(why) => {
                    facts.service_note = why;
                    None
                }
                None => match self.ensure_service(keep, &w).await? {
                    Ensured::Service(s) => Some(s),
                    Ensured::Refused(why) => {
                        tracing::warn!(fip = %format!("{ns}/{name}"), %why, "the cluster refused a FloatingIP Service");
                        self.refuse(&door, family, generation, why.clone());
                        facts.service_note = format!("the cluster refused the Service: {why}");
                        None
                    }
                },
            };
            if let Some(svc) = svc {
                facts.service = true;
                facts.address = ingress(&svc, family).unwrap_or_default();
                // The slice's one endpoint is the target; a translated Floating IP's target
                // is of the other family than the slice, so it names the public address
                // itself once assigned, as a gateway's slice does.
                let address = if Family::of(target) == family {
                    Some(canonical_ip(target))
                } else {
                    (!facts.address.is_empty()).then(|| facts.address.clone())
                };
                let endpoint = address.map(|address| WantEndpoint {
                    address,
                    ready: !facts.node.is_empty(),
                    node: facts.node.clone(),
                });
                self.ensure_slice(&svc, family, (FIP_LABEL, name), endpoint)
                    .await?;
            }
        }
        for s in self.slices.of(&door) {
            let n = s.metadata.name.clone().unwrap_or_default();
            if self.services.get(ns, &n).is_none() {
                self.delete_slice(ns, &n).await?;
            }
        }
        let Some(f) = f else {
            self.forget_refusals(&door);
            return Ok(());
        };
        let st = floating_ip::status(&f, &facts);
        if f.status.as_ref() == Some(&st) {
            return Ok(());
        }
        write_status(&self.fips_kind, &*f, serde_json::json!(st)).await
    }

    /// The node of the live Port holding `target` in the FloatingIP's VPC, or empty.
    fn live_node(&self, f: &FloatingIP, target: Option<IpAddr>) -> String {
        let ns = f.metadata.namespace.as_deref().unwrap_or_default();
        let Some(vni) = self
            .vpcs
            .get(ns, &f.spec.vpc_ref.name)
            .and_then(|v| v.status.as_ref().map(|s| s.vni))
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v != 0)
        else {
            return String::new();
        };
        let Some(t) = target else { return String::new() };
        match self.ports.get("", &port_name(vni, t)) {
            Some(p)
                if p.metadata.deletion_timestamp.is_none()
                    && p.spec.vpc_ref.namespace == ns
                    && p.spec.vpc_ref.name == f.spec.vpc_ref.name =>
            {
                p.spec.node.clone()
            }
            _ => String::new(),
        }
    }
}

/// The Service of FloatingIP `f` in family `family`.
fn want_service(f: &FloatingIP, family: Family) -> WantService {
    let name = f.metadata.name.clone().unwrap_or_default();
    WantService {
        namespace: f.metadata.namespace.clone().unwrap_or_default(),
        generate_name: format!("{name}-"),
        labels: [
            (PROXY_NAME.to_string(), PROXY.to_string()),
            (FIP_LABEL.to_string(), name.clone()),
        ]
        .into(),
        claim: f.spec.address_claim_name.clone(),
        class: f.spec.load_balancer_class.clone(),
        family,
        owner: (
            "sdn.cozystack.io/v1alpha1",
            "FloatingIP",
            name,
            f.metadata.uid.clone().unwrap_or_default(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{FloatingIPSpec, LocalVPCRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn fip(name: &str, target: &str, second: i64) -> FloatingIP {
        let mut f = FloatingIP::new(
            name,
            FloatingIPSpec {
                vpc_ref: LocalVPCRef { name: "v".into() },
                target: target.into(),
                ..Default::default()
            },
        );
        f.metadata.creation_timestamp = Some(Time(Timestamp::from_second(second).unwrap()));
        f
    }

    #[test]
    fn the_older_floating_ip_of_a_target_wins() {
        let (old, new) = (fip("b", "10.0.0.5", 1_000), fip("a", "10.0.0.5", 2_000));
        assert_eq!(winner([&new, &old]).unwrap().metadata.name.as_deref(), Some("b"));
        assert!(
            same_target(&fip("x", "fd00::05", 1), &fip("y", "fd00::5", 1)),
            "targets compare as addresses"
        );
        let mut gone = old.clone();
        gone.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(3_000).unwrap()));
        assert_eq!(winner([&new, &gone]).unwrap().metadata.name.as_deref(), Some("a"));
    }
}
