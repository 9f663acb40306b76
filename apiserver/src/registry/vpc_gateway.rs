//! Registry policy of `VPCGateway`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::{VPCGateway, VPCGatewayStatus};

use super::condition::condition;

use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_vpc_gateway, validate_vpc_gateway_update};

/// Create/update policy of `VPCGateway`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = VPCGateway;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "NAT Address",
            kind: "string",
            pointer: "/status/natAddress",
            priority: 0,
            description: "Egress NAT address.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
        Column {
            name: "NAT",
            kind: "boolean",
            pointer: "/spec/nat/enabled",
            priority: 1,
            description: "Egress NAT enabled.",
        },
    ];

    fn validate(&self, obj: &VPCGateway) -> FieldErrors {
        validate_vpc_gateway(obj)
    }

    fn validate_update(&self, new: &VPCGateway, old: &VPCGateway) -> FieldErrors {
        validate_vpc_gateway_update(new, old)
    }

    fn validate_status_update(&self, new: &VPCGateway, _old: &VPCGateway) -> FieldErrors {
        use super::validate::status;
        let mut errs = FieldErrors::new();
        if let Some(st) = &new.status {
            status::phase(&mut errs, &st.phase, status::PHASES);
            status::conditions(&mut errs, &st.conditions);
            status::address(&mut errs, "natAddress", &st.nat_address, Some(false));
            status::address(&mut errs, "natAddress6", &st.nat_address6, Some(true));
        }
        errs
    }
}

/// The effective gateway among `gateways` of one VPC: the oldest that is not being deleted
/// (ties broken by name).
pub fn effective<'a>(gateways: impl IntoIterator<Item = &'a VPCGateway>) -> Option<&'a VPCGateway> {
    gateways
        .into_iter()
        .filter(|g| g.metadata.deletion_timestamp.is_none())
        .min_by_key(|g| {
            (
                g.metadata.creation_timestamp.as_ref().map(|t| t.0),
                g.metadata.name.clone(),
            )
        })
}

/// What the gateway's NAT Services show (the kube-backed loop knows; without a kube connection
/// there are no Services and the stored addresses stay).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nat {
    /// The IPv4 identity (`status.loadBalancer.ingress` of the IPv4 Service), or empty.
    pub v4: String,
    /// The IPv6 identity, or empty.
    pub v6: String,
    /// Why an identity is missing beyond "not assigned yet" (a family the cluster refused).
    pub note: String,
}

/// The status of `gw`: `Ready` when its VPC exists (`resolved`) and it is the `effective` gateway
/// of that VPC; others report `Exclusive=False` naming the effective one. `nat` gives the NAT
/// identities; `None` keeps the stored ones.
pub fn status(
    gw: &VPCGateway,
    resolved: bool,
    effective: Option<&VPCGateway>,
    nat: Option<&Nat>,
) -> VPCGatewayStatus {
    let prev = gw.status.clone().unwrap_or_default();
    let nat = nat.cloned().unwrap_or_else(|| Nat {
        v4: prev.nat_address.clone(),
        v6: prev.nat_address6.clone(),
        note: String::new(),
    });
    let vpc = &gw.spec.vpc_ref.name;
    let exclusive = effective.is_none_or(|e| e.metadata.name == gw.metadata.name);
    let generation = gw.metadata.generation.unwrap_or(1);
    let nat_ready = !gw.spec.nat.enabled || !nat.v4.is_empty() || !nat.v6.is_empty();
    let c = |ty: &str, ok: bool, reason: &str, message: &str| {
        condition(&prev.conditions, ty, ok, reason, message, generation)
    };
    let resolved_msg = if resolved {
        format!("VPC {vpc} found")
    } else {
        format!("VPC {vpc} not found")
    };
    let exclusive_msg = match effective {
        Some(e) if !exclusive => format!(
            "VPC {vpc} already has gateway {}",
            e.metadata.name.as_deref().unwrap_or_default()
        ),
        _ => format!("the boundary of VPC {vpc}"),
    };
    let nat_msg = match (nat_ready, nat.note.is_empty()) {
        (true, true) => "NAT identity assigned or NAT disabled".to_string(),
        (true, false) => format!("NAT identity assigned; {}", nat.note),
        (false, true) => "waiting for a NAT address".to_string(),
        (false, false) => format!("waiting for a NAT address; {}", nat.note),
    };
    VPCGatewayStatus {
        nat_address: nat.v4,
        nat_address6: nat.v6,
        phase: if resolved && exclusive { "Ready" } else { "Pending" }.to_string(),
        conditions: vec![
            c("VPCResolved", resolved, "VPCResolved", &resolved_msg),
            c(
                "NATReady",
                nat_ready,
                if nat_ready {
                    "NATReady"
                } else {
                    "NATAddressPending"
                },
                &nat_msg,
            ),
            c(
                "Exclusive",
                exclusive,
                if exclusive { "Exclusive" } else { "GatewayConflict" },
                &exclusive_msg,
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::{LocalVPCRef, VPCGatewaySpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn gw(name: &str, second: i64) -> VPCGateway {
        let mut g = VPCGateway::new(
            name,
            VPCGatewaySpec {
                vpc_ref: LocalVPCRef { name: "x".into() },
                ..Default::default()
            },
        );
        g.metadata.namespace = Some("a".into());
        g.metadata.generation = Some(1);
        g.metadata.creation_timestamp = Some(Time(Timestamp::from_second(second).unwrap()));
        g
    }

    fn cond<'a>(
        st: &'a VPCGatewayStatus,
        ty: &str,
    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        st.conditions.iter().find(|c| c.type_ == ty).unwrap()
    }

    #[test]
    fn the_oldest_gateway_of_a_vpc_is_exclusive() {
        let (old, new) = (gw("old", 1_000), gw("new", 2_000));
        let all = [new.clone(), old.clone()];
        let eff = effective(&all);
        assert_eq!(eff.unwrap().metadata.name.as_deref(), Some("old"));
        let st = status(&old, true, eff, None);
        assert_eq!(
            (st.phase.as_str(), cond(&st, "Exclusive").status.as_str()),
            ("Ready", "True")
        );
        let st = status(&new, true, eff, None);
        assert_eq!(cond(&st, "Exclusive").reason, "GatewayConflict");
        assert_eq!(st.phase, "Pending");
        // Deriving again from the stored status gives the same value (nothing to write).
        let mut stored = new.clone();
        stored.status = Some(st.clone());
        assert_eq!(status(&stored, true, eff, None), st);
    }
}
