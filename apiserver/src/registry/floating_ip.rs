//! Registry policy of `FloatingIP`: validation from `crate::validation`, its printer columns and
//! the status derivation of the FloatingIP loop.

use cozyplane_apis::v1alpha1::{FloatingIP, FloatingIPStatus};

use super::condition::condition;
use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_floating_ip, validate_floating_ip_update};

/// Create/update policy of `FloatingIP`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = FloatingIP;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "Target",
            kind: "string",
            pointer: "/spec/target",
            priority: 0,
            description: "Address inside the VPC.",
        },
        Column {
            name: "Address",
            kind: "string",
            pointer: "/status/address",
            priority: 0,
            description: "The public address.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
    ];

    fn validate(&self, obj: &FloatingIP) -> FieldErrors {
        validate_floating_ip(obj)
    }

    fn validate_update(&self, new: &FloatingIP, old: &FloatingIP) -> FieldErrors {
        validate_floating_ip_update(new, old)
    }

    fn validate_status_update(&self, new: &FloatingIP, _old: &FloatingIP) -> FieldErrors {
        use super::validate::status;
        let mut errs = FieldErrors::new();
        if let Some(st) = &new.status {
            status::phase(&mut errs, &st.phase, status::PHASES);
            status::conditions(&mut errs, &st.conditions);
            status::address(&mut errs, "address", &st.address, None);
        }
        errs
    }
}

/// What the FloatingIP loop observed for one FloatingIP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The owned Service exists.
    pub service: bool,
    /// Why there is no Service (empty: none created yet).
    pub service_note: String,
    /// The address the LoadBalancer implementation assigned, or empty.
    pub address: String,
    /// The node of the live Port holding `spec.target`, or empty.
    pub node: String,
    /// The older FloatingIP of the same `{vpc, target}` that wins, if this one loses.
    pub winner: Option<String>,
}

/// The status of `fip` from `facts`: `Ready` when the Service exists, an address is assigned,
/// the target is live and this FloatingIP is the only one of its `{vpc, target}`.
pub fn status(fip: &FloatingIP, facts: &Facts) -> FloatingIPStatus {
    let prev = fip.status.clone().unwrap_or_default();
    let generation = fip.metadata.generation.unwrap_or(1);
    let c = |ty: &str, ok: bool, reason: &str, message: String| {
        condition(&prev.conditions, ty, ok, reason, &message, generation)
    };
    let target = &fip.spec.target;
    let live = !facts.node.is_empty();
    let exclusive = facts.winner.is_none();
    let assigned = !facts.address.is_empty();
    let service = match (facts.service, facts.service_note.is_empty()) {
        (true, _) => c(
            "ServiceReady",
            true,
            "ServiceReady",
            "the LoadBalancer Service exists".into(),
        ),
        (false, true) => c(
            "ServiceReady",
            false,
            "ServicePending",
            "no LoadBalancer Service yet".into(),
        ),
        (false, false) => c(
            "ServiceReady",
            false,
            "ServiceRefused",
            facts.service_note.clone(),
        ),
    };
    let ready = facts.service && assigned && live && exclusive;
    FloatingIPStatus {
        address: facts.address.clone(),
        phase: if ready { "Ready" } else { "Pending" }.to_string(),
        conditions: vec![
            service,
            if assigned {
                c(
                    "AddressAssigned",
                    true,
                    "AddressAssigned",
                    format!("address {}", facts.address),
                )
            } else {
                c(
                    "AddressAssigned",
                    false,
                    "AddressPending",
                    "waiting for the LoadBalancer implementation to assign an address".into(),
                )
            },
            if live {
                c(
                    "TargetLive",
                    true,
                    "TargetLive",
                    format!("{target} is on node {}", facts.node),
                )
            } else {
                c(
                    "TargetLive",
                    false,
                    "TargetNotFound",
                    format!("no live Port holds {target}"),
                )
            },
            match &facts.winner {
                None => c(
                    "TargetExclusive",
                    true,
                    "TargetExclusive",
                    format!("the only FloatingIP of {target}"),
                ),
                Some(w) => c(
                    "TargetExclusive",
                    false,
                    "TargetConflict",
                    format!("FloatingIP {w} is older and targets {target} too"),
                ),
            },
        ],
    }
}
