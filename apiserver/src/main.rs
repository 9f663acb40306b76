//! `cozyplane-apiserver`: the aggregated API server for `sdn.cozystack.io`.

use clap::Parser;
use cozyplane_apiserver::options::Options;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let o = Options::parse();
    let kubeconfig = o.write_kubeconfig.clone();
    let server = o.complete().await?;
    tracing::info!(addr = %server.addr, "serving sdn.cozystack.io/v1alpha1");
    if let Some(k) = kubeconfig {
        println!("kubectl --kubeconfig {} get vpcs", k.display());
    }
    tokio::select! {
        r = server.run() => r?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
