//! The upstream conformance tests of AdminNetworkPolicy (network-policy-api v0.1.8,
//! `conformance/tests/admin-network-policy-*.go`, standard and experimental) replayed as
//! truth tables: the "houses" world of `conformance/base/manifests.yaml` (namespaces and
//! pods with their labels and named container ports, synthetic pod IPs, the host-network
//! `centaur` pods on a kind cluster's workers), the same objects applied (`houses/manifests.rs`,
//! converted from the upstream YAML), the same patches in the same order (the subtests of
//! one Go test share the cluster, so a patch stays for the subtests after it), and each
//! `PokeServer` with the expectation of the Go test. A probe passes when the verdict over
//! the maps built from the compiler's diffs, the verdict over a fresh compile and the oracle
//! (`common/admin_oracle.rs`) all give the upstream answer.
//!
//! What is not reproduced: the probes' transport (agnhost `connect` must time out, not be
//! refused: the datapath drops, which the verdict does not distinguish), IPv6 (the pods are
//! IPv4; the upstream `/128` branch of the inline-CIDR tests is not taken), and the status
//! conditions upstream does not check either.

mod common;
mod houses;

use houses::{Houses, manifests, named, pod_ips_rule};

/// Upstream `conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go`,
/// `AdminNetworkPolicyEgressInlineCIDRPeers` (manifest
/// `conformance/base/admin_network_policy/standard-egress-inline-cidr-rules.yaml`).
#[test]
fn admin_network_policy_egress_inline_cidr_peers() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_egress_inline_cidr_rules());
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
    h.patch_anp("inline-cidr-as-peers-example", |a| a.spec.egress.insert(0, rule));
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

/// Upstream `conformance/tests/admin-network-policy-standard-egress-sctp-rules.go`,
/// `AdminNetworkPolicyEgressSCTP` (manifest
/// `conformance/base/admin_network_policy/standard-egress-sctp-rules.yaml`).
#[test]
fn admin_network_policy_egress_sctp() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_egress_sctp_rules());
    h.step("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected");
    h.poke("luna-lovegood-0", "sctp", "harry-potter-0", 9003, true);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-0", 9005, true);
    h.step("Should support an 'allow-egress' policy for SCTP protocol at the specified port");
    h.poke("luna-lovegood-0", "sctp", "cedric-diggory-1", 9003, true);
    h.poke("luna-lovegood-1", "sctp", "cedric-diggory-1", 9005, false);
    h.step("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected");
    h.patch_anp("egress-sctp", |a| {
        a.spec.egress.swap(0, 1);
    });
    h.poke("luna-lovegood-0", "sctp", "harry-potter-1", 9003, false);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-1", 9005, false);
    h.step("Should support a 'deny-egress' policy for SCTP protocol at the specified port");
    h.poke("luna-lovegood-0", "sctp", "draco-malfoy-0", 9003, false);
    h.poke("luna-lovegood-1", "sctp", "draco-malfoy-0", 9005, true);
    h.step("Should support an 'pass-egress' policy for SCTP protocol; ensure rule ordering is respected");
    h.patch_anp("egress-sctp", |a| {
        a.spec.egress.swap(0, 2);
    });
    h.poke("luna-lovegood-0", "sctp", "harry-potter-1", 9003, true);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-1", 9005, true);
    h.step("Should support a 'pass-egress' policy for SCTP protocol at the specified port");
    h.patch_anp("egress-sctp", |a| {
        a.spec.egress.swap(3, 4);
    });
    h.poke("luna-lovegood-0", "sctp", "draco-malfoy-0", 9003, true);
    h.poke("luna-lovegood-1", "sctp", "draco-malfoy-0", 9005, true);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-egress-tcp-rules.go`,
/// `AdminNetworkPolicyEgressTCP` (manifest
/// `conformance/base/admin_network_policy/standard-egress-tcp-rules.yaml`).
#[test]
fn admin_network_policy_egress_tcp() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_egress_tcp_rules());
    h.step("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected");
    h.poke("harry-potter-0", "tcp", "luna-lovegood-0", 80, true);
    h.poke("harry-potter-1", "tcp", "luna-lovegood-0", 8080, true);
    h.step("Should support an 'allow-egress' policy for TCP protocol at the specified port");
    h.poke("harry-potter-0", "tcp", "cedric-diggory-1", 8080, true);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-1", 80, false);
    h.step("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected");
    h.patch_anp("egress-tcp", |a| {
        a.spec.egress.swap(0, 1);
    });
    h.poke("harry-potter-0", "tcp", "luna-lovegood-1", 80, false);
    h.poke("harry-potter-1", "tcp", "luna-lovegood-1", 8080, false);
    h.step("Should support a 'deny-egress' policy for TCP protocol at the specified port");
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.step("Should support an 'pass-egress' policy for TCP protocol; ensure rule ordering is respected");
    h.patch_anp("egress-tcp", |a| {
        a.spec.egress.swap(0, 2);
    });
    h.poke("harry-potter-0", "tcp", "luna-lovegood-0", 80, true);
    h.poke("harry-potter-1", "tcp", "luna-lovegood-0", 8080, true);
    h.step("Should support a 'pass-egress' policy for TCP protocol at the specified port");
    h.patch_anp("egress-tcp", |a| {
        a.spec.egress.swap(3, 4);
    });
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, true);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-egress-udp-rules.go`,
/// `AdminNetworkPolicyEgressUDP` (manifest
/// `conformance/base/admin_network_policy/standard-egress-udp-rules.yaml`).
#[test]
fn admin_network_policy_egress_udp() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_egress_udp_rules());
    h.step("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected");
    h.poke("cedric-diggory-0", "udp", "luna-lovegood-0", 53, true);
    h.poke("cedric-diggory-1", "udp", "luna-lovegood-0", 5353, true);
    h.step("Should support an 'allow-egress' policy for UDP protocol at the specified port");
    h.poke("cedric-diggory-0", "udp", "harry-potter-1", 53, true);
    h.poke("cedric-diggory-1", "udp", "harry-potter-1", 5353, false);
    h.step("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected");
    h.patch_anp("egress-udp", |a| {
        a.spec.egress.swap(0, 1);
    });
    h.poke("cedric-diggory-0", "udp", "luna-lovegood-1", 53, false);
    h.poke("cedric-diggory-1", "udp", "luna-lovegood-1", 5353, false);
    h.step("Should support a 'deny-egress' policy for UDP protocol at the specified port");
    h.poke("cedric-diggory-0", "udp", "draco-malfoy-0", 5353, false);
    h.poke("cedric-diggory-1", "udp", "draco-malfoy-0", 53, true);
    h.step("Should support an 'pass-egress' policy for UDP protocol; ensure rule ordering is respected");
    h.patch_anp("egress-udp", |a| {
        a.spec.egress.swap(0, 2);
    });
    h.poke("cedric-diggory-0", "udp", "luna-lovegood-1", 5353, true);
    h.poke("cedric-diggory-1", "udp", "luna-lovegood-1", 53, true);
    h.step("Should support a 'pass-egress' policy for UDP protocol at the specified port");
    h.patch_anp("egress-udp", |a| {
        a.spec.egress.swap(3, 4);
    });
    h.poke("cedric-diggory-0", "udp", "draco-malfoy-0", 5353, true);
    h.poke("cedric-diggory-1", "udp", "draco-malfoy-0", 53, true);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-gress-rules.go`,
/// `AdminNetworkPolicyGress` (manifest
/// `conformance/base/admin_network_policy/standard-gress-rules-combined.yaml`).
#[test]
fn admin_network_policy_gress() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_gress_rules_combined());
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
    h.patch_anp("gress-rules", |a| {
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
    h.step("Should support an 'pass-gress' policy across different protocols");
    h.patch_anp("gress-rules", |a| {
        a.spec.egress.swap(0, 2);
        a.spec.ingress.swap(0, 2);
    });
    h.poke("harry-potter-0", "tcp", "luna-lovegood-0", 80, true);
    h.poke("harry-potter-0", "udp", "luna-lovegood-0", 5353, true);
    h.poke("harry-potter-0", "sctp", "luna-lovegood-0", 9003, true);
    h.poke("luna-lovegood-0", "tcp", "harry-potter-0", 80, true);
    h.poke("luna-lovegood-1", "udp", "harry-potter-0", 53, true);
    h.poke("luna-lovegood-1", "sctp", "harry-potter-0", 9003, true);
    h.step("Should support a 'pass-gress' policy across different protocols at the specified ports");
    h.patch_anp("gress-rules", |a| {
        a.spec.egress.swap(3, 4);
        a.spec.ingress.swap(3, 4);
    });
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, true);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.poke("harry-potter-0", "udp", "draco-malfoy-0", 53, true);
    h.poke("harry-potter-1", "udp", "draco-malfoy-0", 5353, true);
    h.poke("harry-potter-0", "sctp", "draco-malfoy-0", 9003, true);
    h.poke("harry-potter-1", "sctp", "draco-malfoy-0", 9005, true);
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, true);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.poke("draco-malfoy-0", "udp", "harry-potter-0", 53, true);
    h.poke("draco-malfoy-1", "udp", "harry-potter-0", 5353, true);
    h.poke("draco-malfoy-0", "sctp", "harry-potter-0", 9003, true);
    h.poke("draco-malfoy-1", "sctp", "harry-potter-0", 9005, true);
    h.finish(54);
}

/// Upstream `conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go`,
/// `AdminNetworkPolicyIngressSCTP` (manifest
/// `conformance/base/admin_network_policy/standard-ingress-sctp-rules.yaml`).
#[test]
fn admin_network_policy_ingress_sctp() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_ingress_sctp_rules());
    h.step("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected");
    h.poke("harry-potter-0", "sctp", "luna-lovegood-0", 9003, true);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-0", 9005, true);
    h.step("Should support an 'allow-ingress' policy for SCTP protocol at the specified port");
    h.poke("cedric-diggory-0", "sctp", "luna-lovegood-1", 9003, true);
    h.poke("cedric-diggory-1", "sctp", "luna-lovegood-1", 9005, false);
    h.step("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected");
    h.patch_anp("ingress-sctp", |a| {
        a.spec.ingress.swap(0, 1);
    });
    h.poke("harry-potter-0", "sctp", "luna-lovegood-1", 9003, false);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-1", 9005, false);
    h.step("Should support a 'deny-ingress' policy for SCTP protocol at the specified port");
    h.poke("draco-malfoy-0", "sctp", "luna-lovegood-0", 9003, false);
    h.poke("draco-malfoy-1", "sctp", "luna-lovegood-0", 9005, true);
    h.step("Should support an 'pass-ingress' policy for SCTP protocol; ensure rule ordering is respected");
    h.patch_anp("ingress-sctp", |a| {
        a.spec.ingress.swap(0, 2);
    });
    h.poke("harry-potter-0", "sctp", "luna-lovegood-1", 9003, true);
    h.poke("harry-potter-1", "sctp", "luna-lovegood-1", 9005, true);
    h.step("Should support a 'pass-ingress' policy for SCTP protocol at the specified port");
    h.patch_anp("ingress-sctp", |a| {
        a.spec.ingress.swap(3, 4);
    });
    h.poke("draco-malfoy-0", "sctp", "luna-lovegood-0", 9003, true);
    h.poke("draco-malfoy-1", "sctp", "luna-lovegood-0", 9005, true);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go`,
/// `AdminNetworkPolicyIngressTCP` (manifest
/// `conformance/base/admin_network_policy/standard-ingress-tcp-rules.yaml`).
#[test]
fn admin_network_policy_ingress_tcp() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_ingress_tcp_rules());
    h.step("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected");
    h.poke("luna-lovegood-0", "tcp", "harry-potter-0", 80, true);
    h.poke("luna-lovegood-1", "tcp", "harry-potter-0", 8080, true);
    h.step("Should support an 'allow-ingress' policy for TCP protocol at the specified port");
    h.poke("cedric-diggory-0", "tcp", "harry-potter-1", 80, true);
    h.poke("cedric-diggory-1", "tcp", "harry-potter-1", 8080, false);
    h.step("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected");
    h.patch_anp("ingress-tcp", |a| {
        a.spec.ingress.swap(0, 1);
    });
    h.poke("luna-lovegood-0", "tcp", "harry-potter-1", 80, false);
    h.poke("luna-lovegood-1", "tcp", "harry-potter-1", 8080, false);
    h.step("Should support a 'deny-ingress' policy for TCP protocol at the specified port");
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, false);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.step("Should support an 'pass-ingress' policy for TCP protocol; ensure rule ordering is respected");
    h.patch_anp("ingress-tcp", |a| {
        a.spec.ingress.swap(0, 2);
    });
    h.poke("luna-lovegood-0", "tcp", "harry-potter-0", 80, true);
    h.poke("luna-lovegood-1", "tcp", "harry-potter-0", 8080, true);
    h.step("Should support a 'pass-ingress' policy for TCP protocol at the specified port");
    h.patch_anp("ingress-tcp", |a| {
        a.spec.ingress.swap(3, 4);
    });
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, true);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-ingress-udp-rules.go`,
/// `AdminNetworkPolicyIngressUDP` (manifest
/// `conformance/base/admin_network_policy/standard-ingress-udp-rules.yaml`).
#[test]
fn admin_network_policy_ingress_udp() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_ingress_udp_rules());
    h.step("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected");
    h.poke("luna-lovegood-0", "udp", "cedric-diggory-0", 53, true);
    h.poke("luna-lovegood-1", "udp", "cedric-diggory-0", 5353, true);
    h.step("Should support an 'allow-ingress' policy for UDP protocol at the specified port");
    h.poke("harry-potter-0", "udp", "cedric-diggory-1", 53, true);
    h.poke("harry-potter-1", "udp", "cedric-diggory-1", 5353, false);
    h.step("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected");
    h.patch_anp("ingress-udp", |a| {
        a.spec.ingress.swap(0, 1);
    });
    h.poke("luna-lovegood-0", "udp", "cedric-diggory-1", 53, false);
    h.poke("luna-lovegood-1", "udp", "cedric-diggory-1", 5353, false);
    h.step("Should support a 'deny-ingress' policy for UDP protocol at the specified port");
    h.poke("draco-malfoy-0", "udp", "cedric-diggory-0", 5353, false);
    h.poke("draco-malfoy-1", "udp", "cedric-diggory-0", 53, true);
    h.step("Should support an 'pass-ingress' policy for UDP protocol; ensure rule ordering is respected");
    h.patch_anp("ingress-udp", |a| {
        a.spec.ingress.swap(0, 2);
    });
    h.poke("luna-lovegood-0", "udp", "cedric-diggory-1", 5353, true);
    h.poke("luna-lovegood-1", "udp", "cedric-diggory-1", 53, true);
    h.step("Should support a 'pass-ingress' policy for UDP protocol at the specified port");
    h.patch_anp("ingress-udp", |a| {
        a.spec.ingress.swap(3, 4);
    });
    h.poke("draco-malfoy-0", "udp", "cedric-diggory-0", 5353, true);
    h.poke("draco-malfoy-1", "udp", "cedric-diggory-0", 53, true);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-integration.go`,
/// `AdminNetworkPolicyIntegration` (manifest
/// `conformance/base/api_integration/standard-anp-np-banp.yaml`).
#[test]
fn admin_network_policy_integration() {
    let mut h = Houses::new();
    h.apply(manifests::standard_anp_np_banp());
    h.step("Should Deny traffic from slytherin to gryffindor respecting ANP");
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, false);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, false);
    h.step("Should Deny traffic to slytherin from gryffindor respecting ANP");
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, false);
    h.step("Should support a 'pass-ingress' policy for ANP and respect the match for network policy");
    h.patch_anp("pass-example", |a| {
        a.spec.ingress[0].action = "Pass".into();
    });
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, true);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.step("Should support a 'pass-egress' policy for ANP and respect the match for network policy");
    h.patch_anp("pass-example", |a| {
        a.spec.egress[0].action = "Pass".into();
    });
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, true);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.step("Should support a 'pass-ingress' policy for ANP and respect the match for baseline admin network policy");
    h.delete_np(
        "network-policy-conformance-gryffindor",
        "allow-gress-from-to-slytherin-to-gryffindor",
    );
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, false);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, false);
    h.step("Should support a 'pass-egress' policy for ANP and respect the match for baseline admin network policy");
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, false);
    h.finish(12);
}

/// Upstream `conformance/tests/admin-network-policy-standard-priority.go`,
/// `AdminNetworkPolicyPriorityField` (manifest
/// `conformance/base/admin_network_policy/standard-priority-field.yaml`).
#[test]
fn admin_network_policy_priority_field() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_priority_field());
    h.step("Should Deny traffic from slytherin to gryffindor respecting ANP");
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, false);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, false);
    h.step("Should Deny traffic to slytherin from gryffindor respecting ANP");
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, false);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, false);
    h.step("Should respect ANP priority field; thus passing both ingress and egress traffic over to BANP");
    h.patch_anp("old-priority-60-new-priority-40-example", |a| {
        a.spec.priority = 40;
    });
    h.poke("draco-malfoy-0", "tcp", "harry-potter-0", 80, true);
    h.poke("draco-malfoy-1", "tcp", "harry-potter-0", 8080, true);
    h.poke("harry-potter-0", "tcp", "draco-malfoy-0", 80, true);
    h.poke("harry-potter-1", "tcp", "draco-malfoy-0", 8080, true);
    h.finish(8);
}

/// Upstream `conformance/tests/admin-network-policy-experimental-egress-rules.go`,
/// `AdminNetworkPolicyEgressNamedPort` (manifest
/// `conformance/base/admin_network_policy/standard-egress-tcp-rules.yaml`).
#[test]
fn admin_network_policy_egress_named_port() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_egress_tcp_rules());
    h.step("Should support an 'allow-egress' policy for named port");
    h.patch_anp("egress-tcp", |a| {
        a.spec.egress[5].ports = Some(vec![named("web")]);
    });
    h.poke("harry-potter-0", "tcp", "cedric-diggory-1", 80, true);
    h.poke("harry-potter-1", "tcp", "cedric-diggory-1", 8080, false);
    h.finish(2);
}

/// Upstream `conformance/tests/admin-network-policy-experimental-egress-rules.go`,
/// `AdminNetworkPolicyEgressNodePeers` (manifest
/// `conformance/base/admin_network_policy/experimental-egress-selector-rules.yaml`).
#[test]
fn admin_network_policy_egress_node_peers() {
    let mut h = Houses::new();
    h.apply(manifests::anp_experimental_egress_selector_rules());
    h.step("Should support an 'allow-egress' rule policy for egress-node-peer");
    h.poke("harry-potter-1", "tcp", "centaur-1", 34345, true);
    h.step("Should support a 'pass-egress' rule policy for egress-node-peer");
    h.poke("harry-potter-1", "udp", "centaur-1", 34347, true);
    h.step("Should support a 'deny-egress' rule policy for egress-node-peer");
    h.poke("harry-potter-1", "tcp", "centaur-1", 34346, false);
    h.poke("harry-potter-1", "udp", "centaur-1", 34349, false);
    h.poke("harry-potter-1", "sctp", "centaur-1", 34351, false);
    h.finish(5);
}

/// Upstream `conformance/tests/admin-network-policy-experimental-ingress-rules.go`,
/// `AdminNetworkPolicyIngressNamedPort` (manifest
/// `conformance/base/admin_network_policy/standard-ingress-udp-rules.yaml`).
#[test]
fn admin_network_policy_ingress_named_port() {
    let mut h = Houses::new();
    h.apply(manifests::anp_standard_ingress_udp_rules());
    h.step("Should support an 'allow-ingress' policy for named port");
    h.patch_anp("ingress-udp", |a| {
        a.spec.ingress[5].ports = Some(vec![named("dns")]);
    });
    h.poke("harry-potter-0", "udp", "cedric-diggory-1", 53, true);
    h.poke("harry-potter-1", "udp", "cedric-diggory-1", 5353, false);
    h.finish(2);
}
