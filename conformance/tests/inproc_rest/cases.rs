//! The REST contract, case by case, for the kind of a [`Ctx`]: [`Ctx::run`] runs them all; the
//! read and create cases are here, the write cases in `writes.rs`.

use serde_json::{Value, json};

use super::support::{Ctx, Report, expect, names, s};

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
}
