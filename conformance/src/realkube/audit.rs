//! kube-apiserver's audit log (JSON lines, one event per stage): what a user was refused and how
//! long its watches lasted.

use std::collections::HashMap;
use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// One audit event, as far as these checks need it.
#[derive(Clone, Debug)]
pub struct Event {
    /// `auditID` (shared by the stages of one request).
    pub id: String,
    /// `RequestReceived`, `ResponseStarted`, `ResponseComplete`, `Panic`.
    pub stage: String,
    /// `get`, `list`, `watch`, `create`, ...
    pub verb: String,
    /// `user.username`.
    pub user: String,
    /// `requestURI`.
    pub uri: String,
    /// `responseStatus.code`, if the stage has one.
    pub code: Option<u16>,
    /// `requestReceivedTimestamp`.
    pub received: Timestamp,
    /// `stageTimestamp`.
    pub at: Timestamp,
}

fn ts(v: &Value, key: &str) -> Option<Timestamp> {
    v.get(key)?.as_str()?.parse().ok()
}

/// Every event of the log (lines that do not parse are skipped: the last may be half written).
pub fn read(path: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let s = |p: &str| {
                v.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            Some(Event {
                id: s("/auditID"),
                stage: s("/stage"),
                verb: s("/verb"),
                user: s("/user/username"),
                uri: s("/requestURI"),
                code: v
                    .pointer("/responseStatus/code")
                    .and_then(Value::as_u64)
                    .and_then(|c| u16::try_from(c).ok()),
                received: ts(&v, "requestReceivedTimestamp")?,
                at: ts(&v, "stageTimestamp")?,
            })
        })
        .collect()
}

/// Requests of `user` that kube-apiserver answered 403, as `verb uri`.
pub fn forbidden(events: &[Event], user: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.user == user && e.stage == "ResponseComplete" && e.code == Some(403))
        .map(|e| format!("{} {} at {}", e.verb, e.uri, e.at))
        .collect()
}

/// The `timeoutSeconds` query parameter of a request URI.
pub fn timeout_seconds(uri: &str) -> Option<i64> {
    let q = uri.split_once('?')?.1;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "timeoutSeconds")
        .and_then(|(_, v)| v.parse().ok())
}

/// The watches of one user.
#[derive(Debug, Default)]
pub struct Watches {
    /// Watches that ended.
    pub complete: usize,
    /// Watches still open when the log was read.
    pub open: usize,
    /// Ended watches that were open when the server was stopped on purpose.
    pub excused: usize,
    /// Ended watches that lasted their whole `timeoutSeconds`.
    pub full: usize,
    /// Ended watches shorter than their `timeoutSeconds` (or without one), described.
    pub short: Vec<String>,
}

/// Sorts the watches of `user`: a watch ended early unless it lasted its `timeoutSeconds`
/// (less `slack`) or was open at one of the `stops` (the client went away on purpose).
pub fn watches(events: &[Event], user: &str, stops: &[Timestamp], slack: SignedDuration) -> Watches {
    let mut by_id: HashMap<&str, (Option<&Event>, Option<&Event>)> = HashMap::new();
    for e in events.iter().filter(|e| e.user == user && e.verb == "watch") {
        let slot = by_id.entry(e.id.as_str()).or_default();
        match e.stage.as_str() {
            "RequestReceived" => slot.0 = Some(e),
            "ResponseComplete" | "Panic" => slot.1 = Some(e),
            _ => {}
        }
    }
    let mut w = Watches::default();
    for (start, end) in by_id.into_values() {
        let Some(end) = end else {
            if start.is_some() {
                w.open += 1;
            }
            continue;
        };
        w.complete += 1;
        let lasted = end.at.duration_since(end.received);
        if stops.iter().any(|s| end.received <= *s && *s <= end.at) {
            w.excused += 1;
            continue;
        }
        match timeout_seconds(&end.uri) {
            Some(t) if lasted + slack >= SignedDuration::from_secs(t) => w.full += 1,
            t => w.short.push(format!(
                "{} lasted {lasted:#} of timeoutSeconds={t:?} (code {:?}, {} → {})",
                end.uri, end.code, end.received, end.at
            )),
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str, stage: &str, uri: &str, received: &str, at: &str) -> Event {
        Event {
            id: id.into(),
            stage: stage.into(),
            verb: "watch".into(),
            user: "u".into(),
            uri: uri.into(),
            code: Some(200),
            received: received.parse().unwrap(),
            at: at.parse().unwrap(),
        }
    }

    #[test]
    fn a_watch_that_ends_before_its_timeout_is_short_unless_a_stop_explains_it() {
        let uri = "/api/v1/nodes?timeoutSeconds=290&watch=true";
        let t0 = "2026-01-01T00:00:00.000000Z";
        let events = vec![
            ev("a", "RequestReceived", uri, t0, t0),
            ev("a", "ResponseComplete", uri, t0, "2026-01-01T00:00:10.000000Z"),
            ev(
                "b",
                "ResponseComplete",
                uri,
                "2026-01-01T00:00:20.000000Z",
                "2026-01-01T00:05:10.000000Z",
            ),
            ev("c", "RequestReceived", uri, t0, t0),
        ];
        let w = watches(&events, "u", &[], SignedDuration::ZERO);
        assert_eq!((w.complete, w.open, w.full, w.short.len()), (2, 1, 1, 1), "{w:?}");
        let stop: Timestamp = "2026-01-01T00:00:09.000000Z".parse().unwrap();
        let w = watches(&events, "u", &[stop], SignedDuration::ZERO);
        assert_eq!((w.excused, w.short.len()), (1, 0), "{w:?}");
    }
}
