//! The one error type of the HTTP edge, rendered as a Kubernetes `meta/v1` `Status`.
//!
//! Every handler returns [`ApiError`]; clients (kubectl, client-go, kube-rs) read `reason` and
//! `code` from the body, so each constructor matches one apimachinery reason and its message shape.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cozyplane_apis::KindInfo;
use serde_json::{Value, json};

use crate::registry::validate::field::FieldErrors;

/// A failed API request: HTTP code, Kubernetes reason and a human message.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also written as `code` in the body.
    pub code: u16,
    /// `reason` of the Status, e.g. `NotFound`.
    pub reason: &'static str,
    /// `message` of the Status.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), if any.
    pub details: Option<Value>,
}

/// The result of a handler.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

fn gr(info: &KindInfo) -> String {
    format!("{}.{}", info.plural, info.group)
}

fn details(info: &KindInfo, name: &str) -> Value {
    json!({ "name": name, "group": info.group, "kind": info.plural })
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }

    /// 404: the object does not exist.
    pub fn not_found(info: &KindInfo, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", gr(info)))
            .with_details(details(info, name))
    }

    /// 404 for a URL that names nothing this server serves.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(
            json!({ "causes": [{ "reason": "UnexpectedServerResponse", "message": "404 page not found" }] }),
        )
    }

    /// 409: create of an existing name.
    pub fn already_exists(info: &KindInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gr(info)),
        )
        .with_details(details(info, name))
    }

    /// 409: optimistic-concurrency failure.
    pub fn conflict(info: &KindInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", gr(info)),
        )
        .with_details(details(info, name))
    }

    /// The standard stale-resourceVersion conflict message.
    pub fn modified(info: &KindInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one cause per field error.
    pub fn invalid(kind: &str, group: &str, name: &str, errs: &FieldErrors) -> Self {
        let causes: Vec<Value> = errs
            .iter()
            .map(|e| {
                json!({
                    "reason": e.kind.reason(),
                    "message": e.body(),
                    "field": e.path.to_string(),
                })
            })
            .collect();
        let summary: Vec<String> = errs
            .iter()
            .map(crate::registry::validate::FieldError::message)
            .collect();
        let list = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        Self::new(
            422,
            "Invalid",
            format!("{kind}.{group} \"{name}\" is invalid: {list}"),
        )
        .with_details(json!({ "name": name, "group": group, "kind": kind, "causes": causes }))
    }

    /// 400: malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401: no acceptable credentials.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 405: verb not supported on this path.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 406: no acceptable representation.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 415: unsupported request body type.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 413: body too large.
    pub fn too_large() -> Self {
        Self::new(413, "RequestEntityTooLarge", "the request body is too large")
    }

    /// 431: the request's header block (request target included) is larger than the server
    /// accepts. Go's HTTP server answers this for kube-apiserver without a Status; here it is one.
    pub fn headers_too_large(limit: usize) -> Self {
        Self::new(
            431,
            "RequestHeaderFieldsTooLarge",
            format!("the request's headers are larger than {limit} bytes"),
        )
    }

    /// 410: resource version compacted.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 504: resource version from the future.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// 503: storage unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 500: a bug or an unexpected storage answer; the detail is logged, not sent.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(
            500,
            "InternalError",
            "an error on the server has prevented the request from succeeding",
        )
    }

    /// The `meta/v1` `Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }

    /// Maps a storage error for an object of `info` named `name`.
    pub fn from_storage(info: &KindInfo, name: &str, e: cozyplane_storage::Error) -> Self {
        use cozyplane_storage::Error as E;
        match e {
            E::NotFound { .. } => Self::not_found(info, name),
            E::AlreadyExists { .. } => Self::already_exists(info, name),
            E::Conflict { .. } => Self::modified(info, name),
            E::Gone { requested, compacted } => {
                Self::gone(format!("too old resource version: {requested} ({compacted})"))
            }
            E::Expired { .. } => Self::gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ),
            E::FutureRevision { requested, .. } => {
                Self::timeout(format!("Too large resource version: {requested}")).with_details(
                    json!({ "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }], "retryAfterSeconds": 1 }),
                )
            }
            E::InvalidContinue { reason } => Self::bad_request(format!("invalid continue token: {reason}")),
            E::Unavailable { message } => Self::unavailable(format!("storage is unavailable: {message}")),
            other => Self::internal(other),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut r = (code, body).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    }
}
