//! The server's HTTP edge and lifecycle (issue 17 part 4; issue 15 defects 3 and 6), driven
//! over TLS on one connection at a time with HTTP/1.1 and HTTP/2 chosen by ALPN
//! (`cozyplane_conformance::wire`):
//!
//! - an answer given before the request body is read (`404` for an unknown subresource, `413`
//!   for an over-size body, announced or found while reading) is a `Status`, and the same
//!   connection serves the next request;
//! - headers up to 1 MiB are served, beyond that `431` with a `Status`;
//! - SIGTERM drains the real binary: `/readyz` fails first, then new connections are refused,
//!   watches end cleanly, requests in flight finish and the process exits 0; the grace period
//!   bounds the drain, and a second signal ends the process at once.
//!
//! The SIGTERM test runs `cozyplane-apiserver` as a child process, found next to the test
//! executable (`cargo build --bin cozyplane-apiserver`; `make test-unit` does) or through
//! `COZYPLANE_APISERVER`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cozyplane_conformance::wire::{self, Answer, Conn, Proto, RawH1, Target};
use cozyplane_conformance::{Backend, TestServer};
use http_body_util::BodyExt;
use serde_json::json;

const VPCS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/default/vpcs";
const JSON: (&str, &str) = ("content-type", "application/json");
const MERGE: (&str, &str) = ("content-type", "application/merge-patch+json");
/// A hang guard, never a performance bound.
const HANG: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;

async fn guard<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing happened within {HANG:?}"))
}

fn vpc(name: &str) -> String {
    json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "VPC",
        "metadata": { "name": name },
        "spec": { "cidrs": ["10.0.0.0/24"] },
    })
    .to_string()
}

fn assert_status(a: &Answer, code: u16, reason: &str, what: &str) {
    assert_eq!(a.code, code, "{what}: {a:?}");
    let s = a.json();
    assert_eq!(s["kind"], "Status", "{what}: {}", a.body);
    assert_eq!(s["code"], code, "{what}: {}", a.body);
    assert_eq!(s["reason"], reason, "{what}: {}", a.body);
}

/// The HTTP/2 connection still serves: a LIST on it answers 200.
async fn still_serves(c: &mut Conn, what: &str) {
    let a = guard(what, c.send(wire::request("GET", VPCS, &[], wire::full(""))))
        .await
        .unwrap_or_else(|e| panic!("{what}: the next request on the same connection failed: {e}"));
    assert_eq!(a.code, 200, "{what}: {a:?}");
}

/// The HTTP/1.1 connection still serves: a LIST on it answers 200.
async fn still_serves_h1(c: &mut RawH1, what: &str) {
    let a = guard(what, c.send("GET", VPCS, &[], b""))
        .await
        .unwrap_or_else(|e| panic!("{what}: the next request on the same connection failed: {e}"));
    assert_eq!(a.code, 200, "{what}: {a:?}");
}

async fn server_and_target() -> (TestServer, Target) {
    let s = TestServer::start(Backend::Embedded).await;
    let t = Target::from_kubeconfig(&s.kubeconfig);
    (s, t)
}

const BOGUS: &str = "/apis/sdn.cozystack.io/v1alpha1/namespaces/x/vpcs/x/bogus";

#[tokio::test]
async fn edge_01_unknown_subresource_with_a_body_is_404_and_the_connection_goes_on() {
    let (_s, t) = server_and_target().await;
    let cases = [("PATCH", 100), ("PUT", 100), ("PATCH", 2 * MIB), ("PUT", 2 * MIB)];
    let mut h1 = RawH1::connect(&t).await;
    let mut h2 = t.connect(Proto::H2).await;
    for (method, len) in cases {
        let body = format!("{{\"pad\":\"{}\"}}", "p".repeat(len));
        let what = format!("HTTP/1.1 {method} {len} bytes");
        let a = guard(&what, h1.send(method, BOGUS, &[MERGE], body.as_bytes()))
            .await
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        assert_status(&a, 404, "NotFound", &what);
        still_serves_h1(&mut h1, &what).await;

        let what = format!("HTTP/2 {method} {len} bytes");
        let a = guard(
            &what,
            h2.send(wire::request(method, BOGUS, &[MERGE], wire::full(body))),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        assert_status(&a, 404, "NotFound", &what);
        still_serves(&mut h2, &what).await;
    }
}

fn big_vpc() -> Bytes {
    Bytes::from(format!(
        "{{\"metadata\":{{\"name\":\"a\",\"annotations\":{{\"x\":\"{}\"}}}}}}",
        "y".repeat(4 * MIB)
    ))
}

#[tokio::test]
async fn edge_02_http1_over_size_bodies_are_413_and_the_connection_goes_on() {
    let (_s, t) = server_and_target().await;
    let big = big_vpc();
    let mut c = RawH1::connect(&t).await;

    let what = "4 MiB with Content-Length";
    let a = guard(what, c.send("POST", VPCS, &[JSON], &big))
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_status(&a, 413, "RequestEntityTooLarge", what);
    still_serves_h1(&mut c, what).await;

    // Chunked, without a length: the limit holds while reading.
    let what = "4 MiB chunked";
    guard(
        what,
        c.head("POST", VPCS, &[JSON, ("transfer-encoding", "chunked")], None),
    )
    .await
    .expect("head written");
    for chunk in big.chunks(256 * 1024) {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        guard(what, c.write(&framed)).await.expect("chunk written");
    }
    guard(what, c.write(b"0\r\n\r\n"))
        .await
        .expect("last chunk written");
    let a = guard(what, c.response())
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_status(&a, 413, "RequestEntityTooLarge", what);
    still_serves_h1(&mut c, what).await;

    // Announced too large: answered before a byte of the body is sent; the body then follows
    // and is read and discarded by the server.
    let what = "4 MiB announced, body withheld";
    guard(what, c.head("POST", VPCS, &[JSON], Some(big.len())))
        .await
        .expect("head written");
    let a = guard(what, c.response())
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_status(&a, 413, "RequestEntityTooLarge", what);
    guard(what, c.write(&big)).await.expect("body written");
    still_serves_h1(&mut c, what).await;

    // Announced beyond what the server reads and discards, or waiting for a `100 Continue`
    // that a final answer replaces: a 413 Status, then the connection ends, as the answer says.
    for (what, len, headers) in [
        ("1 GiB announced", 1 << 30, &[JSON][..]),
        (
            "4 MiB with Expect: 100-continue",
            big.len(),
            &[JSON, ("expect", "100-continue")][..],
        ),
    ] {
        let mut c = RawH1::connect(&t).await;
        guard(what, c.head("POST", VPCS, headers, Some(len)))
            .await
            .expect("head written");
        if len > big.len() {
            // A client that sends on regardless still reads the answer: the server closes only
            // after the answer is out, which the kernel keeps readable.
            let chunk = vec![b' '; MIB];
            for _ in 0..16 {
                if guard(what, c.write(&chunk)).await.is_err() {
                    break;
                }
            }
        }
        let a = guard(what, c.response())
            .await
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        assert_status(&a, 413, "RequestEntityTooLarge", what);
        assert_eq!(
            a.headers.get("connection").map(http::HeaderValue::as_bytes),
            Some(&b"close"[..]),
            "{what}: {a:?}"
        );
    }
}

#[tokio::test]
async fn edge_02_http2_over_size_bodies_are_413_and_the_connection_goes_on() {
    let (_s, t) = server_and_target().await;
    let big = big_vpc();
    let mut c = t.connect(Proto::H2).await;

    let what = "4 MiB with Content-Length";
    let a = guard(
        what,
        c.send(wire::request("POST", VPCS, &[JSON], wire::full(big.clone()))),
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_status(&a, 413, "RequestEntityTooLarge", what);
    still_serves(&mut c, what).await;

    // Without a length, in slices: the limit holds while reading.
    let what = "4 MiB streamed without a length";
    let (tx, body) = wire::streamed();
    let feed = big.clone();
    let feeder = tokio::spawn(async move {
        for chunk in feed.chunks(256 * 1024) {
            if tx.send(Bytes::copy_from_slice(chunk)).await.is_err() {
                return;
            }
        }
    });
    let a = guard(what, c.send(wire::request("POST", VPCS, &[JSON], body)))
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_status(&a, 413, "RequestEntityTooLarge", what);
    feeder.abort();
    still_serves(&mut c, what).await;

    // Announced too large (4 MiB, then 1 GiB): answered before a byte of the body is sent; the
    // stream is then reset with NO_ERROR, the connection goes on.
    for len in [big.len(), 1 << 30] {
        let what = format!("{len} bytes announced, body withheld");
        let (tx, body) = wire::streamed();
        let len = len.to_string();
        let resp = guard(
            &what,
            c.start(wire::request(
                "POST",
                VPCS,
                &[JSON, ("content-length", &len)],
                body,
            )),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        drop(tx);
        let a = guard(&what, wire::read(resp))
            .await
            .unwrap_or_else(|e| panic!("{what}: answer unreadable: {e}"));
        assert_status(&a, 413, "RequestEntityTooLarge", &what);
        still_serves(&mut c, &what).await;
    }
}

#[tokio::test]
async fn edge_03_headers_up_to_1_mib_over_http1_and_64_kib_over_http2_beyond_is_431() {
    let (_s, t) = server_and_target().await;
    // The longest request target the `http` crate holds is 64 KiB - 2 bytes.
    let names: Vec<String> = (0..10_000).map(|i| format!("v{i:05}")).collect();
    let mut selector = format!("app in ({})", names.join(","));
    selector.truncate(47_000);
    selector.truncate(selector.rfind(',').expect("a comma"));
    selector.push(')');
    let list = format!(
        "{VPCS}?labelSelector={}",
        form_urlencoded::byte_serialize(selector.as_bytes()).collect::<String>()
    );
    assert!(list.len() > 60_000 && list.len() < 65_000, "{}", list.len());
    let pad = "p".repeat(900 * 1024);
    let over = "p".repeat(MIB + 1024);

    let mut h1 = RawH1::connect(&t).await;
    let a = guard("HTTP/1.1 60 KB selector", h1.send("GET", &list, &[], b""))
        .await
        .expect("answer");
    assert_eq!(a.code, 200, "{a:?}");
    let a = guard(
        "HTTP/1.1 900 KiB header",
        h1.send("GET", VPCS, &[("x-pad", &pad)], b""),
    )
    .await
    .expect("answer");
    assert_eq!(a.code, 200, "{a:?}");
    let what = "HTTP/1.1 1 MiB + 1 KiB header";
    let a = guard(what, h1.send("GET", VPCS, &[("x-pad", &over)], b""))
        .await
        .expect("answer");
    assert_status(&a, 431, "RequestHeaderFieldsTooLarge", what);
    still_serves_h1(&mut h1, what).await;

    let mut h2 = t.connect(Proto::H2).await;
    let a = guard(
        "HTTP/2 60 KB selector",
        h2.send(wire::request("GET", &list, &[], wire::full(""))),
    )
    .await
    .expect("answer");
    assert_eq!(a.code, 200, "{a:?}");
    // HTTP/2 advertises a 64 KiB header list (a larger one could hold a `:path` the server
    // cannot represent, which h2 would only reset): beyond it an answer, 431, and the
    // connection goes on.
    let what = "HTTP/2 70 KB header";
    let a = guard(
        what,
        h2.send(wire::request(
            "GET",
            VPCS,
            &[("x-pad", &pad[..70_000])],
            wire::full(""),
        )),
    )
    .await
    .expect("answer");
    assert_eq!(a.code, 431, "{what}: {a:?}");
    still_serves(&mut h2, what).await;

    // A 70 KB request target is beyond what the `http` crate holds: HTTP/1.1 still gets an
    // answer (hyper's own `414`), not a dropped connection.
    let long = format!("{VPCS}?labelSelector={}", "a".repeat(70_000));
    let mut h1 = RawH1::connect(&t).await;
    let a = guard("HTTP/1.1 70 KB target", h1.send("GET", &long, &[], b""))
        .await
        .expect("an answer, not a reset");
    assert_eq!(a.code, 414, "{a:?}");
}

// === SIGTERM: the real binary ===

/// One `cozyplane-apiserver --standalone` child process; killed by PID when dropped.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    async fn start(dir: &Path, extra: &[&str]) -> (Self, Target) {
        let kubeconfig = dir.join("kubeconfig");
        let log = dir.join("server.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(cozyplane_conformance::server_binary())
            .arg("--secure-port=0")
            .arg("--standalone")
            .arg(format!("--write-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("server starts");
        let mut p = Self { child, log };
        let deadline = Instant::now() + HANG;
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                panic!("server exited with {st}: {}", p.log());
            }
            // The kubeconfig is written in one call; a torn read is retried.
            if let Ok(kc) = std::fs::read_to_string(&kubeconfig)
                && kc.contains("client-key-data:")
            {
                break;
            }
            assert!(Instant::now() < deadline, "server did not write its kubeconfig");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let t = Target::from_kubeconfig(&kubeconfig);
        (p, t)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(st.success(), "kill -{sig} failed");
    }

    async fn exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + HANG;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            assert!(Instant::now() < deadline, "server did not exit: {}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A POST whose body is held half-sent until the test releases it.
struct Held {
    rest: Bytes,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    answer: tokio::task::JoinHandle<Result<Answer, hyper::Error>>,
}

async fn hold_post(t: &Target, proto: Proto, name: &str) -> Held {
    let mut c = t.connect(proto).await;
    let body = Bytes::from(vpc(name));
    let (first, rest) = (body.slice(..10), body.slice(10..));
    let (tx, streamed) = wire::streamed();
    tx.send(first).await.expect("first half sent");
    let len = body.len().to_string();
    let answer = tokio::spawn(async move {
        c.send(wire::request(
            "POST",
            VPCS,
            &[JSON, ("content-length", &len)],
            streamed,
        ))
        .await
    });
    Held { rest, tx, answer }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_04_sigterm_drains_and_exits_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut p, t) = Proc::start(
        dir.path(),
        &["--shutdown-delay-duration=2s", "--shutdown-grace-period=30s"],
    )
    .await;
    let mut c = t.connect(Proto::H2).await;
    let a = guard(
        "create",
        c.send(wire::request("POST", VPCS, &[JSON], wire::full(vpc("a")))),
    )
    .await
    .expect("create");
    assert_eq!(a.code, 201, "{a:?}");

    // A watch that has seen the object, over HTTP/2 and over HTTP/1.1.
    let mut watches = Vec::new();
    for proto in [Proto::H2, Proto::H1] {
        let mut w = t.connect(proto).await;
        let resp = guard(
            "watch",
            w.start(wire::request(
                "GET",
                &format!("{VPCS}?watch=1"),
                &[],
                wire::full(""),
            )),
        )
        .await
        .expect("watch starts");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("\"ADDED\"") {
            let f = guard("first watch event", body.frame())
                .await
                .expect("watch open")
                .expect("watch event");
            if let Ok(d) = f.into_data() {
                seen.extend_from_slice(&d);
            }
        }
        watches.push((proto, w, body));
    }
    // Requests in flight: POSTs with half of their body sent.
    let held = vec![
        hold_post(&t, Proto::H1, "h1").await,
        hold_post(&t, Proto::H2, "h2").await,
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;
    for h in &held {
        assert!(!h.answer.is_finished(), "a held POST was answered early");
    }

    p.signal("TERM");

    // During the delay: not ready, still alive, still accepting.
    guard("/readyz fails after SIGTERM", async {
        loop {
            let mut probe = t.connect(Proto::H1).await;
            let a = probe
                .send(wire::request("GET", "/readyz?verbose", &[], wire::full("")))
                .await
                .expect("readyz answered");
            if a.code != 200 {
                assert_eq!(a.code, 500, "{a:?}");
                assert!(a.body.contains("[-]shutdown failed"), "{}", a.body);
                let l = probe
                    .send(wire::request("GET", "/livez", &[], wire::full("")))
                    .await
                    .expect("livez answered");
                assert_eq!(l.code, 200, "{l:?}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // Then the listener closes: new connections are refused.
    guard("new connections refused", async {
        loop {
            match tokio::net::TcpStream::connect(&t.addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;

    // Watches end cleanly: the stream is terminated, not reset.
    for (proto, _w, mut body) in watches {
        loop {
            match guard("watch end", body.frame()).await {
                None => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("{proto:?} watch ended with an error: {e}"),
            }
        }
    }

    // Requests in flight finish.
    for h in held {
        guard("rest of a held body", h.tx.send(h.rest))
            .await
            .expect("rest of the body accepted");
        drop(h.tx);
        let a = guard("held POST", h.answer)
            .await
            .expect("task")
            .expect("the request in flight is answered");
        assert_eq!(a.code, 201, "{a:?}");
    }

    let st = p.exit().await;
    assert_eq!(st.code(), Some(0), "exit status {st}: {}", p.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_05_the_grace_period_bounds_the_drain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut p, t) = Proc::start(dir.path(), &["--shutdown-grace-period=1s"]).await;
    // A request that never finishes: its body is never completed.
    let held = hold_post(&t, Proto::H1, "never").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.answer.is_finished(), "a held POST was answered early");
    p.signal("TERM");
    let st = p.exit().await;
    assert_eq!(st.code(), Some(0), "exit status {st}: {}", p.log());
    let r = guard("held POST", held.answer).await.expect("task");
    assert!(r.is_err(), "the cut request has no answer: {r:?}");
    drop(held.tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_06_a_second_signal_exits_at_once_with_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut p, t) = Proc::start(dir.path(), &[]).await;
    let held = hold_post(&t, Proto::H2, "never").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.signal("TERM");
    // The drain has begun once new connections are refused; the held request keeps it going.
    guard("new connections refused", async {
        loop {
            match tokio::net::TcpStream::connect(&t.addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert!(
        p.child.try_wait().expect("wait").is_none(),
        "exited before the second signal"
    );
    p.signal("INT");
    let st = p.exit().await;
    assert_eq!(st.code(), Some(1), "exit status {st}: {}", p.log());
    drop(held);
}
