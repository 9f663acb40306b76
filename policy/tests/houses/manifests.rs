//! The ANP and BANP objects the upstream conformance tests apply, from network-policy-api
//! v0.1.8 `conformance/base/` (converted from YAML at test-writing time; the template
//! `{{ index .HostNetworkPorts N }}` is the suite's default, 34345 + N). One function per
//! upstream file, one value per YAML document.

use serde_json::{Value, json};

/// `conformance/base/admin_network_policy/experimental-egress-selector-rules.yaml`.
pub fn anp_experimental_egress_selector_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "node-and-cidr-as-peers-example"},
        "spec": {
            "priority": 75,
            "subject": {"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "gryffindor"}}, "podSelector": {"matchLabels": {"conformance-house": "gryffindor"}}}},
            "egress": [
                {"name": "allow-egress-to-34345-on-nodes", "action": "Allow", "to": [{"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 34345}}]},
                {"name": "pass-egress-to-34347-on-nodes", "action": "Pass", "to": [{"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 34347}}]},
                {"name": "deny-egress-to-slytherin-and-nodes-and-internet", "action": "Deny", "to": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}, {"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}}, {"networks": ["0.0.0.0/0", "::/0"]}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-egress-inline-cidr-rules.yaml`.
pub fn anp_standard_egress_inline_cidr_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "inline-cidr-as-peers-example"},
        "spec": {
            "priority": 85,
            "subject": {"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "gryffindor"}}, "podSelector": {"matchLabels": {"conformance-house": "gryffindor"}}}},
            "egress": [
                {"name": "allow-egress-to-slytherin", "action": "Allow", "to": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                {"name": "deny-egress-to-internet", "action": "Deny", "to": [{"networks": ["0.0.0.0/0", "::/0"]}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-egress-sctp-rules.yaml`.
pub fn anp_standard_egress_sctp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "egress-sctp"},
        "spec": {
            "priority": 8,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}},
            "egress": [
                {"name": "allow-to-gryffindor-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-to-gryffindor-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "pass-to-gryffindor-everything", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-to-slytherin-at-port-9003", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "pass-to-slytherin-at-port-9003", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-to-hufflepuff-at-port-9003", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-to-hufflepuff-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-egress-tcp-rules.yaml`.
pub fn anp_standard_egress_tcp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "egress-tcp"},
        "spec": {
            "priority": 6,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "egress": [
                {"name": "allow-to-ravenclaw-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-ravenclaw-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "pass-to-ravenclaw-everything", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-slytherin-at-port-80", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "pass-to-slytherin-at-port-80", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "allow-to-hufflepuff-at-port-8080", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 8080}}]},
                {"name": "deny-to-hufflepuff-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-egress-udp-rules.yaml`.
pub fn anp_standard_egress_udp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "egress-udp"},
        "spec": {
            "priority": 7,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}},
            "egress": [
                {"name": "allow-to-ravenclaw-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-ravenclaw-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "pass-to-ravenclaw-everything", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-slytherin-at-port-5353", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 5353}}]},
                {"name": "pass-to-slytherin-at-port-5353", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 5353}}]},
                {"name": "allow-to-gryffindor-at-port-53", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 53}}]},
                {"name": "deny-to-gryffindor-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-gress-rules-combined.yaml`.
pub fn anp_standard_gress_rules_combined() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "gress-rules"},
        "spec": {
            "priority": 15,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "egress": [
                {"name": "allow-to-ravenclaw-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-ravenclaw-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "pass-to-ravenclaw-everything", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-slytherin-at-ports-80-53-9003", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 53}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "pass-to-slytherin-at-port-80-53-9003", "action": "Pass", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 53}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-to-hufflepuff-at-ports-8080-5353-9003", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 8080}}, {"portNumber": {"protocol": "UDP", "port": 5353}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-to-hufflepuff-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
            "ingress": [
                {"name": "allow-from-ravenclaw-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-ravenclaw-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "pass-from-ravenclaw-everything", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-slytherin-at-port-80-53-9003", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 53}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "pass-from-slytherin-at-port-80-53-9003", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 53}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-from-hufflepuff-at-port-80-5353-9003", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 5353}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-from-hufflepuff-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-ingress-sctp-rules.yaml`.
pub fn anp_standard_ingress_sctp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "ingress-sctp"},
        "spec": {
            "priority": 5,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}},
            "ingress": [
                {"name": "allow-from-gryffindor-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-from-gryffindor-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "pass-from-gryffindor-everything", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-from-slytherin-at-port-9003", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "pass-from-slytherin-at-port-9003", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-from-hufflepuff-at-port-9003", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-from-hufflepuff-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-ingress-tcp-rules.yaml`.
pub fn anp_standard_ingress_tcp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "ingress-tcp"},
        "spec": {
            "priority": 3,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "ingress": [
                {"name": "allow-from-ravenclaw-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-ravenclaw-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "pass-from-ravenclaw-everything", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-slytherin-at-port-80", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "pass-from-slytherin-at-port-80", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "allow-from-hufflepuff-at-port-80", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "deny-from-hufflepuff-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-ingress-udp-rules.yaml`.
pub fn anp_standard_ingress_udp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "ingress-udp"},
        "spec": {
            "priority": 4,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}},
            "ingress": [
                {"name": "allow-from-ravenclaw-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-ravenclaw-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "pass-from-ravenclaw-everything", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-slytherin-at-port-5353", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 5353}}]},
                {"name": "pass-from-slytherin-at-port-5353", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 5353}}]},
                {"name": "allow-from-gryffindor-at-port-53", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 53}}]},
                {"name": "deny-from-gryffindor-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
            ],
        },
    })]
}

/// `conformance/base/admin_network_policy/standard-priority-field.yaml`.
pub fn anp_standard_priority_field() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": {"name": "priority-50-example"},
            "spec": {
                "priority": 50,
                "subject": {"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "gryffindor"}}, "podSelector": {"matchLabels": {"conformance-house": "gryffindor"}}}},
                "ingress": [
                    {"name": "deny-all-ingress-from-slytherin", "action": "Deny", "from": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                ],
                "egress": [
                    {"name": "deny-all-egress-to-slytherin", "action": "Deny", "to": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                ],
            },
        }),
        json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": {"name": "old-priority-60-new-priority-40-example"},
            "spec": {
                "priority": 60,
                "subject": {"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "gryffindor"}}, "podSelector": {"matchLabels": {"conformance-house": "gryffindor"}}}},
                "ingress": [
                    {"name": "pass-all-ingress-from-slytherin", "action": "Pass", "from": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                ],
                "egress": [
                    {"name": "pass-all-egress-to-slytherin", "action": "Pass", "to": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                ],
            },
        }),
        json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "BaselineAdminNetworkPolicy",
            "metadata": {"name": "default"},
            "spec": {
                "subject": {"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "gryffindor"}}, "podSelector": {"matchLabels": {"conformance-house": "gryffindor"}}}},
                "ingress": [
                    {"name": "allow-all-ingress-from-slytherin", "action": "Allow", "from": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                ],
                "egress": [
                    {"name": "allow-all-egress-to-slytherin", "action": "Allow", "to": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                ],
            },
        }),
    ]
}

/// `conformance/base/api_integration/standard-anp-np-banp.yaml`.
pub fn standard_anp_np_banp() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": {"name": "pass-example"},
            "spec": {
                "priority": 10,
                "subject": {"namespaces": {"matchLabels": {"conformance-house": "gryffindor"}}},
                "ingress": [
                    {"name": "deny-all-ingress-from-slytherin", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"conformance-house": "slytherin"}}}]},
                ],
                "egress": [
                    {"name": "deny-all-egress-to-slytherin", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"conformance-house": "slytherin"}}}]},
                ],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "allow-gress-from-to-slytherin-to-gryffindor", "namespace": "network-policy-conformance-gryffindor"},
            "spec": {
                "podSelector": null,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"from": [{"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}}]},
                ],
                "egress": [
                    {"to": [{"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}}]},
                ],
            },
        }),
        json!({
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "BaselineAdminNetworkPolicy",
            "metadata": {"name": "default"},
            "spec": {
                "subject": {"namespaces": {"matchLabels": {"conformance-house": "gryffindor"}}},
                "ingress": [
                    {"name": "deny-all-ingress-from-slytherin", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"conformance-house": "slytherin"}}}]},
                ],
                "egress": [
                    {"name": "deny-all-egress-to-slytherin", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"conformance-house": "slytherin"}}}]},
                ],
            },
        }),
    ]
}

/// `conformance/base/baseline_admin_network_policy/experimental-egress-selector-rules.yaml`.
pub fn banp_experimental_egress_selector_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "egress": [
                {"name": "allow-egress-to-34345-on-nodes", "action": "Allow", "to": [{"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}}], "ports": [{"portRange": {"protocol": "TCP", "start": 34345, "end": 34346}}]},
                {"name": "deny-egress-to-nodes-and-internet", "action": "Deny", "to": [{"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}}, {"networks": ["0.0.0.0/0", "::/0"]}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-egress-inline-cidr-rules.yaml`.
pub fn banp_standard_egress_inline_cidr_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "egress": [
                {"name": "allow-egress-to-slytherin", "action": "Allow", "to": [{"pods": {"namespaceSelector": {"matchLabels": {"conformance-house": "slytherin"}}, "podSelector": {"matchLabels": {"conformance-house": "slytherin"}}}}]},
                {"name": "deny-egress-to-internet", "action": "Deny", "to": [{"networks": ["0.0.0.0/0", "::/0"]}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-egress-sctp-rules.yaml`.
pub fn banp_standard_egress_sctp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}},
            "egress": [
                {"name": "allow-to-gryffindor-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-to-gryffindor-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-to-slytherin-at-port-9003", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-to-hufflepuff-at-port-9003", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-to-hufflepuff-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-egress-tcp-rules.yaml`.
pub fn banp_standard_egress_tcp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "egress": [
                {"name": "allow-to-ravenclaw-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-ravenclaw-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-slytherin-at-port-80", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "allow-to-hufflepuff-at-port-8080", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 8080}}]},
                {"name": "deny-to-hufflepuff-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-egress-udp-rules.yaml`.
pub fn banp_standard_egress_udp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}},
            "egress": [
                {"name": "allow-to-ravenclaw-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-ravenclaw-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-slytherin-at-port-5353", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 5353}}]},
                {"name": "allow-to-gryffindor-at-port-53", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 53}}]},
                {"name": "deny-to-gryffindor-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-gress-rules-combined.yaml`.
pub fn banp_standard_gress_rules_combined() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "egress": [
                {"name": "allow-to-ravenclaw-everything", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-ravenclaw-everything", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-to-slytherin-at-ports-80-53-9003", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 53}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-to-hufflepuff-at-ports-8080-5353", "action": "Allow", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 8080}}, {"portNumber": {"protocol": "UDP", "port": 5353}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-to-hufflepuff-everything-else", "action": "Deny", "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
            "ingress": [
                {"name": "allow-from-ravenclaw-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-ravenclaw-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-slytherin-at-port-80-53-9003", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 53}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-from-hufflepuff-at-port-80-5353-9003", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}, {"portNumber": {"protocol": "UDP", "port": 5353}}, {"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-from-hufflepuff-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-ingress-sctp-rules.yaml`.
pub fn banp_standard_ingress_sctp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}},
            "ingress": [
                {"name": "allow-from-gryffindor-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-from-gryffindor-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
                {"name": "deny-from-slytherin-at-port-9003", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "allow-from-hufflepuff-at-port-9003", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "SCTP", "port": 9003}}]},
                {"name": "deny-from-hufflepuff-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-ingress-tcp-rules.yaml`.
pub fn banp_standard_ingress_tcp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}},
            "ingress": [
                {"name": "allow-from-ravenclaw-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-ravenclaw-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-slytherin-at-port-80", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "allow-from-hufflepuff-at-port-80", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}], "ports": [{"portNumber": {"protocol": "TCP", "port": 80}}]},
                {"name": "deny-from-hufflepuff-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}}]},
            ],
        },
    })]
}

/// `conformance/base/baseline_admin_network_policy/standard-ingress-udp-rules.yaml`.
pub fn banp_standard_ingress_udp_rules() -> Vec<Value> {
    vec![json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-hufflepuff"}}},
            "ingress": [
                {"name": "allow-from-ravenclaw-everything", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-ravenclaw-everything", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-ravenclaw"}}}]},
                {"name": "deny-from-slytherin-at-port-5353", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-slytherin"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 5353}}]},
                {"name": "allow-from-gryffindor-at-port-53", "action": "Allow", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}], "ports": [{"portNumber": {"protocol": "UDP", "port": 53}}]},
                {"name": "deny-from-gryffindor-everything-else", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "network-policy-conformance-gryffindor"}}}]},
            ],
        },
    })]
}
