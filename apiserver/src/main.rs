//! `cozyplane-apiserver`: the aggregated API server for `sdn.cozystack.io`.
//!
//! Until the HTTP layer lands (issue 3) the binary opens the configured storage, checks its
//! health, reports the current revision and keeps it open until interrupted.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use cozyplane_storage::{Config, embedded, etcd};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(name = "cozyplane-apiserver", version, about)]
struct Options {
    /// etcd client URLs, comma-separated. Without it the embedded store is used.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// CA bundle for etcd's serving certificate.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// Key of the etcd client certificate.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// Data directory of the embedded store.
    #[arg(long, default_value = "/var/lib/cozyplane")]
    data_dir: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let o = Options::parse();
    let config = if o.etcd_servers.is_empty() {
        Config::Embedded(embedded::Config::new(&o.data_dir))
    } else {
        let mut c = etcd::Config::new(o.etcd_servers);
        c.ca_file = o.etcd_cafile;
        c.cert_file = o.etcd_certfile;
        c.key_file = o.etcd_keyfile;
        c.request_timeout = Duration::from_secs(10);
        Config::Etcd(c)
    };
    let store = cozyplane_storage::open(config).await?;
    store.health().await?;
    println!(
        "cozyplane-apiserver: {} store ready at revision {}; the HTTP API arrives with issue 3. Ctrl-C to stop.",
        store.backend(),
        store.current_revision().await?
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
