//! The upstream conformance tests of BaselineAdminNetworkPolicy (network-policy-api
//! v0.1.8, `conformance/tests/baseline-admin-network-policy-*.go`, standard and
//! experimental) replayed as truth tables over the "houses" world; see
//! `admin_conformance.rs` for how, and what is not reproduced.

mod common;
mod houses;

use houses::{Houses, manifests, named, pod_ips_rule};

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go`,
/// `BaselineAdminNetworkPolicyEgressInlineCIDRPeers` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-egress-inline-cidr-rules.yaml`).
#[test]
fn baseline_admin_network_policy_egress_inline_cidr_peers() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_egress_inline_cidr_rules());
    h.step("Should support a 'deny-egress' rule policy for egress-cidr-peer");
    h.poke("harry-potter-1", "tcp", "luna-lovegood-0", 80, false);
    h.poke("harry-potter-1", "udp", "luna-lovegood-0", 53, false);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-0", 9003, false);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-0", 80, false);
    h.poke("harry-potter-1", "udp", "cedric-diggory-0", 53, false);
    h.poke("harry-potter-1", "sctp", "cedric-diggory-0", 9003, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 80, true);
    h.poke("harry-potter-1", "udp", "draco-malfoy-0", 53, true);
    h.poke("harry-potter-1", "sctp", "draco-malfoy-0", 9003, true);
    h.step("Should support an 'allow-egress' rule policy for egress-cidr-peer");
    let rule = pod_ips_rule(&h, "luna-lovegood-0", "cedric-diggory-0");
    h.patch_banp(|a| a.spec.egress.insert(0, rule));
    h.poke("harry-potter-1", "tcp", "luna-lovegood-0", 80, true);
    h.poke("harry-potter-1", "udp", "luna-lovegood-0", 53, true);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-0", 9003, true);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-0", 80, true);
    h.poke("harry-potter-1", "udp", "cedric-diggory-0", 53, true);
    h.poke("harry-potter-1", "sctp", "cedric-diggory-0", 9003, true);
    h.poke("harry-potter-1", "tcp", "luna-lovegood-1", 80, false);
    h.poke("harry-potter-1", "udp", "luna-lovegood-1", 53, false);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-1", 9003, false);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-1", 80, false);
    h.poke("harry-potter-1", "udp", "cedric-diggory-1", 53, false);
    h.poke("harry-potter-1", "sctp", "cedric-diggory-1", 9003, false);
    h.finish(21);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-egress-sctp-rules.go`,
/// `BaselineAdminNetworkPolicyEgressSCTP` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-egress-sctp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_egress_sctp() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_egress_sctp_rules());
    h.step("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected");
    h.poke("luna-lovegood-0", "sctp", "harry-potter-0", 9003, true);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-0", 9005, true);
    h.step("Should support an 'allow-egress' policy for SCTP protocol at the specified port");
    h.poke("luna-lovegood-0", "sctp", "cedric-diggory-1", 9003, true);
    h.poke("luna-lovegood-1", "sctp", "cedric-diggory-1", 9005, false);
    h.step("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected");
    h.patch_banp(|a| {
        a.spec.egress.swap(0, 1);
    });
    h.poke("luna-lovegood-0", "sctp", "harry-potter-1", 9003, false);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-1", 9005, false);
    h.step("Should support a 'deny-egress' policy for SCTP protocol at the specified port");
    h.poke("luna-lovegood-0", "sctp", "draco-malfoy-0", 9003, false);
    h.poke("luna-lovegood-1", "sctp", "draco-malfoy-0", 9005, true);
    h.finish(8);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-egress-tcp-rules.go`,
/// `BaselineAdminNetworkPolicyEgressTCP` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-egress-tcp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_egress_tcp() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_egress_tcp_rules());
    h.step("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected");
    h.poke("harry-potter-0", "tcp", "luna-lovegood-0", 80, true);
    h.poke("harry-potter-1", "tcp", "luna-lovegood-0", 8080, true);
    h.step("Should support an 'allow-egress' policy for TCP protocol at the specified port");
    h.poke("harry-potter-0", "tcp", "cedric-diggory-1", 8080, true);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-1", 80, false);
    h.step("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected");
    h.patch_banp(|a| {
        a.spec.egress.swap(0, 1);
    });
    h.poke("harry-potter-0", "tcp", "luna-lovegood-1", 80, false);
    h.poke("harry-potter-1", "tcp", "luna-lovegood-1", 8080, false);
    h.step("Should support a 'deny-egress' policy for TCP protocol at the specified port");
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.finish(8);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-egress-udp-rules.go`,
/// `BaselineAdminNetworkPolicyEgressUDP` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-egress-udp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_egress_udp() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_egress_udp_rules());
    h.step("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected");
    h.poke("cedric-diggory-0", "udp", "luna-lovegood-0", 53, true);
    h.poke("cedric-diggory-1", "udp", "luna-lovegood-0", 5353, true);
    h.step("Should support an 'allow-egress' policy for UDP protocol at the specified port");
    h.poke("cedric-diggory-0", "udp", "harry-potter-1", 53, true);
    h.poke("cedric-diggory-1", "udp", "harry-potter-1", 5353, false);
    h.step("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected");
    h.patch_banp(|a| {
        a.spec.egress.swap(0, 1);
    });
    h.poke("cedric-diggory-0", "udp", "luna-lovegood-1", 53, false);
    h.poke("cedric-diggory-1", "udp", "luna-lovegood-1", 5353, false);
    h.step("Should support a 'deny-egress' policy for UDP protocol at the specified port");
    h.poke("cedric-diggory-0", "udp", "draco-malfoy-0", 5353, false);
    h.poke("cedric-diggory-1", "udp", "draco-malfoy-0", 53, true);
    h.finish(8);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-gress-rules.go`,
/// `BaselineAdminNetworkPolicyGress` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-gress-rules-combined.yaml`).
#[test]
fn baseline_admin_network_policy_gress() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_gress_rules_combined());
    h.step("Should support an 'allow-gress' policy across different protocols");
    h.poke("harry-potter-0", "tcp", "luna-lovegood-0", 80, true);
    h.poke("harry-potter-1", "udp", "luna-lovegood-0", 53, true);
    h.poke("harry-potter-0", "sctp", "luna-lovegood-0", 9003, true);
    h.poke("luna-lovegood-0", "tcp", "harry-potter-0", 80, true);
    h.poke("luna-lovegood-1", "udp", "harry-potter-0", 53, true);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-0", 9003, true);
    h.step("Should support an 'allow-gress' policy across different protocols at the specified ports");
    h.poke("harry-potter-0", "tcp", "cedric-diggory-1", 8080, true);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-1", 80, false);
    h.poke("harry-potter-0", "udp", "cedric-diggory-1", 5353, true);
    h.poke("harry-potter-1", "udp", "cedric-diggory-1", 53, false);
    h.poke("harry-potter-0", "sctp", "cedric-diggory-1", 9003, true);
    h.poke("harry-potter-1", "sctp", "cedric-diggory-1", 9005, false);
    h.poke("cedric-diggory-0", "tcp", "harry-potter-1", 80, true);
    h.poke("cedric-diggory-1", "tcp", "harry-potter-1", 8080, false);
    h.poke("cedric-diggory-0", "udp", "harry-potter-1", 5353, true);
    h.poke("cedric-diggory-1", "udp", "harry-potter-1", 53, false);
    h.poke("cedric-diggory-0", "sctp", "harry-potter-1", 9003, true);
    h.poke("cedric-diggory-1", "sctp", "harry-potter-1", 9005, false);
    h.step("Should support an 'deny-gress' policy across different protocols");
    h.patch_banp(|a| {
        a.spec.egress.swap(0, 1);
        a.spec.ingress.swap(0, 1);
    });
    h.poke("harry-potter-0", "tcp", "luna-lovegood-1", 80, false);
    h.poke("harry-potter-1", "udp", "luna-lovegood-1", 53, false);
    h.poke("harry-potter-0", "sctp", "luna-lovegood-1", 9003, false);
    h.poke("luna-lovegood-0", "tcp", "harry-potter-1", 80, false);
    h.poke("luna-lovegood-1", "udp", "harry-potter-1", 53, false);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-1", 9003, false);
    h.step("Should support a 'deny-gress' policy across different protocols at the specified ports");
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.poke("harry-potter-0", "udp", "draco-malfoy-0", 53, false);
    h.poke("harry-potter-1", "udp", "draco-malfoy-0", 5353, true);
    h.poke("harry-potter-0", "sctp", "draco-malfoy-0", 9003, false);
    h.poke("harry-potter-1", "sctp", "draco-malfoy-0", 9005, true);
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, false);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.poke("draco-malfoy-0", "udp", "harry-potter-0", 53, false);
    h.poke("draco-malfoy-1", "udp", "harry-potter-0", 5353, true);
    h.poke("draco-malfoy-0", "sctp", "harry-potter-0", 9003, false);
    h.poke("draco-malfoy-1", "sctp", "harry-potter-0", 9005, true);
    h.finish(36);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-ingress-sctp-rules.go`,
/// `BaselineAdminNetworkPolicyIngressSCTP` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-ingress-sctp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_ingress_sctp() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_ingress_sctp_rules());
    h.step("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected");
    h.poke("harry-potter-0", "sctp", "luna-lovegood-0", 9003, true);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-0", 9005, true);
    h.step("Should support an 'allow-ingress' policy for SCTP protocol at the specified port");
    h.poke("cedric-diggory-0", "sctp", "luna-lovegood-1", 9003, true);
    h.poke("cedric-diggory-1", "sctp", "luna-lovegood-1", 9005, false);
    h.step("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected");
    h.patch_banp(|a| {
        a.spec.ingress.swap(0, 1);
    });
    h.poke("harry-potter-0", "sctp", "luna-lovegood-1", 9003, false);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-1", 9005, false);
    h.step("Should support a 'deny-ingress' policy for SCTP protocol at the specified port");
    h.poke("draco-malfoy-0", "sctp", "luna-lovegood-0", 9003, false);
    h.poke("draco-malfoy-1", "sctp", "luna-lovegood-0", 9005, true);
    h.finish(8);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-ingress-tcp-rules.go`,
/// `BaselineAdminNetworkPolicyIngressTCP` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-ingress-tcp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_ingress_tcp() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_ingress_tcp_rules());
    h.step("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected");
    h.poke("luna-lovegood-0", "tcp", "harry-potter-0", 80, true);
    h.poke("luna-lovegood-1", "tcp", "harry-potter-0", 8080, true);
    h.step("Should support an 'allow-ingress' policy for TCP protocol at the specified port");
    h.poke("cedric-diggory-0", "tcp", "harry-potter-1", 80, true);
    h.poke("cedric-diggory-1", "tcp", "harry-potter-1", 8080, false);
    h.step("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected");
    h.patch_banp(|a| {
        a.spec.ingress.swap(0, 1);
    });
    h.poke("luna-lovegood-0", "tcp", "harry-potter-1", 80, false);
    h.poke("luna-lovegood-1", "tcp", "harry-potter-1", 8080, false);
    h.step("Should support a 'deny-ingress' policy for TCP protocol at the specified port");
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, false);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.finish(8);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-standard-ingress-udp-rules.go`,
/// `BaselineAdminNetworkPolicyIngressUDP` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-ingress-udp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_ingress_udp() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_ingress_udp_rules());
    h.step("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected");
    h.poke("luna-lovegood-0", "udp", "cedric-diggory-0", 53, true);
    h.poke("luna-lovegood-1", "udp", "cedric-diggory-0", 5353, true);
    h.step("Should support an 'allow-ingress' policy for UDP protocol at the specified port");
    h.poke("harry-potter-0", "udp", "cedric-diggory-1", 53, true);
    h.poke("harry-potter-1", "udp", "cedric-diggory-1", 5353, false);
    h.step("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected");
    h.patch_banp(|a| {
        a.spec.ingress.swap(0, 1);
    });
    h.poke("luna-lovegood-0", "udp", "cedric-diggory-1", 53, false);
    h.poke("luna-lovegood-1", "udp", "cedric-diggory-1", 5353, false);
    h.step("Should support a 'deny-ingress' policy for UDP protocol at the specified port");
    h.poke("draco-malfoy-0", "udp", "cedric-diggory-0", 5353, false);
    h.poke("draco-malfoy-1", "udp", "cedric-diggory-0", 53, true);
    h.finish(8);
}
/// Upstream `conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go`,
/// `BaselineAdminNetworkPolicyEgressNamedPort` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-egress-udp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_egress_named_port() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_egress_udp_rules());
    h.step("Should support an 'allow-egress' policy for named port");
    h.patch_banp(|a| {
        a.spec.egress[3].ports = Some(vec![named("dns")]);
    });
    h.poke("cedric-diggory-0", "udp", "harry-potter-1", 53, true);
    h.poke("cedric-diggory-1", "udp", "harry-potter-1", 5353, false);
    h.finish(2);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go`,
/// `BaselineAdminNetworkPolicyEgressNodePeers` (manifest
/// `conformance/base/baseline_admin_network_policy/experimental-egress-selector-rules.yaml`).
#[test]
fn baseline_admin_network_policy_egress_node_peers() {
    let mut h = Houses::new();
    h.apply(manifests::banp_experimental_egress_selector_rules());
    h.step("Should support an 'allow-egress' rule policy for egress-node-peer");
    h.poke("harry-potter-0", "tcp", "centaur-1", 34345, true);
    h.poke("harry-potter-1", "tcp", "centaur-1", 34346, true);
    h.step("Should support a 'deny-egress' rule policy for egress-node-peer");
    h.poke("harry-potter-1", "udp", "centaur-1", 34349, false);
    h.poke("harry-potter-1", "sctp", "centaur-1", 34351, false);
    h.finish(4);
}

/// Upstream `conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go`,
/// `BaselineAdminNetworkPolicyIngressNamedPort` (manifest
/// `conformance/base/baseline_admin_network_policy/standard-ingress-tcp-rules.yaml`).
#[test]
fn baseline_admin_network_policy_ingress_named_port() {
    let mut h = Houses::new();
    h.apply(manifests::banp_standard_ingress_tcp_rules());
    h.step("Should support an 'allow-ingress' policy for named port");
    h.patch_banp(|a| {
        a.spec.ingress[3].ports = Some(vec![named("web")]);
    });
    h.poke("cedric-diggory-0", "tcp", "harry-potter-1", 80, true);
    h.poke("cedric-diggory-1", "tcp", "harry-potter-1", 8080, false);
    h.finish(2);
}
