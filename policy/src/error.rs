//! What the compiler refuses, and why. A refused construct never widens what is allowed:
//! the part it refuses allows nothing (a rule whose every port or peer was refused admits
//! nothing; an unreadable subject selector isolates its whole namespace with no rules).

use std::fmt;

/// Why a construct was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Reason {
    /// A protocol the layer does not enforce.
    #[error("protocol {0:?} is not supported (TCP, UDP, SCTP)")]
    Protocol(String),
    /// A port outside 1..=65535, or a range that is empty or out of bounds.
    #[error("port {0} is invalid")]
    Port(String),
    /// `endPort` with a named port, or without a port.
    #[error("endPort {0} needs a numeric port")]
    EndPort(i32),
    /// A CIDR that does not parse.
    #[error("CIDR {0:?} does not parse")]
    Cidr(String),
    /// A label selector with an operator or values Kubernetes would not accept.
    #[error("selector: {0}")]
    Selector(String),
    /// A peer with none, or a forbidden mix, of podSelector/namespaceSelector/ipBlock.
    #[error("peer sets {0}")]
    Peer(String),
    /// A named port towards an ipBlock: the destination is not a pod, so the name resolves
    /// to no port.
    #[error("named port {0:?} towards an ipBlock resolves to no port")]
    NamedPortToBlock(String),
    /// A SecurityGroup rule naming a group that does not exist or has no id yet.
    #[error("group {0} does not exist or has no id yet")]
    UnknownGroup(String),
    /// A SecurityGroup in a VPC the compiler does not know.
    #[error("VPC {0} is unknown")]
    UnknownVpc(String),
}

/// One refused construct of one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Warning {
    /// `Kind namespace/name` (or `Kind name`) of the object.
    pub object: String,
    /// Where in the object: `spec.ingress[0].ports[1]`.
    pub field: String,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}; compiled closed (allows nothing)",
            self.object, self.field, self.reason
        )
    }
}
