//! Label and field selectors, parsed once per request and matched against JSON objects.

use std::collections::BTreeMap;

use serde_json::Value;

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` (requirements ANDed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Req>);

fn split_top(s: &str) -> Vec<&str> {
    // Commas inside `(...)` belong to a set, not to the AND list.
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, found {rest:?}"))?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if let Some(bad) = vals.iter().find(|v| !valid_value(v)) {
        return Err(format!("invalid label value: {bad:?}"));
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parses the Kubernetes selector syntax: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
    /// `k notin (a,b)`, `k`, `!k`, joined by commas.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(format!("invalid label selector {s:?}: empty requirement"));
            }
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some(i) = p.find(" notin ").or_else(|| p.find(" notin(")) {
                Req::NotIn(p[..i].trim().into(), parse_set(&p[i + 6..])?)
            } else if let Some(i) = p.find(" in ").or_else(|| p.find(" in(")) {
                Req::In(p[..i].trim().into(), parse_set(&p[i + 3..])?)
            } else {
                Req::Exists(p.to_string())
            };
            let (key, val) = match &req {
                Req::Eq(k, v) | Req::Ne(k, v) => (k, Some(v)),
                Req::In(k, _) | Req::NotIn(k, _) | Req::Exists(k) | Req::NotExists(k) => (k, None),
            };
            if !valid_key(key) {
                return Err(format!("invalid label key {key:?} in selector {s:?}"));
            }
            if let Some(v) = val
                && !valid_value(v)
            {
                return Err(format!("invalid label value {v:?} in selector {s:?}"));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// `true` if no requirement is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels `label` looks up satisfy every requirement (the watch cache keeps
    /// labels in a compact form of its own, not as a map).
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => label(k) == Some(v.as_str()),
            Req::Ne(k, v) => label(k) != Some(v.as_str()),
            Req::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => label(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Req::Exists(k) => label(k).is_some(),
            Req::NotExists(k) => label(k).is_none(),
        })
    }

    /// Matches the labels of a JSON object.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

/// A parsed `fieldSelector`: (JSON pointer, value, equal?) requirements ANDed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, String, bool)>);

impl FieldSelector {
    /// Parses `f=v`, `f==v`, `f!=v` joined by commas. `fields` maps the selectable field names
    /// of the kind (beyond `metadata.name`/`metadata.namespace`) to JSON pointers.
    pub fn parse(s: &str, fields: &[(&str, &str)]) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, eq) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!("invalid selector: '{part}'; can't understand '{part}'"));
            };
            let field = field.trim();
            let pointer = match field {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                other => match fields.iter().find(|(n, _)| *n == other) {
                    Some((_, p)) => p,
                    None => {
                        let mut known = vec![
                            "\"metadata.name\"".to_string(),
                            "\"metadata.namespace\"".to_string(),
                        ];
                        known.extend(fields.iter().map(|(n, _)| format!("\"{n}\"")));
                        return Err(format!(
                            "\"{other}\" is not a known field selector: only {}",
                            known.join(", ")
                        ));
                    }
                },
            };
            out.push((pointer.to_string(), value.trim().to_string(), eq));
        }
        Ok(Self(out))
    }

    /// `true` if no requirement is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name this selector pins with `metadata.name=<x>`, if any.
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, _, eq)| p == "/metadata/name" && *eq)
            .map(|(_, v, _)| v.as_str())
    }

    /// Whether a JSON object satisfies every requirement; missing fields read as `""`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(p, v, eq)| (field_text(obj.pointer(p)) == *v) == *eq)
    }

    /// Whether the field values `field` looks up by JSON pointer satisfy every requirement
    /// (values as [`field_text`] renders them).
    pub fn matches_with<'a>(&self, field: impl Fn(&str) -> &'a str) -> bool {
        self.0.iter().all(|(p, v, eq)| (field(p) == v.as_str()) == *eq)
    }
}

/// The text a field selector compares a field's value with: a string as is, anything else as
/// its JSON, and a missing field or `null` as `""`.
pub fn field_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_full_syntax() {
        let s = LabelSelector::parse("a=1,b!=2,c in (x, y),d notin (z),e,!f").unwrap();
        assert!(s.matches(&labels(&[("a", "1"), ("c", "x"), ("e", "")])));
        assert!(!s.matches(&labels(&[("a", "1"), ("c", "x"), ("e", ""), ("f", "")])));
        assert!(!s.matches(&labels(&[("a", "1"), ("c", "q"), ("e", "")])));
        assert!(
            LabelSelector::parse("a==1")
                .unwrap()
                .matches(&labels(&[("a", "1")]))
        );
        assert!(LabelSelector::parse("a in x").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn field_selector_knows_metadata_and_extra_fields() {
        let f =
            FieldSelector::parse("metadata.name=a,spec.node!=n1", &[("spec.node", "/spec/node")]).unwrap();
        assert!(f.matches_object(&serde_json::json!({"metadata":{"name":"a"},"spec":{"node":"n2"}})));
        assert!(!f.matches_object(&serde_json::json!({"metadata":{"name":"a"},"spec":{"node":"n1"}})));
        assert_eq!(f.name(), Some("a"));
        assert!(
            FieldSelector::parse("spec.foo=1", &[])
                .unwrap_err()
                .contains("not a known field selector")
        );
    }
}
