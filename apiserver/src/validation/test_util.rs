//! Assertions for validator tests.

use super::{ErrorType, FieldErrors};

/// Asserts that `errs` holds exactly the `(path, type)` pairs of `want`, in any order, and
/// prints every message on failure.
pub(crate) fn assert_errors(errs: &FieldErrors, want: &[(&str, ErrorType)]) {
    let mut got: Vec<(String, &'static str)> = errs
        .iter()
        .map(|e| (e.path.to_string(), e.kind.reason()))
        .collect();
    let mut want: Vec<(String, &'static str)> =
        want.iter().map(|(p, k)| ((*p).to_owned(), k.reason())).collect();
    got.sort();
    want.sort();
    let messages: Vec<String> = errs.iter().map(super::FieldError::message).collect();
    assert_eq!(got, want, "messages:\n{}", messages.join("\n"));
    for e in errs {
        // Every message renders, names its path, and is one line.
        assert!(e.message().starts_with(e.path.as_str()));
        assert!(!e.message().contains('\n'), "{}", e.message());
    }
}
