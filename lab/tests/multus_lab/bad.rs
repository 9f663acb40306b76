//! Bad input through Multus: each a CNI error, nothing left behind (no Port, no host veth, no
//! endpoint entry), and the runtime's DEL after the failed ADD leaves the same.

use std::time::{Duration, Instant};

use cozyplane_lab::multus::{self, Failure, Sandbox};
use cozyplane_lab::{Invocation, Lab, Netns, invoke_as, kubelet_cni_args};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use super::{Leftovers, ping_via};
use crate::common::{Cp, create_pod_with};

/// A name the kernel refuses for a link (over 15 bytes).
const LONG_IFNAME: &str = "averyveryverylongname";

/// Waits (up to 10 s) until node `i` and the API hold exactly `before` again; fails with the
/// difference.
async fn settles_to(cp: &Cp, lab: &Lab, before: &Leftovers, what: &str) {
    let t = Instant::now();
    loop {
        let now = Leftovers::of(lab, &cp.sdn, 0).await;
        if now == *before {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: left behind\n  Ports {:?}\n  host veths {:?}\n  endpoints {:?}",
            now.ports.difference(&before.ports).collect::<Vec<_>>(),
            now.veths.difference(&before.veths).collect::<Vec<_>>(),
            now.endpoints.difference(&before.endpoints).collect::<Vec<_>>(),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A CNI error as a plugin prints it: a numeric `code` and a non-empty `msg`.
fn assert_cni_error(what: &str, code: i32, out: &Value) {
    assert_ne!(code, 0, "{what}: exit code 0: {out}");
    assert!(out["code"].as_u64().is_some(), "{what}: no numeric code: {out}");
    assert!(
        out["msg"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: no msg: {out}"
    );
}

/// Pod `apps/<name>` on n1 asking for `networks`: Multus's ADD must fail, leave nothing, and
/// the runtime's DEL after it too. Returns the failure.
async fn refused(cp: &Cp, lab: &Lab, name: &str, networks: &Value) -> Failure {
    let before = Leftovers::of(lab, &cp.sdn, 0).await;
    let text = networks.to_string();
    let uid = create_pod_with(
        cp,
        lab,
        (0, "apps", name, None),
        (&[], &[(multus::NETWORKS_ANNOTATION, text.as_str())]),
    )
    .await;
    let pns = Netns::new("p");
    let (cid, netns) = (format!("apps-{name}"), pns.path());
    let sb = Sandbox {
        node: &lab.nodes[0],
        cid: &cid,
        netns: &netns,
        pod: ("apps", name, &uid),
        runtime: &json!({}),
    };
    let f = match multus::add(&cp.kube, &sb).await {
        Ok(a) => panic!("{name}: Multus's ADD succeeded: {:?}", a.status),
        Err(f) => *f,
    };
    if let Some((ifname, code, out)) = &f.delegate {
        assert_cni_error(&format!("{name} ({ifname})"), *code, out);
    }
    settles_to(cp, lab, &before, &format!("{name}: the failed ADD")).await;
    // kubelet DELs a sandbox whose ADD failed; Multus runs it from its cache, every delegate
    // (the one that failed included) with the interface name it was given, and fails the
    // sandbox's DEL when one of them fails: a delegate must accept the DEL of what it never
    // made.
    multus::del(&sb, &f.cache).unwrap_or_else(|e| panic!("{name}: DEL after the failed ADD: {e}"));
    settles_to(cp, lab, &before, &format!("{name}: DEL after the failed ADD")).await;
    Api::<Pod>::namespaced(cp.kube.clone(), "apps")
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eprintln!("PASS {name} refused, nothing left: {}", f.msg);
    f
}

/// The delegate's own answer to the failing interface (`None`: no delegate ran).
fn delegate_of(f: &Failure) -> &Value {
    &f.delegate
        .as_ref()
        .unwrap_or_else(|| panic!("no delegate ran: {}", f.msg))
        .2
}

/// Every bad input of issue 37 through Multus. `router` holds `shared` on its `net1` in VPC
/// t1/blue, reached at `blue_peer`; none of this may disturb it.
pub(crate) async fn bad_inputs(
    cp: &Cp,
    lab: &Lab,
    router: &Netns,
    (shared, blue_peer): (&str, std::net::Ipv4Addr),
) {
    // 1. A NAD naming a VPC that does not exist.
    let f = refused(cp, lab, "nowhere", &json!([{"name": "nowhere"}])).await;
    let out = delegate_of(&f);
    assert!(
        out["msg"].as_str().unwrap_or_default().contains("nosuch") || out.to_string().contains("nosuch"),
        "the error names the missing VPC: {out}"
    );

    // 2. A NAD naming a VPC no binding in `apps` grants.
    let f = refused(cp, lab, "unbound", &json!([{"name": "unbound"}])).await;
    let out = delegate_of(&f);
    assert_eq!(out["code"], 102, "not bound (VpcNotBound): {out}");

    // 3. Two interfaces of one pod asking for the same address of one VPC: the second is
    // refused, Multus takes the first (and eth0) down again.
    let twice =
        json!([{"name": "blue", "ips": ["10.10.0.60/24"]}, {"name": "blue", "ips": ["10.10.0.60/24"]}]);
    let f = refused(cp, lab, "twice", &twice).await;
    assert_eq!(
        f.delegate.as_ref().map(|d| d.0.as_str()),
        Some("net2"),
        "the second interface is the refused one: {}",
        f.msg
    );

    // 4. Another pod asking for the router's address in the same VPC: refused, and neither
    // its ADD nor its DELs take the router's Port.
    let thief = json!([{"name": "blue", "ips": [format!("{shared}/24")]}]);
    let f = refused(cp, lab, "thief", &thief).await;
    assert_eq!(
        f.delegate.as_ref().map(|d| d.0.as_str()),
        Some("net1"),
        "{}",
        f.msg
    );
    assert_eq!(
        ping_via(router, "net1", blue_peer, 3),
        3,
        "the router's net1 still reaches the blue peer"
    );

    // 5. An interface name over 15 bytes: Multus asks the kernel for the link before any
    // delegate runs, and the kernel refuses the name.
    let long = json!([{"name": "blue", "interface": LONG_IFNAME}]);
    let f = refused(cp, lab, "longname", &long).await;
    assert!(f.delegate.is_none(), "no delegate ran: {f:?}");
    assert!(
        f.msg.contains(&format!("interface name to {LONG_IFNAME:?}")) && f.msg.contains("out of range"),
        "{}",
        f.msg
    );
    // The same CNI_IFNAME handed to the plugin directly (a runtime or meta plugin that does
    // not check it): the plugin refuses it itself, and leaves nothing either.
    let before = Leftovers::of(lab, &cp.sdn, 0).await;
    let pns = Netns::new("p");
    let blue = json!({"cniVersion": "1.1.0", "name": "blue", "type": "cozyplane", "vpc": "t1/blue"});
    let inv = Invocation {
        cmd: "ADD".into(),
        cid: "apps-direct".into(),
        netns: pns.path(),
        ifname: LONG_IFNAME.into(),
        args: kubelet_cni_args("apps-direct", ("apps", "direct", "")),
        cni_path: lab.nodes[0].cni_path(),
    };
    let (code, out) = invoke_as(&lab.nodes[0], &inv, &blue);
    assert_cni_error("the plugin given a long CNI_IFNAME", code, &out);
    settles_to(cp, lab, &before, "the plugin given a long CNI_IFNAME").await;
    eprintln!("PASS the plugin refuses CNI_IFNAME {LONG_IFNAME:?} itself: {out}");
}
