//! The write cases of the REST contract: update, patches, apply, `/status`, dry runs, delete,
//! deletecollection and watch.

use std::time::Duration;

use serde_json::{Value, json};

use super::support::{Ctx, expect, life, names, s, set};
use super::{Spec, WAIT};

const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const STRATEGIC: &str = "application/strategic-merge-patch+json";

impl Ctx<'_> {
    pub(crate) async fn update(&self, name: &str) -> Result<(), String> {
        let (ptr, val) = (self.f.spec_change.0, (self.f.spec_change.1)());
        let path = self.item(name);
        // Metadata only: the generation stays.
        let (code, o, before) = self
            .rmw(&path, |o| o["metadata"]["labels"]["touched"] = "yes".into())
            .await?;
        ensure!(code == 200, "label update: {code} {o}");
        ensure!(
            o["metadata"]["generation"] == before["metadata"]["generation"],
            "label update bumped the generation: {o}"
        );
        ensure!(
            o["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"],
            "label update kept the resourceVersion"
        );
        let (code, o, before) = self.rmw(&path, |o| set(o, ptr, val.clone())).await?;
        if self.f.spec == Spec::Ignored {
            ensure!(code == 200, "spec update: {code} {o}");
            ensure!(o["spec"] == before["spec"], "the server's spec was changed: {o}");
            ensure!(
                o["metadata"]["generation"] == before["metadata"]["generation"],
                "an ignored spec change bumped the generation: {o}"
            );
        } else if self.f.spec == Spec::Mutable {
            ensure!(code == 200, "spec update: {code} {o}");
            ensure!(o.pointer(ptr) == Some(&val), "{ptr} not updated: {o}");
            let gen_of = |v: &Value| v["metadata"]["generation"].as_i64().unwrap_or_default();
            ensure!(
                gen_of(&o) == gen_of(&before) + 1,
                "generation {} after {}",
                o["metadata"]["generation"],
                before["metadata"]["generation"]
            );
        } else {
            ensure!(
                code == 422 && s(&o, "/reason") == "Invalid",
                "immutable spec update: {code} {o}"
            );
        }
        Ok(())
    }

    pub(crate) async fn stale(&self, created: &Value) -> Result<(), String> {
        let mut o = created.clone();
        o["metadata"]["labels"]["stale"] = "yes".into();
        let v = expect(
            "stale update",
            self.s.put(&self.item(&s(created, "/metadata/name")), &o).await,
            409,
        )?;
        ensure!(s(&v, "/reason") == "Conflict", "{v}");
        Ok(())
    }

    pub(crate) async fn merge_patch(&self, name: &str) -> Result<(), String> {
        let p = json!({"metadata": {"labels": {"merge": "yes"}}});
        let o = expect(
            "merge patch",
            self.s.patch(&self.item(name), MERGE, &p).await,
            200,
        )?;
        ensure!(
            s(&o, "/metadata/labels/merge") == "yes" && s(&o, "/metadata/labels/case") == "crud",
            "{o}"
        );
        Ok(())
    }

    pub(crate) async fn json_patch(&self, name: &str) -> Result<(), String> {
        let p = json!([{"op": "add", "path": "/metadata/labels/json", "value": "yes"}]);
        let o = expect(
            "json patch",
            self.s.patch(&self.item(name), JSON_PATCH, &p).await,
            200,
        )?;
        ensure!(s(&o, "/metadata/labels/json") == "yes", "{o}");
        Ok(())
    }

    pub(crate) async fn apply(&self, name: &str) -> Result<(), String> {
        let cur = expect("get", self.s.get(&self.item(name)).await, 200)?;
        let mut meta = json!({"name": name, "labels": {"applied": "yes"}});
        if self.info.namespaced {
            meta["namespace"] = self.ns.clone().into();
        }
        let body = json!({"apiVersion": self.api_version(), "kind": self.info.kind, "metadata": meta, "spec": cur["spec"]});
        let path = format!("{}?fieldManager=inproc-suite", self.item(name));
        let o = expect("apply", self.s.patch(&path, APPLY, &body).await, 200)?;
        ensure!(s(&o, "/metadata/labels/applied") == "yes", "{o}");
        ensure!(o["spec"] == cur["spec"], "apply of the same spec changed it: {o}");
        let managers: Vec<String> = o["metadata"]["managedFields"]
            .as_array()
            .map(|a| a.iter().map(|m| s(m, "/manager")).collect())
            .unwrap_or_default();
        ensure!(
            managers.iter().any(|m| m == "inproc-suite"),
            "managedFields: {managers:?}"
        );
        Ok(())
    }

    /// Server-side apply of an object that does not exist creates it (201), for kinds whose
    /// clients choose the name.
    pub(crate) async fn apply_create(&self) -> Result<(), String> {
        let mut o = self.object("applied", "apply");
        let name = s(&o, "/metadata/name");
        if name.is_empty() {
            return Ok(()); // the server names this kind's objects; apply needs a name
        }
        if self.info.namespaced {
            o["metadata"]["namespace"] = self.ns.clone().into();
        }
        let path = format!("{}?fieldManager=inproc-suite", self.item(&name));
        let v = expect("apply create", self.s.patch(&path, APPLY, &o).await, 201)?;
        ensure!(
            o["spec"]
                .as_object()
                .is_none_or(|spec| spec.iter().all(|(k, x)| v["spec"][k] == *x)),
            "applied spec {} not stored: {v}",
            o["spec"]
        );
        expect("get after apply create", self.s.get(&self.item(&name)).await, 200)?;
        Ok(())
    }

    pub(crate) async fn status_get(&self, name: &str) -> Result<(), String> {
        let o = expect(
            "get status",
            self.s.get(&format!("{}/status", self.item(name))).await,
            200,
        )?;
        ensure!(
            s(&o, "/kind") == self.info.kind && s(&o, "/metadata/name") == name,
            "{o}"
        );
        Ok(())
    }

    pub(crate) async fn main_keeps_status(&self, name: &str) -> Result<(), String> {
        let Some((ptr, val)) = self.f.status else {
            return Err("the kind has status but its fixture no status field".into());
        };
        let (code, o, before) = self
            .rmw(&self.item(name), |o| {
                o["metadata"]["labels"]["main"] = "yes".into();
                set(o, ptr, val());
            })
            .await?;
        ensure!(code == 200, "{code} {o}");
        ensure!(
            o["status"] == before["status"],
            "main update changed status to {}",
            o["status"]
        );
        Ok(())
    }

    pub(crate) async fn status_refuses_bad(&self, name: &str) -> Result<(), String> {
        let Some((ptr, val)) = self.f.bad_status else {
            return Err("the kind has status but its fixture no bad_status field".into());
        };
        let path = format!("{}/status", self.item(name));
        let (code, o, _) = self.rmw(&path, |o| set(o, ptr, val())).await?;
        ensure!(
            code == 422 && s(&o, "/reason") == "Invalid",
            "/status with {ptr}={}: expected 422 Invalid, got {code} {}",
            val(),
            o.pointer(ptr).map_or_else(|| o.to_string(), ToString::to_string)
        );
        Ok(())
    }

    pub(crate) async fn status_keeps_spec(&self, name: &str) -> Result<(), String> {
        let Some((ptr, val)) = self.f.status else {
            return Err("the kind has status but its fixture no status field".into());
        };
        let path = format!("{}/status", self.item(name));
        let (code, o, before) = self
            .rmw(&path, |o| {
                o["spec"] = json!({});
                o["metadata"]["labels"]["status"] = "yes".into();
                set(o, ptr, val());
            })
            .await?;
        ensure!(code == 200, "{code} {o}");
        ensure!(o.pointer(ptr) == Some(&val()), "{ptr} not set by /status: {o}");
        ensure!(
            o["spec"] == before["spec"],
            "/status changed spec to {}",
            o["spec"]
        );
        ensure!(
            o["metadata"]["labels"] == before["metadata"]["labels"],
            "/status changed labels to {}",
            o["metadata"]["labels"]
        );
        ensure!(
            o["metadata"]["generation"] == before["metadata"]["generation"],
            "/status bumped the generation"
        );
        Ok(())
    }

    pub(crate) async fn strategic_patch(&self, name: &str) -> Result<(), String> {
        let p = json!({"metadata": {"labels": {"strategic": "yes"}}});
        let o = expect(
            "strategic merge patch",
            self.s.patch(&self.item(name), STRATEGIC, &p).await,
            200,
        )?;
        ensure!(
            s(&o, "/metadata/labels/strategic") == "yes" && s(&o, "/metadata/labels/case") == "crud",
            "{o}"
        );
        Ok(())
    }

    /// PATCH and DELETE of a name that does not exist: 404 naming it.
    pub(crate) async fn missing_writes(&self) -> Result<(), String> {
        let path = self.item("missing-three");
        let p = json!({"metadata": {"labels": {"x": "y"}}});
        for (what, got) in [
            ("patch", self.s.patch(&path, MERGE, &p).await),
            ("delete", self.s.delete(&path).await),
        ] {
            let v = expect(&format!("{what} of a missing object"), got, 404)?;
            ensure!(
                s(&v, "/reason") == "NotFound" && s(&v, "/details/name") == "missing-three",
                "{what}: {v}"
            );
        }
        Ok(())
    }

    /// `dryRun=All` on update, patch and delete answers as the write would and stores nothing.
    pub(crate) async fn dry_run_writes(&self, name: &str) -> Result<(), String> {
        let path = self.item(name);
        let before = expect("get", self.s.get(&path).await, 200)?;
        let mut o = before.clone();
        o["metadata"]["labels"]["dry"] = "put".into();
        let v = expect(
            "dry-run update",
            self.s.put(&format!("{path}?dryRun=All"), &o).await,
            200,
        )?;
        ensure!(
            s(&v, "/metadata/labels/dry") == "put",
            "dry-run update answered {v}"
        );
        let p = json!({"metadata": {"labels": {"dry": "patch"}}});
        expect(
            "dry-run patch",
            self.s.patch(&format!("{path}?dryRun=All"), MERGE, &p).await,
            200,
        )?;
        expect(
            "dry-run delete",
            self.s.delete(&format!("{path}?dryRun=All")).await,
            200,
        )?;
        let after = expect("get after the dry runs", self.s.get(&path).await, 200)?;
        // A controller may write the status meanwhile; metadata and spec are the dry runs' test.
        ensure!(
            after["metadata"]["labels"] == before["metadata"]["labels"]
                && after["spec"] == before["spec"]
                && after["metadata"].get("deletionTimestamp").is_none(),
            "dry runs changed the object: {after}"
        );
        Ok(())
    }

    /// A delete whose `preconditions.uid` names another object: 409 Conflict, nothing deleted.
    pub(crate) async fn delete_precondition(&self, name: &str) -> Result<(), String> {
        let body = json!({"apiVersion": "v1", "kind": "DeleteOptions",
                          "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
        let v = expect(
            "delete with a wrong uid precondition",
            self.s
                .request("DELETE", &self.item(name), "application/json", Some(&body))
                .await,
            409,
        )?;
        ensure!(s(&v, "/reason") == "Conflict", "{v}");
        expect(
            "get after a refused delete",
            self.s.get(&self.item(name)).await,
            200,
        )?;
        Ok(())
    }

    pub(crate) async fn delete(&self, name: &str) -> Result<(), String> {
        expect("delete", self.s.delete(&self.item(name)).await, 200)?;
        self.gone(name).await?;
        let v = expect("get after delete", self.s.get(&self.item(name)).await, 404)?;
        ensure!(s(&v, "/reason") == "NotFound", "{v}");
        Ok(())
    }

    /// A watch from the resourceVersion before a create sees the object's life in order, live
    /// and again when it is replayed from the watch cache's history afterwards.
    pub(crate) async fn watch(&self) -> Result<(), String> {
        let rv = s(
            &self.list("labelSelector=case%3Dwatch").await?,
            "/metadata/resourceVersion",
        );
        let path = format!(
            "{}?watch=true&resourceVersion={rv}&labelSelector=case%3Dwatch",
            self.coll()
        );
        let mut live = self.s.watch(&path).await;
        let name = s(&self.create("w", "watch").await?, "/metadata/name");
        let p = json!({"metadata": {"labels": {"step": "two"}}});
        expect("patch", self.s.patch(&self.item(&name), MERGE, &p).await, 200)?;
        expect("delete", self.s.delete(&self.item(&name)).await, 200)?;
        let seen = life(&mut live, &name).await?;
        let mut replay = self.s.watch(&path).await;
        let again = life(&mut replay, &name).await?;
        ensure!(again == seen, "replayed {again:?}, live {seen:?}");
        Ok(())
    }

    pub(crate) async fn dry_run(&self) -> Result<(), String> {
        let o = self.object("dry", "dry");
        let v = expect(
            "dry-run create",
            self.s.post(&format!("{}?dryRun=All", self.coll()), &o).await,
            201,
        )?;
        let name = s(&v, "/metadata/name");
        ensure!(!name.is_empty(), "dry-run create named nothing: {v}");
        expect("get after dry run", self.s.get(&self.item(&name)).await, 404)?;
        let l = self.list("labelSelector=case%3Ddry").await?;
        ensure!(names(&l).is_empty(), "dry run stored {:?}", names(&l));
        Ok(())
    }

    pub(crate) async fn delete_collection(&self) -> Result<(), String> {
        for n in ["c1", "c2"] {
            self.create(n, "dc").await?;
        }
        let keep = s(&self.create("c3", "keep").await?, "/metadata/name");
        expect(
            "deletecollection",
            self.s
                .delete(&format!("{}?labelSelector=case%3Ddc", self.coll()))
                .await,
            200,
        )?;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = names(&self.list("labelSelector=case%3Ddc").await?);
            if left.is_empty() {
                break;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "still there {WAIT:?} after deletecollection: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        expect(
            "get of an object the selector spared",
            self.s.get(&self.item(&keep)).await,
            200,
        )?;
        Ok(())
    }
}
