//! The per-node split-horizon resolver for VPC pods.
//!
//! A VPC pod's DNS queries are steered to its node (`bpf/lib/dns.h`), arriving from the
//! pod's fabric address; that source names the pod, hence its Port and its VPC. Names in
//! the cluster domain are answered here from that VPC's view — its own Services and those
//! of the VPCs it is peered with, nothing else, and the rest is NXDOMAIN with a
//! synthesized SOA, so other tenants' names cannot be probed — and every other name is
//! forwarded to the node's upstream resolvers (with DNS64, RFC 6147, for a VPC that asks).
//!
//! * [`view`]: the cluster as the resolver sees it; the agent fills it from its watches.
//! * [`answer`]: the request path (bytes in, decision out), pure and fuzzed.
//! * [`forward`]: relaying to upstreams.
//! * [`dns64`]: synthesized AAAA answers for the VPCs that ask for them (`spec.dns64`).
//! * [`server`]: the UDP and TCP loops.
//! * [`metrics`]: Prometheus metrics, registered into the agent's registry.
//!
//! All DNS wire handling is hickory-proto's.

pub mod answer;
pub mod dns64;
pub mod forward;
pub mod metrics;
pub mod server;
pub mod view;

pub use answer::{Action, Outcome, Transport, Zone};
pub use forward::Upstreams;
pub use metrics::Metrics;
pub use server::Resolver;
pub use view::{Endpoint, Protocol, Service, ServicePort, View, ViewHandle, VpcKey};

/// The port the resolver listens on by default (UDP and TCP), on the node's address.
pub const DEFAULT_PORT: u16 = 15353;
/// The default cluster domain (Cozystack clusters use `cozy.local`).
pub const DEFAULT_DOMAIN: &str = "cluster.local";
/// TTL of the records the resolver synthesizes: short, since Services come and go.
pub const DEFAULT_TTL: u32 = 5;
