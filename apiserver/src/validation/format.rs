//! Kubernetes string formats: DNS names, qualified names, label values.
//!
//! Each check returns `Ok(())` or one sentence saying everything that is wrong, so the caller
//! can report one error per field. The rules are the ones Kubernetes applies to object names,
//! namespaces, label keys and values; the sentences are our own.

/// Longest DNS-1123 subdomain (object names, node names, label key prefixes).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest DNS label (namespaces, the name part of a qualified name, label values).
pub const DNS_LABEL_MAX: usize = 63;

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without the length limit.
fn is_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first) && is_lower_alnum(last) && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

fn too_long(s: &str, max: usize) -> Option<String> {
    (s.len() > max).then(|| format!("must be no more than {max} characters"))
}

fn join(problems: &[String]) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// A DNS-1123 label (RFC 1123): at most 63 characters, lower-case letters, digits and `-`,
/// starting and ending with a letter or digit. Namespaces, VPC names.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    let mut problems: Vec<String> = too_long(s, DNS_LABEL_MAX).into_iter().collect();
    if !is_label_shape(s) {
        problems.push(
            "must consist of lower-case letters, digits and '-', and start and end with a letter or \
             digit (e.g. 'blue-1')"
                .to_owned(),
        );
    }
    join(&problems)
}

/// A DNS-1123 subdomain: at most 253 characters, one or more DNS-1123 labels (without their
/// length limit) joined by `.`. Object and node names.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    let mut problems: Vec<String> = too_long(s, DNS1123_SUBDOMAIN_MAX).into_iter().collect();
    if !s.split('.').all(is_label_shape) {
        problems.push(
            "must consist of lower-case letters, digits, '-' and '.', and start and end with a letter \
             or digit, with a letter or digit on both sides of every '.' (e.g. 'example.com')"
                .to_owned(),
        );
    }
    join(&problems)
}

/// A DNS-1035 label (RFC 1035): a DNS-1123 label that starts with a letter. Service names, and
/// names that become the prefix of one.
pub fn dns1035_label(s: &str) -> Result<(), String> {
    let mut problems: Vec<String> = too_long(s, DNS_LABEL_MAX).into_iter().collect();
    let starts_with_letter = s.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
    if !is_label_shape(s) || !starts_with_letter {
        problems.push(
            "must consist of lower-case letters, digits and '-', start with a letter and end with a \
             letter or digit (e.g. 'web-1')"
                .to_owned(),
        );
    }
    join(&problems)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: the name part of a qualified name, and a
/// non-empty label value.
fn is_name_part_shape(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_alnum(first) && is_alnum(last) && b.iter().all(|&c| is_alnum(c) || b"-_.".contains(&c))
        }
        _ => false,
    }
}

/// A qualified name: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// letters, digits, `-`, `_` and `.` that starts and ends with a letter or digit. Label and
/// annotation keys, finalizers, label-selector keys, `loadBalancerClass`.
pub fn qualified_name(s: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("the prefix before '/' must not be empty".to_owned());
            } else if let Err(e) = dns1123_subdomain(prefix) {
                problems.push(format!("the prefix before '/' {e}"));
            }
            *name
        }
        _ => {
            return Err(
                "must be a name, optionally preceded by a DNS subdomain and one '/' (e.g. \
                 'example.com/my-name')"
                    .to_owned(),
            );
        }
    };
    if name.is_empty() {
        problems.push("the name part must not be empty".to_owned());
    } else {
        if name.len() > DNS_LABEL_MAX {
            problems.push(format!(
                "the name part must be no more than {DNS_LABEL_MAX} characters"
            ));
        }
        if !is_name_part_shape(name) {
            problems.push(
                "the name part must consist of letters, digits, '-', '_' and '.', and start and end \
                 with a letter or digit (e.g. 'my.name')"
                    .to_owned(),
            );
        }
    }
    join(&problems)
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_` and `.` that start and end with
/// a letter or digit.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    let mut problems: Vec<String> = too_long(s, DNS_LABEL_MAX).into_iter().collect();
    if !is_name_part_shape(s) {
        problems.push(
            "must be empty or consist of letters, digits, '-', '_' and '.', and start and end with a \
             letter or digit (e.g. 'v1.2')"
                .to_owned(),
        );
    }
    join(&problems)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "0", "blue-1", &"a".repeat(63)] {
            assert!(dns1123_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(dns1123_label(bad).is_err(), "{bad}");
        }
        assert!(dns1035_label("web-1").is_ok());
        assert!(dns1035_label("1web").is_err());
    }

    #[test]
    fn subdomains() {
        for ok in ["a", "a.b", "v100.10-0-0-2", "example.com", &"a".repeat(253)] {
            assert!(dns1123_subdomain(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            "a.",
            ".a",
            "a.-b",
            "v100.--1",
            "A.b",
            &"a".repeat(254),
        ] {
            assert!(dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names_and_values() {
        for ok in [
            "app",
            "App_1.x",
            "example.com/app",
            "sdn.cozystack.io/sever",
            "kubernetes",
        ] {
            assert!(qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/app",
            "a/b/c",
            "Example.com/app",
            "example.com/",
            "-app",
            "app-",
            &"a".repeat(64),
        ] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
        for ok in ["", "v1.2", "A_b-c", &"a".repeat(63)] {
            assert!(label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["-a", "a b", "a/b", &"a".repeat(64)] {
            assert!(label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn all_problems_are_reported_in_one_sentence() {
        let err = dns1123_label(&"A".repeat(64)).unwrap_err();
        assert!(
            err.contains("63 characters") && err.contains("lower-case"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn never_panic(s in "\\PC{0,300}") {
            let _ = dns1123_label(&s);
            let _ = dns1123_subdomain(&s);
            let _ = dns1035_label(&s);
            let _ = qualified_name(&s);
            let _ = label_value(&s);
        }

        #[test]
        fn a_label_is_a_subdomain(s in "[a-z0-9-]{1,70}") {
            if dns1123_label(&s).is_ok() {
                prop_assert!(dns1123_subdomain(&s).is_ok());
                prop_assert!(label_value(&s).is_ok());
                prop_assert!(qualified_name(&s).is_ok());
            }
        }
    }
}
