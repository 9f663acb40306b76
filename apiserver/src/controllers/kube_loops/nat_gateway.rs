//! The VPCGateway loop: a VPC's NAT identity, asked of the cluster's LoadBalancer
//! implementation.
//!
//! For the effective gateway of a VPC ([`vpc_gateway::effective`]: the oldest gateway naming it
//! that is not being deleted) with `spec.nat.enabled`, while the VPC exists, the loop owns one
//! Service per address family of the VPC (see [`super::doors`] for its shape; `generateName`
//! `<gw>-v4-`/`<gw>-v6-`, label `sdn.cozystack.io/address-family`, the gateway's
//! `loadBalancerClass`, the annotation `local.sdn.cozystack.io/ip-address-claim` from
//! `nat.addressClaimName`/`addressClaimName6`) and its EndpointSlice, whose one always-Ready
//! endpoint is the assigned address itself (what makes MetalLB announce it). The address the
//! implementation writes into the Service's `status.loadBalancer.ingress` becomes
//! `status.natAddress`/`natAddress6`, which the agents use as the VPC's SNAT source.
//!
//! An IPv6-only VPC with `spec.dns64` also gets an IPv4 Service ([`nat_families`]): its pods
//! reach IPv4 hosts at `64:ff9b::a.b.c.d`, which the datapath translates (NAT64) to that
//! address, as a cloud's NAT gateway does for a subnet with DNS64.
//!
//! Anything else — the gateway deleted, no longer exclusive, NAT disabled, the VPC gone or a
//! family removed from it — deletes the Services and slices and clears the addresses. A family
//! whose Service create is refused (422 Invalid: the cluster does not serve IPv6, say) gets no
//! address; the `NATReady` message says why, and the create is tried again only once the
//! gateway's spec changes. With this loop running (a kube connection) it writes all of the
//! gateway's status; [`crate::controllers::loops`] leaves gateways alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use cozyplane_apis::v1alpha1::VPCGateway;
use k8s_openapi::api::core::v1::Service;

use super::super::loops::write_status;
use super::doors::{
    Door, Doors, FAMILY_LABEL, Family, GATEWAY_LABEL, PROXY, PROXY_NAME, ingress, service_family,
    vpc_families,
};
use super::owned::{Ensured, WantEndpoint, WantService};
use crate::errors::Result;
use crate::registry::vpc_gateway::{self, Nat};

impl Doors {
    /// Brings gateway `ns`/`name`'s Services, slices and status to what the module docs say.
    pub(super) async fn gateway(&self, ns: &str, name: &str) -> Result<()> {
        let door = Door::Gateway((ns.to_string(), name.to_string()));
        let g = self.gateways.get(ns, name);
        let have = self.services.of(&door);
        if g.is_none() && !have.is_empty() {
            // The mirror may not hold the gateway yet (just started): ask the store before
            // deleting what may still be its Services.
            match self.gateways_kind.get(Some(ns), name).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let mut resolved = false;
        let mut effective: Option<Arc<VPCGateway>> = None;
        let mut families = Vec::new();
        if let Some(g) = &g {
            let same_vpc: Vec<Arc<VPCGateway>> = self
                .gateways
                .in_namespace(ns)
                .into_iter()
                .filter(|o| o.spec.vpc_ref.name == g.spec.vpc_ref.name)
                .collect();
            effective = vpc_gateway::effective(same_vpc.iter().map(|o| &**o)).map(|e| Arc::new(e.clone()));
            let vpc = self.vpcs.get(ns, &g.spec.vpc_ref.name);
            resolved = vpc.is_some();
            let exclusive = effective
                .as_ref()
                .is_some_and(|e| e.metadata.name == g.metadata.name);
            if exclusive && g.spec.nat.enabled && g.metadata.deletion_timestamp.is_none() {
                families = vpc.as_deref().map(nat_families).unwrap_or_default();
            }
        }
        // Keep the oldest fitting Service per wanted family; delete the rest.
        let mut kept: BTreeMap<Family, Arc<Service>> = BTreeMap::new();
        let mut sorted = have;
        sorted.sort_by_key(|s| {
            (
                s.metadata.creation_timestamp.as_ref().map(|t| t.0),
                s.metadata.name.clone(),
            )
        });
        for s in sorted {
            let fam = service_family(&s);
            match fam.filter(|f| families.contains(f) && !kept.contains_key(f)) {
                Some(f) => {
                    kept.insert(f, s);
                }
                None => {
                    let n = s.metadata.name.clone().unwrap_or_default();
                    self.delete_service(ns, &n).await?;
                }
            }
        }
        let mut nat = Nat::default();
        let mut notes = Vec::new();
        if let Some(g) = &g {
            let generation = g.metadata.generation.unwrap_or(1);
            for f in families.iter().copied() {
                let refusal = self.refusal(&door, f, generation);
                let have = kept.remove(&f);
                if have.is_none()
                    && let Some(why) = refusal
                {
                    notes.push(format!("the cluster refused the {} Service: {why}", f.name()));
                    continue;
                }
                let want = want_service(g, f);
                let svc = match self.ensure_service(have, &want).await? {
                    Ensured::Service(s) => s,
                    Ensured::Refused(why) => {
                        tracing::warn!(gateway = %format!("{ns}/{name}"), family = f.name(), %why, "the cluster refused a NAT Service");
                        notes.push(format!("the cluster refused the {} Service: {why}", f.name()));
                        self.refuse(&door, f, generation, why);
                        continue;
                    }
                };
                let address = ingress(&svc, f).unwrap_or_default();
                let endpoint = (!address.is_empty()).then(|| WantEndpoint {
                    address: address.clone(),
                    ready: true,
                    node: String::new(),
                });
                self.ensure_slice(&svc, f, (GATEWAY_LABEL, name), endpoint)
                    .await?;
                match f {
                    Family::V4 => nat.v4 = address,
                    Family::V6 => nat.v6 = address,
                }
            }
        }
        // Slices left without their Service.
        for s in self.slices.of(&door) {
            let n = s.metadata.name.clone().unwrap_or_default();
            if self.services.get(ns, &n).is_none() {
                self.delete_slice(ns, &n).await?;
            }
        }
        let Some(g) = g else {
            self.forget_refusals(&door);
            return Ok(());
        };
        nat.note = notes.join("; ");
        let st = vpc_gateway::status(&g, resolved, effective.as_deref(), Some(&nat));
        if g.status.as_ref() == Some(&st) {
            return Ok(());
        }
        write_status(&self.gateways_kind, &*g, serde_json::json!(st)).await
    }

    pub(super) fn refusal(&self, door: &Door, f: Family, generation: i64) -> Option<String> {
        let m = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(&(door.clone(), f))
            .filter(|(g, _)| *g == generation)
            .map(|(_, why)| why.clone())
    }

    pub(super) fn refuse(&self, door: &Door, f: Family, generation: i64, why: String) {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((door.clone(), f), (generation, why));
    }

    pub(super) fn forget_refusals(&self, door: &Door) {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(d, _), _| d != door);
    }
}

/// The Service of gateway `g` for family `f`.
fn want_service(g: &VPCGateway, f: Family) -> WantService {
    let name = g.metadata.name.clone().unwrap_or_default();
    let claim = match f {
        Family::V4 => &g.spec.nat.address_claim_name,
        Family::V6 => &g.spec.nat.address_claim_name6,
    };
    WantService {
        namespace: g.metadata.namespace.clone().unwrap_or_default(),
        generate_name: format!("{name}-{}-", f.short()),
        labels: [
            (PROXY_NAME.to_string(), PROXY.to_string()),
            (GATEWAY_LABEL.to_string(), name.clone()),
            (FAMILY_LABEL.to_string(), f.name().to_string()),
        ]
        .into(),
        claim: claim.clone(),
        class: g.spec.load_balancer_class.clone(),
        family: f,
        owner: (
            "sdn.cozystack.io/v1alpha1",
            "VPCGateway",
            name,
            g.metadata.uid.clone().unwrap_or_default(),
        ),
    }
}

/// The families of a VPC's NAT addresses: those of its ranges, and IPv4 for an IPv6-only VPC
/// that asks for DNS64 (its IPv4 destinations leave by NAT64).
fn nat_families(vpc: &cozyplane_apis::v1alpha1::VPC) -> Vec<Family> {
    let mut f = vpc_families(vpc);
    if vpc.spec.dns64 && !f.contains(&Family::V4) {
        f.insert(0, Family::V4);
    }
    f
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{VPC, VPCSpec};

    use super::*;

    fn vpc(cidrs: &[&str], dns64: bool) -> VPC {
        VPC::new(
            "v",
            VPCSpec {
                cidrs: cidrs.iter().map(|c| (*c).to_owned()).collect(),
                dns64,
                ..Default::default()
            },
        )
    }

    #[test]
    fn an_ipv6_only_vpc_with_dns64_also_gets_an_ipv4_nat_address() {
        assert_eq!(
            nat_families(&vpc(&["fd00:6::/64"], true)),
            [Family::V4, Family::V6]
        );
        assert_eq!(nat_families(&vpc(&["fd00:6::/64"], false)), [Family::V6]);
        assert_eq!(nat_families(&vpc(&["10.0.0.0/24"], false)), [Family::V4]);
        assert_eq!(
            nat_families(&vpc(&["10.0.0.0/24", "fd00:6::/64"], true)),
            [Family::V4, Family::V6]
        );
    }
}
