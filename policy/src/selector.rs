//! Label selectors (`metav1.LabelSelector`) as the compiler evaluates them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Req {
    /// `key in (values)` (also `matchLabels`).
    In(String, Vec<String>),
    /// `key notin (values)`: true when the key is absent.
    NotIn(String, Vec<String>),
    /// The key is present.
    Exists(String),
    /// The key is absent.
    DoesNotExist(String),
}

/// A parsed selector: every requirement must hold; none means "everything".
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector(pub Vec<Req>);

impl Selector {
    /// Parse a `LabelSelector`; an unknown operator is the error's text.
    pub fn parse(s: &LabelSelector) -> Result<Self, String> {
        let mut reqs: Vec<Req> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Req::In(k.clone(), vec![v.clone()]))
            .collect();
        for e in s.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            reqs.push(match e.operator.as_str() {
                "In" if !values.is_empty() => Req::In(e.key.clone(), values),
                "NotIn" if !values.is_empty() => Req::NotIn(e.key.clone(), values),
                "Exists" if values.is_empty() => Req::Exists(e.key.clone()),
                "DoesNotExist" if values.is_empty() => Req::DoesNotExist(e.key.clone()),
                op => return Err(format!("operator {op:?} with values {values:?} on {:?}", e.key)),
            });
        }
        Ok(Self(reqs))
    }

    /// Does the selector select an object with these labels?
    pub fn matches(&self, l: &Labels) -> bool {
        self.0.iter().all(|r| match r {
            Req::In(k, vs) => l.get(k).is_some_and(|v| vs.contains(v)),
            Req::NotIn(k, vs) => l.get(k).is_none_or(|v| !vs.contains(v)),
            Req::Exists(k) => l.contains_key(k),
            Req::DoesNotExist(k) => !l.contains_key(k),
        })
    }

    /// The label keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|r| match r {
            Req::In(k, _) | Req::NotIn(k, _) | Req::Exists(k) | Req::DoesNotExist(k) => k.as_str(),
        })
    }
}
