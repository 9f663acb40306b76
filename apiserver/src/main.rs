//! `cozyplane-apiserver`: the aggregated API server for `sdn.cozystack.io`.
//!
//! SIGTERM or SIGINT starts the orderly shutdown (`server/serve.rs`) and the process exits 0
//! once it is done; a second signal ends the process at once with 1.

use std::time::Duration;

use clap::Parser;
use cozyplane_apiserver::options::Options;
use tokio::signal::unix::{SignalKind, signal};

/// glibc's malloc, free and memmove were 27 % of the server's CPU during a create burst (perf,
/// docs/benchmarks.md, "API server against the Go peer (issue 16)"): every request allocates and frees many small
/// buffers across the runtime's threads.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let o = Options::parse();
    let rt = tokio::runtime::Runtime::new()?;
    let r = rt.block_on(run(o));
    // Blocking tasks still running (a store call cut off by the grace period) must not hold
    // the exit.
    rt.shutdown_timeout(Duration::from_secs(1));
    r
}

async fn run(o: Options) -> Result<(), Box<dyn std::error::Error>> {
    // Installed before anything else so that a signal during start-up is not the default
    // (immediate) death.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let kubeconfig = o.write_kubeconfig.clone();
    let server = o.complete().await?;
    tracing::info!(addr = %server.addr, "serving sdn.cozystack.io/v1alpha1");
    if let Some(k) = kubeconfig {
        println!("kubectl --kubeconfig {} get vpcs", k.display());
    }
    let stop = async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = which, "shutdown requested");
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::warn!("second signal: exiting without finishing the shutdown");
            std::process::exit(1);
        });
    };
    server.run_until(stop).await?;
    tracing::info!("shut down");
    Ok(())
}
