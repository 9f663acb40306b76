//! The one error type of the HTTP edge, rendered as a Kubernetes `meta/v1` `Status`.
//!
//! Every handler returns [`ApiError`]; clients (kubectl, client-go, kube-rs) read `reason` and
//! `code` from the body, so each constructor matches one apimachinery reason and its message shape.
//! Everything a caller may decide on is typed: the [`Reason`], the [`ConflictKind`] of a 409 (a
//! stale read is worth retrying, a failed precondition never is) and the `details`
//! ([`StatusDetails`]). Nothing matches on message or reason strings; the strings exist only in
//! the rendered body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cozyplane_apis::KindInfo;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
use serde_json::{Value, json};

use crate::registry::validate::field::FieldErrors;

/// The `reason` of a failure `Status` (apimachinery's `metav1.StatusReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// 400.
    BadRequest,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 406.
    NotAcceptable,
    /// 409 on create.
    AlreadyExists,
    /// 409 otherwise; see [`ConflictKind`].
    Conflict,
    /// 410: a resource version or continue token older than the kept history.
    Expired,
    /// 413.
    RequestEntityTooLarge,
    /// 415.
    UnsupportedMediaType,
    /// 431 (no apimachinery reason: Go's HTTP server answers it before the apiserver sees the
    /// request; ours answers with a Status).
    RequestHeaderFieldsTooLarge,
    /// 422.
    Invalid,
    /// 429.
    TooManyRequests,
    /// 500.
    InternalError,
    /// 503.
    ServiceUnavailable,
    /// 504.
    Timeout,
    /// 507 (a pool has no free value left).
    InsufficientStorage,
}

impl Reason {
    /// The string of the Status body.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "BadRequest",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden => "Forbidden",
            Self::NotFound => "NotFound",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::NotAcceptable => "NotAcceptable",
            Self::AlreadyExists => "AlreadyExists",
            Self::Conflict => "Conflict",
            Self::Expired => "Expired",
            Self::RequestEntityTooLarge => "RequestEntityTooLarge",
            Self::UnsupportedMediaType => "UnsupportedMediaType",
            Self::RequestHeaderFieldsTooLarge => "RequestHeaderFieldsTooLarge",
            Self::Invalid => "Invalid",
            Self::TooManyRequests => "TooManyRequests",
            Self::InternalError => "InternalError",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::Timeout => "Timeout",
            Self::InsufficientStorage => "InsufficientStorage",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a write conflicted: what decides whether doing it again can succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictKind {
    /// The object changed between our read and our write: re-reading and retrying may succeed.
    Stale,
    /// A precondition of the request (uid, resourceVersion) does not hold: permanent.
    Precondition,
    /// Server-side apply found fields owned by other managers: permanent without `force`.
    FieldManager,
    /// A value to allocate is held by another object: permanent for this value.
    Allocated,
    /// Allocation kept losing races: the client may try again later.
    AllocationRaces,
}

/// A failed API request: HTTP code, Kubernetes reason and a human message.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also written as `code` in the body.
    pub code: u16,
    /// `reason` of the Status.
    pub reason: Reason,
    /// `message` of the Status.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), if any (boxed: errors travel in
    /// every `Result` of the server and most carry none).
    pub details: Option<Box<StatusDetails>>,
    /// For a 409 [`Reason::Conflict`]: why.
    pub conflict: Option<ConflictKind>,
}

/// The result of a handler.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

fn gr(info: &KindInfo) -> String {
    // The core group has no name: `namespaces "x" not found`.
    if info.group.is_empty() {
        info.plural.to_string()
    } else {
        format!("{}.{}", info.plural, info.group)
    }
}

/// `details` naming one object of `info` (`kind` is the plural, as apimachinery fills it).
pub fn details(info: &KindInfo, name: &str) -> StatusDetails {
    StatusDetails {
        name: Some(name.to_string()),
        group: Some(info.group.to_string()),
        kind: Some(info.plural.to_string()),
        ..StatusDetails::default()
    }
}

/// One `details.causes` entry.
pub fn cause(reason: &str, message: impl Into<String>, field: Option<&str>) -> StatusCause {
    StatusCause {
        reason: Some(reason.to_string()),
        message: Some(message.into()),
        field: field.map(str::to_string),
    }
}

impl ApiError {
    /// An error with `code`, `reason` and `message` and no details.
    pub fn new(code: u16, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            conflict: None,
        }
    }

    /// The same error with `details`.
    #[must_use]
    pub fn with_details(mut self, d: StatusDetails) -> Self {
        self.details = Some(Box::new(d));
        self
    }

    /// The causes of the details, empty when there are none.
    pub fn causes(&self) -> &[StatusCause] {
        self.details
            .as_ref()
            .and_then(|d| d.causes.as_deref())
            .unwrap_or_default()
    }

    /// Whether the object (or path) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.reason == Reason::NotFound
    }

    /// Whether this is a 409 that re-reading and writing again may resolve.
    pub fn is_stale(&self) -> bool {
        self.conflict == Some(ConflictKind::Stale)
    }

    /// A 409 [`Reason::Conflict`] of `kind` with `message` about `name` of `info`.
    pub fn conflict_of(
        kind: ConflictKind,
        message: impl Into<String>,
        details: Option<StatusDetails>,
    ) -> Self {
        Self {
            code: 409,
            reason: Reason::Conflict,
            message: message.into(),
            details: details.map(Box::new),
            conflict: Some(kind),
        }
    }

    /// 404: the object does not exist.
    pub fn not_found(info: &KindInfo, name: &str) -> Self {
        Self::new(
            404,
            Reason::NotFound,
            format!("{} \"{name}\" not found", gr(info)),
        )
        .with_details(details(info, name))
    }

    /// 404 for a URL that names nothing this server serves.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            Reason::NotFound,
            "the server could not find the requested resource",
        )
        .with_details(StatusDetails {
            causes: Some(vec![cause(
                "UnexpectedServerResponse",
                "404 page not found",
                None,
            )]),
            ..StatusDetails::default()
        })
    }

    /// 403: `name` of `info` (empty: the collection) is forbidden, `why`.
    pub fn forbidden(info: &KindInfo, name: &str, why: &str) -> Self {
        let message = if name.is_empty() {
            format!("{} is forbidden: {why}", gr(info))
        } else {
            format!("{} \"{name}\" is forbidden: {why}", gr(info))
        };
        Self::new(403, Reason::Forbidden, message).with_details(details(info, name))
    }

    /// 409: create of an existing name.
    pub fn already_exists(info: &KindInfo, name: &str) -> Self {
        Self::new(
            409,
            Reason::AlreadyExists,
            format!("{} \"{name}\" already exists", gr(info)),
        )
        .with_details(details(info, name))
    }

    /// 409: the write cannot be done on `name` of `info`, for a reason of `kind`.
    pub fn conflict(info: &KindInfo, name: &str, kind: ConflictKind, why: &str) -> Self {
        Self::conflict_of(
            kind,
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", gr(info)),
            Some(details(info, name)),
        )
    }

    /// The standard stale-resourceVersion conflict (retryable by re-reading).
    pub fn modified(info: &KindInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            ConflictKind::Stale,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one cause per field error.
    pub fn invalid(kind: &str, group: &str, name: &str, errs: &FieldErrors) -> Self {
        let causes: Vec<StatusCause> = errs
            .iter()
            .map(crate::registry::validate::FieldError::to_status_cause)
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
            Reason::Invalid,
            if group.is_empty() {
                format!("{kind} \"{name}\" is invalid: {list}")
            } else {
                format!("{kind}.{group} \"{name}\" is invalid: {list}")
            },
        )
        .with_details(StatusDetails {
            name: Some(name.to_string()),
            group: Some(group.to_string()),
            kind: Some(kind.to_string()),
            causes: Some(causes),
            ..StatusDetails::default()
        })
    }

    /// 400: malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, Reason::BadRequest, message)
    }

    /// 401: no acceptable credentials.
    pub fn unauthorized() -> Self {
        Self::new(401, Reason::Unauthorized, "Unauthorized")
    }

    /// 405: verb not supported on this path.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            Reason::MethodNotAllowed,
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 406: no acceptable representation.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, Reason::NotAcceptable, message)
    }

    /// 415: unsupported request body type.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, Reason::UnsupportedMediaType, message)
    }

    /// 413: body too large.
    pub fn too_large() -> Self {
        Self::new(
            413,
            Reason::RequestEntityTooLarge,
            "the request body is too large",
        )
    }

    /// 431: the request's header block (request target included) is larger than the server
    /// accepts. Go's HTTP server answers this for kube-apiserver without a Status; here it is one.
    pub fn headers_too_large(limit: usize) -> Self {
        Self::new(
            431,
            Reason::RequestHeaderFieldsTooLarge,
            format!("the request's headers are larger than {limit} bytes"),
        )
    }

    /// 410: resource version compacted.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, Reason::Expired, message)
    }

    /// 504: resource version from the future.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, Reason::Timeout, message)
    }

    /// 503: storage unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, Reason::ServiceUnavailable, message)
    }

    /// 500: a bug or an unexpected storage answer; the detail is logged, not sent.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(
            500,
            Reason::InternalError,
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
            "reason": self.reason.as_str(),
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = serde_json::to_value(d).unwrap_or_default();
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
            E::FutureRevision { requested, .. } => Self::timeout(format!(
                "Too large resource version: {requested}"
            ))
            .with_details(StatusDetails {
                causes: Some(vec![cause(
                    "ResourceVersionTooLarge",
                    "Too large resource version",
                    None,
                )]),
                retry_after_seconds: Some(1),
                ..StatusDetails::default()
            }),
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
