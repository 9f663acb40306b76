//! Version `v1alpha1` of `sdn.cozystack.io`, the only version served.
//!
//! One module per kind, each with `<Kind>Spec`, `<Kind>Status`, `<Kind>` and `<Kind>List`:
//!
//! | kind | scope | resource | short names | status |
//! |---|---|---|---|---|
//! | [`VPC`] | namespaced | `vpcs` | – | yes |
//! | [`VPCBinding`] | namespaced | `vpcbindings` | `vpcb` | no |
//! | [`VPCPeering`] | namespaced | `vpcpeerings` | `vpcp` | yes |
//! | [`VPCGateway`] | namespaced | `vpcgateways` | `vpcgw` | yes |
//! | [`Port`] | cluster | `ports` | – | yes |
//! | [`FloatingIP`] | namespaced | `floatingips` | `flip` | yes |
//! | [`ServiceVIP`] | cluster | `servicevips` | `svip` | yes |
//! | [`SecurityGroup`] | namespaced | `securitygroups` | `sg` | yes |
//! | [`HostFirewall`] | cluster | `hostfirewalls` | `hfw` | yes |
//!
//! Two more bodies are questions, not stored kinds: [`VPCTrace`] (`vpcs/<vpc>/trace`) and
//! [`PodTrace`] (`podtraces`), answered with their `status` and kept nowhere.
//!
//! `VPC` and `Port` have no short name: their singulars are already as short as a useful
//! abbreviation, and kubectl matches singulars. `fip` is left to the `FabricIP` CRD of
//! `local.sdn.cozystack.io`, hence `flip`. All kinds are in the [`CATEGORIES`] `sdn`, so
//! `kubectl get sdn` lists them; none joins `all`, which users expect to mean workloads.
//!
//! Wire conventions, shared by every kind:
//! - Optional fields are omitted when empty or zero (Go's `omitempty`); a zero value and an absent
//!   field mean the same. Required fields are always written.
//! - Decoding never fails on a *missing* field: it becomes its zero value, and the server's
//!   validation reports it with a field path (422) where the API requires it.
//! - Defaults and validation live in the API server (`apiserver/src/validation`); this crate
//!   only describes the shapes.
//! - Enumerated strings (`phase`, `protocol`, …) are plain `String`s so that decoding never
//!   fails on an unknown value; the server's validation restricts them to the known ones, which
//!   the constants in [`phase`] and each kind's module name.

use crate::{ApiKind, KindInfo};

mod dhcp;
mod floating_ip;
mod host_firewall;
mod migration;
mod pod_trace;
mod port;
mod refs;
mod security_group;
mod service_vip;
mod vpc;
mod vpc_binding;
mod vpc_gateway;
mod vpc_peering;
mod vpc_trace;

pub use dhcp::{GuestConfig, GuestRoute};
pub use floating_ip::{FloatingIP, FloatingIPList, FloatingIPSpec, FloatingIPStatus};
pub use host_firewall::{
    ALLOW_LOCKOUT_ANNOTATION, API_SERVER_PORT, HostFirewall, HostFirewallEgressRule, HostFirewallIngressRule,
    HostFirewallList, HostFirewallPeer, HostFirewallPort, HostFirewallSpec, HostFirewallStatus,
};
pub use migration::{MIGRATION_JOB_LABEL, PortMigrationTarget};
pub use pod_trace::{
    POD_TRACE_KIND, POD_TRACE_RESOURCE, PodTrace, PodTraceDirection, PodTraceEndpoint, PodTraceHostFirewall,
    PodTraceHostFirewallRule, PodTraceResolved, PodTraceRule, PodTraceSpec, PodTraceStatus,
};
pub use port::{
    KUBEVIRT_VM_LABEL, PERSISTENT_PORT_ANNOTATION, PIN_IP_ANNOTATION, PIN_MAC_ANNOTATION,
    PORT_INTERFACE_LABEL, PORT_WORKLOAD_LABEL, Port, PortList, PortSpec, PortStatus, WorkloadRef,
    workload_of,
};
pub use refs::{LocalVPCRef, VPCRef};
pub use security_group::{
    SecurityGroup, SecurityGroupEgressRule, SecurityGroupIngressRule, SecurityGroupList, SecurityGroupPeer,
    SecurityGroupPort, SecurityGroupSpec, SecurityGroupStatus,
};
pub use service_vip::{
    ServiceRef, ServiceVIP, ServiceVIPBackend, ServiceVIPBackendPort, ServiceVIPList, ServiceVIPPort,
    ServiceVIPSpec, ServiceVIPStatus,
};
pub use vpc::{VPC, VPCList, VPCSpec, VPCStatus};
pub use vpc_binding::{VPCBinding, VPCBindingList, VPCBindingSpec};
pub use vpc_gateway::{
    VPCGateway, VPCGatewayIngress, VPCGatewayList, VPCGatewayNAT, VPCGatewaySpec, VPCGatewayStatus,
};
pub use vpc_peering::{VPCPeering, VPCPeeringList, VPCPeeringSpec, VPCPeeringStatus};
pub use vpc_trace::{
    TRACE_KIND, VPCTrace, VPCTraceDirection, VPCTraceDoor, VPCTraceEndpoint, VPCTraceResolved, VPCTraceRule,
    VPCTraceSpec, VPCTraceStatus,
};

/// Condition types and reasons written by the controllers, per kind.
pub mod conditions {
    pub use super::floating_ip::conditions as floating_ip;
    pub use super::port::conditions as port;
    pub use super::security_group::conditions as security_group;
    pub use super::vpc_gateway::conditions as vpc_gateway;
    pub use super::vpc_peering::conditions as vpc_peering;
}

/// The version of this module's kinds.
pub const VERSION: &str = "v1alpha1";

/// `apiVersion` of every object in this module: `sdn.cozystack.io/v1alpha1`.
pub const API_VERSION: &str = "sdn.cozystack.io/v1alpha1";

/// The `kubectl` categories of every kind: `kubectl get sdn` lists them all.
pub const CATEGORIES: &[&str] = &["sdn"];

/// Every kind of this version, in the order of the table above.
pub const KINDS: &[KindInfo] = &[
    VPC::INFO,
    VPCBinding::INFO,
    VPCPeering::INFO,
    VPCGateway::INFO,
    Port::INFO,
    FloatingIP::INFO,
    ServiceVIP::INFO,
    SecurityGroup::INFO,
    HostFirewall::INFO,
];

/// Values of `status.phase`, shared by every kind that has one.
pub mod phase {
    /// Not (yet) usable; the conditions say why.
    pub const PENDING: &str = "Pending";
    /// Usable: the controller has allocated or verified everything the kind needs.
    pub const READY: &str = "Ready";
}

/// Values of `protocol` in port lists (`SecurityGroup`, `HostFirewall`, `ServiceVIP`).
pub mod protocol {
    /// TCP.
    pub const TCP: &str = "TCP";
    /// UDP.
    pub const UDP: &str = "UDP";
    /// SCTP.
    pub const SCTP: &str = "SCTP";
    /// ICMP (IPv4).
    pub const ICMP: &str = "ICMP";
    /// ICMPv6.
    pub const ICMPV6: &str = "ICMPv6";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_is_group_slash_version() {
        assert_eq!(API_VERSION, format!("{}/{}", crate::GROUP, VERSION));
    }

    #[test]
    fn names_are_unique_and_short_names_do_not_shadow_resources() {
        let mut seen = std::collections::HashSet::new();
        for k in KINDS {
            for name in [k.plural, k.singular].iter().chain(k.short_names) {
                assert!(seen.insert(*name), "{name} used twice");
            }
            assert_eq!(k.singular, k.kind.to_lowercase());
            assert_eq!(k.list_kind, format!("{}List", k.kind));
        }
        // Taken by FabricIP (local.sdn.cozystack.io).
        assert!(!seen.contains("fip"));
    }

    #[test]
    fn scopes_match_the_inventory() {
        let cluster: Vec<_> = KINDS.iter().filter(|k| !k.namespaced).map(|k| k.kind).collect();
        assert_eq!(cluster, ["Port", "ServiceVIP", "HostFirewall"]);
        let statusless: Vec<_> = KINDS.iter().filter(|k| !k.has_status).map(|k| k.kind).collect();
        assert_eq!(statusless, ["VPCBinding"]);
    }
}
