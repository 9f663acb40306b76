//! The stand-in's HTTP surface: authentication (client certificates, static tokens), RBAC
//! authorization, discovery, the REST verbs through the API server's handlers, the reviews and
//! the aggregation proxy.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use cozyplane_apiserver::errors::{ApiError, Reason, Result};
use cozyplane_apiserver::handlers::{self, Target};
use cozyplane_apiserver::registry::Resource;
use cozyplane_apiserver::server::discovery::{self, STATUS_VERBS, VERBS};
use serde_json::{Value, json};

use super::Shared;
use super::kinds::{KINDS, REVIEWS, group_version, local_groups};
use super::rbac::{self, Attrs, Identity};

fn json_resp(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(v.to_string()));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn forbidden(msg: String) -> ApiError {
    ApiError::new(403, Reason::Forbidden, msg)
}

fn query(q: &str) -> HashMap<String, String> {
    form_urlencoded::parse(q.as_bytes()).into_owned().collect()
}

/// Authenticates a request: a verified client certificate, else a bearer token from the static
/// token file, else anonymous. An unknown token is a 401.
pub fn authenticate(
    st: &Shared,
    peer: Option<&(String, Vec<String>)>,
    headers: &HeaderMap,
) -> Result<Identity> {
    let mut who = if let Some((name, groups)) = peer {
        Identity {
            name: name.clone(),
            groups: groups.clone(),
            ..Default::default()
        }
    } else if let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        st.token(token.trim()).ok_or_else(ApiError::unauthorized)?
    } else {
        return Ok(Identity::anonymous());
    };
    if !who.groups.iter().any(|g| g == "system:authenticated") {
        who.groups.push("system:authenticated".into());
    }
    Ok(who)
}

/// A parsed resource request.
#[derive(Clone, Debug, Default)]
pub struct Info {
    /// The RBAC attributes.
    pub attrs: Attrs,
    /// Whether it is a resource request at all.
    pub resource: bool,
}

/// Parses a URL into request attributes as the kube-apiserver's RequestInfo does.
pub fn request_info(method: &Method, path: &str, q: &HashMap<String, String>) -> Info {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let non_resource = |verb: &str| Info {
        attrs: Attrs {
            verb: verb.to_string(),
            path: Some(if path.is_empty() {
                "/".into()
            } else {
                path.to_string()
            }),
            ..Default::default()
        },
        resource: false,
    };
    let lower = method.as_str().to_ascii_lowercase();
    let nr_verb = match method.as_str() {
        "GET" | "HEAD" => "get",
        "POST" => "post",
        "PUT" => "put",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => lower.as_str(),
    };
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return non_resource(nr_verb),
    };
    let mut a = Attrs {
        group: group.into(),
        version: version.into(),
        ..Default::default()
    };
    let tail: &[&str] = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            a.namespace = (*ns).into();
            a.resource = (*plural).into();
            tail
        }
        [plural, tail @ ..] => {
            a.resource = (*plural).into();
            tail
        }
        [] => return non_resource(nr_verb),
    };
    if let Some(n) = tail.first() {
        a.name = (*n).into();
    }
    if let Some(s) = tail.get(1) {
        a.subresource = (*s).into();
    }
    if a.group.is_empty() && a.resource == "namespaces" && !a.name.is_empty() {
        a.namespace = a.name.clone();
    }
    let watch = q.get("watch").is_some_and(|v| v == "true" || v == "1");
    a.verb = match (method.as_str(), a.name.is_empty()) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "list",
        ("GET" | "HEAD", false) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "deletecollection",
        ("DELETE", false) => "delete",
        (other, _) => return non_resource(&other.to_ascii_lowercase()),
    }
    .into();
    Info {
        attrs: a,
        resource: true,
    }
}

/// Serves one request.
pub async fn handle(
    st: Arc<Shared>,
    peer: Option<(String, Vec<String>)>,
    req: Request<Body>,
) -> Response<Body> {
    match serve(&st, peer.as_ref(), req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(
    st: &Arc<Shared>,
    peer: Option<&(String, Vec<String>)>,
    req: Request<Body>,
) -> Result<Response<Body>> {
    let who = authenticate(st, peer, req.headers())?;
    let path = req.uri().path().trim_end_matches('/').to_string();
    let q = query(req.uri().query().unwrap_or_default());
    let info = request_info(req.method(), &path, &q);
    let d = rbac::authorize(&st.reg, &who, &info.attrs).await;
    if info.resource {
        let r = &info.attrs;
        let resource = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        st.requests
            .lock()
            .expect("requests lock")
            .push(super::RequestRecord {
                at: std::time::Instant::now(),
                verb: r.verb.clone(),
                resource,
                allowed: d.allowed,
            });
    }
    if !d.allowed {
        return Err(forbidden(info.attrs.forbidden_message(&who)));
    }
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    // Aggregated groups go to their backend, discovery included.
    if let ["apis", g, ..] = segs.as_slice()
        && !local_groups().contains(g)
        && let Some(svc) = st.apiservice_for(g).await
    {
        return st.forward(&svc, &who, req).await;
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    match segs.as_slice() {
        ["healthz" | "livez" | "readyz"] => return Ok(Response::new(Body::from("ok"))),
        ["version"] => {
            return Ok(json_resp(
                StatusCode::OK,
                &json!({ "major": "1", "minor": "32", "gitVersion": "v1.32.0-standin", "platform": "linux/amd64" }),
            ));
        }
        ["api"] => {
            if discovery::wants_v2(&accept) {
                return Ok(v2(&json!([group_v2("")])));
            }
            return Ok(json_resp(
                StatusCode::OK,
                &json!({ "kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": st.url.trim_start_matches("https://") }] }),
            ));
        }
        ["api", "v1"] => return Ok(json_resp(StatusCode::OK, &resource_list(""))),
        ["apis"] => {
            let aggregated = st.aggregated_groups().await;
            if discovery::wants_v2(&accept) {
                let mut items: Vec<Value> = local_groups()
                    .into_iter()
                    .filter(|g| !g.is_empty())
                    .map(group_v2)
                    .collect();
                for (svc, _) in &aggregated {
                    if let Some(item) = st.backend_v2(svc).await {
                        items.push(item);
                    }
                }
                return Ok(v2(&json!(items)));
            }
            let mut groups: Vec<Value> = local_groups()
                .into_iter()
                .filter(|g| !g.is_empty())
                .map(|g| group_doc(g, group_version(g)))
                .collect();
            groups.extend(aggregated.iter().map(|(_, (g, v))| group_doc(g, v)));
            return Ok(json_resp(
                StatusCode::OK,
                &json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }),
            ));
        }
        ["apis", g] if local_groups().contains(g) => {
            let mut d = group_doc(g, group_version(g));
            d["kind"] = json!("APIGroup");
            d["apiVersion"] = json!("v1");
            return Ok(json_resp(StatusCode::OK, &d));
        }
        ["apis", g, v] if local_groups().contains(g) && *v == group_version(g) => {
            return Ok(json_resp(StatusCode::OK, &resource_list(g)));
        }
        ["openapi", "v2"] if accept.contains("protobuf") => {
            // An empty OpenAPI document (zero protobuf bytes): kubectl finds no schema for any
            // kind and leaves validation to the server.
            let mut r = Response::new(Body::empty());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"),
            );
            return Ok(r);
        }
        ["openapi", "v2"] => {
            return Ok(json_resp(
                StatusCode::OK,
                &json!({ "swagger": "2.0", "info": { "title": "kube stand-in", "version": "v1" }, "paths": {}, "definitions": {} }),
            ));
        }
        ["openapi", "v3"] => return Ok(json_resp(StatusCode::OK, &json!({ "paths": {} }))),
        _ => {}
    }
    if !info.resource
        || !local_groups().contains(&info.attrs.group.as_str())
        || info.attrs.version != group_version(&info.attrs.group)
    {
        return Err(ApiError::path_not_found());
    }
    let a = info.attrs;
    let req = json_body(req).await?;
    if let Some(r) = REVIEWS
        .iter()
        .find(|r| r.group == a.group && r.plural == a.resource && r.namespaced != a.namespace.is_empty())
    {
        if *req.method() != Method::POST || !a.name.is_empty() {
            return Err(ApiError::method_not_allowed(req.method().as_str()));
        }
        let body = axum::body::to_bytes(req.into_body(), 3 << 20)
            .await
            .map_err(|_| ApiError::too_large())?;
        let body: Value = serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        return review(st, r.kind, &a.namespace, &who, body).await;
    }
    let Some(cache) = st.reg.cache(&a.group, &a.resource) else {
        return Err(ApiError::path_not_found());
    };
    let def = cache.resource().info();
    let namespaced_url = !(a.namespace.is_empty() || a.group.is_empty() && a.resource == "namespaces");
    if namespaced_url != def.namespaced && !(def.namespaced && a.namespace.is_empty()) {
        return Err(ApiError::path_not_found());
    }
    let status = match a.subresource.as_str() {
        "" => false,
        "status" if def.has_status => true,
        "finalize" if a.resource == "namespaces" => true,
        _ => return Err(ApiError::path_not_found()),
    };
    if a.subresource == "finalize" {
        // Only spec.finalizers may change through /finalize; the namespace controller removes
        // the object once they (and the metadata finalizers) are empty.
        return Err(ApiError::method_not_allowed("finalize"));
    }
    if a.verb == "create" && def.namespaced {
        match st.reg.store("namespaces").get(None, &a.namespace).await {
            Err(e) if e.is_not_found() => {
                return Err(cozyplane_apiserver::admission::namespace::not_found(&a.namespace));
            }
            Ok(ns) if ns.pointer("/metadata/deletionTimestamp").is_some() => {
                return Err(forbidden(format!(
                    "{} \"\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                    a.resource, a.namespace
                )));
            }
            _ => {}
        }
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 3 << 20)
        .await
        .map_err(|_| ApiError::too_large())?;
    let target = Target {
        resource: cache.resource().clone(),
        cache: cache.clone(),
        namespace: if def.namespaced && !a.namespace.is_empty() {
            Some(a.namespace.clone())
        } else {
            None
        },
        name: (!a.name.is_empty()).then(|| a.name.clone()),
        status,
        // The stand-in does its own admission (namespace existence above); ours is not its.
        requester: Some(cozyplane_apiserver::registry::hooks::Requester::Server),
    };
    handlers::dispatch(target, &parts.method, q, &parts.headers, body).await
}

/// Turns a protobuf request body (kubectl's typed clients) into JSON.
async fn json_body(req: Request<Body>) -> Result<Request<Body>> {
    let proto = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/vnd.kubernetes.protobuf"));
    if !proto {
        return Ok(req);
    }
    let (mut parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 3 << 20)
        .await
        .map_err(|_| ApiError::too_large())?;
    let v = super::protobuf::decode(&bytes).map_err(ApiError::unsupported_media_type)?;
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Request::from_parts(parts, Body::from(v.to_string())))
}

fn v2(items: &Value) -> Response<Body> {
    let mut r = json_resp(
        StatusCode::OK,
        &json!({ "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items }),
    );
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::V2_MEDIA),
    );
    r
}

fn group_doc(g: &str, v: &str) -> Value {
    let gv = json!({ "groupVersion": format!("{g}/{v}"), "version": v });
    json!({ "name": g, "versions": [gv.clone()], "preferredVersion": gv })
}

fn resource_list(g: &str) -> Value {
    let mut resources = Vec::new();
    for k in KINDS.iter().filter(|k| k.info.group == g) {
        let i = &k.info;
        resources.push(json!({
            "name": i.plural, "singularName": i.singular, "namespaced": i.namespaced, "kind": i.kind,
            "verbs": VERBS, "shortNames": i.short_names,
        }));
        if i.has_status {
            resources.push(json!({ "name": format!("{}/status", i.plural), "singularName": "", "namespaced": i.namespaced, "kind": i.kind, "verbs": STATUS_VERBS }));
        }
    }
    for r in REVIEWS.iter().filter(|r| r.group == g) {
        resources.push(json!({ "name": r.plural, "singularName": r.kind.to_ascii_lowercase(), "namespaced": r.namespaced, "kind": r.kind, "verbs": ["create"] }));
    }
    let gv = if g.is_empty() {
        "v1".to_string()
    } else {
        format!("{g}/{}", group_version(g))
    };
    json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources })
}

fn group_v2(g: &str) -> Value {
    let mut resources = Vec::new();
    for k in KINDS.iter().filter(|k| k.info.group == g) {
        let i = &k.info;
        let kind = json!({ "group": g, "version": group_version(g), "kind": i.kind });
        let mut r = json!({
            "resource": i.plural, "responseKind": kind, "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": i.singular, "verbs": VERBS, "shortNames": i.short_names,
        });
        if i.has_status {
            r["subresources"] =
                json!([{ "subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS }]);
        }
        resources.push(r);
    }
    for r in REVIEWS.iter().filter(|r| r.group == g) {
        resources.push(json!({
            "resource": r.plural, "responseKind": { "group": g, "version": group_version(g), "kind": r.kind },
            "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": r.kind.to_ascii_lowercase(), "verbs": ["create"],
        }));
    }
    let meta = if g.is_empty() {
        json!({})
    } else {
        json!({ "name": g })
    };
    json!({ "metadata": meta, "versions": [{ "version": group_version(g), "resources": resources, "freshness": "Current" }] })
}

fn attrs_of(spec: &Value, url_ns: &str) -> Attrs {
    if let Some(nr) = spec.get("nonResourceAttributes") {
        return Attrs {
            verb: nr.get("verb").and_then(Value::as_str).unwrap_or_default().into(),
            path: Some(nr.get("path").and_then(Value::as_str).unwrap_or_default().into()),
            ..Default::default()
        };
    }
    let ra = spec.get("resourceAttributes").cloned().unwrap_or(json!({}));
    let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let ns = if url_ns.is_empty() {
        s("namespace")
    } else {
        url_ns.to_string()
    };
    Attrs {
        verb: s("verb"),
        group: s("group"),
        version: s("version"),
        resource: s("resource"),
        subresource: s("subresource"),
        name: s("name"),
        namespace: ns,
        path: None,
    }
}

async fn review(
    st: &Shared,
    kind: &str,
    url_ns: &str,
    who: &Identity,
    mut body: Value,
) -> Result<Response<Body>> {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    *st.reviews
        .lock()
        .expect("reviews lock")
        .entry(kind.to_string())
        .or_default() += 1;
    let status = match kind {
        "TokenReview" => {
            let token = spec.get("token").and_then(Value::as_str).unwrap_or_default();
            match st.token(token) {
                Some(u) => {
                    let mut groups = u.groups.clone();
                    if !groups.iter().any(|g| g == "system:authenticated") {
                        groups.push("system:authenticated".into());
                    }
                    json!({ "authenticated": true, "user": { "username": u.name, "uid": u.uid, "groups": groups }, "audiences": spec.get("audiences").cloned().unwrap_or(json!([])) })
                }
                None => json!({ "authenticated": false, "error": "invalid bearer token" }),
            }
        }
        _ => {
            let subject = if kind == "SelfSubjectAccessReview" {
                who.clone()
            } else {
                let strs = |k: &str| -> Vec<String> {
                    spec.get(k)
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                        .unwrap_or_default()
                };
                let extra = spec
                    .get("extra")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| {
                                let vs = v
                                    .as_array()
                                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                                    .unwrap_or_default();
                                (k.clone(), vs)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Identity {
                    name: spec
                        .get("user")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    uid: spec.get("uid").and_then(Value::as_str).unwrap_or_default().into(),
                    groups: strs("groups"),
                    extra,
                }
            };
            if kind == "LocalSubjectAccessReview"
                && let Some(ns) = spec
                    .pointer("/resourceAttributes/namespace")
                    .and_then(Value::as_str)
                && !ns.is_empty()
                && ns != url_ns
            {
                return Err(ApiError::bad_request(
                    "spec.resourceAttributes.namespace must match the namespace of the request",
                ));
            }
            let a = attrs_of(
                &spec,
                if kind == "LocalSubjectAccessReview" {
                    url_ns
                } else {
                    ""
                },
            );
            let d = rbac::authorize(&st.reg, &subject, &a).await;
            if kind == "SelfSubjectAccessReview" {
                body["spec"]["user"] = Value::Null;
            }
            json!({ "allowed": d.allowed, "reason": d.reason })
        }
    };
    body["status"] = status;
    if body.get("metadata").is_none() {
        body["metadata"] = json!({});
    }
    if body
        .get("spec")
        .is_some_and(|s| s.get("user") == Some(&Value::Null))
        && let Some(s) = body["spec"].as_object_mut()
    {
        s.remove("user");
    }
    Ok(json_resp(StatusCode::CREATED, &body))
}
