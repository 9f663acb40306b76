//! Wire form and schema of every kind: full examples round-trip unchanged, every schema property
//! is documented, and the schemas' `required` lists match what serialization always writes.

use cozyplane_apis::v1alpha1::*;
use cozyplane_apis::{ApiKind, ApiObject, GROUP, HasSpecStatus, List};
use kube_core::Resource;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

fn condition(kind: &str) -> Value {
    json!({
        "type": kind,
        "status": "True",
        "observedGeneration": 2,
        "lastTransitionTime": "2026-07-01T10:00:00Z",
        "reason": kind,
        "message": "all good",
    })
}

fn metadata(namespaced: bool, name: &str) -> Value {
    let mut meta = json!({
        "name": name,
        "uid": "3f1c8e2a-5b7d-4c1e-9a2f-0123456789ab",
        "resourceVersion": "42",
        "generation": 2,
        "creationTimestamp": "2026-07-01T09:00:00Z",
        "labels": { "team": "blue" },
        "annotations": { "note": "example" },
        "finalizers": ["sdn.cozystack.io/sever"],
    });
    if namespaced {
        meta["namespace"] = json!("tenant-a");
    }
    meta
}

/// A full example of `K` (every field set), as JSON.
fn example<K: ApiKind>(spec: Value, status: Option<Value>) -> Value {
    let mut obj = json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": K::KIND,
        "metadata": metadata(K::NAMESPACED, "example"),
    });
    obj["spec"] = spec;
    if let Some(status) = status {
        obj["status"] = status;
    }
    obj
}

fn examples() -> Vec<(&'static str, Value)> {
    let vpc_ref = json!({ "namespace": "tenant-b", "name": "prod" });
    vec![
        (
            VPC::KIND,
            example::<VPC>(
                json!({ "cidrs": ["10.0.0.0/24", "fd00:10::/64"], "mtu": 1400, "dns64": true }),
                Some(json!({ "vni": 100, "phase": "Ready", "conditions": [condition("Ready")] })),
            ),
        ),
        (
            VPCBinding::KIND,
            example::<VPCBinding>(json!({ "vpcRef": vpc_ref }), None),
        ),
        (
            VPCPeering::KIND,
            example::<VPCPeering>(
                json!({ "vpcRef": { "name": "prod" }, "peerRef": vpc_ref }),
                Some(json!({
                    "phase": "Ready",
                    "peerVNI": 101,
                    "conditions": [condition("PeerMatched"), condition("CIDRsDisjoint")],
                })),
            ),
        ),
        (
            VPCGateway::KIND,
            example::<VPCGateway>(
                json!({
                    "vpcRef": { "name": "prod" },
                    "loadBalancerClass": "metallb",
                    "nat": { "enabled": true, "addressClaimName": "egress4", "addressClaimName6": "egress6" },
                    "ingress": { "loadBalancer": true },
                }),
                Some(json!({
                    "natAddress": "192.0.2.10",
                    "natAddress6": "2001:db8::10",
                    "phase": "Ready",
                    "conditions": [condition("Exclusive")],
                })),
            ),
        ),
        (
            Port::KIND,
            example::<Port>(
                json!({
                    "vpcRef": vpc_ref,
                    "ip": "10.0.0.2",
                    "mac": "02:00:0a:00:00:02",
                    "node": "node-1",
                    "nodeIP": "172.18.0.2",
                    "podNamespace": "tenant-a",
                    "podName": "web-0",
                    "gateway": true,
                }),
                Some(json!({ "groups": [1, 5] })),
            ),
        ),
        (
            FloatingIP::KIND,
            example::<FloatingIP>(
                json!({
                    "vpcRef": { "name": "prod" },
                    "target": "10.0.0.2",
                    "loadBalancerClass": "metallb",
                    "addressClaimName": "public-1",
                }),
                Some(json!({
                    "address": "192.0.2.20",
                    "phase": "Ready",
                    "conditions": [condition("TargetLive")],
                })),
            ),
        ),
        (
            ServiceVIP::KIND,
            example::<ServiceVIP>(
                json!({
                    "vpcRef": vpc_ref,
                    "ip": "10.0.0.254",
                    "serviceRef": { "namespace": "tenant-a", "name": "web" },
                    "ports": [{ "name": "http", "protocol": "TCP", "port": 80 }, { "protocol": "UDP", "port": 53 }],
                    "sessionAffinity": "ClientIP",
                }),
                Some(json!({
                    "backends": [{ "ip": "10.0.0.2", "ports": [{ "protocol": "TCP", "port": 80, "targetPort": 8080 }] }],
                    "phase": "Ready",
                    "conditions": [condition("Ready")],
                })),
            ),
        ),
        (
            SecurityGroup::KIND,
            example::<SecurityGroup>(
                json!({
                    "vpcRef": { "name": "prod" },
                    "podSelector": {
                        "matchLabels": { "app": "web" },
                        "matchExpressions": [{ "key": "tier", "operator": "In", "values": ["front"] }],
                    },
                    "ingress": [
                        { "from": { "group": "lb" }, "ports": [{ "protocol": "TCP", "port": 443 }] },
                        { "from": { "group": "db", "vpc": vpc_ref } },
                        { "from": { "cidr": "0.0.0.0/0" }, "ports": [{ "protocol": "UDP" }] },
                    ],
                    "egress": [{ "to": { "cidr": "10.96.0.0/12" }, "ports": [{ "protocol": "UDP", "port": 53 }] }],
                }),
                Some(json!({ "id": 3, "phase": "Ready", "conditions": [condition("IDAllocated")] })),
            ),
        ),
        (
            HostFirewall::KIND,
            example::<HostFirewall>(
                json!({
                    "nodeSelector": { "matchLabels": { "node-role.kubernetes.io/worker": "" } },
                    "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{
                        "from": [{ "cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"] }],
                        "ports": [{ "protocol": "TCP", "port": 30000, "endPort": 30063 }],
                    }],
                    "egress": [{ "to": [{ "cidr": "::/0" }], "ports": [{ "protocol": "UDP", "port": 123 }] }],
                }),
                Some(json!({ "conditions": [condition("Ready")] })),
            ),
        ),
    ]
}

fn round_trip<K: ApiObject>(input: &Value) -> Value {
    let obj: K = serde_json::from_value(input.clone()).unwrap_or_else(|e| panic!("{}: {e}", K::KIND));
    serde_json::to_value(&obj).unwrap()
}

/// Calls `$f::<Kind>($args)` for the kind named `$name`.
macro_rules! for_kind {
    ($name:expr, $f:ident $(, $arg:expr)*) => {
        match $name {
            "VPC" => $f::<VPC>($($arg),*),
            "VPCBinding" => $f::<VPCBinding>($($arg),*),
            "VPCPeering" => $f::<VPCPeering>($($arg),*),
            "VPCGateway" => $f::<VPCGateway>($($arg),*),
            "Port" => $f::<Port>($($arg),*),
            "FloatingIP" => $f::<FloatingIP>($($arg),*),
            "ServiceVIP" => $f::<ServiceVIP>($($arg),*),
            "SecurityGroup" => $f::<SecurityGroup>($($arg),*),
            "HostFirewall" => $f::<HostFirewall>($($arg),*),
            other => panic!("unknown kind {other}"),
        }
    };
}

#[test]
fn full_examples_round_trip_unchanged() {
    let examples = examples();
    assert_eq!(examples.len(), KINDS.len(), "an example per kind");
    for (kind, input) in &examples {
        assert_eq!(&for_kind!(*kind, round_trip, input), input, "{kind}");
    }
}

#[test]
fn serialization_always_carries_api_version_and_kind() {
    let vpc = VPC::new(
        "prod",
        VPCSpec {
            cidrs: vec!["10.0.0.0/24".into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    assert_eq!(
        serde_json::to_value(&vpc).unwrap(),
        json!({
            "apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "VPC",
            "metadata": { "name": "prod" },
            "spec": { "cidrs": ["10.0.0.0/24"] },
        })
    );
}

#[test]
fn missing_fields_decode_to_zero_values_for_the_validator() {
    let port: Port = serde_json::from_value(json!({ "metadata": { "name": "v100.10-0-0-2" } })).unwrap();
    assert_eq!(port.spec, PortSpec::default());
    assert!(port.status.is_none());
    // Required fields are written even when empty, as Go does without `omitempty`.
    assert_eq!(
        serde_json::to_value(&port.spec).unwrap(),
        json!({ "vpcRef": { "namespace": "", "name": "" }, "ip": "", "node": "", "nodeIP": "" })
    );
    // apiVersion/kind/unknown fields and a status on a kind without one are the server's concern.
    let binding: VPCBinding = serde_json::from_value(json!({
        "apiVersion": "other/v1", "kind": "Other", "status": { "x": 1 }, "extra": true,
        "spec": { "vpcRef": { "name": "prod" } },
    }))
    .unwrap();
    assert_eq!(binding.spec.vpc_ref.name, "prod");
}

#[test]
fn lists_carry_list_kind() {
    let list: PortList = List {
        items: vec![Port::new("v100.10-0-0-2", PortSpec::default())],
        ..List::default()
    };
    let value = serde_json::to_value(&list).unwrap();
    assert_eq!(value["apiVersion"], "sdn.cozystack.io/v1alpha1");
    assert_eq!(value["kind"], "PortList");
    assert_eq!(value["items"][0]["kind"], "Port");
    assert_eq!(serde_json::from_value::<PortList>(value).unwrap(), list);
    let empty = serde_json::to_value(VPCList::default()).unwrap();
    assert_eq!(empty["items"], json!([]));
}

#[test]
fn kube_resource_names_and_urls() {
    assert_eq!(
        VPC::url_path(&(), Some("tenant-a")),
        "/apis/sdn.cozystack.io/v1alpha1/namespaces/tenant-a/vpcs"
    );
    assert_eq!(Port::url_path(&(), None), "/apis/sdn.cozystack.io/v1alpha1/ports");
    assert_eq!(ServiceVIP::plural(&()), "servicevips");
    assert_eq!(HostFirewall::api_version(&()), "sdn.cozystack.io/v1alpha1");
    assert_eq!(FloatingIP::group(&()), GROUP);
    let plurals: Vec<_> = KINDS.iter().map(|k| k.plural).collect();
    assert_eq!(
        plurals,
        [
            "vpcs",
            "vpcbindings",
            "vpcpeerings",
            "vpcgateways",
            "ports",
            "floatingips",
            "servicevips",
            "securitygroups",
            "hostfirewalls"
        ]
    );

    // The scope is part of the type: `Api::namespaced` needs this bound, `Api::all` works for all.
    fn namespaced<K: Resource<Scope = kube_core::NamespaceResourceScope>>() {}
    fn cluster<K: Resource<Scope = kube_core::ClusterResourceScope>>() {}
    namespaced::<VPC>();
    namespaced::<VPCBinding>();
    namespaced::<VPCPeering>();
    namespaced::<VPCGateway>();
    namespaced::<FloatingIP>();
    namespaced::<SecurityGroup>();
    cluster::<Port>();
    cluster::<ServiceVIP>();
    cluster::<HostFirewall>();
}

#[test]
fn spec_and_status_accessors_follow_the_strategy_rules() {
    let mut old = Port::new(
        "v100.10-0-0-2",
        PortSpec {
            node: "node-1".into(),
            ..PortSpec::default()
        },
    );
    old.status = Some(PortStatus {
        groups: vec![1],
        ..Default::default()
    });
    let mut new = Port::new(
        "v100.10-0-0-2",
        PortSpec {
            node: "node-2".into(),
            ..PortSpec::default()
        },
    );
    new.status = Some(PortStatus {
        groups: vec![9],
        ..Default::default()
    });

    assert!(!new.spec_eq(&old));
    let mut update = new.clone();
    update.keep_status_from(&old);
    assert_eq!(update.status, old.status);
    assert_eq!(update.spec, new.spec);

    let mut status_update = new.clone();
    status_update.keep_spec_from(&old);
    assert_eq!(status_update.spec, old.spec);
    assert_eq!(status_update.status, new.status);

    new.reset_status();
    assert!(new.status.is_none());

    // Kinds without status ignore status operations.
    let mut binding = VPCBinding::new("b", VPCBindingSpec::default());
    binding.reset_status();
    assert!(binding.status().is_none());
}

// === schemas ===

fn schema_of<K: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(K)).unwrap()
}

/// Every property of every schema we define (the kind's root and our `$defs`; the k8s-openapi
/// ones are not ours) has a description; returns the paths lacking one.
fn undocumented(schema: &Value) -> Vec<String> {
    fn walk(path: &str, schema: &Value, out: &mut Vec<String>) {
        let Some(obj) = schema.as_object() else { return };
        if let Some(Value::Object(props)) = obj.get("properties") {
            for (name, prop) in props {
                let p = format!("{path}.{name}");
                let desc = prop
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if desc.trim().is_empty() {
                    out.push(p.clone());
                }
                walk(&p, prop, out);
            }
        }
        if let Some(items) = obj.get("items") {
            walk(&format!("{path}[]"), items, out);
        }
    }
    let mut out = Vec::new();
    walk("", schema, &mut out);
    if let Some(Value::Object(defs)) = schema.get("$defs") {
        for (name, def) in defs.iter().filter(|(name, _)| !name.starts_with("io.k8s.")) {
            walk(name, def, &mut out);
        }
    }
    out
}

fn check_schema<K: ApiObject>() {
    for schema in [schema_of::<K>(), schema_of::<List<K>>()] {
        let text = schema.to_string();
        assert!(
            !text.contains("x-cozyplane-required"),
            "{}: a required mark was not hoisted",
            K::KIND
        );
        assert_eq!(
            undocumented(&schema),
            Vec::<String>::new(),
            "{}: undocumented properties",
            K::KIND
        );
        assert!(
            !text.contains("\"default\""),
            "{}: this API has no defaults",
            K::KIND
        );
    }
    let schema = schema_of::<K>();
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{ "group": GROUP, "version": "v1alpha1", "kind": K::KIND }])
    );
    for prop in ["apiVersion", "kind", "metadata", "spec"] {
        assert!(schema["properties"].get(prop).is_some(), "{}: no {prop}", K::KIND);
    }
    assert_eq!(
        schema["properties"].get("status").is_some(),
        K::HAS_STATUS,
        "{}",
        K::KIND
    );
    assert!(
        schema.get("required").is_none(),
        "{}: top-level fields are optional",
        K::KIND
    );
}

#[test]
fn every_kind_has_a_fully_documented_schema() {
    for kind in KINDS {
        for_kind!(kind.kind, check_schema);
    }
}

/// `required` in the schema ⇔ written even when empty (Go: no `omitempty`).
fn check_required<T: JsonSchema + Serialize + Default>() {
    let schema = schema_of::<T>();
    let mut required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    required.sort();
    let written = serde_json::to_value(T::default()).unwrap();
    let mut always: Vec<String> = written.as_object().unwrap().keys().cloned().collect();
    always.sort();
    assert_eq!(required, always, "{}", std::any::type_name::<T>());
}

#[test]
fn required_fields_are_exactly_the_always_written_ones() {
    check_required::<VPCRef>();
    check_required::<LocalVPCRef>();
    check_required::<VPCSpec>();
    check_required::<VPCStatus>();
    check_required::<VPCBindingSpec>();
    check_required::<VPCPeeringSpec>();
    check_required::<VPCPeeringStatus>();
    check_required::<VPCGatewaySpec>();
    check_required::<VPCGatewayNAT>();
    check_required::<VPCGatewayIngress>();
    check_required::<VPCGatewayStatus>();
    check_required::<PortSpec>();
    check_required::<PortStatus>();
    check_required::<FloatingIPSpec>();
    check_required::<FloatingIPStatus>();
    check_required::<ServiceVIPSpec>();
    check_required::<ServiceRef>();
    check_required::<ServiceVIPPort>();
    check_required::<ServiceVIPStatus>();
    check_required::<ServiceVIPBackend>();
    check_required::<ServiceVIPBackendPort>();
    check_required::<SecurityGroupSpec>();
    check_required::<SecurityGroupIngressRule>();
    check_required::<SecurityGroupEgressRule>();
    check_required::<SecurityGroupPeer>();
    check_required::<SecurityGroupPort>();
    check_required::<SecurityGroupStatus>();
    check_required::<HostFirewallSpec>();
    check_required::<HostFirewallIngressRule>();
    check_required::<HostFirewallEgressRule>();
    check_required::<HostFirewallPeer>();
    check_required::<HostFirewallPort>();
    check_required::<HostFirewallStatus>();
}

#[test]
fn list_markers_are_kept() {
    let vpc = schema_of::<VPCStatus>();
    assert_eq!(vpc["properties"]["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        vpc["properties"]["conditions"]["x-kubernetes-list-map-keys"],
        json!(["type"])
    );
    assert_eq!(
        vpc["properties"]["conditions"]["x-kubernetes-patch-merge-key"],
        "type"
    );
    let port = schema_of::<PortStatus>();
    assert_eq!(port["properties"]["groups"]["x-kubernetes-list-type"], "atomic");
    let spec = schema_of::<VPCSpec>();
    assert_eq!(spec["properties"]["cidrs"]["x-kubernetes-list-type"], "atomic");
    let hf = schema_of::<HostFirewallSpec>();
    assert_eq!(hf["properties"]["policyTypes"]["x-kubernetes-list-type"], "set");
    assert_eq!(hf["properties"]["ingress"]["x-kubernetes-list-type"], "atomic");
    let peer = schema_of::<HostFirewallPeer>();
    assert_eq!(peer["properties"]["except"]["x-kubernetes-list-type"], "set");
    let gw = schema_of::<VPCGatewayStatus>();
    assert!(
        gw["properties"]["conditions"]
            .get("x-kubernetes-list-type")
            .is_none()
    );
}
