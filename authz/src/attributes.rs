//! What a request asks to do, parsed from its method, path and query the way Kubernetes'
//! `RequestInfoFactory` does.
//!
//! [`RequestInfo::parse`] is a pure function: the same input always yields the same verb,
//! group, resource, namespace and name. [`Attributes`] is the subset an [`Authorizer`]
//! needs, and what a SubjectAccessReview carries.
//!
//! [`Authorizer`]: crate::Authorizer

use std::borrow::Cow;

use http::{Method, Uri};
use percent_encoding::percent_decode_str;

/// The API path prefixes that serve resources.
const API_PREFIXES: [&str; 2] = ["api", "apis"];
/// The prefix whose paths carry no group segment (`/api/v1/...`).
const GROUPLESS_API_PREFIX: &str = "api";
/// Verbs that may appear as the first segment after the version (`/apis/g/v/watch/...`).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Segments after `/namespaces/{name}` that are subresources of the namespace itself.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];
/// Read-only views computed from their parent object, as `(group, resource, subresource)`: a
/// `get` of one is authorized as a `get` of the parent (whoever may get a VPC may read its
/// allocations).
const PARENT_VIEWS: [(&str, &str, &str); 1] = [("sdn.cozystack.io", "vpcs", "allocations")];

/// The parsed intent of one HTTP request, inserted by the authentication layer as a request
/// extension.
///
/// Resource requests (`/api/v1/...`, `/apis/{group}/{version}/...` with at least a resource)
/// carry a resource verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
/// `deletecollection`); everything else is a non-resource request whose verb is the lower-cased
/// HTTP method.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the path addresses a resource (as opposed to `/healthz`, `/apis`, `/openapi/v2` …).
    pub is_resource_request: bool,
    /// The decoded request path.
    pub path: String,
    /// The Kubernetes verb.
    pub verb: String,
    /// `api` or `apis` for resource requests, empty otherwise.
    pub api_prefix: String,
    /// The API group, empty for the core group and for non-resource requests.
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The namespace, empty for cluster-scoped requests.
    pub namespace: String,
    /// The resource (plural, lower-case).
    pub resource: String,
    /// The subresource (`status`, `scale` …), empty when there is none.
    pub subresource: String,
    /// The object name, empty for collection requests. A list or watch whose field selector pins
    /// `metadata.name` gets that name, as in Kubernetes.
    pub name: String,
    /// The path segments from the resource on (`[resource, name, subresource, ...]`).
    pub parts: Vec<String>,
}

impl RequestInfo {
    /// Parses a request's method and URI.
    pub fn parse(method: &Method, uri: &Uri) -> Self {
        let path = percent_decode_str(uri.path()).decode_utf8_lossy().into_owned();
        let query = Query::new(uri.query().unwrap_or(""));
        let mut info = RequestInfo {
            path: path.clone(),
            verb: method.as_str().to_ascii_lowercase(),
            ..RequestInfo::default()
        };

        let segments: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        if segments.len() < 3 || !API_PREFIXES.contains(&segments[0]) {
            return info;
        }
        let api_prefix = segments[0];
        let mut rest = &segments[1..];
        let mut api_group = "";
        if api_prefix != GROUPLESS_API_PREFIX {
            if rest.len() < 3 {
                return info;
            }
            api_group = rest[0];
            rest = &rest[1..];
        }
        let api_version = rest[0];
        rest = &rest[1..];

        let mut verb = if SPECIAL_VERBS.contains(&rest[0]) {
            if rest.len() < 2 {
                // `/apis/g/v/watch` names no resource: not something we can authorize as one.
                return info;
            }
            let verb = rest[0];
            rest = &rest[1..];
            verb.to_owned()
        } else {
            match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_owned()
        };

        let mut namespace = "";
        if rest[0] == "namespaces" && rest.len() > 1 {
            namespace = rest[1];
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }

        let parts: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
        let resource = parts.first().cloned().unwrap_or_default();
        let mut name = parts.get(1).cloned().unwrap_or_default();
        let subresource = if verb == "proxy" {
            String::new()
        } else {
            parts.get(2).cloned().unwrap_or_default()
        };

        if name.is_empty() && verb == "get" {
            verb = if query.watch() { "watch" } else { "list" }.to_owned();
            if let Some(selected) = query.field_selector_name() {
                name = selected;
            }
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".to_owned();
        }

        info.is_resource_request = true;
        info.verb = verb;
        info.api_prefix = api_prefix.to_owned();
        info.api_group = api_group.to_owned();
        info.api_version = api_version.to_owned();
        info.namespace = namespace.to_owned();
        info.resource = resource;
        info.subresource = subresource;
        info.name = name;
        info.parts = parts;
        info
    }

    /// Parses the method and URI of an [`http::Request`].
    pub fn from_request<B>(req: &http::Request<B>) -> Self {
        Self::parse(req.method(), req.uri())
    }

    /// The authorization attributes of this request.
    pub fn attributes(&self) -> Attributes {
        if self.is_resource_request {
            let view = self.verb == "get"
                && PARENT_VIEWS.contains(&(
                    self.api_group.as_str(),
                    self.resource.as_str(),
                    self.subresource.as_str(),
                ));
            Attributes::Resource(ResourceAttributes {
                verb: self.verb.clone(),
                group: self.api_group.clone(),
                version: self.api_version.clone(),
                resource: self.resource.clone(),
                subresource: if view {
                    String::new()
                } else {
                    self.subresource.clone()
                },
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            })
        } else {
            Attributes::NonResource(NonResourceAttributes {
                verb: self.verb.clone(),
                path: self.path.clone(),
            })
        }
    }
}

/// What an [`Authorizer`](crate::Authorizer) decides about: a resource or a non-resource action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// An action on an API resource.
    Resource(ResourceAttributes),
    /// An action on a plain URL path.
    NonResource(NonResourceAttributes),
}

impl Attributes {
    /// The verb of either kind of action.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.verb,
            Attributes::NonResource(n) => &n.verb,
        }
    }
}

/// A verb on a resource, mirroring a SubjectAccessReview's `resourceAttributes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceAttributes {
    /// `get`, `list`, `watch`, `create`, … or a virtual verb such as `export`.
    pub verb: String,
    /// The API group, empty for the core group.
    pub group: String,
    /// The API version, may be empty (meaning any).
    pub version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, empty for the main resource.
    pub subresource: String,
    /// The namespace, empty for cluster-scoped resources or all-namespace requests.
    pub namespace: String,
    /// The object name, empty for collections.
    pub name: String,
}

/// A verb on a URL path, mirroring a SubjectAccessReview's `nonResourceAttributes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NonResourceAttributes {
    /// The lower-cased HTTP method.
    pub verb: String,
    /// The URL path.
    pub path: String,
}

/// The few query parameters request-info parsing looks at.
struct Query<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> Query<'a> {
    fn new(raw: &'a str) -> Self {
        Self {
            pairs: form_urlencoded::parse(raw.as_bytes()).collect(),
        }
    }

    fn first(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_ref())
    }

    /// Kubernetes' query-to-bool conversion: present and not `0`/`false` means true.
    fn watch(&self) -> bool {
        self.first("watch")
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }

    /// The name a field selector requires exactly (`metadata.name=foo` or `metadata.name==foo`),
    /// if it is a valid path segment.
    fn field_selector_name(&self) -> Option<String> {
        let selector = self.first("fieldSelector")?;
        let mut name = None;
        for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if term.contains("!=") {
                continue;
            }
            let (key, value) = term.split_once("==").or_else(|| term.split_once('='))?;
            if key.trim() == "metadata.name" {
                name = Some(value.trim().to_owned());
            }
        }
        name.filter(|n| is_valid_path_segment(n))
    }
}

fn is_valid_path_segment(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "/apis/sdn.cozystack.io/v1alpha1";

    fn parse(method: &Method, uri: &str) -> RequestInfo {
        RequestInfo::parse(method, &uri.parse::<Uri>().expect("valid uri"))
    }

    #[track_caller]
    fn assert_resource(
        info: &RequestInfo,
        verb: &str,
        namespace: &str,
        resource: &str,
        subresource: &str,
        name: &str,
    ) {
        assert!(info.is_resource_request, "{info:?} should be a resource request");
        assert_eq!(
            (
                info.verb.as_str(),
                info.namespace.as_str(),
                info.resource.as_str(),
                info.subresource.as_str(),
                info.name.as_str()
            ),
            (verb, namespace, resource, subresource, name),
            "{info:?}"
        );
    }

    #[test]
    fn status_put_is_update_of_status_subresource() {
        let info = parse(&Method::PUT, &format!("{G}/namespaces/t1/vpcs/a/status"));
        assert_resource(&info, "update", "t1", "vpcs", "status", "a");
        assert_eq!(info.api_prefix, "apis");
        assert_eq!(info.api_group, "sdn.cozystack.io");
        assert_eq!(info.api_version, "v1alpha1");
        assert_eq!(info.parts, ["vpcs", "a", "status"]);
    }

    #[test]
    fn vpc_allocations_are_authorized_as_get_of_the_vpc() {
        let info = parse(&Method::GET, &format!("{G}/namespaces/t1/vpcs/a/allocations"));
        assert_resource(&info, "get", "t1", "vpcs", "allocations", "a");
        let Attributes::Resource(r) = info.attributes() else {
            panic!("a resource request");
        };
        assert_eq!(
            (
                r.verb.as_str(),
                r.resource.as_str(),
                r.subresource.as_str(),
                r.name.as_str()
            ),
            ("get", "vpcs", "", "a")
        );
        // Other subresources, and writes to this one, keep their subresource.
        for (method, path) in [
            (Method::GET, "/namespaces/t1/vpcs/a/status"),
            (Method::PUT, "/namespaces/t1/vpcs/a/allocations"),
            (Method::GET, "/namespaces/t1/ports/a/allocations"),
        ] {
            let Attributes::Resource(r) = parse(&method, &format!("{G}{path}")).attributes() else {
                panic!("a resource request");
            };
            assert!(!r.subresource.is_empty(), "{path}: {r:?}");
        }
    }

    #[test]
    fn verbs_follow_method_and_name() {
        let cases = [
            (Method::GET, "/namespaces/t1/vpcs/a", "get", "a"),
            (Method::HEAD, "/namespaces/t1/vpcs/a", "get", "a"),
            (Method::GET, "/namespaces/t1/vpcs", "list", ""),
            (Method::POST, "/namespaces/t1/vpcs", "create", ""),
            (Method::PUT, "/namespaces/t1/vpcs/a", "update", "a"),
            (Method::PATCH, "/namespaces/t1/vpcs/a", "patch", "a"),
            (Method::DELETE, "/namespaces/t1/vpcs/a", "delete", "a"),
            (Method::DELETE, "/namespaces/t1/vpcs", "deletecollection", ""),
            (Method::OPTIONS, "/namespaces/t1/vpcs", "", ""),
        ];
        for (method, path, verb, name) in cases {
            let info = parse(&method, &format!("{G}{path}"));
            assert_resource(&info, verb, "t1", "vpcs", "", name);
        }
    }

    #[test]
    fn watch_query_turns_list_into_watch() {
        for (query, verb) in [
            ("watch=1", "watch"),
            ("watch=true", "watch"),
            ("watch=True", "watch"),
            ("watch=yes", "watch"),
            ("watch=", "watch"),
            ("watch=0", "list"),
            ("watch=false", "list"),
            ("watch=FALSE", "list"),
            ("limit=5", "list"),
        ] {
            let info = parse(&Method::GET, &format!("{G}/vpcs?{query}"));
            assert_resource(&info, verb, "", "vpcs", "", "");
        }
    }

    #[test]
    fn watch_on_a_named_get_stays_get() {
        let info = parse(&Method::GET, &format!("{G}/namespaces/t1/vpcs/a?watch=true"));
        assert_resource(&info, "get", "t1", "vpcs", "", "a");
    }

    #[test]
    fn legacy_watch_path_prefix() {
        let info = parse(&Method::GET, &format!("{G}/watch/namespaces/t1/vpcs"));
        assert_resource(&info, "watch", "t1", "vpcs", "", "");
        let info = parse(&Method::GET, &format!("{G}/watch/namespaces/t1/vpcs/a"));
        assert_resource(&info, "watch", "t1", "vpcs", "", "a");
    }

    #[test]
    fn field_selector_on_name_sets_the_name() {
        let info = parse(
            &Method::GET,
            &format!("{G}/namespaces/t1/vpcs?fieldSelector=metadata.name%3Dfoo&watch=1"),
        );
        assert_resource(&info, "watch", "t1", "vpcs", "", "foo");
        let info = parse(
            &Method::GET,
            &format!("{G}/vpcs?fieldSelector=metadata.name%3D%3Dfoo,spec.x%3Dy"),
        );
        assert_resource(&info, "list", "", "vpcs", "", "foo");
        let info = parse(
            &Method::GET,
            &format!("{G}/vpcs?fieldSelector=metadata.name!%3Dfoo"),
        );
        assert_resource(&info, "list", "", "vpcs", "", "");
        let info = parse(
            &Method::GET,
            &format!("{G}/vpcs?fieldSelector=metadata.name%3D.."),
        );
        assert_resource(&info, "list", "", "vpcs", "", "");
    }

    #[test]
    fn cluster_scoped_resources() {
        let info = parse(&Method::GET, &format!("{G}/ports/p1"));
        assert_resource(&info, "get", "", "ports", "", "p1");
        let info = parse(&Method::GET, &format!("{G}/vpcs"));
        assert_resource(&info, "list", "", "vpcs", "", "");
    }

    #[test]
    fn namespaces_themselves() {
        let info = parse(&Method::GET, "/api/v1/namespaces");
        assert_resource(&info, "list", "", "namespaces", "", "");
        let info = parse(&Method::GET, "/api/v1/namespaces/t1");
        assert_resource(&info, "get", "t1", "namespaces", "", "t1");
        let info = parse(&Method::PUT, "/api/v1/namespaces/t1/finalize");
        assert_resource(&info, "update", "t1", "namespaces", "finalize", "t1");
        let info = parse(&Method::GET, "/api/v1/namespaces/t1/pods");
        assert_resource(&info, "list", "t1", "pods", "", "");
        assert_eq!(info.api_group, "");
        assert_eq!(info.api_prefix, "api");
    }

    #[test]
    fn discovery_openapi_and_health_are_non_resource() {
        for path in [
            "/",
            "/api",
            "/api/v1",
            "/apis",
            "/apis/sdn.cozystack.io",
            "/apis/sdn.cozystack.io/v1alpha1",
            "/openapi/v2",
            "/openapi/v3/apis/sdn.cozystack.io/v1alpha1",
            "/healthz",
            "/readyz/ping",
            "/version",
            "/metrics",
        ] {
            let info = parse(&Method::GET, path);
            assert!(!info.is_resource_request, "{path} should be non-resource");
            assert_eq!(info.verb, "get");
            assert_eq!(info.path, path);
            assert_eq!(
                info.attributes(),
                Attributes::NonResource(NonResourceAttributes {
                    verb: "get".into(),
                    path: path.into()
                })
            );
        }
        assert_eq!(parse(&Method::POST, "/healthz").verb, "post");
    }

    #[test]
    fn bare_special_verb_is_non_resource() {
        assert!(!parse(&Method::GET, &format!("{G}/watch")).is_resource_request);
    }

    #[test]
    fn path_is_percent_decoded() {
        let info = parse(&Method::GET, &format!("{G}/namespaces/t1/vpcs/a%3Ab"));
        assert_resource(&info, "get", "t1", "vpcs", "", "a:b");
    }

    #[test]
    fn resource_attributes_carry_everything() {
        let info = parse(&Method::PATCH, &format!("{G}/namespaces/t1/vpcs/a/status"));
        assert_eq!(
            info.attributes(),
            Attributes::Resource(ResourceAttributes {
                verb: "patch".into(),
                group: "sdn.cozystack.io".into(),
                version: "v1alpha1".into(),
                resource: "vpcs".into(),
                subresource: "status".into(),
                namespace: "t1".into(),
                name: "a".into(),
            })
        );
    }
}
