//! What generic code (the API server's registry, the agent's watchers) needs to know about a kind,
//! and the wire form shared by all kinds.
//!
//! Each kind writes its `Spec`/`Status` types and its object struct by hand, then invokes
//! `impl_kind!` once; the macro supplies the trait impls below so they cannot drift between kinds.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

/// Static facts about a kind: its names, scope and subresources.
///
/// This is the per-kind row the API server builds discovery, routes and RBAC from. All values are
/// constants so a `match` on them is free and they can be used in `const` tables.
pub trait ApiKind {
    /// The kind, e.g. `VPC`.
    const KIND: &'static str;
    /// The kind of a list of these objects, e.g. `VPCList`.
    const LIST_KIND: &'static str;
    /// The API version (`version` only, e.g. `v1alpha1`).
    const VERSION: &'static str;
    /// `group/version`, the value of `apiVersion` on the wire.
    const API_VERSION: &'static str;
    /// The resource name used in URLs and RBAC rules, e.g. `vpcs`.
    const PLURAL: &'static str;
    /// The singular resource name `kubectl` accepts, e.g. `vpc`.
    const SINGULAR: &'static str;
    /// Abbreviations `kubectl` accepts; never equal to [`PLURAL`](Self::PLURAL) or
    /// [`SINGULAR`](Self::SINGULAR), which kubectl already matches.
    const SHORT_NAMES: &'static [&'static str];
    /// Groupings for `kubectl get <category>`.
    const CATEGORIES: &'static [&'static str];
    /// `true` if objects live in a namespace.
    const NAMESPACED: bool;
    /// `true` if the kind has a `status` field and a `/status` subresource.
    const HAS_STATUS: bool;

    /// All of the above as one value, for tables built at run time.
    const INFO: KindInfo = KindInfo {
        group: crate::GROUP,
        version: Self::VERSION,
        kind: Self::KIND,
        list_kind: Self::LIST_KIND,
        plural: Self::PLURAL,
        singular: Self::SINGULAR,
        short_names: Self::SHORT_NAMES,
        categories: Self::CATEGORIES,
        namespaced: Self::NAMESPACED,
        has_status: Self::HAS_STATUS,
    };
}

/// The constants of one [`ApiKind`] as a value; see [`v1alpha1::KINDS`](crate::v1alpha1::KINDS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KindInfo {
    /// See [`crate::GROUP`].
    pub group: &'static str,
    /// See [`ApiKind::VERSION`].
    pub version: &'static str,
    /// See [`ApiKind::KIND`].
    pub kind: &'static str,
    /// See [`ApiKind::LIST_KIND`].
    pub list_kind: &'static str,
    /// See [`ApiKind::PLURAL`].
    pub plural: &'static str,
    /// See [`ApiKind::SINGULAR`].
    pub singular: &'static str,
    /// See [`ApiKind::SHORT_NAMES`].
    pub short_names: &'static [&'static str],
    /// See [`ApiKind::CATEGORIES`].
    pub categories: &'static [&'static str],
    /// See [`ApiKind::NAMESPACED`].
    pub namespaced: bool,
    /// See [`ApiKind::HAS_STATUS`].
    pub has_status: bool,
}

/// The spec/status split the registry strategies are written against.
///
/// The server's create path calls [`reset_status`](Self::reset_status) (users may not set status),
/// the main update path [`keep_status_from`](Self::keep_status_from), and the `/status` update
/// path [`keep_spec_from`](Self::keep_spec_from), so that neither endpoint can change the other
/// half. Kinds without status ([`ApiKind::HAS_STATUS`] is `false`) use [`NoStatus`], and the status
/// methods do nothing.
pub trait HasSpecStatus {
    /// The desired state, written by users.
    type Spec: Clone + PartialEq + fmt::Debug;
    /// The observed state, written by controllers through `/status`.
    type Status: Clone + PartialEq + fmt::Debug;

    /// The desired state.
    fn spec(&self) -> &Self::Spec;
    /// The desired state, mutably.
    fn spec_mut(&mut self) -> &mut Self::Spec;
    /// The observed state, if any has been written.
    fn status(&self) -> Option<&Self::Status>;
    /// Replaces the observed state; ignored by kinds without status.
    fn set_status(&mut self, status: Option<Self::Status>);

    /// Removes the observed state (what users sent on create is discarded).
    fn reset_status(&mut self) {
        self.set_status(None);
    }

    /// Overwrites this object's status with `old`'s (main-resource updates cannot change status).
    fn keep_status_from(&mut self, old: &Self) {
        self.set_status(old.status().cloned());
    }

    /// Overwrites this object's spec with `old`'s (`/status` updates cannot change spec).
    fn keep_spec_from(&mut self, old: &Self) {
        *self.spec_mut() = old.spec().clone();
    }

    /// `true` if both specs are equal field by field, so the server can tell a spec change
    /// (which bumps `metadata.generation`) from a metadata-only update.
    fn spec_eq(&self, other: &Self) -> bool {
        self.spec() == other.spec()
    }
}

/// Everything a generic store, handler or watcher needs from a kind, in one bound.
///
/// Implemented automatically for every type that has the parts; all kinds in
/// [`v1alpha1`](crate::v1alpha1) do.
pub trait ApiObject:
    ApiKind
    + HasSpecStatus
    + kube_core::Resource<DynamicType = ()>
    + Serialize
    + DeserializeOwned
    + JsonSchema
    + Clone
    + Default
    + PartialEq
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> ApiObject for T where
    T: ApiKind
        + HasSpecStatus
        + kube_core::Resource<DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + JsonSchema
        + Clone
        + Default
        + PartialEq
        + fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The status of a kind that has none (e.g. `VPCBinding`); it has no values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoStatus {}

/// A list of objects of kind `K`, as returned by `list` (e.g. `VPCList` = `List<VPC>`).
///
/// Serializes with `apiVersion` and `kind: <Kind>List`; both are ignored when deserializing.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct List<K> {
    /// List metadata: `resourceVersion` for a follow-up watch, `continue` for paging.
    #[serde(default)]
    pub metadata: ListMeta,
    /// The objects.
    #[serde(default = "Vec::new")]
    pub items: Vec<K>,
}

impl<K> Default for List<K> {
    fn default() -> Self {
        Self {
            metadata: ListMeta::default(),
            items: Vec::new(),
        }
    }
}

impl<K: ApiKind + Serialize> Serialize for List<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut st = serializer.serialize_struct(K::LIST_KIND, 4)?;
        st.serialize_field("apiVersion", K::API_VERSION)?;
        st.serialize_field("kind", K::LIST_KIND)?;
        st.serialize_field("metadata", &self.metadata)?;
        st.serialize_field("items", &self.items)?;
        st.end()
    }
}

impl<K: ApiKind + JsonSchema> JsonSchema for List<K> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        K::LIST_KIND.into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut metadata = generator.subschema_for::<ListMeta>();
        metadata.insert("description".into(), "Standard list metadata.".into());
        let mut items = json_schema!({ "type": "array", "items": generator.subschema_for::<K>() });
        items.insert("description".into(), format!("The {} objects.", K::KIND).into());
        let mut schema = json_schema!({
            "description": format!("A list of {} objects.", K::KIND),
            "type": "object",
            "properties": {
                "metadata": metadata,
                "items": items,
            },
            "required": ["items"],
        });
        crate::schema::add_type_meta(&mut schema, K::LIST_KIND, K::VERSION);
        schema
    }
}

// === wire form of a single object ===

/// Writes `apiVersion`, `kind`, `metadata`, `spec` and (if present) `status`, in that order.
pub(crate) fn serialize_object<K, S, Spec, Status>(
    serializer: S,
    metadata: &ObjectMeta,
    spec: &Spec,
    status: Option<&Status>,
) -> Result<S::Ok, S::Error>
where
    K: ApiKind,
    S: Serializer,
    Spec: Serialize,
    Status: Serialize,
{
    let mut st = serializer.serialize_struct(K::KIND, 4 + usize::from(status.is_some()))?;
    st.serialize_field("apiVersion", K::API_VERSION)?;
    st.serialize_field("kind", K::KIND)?;
    st.serialize_field("metadata", metadata)?;
    st.serialize_field("spec", spec)?;
    match status {
        Some(status) => st.serialize_field("status", status)?,
        None => st.skip_field("status")?,
    }
    st.end()
}

/// What an object deserializes from. Missing parts become defaults, as Go's decoder leaves zero
/// values: presence is the validator's job (it answers 422 with a field path), not the decoder's
/// (which could only answer 400). `apiVersion`/`kind` are ignored here; the server checks them on
/// the raw body.
#[derive(Deserialize)]
#[serde(bound(deserialize = "Spec: Deserialize<'de> + Default, Status: Deserialize<'de>"))]
pub(crate) struct ObjectWire<Spec, Status> {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) spec: Spec,
    #[serde(default = "Option::default")]
    pub(crate) status: Option<Status>,
}

/// Lets `impl_kind!` derive [`ApiKind::NAMESPACED`] from the `kube` scope type, so the two cannot
/// disagree.
pub(crate) trait ScopeIsNamespaced {
    const NAMESPACED: bool;
}

impl ScopeIsNamespaced for kube_core::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl ScopeIsNamespaced for kube_core::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// Implements [`ApiKind`], [`HasSpecStatus`], `kube_core::Resource`, `Serialize` and `Deserialize`
/// and a `new` constructor for a kind whose struct is `{ metadata, spec, status }` (or
/// `{ metadata, spec }` with `status: none`).
macro_rules! impl_kind {
    (
        $kind:ident {
            spec: $spec:ty,
            status: none,
            scope: $scope:ty,
            plural: $plural:literal,
            singular: $singular:literal,
            short_names: [$($short:literal),* $(,)?] $(,)?
        }
    ) => {
        $crate::object::impl_kind!(@common $kind, $spec, $scope, $plural, $singular, [$($short),*], false);

        impl $crate::HasSpecStatus for $kind {
            type Spec = $spec;
            type Status = $crate::NoStatus;

            fn spec(&self) -> &$spec {
                &self.spec
            }
            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
            fn status(&self) -> Option<&$crate::NoStatus> {
                None
            }
            fn set_status(&mut self, status: Option<$crate::NoStatus>) {
                if let Some(never) = status {
                    match never {}
                }
            }
        }

        impl ::serde::Serialize for $kind {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $crate::object::serialize_object::<Self, S, _, $crate::NoStatus>(
                    serializer,
                    &self.metadata,
                    &self.spec,
                    None,
                )
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $kind {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // A stray `status` is dropped, not an error: unknown-field reporting is the
                // server's (strict decoding on the raw body).
                let wire = <$crate::object::ObjectWire<$spec, ::serde::de::IgnoredAny>>::deserialize(
                    deserializer,
                )?;
                Ok(Self { metadata: wire.metadata, spec: wire.spec })
            }
        }
    };

    (
        $kind:ident {
            spec: $spec:ty,
            status: $status:ty,
            scope: $scope:ty,
            plural: $plural:literal,
            singular: $singular:literal,
            short_names: [$($short:literal),* $(,)?] $(,)?
        }
    ) => {
        $crate::object::impl_kind!(@common $kind, $spec, $scope, $plural, $singular, [$($short),*], true);

        impl $crate::HasSpecStatus for $kind {
            type Spec = $spec;
            type Status = $status;

            fn spec(&self) -> &$spec {
                &self.spec
            }
            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn set_status(&mut self, status: Option<$status>) {
                self.status = status;
            }
        }

        impl ::serde::Serialize for $kind {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $crate::object::serialize_object::<Self, S, _, _>(
                    serializer,
                    &self.metadata,
                    &self.spec,
                    self.status.as_ref(),
                )
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $kind {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let wire = <$crate::object::ObjectWire<$spec, $status>>::deserialize(deserializer)?;
                Ok(Self { metadata: wire.metadata, spec: wire.spec, status: wire.status })
            }
        }
    };

    (@common $kind:ident, $spec:ty, $scope:ty, $plural:literal, $singular:literal, [$($short:literal),*], $has_status:literal) => {
        impl $crate::ApiKind for $kind {
            const KIND: &'static str = stringify!($kind);
            const LIST_KIND: &'static str = concat!(stringify!($kind), "List");
            const VERSION: &'static str = $crate::v1alpha1::VERSION;
            const API_VERSION: &'static str = $crate::v1alpha1::API_VERSION;
            const PLURAL: &'static str = $plural;
            const SINGULAR: &'static str = $singular;
            const SHORT_NAMES: &'static [&'static str] = &[$($short),*];
            const CATEGORIES: &'static [&'static str] = $crate::v1alpha1::CATEGORIES;
            const NAMESPACED: bool = <$scope as $crate::object::ScopeIsNamespaced>::NAMESPACED;
            const HAS_STATUS: bool = $has_status;
        }

        impl ::kube_core::Resource for $kind {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                <Self as $crate::ApiKind>::KIND.into()
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                $crate::GROUP.into()
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                <Self as $crate::ApiKind>::VERSION.into()
            }
            fn api_version(_: &()) -> ::std::borrow::Cow<'_, str> {
                <Self as $crate::ApiKind>::API_VERSION.into()
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                <Self as $crate::ApiKind>::PLURAL.into()
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl $kind {
            /// An object with this name and spec, no other metadata and no status; set
            /// `metadata.namespace` for namespaced kinds before creating it.
            pub fn new(name: &str, spec: $spec) -> Self {
                let mut obj = Self::default();
                obj.metadata.name = Some(name.to_owned());
                obj.spec = spec;
                obj
            }
        }
    };
}

pub(crate) use impl_kind;
