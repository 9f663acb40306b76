//! Everything that can stop the agent from starting.

use crate::core::datapath;

/// Why the agent did not start.
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
    /// The IPAM state could not be read.
    #[error("ipam: {0}")]
    Ipam(#[from] crate::core::ipam::IpamError),
    /// The API clients could not be built.
    #[error("api: {0}")]
    Api(String),
    /// A feature failed its part of the start (`Feature::datapath` or `Feature::start`).
    #[error("{feature}: {source}")]
    Feature {
        /// The feature's name.
        feature: &'static str,
        /// Its error.
        source: crate::core::feature::FeatureError,
    },
    /// Files, sockets, sysctls.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}
