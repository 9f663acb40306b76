//! The agent's core: what every node needs whatever features run, and nothing that names a
//! feature (`docs/architecture.md`, "The agent: a core and features").
//!
//! | module | what |
//! |---|---|
//! | [`config`] | the core's flags |
//! | [`api`] | the API clients, this node's identity, the CNI path's API calls, Ports made ahead of ADD ([`api::prepare`]), the severed-Port table ([`api::severed`]) |
//! | [`watch`] | the node's watched view: Nodes, this node's Pods, Ports, VPCs, VPCBindings → `sdn_node_blocks`, `sdn_remotes`, `sdn_nodes`, host routes, the cluster-internal ranges (`sdn_internal`), the CNI path's caches; and the watch kit features share ([`watch::Cache`], [`watch::plan`]) |
//! | [`datapath`] | loading and attaching the programs, their pinned maps, netlink, the tunnel device |
//! | [`ipam`] | the node's fabric addresses |
//! | [`lb`] | the load balancer's maps: one writer, fed by every feature with frontends |
//! | [`cni`] | the CNI server: the pods' lifecycle (ADD, DEL, CHECK, GC, reconciliation) |
//! | [`metrics`] | the one registry, the core's families, the kit features add theirs with |
//! | [`shards`] | the gateway NAT's port shards (uplink and egress read them) |
//! | [`feature`] | the interface features plug in through |
//! | [`node`], [`run`], [`error`] | bringing the node up, the start-up sequence, its errors |
//!
//! Dependencies point one way: `run` → `node` → `feature` → the rest; nothing below `feature`
//! knows it exists (the layout test in `agent/tests/layout.rs` keeps it so).

pub mod api;
pub mod cni;
pub mod config;
pub mod datapath;
pub mod error;
pub mod feature;
pub mod ipam;
pub mod lb;
pub mod metrics;
pub mod node;
pub mod run;
pub mod shards;
pub mod watch;
