//! The storage key layout: every key this server writes is named here, and nowhere else.
//!
//! ```text
//! /registry/sdn.cozystack.io/<resource>/[<namespace>/]<name>   objects of our group
//! /registry/<resource>/<name>                                   core kinds (standalone namespaces)
//! /registry/sdn.cozystack.io/_claims/…                          allocation claims (crate::alloc)
//! /registry/sdn.cozystack.io/_leader/controllers                the controllers' lease
//! ```
//!
//! Names beginning with `_` are not valid resource names, so the bookkeeping keys can never
//! collide with objects.

use cozyplane_apis::KindInfo;
use cozyplane_storage::ObjectKey;

/// The store-wide root.
pub const ROOT: &str = "registry";
/// Every key of our group starts with this (objects, claims, the lease).
pub const GROUP_PREFIX: &str = "/registry/sdn.cozystack.io/";
/// Where allocation claims live: beside the objects, under a resource name no kind uses.
pub const CLAIMS: &str = "/registry/sdn.cozystack.io/_claims/";
/// The controllers' leader lease.
pub const LEASE: &str = "/registry/sdn.cozystack.io/_leader/controllers";

/// The key layout of the objects of kind `info` in `ns` (ignored for cluster-scoped kinds).
pub fn of<'a>(info: &'a KindInfo, ns: Option<&'a str>) -> ObjectKey<'a> {
    ObjectKey {
        prefix: ROOT,
        group: info.group,
        resource: info.plural,
        namespace: if info.namespaced { ns } else { None },
    }
}

/// The key of object `name` of kind `info` in `ns`.
pub fn object(info: &KindInfo, ns: Option<&str>, name: &str) -> String {
    of(info, ns).object(name)
}

/// The prefix listing the objects of kind `info` in `ns`, or in every namespace.
pub fn prefix(info: &KindInfo, ns: Option<&str>) -> String {
    of(info, ns).list_prefix()
}

/// `(resource, rest)` of a key of our group: `("ports", "v100.10-0-0-5")`.
pub fn split(key: &str) -> Option<(&str, &str)> {
    key.strip_prefix(GROUP_PREFIX)
        .map(|rest| rest.split_once('/').unwrap_or((rest, "")))
}

#[cfg(test)]
mod tests {
    use cozyplane_apis::ApiKind;
    use cozyplane_apis::v1alpha1::{Port, VPC};

    use super::*;

    #[test]
    fn the_layout() {
        assert_eq!(GROUP_PREFIX, format!("/{ROOT}/{}/", cozyplane_apis::GROUP));
        assert!(CLAIMS.starts_with(GROUP_PREFIX) && LEASE.starts_with(GROUP_PREFIX));
        assert_eq!(
            object(&VPC::INFO, Some("t1"), "a"),
            "/registry/sdn.cozystack.io/vpcs/t1/a"
        );
        assert_eq!(
            object(&Port::INFO, Some("ignored"), "p"),
            "/registry/sdn.cozystack.io/ports/p"
        );
        assert_eq!(prefix(&VPC::INFO, None), "/registry/sdn.cozystack.io/vpcs/");
        assert_eq!(split("/registry/sdn.cozystack.io/ports/p"), Some(("ports", "p")));
        let ns = KindInfo {
            group: "",
            namespaced: false,
            ..VPC::INFO
        };
        assert_eq!(object(&ns, None, "t1"), "/registry/vpcs/t1");
    }
}
