//! The pod trace (`POST .../namespaces/<ns>/podtraces`) on the real control plane
//! (`conformance::realkube`: etcd, kube-apiserver with RBAC and aggregation,
//! kube-controller-manager), with this server installed behind it as the chart installs it.
//! The default network's objects live in kube-apiserver: namespaces, pods (addresses patched
//! into their status, no kubelet), NetworkPolicies, the network-policy-api CRDs with an
//! AdminNetworkPolicy (Allow, Deny, Pass) and the BaselineAdminNetworkPolicy, two Nodes.
//!
//! Every probe's answer is checked twice: its verdict against `verdict::np` over this test's
//! own compile of the same objects (listed as the admin), and its tiers, rules, ends and notes
//! against what the policies say, written out by hand. Then who may ask (a `create` of
//! `podtraces` in the namespace, through the server's SubjectAccessReview), what a tenant
//! learns of another namespace's NetworkPolicy (redacted), and the bad input (422 with one
//! cause per field, 400, 405).
//!
//! One control plane for the whole file (it takes seconds to start), stopped by PID at the end.
//! Without the binaries (`KUBE_BIN_DIR`) the test says so loudly and passes, except in CI or
//! with `REQUIRE_KUBE=1`.

#[path = "pod_trace/objects.rs"]
mod objects;
#[path = "pod_trace/oracle.rs"]
mod oracle;

use std::net::IpAddr;
use std::time::Duration;

use cozyplane_conformance::realkube::{self, ControlPlane};
use cozyplane_policy::model::{Tables, proto};
use cozyplane_policy::verdict;
use objects::{admin_policies, crd, create_node, create_pod, namespace, network_policies};
use oracle::{compile, tier_name};
use serde_json::{Value, json};

const API: &str = "sdn.cozystack.io/v1alpha1";
const N1: &str = "192.168.10.1";
const N2: &str = "192.168.10.2";
const WEB: &str = "10.244.0.10";
const DB: &str = "10.244.0.11";
const FREE: &str = "10.244.0.12";
const T2_API: &str = "10.244.0.20";

fn uri(ns: &str) -> String {
    format!("/apis/{API}/namespaces/{ns}/podtraces")
}

/// POSTs `body` as `c`; the answer or the Status of the refusal.
async fn ask(c: &kube::Client, method: &str, ns: &str, body: &str) -> Result<Value, kube::core::Status> {
    let req = axum::http::Request::builder()
        .method(method)
        .uri(uri(ns))
        .header("content-type", "application/json")
        .body(body.as_bytes().to_vec())
        .expect("a request");
    match c.request::<Value>(req).await {
        Ok(v) => Ok(v),
        Err(kube::Error::Api(s)) => Err(*s),
        Err(e) => panic!("no answer: {e}"),
    }
}

fn question(src: &Value, dst: &Value, protocol: &str, port: Option<u16>) -> Value {
    let mut spec = json!({"source": src, "destination": dst, "protocol": protocol});
    if let Some(p) = port {
        spec["port"] = json!(p);
    }
    json!({"apiVersion": API, "kind": "PodTrace", "spec": spec})
}

fn pod(name: &str) -> Value {
    json!({"pod": name})
}

fn addr(ip: &str) -> Value {
    json!({"address": ip})
}

/// Every key of `want` is in `have` with the same value (recursively for objects); a `null`
/// in `want` means the key is absent.
fn assert_subset(have: &Value, want: &Value, at: &str, whole: &Value) {
    match want {
        Value::Object(m) => {
            for (k, w) in m {
                let path = format!("{at}.{k}");
                match (have.get(k), w) {
                    (None | Some(Value::Null), Value::Null) => {}
                    (Some(h), Value::Null) => panic!("{path} should be absent, is {h}\n{whole:#}"),
                    (Some(h), w) => assert_subset(h, w, &path, whole),
                    (None, _) => panic!("{path} is missing (want {w})\n{whole:#}"),
                }
            }
        }
        w => assert_eq!(have, w, "{at}\n{whole:#}"),
    }
}

/// One question and what its answer must say.
struct Probe {
    what: &'static str,
    src: (Value, &'static str),
    dst: (Value, &'static str),
    protocol: &'static str,
    port: Option<u16>,
    /// The datapath admits it whatever `verdict::np` says (the node exemption).
    exempt: bool,
    want: Value,
}

/// Asks every probe in `ns` as `c`; checks each answer against `verdict::np` over the test's
/// compile `t` and against the probe's `want`. Returns the answers.
async fn run(c: &kube::Client, ns: &str, t: &Tables, probes: &[Probe]) -> Vec<Value> {
    let mut out = Vec::new();
    for p in probes {
        let q = question(&p.src.0, &p.dst.0, p.protocol, p.port);
        let a = ask(c, "POST", ns, &q.to_string())
            .await
            .unwrap_or_else(|s| panic!("{}: refused: {s:?}", p.what));
        let st = &a["status"];
        let (src, dst): (IpAddr, IpAddr) = (p.src.1.parse().unwrap(), p.dst.1.parse().unwrap());
        let (number, port) = match p.protocol {
            "TCP" => (proto::TCP, p.port.unwrap()),
            "UDP" => (proto::UDP, p.port.unwrap()),
            "SCTP" => (proto::SCTP, p.port.unwrap()),
            "ICMP" => (proto::ICMP, 8 << 8),
            _ => (proto::ICMPV6, 128 << 8),
        };
        let v = verdict::np(t, src, dst, number, port);
        let (e, i) = verdict::np_detail(t, src, dst, number, port);
        let want = if v.allowed() || p.exempt {
            "Allowed"
        } else {
            "Dropped"
        };
        assert_eq!(st["verdict"], want, "{}: trace != verdict::np\n{a:#}", p.what);
        assert_eq!(
            p.exempt,
            !v.allowed() && st["nodeExempt"] == true,
            "{}\n{a:#}",
            p.what
        );
        assert_eq!(st["egress"]["tier"], tier_name(e.tier), "{}\n{a:#}", p.what);
        assert_eq!(st["ingress"]["tier"], tier_name(i.tier), "{}\n{a:#}", p.what);
        assert_subset(st, &p.want, p.what, &a);
        assert_eq!(a["metadata"]["namespace"], ns, "{a}");
        eprintln!(
            "{:<72} {} by {} ({})",
            p.what,
            st["verdict"].as_str().unwrap_or_default(),
            st["layer"].as_str().unwrap_or_default(),
            st["reason"].as_str().unwrap_or_default()
        );
        out.push(a);
    }
    out
}

/// `kubectl apply` of `yaml` as the admin, retried while kube-apiserver does not serve its
/// kind yet (a CRD just established).
async fn apply(cp: &ControlPlane, yaml: &str) {
    cp.eventually("kubectl apply to succeed", || async {
        cp.kubectl_stdin(&cp.admin, &["apply"], yaml)
            .await
            .status
            .success()
    })
    .await;
}

/// The probes once the admin policies exist.
fn probes() -> Vec<Probe> {
    let anp = |dir: &str, index: i32, rule: &str, action: &str| {
        json!({"kind": "AdminNetworkPolicy", "name": "tenants", "direction": dir, "index": index,
               "ruleName": rule, "action": action, "namespace": null, "redacted": null})
    };
    let banp = |dir: &str, rule: &str| {
        json!({"kind": "BaselineAdminNetworkPolicy", "name": "default", "direction": dir, "index": 0,
               "ruleName": rule, "action": "Deny"})
    };
    let db_in = json!({"kind": "NetworkPolicy", "namespace": "t1", "name": "db-in", "direction": "ingress",
                       "index": 0, "action": "Allow"});
    let passed = json!({"tier": "Default", "decision": "DefaultAllow", "verdict": "Allowed",
                        "passed": anp("egress", 1, "pass-db", "Pass")});
    let tcp = |what, src, dst, port, want| Probe {
        what,
        src,
        dst,
        protocol: "TCP",
        port: Some(port),
        exempt: false,
        want,
    };
    vec![
        tcp(
            "web -> db 5432: the ANP passes the egress, db's NetworkPolicy admits",
            (pod("web"), WEB),
            (pod("db"), DB),
            5432,
            json!({"verdict": "Allowed", "layer": "NetworkPolicy", "reason": "Rule", "egress": passed,
                   "ingress": {"tier": "NetworkPolicy", "decision": "Rule", "rule": db_in, "passed": null},
                   "source": {"address": WEB, "kind": "Pod", "namespace": "t1", "pod": "web"},
                   "destination": {"address": DB, "kind": "Pod", "namespace": "t1", "pod": "db"},
                   "nodeExempt": null, "notes": null}),
        ),
        tcp(
            "free -> db 5432: db's NetworkPolicy does not admit free",
            (pod("free"), FREE),
            (pod("db"), DB),
            5432,
            json!({"verdict": "Dropped", "layer": "NetworkPolicy", "reason": "DefaultDeny", "egress": passed,
                   "ingress": {"verdict": "Dropped", "decision": "DefaultDeny", "rule": null}}),
        ),
        tcp(
            "web -> db 9000: the ANP allows at db's ingress",
            (pod("web"), WEB),
            (pod("db"), DB),
            9000,
            json!({"verdict": "Allowed", "layer": "AdminNetworkPolicy", "reason": "Rule",
                   "egress": {"tier": "Default", "passed": null},
                   "ingress": {"decision": "Rule", "rule": anp("ingress", 0, "allow-9000", "Allow")}}),
        ),
        tcp(
            "web -> outside 25: the ANP denies the egress",
            (pod("web"), WEB),
            (addr("203.0.113.5"), "203.0.113.5"),
            25,
            json!({"verdict": "Dropped", "layer": "AdminNetworkPolicy", "reason": "Deny",
                   "egress": {"verdict": "Dropped", "decision": "Deny", "rule": anp("egress", 0, "deny-smtp", "Deny")},
                   "ingress": {"tier": "None", "decision": "NotSubject"},
                   "destination": {"kind": "External", "address": "203.0.113.5"}}),
        ),
        tcp(
            "t2 pod by address -> free 80: the BANP denies t2 at free",
            (addr(T2_API), T2_API),
            (pod("free"), FREE),
            80,
            json!({"verdict": "Dropped", "layer": "BaselineAdminNetworkPolicy", "reason": "Deny",
                   "egress": {"tier": "Default"},
                   "ingress": {"decision": "Deny", "rule": banp("ingress", "deny-from-t2")},
                   "source": {"address": T2_API, "kind": "Pod", "namespace": null, "pod": null}}),
        ),
        tcp(
            "web -> t2/api 80: t2's NetworkPolicy admits, redacted",
            (pod("web"), WEB),
            (json!({"pod": "api", "namespace": "t2"}), T2_API),
            80,
            json!({"verdict": "Allowed", "layer": "NetworkPolicy", "reason": "Rule",
                   "ingress": {"decision": "Rule", "rule": {"kind": "NetworkPolicy", "direction": "ingress",
                       "action": "Allow", "redacted": true, "name": null, "namespace": null, "index": null}},
                   "destination": {"kind": "Pod", "namespace": "t2", "pod": "api", "address": null}}),
        ),
        tcp(
            "web -> t2/api 81: t2's NetworkPolicy refuses",
            (pod("web"), WEB),
            (json!({"pod": "api", "namespace": "t2"}), T2_API),
            81,
            json!({"verdict": "Dropped", "layer": "NetworkPolicy", "reason": "DefaultDeny",
                   "ingress": {"decision": "DefaultDeny", "rule": null}}),
        ),
        tcp(
            "web -> db 6000: the BANP denies the egress",
            (pod("web"), WEB),
            (pod("db"), DB),
            6000,
            json!({"verdict": "Dropped", "layer": "BaselineAdminNetworkPolicy", "reason": "Deny",
                   "egress": {"decision": "Deny", "rule": banp("egress", "deny-6000"), "passed": null}}),
        ),
        Probe {
            exempt: true,
            ..tcp(
                "db's node -> db 8080: the node exemption",
                (addr(N1), N1),
                (pod("db"), DB),
                8080,
                json!({"verdict": "Allowed", "layer": "NodeExemption", "reason": "NodeExempt", "nodeExempt": true,
                       "egress": {"decision": "NotSubject"},
                       "ingress": {"verdict": "Dropped", "decision": "DefaultDeny", "exempt": true},
                       "source": {"kind": "Node", "address": N1}}),
            )
        },
        tcp(
            "another node -> db 8080: policed",
            (addr(N2), N2),
            (pod("db"), DB),
            8080,
            json!({"verdict": "Dropped", "layer": "NetworkPolicy", "reason": "DefaultDeny", "nodeExempt": null,
                   "ingress": {"exempt": null}}),
        ),
        Probe {
            protocol: "ICMP",
            port: None,
            ..tcp(
                "web -> db ICMP echo: db's NetworkPolicy is TCP only",
                (pod("web"), WEB),
                (pod("db"), DB),
                0,
                json!({"verdict": "Dropped", "layer": "NetworkPolicy", "reason": "DefaultDeny"}),
            )
        },
        Probe {
            protocol: "SCTP",
            ..tcp(
                "web -> free SCTP 7: selected by the admin tiers, nothing decides",
                (pod("web"), WEB),
                (pod("free"), FREE),
                7,
                json!({"verdict": "Allowed", "layer": "Default", "reason": "DefaultAllow",
                       "ingress": {"tier": "Default", "decision": "DefaultAllow"}}),
            )
        },
    ]
}

/// Without a kube-apiserver connection (standalone) the server cannot read the default
/// network: a valid question is 503, a body that is not a PodTrace still 400, a GET 405. In
/// process, so it runs where the control-plane binaries are missing.
#[tokio::test]
async fn without_a_kube_apiserver_the_pod_trace_is_unavailable() {
    use axum::body::Body;
    use cozyplane_apiserver::registry::hooks::Requester;
    use cozyplane_apiserver::server::router::{AppState, MAX_BODY, router};
    use tower::ServiceExt as _;
    let (_dir, storage) = cozyplane_storage::testing::embedded().await;
    let kinds = cozyplane_apiserver::registry::kinds(&storage);
    let app = router(AppState::new(kinds, storage, false, MAX_BODY));
    let good = question(&pod("web"), &pod("db"), "TCP", Some(80)).to_string();
    let cases = [
        ("POST", good.as_str(), 503),
        (
            "POST",
            r#"{"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCTrace"}"#,
            400,
        ),
        ("POST", r#"{"spec": {"source": {"vpc": "x"}}}"#, 400),
        ("GET", "", 405),
    ];
    for (method, body, want) in cases {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri(uri("t1"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        req.extensions_mut().insert(Requester::Server);
        let r = app.clone().oneshot(req).await.unwrap();
        let code = r.status().as_u16();
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX).await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(code, want, "{method} {body}: {text}");
        assert!(text.contains("\"kind\":\"Status\""), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_trace_on_the_real_control_plane() {
    let bins = match realkube::bins() {
        Ok(b) => b,
        Err(why) => return realkube::not_run(&why),
    };
    let cp = ControlPlane::start(&bins).await;
    let mut cozy = cp.install_cozyplane(&[]).await;
    let result = tokio::time::timeout(Duration::from_secs(600), scenario(&cp)).await;
    let tail = cozy.tail();
    cozy.kill();
    assert!(result.is_ok(), "the scenario hung\n{tail}\n{}", cp.logs());
}

async fn scenario(cp: &ControlPlane) {
    let admin = cp.client(&cp.admin).await;
    // The server's role as its RBAC table makes it now (the chart's template is generated
    // from the same table), and the tenant roles' question rule for alice in t1 only.
    let server_rules = cozyplane_apiserver::rbac::server_role_rules();
    let questions: Vec<&str> = cozyplane_apiserver::rbac::QUESTIONS.to_vec();
    apply(cp, &json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "cozyplane-apiserver-table"}, "rules": server_rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "cozyplane-apiserver-table"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cozyplane-apiserver-table"},
         "subjects": [{"kind": "ServiceAccount", "name": "cozyplane-apiserver", "namespace": "cozy-system"}]},
    ]}).to_string()).await;
    for ns in ["t1", "t2"] {
        apply(cp, &namespace(ns)).await;
        // ServiceAccount admission refuses pods until the namespace's `default` exists.
        cp.eventually("the namespace's default ServiceAccount", || async {
            cp.kubectl(&cp.admin, &["get", "serviceaccount", "default", "-n", ns])
                .await
                .status
                .success()
        })
        .await;
    }
    apply(cp, &json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "questions", "namespace": "t1"},
         "rules": [{"apiGroups": ["sdn.cozystack.io"], "resources": questions, "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "alice", "namespace": "t1"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "questions"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]},
    ]}).to_string()).await;
    create_node(&admin, "n1", N1).await;
    create_node(&admin, "n2", N2).await;
    for (ns, name, app, ip) in [
        ("t1", "web", "web", WEB),
        ("t1", "db", "db", DB),
        ("t1", "free", "free", FREE),
        ("t2", "api", "api", T2_API),
    ] {
        create_pod(&admin, ns, name, app, ip, "n1").await;
    }
    apply(cp, &network_policies()).await;
    let alice_kc = cp.user_kubeconfig("alice", &[], "t1");
    let alice = cp.client(&alice_kc).await;

    // Before the network-policy-api CRDs exist (their lists are 404: no admin tier), through
    // kubectl as a tenant would ask.
    let q = question(&pod("web"), &pod("db"), "TCP", Some(5432)).to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let out = loop {
        // Until the RBAC just applied reaches the server's SubjectAccessReviews and lists.
        let o = cp
            .kubectl_stdin(&alice_kc, &["create", "--raw", &uri("t1")], &q)
            .await;
        if o.status.success() {
            break o;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "alice's first trace: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let a: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let t = compile(&admin).await;
    assert_subset(
        &a["status"],
        &json!({"verdict": "Allowed", "layer": "NetworkPolicy",
        "egress": {"tier": "None", "decision": "NotSelected"},
        "ingress": {"rule": {"name": "db-in", "index": 0}}}),
        "no CRDs",
        &a,
    );
    let before = [Probe {
        what: "web -> free 80 without admin tiers: nothing selects either end",
        src: (pod("web"), WEB),
        dst: (pod("free"), FREE),
        protocol: "TCP",
        port: Some(80),
        exempt: false,
        want: json!({"verdict": "Allowed", "layer": "None", "reason": "NotSelected"}),
    }];
    run(&alice, "t1", &t, &before).await;

    // The admin tiers.
    for plural in ["adminnetworkpolicies", "baselineadminnetworkpolicies"] {
        apply(cp, &crd(plural)).await;
    }
    apply(cp, &admin_policies()).await;
    let t = compile(&admin).await;
    let answers = run(&alice, "t1", &t, &probes()).await;
    for a in &answers {
        let text = a.to_string();
        assert!(
            !text.contains("api-in"),
            "another namespace's policy named: {text}"
        );
    }
    assert!(
        answers[3]["status"]["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("Service")),
        "{:#}",
        answers[3]
    );

    host_firewall(cp, &alice, &t).await;
    tenancy(cp, &alice).await;
    bad_input(&alice, &admin).await;
}

/// A flow into a node meets the node's HostFirewall after the pod's egress; a node's flow to a
/// pod of another node meets its egress firewall first. Both nodes are `role: worker`; the
/// firewall admits web's SSH into the nodes and the nodes' 8080 out to db only. Each answer's
/// verdict is `verdict::np`'s and the firewall's as written, its layer the first that drops.
async fn host_firewall(cp: &ControlPlane, alice: &kube::Client, t: &Tables) {
    apply(cp, &json!({"apiVersion": API, "kind": "HostFirewall", "metadata": {"name": "workers"},
        "spec": {"nodeSelector": {"matchLabels": {"role": "worker"}}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": [{"cidr": format!("{WEB}/32")}], "ports": [{"protocol": "TCP", "port": 22}]}],
                 "egress": [{"to": [{"cidr": format!("{DB}/32")}], "ports": [{"protocol": "TCP", "port": 8080}]}]}})
        .to_string())
    .await;
    let hf = |dir: &str, node: &str, verdict: &str, decision: &str, rule: Value| json!({"node": node, "direction": dir, "verdict": verdict, "decision": decision, "rule": rule});
    let cases = [
        (
            "web -> n1 22: the firewall's rule admits it into the node",
            (pod("web"), WEB),
            (addr(N1), N1),
            22,
            json!({"verdict": "Allowed", "layer": "HostFirewall", "reason": "Rule",
                   "hostFirewall": hf("ingress", "n1", "Allowed", "Rule",
                json!({"hostFirewall": "workers", "direction": "ingress", "index": 0}))}),
        ),
        (
            "db -> n1 22: no rule admits db into the node",
            (pod("db"), DB),
            (addr(N1), N1),
            22,
            json!({"verdict": "Dropped", "layer": "HostFirewall", "reason": "DefaultDeny",
                   "hostFirewall": hf("ingress", "n1", "Dropped", "DefaultDeny", Value::Null)}),
        ),
        (
            "db -> n2 6443: the failsafe keeps the API server's port",
            (pod("db"), DB),
            (addr(N2), N2),
            6443,
            json!({"verdict": "Allowed", "layer": "HostFirewall", "reason": "Failsafe",
                   "hostFirewall": hf("ingress", "n2", "Allowed", "Failsafe",
                json!({"direction": "ingress", "hostFirewall": null, "index": null}))}),
        ),
        (
            "n2 -> db 8080: the egress rule lets n2 out to db",
            (addr(N2), N2),
            (pod("db"), DB),
            8080,
            json!({"hostFirewall": hf("egress", "n2", "Allowed", "Rule",
                json!({"hostFirewall": "workers", "direction": "egress", "index": 0}))}),
        ),
        (
            "n2 -> free 8080: n2's egress firewall refuses before free's policy is asked",
            (addr(N2), N2),
            (pod("free"), FREE),
            8080,
            json!({"verdict": "Dropped", "layer": "HostFirewall", "reason": "DefaultDeny",
                   "hostFirewall": hf("egress", "n2", "Dropped", "DefaultDeny", Value::Null)}),
        ),
        (
            "n1 -> db 8080: a node to its own pod passes no firewall",
            (addr(N1), N1),
            (pod("db"), DB),
            8080,
            json!({"verdict": "Allowed", "layer": "NodeExemption", "hostFirewall": null}),
        ),
    ];
    for (what, src, dst, port, want) in cases {
        let q = question(&src.0, &dst.0, "TCP", Some(port)).to_string();
        // Until the server's storage has the firewall (it was written through the aggregator).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let a = loop {
            let a = ask(alice, "POST", "t1", &q)
                .await
                .unwrap_or_else(|s| panic!("{what}: refused: {s:?}"));
            if a["status"]["hostFirewall"]["decision"] != "NotArmed" || std::time::Instant::now() > deadline {
                break a;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let st = &a["status"];
        let (s_ip, d_ip): (IpAddr, IpAddr) = (src.1.parse().unwrap(), dst.1.parse().unwrap());
        let np = verdict::np(t, s_ip, d_ip, proto::TCP, port);
        let exempt = st["nodeExempt"] == true;
        let hf_ok = st["hostFirewall"]["verdict"] != "Dropped";
        let want_verdict = if (np.egress.allows() && (np.ingress.allows() || exempt)) && hf_ok {
            "Allowed"
        } else {
            "Dropped"
        };
        assert_eq!(
            st["verdict"], want_verdict,
            "{what}: trace != verdict::np + firewall\n{a:#}"
        );
        assert_subset(st, &want, what, &a);
        eprintln!(
            "{what:<72} {} by {} ({})",
            st["verdict"].as_str().unwrap_or_default(),
            st["layer"].as_str().unwrap_or_default(),
            st["reason"].as_str().unwrap_or_default()
        );
    }
}

/// Who may ask: a `create` of `podtraces` in the namespace, decided by kube-apiserver's RBAC
/// through the server's SubjectAccessReview.
async fn tenancy(cp: &ControlPlane, alice: &kube::Client) {
    let q = question(&pod("api"), &addr(WEB), "TCP", Some(80)).to_string();
    let e = ask(alice, "POST", "t2", &q).await.unwrap_err();
    assert_eq!(e.code, 403, "{e:?}");
    assert!(e.message.contains("podtraces"), "{e:?}");
    let mallory = cp.client(&cp.user_kubeconfig("mallory", &[], "t1")).await;
    let q = question(&pod("web"), &pod("db"), "TCP", Some(80)).to_string();
    let e = ask(&mallory, "POST", "t1", &q).await.unwrap_err();
    assert_eq!(e.code, 403, "{e:?}");
    // In her own namespace, about two pods of another: refused with its cause.
    let q = question(&addr(T2_API), &addr("10.244.0.99"), "TCP", Some(80)).to_string();
    let e = ask(alice, "POST", "t1", &q).await.unwrap_err();
    assert_eq!(e.code, 422, "{e:?}");
    assert!(e.message.contains("must be a pod of namespace t1"), "{e:?}");
}

/// Bad input: one cause per field (422), a body that is not a PodTrace (400), a GET (405, as
/// the admin: alice may not `list` podtraces).
async fn bad_input(alice: &kube::Client, admin: &kube::Client) {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"source": {"pod": "nope"}, "destination": {"pod": "db", "address": DB}, "protocol": "GRE"}),
            vec!["spec.source.pod", "spec.destination.address", "spec.protocol"],
        ),
        (
            json!({"source": {"pod": "web"}, "destination": {"address": "not-an-ip"}, "protocol": "TCP", "port": 70000}),
            vec!["spec.destination.address", "spec.port"],
        ),
        (
            json!({"source": {"pod": "web"}, "destination": {"pod": "db"}, "protocol": "ICMP", "port": 1, "icmpType": 300}),
            vec!["spec.port", "spec.icmpType"],
        ),
        (
            json!({"source": {"pod": "web"}, "destination": {"pod": "db"}, "protocol": "TCP", "icmpCode": 0}),
            vec!["spec.icmpCode", "spec.port"],
        ),
        (
            json!({"source": {"pod": "web"}, "destination": {"address": "fd00::1"}, "protocol": "TCP", "port": 80}),
            vec!["spec.source.pod"],
        ),
        (
            json!({"source": {"namespace": "t2", "address": T2_API}, "destination": {"pod": "db"}, "protocol": "TCP", "port": 80}),
            vec!["spec.source.namespace"],
        ),
        (
            json!({"source": {}, "destination": {"pod": "db"}, "protocol": "UDP", "port": 53}),
            vec!["spec.source"],
        ),
        (
            json!({"source": {"pod": "api", "namespace": "t2"}, "destination": {"pod": "gone", "namespace": "t2"}, "protocol": "TCP", "port": 1}),
            vec!["spec.destination.pod"],
        ),
    ];
    for (spec, fields) in cases {
        let body = json!({"apiVersion": API, "kind": "PodTrace", "spec": spec});
        let e = ask(alice, "POST", "t1", &body.to_string()).await.unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{spec}: {e:?}");
        let mut got: Vec<String> = e
            .details
            .iter()
            .flat_map(|d| d.causes.iter().map(|c| c.field.clone()))
            .collect();
        got.sort();
        let mut want: Vec<String> = fields.iter().map(|f| (*f).to_string()).collect();
        want.sort();
        assert_eq!(got, want, "{spec}: {e:?}");
    }
    for body in [
        json!({"apiVersion": API, "kind": "VPCTrace", "spec": {}}).to_string(),
        "not json".to_string(),
        json!({"apiVersion": API, "kind": "PodTrace", "spec": {"source": {"vpc": "x"}}}).to_string(),
    ] {
        let e = ask(alice, "POST", "t1", &body).await.unwrap_err();
        assert_eq!(e.code, 400, "{body}: {e:?}");
    }
    let e = ask(admin, "GET", "t1", "").await.unwrap_err();
    assert_eq!(e.code, 405, "{e:?}");
}
