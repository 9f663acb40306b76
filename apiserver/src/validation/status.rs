//! Rules for what a `/status` write may store, shared by the kinds.
//!
//! A status is written by the server's controllers and, through `/status`, by whoever has the
//! grant (operators, other controllers). Whatever writes it, the stored status must stay
//! within the kind's vocabulary: a `phase` the kind documents, conditions shaped as
//! `metav1.Condition` requires, addresses that parse.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::field::{FieldError, FieldErrors, FieldPath};
use super::format::qualified_name;

/// The phases of kinds that are `Pending` until ready.
pub const PHASES: &[&str] = &["Pending", "Ready"];

/// `phase` at `status.phase`: empty (not yet written) or one of `allowed`.
pub fn phase(errs: &mut FieldErrors, phase: &str, allowed: &[&str]) {
    if !phase.is_empty() && !allowed.contains(&phase) {
        errs.push(FieldError::not_supported(
            FieldPath::new("status").child("phase"),
            phase,
            allowed,
        ));
    }
}

/// The longest condition message apimachinery accepts.
const MAX_MESSAGE: usize = 32 * 1024;

/// `metav1.Condition` rules (apimachinery's `ValidateConditions`): a qualified-name `type`,
/// unique; `status` `True`, `False` or `Unknown`; a `reason` that is a CamelCase identifier; a
/// bounded message; a non-negative `observedGeneration`.
pub fn conditions(errs: &mut FieldErrors, conds: &[Condition]) {
    let path = FieldPath::new("status").child("conditions");
    let mut seen = HashSet::new();
    for (i, c) in conds.iter().enumerate() {
        let p = path.index(i);
        if c.type_.is_empty() {
            errs.push(FieldError::required(p.child("type"), ""));
        } else if let Err(e) = qualified_name(&c.type_) {
            errs.push(FieldError::invalid(p.child("type"), &c.type_, e));
        } else if !seen.insert(c.type_.as_str()) {
            errs.push(FieldError::duplicate(p.child("type"), &c.type_));
        }
        if !["True", "False", "Unknown"].contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                p.child("status"),
                &c.status,
                &["True", "False", "Unknown"],
            ));
        }
        if c.reason.is_empty() {
            errs.push(FieldError::required(p.child("reason"), ""));
        } else if !is_reason(&c.reason) {
            errs.push(FieldError::invalid(
                p.child("reason"),
                &c.reason,
                "a condition reason must start with an alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
            ));
        }
        if c.message.len() > MAX_MESSAGE {
            errs.push(FieldError::too_long(p.child("message"), MAX_MESSAGE, "bytes"));
        }
        if let Some(g) = c.observed_generation
            && g < 0
        {
            errs.push(FieldError::invalid_int(
                p.child("observedGeneration"),
                g,
                "must be greater than or equal to zero",
            ));
        }
    }
}

/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, apimachinery's condition reason.
fn is_reason(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':');
    let last = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    s.len() <= 1024
        && b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(|c| inner(*c))
        && b.last().is_some_and(|c| last(*c))
}

/// An address at `status.<field>`: empty, or an address of the `v6` family or (`None`) either.
pub fn address(errs: &mut FieldErrors, field: &str, value: &str, v6: Option<bool>) {
    if value.is_empty() {
        return;
    }
    let path = FieldPath::new("status").child(field);
    match value.parse::<IpAddr>() {
        Ok(ip) if v6.is_none_or(|v6| ip.is_ipv6() == v6) => {}
        Ok(_) => errs.push(FieldError::invalid(
            path,
            value,
            if v6 == Some(true) {
                "must be an IPv6 address"
            } else {
                "must be an IPv4 address"
            },
        )),
        Err(_) => errs.push(FieldError::invalid(path, value, "must be an IP address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(ty: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: ty.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }
    }

    #[test]
    fn conditions_follow_apimachinery() {
        let mut e = FieldErrors::new();
        conditions(&mut e, &[cond("Ready", "True", "VNIAllocated")]);
        assert!(e.is_empty(), "{e:?}");
        let mut e = FieldErrors::new();
        conditions(
            &mut e,
            &[
                cond("Ready", "Maybe", "R"),
                cond("Ready", "True", "1bad"),
                cond("", "True", ""),
            ],
        );
        for p in [
            "status.conditions[0].status",
            "status.conditions[1].type",
            "status.conditions[1].reason",
            "status.conditions[2].type",
            "status.conditions[2].reason",
        ] {
            assert!(e.has_path(p), "{p}: {e:?}");
        }
    }

    #[test]
    fn phases_and_addresses() {
        let mut e = FieldErrors::new();
        phase(&mut e, "", PHASES);
        phase(&mut e, "Ready", PHASES);
        address(&mut e, "natAddress", "203.0.113.7", Some(false));
        address(&mut e, "address", "2001:db8::1", None);
        assert!(e.is_empty(), "{e:?}");
        phase(&mut e, "Bogus", PHASES);
        address(&mut e, "natAddress", "not-an-ip", Some(false));
        address(&mut e, "natAddress6", "203.0.113.7", Some(true));
        assert_eq!(e.len(), 3, "{e:?}");
    }
}
