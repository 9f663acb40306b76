//! `spec.dhcp` of a [`VPC`](super::VPC) and of a [`Port`](super::Port): what a guest that
//! configures itself from the network gets besides its address (issue 28).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::serde_util::is_zero;

/// Options for guests that configure themselves from the network: the DHCPv4, DHCPv6 and
/// router-advertisement answers of the agent (`--autoconf`) on each Port's link. Every field
/// is optional; an empty or zero field takes the value of the next level.
///
/// Levels, most specific first, each field on its own: the Port's `spec.dhcp`, then its VPC's
/// `spec.dhcp`, then the agent's flags (`--autoconf-dns`, `--autoconf-domain`,
/// `--autoconf-lease`) and the link itself (MTU, the gateway routes). A Port that sets only
/// `dnsServers` keeps its VPC's `searchDomains`; a field that is set replaces the whole field
/// of the levels below (the lists are not joined).
///
/// What each field becomes: `dnsServers` DHCPv4 option 6, RDNSS in router advertisements and
/// DHCPv6 option 23 (each family to its own protocols); `searchDomains` DHCPv4 options 15 (the
/// first) and 119, DNSSL and DHCPv6 option 24; `mtu` DHCPv4 option 26 and the RA MTU option;
/// `routes` DHCPv4 option 121 (IPv4) and RA route information (RFC 4191, IPv6);
/// `leaseSeconds` DHCPv4 option 51 and the DHCPv6 lifetimes.
// The API server validates every field (`apiserver/src/validation/dhcp.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestConfig {
    /// The guest's resolvers, in order, instead of the agent's (normally the cluster DNS,
    /// which answers for the VPC's Services: list its address too to keep resolving them by
    /// name). Canonical addresses of either family, at most 3 per family (what resolv.conf
    /// reads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub dns_servers: Vec<String>,
    /// The guest's search domains, in order, instead of the namespace's
    /// (`<ns>.svc.<domain> svc.<domain> <domain>`): DNS names without the trailing dot, at
    /// most 6, 256 characters in all (what resolv.conf reads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub search_domains: Vec<String>,
    /// The guest's MTU, 1280 to 9000; 0 means the link's. Never above the link's MTU (the
    /// VPC's or the node's, less the overlay's overhead): the agent clamps a larger value to
    /// it and logs that it did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: i32,
    /// Routes the guest gets besides the link gateway and the default route through it (at
    /// most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub routes: Vec<GuestRoute>,
    /// The DHCP lease (and DHCPv6 lifetime), 60 to 86400 seconds; 0 means the agent's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease_seconds: i32,
}

/// One route of [`GuestConfig::routes`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::hoist_required)]
pub struct GuestRoute {
    /// The destination range in canonical CIDR form (`192.168.10.0/24`, `fd10::/48`); not the
    /// default route (always the link gateway's) and no link-local, loopback or multicast
    /// range.
    #[serde(default)]
    #[schemars(transform = crate::schema::mark_required)]
    pub destination: String,
    /// The next hop, an IPv4 address of the destination's family; omitted means the link
    /// gateway (`169.254.1.1`), which is what the datapath answers for on the guest's link.
    /// IPv6 routes take no gateway: router advertisements announce routes through the
    /// advertising router, the link gateway `fe80::1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_fields_are_left_out_and_read_back() {
        let c = GuestConfig {
            dns_servers: vec!["10.0.0.53".into()],
            routes: vec![GuestRoute {
                destination: "192.168.10.0/24".into(),
                gateway: String::new(),
            }],
            ..GuestConfig::default()
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "dnsServers": ["10.0.0.53"],
                "routes": [{"destination": "192.168.10.0/24"}],
            })
        );
        assert_eq!(serde_json::from_value::<GuestConfig>(v).unwrap(), c);
        assert_eq!(
            serde_json::from_str::<GuestConfig>("{}").unwrap(),
            GuestConfig::default()
        );
    }
}
