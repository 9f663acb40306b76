//! Services on the real-node lab: a patch of a Service (or of its status, where a
//! LoadBalancer's ingress is set by hand: the lab has no load-balancer controller), and GETs
//! from the lab's internet host (`cozyplane_lab::Outside`).

use std::time::{Duration, Instant};

use cozyplane_conformance::realkube::ControlPlane;
use serde_json::Value;

/// A JSON merge patch of Service `ns/name` (of its status subresource if `status`).
pub(crate) async fn patch(cp: &ControlPlane, ns: &str, name: &str, status: bool, p: &Value) {
    let p = p.to_string();
    let mut args = vec!["patch", "service", name, "-n", ns, "--type=merge", "-p", &p];
    if status {
        args.push("--subresource=status");
    }
    cp.ok(&cp.admin, &args).await;
}

/// One GET of `url` from the internet host (3 s at most): the body, empty if it failed.
pub(crate) fn get(outside: &cozyplane_lab::Outside, url: &str) -> String {
    let out = outside
        .internet
        .exec(&["timeout", "3", "busybox", "wget", "-qO-", url]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// GETs `url` from the internet host until the body satisfies `ok` (30 s at most; the panic
/// says what `why` describes); returns the body.
#[allow(
    dead_code,
    reason = "not every Services test waits for one answer from outside"
)]
pub(crate) async fn from_outside(
    outside: &cozyplane_lab::Outside,
    url: &str,
    ok: impl Fn(&str) -> bool,
    why: impl Fn() -> String,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = get(outside, url);
        if ok(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{url} from the internet host: {body:?} for 30 s\n{}",
            why()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
