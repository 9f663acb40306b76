//! Refused constructs, raised loudly: a log line and a Kubernetes Event on the object
//! (`Warning`, reason `PolicyRefused`).
//!
//! Every node's agent compiles every policy and so refuses the same constructs. The Event's
//! name is a hash of the object, field and reason, so the first agent to report one creates
//! it and the others find it exists (409): one Event per refusal, not one per node.

use cozyplane_policy::Warning;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// The Event's `reason`.
pub const REASON: &str = "PolicyRefused";

/// `(apiVersion, kind, namespace, name)` of the object a warning is about (its `object` is
/// `Kind namespace/name` or `Kind name`).
pub fn involved(w: &Warning) -> Option<(&'static str, String, Option<String>, String)> {
    let (kind, rest) = w.object.split_once(' ')?;
    let api_version = match kind {
        "NetworkPolicy" => "networking.k8s.io/v1",
        "SecurityGroup" | "HostFirewall" => "sdn.cozystack.io/v1alpha1",
        "AdminNetworkPolicy" | "BaselineAdminNetworkPolicy" => "policy.networking.k8s.io/v1alpha1",
        _ => return None,
    };
    let (ns, name) = match rest.split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
        None => (None, rest.to_string()),
    };
    Some((api_version, kind.to_string(), ns, name))
}

/// The Event for `w`: named after what was refused, so every node names it alike.
pub fn event(w: &Warning, node: &str) -> Option<Event> {
    let (api_version, kind, ns, name) = involved(w)?;
    let reason = w.reason.to_string();
    let h = cozyplane_policy::identity::fnv(&[w.object.as_bytes(), w.field.as_bytes(), reason.as_bytes()]);
    // A DNS subdomain of at most 253 characters; the hash keeps it unique.
    let base: String = name.chars().take(200).collect();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Some(Event {
        metadata: ObjectMeta {
            name: Some(format!("{base}.policy-{h:016x}")),
            namespace: Some(ns.clone().unwrap_or_else(|| "default".into())),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind),
            namespace: ns,
            name: Some(name),
            field_path: Some(w.field.clone()),
            ..ObjectReference::default()
        },
        reason: Some(REASON.into()),
        message: Some(w.to_string()),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource {
            component: Some("cozyplane-agent".into()),
            host: Some(node.into()),
        }),
        reporting_component: Some("cozyplane-agent".into()),
        reporting_instance: Some(node.into()),
        ..Event::default()
    })
}

/// Log `w` and raise its Event in the background (a slow API never holds the maps up).
pub fn refused(client: &kube::Client, node: &str, w: &Warning) {
    tracing::warn!(object = %w.object, field = %w.field, "policy construct refused: {w}");
    let Some(ev) = event(w, node) else {
        return;
    };
    let ns = ev.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    tokio::spawn(async move {
        match api.create(&PostParams::default(), &ev).await {
            Ok(_) => {}
            // Another node reported it first.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => tracing::warn!("event for a refused policy construct: {e}"),
        }
    });
}

#[cfg(test)]
mod tests {
    use cozyplane_policy::Reason;

    use super::*;

    #[test]
    fn the_event_names_the_object_and_is_named_alike_on_every_node() {
        let w = Warning {
            object: "NetworkPolicy shop/deny-db".into(),
            field: "spec.ingress[0].ports[1]".into(),
            reason: Reason::Protocol("ICMP".into()),
        };
        let a = event(&w, "n1").unwrap();
        let b = event(&w, "n2").unwrap();
        assert_eq!(a.metadata.name, b.metadata.name);
        assert_eq!(a.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(a.involved_object.kind.as_deref(), Some("NetworkPolicy"));
        assert_eq!(a.involved_object.name.as_deref(), Some("deny-db"));
        assert_eq!(
            a.involved_object.api_version.as_deref(),
            Some("networking.k8s.io/v1")
        );
        assert!(a.message.unwrap().contains("allows nothing"));
        let hf = Warning {
            object: "HostFirewall edge".into(),
            ..w.clone()
        };
        let e = event(&hf, "n1").unwrap();
        assert_eq!(e.involved_object.namespace, None);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        // The admin kinds are cluster-scoped: their Events go to `default`.
        let anp = Warning {
            object: "AdminNetworkPolicy tenant-floor".into(),
            field: "spec.egress[1].to[0].domainNames".into(),
            reason: Reason::Peer("domainNames (not enforced)".into()),
        };
        let e = event(&anp, "n1").unwrap();
        assert_eq!(e.involved_object.kind.as_deref(), Some("AdminNetworkPolicy"));
        assert_eq!(
            e.involved_object.api_version.as_deref(),
            Some("policy.networking.k8s.io/v1alpha1")
        );
        assert_eq!(e.involved_object.name.as_deref(), Some("tenant-floor"));
        assert_eq!(e.involved_object.namespace, None);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        let banp = Warning {
            object: "BaselineAdminNetworkPolicy default".into(),
            ..anp
        };
        assert_eq!(
            event(&banp, "n1").unwrap().involved_object.kind.as_deref(),
            Some("BaselineAdminNetworkPolicy")
        );
        let other = Warning {
            field: "spec.ingress[0].ports[0]".into(),
            ..w
        };
        assert_ne!(event(&other, "n1").unwrap().metadata.name, a.metadata.name);
    }
}
