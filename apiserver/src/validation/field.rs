//! Field errors: the data a `422 Invalid` response is built from.
//!
//! The shapes follow apimachinery's `field.ErrorList`, so that `kubectl` prints our errors the way
//! it prints those of built-in kinds:
//!
//! - a [`FieldPath`] names the offending field (`spec.cidrs[0]`, `metadata.labels[app]`);
//! - an [`ErrorType`] says what is wrong with it and carries the Kubernetes cause `reason`
//!   (`FieldValueInvalid`, …);
//! - a [`FieldError`] is one problem; [`FieldErrors`] collects all problems of one object, so a
//!   client sees every mistake at once instead of fixing them one request at a time.
//!
//! These are plain values, not `std::error::Error`s: a validator *returns* them as its result,
//! and only the server's edge turns a non-empty list into an error response
//! ([`FieldErrors::invalid_status`]).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

/// The path of a field inside an object, in the dotted form Kubernetes prints
/// (`spec.ingress[0].from.cidr`, `metadata.annotations[example.com/key]`).
///
/// Built from a root with [`child`](Self::child) (a struct field), [`index`](Self::index)
/// (a list element) and [`key`](Self::key) (a map entry); each step returns a new path and leaves
/// the receiver unchanged, so one parent can be extended many times:
///
/// ```
/// use cozyplane_apiserver::validation::FieldPath;
///
/// let cidrs = FieldPath::new("spec").child("cidrs");
/// assert_eq!(cidrs.index(0).to_string(), "spec.cidrs[0]");
/// assert_eq!(FieldPath::new("metadata").child("labels").key("app").to_string(), "metadata.labels[app]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path with one segment, usually `spec` or `metadata`.
    pub fn new(root: &str) -> Self {
        Self(root.to_owned())
    }

    /// The field `name` of the struct at this path.
    #[must_use]
    pub fn child(&self, name: &str) -> Self {
        let mut path = self.0.clone();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(name);
        Self(path)
    }

    /// Element `i` of the list at this path.
    #[must_use]
    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    /// Entry `key` of the map at this path (written unquoted, as Kubernetes does).
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The path as text, e.g. `spec.cidrs[0]`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What is wrong with a field; the subset of apimachinery's `field.ErrorType` that validation
/// produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// A required field is empty or missing.
    Required,
    /// The value is malformed or out of range.
    Invalid,
    /// The value is not one of an enumerated set.
    NotSupported,
    /// The value repeats one earlier in the same list (or map).
    Duplicate,
    /// The field may not be set (in this combination, scope or update).
    Forbidden,
    /// The value is longer than allowed.
    TooLong,
    /// The list has more items than allowed.
    TooMany,
}

impl ErrorType {
    /// The Kubernetes cause type, written as `details.causes[].reason` of the Status.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
        }
    }

    /// The words a message starts with (`Invalid value`, `Required value`, …), as in Kubernetes.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Duplicate => "Duplicate value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
        }
    }

    /// `true` if messages of this type show the rejected value (Kubernetes omits it for
    /// required, forbidden and too-long fields: there is none, or it is not useful to echo).
    const fn shows_value(self) -> bool {
        !matches!(self, Self::Required | Self::Forbidden | Self::TooLong)
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One problem with one field.
///
/// Render it with [`message`](Self::message) (`spec.mtu: Invalid value: 70000: must be between
/// 1280 and 9000`) or turn it into a Status cause with [`to_status_cause`](Self::to_status_cause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The offending field.
    pub path: FieldPath,
    /// What is wrong with it.
    pub kind: ErrorType,
    /// The rejected value as it appears in the message: strings quoted Go-style
    /// (`"10.0.0.1/8"`), numbers bare (`70000`). `None` when there is nothing to show.
    pub value: Option<String>,
    /// Why the value is wrong or what is expected; may be empty.
    pub detail: String,
}

impl FieldError {
    fn new(path: FieldPath, kind: ErrorType, value: Option<String>, detail: impl Into<String>) -> Self {
        Self {
            path,
            kind,
            value,
            detail: detail.into(),
        }
    }

    /// The field must be set; `detail` may say what is expected.
    pub fn required(path: FieldPath, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorType::Required, None, detail)
    }

    /// The string `value` is not acceptable, because of `detail`.
    pub fn invalid(path: FieldPath, value: &str, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorType::Invalid, Some(quote(value)), detail)
    }

    /// The number `value` is not acceptable, because of `detail`.
    pub fn invalid_int(path: FieldPath, value: i64, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorType::Invalid, Some(value.to_string()), detail)
    }

    /// `value` is not one of `supported`.
    pub fn not_supported(path: FieldPath, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self::new(
            path,
            ErrorType::NotSupported,
            Some(quote(value)),
            format!("supported values: {}", list.join(", ")),
        )
    }

    /// `value` repeats an earlier entry of the same list.
    pub fn duplicate(path: FieldPath, value: &str) -> Self {
        Self::new(path, ErrorType::Duplicate, Some(quote(value)), "")
    }

    /// The field may not be set (here, now, or together with another one): `detail` says why.
    pub fn forbidden(path: FieldPath, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorType::Forbidden, None, detail)
    }

    /// The value is longer than `max` bytes (or characters, as `unit` says).
    pub fn too_long(path: FieldPath, max: usize, unit: &str) -> Self {
        Self::new(
            path,
            ErrorType::TooLong,
            None,
            format!("may not be longer than {max} {unit}"),
        )
    }

    /// The list has `actual` items; at most `max` are allowed.
    pub fn too_many(path: FieldPath, actual: usize, max: usize) -> Self {
        Self::new(
            path,
            ErrorType::TooMany,
            Some(actual.to_string()),
            format!("may not have more than {max} items"),
        )
    }

    /// The message without the path, e.g. `Invalid value: "x": must be …`; this is what
    /// Kubernetes puts in `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut s = self.kind.label().to_owned();
        if let Some(value) = self.value.as_deref().filter(|_| self.kind.shows_value()) {
            s.push_str(": ");
            s.push_str(value);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The full message, path first:
    /// `spec.cidrs[0]: Invalid value: "10.0.0.1/8": must be canonical (10.0.0.0/8)`.
    pub fn message(&self) -> String {
        format!("{}: {}", self.path, self.body())
    }

    /// This error as one entry of a Status's `details.causes`.
    pub fn to_status_cause(&self) -> StatusCause {
        StatusCause {
            field: Some(self.path.to_string()),
            message: Some(self.body()),
            reason: Some(self.kind.reason().to_owned()),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// Every problem found in one object; empty means valid.
///
/// Validators push into one list and never stop at the first problem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(Vec<FieldError>);

impl FieldErrors {
    /// An empty list.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Adds one problem.
    pub fn push(&mut self, err: FieldError) {
        self.0.push(err);
    }

    /// Adds all problems of another list (or any iterator of errors), in order.
    pub fn extend(&mut self, errs: impl IntoIterator<Item = FieldError>) {
        self.0.extend(errs);
    }

    /// `true` if no problem was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of problems.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The problems, in the order they were found (field order of the object).
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.0.iter()
    }

    /// `true` if some problem concerns exactly `path`.
    pub fn has_path(&self, path: &str) -> bool {
        self.0.iter().any(|e| e.path.as_str() == path)
    }

    /// The problems as a plain vector.
    pub fn into_vec(self) -> Vec<FieldError> {
        self.0
    }

    /// The errors part of a Status message: the one message alone, or several in brackets
    /// (`[a, b]`), identical messages shown once — the way Kubernetes aggregates them.
    pub fn summary(&self) -> String {
        let mut seen = std::collections::HashSet::new();
        let messages: Vec<String> = self
            .0
            .iter()
            .map(FieldError::message)
            .filter(|m| seen.insert(m.clone()))
            .collect();
        match messages.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        }
    }

    /// The `message` of the 422 Status for an object of `kind` in `group` named `name`:
    /// `VPC.sdn.cozystack.io "blue" is invalid: [spec.cidrs[0]: …, spec.mtu: …]`.
    pub fn status_message(&self, kind: &str, group: &str, name: &str) -> String {
        let qualified = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        format!("{qualified} {} is invalid: {}", quote(name), self.summary())
    }

    /// The complete `422 Invalid` Status Kubernetes clients expect: reason `Invalid`, the
    /// message of [`status_message`](Self::status_message), and one cause per error.
    pub fn invalid_status(&self, kind: &str, group: &str, name: &str) -> Status {
        Status {
            code: Some(422),
            details: Some(StatusDetails {
                causes: Some(self.0.iter().map(FieldError::to_status_cause).collect()),
                group: Some(group.to_owned()),
                kind: Some(kind.to_owned()),
                name: Some(name.to_owned()),
                ..StatusDetails::default()
            }),
            message: Some(self.status_message(kind, group, name)),
            reason: Some("Invalid".to_owned()),
            status: Some("Failure".to_owned()),
            ..Status::default()
        }
    }
}

impl From<Vec<FieldError>> for FieldErrors {
    fn from(errs: Vec<FieldError>) -> Self {
        Self(errs)
    }
}

impl From<FieldError> for FieldErrors {
    fn from(err: FieldError) -> Self {
        Self(vec![err])
    }
}

impl FromIterator<FieldError> for FieldErrors {
    fn from_iter<I: IntoIterator<Item = FieldError>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl IntoIterator for FieldErrors {
    type Item = FieldError;
    type IntoIter = std::vec::IntoIter<FieldError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a FieldErrors {
    type Item = &'a FieldError;
    type IntoIter = std::slice::Iter<'a, FieldError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Quotes `s` the way Go's `%q` does for the text we echo: `"` and `\` escaped, control
/// characters as `\n`, `\t`, `\xNN` or `\uNNNN`; other characters kept.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_kubernetes() {
        let spec = FieldPath::new("spec");
        assert_eq!(spec.child("cidrs").index(0).to_string(), "spec.cidrs[0]");
        assert_eq!(
            spec.child("ingress")
                .index(2)
                .child("from")
                .child("cidr")
                .as_str(),
            "spec.ingress[2].from.cidr"
        );
        assert_eq!(
            FieldPath::new("metadata").child("labels").key("a/b").as_str(),
            "metadata.labels[a/b]"
        );
        // The parent is unchanged.
        assert_eq!(spec.as_str(), "spec");
    }

    #[test]
    fn messages_render_like_kubernetes() {
        let cidr = FieldPath::new("spec").child("cidrs").index(0);
        let e = FieldError::invalid(cidr.clone(), "10.0.0.1/8", "must be canonical (10.0.0.0/8)");
        assert_eq!(
            e.message(),
            r#"spec.cidrs[0]: Invalid value: "10.0.0.1/8": must be canonical (10.0.0.0/8)"#
        );
        assert_eq!(
            FieldError::required(FieldPath::new("spec").child("ip"), "").message(),
            "spec.ip: Required value"
        );
        assert_eq!(
            FieldError::forbidden(FieldPath::new("spec"), "field is immutable").message(),
            "spec: Forbidden: field is immutable"
        );
        assert_eq!(
            FieldError::invalid_int(FieldPath::new("spec").child("mtu"), 70000, "too big").message(),
            "spec.mtu: Invalid value: 70000: too big"
        );
        assert_eq!(
            FieldError::not_supported(FieldPath::new("p"), "SCTP", &["TCP", "UDP"]).message(),
            r#"p: Unsupported value: "SCTP": supported values: "TCP", "UDP""#
        );
        assert_eq!(
            FieldError::duplicate(cidr, "10.0.0.0/8").message(),
            r#"spec.cidrs[0]: Duplicate value: "10.0.0.0/8""#
        );
        assert_eq!(
            FieldError::too_many(FieldPath::new("spec").child("cidrs"), 3, 2).message(),
            "spec.cidrs: Too many: 3: may not have more than 2 items"
        );
        assert_eq!(
            FieldError::too_long(FieldPath::new("metadata").child("annotations"), 10, "bytes").message(),
            "metadata.annotations: Too long: may not be longer than 10 bytes"
        );
    }

    #[test]
    fn reasons_are_the_kubernetes_cause_types() {
        let all = [
            (ErrorType::Required, "FieldValueRequired"),
            (ErrorType::Invalid, "FieldValueInvalid"),
            (ErrorType::NotSupported, "FieldValueNotSupported"),
            (ErrorType::Duplicate, "FieldValueDuplicate"),
            (ErrorType::Forbidden, "FieldValueForbidden"),
            (ErrorType::TooLong, "FieldValueTooLong"),
            (ErrorType::TooMany, "FieldValueTooMany"),
        ];
        for (kind, reason) in all {
            assert_eq!(kind.reason(), reason);
        }
    }

    #[test]
    fn values_are_quoted_go_style() {
        assert_eq!(quote("a\"b\\c\n\u{1}\u{7f}é"), r#""a\"b\\c\n\x01\x7fé""#);
    }

    #[test]
    fn status_aggregates_all_errors() {
        let spec = FieldPath::new("spec");
        let one: FieldErrors = FieldError::required(spec.child("ip"), "").into();
        assert_eq!(
            one.status_message("Port", "sdn.cozystack.io", "v100.10-0-0-2"),
            r#"Port.sdn.cozystack.io "v100.10-0-0-2" is invalid: spec.ip: Required value"#
        );

        let mut errs = FieldErrors::new();
        errs.push(FieldError::required(spec.child("ip"), ""));
        errs.push(FieldError::invalid_int(spec.child("mtu"), 1, "too small"));
        errs.push(FieldError::required(spec.child("ip"), ""));
        assert_eq!(errs.len(), 3);
        assert_eq!(
            errs.status_message("VPC", "sdn.cozystack.io", "blue"),
            r#"VPC.sdn.cozystack.io "blue" is invalid: [spec.ip: Required value, spec.mtu: Invalid value: 1: too small]"#
        );
        let status = errs.invalid_status("VPC", "sdn.cozystack.io", "blue");
        assert_eq!(status.code, Some(422));
        assert_eq!(status.reason.as_deref(), Some("Invalid"));
        let details = status.details.unwrap();
        assert_eq!(details.kind.as_deref(), Some("VPC"));
        let causes = details.causes.unwrap();
        assert_eq!(causes.len(), 3);
        assert_eq!(causes[1].field.as_deref(), Some("spec.mtu"));
        assert_eq!(causes[1].reason.as_deref(), Some("FieldValueInvalid"));
        assert_eq!(causes[1].message.as_deref(), Some("Invalid value: 1: too small"));
    }
}
