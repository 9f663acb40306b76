//! The generic REST contract, run for every kind of the table (and the core `namespaces` a
//! standalone server serves) on the in-process tier (`cozyplane_conformance::inproc`). The cases
//! are in `inproc_rest/cases.rs` and `inproc_rest/writes.rs` (create, get, list, selectors, Table,
//! paging, update with a current and a stale resourceVersion, patches, server-side apply,
//! `/status`, watch, dryRun, delete, deletecollection, scope, …). The only per-kind data is
//! [`FIXTURES`], one row per kind; [`fixtures_cover_every_kind`] fails when a kind has no row.
//!
//! All kinds run concurrently on one server, each in a namespace of its own; a failing case is
//! recorded as (kind, case, what happened) and the test reports every failure at the end.
//! Failures the server is known to have are listed, with the reason, in [`KNOWN_FAILURES`]; a
//! listed case that passes fails the test too, so the list cannot go stale.

use std::time::Duration;

use cozyplane_apis::KindInfo;
use cozyplane_apis::v1alpha1::KINDS;
use cozyplane_conformance::inproc::InProc;
use serde_json::{Value, json};
use support::{Ctx, Report};

/// `Err(format!(…))` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

// A test crate's root looks for modules beside it, in tests/; these are its own.
#[path = "inproc_rest/cases.rs"]
mod cases;
#[path = "inproc_rest/support.rs"]
mod support;
#[path = "inproc_rest/writes.rs"]
mod writes;

const BASE: &str = "/apis/sdn.cozystack.io/v1alpha1";
/// Hang guard for what controllers finish asynchronously (finalizers) and for watch events.
const WAIT: Duration = Duration::from_secs(15);

/// What an update of the spec gets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// The change is stored and the generation bumped.
    Mutable,
    /// The change is refused: 422 `Invalid`.
    Immutable,
    /// The update succeeds but the spec is the server's (a namespace's): kept as it was.
    Ignored,
}

/// A field (JSON pointer) and a value for it.
type Field = (&'static str, fn() -> Value);

/// One kind's test data.
struct Fixture {
    /// The kind's resource (its row in `KINDS`).
    plural: &'static str,
    /// Objects that must exist first, created in the kind's namespace `ns`: (resource, body).
    needs: fn(ns: &str) -> Vec<(&'static str, Value)>,
    /// A minimal valid object named `name` in namespace `ns` (labels are added by the suite).
    /// Kinds the server names (claims `v<vni>.<ip>`) leave the name out and ignore `name`.
    object: fn(ns: &str, name: &str) -> Value,
    /// A spec field (JSON pointer) and a new value for it.
    spec_change: Field,
    /// What an update making that change gets.
    spec: Spec,
    /// For kinds with status: a status field (JSON pointer) and a value `/status` accepts.
    status: Option<Field>,
    /// For kinds with status: a status field and a value `/status` must refuse (422).
    bad_status: Option<Field>,
}

fn vpc(name: &str, cidr: &str) -> (&'static str, Value) {
    (
        "vpcs",
        json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
               "metadata": {"name": name}, "spec": {"cidrs": [cidr]}}),
    )
}

fn obj(kind: &str, name: &str, spec: Value) -> Value {
    let mut meta = json!({});
    if !name.is_empty() {
        meta["name"] = name.into();
    }
    let mut o = json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": kind, "metadata": meta});
    o["spec"] = spec;
    o
}

fn net(_: &str) -> Vec<(&'static str, Value)> {
    vec![vpc("net", "10.0.0.0/24")]
}

/// THE fixture table: one row per kind of `KINDS` (docs/apiserver.md, "How to add a kind").
const FIXTURES: &[Fixture] = &[
    Fixture {
        plural: "vpcs",
        needs: |_| Vec::new(),
        object: |_, name| obj("VPC", name, json!({"cidrs": ["10.9.0.0/24"]})),
        spec_change: ("/spec/mtu", || json!(1400)),
        spec: Spec::Mutable,
        status: Some(("/status/phase", || json!("Pending"))),
        bad_status: Some(("/status/phase", || json!("Bogus"))),
    },
    Fixture {
        plural: "vpcbindings",
        needs: |_| vec![vpc("net", "10.0.0.0/24"), vpc("peer", "10.1.0.0/24")],
        object: |ns, name| {
            obj(
                "VPCBinding",
                name,
                json!({"vpcRef": {"namespace": ns, "name": "net"}}),
            )
        },
        spec_change: ("/spec/vpcRef/name", || json!("peer")),
        spec: Spec::Mutable,
        status: None,
        bad_status: None,
    },
    Fixture {
        plural: "vpcpeerings",
        needs: |_| vec![vpc("net", "10.0.0.0/24"), vpc("peer", "10.1.0.0/24")],
        object: |ns, name| {
            obj(
                "VPCPeering",
                name,
                json!({"vpcRef": {"name": "net"}, "peerRef": {"namespace": ns, "name": "peer"}}),
            )
        },
        spec_change: ("/spec/peerRef/name", || json!("elsewhere")),
        spec: Spec::Immutable,
        status: Some(("/status/phase", || json!("Pending"))),
        bad_status: Some(("/status/phase", || json!("Bogus"))),
    },
    Fixture {
        plural: "vpcgateways",
        needs: net,
        object: |_, name| obj("VPCGateway", name, json!({"vpcRef": {"name": "net"}})),
        spec_change: ("/spec/loadBalancerClass", || json!("example.com/lb")),
        spec: Spec::Mutable,
        status: Some(("/status/natAddress", || json!("203.0.113.7"))),
        bad_status: Some(("/status/natAddress", || json!("not-an-ip"))),
    },
    Fixture {
        plural: "ports",
        needs: net,
        object: |ns, _| {
            obj(
                "Port",
                "",
                json!({"vpcRef": {"namespace": ns, "name": "net"}, "node": "n1", "nodeIP": "192.168.0.1"}),
            )
        },
        spec_change: ("/spec/node", || json!("n2")),
        spec: Spec::Mutable,
        status: Some(("/status/groups", || json!([7]))),
        bad_status: Some(("/status/groups", || json!([-5]))),
    },
    Fixture {
        plural: "floatingips",
        needs: net,
        object: |_, name| {
            obj(
                "FloatingIP",
                name,
                json!({"vpcRef": {"name": "net"}, "target": "10.0.0.5"}),
            )
        },
        spec_change: ("/spec/target", || json!("10.0.0.6")),
        spec: Spec::Mutable,
        status: Some(("/status/address", || json!("203.0.113.8"))),
        bad_status: Some(("/status/address", || json!("not-an-ip"))),
    },
    Fixture {
        plural: "servicevips",
        needs: net,
        object: |ns, _| {
            obj(
                "ServiceVIP",
                "",
                json!({"vpcRef": {"namespace": ns, "name": "net"},
                       "serviceRef": {"namespace": ns, "name": "svc"},
                       "ports": [{"protocol": "TCP", "port": 80}]}),
            )
        },
        spec_change: ("/spec/sessionAffinity", || json!("ClientIP")),
        spec: Spec::Mutable,
        status: Some(("/status/phase", || json!("Pending"))),
        bad_status: Some(("/status/phase", || json!("Bogus"))),
    },
    Fixture {
        plural: "securitygroups",
        needs: net,
        object: |_, name| obj("SecurityGroup", name, json!({"vpcRef": {"name": "net"}})),
        spec_change: (
            "/spec/ingress",
            || json!([{"from": {"cidr": "10.1.0.0/16"}, "ports": [{"protocol": "TCP", "port": 80}]}]),
        ),
        spec: Spec::Mutable,
        status: Some(("/status/phase", || json!("Pending"))),
        bad_status: Some(("/status/phase", || json!("Bogus"))),
    },
    Fixture {
        plural: "hostfirewalls",
        needs: |_| Vec::new(),
        object: |_, name| obj("HostFirewall", name, json!({})),
        spec_change: ("/spec/policyTypes", || json!(["Ingress"])),
        spec: Spec::Mutable,
        status: Some(("/status/conditions", || {
            json!([{"type": "Applied", "status": "True", "reason": "Test", "message": "set by the suite",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        })),
        bad_status: Some(("/status/conditions", || {
            json!([{"type": "Applied", "status": "Maybe", "reason": "Test", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        })),
    },
    // Core v1, served by a standalone server (registry::namespace).
    Fixture {
        plural: "namespaces",
        needs: |_| Vec::new(),
        object: |_, name| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        spec_change: ("/spec/finalizers", || json!(["example.com/other"])),
        spec: Spec::Ignored,
        status: Some(("/status/conditions", || {
            json!([{"type": "NamespaceDeletionContentFailure", "status": "False", "reason": "Test",
                    "message": "set by the suite", "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        })),
        bad_status: Some(("/status/phase", || json!("Bogus"))),
    },
];

/// What the agent of a Port's node does once it severed the pod (there is no node here): removes
/// the `sdn.cozystack.io/sever` finalizer of every terminating Port, so the generic delete cases
/// see Ports go as they do in a cluster.
async fn agents_stand_in(s: &InProc) {
    const SEVER: &str = "sdn.cozystack.io/sever";
    loop {
        let (_, list) = s.get(&format!("{BASE}/ports")).await;
        for p in list["items"].as_array().into_iter().flatten() {
            let meta = &p["metadata"];
            let at = meta["finalizers"]
                .as_array()
                .and_then(|f| f.iter().position(|x| x == SEVER));
            let (Some(i), false) = (at, meta["deletionTimestamp"].is_null()) else {
                continue;
            };
            let name = meta["name"].as_str().unwrap_or_default();
            let path = format!("/metadata/finalizers/{i}");
            let remove =
                json!([{"op": "test", "path": path, "value": SEVER}, {"op": "remove", "path": path}]);
            s.patch(
                &format!("{BASE}/ports/{name}"),
                "application/json-patch+json",
                &remove,
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every kind the suite must cover: the table of `sdn.cozystack.io` and the core kinds a
/// standalone server serves.
fn all_kinds() -> Vec<KindInfo> {
    let mut k = KINDS.to_vec();
    k.push(<cozyplane_apiserver::registry::namespace::Namespace as cozyplane_apis::ApiKind>::INFO);
    k
}

/// The namespace a kind's objects (and what they need) live in.
fn namespace_of(f: &Fixture) -> String {
    format!("rest-{}", f.plural)
}

/// Cases the server is known to fail: (resource, case, why). Each must still fail; fix the
/// server and remove the row.
const KNOWN_FAILURES: &[(&str, &str, &str)] = &[];

#[test]
fn fixtures_cover_every_kind() {
    let kinds: Vec<&str> = all_kinds().iter().map(|k| k.plural).collect();
    let rows: Vec<&str> = FIXTURES.iter().map(|f| f.plural).collect();
    for k in &kinds {
        assert_eq!(
            rows.iter().filter(|r| *r == k).count(),
            1,
            "kind {k} needs exactly one row in FIXTURES (conformance/tests/inproc_rest.rs)"
        );
    }
    for r in &rows {
        assert!(kinds.contains(r), "FIXTURES row {r} is not a kind of KINDS");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_contract_of_every_kind() {
    let s = InProc::start().await;
    let kinds = all_kinds();
    // Every kind's namespace exists before any kind runs: the namespaces kind's lists (paging,
    // Table) must not see another kind's setup create one in between.
    for f in FIXTURES {
        s.namespace(&namespace_of(f)).await;
    }
    let runs = FIXTURES.iter().map(|f| {
        let info = kinds
            .iter()
            .find(|k| k.plural == f.plural)
            .unwrap_or_else(|| panic!("{} is not in KINDS", f.plural));
        let c = Ctx {
            s: &s,
            f,
            info,
            ns: namespace_of(f),
        };
        async move {
            let mut r = Report::default();
            c.run(&mut r).await;
            r.0.into_iter()
                .map(|(case, why)| (f.plural, case, why))
                .collect::<Vec<_>>()
        }
    });
    let failures: Vec<_> = tokio::select! {
        f = futures::future::join_all(runs) => f,
        () = agents_stand_in(&s) => unreachable!("the stand-in never returns"),
    }
    .into_iter()
    .flatten()
    .collect();
    let known = |k: &str, c: &str| KNOWN_FAILURES.iter().any(|(kk, cc, _)| *kk == k && *cc == c);
    let mut problems: Vec<String> = failures
        .iter()
        .filter(|(k, c, _)| !known(k, c))
        .map(|(k, c, why)| format!("{k} / {c}: {why}"))
        .collect();
    for (k, c, why) in KNOWN_FAILURES {
        if !failures.iter().any(|(fk, fc, _)| fk == k && fc == c) {
            problems.push(format!(
                "{k} / {c}: listed as a known failure ({why}) but passes; remove it from KNOWN_FAILURES"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} failing (kind / case):\n{}",
        problems.len(),
        problems.join("\n")
    );
}
