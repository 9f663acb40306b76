//! The REST contract, case by case, for the kind of a [`Ctx`]; [`Ctx::run`] runs them all.

use std::time::Duration;

use serde_json::{Value, json};

use super::support::{Ctx, Report, expect, life, names, s, set};
use super::{Spec, WAIT};

const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const STRATEGIC: &str = "application/strategic-merge-patch+json";

impl Ctx<'_> {
    /// Runs every case, recording failures in `r`.
    pub(crate) async fn run(&self, r: &mut Report) {
        if r.case("setup", self.setup().await).is_none() {
            return;
        }
        let Some(created) = r.case("create", self.create_checked().await) else {
            return;
        };
        let name = s(&created, "/metadata/name");
        r.case("get", self.get_same(&name, &created).await);
        r.case("get missing", self.get_missing().await);
        r.case("list", self.list_has(&name).await);
        r.case("list label selector", self.label_selector(&name).await);
        r.case("scope", self.scope(&name).await);
        r.case("create existing", self.create_existing(&created).await);
        r.case("update missing", self.update_missing(&created).await);
        r.case("field selector", self.field_selector(&name).await);
        r.case("table", self.table().await);
        r.case("paging", self.paging().await);
        r.case("generateName", self.generate_name().await);
        r.case("strict unknown field", self.strict_unknown_field().await);
        if self.info.namespaced {
            r.case("namespace mismatch", self.namespace_mismatch().await);
        }
        r.case("update", self.update(&name).await);
        r.case("update stale resourceVersion", self.stale(&created).await);
        r.case("merge patch", self.merge_patch(&name).await);
        r.case("json patch", self.json_patch(&name).await);
        r.case("strategic merge patch", self.strategic_patch(&name).await);
        r.case("writes to a missing name", self.missing_writes().await);
        r.case("dry-run update and delete", self.dry_run_writes(&name).await);
        r.case("delete precondition", self.delete_precondition(&name).await);
        r.case("apply", self.apply(&name).await);
        r.case("apply create", self.apply_create().await);
        if self.info.has_status {
            r.case("status get", self.status_get(&name).await);
            r.case("main update keeps status", self.main_keeps_status(&name).await);
            r.case("status update keeps spec", self.status_keeps_spec(&name).await);
            r.case(
                "status refuses an invalid value",
                self.status_refuses_bad(&name).await,
            );
        }
        r.case("delete", self.delete(&name).await);
        r.case("watch", self.watch().await);
        r.case("dry run", self.dry_run().await);
        r.case("deletecollection", self.delete_collection().await);
    }

    async fn create_checked(&self) -> Result<Value, String> {
        let o = self.create("a", "crud").await?;
        ensure!(s(&o, "/kind") == self.info.kind, "kind: {o}");
        ensure!(s(&o, "/apiVersion") == self.api_version(), "apiVersion: {o}");
        ensure!(!s(&o, "/metadata/name").is_empty(), "no name: {o}");
        ensure!(!s(&o, "/metadata/uid").is_empty(), "no uid: {o}");
        ensure!(
            !s(&o, "/metadata/creationTimestamp").is_empty(),
            "no creationTimestamp: {o}"
        );
        ensure!(
            !s(&o, "/metadata/resourceVersion").is_empty(),
            "no resourceVersion: {o}"
        );
        ensure!(
            o.pointer("/metadata/generation") == Some(&json!(1)),
            "generation is not 1: {o}"
        );
        let want_ns = if self.info.namespaced {
            self.ns.as_str()
        } else {
            ""
        };
        ensure!(s(&o, "/metadata/namespace") == want_ns, "namespace: {o}");
        Ok(o)
    }

    async fn get_same(&self, name: &str, created: &Value) -> Result<(), String> {
        let o = expect("get", self.s.get(&self.item(name)).await, 200)?;
        // A controller may have written the status since; then only identity and spec agree.
        if o.pointer("/metadata/resourceVersion") == created.pointer("/metadata/resourceVersion") {
            ensure!(o == *created, "get differs from create:\n{o}\n{created}");
        } else {
            ensure!(o["metadata"]["uid"] == created["metadata"]["uid"], "uid: {o}");
            ensure!(o["spec"] == created["spec"], "spec: {o}");
        }
        Ok(())
    }

    async fn get_missing(&self) -> Result<(), String> {
        let v = expect("get missing", self.s.get(&self.item("missing-one")).await, 404)?;
        ensure!(
            s(&v, "/kind") == "Status" && s(&v, "/reason") == "NotFound",
            "{v}"
        );
        ensure!(s(&v, "/details/kind") == self.info.plural, "details.kind: {v}");
        ensure!(s(&v, "/details/name") == "missing-one", "details.name: {v}");
        ensure!(s(&v, "/details/group") == self.info.group, "details.group: {v}");
        let msg = format!("{} \"missing-one\" not found", self.qualified());
        ensure!(s(&v, "/message") == msg, "message: {v}");
        Ok(())
    }

    async fn list_has(&self, name: &str) -> Result<(), String> {
        let l = self.list("").await?;
        ensure!(s(&l, "/kind") == self.info.list_kind, "kind: {}", l["kind"]);
        ensure!(
            s(&l, "/apiVersion") == self.api_version(),
            "apiVersion: {}",
            l["apiVersion"]
        );
        ensure!(
            !s(&l, "/metadata/resourceVersion").is_empty(),
            "no resourceVersion: {}",
            l["metadata"]
        );
        ensure!(
            names(&l).contains(&name.to_string()),
            "{name} not listed: {:?}",
            names(&l)
        );
        Ok(())
    }

    async fn label_selector(&self, name: &str) -> Result<(), String> {
        let other = s(&self.create("b", "other").await?, "/metadata/name");
        let l = self.list("labelSelector=case%3Dcrud").await?;
        ensure!(names(&l) == [name], "case=crud lists {:?}", names(&l));
        let l = self.list("labelSelector=case%21%3Dcrud").await?;
        ensure!(
            names(&l).contains(&other) && !names(&l).contains(&name.to_string()),
            "case!=crud lists {:?}",
            names(&l)
        );
        Ok(())
    }

    async fn scope(&self, name: &str) -> Result<(), String> {
        let (plural, base) = (self.info.plural, self.base());
        if self.info.namespaced {
            let l = expect(
                "list across namespaces",
                self.s.get(&format!("{base}/{plural}")).await,
                200,
            )?;
            ensure!(
                names(&l).contains(&name.to_string()),
                "not listed across namespaces"
            );
            expect(
                "get without namespace",
                self.s.get(&format!("{base}/{plural}/{name}")).await,
                404,
            )?;
        } else {
            let under = format!("{base}/namespaces/{}/{plural}", self.ns);
            expect("list under a namespace", self.s.get(&under).await, 404)?;
            expect(
                "get under a namespace",
                self.s.get(&format!("{under}/{name}")).await,
                404,
            )?;
            let o = self.object("ns", "scope");
            expect("create under a namespace", self.s.post(&under, &o).await, 404)?;
        }
        Ok(())
    }

    async fn create_existing(&self, created: &Value) -> Result<(), String> {
        let mut o = created.clone();
        let m = o["metadata"].as_object_mut().ok_or("no metadata")?;
        m.retain(|k, _| k == "name" || k == "namespace" || k == "labels");
        let v = expect("second create", self.s.post(&self.coll(), &o).await, 409)?;
        ensure!(s(&v, "/reason") == "AlreadyExists", "{v}");
        Ok(())
    }

    /// A PUT of a name that does not exist: these kinds are not created by update (404).
    async fn update_missing(&self, created: &Value) -> Result<(), String> {
        let mut o = created.clone();
        let m = o["metadata"].as_object_mut().ok_or("no metadata")?;
        m.retain(|k, _| k == "namespace" || k == "labels");
        m.insert("name".into(), "missing-two".into());
        let v = expect(
            "update of a missing object",
            self.s.put(&self.item("missing-two"), &o).await,
            404,
        )?;
        ensure!(s(&v, "/reason") == "NotFound", "{v}");
        Ok(())
    }

    async fn field_selector(&self, name: &str) -> Result<(), String> {
        let l = self
            .list(&format!("fieldSelector=metadata.name%3D{name}"))
            .await?;
        ensure!(names(&l) == [name], "metadata.name={name} lists {:?}", names(&l));
        let l = self
            .list(&format!("fieldSelector=metadata.name%21%3D{name}"))
            .await?;
        ensure!(
            !names(&l).contains(&name.to_string()),
            "metadata.name!={name} lists it"
        );
        Ok(())
    }

    /// `kubectl get`'s Table: a row per object, `Name` first.
    async fn table(&self) -> Result<(), String> {
        let req = http::Request::builder()
            .uri(self.coll())
            .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(axum::body::Body::empty())
            .map_err(|e| e.to_string())?;
        let r = self.s.send(req).await;
        ensure!(r.status() == 200, "table: {}", r.status());
        let bytes = http_body_util::BodyExt::collect(r.into_body())
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let t: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        ensure!(s(&t, "/kind") == "Table", "{t}");
        ensure!(
            s(&t, "/columnDefinitions/0/name") == "Name",
            "columns: {}",
            t["columnDefinitions"]
        );
        let rows = t["rows"].as_array().map_or(0, Vec::len);
        let items = names(&self.list("").await?).len();
        ensure!(rows == items, "{rows} rows for {items} objects");
        let width = t["columnDefinitions"].as_array().map_or(0, Vec::len);
        ensure!(
            t["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|r| r["cells"].as_array().map_or(0, Vec::len) == width),
            "a row's cells do not match the {width} columns: {t}"
        );
        Ok(())
    }

    /// `limit` pages the list with `continue` tokens; the pages together are the whole list.
    async fn paging(&self) -> Result<(), String> {
        let all = names(&self.list("").await?);
        ensure!(all.len() >= 2, "paging needs two objects, there are {all:?}");
        let mut got = Vec::new();
        let mut query = "limit=1".to_string();
        for _ in 0..=all.len() {
            let l = self.list(&query).await?;
            let page = names(&l);
            ensure!(page.len() <= 1, "limit=1 gave {page:?}");
            got.extend(page);
            let cont = s(&l, "/metadata/continue");
            if cont.is_empty() {
                break;
            }
            query = format!(
                "limit=1&continue={}",
                form_urlencoded::byte_serialize(cont.as_bytes()).collect::<String>()
            );
        }
        ensure!(got == all, "pages {got:?}, list {all:?}");
        Ok(())
    }

    /// `metadata.generateName` for kinds whose clients name objects.
    async fn generate_name(&self) -> Result<(), String> {
        let mut o = self.object("gen", "gen");
        let Some(m) = o["metadata"].as_object_mut() else {
            return Err("no metadata".into());
        };
        if m.remove("name").is_none() {
            return Ok(()); // the server names this kind's objects
        }
        let prefix = format!("{}-", self.info.singular);
        m.insert("generateName".into(), prefix.clone().into());
        let v = expect(
            "create with generateName",
            self.s.post(&self.coll(), &o).await,
            201,
        )?;
        let name = s(&v, "/metadata/name");
        ensure!(
            name.starts_with(&prefix) && name.len() == prefix.len() + 5,
            "generated name {name:?}"
        );
        Ok(())
    }

    async fn strict_unknown_field(&self) -> Result<(), String> {
        let mut o = self.object("strict", "strict");
        o["spec"]["notAField"] = json!(1);
        let v = expect(
            "create with an unknown field, fieldValidation=Strict",
            self.s
                .post(&format!("{}?fieldValidation=Strict", self.coll()), &o)
                .await,
            400,
        )?;
        ensure!(
            v.to_string().contains("notAField"),
            "the error does not name the field: {v}"
        );
        Ok(())
    }

    /// A body naming another namespace than the URL: 400.
    async fn namespace_mismatch(&self) -> Result<(), String> {
        let mut o = self.object("elsewhere", "mismatch");
        o["metadata"]["namespace"] = "some-other".into();
        expect(
            "create with another namespace",
            self.s.post(&self.coll(), &o).await,
            400,
        )?;
        Ok(())
    }

    async fn update(&self, name: &str) -> Result<(), String> {
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

    async fn stale(&self, created: &Value) -> Result<(), String> {
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

    async fn merge_patch(&self, name: &str) -> Result<(), String> {
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

    async fn json_patch(&self, name: &str) -> Result<(), String> {
        let p = json!([{"op": "add", "path": "/metadata/labels/json", "value": "yes"}]);
        let o = expect(
            "json patch",
            self.s.patch(&self.item(name), JSON_PATCH, &p).await,
            200,
        )?;
        ensure!(s(&o, "/metadata/labels/json") == "yes", "{o}");
        Ok(())
    }

    async fn apply(&self, name: &str) -> Result<(), String> {
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
    async fn apply_create(&self) -> Result<(), String> {
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

    async fn status_get(&self, name: &str) -> Result<(), String> {
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

    async fn main_keeps_status(&self, name: &str) -> Result<(), String> {
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

    async fn status_refuses_bad(&self, name: &str) -> Result<(), String> {
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

    async fn status_keeps_spec(&self, name: &str) -> Result<(), String> {
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

    async fn strategic_patch(&self, name: &str) -> Result<(), String> {
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
    async fn missing_writes(&self) -> Result<(), String> {
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
    async fn dry_run_writes(&self, name: &str) -> Result<(), String> {
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
    async fn delete_precondition(&self, name: &str) -> Result<(), String> {
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

    async fn delete(&self, name: &str) -> Result<(), String> {
        expect("delete", self.s.delete(&self.item(name)).await, 200)?;
        self.gone(name).await?;
        let v = expect("get after delete", self.s.get(&self.item(name)).await, 404)?;
        ensure!(s(&v, "/reason") == "NotFound", "{v}");
        Ok(())
    }

    /// A watch from the resourceVersion before a create sees the object's life in order, live
    /// and again when it is replayed from the watch cache's history afterwards.
    async fn watch(&self) -> Result<(), String> {
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

    async fn dry_run(&self) -> Result<(), String> {
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

    async fn delete_collection(&self) -> Result<(), String> {
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
