//! Registry policy of `Port`: validation from `crate::validation`, its printer columns and the
//! agent's finalizer.

use cozyplane_apis::HasSpecStatus;
use cozyplane_apis::v1alpha1::conditions::port as c;
use cozyplane_apis::v1alpha1::{Port, PortSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_core::Resource as _;

use super::condition::condition;
use super::strategy::{self, Column};
use super::validate::{field::FieldErrors, validate_port, validate_port_update};

/// The finalizer every Port carries from its create on: only the agent of the Port's node (once
/// it severed the pod, see `docs/datapath.md`) or the server's Port GC (the node is gone)
/// removes it. Until then a deleted Port keeps its address and MAC claims, so neither is handed
/// to another pod while the old one may still use them.
pub const SEVER: &str = "sdn.cozystack.io/sever";

/// Create/update policy of `Port`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = Port;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "IP",
            kind: "string",
            pointer: "/spec/ip",
            priority: 0,
            description: "The claimed address.",
        },
        Column {
            name: "MAC",
            kind: "string",
            pointer: "/spec/mac",
            priority: 0,
            description: "Pinned MAC address.",
        },
        Column {
            name: "Node",
            kind: "string",
            pointer: "/spec/node",
            priority: 0,
            description: "Node the address is on.",
        },
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "VPC Namespace",
            kind: "string",
            pointer: "/spec/vpcRef/namespace",
            priority: 1,
            description: "Namespace of the VPC.",
        },
        Column {
            name: "Node IP",
            kind: "string",
            pointer: "/spec/nodeIP",
            priority: 1,
            description: "Tunnel endpoint.",
        },
        Column {
            name: "Pod",
            kind: "string",
            pointer: "/spec/podName",
            priority: 1,
            description: "Pod holding the address.",
        },
    ];

    const SELECTABLE_FIELDS: &'static [(&'static str, &'static str)] = &[
        ("spec.node", "/spec/node"),
        ("spec.vpcRef.namespace", "/spec/vpcRef/namespace"),
        ("spec.vpcRef.name", "/spec/vpcRef/name"),
    ];

    fn prepare_for_create(&self, obj: &mut Port) {
        obj.reset_status();
        // Inside the create, not by a controller afterwards: a Port is never without it.
        let f = obj.meta_mut().finalizers.get_or_insert_with(Vec::new);
        if !f.iter().any(|x| x == SEVER) {
            f.push(SEVER.to_string());
        }
    }

    fn validate(&self, obj: &Port) -> FieldErrors {
        validate_port(obj)
    }

    fn prepare_for_update(&self, new: &mut Port, old: &Port) {
        new.keep_status_from(old);
        // Server-filled fields survive an update that leaves them out (e.g. an apply).
        if new.spec.ip.is_empty() {
            new.spec.ip.clone_from(&old.spec.ip);
        }
        if new.spec.mac.is_empty() {
            new.spec.mac.clone_from(&old.spec.mac);
        }
    }

    fn validate_update(&self, new: &Port, old: &Port) -> FieldErrors {
        let mut errs = validate_port_update(new, old);
        if new.spec.mac != old.spec.mac && !old.spec.mac.is_empty() {
            // The MAC is claimed in storage with the Port; it stays as long as the Port.
            errs.push(super::validate::FieldError::invalid(
                super::validate::FieldPath::new("spec").child("mac"),
                &new.spec.mac,
                "field is immutable",
            ));
        }
        errs
    }

    fn validate_status_update(&self, new: &Port, _old: &Port) -> FieldErrors {
        // `status.groups`: the SecurityGroup ids the Port's pod belongs to (ids start at 1).
        let mut errs = FieldErrors::new();
        let path = super::validate::FieldPath::new("status").child("groups");
        let mut seen = std::collections::HashSet::new();
        for (i, g) in new.status.iter().flat_map(|s| s.groups.iter()).enumerate() {
            if *g < 1 {
                errs.push(super::validate::FieldError::invalid_int(
                    path.index(i),
                    i64::from(*g),
                    "must be a SecurityGroup id (1 or more)",
                ));
            } else if !seen.insert(*g) {
                errs.push(super::validate::FieldError::duplicate(
                    path.index(i),
                    &g.to_string(),
                ));
            }
        }
        if let Some(st) = &new.status {
            super::validate::status::conditions(&mut errs, &st.conditions);
        }
        errs
    }

    fn derive_status(&self, obj: &mut Port) {
        // Known from the spec alone: no controller writes them, and `kubectl get port -o
        // yaml` shows a migration the moment the agent prepares its target.
        let st = obj.status.get_or_insert_with(Default::default);
        st.conditions = conditions(&obj.spec, &st.conditions, obj.metadata.generation.unwrap_or(1));
    }

    fn allocator(&self) -> Option<&dyn crate::alloc::Allocator<Port>> {
        Some(&crate::alloc::kinds::PortAllocator)
    }
}

/// The conditions of a Port with `spec` (see `cozyplane_apis::v1alpha1::port::conditions`),
/// transition times kept from `prev` while a status stays.
fn conditions(spec: &PortSpec, prev: &[Condition], generation: i64) -> Vec<Condition> {
    let attached = !spec.node.is_empty();
    let (reason, message) = if attached {
        let pod = format!("{}/{}", spec.pod_namespace, spec.pod_name);
        (c::REASON_ON_NODE, format!("pod {pod} on node {}", spec.node))
    } else {
        (c::REASON_DETACHED, "no pod holds the Port".to_string())
    };
    let mut out = vec![condition(
        prev,
        c::ATTACHED,
        attached,
        reason,
        &message,
        generation,
    )];
    let (migrating, reason, message) = match &spec.migration_target {
        Some(t) => (
            true,
            c::REASON_TARGET_PREPARED,
            format!(
                "target pod {}/{} prepared on node {} (migration {})",
                t.pod_namespace, t.pod_name, t.node, t.migration_uid
            ),
        ),
        None => (false, c::REASON_NO_MIGRATION, String::new()),
    };
    out.push(condition(
        prev,
        c::MIGRATING,
        migrating,
        reason,
        &message,
        generation,
    ));
    out
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::v1alpha1::PortMigrationTarget;

    use super::*;

    #[test]
    fn conditions_say_where_the_port_is_and_whether_it_migrates() {
        let mut spec = PortSpec {
            node: "n1".into(),
            pod_namespace: "t1".into(),
            pod_name: "virt-launcher-vm1-abc".into(),
            ..Default::default()
        };
        let got = conditions(&spec, &[], 1);
        assert_eq!(got[0].type_, "Attached");
        assert_eq!(
            (got[0].status.as_str(), got[0].reason.as_str()),
            ("True", "OnNode")
        );
        assert_eq!(got[0].message, "pod t1/virt-launcher-vm1-abc on node n1");
        assert_eq!(
            (got[1].status.as_str(), got[1].reason.as_str()),
            ("False", "NoMigration")
        );

        spec.migration_target = Some(PortMigrationTarget {
            node: "n2".into(),
            pod_namespace: "t1".into(),
            pod_name: "virt-launcher-vm1-def".into(),
            migration_uid: "m-1".into(),
            ..Default::default()
        });
        let again = conditions(&spec, &got, 2);
        assert_eq!(
            (again[1].status.as_str(), again[1].reason.as_str()),
            ("True", "TargetPrepared")
        );
        assert!(again[1].message.contains("n2") && again[1].message.contains("m-1"));
        // A status that stays keeps its transition time.
        assert_eq!(again[0].last_transition_time, got[0].last_transition_time);

        spec.node.clear();
        spec.migration_target = None;
        let kept = conditions(&spec, &again, 3);
        assert_eq!(
            (kept[0].status.as_str(), kept[0].reason.as_str()),
            ("False", "Detached")
        );
    }
}
