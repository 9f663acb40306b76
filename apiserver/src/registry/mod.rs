//! Every kind served by cozyplane-apiserver.
//!
//! [`kinds`] is THE table: routes, discovery, OpenAPI, Table columns and the conformance tests
//! are all derived from it. Adding a kind means one new `<kind>.rs` strategy and one row here.

use std::sync::Arc;

use cozyplane_storage::Storage;

pub mod cache;
pub mod condition;
pub mod hooks;
pub mod keys;
pub mod selector;
pub mod store;
pub mod strategy;
pub mod validate;

pub mod namespace;

pub mod floating_ip;
pub mod host_firewall;
pub mod port;
pub mod security_group;
pub mod service_vip;
pub mod vpc;
pub mod vpc_binding;
pub mod vpc_gateway;
pub mod vpc_peering;

pub use store::{Resource, Store};

/// `apiVersion` of a kind on the wire: `<group>/<version>`, or `<version>` for the core group.
pub fn api_version(info: &cozyplane_apis::KindInfo) -> String {
    if info.group.is_empty() {
        info.version.to_string()
    } else {
        format!("{}/{}", info.group, info.version)
    }
}

/// The served kinds, in discovery order (the order of `cozyplane_apis::v1alpha1::KINDS`).
pub fn kinds(storage: &Arc<dyn Storage>) -> Vec<Arc<dyn Resource>> {
    let s = || Arc::clone(storage);
    vec![
        Arc::new(Store::new(vpc::Strategy, s())),
        Arc::new(Store::new(vpc_binding::Strategy, s())),
        Arc::new(Store::new(vpc_peering::Strategy, s())),
        Arc::new(Store::new(vpc_gateway::Strategy, s())),
        Arc::new(Store::new(port::Strategy, s())),
        Arc::new(Store::new(floating_ip::Strategy, s())),
        Arc::new(Store::new(service_vip::Strategy, s())),
        Arc::new(Store::new(security_group::Strategy, s())),
        Arc::new(Store::new(host_firewall::Strategy, s())),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_table_covers_every_kind_of_the_api_crate() {
        let storage: std::sync::Arc<dyn cozyplane_storage::Storage> = {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let (dir, s) = rt.block_on(cozyplane_storage::testing::embedded());
            std::mem::forget(dir);
            s
        };
        let table: Vec<_> = super::kinds(&storage).iter().map(|k| *k.info()).collect();
        assert_eq!(table, cozyplane_apis::v1alpha1::KINDS);
    }
}
