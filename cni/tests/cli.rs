//! The real binary, driven the way a runtime drives it: env + stdin, JSON on stdout.

use std::io::Write;
use std::process::{Command, Stdio};

fn invoke(env: &[(&str, &str)], stdin: &str) -> (i32, serde_json::Value, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cozyplane-cni"))
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
