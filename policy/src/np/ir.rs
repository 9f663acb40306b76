//! NetworkPolicy → the compiler's rules: what each policy says, with every construct this
//! crate cannot enforce refused (and reported) so that it allows nothing.

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cidr::{Block, Prefix};
use crate::error::{Reason, Warning};
use crate::model::proto;
use crate::selector::Selector;

/// Which namespaces a pod peer is in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NsSel {
    /// The policy's own namespace.
    Same(String),
    /// Namespaces whose labels match.
    Labels(Selector),
}

/// The other end of a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// Pods matching `pods` in the namespaces of `ns`.
    Pods {
        /// Namespaces.
        ns: NsSel,
        /// Pods within them.
        pods: Selector,
    },
    /// Addresses.
    Block(Block),
}

/// One `ports` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortSpec {
    /// `[lo, hi]` of `proto` (every port: `0..=65535`).
    Range(u8, u16, u16),
    /// A container port name of `proto`, resolved on the destination pod.
    Named(u8, String),
}

/// One ingress or egress rule. `peers: None` is "every peer", `ports: None` "every port of
/// TCP, UDP and SCTP"; a list the compiler emptied by refusing its entries allows nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `from` / `to`.
    pub peers: Option<Vec<Peer>>,
    /// `ports`.
    pub ports: Option<Vec<PortSpec>>,
}

/// A NetworkPolicy as the compiler reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    /// Namespace.
    pub ns: String,
    /// Name.
    pub name: String,
    /// `podSelector`; `None` when it could not be read (then it selects every pod of the
    /// namespace, with no rules: closed).
    pub subjects: Option<Selector>,
    /// Ingress rules when the policy has the Ingress type.
    pub ingress: Option<Vec<Rule>>,
    /// Egress rules when the policy has the Egress type.
    pub egress: Option<Vec<Rule>>,
}

impl Policy {
    /// Every address block the policy names (their prefixes are CIDR classes).
    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.ingress
            .iter()
            .chain(&self.egress)
            .flatten()
            .flat_map(|r| r.peers.iter().flatten())
            .filter_map(|p| match p {
                Peer::Block(b) => Some(b),
                Peer::Pods { .. } => None,
            })
    }

    /// Does any pod peer select by namespace labels?
    pub fn has_ns_selector(&self) -> bool {
        self.ingress
            .iter()
            .chain(&self.egress)
            .flatten()
            .flat_map(|r| r.peers.iter().flatten())
            .any(|p| {
                matches!(
                    p,
                    Peer::Pods {
                        ns: NsSel::Labels(_),
                        ..
                    }
                )
            })
    }
}

/// A rule as the API has it: (peers, ports).
type RawRule = (Option<Vec<NetworkPolicyPeer>>, Option<Vec<NetworkPolicyPort>>);

fn protocol(p: Option<&String>) -> Result<u8, Reason> {
    match p.map_or("TCP", String::as_str) {
        "TCP" => Ok(proto::TCP),
        "UDP" => Ok(proto::UDP),
        "SCTP" => Ok(proto::SCTP),
        other => Err(Reason::Protocol(other.to_string())),
    }
}

fn port(p: &NetworkPolicyPort) -> Result<PortSpec, Reason> {
    let pr = protocol(p.protocol.as_ref())?;
    match (&p.port, p.end_port) {
        (None, None) => Ok(PortSpec::Range(pr, 0, u16::MAX)),
        (None, Some(e)) => Err(Reason::EndPort(e)),
        (Some(IntOrString::String(name)), None) => {
            // A name that is a number is how some clients send ints; Kubernetes rejects it.
            if name.is_empty() || name.len() > 15 {
                Err(Reason::Port(name.clone()))
            } else {
                Ok(PortSpec::Named(pr, name.clone()))
            }
        }
        (Some(IntOrString::String(_)), Some(e)) => Err(Reason::EndPort(e)),
        (Some(IntOrString::Int(n)), e) => {
            let lo = u16::try_from(*n)
                .ok()
                .filter(|n| *n > 0)
                .ok_or(Reason::Port(n.to_string()))?;
            let hi = match e {
                None => lo,
                Some(e) => u16::try_from(e)
                    .ok()
                    .filter(|e| *e >= lo)
                    .ok_or(Reason::Port(format!("{n}-{e}")))?,
            };
            Ok(PortSpec::Range(pr, lo, hi))
        }
    }
}

fn peer(p: &NetworkPolicyPeer, ns: &str) -> Result<Peer, Reason> {
    match (&p.pod_selector, &p.namespace_selector, &p.ip_block) {
        (None, None, Some(b)) => {
            let cidr: Prefix = b.cidr.parse().map_err(|_| Reason::Cidr(b.cidr.clone()))?;
            let except = b
                .except
                .iter()
                .flatten()
                .map(|e| e.parse().map_err(|_| Reason::Cidr(e.clone())))
                .collect::<Result<Vec<Prefix>, _>>()?;
            Ok(Peer::Block(Block { cidr, except }))
        }
        (_, _, Some(_)) => Err(Reason::Peer("ipBlock together with a selector".into())),
        (None, None, None) => Err(Reason::Peer("nothing".into())),
        (pods, nss, None) => {
            let pods = match pods {
                Some(s) => Selector::parse(s).map_err(Reason::Selector)?,
                None => Selector::default(),
            };
            let ns = match nss {
                Some(s) => NsSel::Labels(Selector::parse(s).map_err(Reason::Selector)?),
                None => NsSel::Same(ns.to_string()),
            };
            Ok(Peer::Pods { ns, pods })
        }
    }
}

/// Read one policy; every refused construct is a [`Warning`].
pub fn translate(np: &NetworkPolicy) -> (Policy, Vec<Warning>) {
    let ns = np.metadata.namespace.clone().unwrap_or_default();
    let name = np.metadata.name.clone().unwrap_or_default();
    let object = format!("NetworkPolicy {ns}/{name}");
    let mut warnings = Vec::new();
    let mut warn = |field: String, reason: Reason| {
        warnings.push(Warning {
            object: object.clone(),
            field,
            reason,
        });
    };
    let spec = np.spec.clone().unwrap_or_default();
    let subjects = match Selector::parse(&spec.pod_selector.clone().unwrap_or_default()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn("spec.podSelector".into(), Reason::Selector(e));
            None
        }
    };
    let types = spec.policy_types.clone().unwrap_or_else(|| {
        let mut t = vec!["Ingress".to_string()];
        if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
            t.push("Egress".into());
        }
        t
    });
    let mut rules = |dir: &str, list: Vec<RawRule>| -> Vec<Rule> {
        let mut out = Vec::new();
        for (i, (peers, ports)) in list.into_iter().enumerate() {
            let peer_field = if dir == "ingress" { "from" } else { "to" };
            // An empty list is "every peer" in Kubernetes, the same as an absent one.
            let peers = peers.filter(|p| !p.is_empty()).map(|ps| {
                ps.iter()
                    .enumerate()
                    .filter_map(|(j, p)| {
                        peer(p, &ns)
                            .map_err(|r| warn(format!("spec.{dir}[{i}].{peer_field}[{j}]"), r))
                            .ok()
                    })
                    .collect::<Vec<_>>()
            });
            let ports = ports.filter(|p| !p.is_empty()).map(|ps| {
                ps.iter()
                    .enumerate()
                    .filter_map(|(j, p)| {
                        port(p)
                            .map_err(|r| warn(format!("spec.{dir}[{i}].ports[{j}]"), r))
                            .ok()
                    })
                    .collect::<Vec<_>>()
            });
            if dir == "egress" {
                let to_block = peers.iter().flatten().any(|p| matches!(p, Peer::Block(_)));
                for p in ports.iter().flatten() {
                    if let (PortSpec::Named(_, n), true) = (p, to_block) {
                        warn(
                            format!("spec.egress[{i}].ports"),
                            Reason::NamedPortToBlock(n.clone()),
                        );
                    }
                }
            }
            out.push(Rule { peers, ports });
        }
        out
    };
    let ingress = types.iter().any(|t| t == "Ingress").then(|| {
        rules(
            "ingress",
            spec.ingress
                .iter()
                .flatten()
                .map(|r| (r.from.clone(), r.ports.clone()))
                .collect(),
        )
    });
    let egress = types.iter().any(|t| t == "Egress").then(|| {
        rules(
            "egress",
            spec.egress
                .iter()
                .flatten()
                .map(|r| (r.to.clone(), r.ports.clone()))
                .collect(),
        )
    });
    let (ingress, egress) = match subjects {
        Some(_) => (ingress, egress),
        // Unreadable subjects: isolate the whole namespace in the policy's directions, no
        // rules.
        None => (ingress.map(|_| Vec::new()), egress.map(|_| Vec::new())),
    };
    (
        Policy {
            ns,
            name,
            subjects,
            ingress,
            egress,
        },
        warnings,
    )
}
