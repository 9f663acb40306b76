//! Validation and defaulting of every `sdn.cozystack.io` kind: pure functions from objects to
//! field errors.
//!
//! # What is here
//!
//! - [`field`]: [`FieldPath`], [`ErrorType`], [`FieldError`] and [`FieldErrors`], the data a
//!   `422 Invalid` Status is built from ([`FieldErrors::invalid_status`]);
//! - [`meta`]: the `metadata` rules every object follows ([`validate_object_meta`],
//!   [`validate_object_meta_update`]) and label selectors embedded in specs
//!   ([`validate_label_selector`]);
//! - [`format`](mod@format): Kubernetes string formats (DNS labels and subdomains, qualified names, label
//!   values);
//! - one public module per kind, each with `validate_<kind>` (create: metadata and spec),
//!   `validate_<kind>_update` (the create rules, the metadata update rules, and the kind's
//!   immutable fields) and, where the kind has defaults, `default_<kind>`. Each module's
//!   documentation lists its rules.
//!
//! # How the server uses it
//!
//! On create: `default_<kind>` (after `metadata.namespace` and a generated name are filled in),
//! then `validate_<kind>`; on update: `default_<kind>`, then `validate_<kind>_update(new, old)`.
//! The kind validators already include the metadata rules, so the server must not run
//! [`validate_object_meta`] a second time. A non-empty result becomes one 422 with every
//! problem, one cause per field path.
//!
//! Defaults (everything else is stored as sent):
//!
//! | kind | default |
//! |---|---|
//! | `VPCBinding` | empty `spec.vpcRef.namespace` ← the binding's namespace ([`default_vpc_binding`]) |
//! | `SecurityGroup` | empty port `protocol` ← `TCP` ([`default_security_group`]) |
//! | `HostFirewall` | empty port `protocol` ← `TCP` ([`default_host_firewall`]) |
//! | `ServiceVIP` | empty port `protocol` ← `TCP` ([`default_service_vip`]) |
//!
//! Not defaulted on purpose: `VPC.spec.mtu` (0 means "each node's default", resolved by the
//! agent) and `HostFirewall.spec.policyTypes` (derived from the rules by the agent each time).
//!
//! # Why stricter than the Go server
//!
//! The Go server validated little (VPC, FloatingIP and VPCGateway updates not at all) and left
//! consumers to skip what they did not understand: a VPC range with host bits, an unknown
//! SecurityGroup protocol, or a binding without a namespace was accepted and then silently did
//! nothing. Every such value is a mistake the writer wants to hear about, so here it is
//! rejected with its path and the expected form. Checks that need other objects (does the VPC
//! exist, is a Port's VNI its VPC's, the `export`/`peer` authorization) are the server's, not
//! these pure functions'.

pub mod field;
pub mod format;
pub mod meta;

mod common;
pub mod status;
#[cfg(test)]
mod test_util;

pub mod dhcp;
pub mod floating_ip;
pub mod host_firewall;
pub mod port;
pub mod security_group;
pub mod service_vip;
pub mod vpc;
pub mod vpc_binding;
pub mod vpc_gateway;
pub mod vpc_peering;

pub use dhcp::validate_guest_config;
pub use field::{ErrorType, FieldError, FieldErrors, FieldPath};
pub use floating_ip::{validate_floating_ip, validate_floating_ip_update};
pub use host_firewall::{
    HOST_FIREWALL_PROTOCOLS, MAX_PORT_RANGE, POLICY_TYPES, default_host_firewall, validate_host_firewall,
    validate_host_firewall_update,
};
pub use meta::{
    ANNOTATIONS_MAX_BYTES, NameRule, SELECTOR_OPERATORS, validate_annotations, validate_label_selector,
    validate_labels, validate_object_meta, validate_object_meta_named, validate_object_meta_update,
};
pub use port::{validate_port, validate_port_update};
pub use security_group::{
    SECURITY_GROUP_PROTOCOLS, default_security_group, validate_security_group, validate_security_group_update,
};
pub use service_vip::{
    PHASES, SERVICE_VIP_PROTOCOLS, SESSION_AFFINITIES, default_service_vip, validate_service_vip,
    validate_service_vip_status, validate_service_vip_status_update, validate_service_vip_update,
};
pub use vpc::{
    MAX_IPV4_PREFIX, MAX_IPV6_PREFIX, MAX_MTU, MAX_RANGES_PER_FAMILY, MIN_MTU, validate_vpc,
    validate_vpc_ranges_in_use, validate_vpc_spec, validate_vpc_update,
};
pub use vpc_binding::{default_vpc_binding, validate_vpc_binding, validate_vpc_binding_update};
pub use vpc_gateway::{validate_vpc_gateway, validate_vpc_gateway_update};
pub use vpc_peering::{validate_vpc_peering, validate_vpc_peering_update};
