use std::sync::Arc;

use crate::{Result, Storage, embedded, etcd};

/// Which backend to open, and how.
#[derive(Clone, Debug)]
pub enum Config {
    /// A remote etcd v3 cluster.
    Etcd(etcd::Config),
    /// The in-process store under a data directory.
    Embedded(embedded::Config),
}

/// Open the configured backend.
pub async fn open(config: Config) -> Result<Arc<dyn Storage>> {
    Ok(match config {
        Config::Etcd(c) => Arc::new(etcd::EtcdStore::connect(c).await?),
        Config::Embedded(c) => Arc::new(embedded::EmbeddedStore::open(c).await?),
    })
}
