//! The agent's start-up sequence: the API clients, this node's blocks, the metrics registry
//! with every feature's families, the node brought up ([`crate::core::node`]), the core's own
//! watches, each feature started in the composition root's order, then the CNI socket.

use std::sync::Arc;

use crate::core::api::ApiClients;
use crate::core::cni;
use crate::core::config::CoreConfig;
use crate::core::error::StartError;
use crate::core::feature::{Core, Feature};
use crate::core::metrics::{MetricsBuilder, VpcNames};
use crate::core::{node, watch};

/// Calls `f` once a second until it succeeds, logging every tenth failure: for start-up
/// steps that wait on the API (the Node's podCIDR, the Node announcement).
async fn each_second_until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut tries = 0u32;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if tries.is_multiple_of(10) => tracing::warn!("{what}: {e}"),
            Err(_) => {}
        }
        tries += 1;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Bring the agent up with `features` (in their start order) and serve until the process is
/// killed.
pub async fn run(cfg: CoreConfig, mut features: Vec<Box<dyn Feature>>) -> Result<(), StartError> {
    let started = std::time::Instant::now();
    let kube = match (&cfg.kubeconfig, cfg.in_cluster) {
        (Some(kc), _) => Some(crate::core::api::client(kc).await.map_err(StartError::Api)?),
        (None, true) => Some(crate::core::api::in_cluster_client().map_err(StartError::Api)?),
        (None, false) => None,
    };
    let api = match kube {
        None => None,
        Some(kube) => {
            let sdn = match &cfg.sdn_kubeconfig {
                Some(p) => crate::core::api::client(p).await.map_err(StartError::Api)?,
                None => kube.clone(),
            };
            let node = cfg
                .node_name
                .clone()
                .ok_or_else(|| StartError::Api("--node-name is required with an API".into()))?;
            let node_ip = cfg
                .node_ip
                .ok_or_else(|| StartError::Api("--node-ip is required with an API".into()))?;
            Some(ApiClients {
                kube,
                sdn,
                node,
                node_ip,
                pods: Default::default(),
                grants: Default::default(),
                kube_turns: Arc::new(tokio::sync::Semaphore::new(crate::core::api::CALLS_IN_FLIGHT)),
                sdn_turns: Arc::new(tokio::sync::Semaphore::new(crate::core::api::CALLS_IN_FLIGHT)),
                prepared: Default::default(),
                severed: Default::default(),
            })
        }
    };
    let block = match (cfg.fabric_block, &api) {
        (Some(b), _) => b,
        // kube-controller-manager assigns it shortly after the node registers; until then
        // no pod can be wired anyway.
        (None, Some(api)) => {
            let b = each_second_until("waiting for the Node's spec.podCIDR", || async {
                api.node_block()
                    .await?
                    .ok_or_else(|| format!("Node {} has no spec.podCIDR yet", api.node))
            })
            .await;
            tracing::info!(block = %b, "fabric block from the Node's spec.podCIDR");
            b
        }
        (None, None) => {
            return Err(StartError::Api(
                "--fabric-block is required without an API (else it is the Node's spec.podCIDR)".into(),
            ));
        }
    };
    // IPv6 fabric (dual-stack default network): the flag, else the Node's v6 podCIDR, read
    // once: kube-controller-manager assigns both families together.
    let block6 = match (cfg.fabric_block6, &api) {
        (Some(b), _) => Some(b),
        (None, Some(api)) => api.node_block6().await.ok().flatten(),
        (None, None) => None,
    };
    if let Some(b) = block6 {
        tracing::info!(block6 = %b, "IPv6 fabric block: the default network is dual-stack");
    }
    // Every feature's families in the one registry, before anything can count.
    let vpc_names = VpcNames::default();
    let mut builder = MetricsBuilder::new(
        cfg.bpffs_dir.clone(),
        cfg.node_name.clone().unwrap_or_default(),
        vpc_names.clone(),
    );
    for f in &mut features {
        f.metrics(&mut builder);
    }
    let node_names = builder.scope().nodes.clone();
    let metrics = builder.build();
    let state = Arc::new(node::bring_up(&cfg, block, block6, api.clone(), &mut features).await?);
    // The watches need no API to be up: net 0 serves local pods meanwhile, and they
    // retry with backoff.
    state.set_metrics(metrics.clone());
    if let Some(api) = api {
        let core = Core {
            config: Arc::new(cfg.clone()),
            api: api.clone(),
            pods: state.clone(),
            pin_dir: state.pin_dir().to_path_buf(),
            metrics: metrics.clone(),
            vpc_names,
            lb: crate::core::lb::Lb::new(state.pin_dir()),
        };
        // A feature that cannot start (the resolver's sockets) stops the agent before this node
        // is announced.
        for f in features {
            let feature = f.name();
            f.start(core.clone())
                .await
                .map_err(|source| StartError::Feature { feature, source })?;
        }
        // Others route to this node's block once it is announced; retried until it is.
        let announcer = api.clone();
        tokio::spawn(async move {
            each_second_until("announcing the fabric block on the Node", || {
                announcer.announce(block, block6)
            })
            .await;
            tracing::info!(%block, tunnel_ip = %announcer.node_ip, "announced on the Node");
        });
        let routes = watch::HostRoutes {
            tunnel_dev: cfg.tunnel_dev.clone(),
            net0_vni: cfg.net0_vni,
            own_block: block,
            own_block6: block6,
            cluster: [&cfg.service_cidr[..], &cfg.internal_cidrs[..]].concat(),
        };
        tokio::spawn(watch::run_naming(
            api,
            state.pin_dir().to_path_buf(),
            routes,
            node_names,
        ));
    }
    let listener = cni::bind(&cfg.cni_socket).map_err(|source| StartError::Io {
        what: format!("bind {}", cfg.cni_socket.display()),
        source,
    })?;
    if let Some(addr) = cfg.metrics_addr {
        let m = metrics.clone();
        let tcp = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Io {
                what: format!("bind metrics {addr}"),
                source,
            })?;
        tokio::spawn(async move {
            if let Err(e) = m.serve(tcp).await {
                tracing::error!("metrics server stopped: {e}");
            }
        });
    }
    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, socket = %cfg.cni_socket.display(), "agent ready");
    cni::serve(listener, state).await;
    Ok(())
}
