//! The trace API (`POST .../namespaces/<ns>/vpcs/<vpc>/trace`) against the SecurityGroup
//! suite: the worlds of `policy/tests/sgkit` (the ones `bpf/tests/policy_sg.rs` runs
//! through the datapath against `verdict::sg`) are created through the API, and every probe
//! of every world is asked of the trace endpoint; each answer must equal `verdict::sg` over
//! the world compiled from the objects the server holds. Datapath == verdict == trace.
//! Then the validation of the request: bad input is a 422 with field causes, never a panic.
//!
//! In process: the router over embedded storage, every request as the server itself (the
//! authorization of a trace is `tenancy.rs`'s and `trace_tenancy.rs`'s business).

#[path = "../../policy/tests/sgkit/mod.rs"]
mod sgkit;
mod trace_kit;

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::body::Body;
use axum::http::Request;
use cozyplane_apis::net::claim::port_name;
use cozyplane_apis::v1alpha1::{Port, SecurityGroup};
use cozyplane_policy::model::proto;
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Check, Endpoint};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sgkit::{EPS, NS, PROBES, VPCS};
use tower::ServiceExt as _;

use trace_kit::{API, Server, typed};

/// A world as the server holds it: the VNIs, the group ids it allocated, the Ports' names.
struct Held {
    vni: BTreeMap<String, u32>,
    /// `(vpc, group name)` → the server's id.
    ids: BTreeMap<(String, String), i32>,
    groups: BTreeMap<(String, String), SecurityGroup>,
    ports: BTreeMap<String, Port>,
}

impl Held {
    fn compile(&self) -> SgCompiler {
        let mut c = SgCompiler::new();
        for (v, n) in &self.vni {
            c.set_vpc(NS, v, *n);
        }
        for g in self.groups.values() {
            c.set_group(g);
        }
        for p in self.ports.values() {
            c.set_port(p);
        }
        c
    }
}

/// The two peered VPCs of the worlds.
async fn vpcs(s: &Server) -> BTreeMap<String, u32> {
    let mut vni = BTreeMap::new();
    for (name, cidr) in VPCS {
        let v = s
            .ok(
                "POST",
                &format!("{API}/namespaces/{NS}/vpcs"),
                &json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPC","metadata":{"name":name},"spec":{"cidrs":[cidr]}}),
            )
            .await;
        vni.insert(name.to_string(), v["status"]["vni"].as_u64().unwrap() as u32);
    }
    for (a, b) in [("va", "vb"), ("vb", "va")] {
        s.ok(
            "POST",
            &format!("{API}/namespaces/{NS}/vpcpeerings"),
            &json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCPeering","metadata":{"name":format!("{a}-{b}")},"spec":{"vpcRef":{"name":a},"peerRef":{"namespace":NS,"name":b}}}),
        )
        .await;
    }
    vni
}

/// Creates or replaces group `g` (its `status.id` is the server's); returns it as held.
async fn put_group(s: &Server, held: &mut Held, g: &SecurityGroup) {
    let name = g.metadata.name.clone().unwrap();
    let vpc = g.spec.vpc_ref.name.clone();
    let base = format!("{API}/namespaces/{NS}/securitygroups");
    let key = (vpc.clone(), name.clone());
    let body = typed("SecurityGroup", serde_json::to_value(g).unwrap());
    let v = if let Some(old) = held.groups.get(&key) {
        let mut body = body;
        body["metadata"]["resourceVersion"] = json!(old.metadata.resource_version.clone().unwrap());
        s.ok("PUT", &format!("{base}/{name}"), &body).await
    } else {
        s.ok("POST", &base, &body).await
    };
    let sg: SecurityGroup = serde_json::from_value(v).unwrap();
    held.ids.insert(key.clone(), sg.status.as_ref().unwrap().id);
    held.groups.insert(key, sg);
}

/// Creates or re-groups the Port of endpoint `ep` in the world's group ids `groups`
/// (translated to the server's by the world's names: `name(vpc, id)`).
async fn put_port(
    s: &Server,
    held: &mut Held,
    ep: (&str, &str, &str),
    groups: &[i32],
    name: impl Fn(&str, i32) -> String,
) {
    let (_, vpc, addr) = ep;
    let ip: IpAddr = addr.parse().unwrap();
    let pname = port_name(held.vni[vpc], ip);
    let ids: Vec<i32> = groups
        .iter()
        .map(|g| held.ids[&(vpc.to_string(), name(vpc, *g))])
        .collect();
    let base = format!("{API}/ports");
    if !held.ports.contains_key(&pname) {
        let body = json!({"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"Port","metadata":{"name":pname},
            "spec":{"vpcRef":{"namespace":NS,"name":vpc},"ip":addr,"node":"n1","nodeIP":"192.168.10.1","interface":"net1"}});
        let v = s.ok("POST", &base, &body).await;
        held.ports
            .insert(pname.clone(), serde_json::from_value(v).unwrap());
    }
    let mut body = serde_json::to_value(&held.ports[&pname]).unwrap();
    body["apiVersion"] = json!("sdn.cozystack.io/v1alpha1");
    body["kind"] = json!("Port");
    body["status"] = json!({ "groups": ids });
    let v = s.ok("PUT", &format!("{base}/{pname}/status"), &body).await;
    held.ports.insert(pname, serde_json::from_value(v).unwrap());
}

fn decision(c: Check) -> &'static str {
    match c {
        Check::Open => "Ungrouped",
        Check::Rule(_) => "Rule",
        Check::Denied => "DefaultDeny",
    }
}

/// Every probe between two distinct endpoints, traced in the source's VPC (the source by its
/// Port's name, the destination by address): the answer against `verdict::sg`. Returns the
/// number of cases and of drops.
async fn trace_all(s: &Server, held: &Held, label: &str, bad: &mut Vec<String>) -> (usize, usize) {
    let c = held.compile();
    let t = c.tables();
    let (mut cases, mut drops) = (0, 0);
    for (sn, sv, sa) in EPS {
        for (dn, dv, da) in EPS {
            if sn == dn {
                continue;
            }
            for (pr, port) in PROBES {
                cases += 1;
                let src = Endpoint {
                    net: held.vni[sv],
                    ip: sa.parse().unwrap(),
                };
                let dst = Endpoint {
                    net: held.vni[dv],
                    ip: da.parse().unwrap(),
                };
                let want = verdict::sg(&t, src, dst, pr, port);
                let mut spec = json!({
                    "source": {"port": port_name(held.vni[sv], src.ip)},
                    "destination": {"address": da},
                });
                if pr == proto::ICMP {
                    spec["protocol"] = json!("ICMP");
                    spec["icmpType"] = json!(port >> 8);
                } else {
                    spec["protocol"] = json!(if pr == proto::TCP { "TCP" } else { "UDP" });
                    spec["port"] = json!(port);
                }
                let (code, v) = s.trace_in(NS, sv, &spec).await;
                let st = &v["status"];
                let got = (
                    code,
                    st["verdict"].as_str().unwrap_or_default(),
                    st["egress"]["decision"].as_str().unwrap_or_default(),
                    st["ingress"]["decision"].as_str().unwrap_or_default(),
                );
                let expect = (
                    201,
                    if want.allowed() { "Allowed" } else { "Dropped" },
                    decision(want.egress),
                    decision(want.ingress),
                );
                drops += usize::from(!want.allowed());
                // Each end is named by its Port and the pod interface it is attached as.
                for (side, net, ip) in [("source", src.net, src.ip), ("destination", dst.net, dst.ip)] {
                    let named = (st[side]["port"].as_str(), st[side]["interface"].as_str());
                    if named != (Some(port_name(net, ip).as_str()), Some("net1")) {
                        bad.push(format!("{label}: {sn} -> {dn}: {side} named {named:?}: {v}"));
                    }
                }
                if got != expect {
                    bad.push(format!(
                        "{label}: {sn} -> {dn} {pr}/{port}: trace {got:?}, verdict {expect:?}: {v}"
                    ));
                }
                // A deciding rule is named, and it is a rule of a group of the subject.
                for (side, vpc) in [("egress", sv), ("ingress", dv)] {
                    if st[side]["decision"] == "Rule" {
                        let r = &st[side]["rule"];
                        let named = r["securityGroup"].as_str().unwrap_or_default();
                        if r["vpc"]["name"] != vpc
                            || !held.groups.contains_key(&(vpc.to_string(), named.to_string()))
                            || r["direction"] != side
                        {
                            bad.push(format!("{label}: {sn} -> {dn} {pr}/{port}: {side} rule {r}"));
                        }
                    }
                }
            }
        }
    }
    (cases, drops)
}

fn report(what: &str, cases: usize, drops: usize, bad: &[String]) {
    println!(
        "trace == verdict::sg ({what}): {cases} cases ({drops} dropped), {} mismatches",
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} differ; first:\n{}",
        bad.len(),
        bad.iter().take(6).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(drops > 0 && drops < cases, "the world allows some and drops some");
}

#[tokio::test]
async fn the_trace_answers_as_verdict_sg_on_every_case_of_the_sg_suite() {
    let s = Server::start().await;
    let mut held = Held {
        vni: vpcs(&s).await,
        ids: BTreeMap::new(),
        groups: BTreeMap::new(),
        ports: BTreeMap::new(),
    };
    // The fixed world: group names by the world's ids, per VPC.
    for g in sgkit::fixed_groups() {
        put_group(&s, &mut held, &g).await;
    }
    let fixed_name = |vpc: &str, id: i32| {
        let names: &[&str] = if vpc == "va" {
            &["", "web", "app", "db"]
        } else {
            &["", "peer"]
        };
        names[id as usize].to_string()
    };
    for ep in EPS {
        put_port(&s, &mut held, ep, sgkit::fixed_groups_of(ep.0), fixed_name).await;
    }
    let mut bad = Vec::new();
    let (mut cases, mut drops) = trace_all(&s, &held, "fixed", &mut bad).await;
    report("fixed world", cases, drops, &bad);

    // The random worlds: groups g1..g3 of each VPC with random rules and memberships, then
    // one group or one Port changed per step.
    for g in held.groups.values().cloned().collect::<Vec<_>>() {
        let name = g.metadata.name.clone().unwrap();
        s.ok(
            "DELETE",
            &format!("{API}/namespaces/{NS}/securitygroups/{name}"),
            &json!({}),
        )
        .await;
    }
    held.groups.clear();
    held.ids.clear();
    let mut r = StdRng::seed_from_u64(4614);
    for vpc in ["va", "vb"] {
        for i in 1..=3 {
            put_group(&s, &mut held, &sgkit::random_group(&mut r, vpc, i)).await;
        }
    }
    for ep in EPS {
        put_port(
            &s,
            &mut held,
            ep,
            &sgkit::random_groups_of(&mut r),
            sgkit::random_name,
        )
        .await;
    }
    (cases, drops) = (0, 0);
    for step in 0..6 {
        let (c, d) = trace_all(&s, &held, &format!("step {step}"), &mut bad).await;
        (cases, drops) = (cases + c, drops + d);
        if step % 2 == 0 {
            let vpc = *["va", "vb"].choose(&mut r).unwrap();
            let i = r.random_range(1..=3);
            let g = sgkit::random_group(&mut r, vpc, i);
            put_group(&s, &mut held, &g).await;
        } else {
            let ep = *EPS.choose(&mut r).unwrap();
            put_port(
                &s,
                &mut held,
                ep,
                &sgkit::random_groups_of(&mut r),
                sgkit::random_name,
            )
            .await;
        }
    }
    report("random worlds", cases, drops, &bad);
}

/// The causes of a 422: `(field, reason)`.
fn causes(v: &Value) -> Vec<(String, String)> {
    v["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn bad_input_is_a_422_with_field_causes() {
    let s = Server::start().await;
    let vni = vpcs(&s).await;
    let mut held = Held {
        vni,
        ids: BTreeMap::new(),
        groups: BTreeMap::new(),
        ports: BTreeMap::new(),
    };
    put_port(&s, &mut held, EPS[0], &[], sgkit::random_name).await;
    put_port(&s, &mut held, EPS[1], &[], sgkit::random_name).await;
    let web = port_name(held.vni["va"], "10.1.0.2".parse().unwrap());
    let vb_port = port_name(held.vni["vb"], "10.2.0.2".parse().unwrap());
    let ok = json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "TCP", "port": 80});
    let (code, v) = s.trace_in(NS, "va", &ok).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["status"]["verdict"], "Allowed");
    assert_eq!(v["status"]["reason"], "Ungrouped");
    assert_eq!(v["kind"], "VPCTrace");
    assert_eq!(v["spec"], ok, "the question comes back with the answer");

    let cases: Vec<(Value, Vec<(&str, &str)>)> = vec![
        (
            json!({"source": {"port": "v1.10-9-9-9"}, "destination": {"address": "10.1.0.3"}, "protocol": "TCP", "port": 80}),
            vec![("spec.source.port", "FieldValueInvalid")],
        ),
        // Another VPC's Port is refused the same way as one that does not exist.
        (
            json!({"source": {"port": vb_port}, "destination": {"address": "10.1.0.3"}, "protocol": "TCP", "port": 80}),
            vec![("spec.source.port", "FieldValueInvalid")],
        ),
        // Two outside ends, or an outside end and a peer's: not a question about this VPC.
        (
            json!({"source": {"address": "192.0.2.1"}, "destination": {"address": "198.51.100.1"}, "protocol": "TCP", "port": 80}),
            vec![("spec.source", "FieldValueInvalid")],
        ),
        (
            json!({"source": {"address": "10.2.0.2"}, "destination": {"address": "192.0.2.1"}, "protocol": "TCP", "port": 80}),
            vec![("spec.source", "FieldValueInvalid")],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "not-an-ip"}, "protocol": "TCP", "port": 80}),
            vec![("spec.destination.address", "FieldValueInvalid")],
        ),
        (
            json!({"source": {}, "destination": {"address": "10.1.0.3", "port": web}, "protocol": "TCP", "port": 80}),
            vec![
                ("spec.source", "FieldValueRequired"),
                ("spec.destination.address", "FieldValueForbidden"),
            ],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "GRE"}),
            vec![("spec.protocol", "FieldValueNotSupported")],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "TCP", "port": 70000}),
            vec![("spec.port", "FieldValueInvalid")],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "UDP"}),
            vec![("spec.port", "FieldValueRequired")],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "TCP", "port": 80, "icmpType": 8}),
            vec![("spec.icmpType", "FieldValueForbidden")],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "ICMP", "port": 80, "icmpType": 300}),
            vec![
                ("spec.port", "FieldValueForbidden"),
                ("spec.icmpType", "FieldValueInvalid"),
            ],
        ),
        (
            json!({"source": {"port": web}, "destination": {"address": "10.1.0.3"}, "protocol": "ICMPv6"}),
            vec![("spec.protocol", "FieldValueInvalid")],
        ),
        // Both ends in the peer: not a question about this VPC.
        (
            json!({"source": {"address": "10.2.0.2"}, "destination": {"address": "10.2.0.3"}, "protocol": "TCP", "port": 80}),
            vec![("spec.source", "FieldValueInvalid")],
        ),
    ];
    for (spec, want) in cases {
        let (code, v) = s.trace_in(NS, "va", &spec).await;
        assert_eq!(code, 422, "{spec}: {v}");
        assert_eq!(v["kind"], "Status", "{v}");
        assert_eq!(v["reason"], "Invalid", "{v}");
        let got = causes(&v);
        let want: Vec<(String, String)> = want.iter().map(|(f, r)| (f.to_string(), r.to_string())).collect();
        assert_eq!(got, want, "{spec}: {v}");
    }

    // Not a VPCTrace, not JSON, another method, no such VPC.
    let post = |body: &str| {
        Request::builder()
            .method("POST")
            .uri(format!("{API}/namespaces/{NS}/vpcs/va/trace"))
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    for body in [
        "{",
        r#"{"apiVersion":"v1","kind":"Pod"}"#,
        r#"{"apiVersion":"sdn.cozystack.io/v1alpha1","kind":"VPCTrace","spec":{"nope":1}}"#,
    ] {
        let r = s.app.clone().oneshot(post(body)).await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
    }
    let (code, _) = s
        .call("GET", &format!("{API}/namespaces/{NS}/vpcs/va/trace"), None)
        .await;
    assert_eq!(code, 405);
    let (code, v) = s.trace_in(NS, "nope", &ok).await;
    assert_eq!(code, 404, "{v}");
    assert_eq!(v["details"]["kind"], "vpcs", "{v}");
}
