//! Kubernetes `Status` bodies for the responses these layers produce themselves.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use kube::core::{Status, response::StatusDetails};
use serde::Serialize;

use crate::{attributes::Attributes, user::UserInfo};

/// A `Status` with its type header, as the kube-apiserver writes it.
#[derive(Serialize)]
struct Envelope<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(flatten)]
    status: &'a Status,
}

/// Renders `status` as a JSON response whose HTTP code is `status.code`.
pub fn status_response<B: From<Bytes>>(status: &Status) -> Response<B> {
    let envelope = Envelope {
        kind: "Status",
        api_version: "v1",
        metadata: serde_json::Map::new(),
        status,
    };
    let body = serde_json::to_vec(&envelope).unwrap_or_default();
    let mut response = Response::new(B::from(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `401 Unauthorized`, exactly as Kubernetes words it.
pub fn unauthorized() -> Status {
    Status::failure("Unauthorized", "Unauthorized").with_code(401)
}

/// `403 Forbidden` for `user` doing `attributes`, worded like Kubernetes'
/// `responsewriters.Forbidden`; `reason` (the SubjectAccessReview's) is appended when non-empty.
pub fn forbidden(user: &UserInfo, attributes: &Attributes, reason: &str) -> Status {
    let (what, group, resource, name) = match attributes {
        Attributes::NonResource(n) => (
            format!("User {:?} cannot {} path {:?}", user.name, n.verb, n.path),
            "",
            "",
            "",
        ),
        Attributes::Resource(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {:?}", r.namespace)
            };
            let what = format!(
                "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
                user.name, r.verb, resource, r.group
            );
            (what, r.group.as_str(), r.resource.as_str(), r.name.as_str())
        }
    };
    let cause = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    let qualified = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    let message = match (qualified.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {cause}"),
        (false, true) => format!("{qualified} is forbidden: {cause}"),
        (false, false) => format!("{qualified} {name:?} is forbidden: {cause}"),
    };
    Status::failure(&message, "Forbidden")
        .with_code(403)
        .with_details(StatusDetails {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        })
}

/// `503 ServiceUnavailable` when the authorizer cannot answer: requests fail closed.
pub fn authorizer_unavailable() -> Status {
    Status::failure(
        "Authorization error: the authorizer is unavailable, try again later",
        "ServiceUnavailable",
    )
    .with_code(503)
    .with_details(StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::{NonResourceAttributes, ResourceAttributes};

    fn alice() -> UserInfo {
        UserInfo::new("alice", ["g"])
    }

    fn vpcs(verb: &str, namespace: &str, name: &str, subresource: &str) -> Attributes {
        Attributes::Resource(ResourceAttributes {
            verb: verb.into(),
            group: "sdn.cozystack.io".into(),
            version: "v1alpha1".into(),
            resource: "vpcs".into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    #[test]
    fn named_namespaced_resource() {
        let status = forbidden(&alice(), &vpcs("get", "t1", "x", ""), "");
        assert_eq!(
            status.message,
            r#"vpcs.sdn.cozystack.io "x" is forbidden: User "alice" cannot get resource "vpcs" in API group "sdn.cozystack.io" in the namespace "t1""#
        );
        assert_eq!(status.code, 403);
        assert_eq!(status.reason, "Forbidden");
        let details = status.details.expect("details");
        assert_eq!(
            (
                details.name.as_str(),
                details.group.as_str(),
                details.kind.as_str()
            ),
            ("x", "sdn.cozystack.io", "vpcs")
        );
    }

    #[test]
    fn collection_at_cluster_scope_with_reason() {
        let status = forbidden(&alice(), &vpcs("list", "", "", ""), "no RBAC policy matched");
        assert_eq!(
            status.message,
            r#"vpcs.sdn.cozystack.io is forbidden: User "alice" cannot list resource "vpcs" in API group "sdn.cozystack.io" at the cluster scope: no RBAC policy matched"#
        );
    }

    #[test]
    fn subresource_is_named_with_its_resource() {
        let status = forbidden(&alice(), &vpcs("update", "t1", "a", "status"), "");
        assert_eq!(
            status.message,
            r#"vpcs.sdn.cozystack.io "a" is forbidden: User "alice" cannot update resource "vpcs/status" in API group "sdn.cozystack.io" in the namespace "t1""#
        );
    }

    #[test]
    fn core_group_resource() {
        let attrs = Attributes::Resource(ResourceAttributes {
            verb: "get".into(),
            resource: "pods".into(),
            namespace: "ns".into(),
            name: "p".into(),
            ..ResourceAttributes::default()
        });
        assert_eq!(
            forbidden(&alice(), &attrs, "").message,
            r#"pods "p" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "ns""#
        );
    }

    #[test]
    fn non_resource_path() {
        let attrs = Attributes::NonResource(NonResourceAttributes {
            verb: "get".into(),
            path: "/openapi/v2".into(),
        });
        let status = forbidden(&alice(), &attrs, "");
        assert_eq!(
            status.message,
            r#"forbidden: User "alice" cannot get path "/openapi/v2""#
        );
    }

    #[test]
    fn unauthorized_body_is_exact() {
        let response: Response<Bytes> = status_response(&unauthorized());
        assert_eq!(response.status(), 401);
        let body: serde_json::Value = serde_json::from_slice(response.body()).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})
        );
    }
}
