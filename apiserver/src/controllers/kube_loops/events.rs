//! The Warning Events the kube loops record (a Service annotated for a VPC its namespace may
//! not use, a live migration to an unprepared target), in one shape.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// A Warning Event named by `metadata` about `about`, from cozyplane-apiserver, now.
pub(crate) fn warning(metadata: ObjectMeta, about: ObjectReference, reason: &str, message: String) -> Event {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Event {
        metadata,
        involved_object: about,
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource {
            component: Some("cozyplane-apiserver".into()),
            host: None,
        }),
        ..Default::default()
    }
}
