//! The overlay's collect-metadata tunnel device: created (or adopted) once per agent start,
//! VXLAN with or without `gbp` as `--tunnel-groups` says, or Geneve.
//!
//! `gbp` is what lets a VXLAN packet carry its source's SecurityGroups (the datapath's
//! `tunnel_groups` knob 1, `docs/policy.md`). A device found with the other setting, left by
//! an older agent or another configuration, is deleted and created anew: the kernel cannot
//! change the flag of a live device, and keeping it would either drop every GBP-flagged
//! packet (a device without `gbp` treats the flag as reserved) or ignore the groups. The
//! device's TCX link and the remote-block routes go with it; the agent attaches the overlay
//! program afterwards (a stale link pin is replaced) and its node watch writes the routes.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::TryStreamExt as _;
use netlink_packet_route::link::{InfoData, InfoVxlan, LinkAttribute, LinkInfo as NlLinkInfo, LinkMessage};
use rtnetlink::{LinkGeneve, LinkUnspec, LinkVxlan};

use super::netdev::{LinkInfo, NetDev, NetdevError, in_turn, is_not_found, link_info, nl};
use crate::core::config::{TunnelGroups, TunnelKind};

/// Whether this process's tunnel device has `gbp` (one device per agent): the host's routes
/// into it then carry an explicit policy id 0 ([`routes_need_gbp_none`]).
static TUNNEL_GBP: AtomicBool = AtomicBool::new(false);

/// Whether routes into the tunnel must carry a VXLAN option with policy id 0. A `gbp`
/// device in collect-metadata mode builds its header from the packet's VXLAN option, and
/// without one from metadata the kernel leaves uninitialised (`vxlan_xmit_one`): a route's
/// packets would go out with a random policy id.
pub fn routes_need_gbp_none() -> bool {
    TUNNEL_GBP.load(Ordering::Relaxed)
}

/// Whether a link message describes a VXLAN device with `gbp`; `None` for another kind.
fn vxlan_gbp(m: &LinkMessage) -> Option<bool> {
    m.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            NlLinkInfo::Data(InfoData::Vxlan(data)) => Some(data.iter().any(|d| matches!(d, InfoVxlan::Gbp))),
            _ => None,
        }),
        _ => None,
    })
}

impl NetDev {
    /// The link `name` and, for a VXLAN device, whether it has `gbp`.
    async fn tunnel_link(&self, name: &str) -> Result<Option<(LinkInfo, Option<bool>)>, NetdevError> {
        let mut s = self.handle().link().get().match_name(name.to_string()).execute();
        match s.try_next().await {
            Ok(m) => Ok(m.map(|m| (link_info(&m), vxlan_gbp(&m)))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(nl(format!("get link {name}"))(e)),
        }
    }

    /// Create (or adopt) the collect-metadata tunnel device `name` with MAC `mac`, NOARP,
    /// and bring it up. A VXLAN device has `gbp` exactly when `groups` is on; one found
    /// with the other setting is recreated (logged: the overlay pauses meanwhile).
    pub async fn ensure_tunnel(
        &self,
        (kind, groups): (TunnelKind, TunnelGroups),
        name: &str,
        port: u16,
        mtu: u32,
        mac: [u8; 6],
    ) -> Result<LinkInfo, NetdevError> {
        let gbp = kind == TunnelKind::Vxlan && groups == TunnelGroups::On;
        let mut existing = self.tunnel_link(name).await?;
        if let Some((_, Some(has))) = existing
            && kind == TunnelKind::Vxlan
            && has != gbp
        {
            tracing::warn!(
                device = name,
                had_gbp = has,
                want_gbp = gbp,
                "the VXLAN device's gbp flag differs from --tunnel-groups: recreating it (every node \
                 must run with the same --tunnel-groups)"
            );
            self.delete(name).await?;
            existing = None;
        }
        TUNNEL_GBP.store(gbp, Ordering::Relaxed);
        if existing.is_none() {
            let msg = match kind {
                TunnelKind::Vxlan => {
                    let b = LinkVxlan::new(name, 0)
                        .port(port)
                        .collect_metadata(true)
                        .learning(false);
                    if gbp { b.gbp() } else { b }.build()
                }
                TunnelKind::Geneve => LinkGeneve::new(name, 0).port(port).collect_metadata().build(),
            };
            in_turn(self.handle().link().add(msg).execute())
                .await
                .map_err(nl(format!(
                    "create {kind:?} device {name} (is the kernel module available?)"
                )))?;
        }
        let l = self
            .link(name)
            .await?
            .ok_or_else(|| NetdevError::Missing(format!("{name} vanished")))?;
        let configure = LinkUnspec::new_with_index(l.index)
            .mtu(mtu)
            .address(mac.to_vec())
            // No ARP: host-routed frames into the tunnel (remote pod routes) get the device's
            // own MAC as destination; the receiving program ignores it.
            .arp(false)
            .up()
            .build();
        in_turn(self.handle().link().set(configure).execute())
            .await
            .map_err(nl(format!("configure {name}")))?;
        self.link(name)
            .await?
            .ok_or_else(|| NetdevError::Missing(format!("{name} vanished")))
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::link::InfoKind;

    use super::*;

    fn vxlan(data: Vec<InfoVxlan>) -> LinkMessage {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            NlLinkInfo::Kind(InfoKind::Vxlan),
            NlLinkInfo::Data(InfoData::Vxlan(data)),
        ]));
        m
    }

    #[test]
    fn the_gbp_flag_is_read_from_the_device() {
        assert_eq!(
            vxlan_gbp(&vxlan(vec![InfoVxlan::Id(0), InfoVxlan::Gbp])),
            Some(true)
        );
        assert_eq!(
            vxlan_gbp(&vxlan(vec![InfoVxlan::Id(0), InfoVxlan::Learning(false)])),
            Some(false)
        );
        assert_eq!(vxlan_gbp(&LinkMessage::default()), None, "not a VXLAN device");
    }
}
