//! The real binary, driven the way a runtime drives it: env + stdin, JSON on stdout.
//!
//! The binary is its own package (`cni/bin`, a separate workspace built without libc), so
//! Cargo does not build it for these tests: `make build` (or `cargo build --manifest-path
//! cni/bin/Cargo.toml`, with `--release` for release tests and the same `CARGO_TARGET_DIR`)
//! must have put it next to the test's own profile directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `<target>/<profile>/cozyplane-cni`, found from this test binary
/// (`<target>/<profile>/deps/cli-…`) as `cozyplane_lab::bin_dir` finds the binaries.
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let p = dir.join("cozyplane-cni");
    let release = if dir.ends_with("release") {
        " --release"
    } else {
        ""
    };
    assert!(
        p.exists(),
        "{} missing: build the plugin first with `make build` or \
         `cargo build --manifest-path cni/bin/Cargo.toml{release}` (same CARGO_TARGET_DIR)",
        p.display()
    );
    p
}

fn invoke(env: &[(&str, &str)], stdin: &str) -> (i32, serde_json::Value, String) {
    let mut child = Command::new(plugin())
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cozyplane-cni");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = if stdout.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
    };
    (out.status.code().unwrap_or(-1), json, stdout)
}

#[test]
fn version() {
    let (code, v, _) = invoke(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(code, 0);
    assert_eq!(v["cniVersion"], "1.0.0");
    assert_eq!(
        v["supportedVersions"],
        serde_json::json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
}

#[test]
fn bad_env_is_error_4_as_json() {
    let (code, v, _) = invoke(&[("CNI_COMMAND", "ADD")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(code, 1);
    assert_eq!(v["code"], 4);
    assert_eq!(v["cniVersion"], "1.0.0");
}

#[test]
fn del_with_the_agent_down_succeeds_add_says_try_again() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"cozy","type":"cozyplane","agentSocket":"{}"}}"#,
        sock.display()
    );
    let env = |cmd| {
        vec![
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/none"),
            ("CNI_IFNAME", "eth0"),
        ]
    };
    let (code, v, out) = invoke(&env("DEL"), &conf);
    assert_eq!((code, v), (0, serde_json::Value::Null), "{out}");
    let (code, v, _) = invoke(&env("ADD"), &conf);
    assert_eq!((code, &v["code"]), (1, &serde_json::json!(11)));
}

/// The binary's own socket transport end to end: the request as the agent receives it, the
/// agent's result on stdout.
#[test]
fn add_is_forwarded_to_the_agent_and_its_result_printed() {
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let agent = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = Vec::new();
        // The plugin shuts down its write half after the request.
        s.read_to_end(&mut req).unwrap();
        let req: serde_json::Value = serde_json::from_slice(&req).unwrap();
        let answer = serde_json::json!({"outcome": "ok", "result": {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/32"}]}});
        s.write_all(answer.to_string().as_bytes()).unwrap();
        req
    });
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"cozy","type":"cozyplane","agentSocket":"{}","mtu":1400}}"#,
        sock.display()
    );
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/p"),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
        ),
        ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
    ];
    let (code, v, out) = invoke(&env, &conf);
    assert_eq!(
        (code, &v["ips"][0]["address"]),
        (0, &serde_json::json!("10.0.0.2/32")),
        "{out}"
    );
    assert!(out.ends_with("}\n"), "{out:?}");
    let req = agent.join().unwrap();
    assert_eq!(req["env"]["command"], "ADD");
    assert_eq!(req["env"]["args"][2], serde_json::json!(["K8S_POD_NAME", "web"]));
    assert_eq!(
        req["env"]["path"],
        serde_json::json!(["/opt/cni/bin", "/usr/lib/cni"])
    );
    assert_eq!(req["config"]["mtu"], 1400);
}

/// An agent that accepts but never answers: the plugin gives up after agentTimeoutSeconds and
/// asks the runtime to retry (code 11), it does not hang.
#[test]
fn an_agent_that_never_answers_is_try_again_later() {
    use std::os::unix::net::UnixListener;

    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let hold = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"cozy","type":"cozyplane","agentSocket":"{}","agentTimeoutSeconds":1}}"#,
        sock.display()
    );
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/p"),
        ("CNI_IFNAME", "eth0"),
    ];
    let t = std::time::Instant::now();
    let (code, v, out) = invoke(&env, &conf);
    assert_eq!((code, &v["code"]), (1, &serde_json::json!(11)), "{out}");
    assert!(
        v["details"]
            .as_str()
            .unwrap()
            .ends_with("Resource temporarily unavailable (os error 11)"),
        "{out}"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    drop(hold.join());
}
