//! `sdn_nodes`: the tunnel addresses `sdn_from_overlay` accepts decapsulated packets from
//! (any other source is dropped and counted as `DROP_OVERLAY_SOURCE`: the underlay is not
//! trusted blindly). Fed from the Node watch in [`crate::core::watch`]: every other Node's tunnel
//! address (announced, else InternalIP), whether or not it has a fabric block yet. Pinned
//! entries are adopted at start and pruned only after a complete Node list, so a restarted
//! agent or an unreachable API never cuts the overlay.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use cozyplane_bpf::maps::nodes::NodesMap;

use crate::core::watch::plan;

/// The tunnel addresses of every node but `me`.
pub(crate) fn desired<'a>(
    me: &str,
    nodes: impl IntoIterator<Item = (&'a String, Option<IpAddr>)>,
) -> HashMap<IpAddr, ()> {
    nodes
        .into_iter()
        .filter(|(name, _)| name.as_str() != me)
        .filter_map(|(_, ip)| Some((ip?, ())))
        .collect()
}

/// Tunnel address → Node name, for naming an overlay packet's sender
/// ([`crate::core::metrics::NodeNames`]). Where two Nodes claim one address the first name
/// in order is kept, so the label does not flap between scrapes.
pub(crate) fn names<'a>(
    nodes: impl IntoIterator<Item = (&'a String, Option<IpAddr>)>,
) -> HashMap<IpAddr, String> {
    let mut out: HashMap<IpAddr, String> = HashMap::new();
    for (name, ip) in nodes {
        let Some(ip) = ip else { continue };
        out.entry(ip)
            .and_modify(|n| {
                if name < n {
                    n.clone_from(name);
                }
            })
            .or_insert_with(|| name.clone());
    }
    out
}

/// What is pinned now.
pub(crate) fn pinned(pin_dir: &Path) -> HashMap<IpAddr, ()> {
    NodesMap::from_pin(pin_dir)
        .and_then(|m| m.addrs())
        .unwrap_or_default()
        .into_iter()
        .map(|ip| (ip, ()))
        .collect()
}

/// Writes the difference; removal only once `synced` (the Node list completed).
pub(crate) fn sync(
    pin_dir: &Path,
    want: &HashMap<IpAddr, ()>,
    applied: &mut HashMap<IpAddr, ()>,
    synced: bool,
) {
    let Ok(mut map) = NodesMap::from_pin(pin_dir) else {
        tracing::warn!("sdn_nodes is not pinned under {}", pin_dir.display());
        return;
    };
    let (write, remove) = plan(want, applied, |_| synced);
    for (ip, ()) in write {
        match map.insert(ip) {
            Ok(()) => {
                applied.insert(ip, ());
            }
            Err(e) => tracing::warn!(%ip, "sdn_nodes insert: {e}"),
        }
    }
    for ip in remove {
        if map.remove(ip).is_ok() {
            applied.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn other_nodes_with_an_address() {
        let n = |s: &str| s.to_string();
        let (a, b, c) = (n("n1"), n("n2"), n("n3"));
        let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2));
        let v6: IpAddr = "fd77::3".parse().unwrap();
        let d = desired(
            "n1",
            [
                (&a, Some(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)))),
                (&b, Some(ip)),
                (&c, None),
                (&n("n4"), Some(v6)),
            ],
        );
        assert_eq!(d, HashMap::from([(ip, ()), (v6, ())]));
    }

    #[test]
    fn names_by_address_first_name_wins() {
        let n = |s: &str| s.to_string();
        let (a, b, c, d) = (n("n1"), n("n2"), n("n0"), n("n3"));
        let ip = |o: u8| Some(IpAddr::V4(Ipv4Addr::new(192, 168, 0, o)));
        let m = names([(&a, ip(1)), (&b, ip(2)), (&c, ip(2)), (&d, None)]);
        assert_eq!(
            m,
            HashMap::from([(ip(1).unwrap(), n("n1")), (ip(2).unwrap(), n("n0"))])
        );
    }
}
