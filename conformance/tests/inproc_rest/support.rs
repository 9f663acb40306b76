//! What the generic cases share: the per-kind context [`Ctx`] with its paths and request
//! helpers, the failure [`Report`], and small JSON helpers.

use std::time::Duration;

use cozyplane_apis::KindInfo;
use cozyplane_conformance::inproc::InProc;
use serde_json::{Value, json};

use super::{BASE, Fixture, WAIT};

/// Failed cases of one kind: (case, what happened).
#[derive(Default)]
pub(crate) struct Report(pub(crate) Vec<(&'static str, String)>);

impl Report {
    pub(crate) fn case<T>(&mut self, case: &'static str, r: Result<T, String>) -> Option<T> {
        r.map_err(|e| self.0.push((case, e))).ok()
    }
}

pub(crate) fn s(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Sets `ptr` in `v`, creating the objects on the way.
pub(crate) fn set(v: &mut Value, ptr: &str, val: Value) {
    let mut cur = v;
    let keys: Vec<&str> = ptr.split('/').skip(1).collect();
    for k in &keys[..keys.len() - 1] {
        if !cur.get(*k).is_some_and(Value::is_object) {
            cur[*k] = json!({});
        }
        cur = &mut cur[*k];
    }
    cur[keys[keys.len() - 1]] = val;
}

pub(crate) fn expect(what: &str, got: (u16, Value), code: u16) -> Result<Value, String> {
    ensure!(got.0 == code, "{what}: expected {code}, got {} {}", got.0, got.1);
    Ok(got.1)
}

/// One kind under test: the server, its fixture row, its `KindInfo` and its namespace.
pub(crate) struct Ctx<'a> {
    pub(crate) s: &'a InProc,
    pub(crate) f: &'a Fixture,
    pub(crate) info: &'a KindInfo,
    pub(crate) ns: String,
}

impl Ctx<'_> {
    /// The root of the kind's group-version: `/apis/<group>/<version>` or `/api/v1`.
    pub(crate) fn base(&self) -> String {
        if self.info.group.is_empty() {
            format!("/api/{}", self.info.version)
        } else {
            format!("/apis/{}/{}", self.info.group, self.info.version)
        }
    }

    pub(crate) fn api_version(&self) -> String {
        cozyplane_apiserver::registry::api_version(self.info)
    }

    /// `<plural>.<group>`, or the plural alone for the core group, as error messages say it.
    pub(crate) fn qualified(&self) -> String {
        if self.info.group.is_empty() {
            self.info.plural.to_string()
        } else {
            format!("{}.{}", self.info.plural, self.info.group)
        }
    }

    pub(crate) fn coll(&self) -> String {
        let base = self.base();
        if self.info.namespaced {
            format!("{base}/namespaces/{}/{}", self.ns, self.info.plural)
        } else {
            format!("{base}/{}", self.info.plural)
        }
    }

    pub(crate) fn item(&self, name: &str) -> String {
        format!("{}/{name}", self.coll())
    }

    /// The fixture object named `name` (unless server-named), labelled `case=<case>`.
    pub(crate) fn object(&self, name: &str, case: &str) -> Value {
        let mut o = (self.f.object)(&self.ns, &format!("{}-{name}", self.info.singular));
        o["metadata"]["labels"] = json!({ "case": case });
        o
    }

    /// Creates the fixture object; returns it as stored.
    pub(crate) async fn create(&self, name: &str, case: &str) -> Result<Value, String> {
        let o = self.object(name, case);
        expect("create", self.s.post(&self.coll(), &o).await, 201)
    }

    pub(crate) async fn list(&self, query: &str) -> Result<Value, String> {
        expect("list", self.s.get(&format!("{}?{query}", self.coll())).await, 200)
    }

    /// GET `path`, change it with `f`, PUT it back; retried when a controller wrote in
    /// between (409). Returns (status, response, object before).
    pub(crate) async fn rmw(
        &self,
        path: &str,
        f: impl Fn(&mut Value),
    ) -> Result<(u16, Value, Value), String> {
        for _ in 0..10 {
            let before = expect("get", self.s.get(path).await, 200)?;
            let mut o = before.clone();
            f(&mut o);
            let (code, v) = self.s.put(path, &o).await;
            if code == 409 && s(&v, "/reason") == "Conflict" {
                continue;
            }
            return Ok((code, v, before));
        }
        Err(format!("PUT {path}: still 409 Conflict after 10 attempts"))
    }

    /// Polls until GET `name` is 404 (finalizers are removed by controllers).
    pub(crate) async fn gone(&self, name: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (code, v) = self.s.get(&self.item(name)).await;
            if code == 404 {
                return Ok(());
            }
            ensure!(code == 200, "get after delete: {code} {v}");
            ensure!(
                tokio::time::Instant::now() < deadline,
                "still there {WAIT:?} after delete: {v}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn setup(&self) -> Result<(), String> {
        for (plural, body) in (self.f.needs)(&self.ns) {
            let path = format!("{BASE}/namespaces/{}/{plural}", self.ns);
            expect(
                &format!("creating {plural} dependency"),
                self.s.post(&path, &body).await,
                201,
            )?;
        }
        Ok(())
    }
}

/// The event types a watch delivers for `name` up to its `DELETED`; they must be `ADDED`, one or
/// more `MODIFIED`, `DELETED`, with rising resourceVersions.
pub(crate) async fn life(
    w: &mut cozyplane_conformance::inproc::Watch,
    name: &str,
) -> Result<Vec<String>, String> {
    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    while let Some(e) = w.next(WAIT).await {
        let (ty, n) = (s(&e, "/type"), s(&e, "/object/metadata/name"));
        ensure!(n == name, "event of another object: {e}");
        let rv: u64 = s(&e, "/object/metadata/resourceVersion")
            .parse()
            .unwrap_or_default();
        ensure!(rv > last_rv, "resourceVersion {rv} after {last_rv}: {e}");
        last_rv = rv;
        seen.push(ty.clone());
        if ty == "DELETED" {
            break;
        }
    }
    let ok = seen.first().map(String::as_str) == Some("ADDED")
        && seen.last().map(String::as_str) == Some("DELETED")
        && seen.len() >= 3
        && seen[1..seen.len() - 1].iter().all(|t| t == "MODIFIED");
    ensure!(ok, "events {seen:?}, want ADDED, MODIFIED…, DELETED");
    Ok(seen)
}

pub(crate) fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|a| a.iter().map(|o| s(o, "/metadata/name")).collect())
        .unwrap_or_default()
}
