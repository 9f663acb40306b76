//! An unstructured store: arbitrary JSON objects with Kubernetes metadata semantics, served by
//! the API server's own [`Resource`] machinery (watch cache, REST handlers, Table output).
//!
//! It knows nothing of a kind's schema: it owns `metadata` (uid, resourceVersion, generateName,
//! generation, finalizers, deletionTimestamp), the spec/status split of kinds with a `/status`
//! subresource, and a few kind quirks named by [`Flavor`].

use std::sync::Arc;

use async_trait::async_trait;
use cozyplane_apis::KindInfo;
use cozyplane_apiserver::errors::{ApiError, ConflictKind, Reason, Result, StatusDetails};
use cozyplane_apiserver::registry::Resource;
use cozyplane_apiserver::registry::store::{DeleteOptions, Deleted, ListPage, ListParams, WriteOptions};
use cozyplane_apiserver::registry::strategy::Column;
use cozyplane_storage::{ObjectKey, Revision, Storage, WatchOptions, WatchStream};
use serde_json::{Value, json};

/// The storage root of the stand-in's keys.
pub const KEY_PREFIX: &str = "standin";

/// Kind-specific behaviour of the generic flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Nothing special.
    Plain,
    /// `status.phase` Active on create; delete marks Terminating, the namespace controller
    /// empties and removes it.
    Namespace,
    /// `status.phase` Pending on create.
    Pod,
}

/// One kind of the stand-in's table.
#[derive(Clone, Copy, Debug)]
pub struct KindDef {
    /// Names and scope.
    pub info: KindInfo,
    /// Field selectors beyond name/namespace: (field, JSON pointer).
    pub fields: &'static [(&'static str, &'static str)],
    /// Quirks.
    pub flavor: Flavor,
}

impl KindDef {
    /// `v1` or `<group>/<version>`.
    pub fn api_version(&self) -> String {
        if self.info.group.is_empty() {
            self.info.version.to_string()
        } else {
            format!("{}/{}", self.info.group, self.info.version)
        }
    }
}

/// The store of one unstructured kind.
pub struct UnstructuredStore {
    def: KindDef,
    storage: Arc<dyn Storage>,
    /// Services only: the IP families served (empty: any).
    families: Vec<String>,
}

fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    rfc3339(secs)
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generate_name(prefix: &str) -> String {
    let mut s: String = prefix.chars().take(58).collect();
    let u = uuid::Uuid::new_v4();
    for b in u.as_bytes().iter().take(5) {
        s.push(NAME_ALPHABET[usize::from(*b) % NAME_ALPHABET.len()] as char);
    }
    s
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && n.as_bytes()[0].is_ascii_alphanumeric()
        && n.as_bytes()[n.len() - 1].is_ascii_alphanumeric()
}

fn meta(v: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    v["metadata"].as_object_mut().expect("metadata is an object")
}

fn str_at<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

/// Everything but `metadata` and `status`, to tell a spec change (generation bump).
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

impl UnstructuredStore {
    /// A store for `def` on `storage`.
    pub fn new(def: KindDef, storage: Arc<dyn Storage>) -> Self {
        Self {
            def,
            storage,
            families: Vec::new(),
        }
    }

    /// Refuses creates asking for another `spec.ipFamilies` entry than `families` (Services).
    pub fn serve_families(&mut self, families: &[String]) {
        self.families = families.to_vec();
    }

    fn check_families(&self, name: &str, obj: &Value) -> Result<()> {
        if self.families.is_empty() {
            return Ok(());
        }
        let asked = obj
            .pointer("/spec/ipFamilies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate();
        for (i, f) in asked {
            let f = f.as_str().unwrap_or_default();
            if !self.families.iter().any(|k| k == f) {
                return Err(self.invalid(
                    name,
                    &format!("spec.ipFamilies[{i}]: Invalid value: {f:?}: not configured on this cluster"),
                ));
            }
        }
        Ok(())
    }

    /// The kind.
    pub fn def(&self) -> &KindDef {
        &self.def
    }

    fn key(&self, ns: Option<&str>, name: &str) -> String {
        self.object_key(ns).object(name)
    }

    fn object_key<'a>(&'a self, ns: Option<&'a str>) -> ObjectKey<'a> {
        ObjectKey {
            prefix: KEY_PREFIX,
            group: if self.def.info.group.is_empty() {
                "core"
            } else {
                self.def.info.group
            },
            resource: self.def.info.plural,
            namespace: if self.def.info.namespaced { ns } else { None },
        }
    }

    fn err(&self, name: &str, e: cozyplane_storage::Error) -> ApiError {
        ApiError::from_storage(&self.def.info, name, e)
    }

    fn invalid(&self, name: &str, msg: &str) -> ApiError {
        ApiError::new(
            422,
            Reason::Invalid,
            format!("{} \"{name}\" is invalid: {msg}", self.def.info.kind),
        )
        .with_details(StatusDetails {
            name: Some(name.to_string()),
            group: Some(self.def.info.group.to_string()),
            kind: Some(self.def.info.kind.to_string()),
            ..StatusDetails::default()
        })
    }

    fn check_type(&self, body: &Value) -> Result<()> {
        let av = self.def.api_version();
        if let Some(got) = str_at(body, "/apiVersion")
            && got != av
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({got}) does not match the expected API version ({av})"
            )));
        }
        if let Some(k) = str_at(body, "/kind")
            && k != self.def.info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                self.def.info.kind
            )));
        }
        if !body.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        Ok(())
    }

    fn fix_namespace(&self, obj: &mut Value, ns: Option<&str>) -> Result<()> {
        let namespaced = self.def.info.namespaced;
        let m = meta(obj);
        if namespaced {
            let url = ns.unwrap_or_default();
            match m.get("namespace").and_then(Value::as_str) {
                None | Some("") => {
                    m.insert("namespace".into(), json!(url));
                }
                Some(b) if b != url => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
        } else {
            m.remove("namespace");
        }
        Ok(())
    }

    fn stored_bytes(obj: &Value) -> Result<bytes::Bytes> {
        let mut v = obj.clone();
        meta(&mut v).remove("resourceVersion");
        Ok(serde_json::to_vec(&v).map_err(ApiError::internal)?.into())
    }

    fn with_rv(obj: &Value, rev: Revision) -> Value {
        let mut v = obj.clone();
        meta(&mut v).insert("resourceVersion".into(), json!(rev.to_string()));
        v
    }

    async fn read(&self, ns: Option<&str>, name: &str) -> Result<(Value, Revision)> {
        let kv = self
            .storage
            .get(&self.key(ns, name))
            .await
            .map_err(|e| self.err(name, e))?;
        Ok((self.decode(&kv.value, kv.mod_revision)?, kv.mod_revision))
    }

    /// Removes an object from storage unconditionally (the namespace controller's last step).
    pub async fn remove(&self, ns: Option<&str>, name: &str) -> Result<()> {
        self.storage
            .delete(&self.key(ns, name), None)
            .await
            .map(|_| ())
            .map_err(|e| self.err(name, e))
    }

    async fn update_from(
        &self,
        ns: Option<&str>,
        name: &str,
        mut new: Value,
        (old, rev): (Value, Revision),
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value> {
        self.check_type(&new)?;
        self.fix_namespace(&mut new, ns)?;
        match str_at(&new, "/metadata/name") {
            Some(n) if n == name => {}
            None | Some("") => {
                meta(&mut new).insert("name".into(), json!(name));
            }
            Some(n) => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        match str_at(&new, "/metadata/resourceVersion") {
            None | Some("") => {
                return Err(self.invalid(
                    name,
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                ));
            }
            Some(v) if v != rev.to_string() => return Err(ApiError::modified(&self.def.info, name)),
            _ => {}
        }
        if let Some(uid) = str_at(&new, "/metadata/uid")
            && !uid.is_empty()
            && Some(uid) != str_at(&old, "/metadata/uid")
        {
            return Err(ApiError::conflict(
                &self.def.info,
                name,
                ConflictKind::Precondition,
                "Precondition failed: UID in precondition does not match the UID of the object",
            ));
        }
        let has_status = self.def.info.has_status;
        let mut next = if status {
            // Only status changes through /status.
            let mut n = old.clone();
            match new.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            n
        } else {
            let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
            {
                let m = meta(&mut new);
                for k in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    match old_meta.get(k) {
                        Some(v) => m.insert(k.into(), v.clone()),
                        None => m.remove(k),
                    };
                }
                m.remove("managedFields");
            }
            if has_status {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            if self.def.flavor == Flavor::Namespace {
                // spec.finalizers change only through /finalize.
                match old.get("spec") {
                    Some(s) => new["spec"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("spec");
                        }
                    }
                }
            }
            if spec_part(&new) != spec_part(&old) {
                let g = old
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                meta(&mut new).insert("generation".into(), json!(g + 1));
            }
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                let old_f = old.pointer("/metadata/finalizers").cloned().unwrap_or(json!([]));
                let new_f = new.pointer("/metadata/finalizers").cloned().unwrap_or(json!([]));
                let added = new_f
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|f| !old_f.as_array().is_some_and(|a| a.contains(f)));
                if added {
                    return Err(self.invalid(
                        name,
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                    ));
                }
            }
            new
        };
        meta(&mut next).insert("resourceVersion".into(), json!(rev.to_string()));
        if next == old {
            return Ok(old);
        }
        if o.dry_run {
            return Ok(next);
        }
        let finished = self.def.flavor != Flavor::Namespace
            && next.pointer("/metadata/deletionTimestamp").is_some()
            && next
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        let key = self.key(ns, name);
        if finished {
            let d = self
                .storage
                .delete(&key, Some(rev))
                .await
                .map_err(|e| self.err(name, e))?;
            return Ok(Self::with_rv(&next, d.revision));
        }
        let kv = self
            .storage
            .update(&key, Self::stored_bytes(&next)?, rev)
            .await
            .map_err(|e| self.err(name, e))?;
        Ok(Self::with_rv(&next, kv.mod_revision))
    }
}

#[async_trait]
impl Resource for UnstructuredStore {
    fn info(&self) -> &KindInfo {
        &self.def.info
    }

    fn columns(&self) -> &'static [Column] {
        &[]
    }

    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        self.def.fields
    }

    fn schema(&self, _: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
    }

    fn prefix(&self, ns: Option<&str>) -> String {
        self.object_key(ns).list_prefix()
    }

    fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    async fn get(&self, ns: Option<&str>, name: &str) -> Result<Value> {
        Ok(self.read(ns, name).await?.0)
    }

    async fn list(&self, ns: Option<&str>, p: &ListParams) -> Result<ListPage> {
        cozyplane_apiserver::registry::store::list_from_storage(self, ns, p).await
    }

    async fn create(&self, ns: Option<&str>, mut obj: Value, o: &WriteOptions) -> Result<Value> {
        self.check_type(&obj)?;
        self.fix_namespace(&mut obj, ns)?;
        obj["apiVersion"] = json!(self.def.api_version());
        obj["kind"] = json!(self.def.info.kind);
        let generated = {
            let m = meta(&mut obj);
            let empty = m
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .is_empty();
            let prefix = m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
                .map(str::to_string);
            match (empty, prefix) {
                (true, Some(p)) => {
                    m.insert("name".into(), json!(generate_name(&p)));
                    Some(p)
                }
                _ => None,
            }
        };
        {
            let m = meta(&mut obj);
            m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            m.insert("creationTimestamp".into(), json!(now()));
            m.insert("generation".into(), json!(1));
            for k in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
            ] {
                m.remove(k);
            }
        }
        match self.def.flavor {
            Flavor::Namespace => {
                obj["status"] = json!({ "phase": "Active" });
                if obj.pointer("/spec/finalizers").is_none() {
                    obj["spec"] = json!({ "finalizers": ["kubernetes"] });
                }
                let name = str_at(&obj, "/metadata/name").unwrap_or_default().to_string();
                let labels = meta(&mut obj).entry("labels").or_insert_with(|| json!({}));
                labels["kubernetes.io/metadata.name"] = json!(name);
            }
            Flavor::Pod => obj["status"] = json!({ "phase": "Pending" }),
            Flavor::Plain if self.def.info.has_status => {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
            Flavor::Plain => {}
        }
        let name = str_at(&obj, "/metadata/name").unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(self.invalid(
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        let rbac = self.def.info.group == "rbac.authorization.k8s.io";
        let ok = if rbac {
            // RBAC names are path segments (they hold ':'), not DNS subdomains.
            !matches!(name.as_str(), "." | "..") && !name.contains('/') && !name.contains('%')
        } else {
            valid_name(&name)
        };
        if !ok {
            return Err(self.invalid(
                &name,
                &format!(
                    "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        self.check_families(&name, &obj)?;
        if o.dry_run {
            return Ok(obj);
        }
        let mut key = self.key(ns, &name);
        let mut attempt = 0;
        loop {
            match self.storage.create(&key, Self::stored_bytes(&obj)?).await {
                Ok(kv) => return Ok(Self::with_rv(&obj, kv.mod_revision)),
                Err(cozyplane_storage::Error::AlreadyExists { .. }) if generated.is_some() && attempt < 7 => {
                    attempt += 1;
                    let n = generate_name(generated.as_deref().unwrap_or_default());
                    meta(&mut obj).insert("name".into(), json!(n));
                    key = self.key(ns, &n);
                }
                Err(e) => return Err(self.err(&name, e)),
            }
        }
    }

    async fn update(
        &self,
        ns: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value> {
        let old = self.read(ns, name).await?;
        self.update_from(ns, name, body, old, status, o).await
    }

    async fn patch(
        &self,
        ns: Option<&str>,
        name: &str,
        apply: &(dyn Fn(Value) -> Result<Value> + Send + Sync),
        status: bool,
        o: &WriteOptions,
    ) -> Result<Value> {
        let mut tries = 0;
        loop {
            let (old, rev) = self.read(ns, name).await?;
            let new = apply(old.clone())?;
            match self.update_from(ns, name, new, (old, rev), status, o).await {
                Err(e) if e.is_stale() && tries < 5 => tries += 1,
                other => return other,
            }
        }
    }

    async fn delete(&self, ns: Option<&str>, name: &str, o: &DeleteOptions) -> Result<Deleted> {
        let (mut obj, rev) = self.read(ns, name).await?;
        let uid = str_at(&obj, "/metadata/uid").unwrap_or_default().to_string();
        if let Some(want) = &o.uid
            && *want != uid
        {
            return Err(ApiError::conflict(
                &self.def.info,
                name,
                ConflictKind::Precondition,
                &format!("the UID in the precondition ({want}) does not match the UID in record ({uid})"),
            ));
        }
        if let Some(want) = &o.resource_version
            && *want != rev.to_string()
        {
            return Err(ApiError::conflict(
                &self.def.info,
                name,
                ConflictKind::Precondition,
                &format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rev})"
                ),
            ));
        }
        let namespace = self.def.flavor == Flavor::Namespace;
        let mut finalizers: Vec<Value> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let gc = match o.propagation.as_deref() {
            Some("Orphan") => Some("orphan"),
            Some("Foreground") => Some("foregroundDeletion"),
            _ => None,
        };
        if let Some(f) = gc
            && !finalizers.iter().any(|x| x == f)
        {
            finalizers.push(json!(f));
        }
        if finalizers.is_empty() && !namespace {
            if o.dry_run {
                return Ok(Deleted::Gone(obj));
            }
            let d = self
                .storage
                .delete(&self.key(ns, name), Some(rev))
                .await
                .map_err(|e| self.err(name, e))?;
            return Ok(Deleted::Gone(Self::with_rv(&obj, d.revision)));
        }
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(Deleted::Marked(obj));
        }
        {
            let m = meta(&mut obj);
            if !finalizers.is_empty() {
                m.insert("finalizers".into(), json!(finalizers));
            }
            m.insert("deletionTimestamp".into(), json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        if namespace {
            obj["status"]["phase"] = json!("Terminating");
        }
        if o.dry_run {
            return Ok(Deleted::Marked(obj));
        }
        let kv = self
            .storage
            .update(&self.key(ns, name), Self::stored_bytes(&obj)?, rev)
            .await
            .map_err(|e| self.err(name, e))?;
        Ok(Deleted::Marked(Self::with_rv(&obj, kv.mod_revision)))
    }

    fn decode(&self, value: &[u8], rev: Revision) -> Result<Value> {
        let mut v: Value = serde_json::from_slice(value).map_err(ApiError::internal)?;
        meta(&mut v).insert("resourceVersion".into(), json!(rev.to_string()));
        Ok(v)
    }

    async fn watch(&self, ns: Option<&str>, after: Option<Revision>) -> Result<WatchStream> {
        let opts = WatchOptions {
            revision: after,
            prefix: true,
            progress_interval: Some(std::time::Duration::from_millis(200)),
        };
        self.storage
            .watch(&self.prefix(ns), opts)
            .await
            .map_err(|e| self.err("", e))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
