//! The cozyplane node agent.
//!
//! Today it owns the node side of the default network (net 0): it loads the datapath
//! into a per-agent bpffs directory, keeps the overlay tunnel device, allocates fabric
//! addresses from a node-local block, and serves the CNI plugin over a unix socket
//! ([`cni_server`]). Restarting it reuses everything pinned, so traffic keeps flowing
//! while it is down. With `--kubeconfig` it also watches Nodes (other nodes' fabric blocks
//! into `sdn_node_blocks`), its own node's Pods (kube API) and other nodes' Ports, VPCs and
//! VPCBindings (our API) ([`watch`]), and attaches pods annotated `sdn.cozystack.io/vpc`
//! to their VPC ([`api`], [`attachment`]). With `--policy=on` (the default) it also feeds the
//! policy compiler and keeps the pinned policy maps equal to its output ([`policy`]).
//!
//! Start at [`run`].

pub mod api;
pub mod attachment;
pub mod cni_server;
pub mod config;
pub mod datapath;
pub mod dns;
mod dns_view;
pub mod doors;
pub mod egress;
pub mod fip;
pub mod internal;
pub mod ipam;
pub mod lb_gate;
pub mod metrics;
pub mod peering;
pub mod policy;
pub mod prepare;
pub mod services;
pub mod sever;
pub mod tunnel_sources;
pub mod uplink;
pub mod watch;

use std::sync::Arc;

pub use config::AgentConfig;

/// Everything that can stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The datapath could not be loaded or attached.
    #[error("datapath: {0}")]
    Datapath(#[from] datapath::loader::LoadError),
    /// The netfilter rule that marks DNATed flows could not be installed.
    #[error("netfilter: {0}")]
    Netfilter(#[from] datapath::netfilter::NetfilterError),
    /// Netlink work on the node failed.
    #[error("netlink: {0}")]
    Netdev(#[from] datapath::netdev::NetdevError),
    /// The uplink could not be set up.
    #[error("uplink: {0}")]
    Uplink(#[from] uplink::UplinkError),
    /// The IPAM state could not be read.
    #[error("ipam: {0}")]
    Ipam(#[from] ipam::IpamError),
    /// The API clients could not be built.
    #[error("api: {0}")]
    Api(String),
    /// Files, sockets, sysctls.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

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

/// Bring the agent up and serve until the process is killed.
pub async fn run(cfg: AgentConfig) -> Result<(), StartError> {
    let started = std::time::Instant::now();
    let kube = match (&cfg.kubeconfig, cfg.in_cluster) {
        (Some(kc), _) => Some(api::client(kc).await.map_err(StartError::Api)?),
        (None, true) => Some(api::in_cluster_client().map_err(StartError::Api)?),
        (None, false) => None,
    };
    let api = match kube {
        None => None,
        Some(kube) => {
            let sdn = match &cfg.sdn_kubeconfig {
                Some(p) => api::client(p).await.map_err(StartError::Api)?,
                None => kube.clone(),
            };
            let node = cfg
                .node_name
                .clone()
                .ok_or_else(|| StartError::Api("--node-name is required with an API".into()))?;
            let node_ip = cfg
                .node_ip
                .ok_or_else(|| StartError::Api("--node-ip is required with an API".into()))?;
            Some(api::ApiClients {
                kube,
                sdn,
                node,
                node_ip,
                pods: Default::default(),
                grants: Default::default(),
                kube_turns: Arc::new(tokio::sync::Semaphore::new(api::CALLS_IN_FLIGHT)),
                sdn_turns: Arc::new(tokio::sync::Semaphore::new(api::CALLS_IN_FLIGHT)),
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
    let state = cni_server::AgentState::start(&cfg, block, block6, api.clone()).await?;
    let state = Arc::new(state);
    let vpc_names = metrics::VpcNames::default();
    // The watches need no API to be up: net 0 serves local pods meanwhile, and they
    // retry with backoff.
    let metrics = metrics::Metrics::with_identity(
        state.pin_dir().to_path_buf(),
        cfg.node_name.clone().unwrap_or_default(),
        vpc_names.clone(),
    );
    if let Some(api) = api {
        if cfg.dns.dns_resolver {
            dns::start(
                api.clone(),
                state.pin_dir().to_path_buf(),
                cfg.dns.clone(),
                metrics.dns(),
            )
            .await?;
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
        };
        tokio::spawn(peering::run(api.clone(), state.pin_dir().to_path_buf()));
        tokio::spawn(sever::run(api.clone(), state.clone()));
        tokio::spawn(doors::run(
            api.clone(),
            state.pin_dir().to_path_buf(),
            vpc_names.clone(),
        ));
        tokio::spawn(egress::run(
            api.clone(),
            state.pin_dir().to_path_buf(),
            [&cfg.service_cidr[..], &cfg.internal_cidrs[..]].concat(),
            cfg.nat_shards,
        ));
        tokio::spawn(services::run(api.clone(), state.pin_dir().to_path_buf()));
        if cfg.policy == policy::Mode::On {
            tokio::spawn(policy::run(
                api.clone(),
                state.pin_dir().to_path_buf(),
                metrics.clone(),
            ));
        }
        tokio::spawn(watch::run(api, state.pin_dir().to_path_buf(), routes));
    }
    state.set_metrics(metrics.clone());
    let listener = cni_server::bind(&cfg.cni_socket).map_err(|source| StartError::Io {
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
    cni_server::serve(listener, state).await;
    Ok(())
}
