//! The plugin's logic, independent of the process: given the environment, stdin and a
//! [`Transport`] to the agent, produce what to print and the exit status.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use serde_json::Value;

use crate::env::{CniEnv, Command};
use crate::io::{IoError, IoErrorKind};
use crate::proto::{Request, Response};
use crate::spec::{
    CniError, DEFAULT_AGENT_SOCKET, ErrorCode, LATEST_VERSION, NetConf, SUPPORTED_VERSIONS, VersionResult,
};

/// Why the agent could not be asked.
#[derive(Debug)]
pub enum TransportError {
    /// Nothing listens on the socket (no file, connection refused): the agent is down.
    Unreachable(IoError),
    /// Connected, but the exchange failed or timed out.
    Failed(IoError),
    /// The agent answered something that is not a [`Response`].
    BadResponse(String),
}

impl TransportError {
    /// The error for a failed connect: [`TransportError::Unreachable`] if the socket is
    /// missing or nobody listens on it, else [`TransportError::Failed`].
    pub fn connect(e: IoError) -> Self {
        match e.kind() {
            IoErrorKind::NotFound | IoErrorKind::ConnectionRefused => Self::Unreachable(e),
            _ => Self::Failed(e),
        }
    }
}

/// How the plugin reaches the agent; a unix socket in production, a fake in tests.
pub trait Transport {
    /// Send `req` to the agent at `socket` and wait up to `timeout` for its answer.
    fn call(&self, socket: &str, req: &Request, timeout: Duration) -> Result<Response, TransportError>;
}

/// The std transport: one connection per request (see [`crate::proto`]). The plugin binary
/// has its own over raw system calls, with the same steps and errors.
#[cfg(feature = "std")]
#[derive(Debug, Default, Clone, Copy)]
pub struct UnixTransport;

#[cfg(feature = "std")]
impl Transport for UnixTransport {
    fn call(&self, socket: &str, req: &Request, timeout: Duration) -> Result<Response, TransportError> {
        use std::io::{Read, Write};
        use std::os::unix::net::UnixStream;

        use crate::proto::MAX_MESSAGE;

        let failed = |e: std::io::Error| TransportError::Failed(e.into());
        let mut s = UnixStream::connect(socket).map_err(|e| TransportError::connect(e.into()))?;
        let body = serde_json::to_vec(req).map_err(|e| TransportError::BadResponse(e.to_string()))?;
        s.set_write_timeout(Some(timeout)).map_err(failed)?;
        s.set_read_timeout(Some(timeout)).map_err(failed)?;
        s.write_all(&body).map_err(failed)?;
        s.shutdown(std::net::Shutdown::Write).map_err(failed)?;
        let mut out = Vec::new();
        (&mut s)
            .take(MAX_MESSAGE as u64 + 1)
            .read_to_end(&mut out)
            .map_err(failed)?;
        response(&out)
    }
}

/// Decode the agent's answer. The transports read at most one byte more than
/// [`crate::proto::MAX_MESSAGE`], and an answer that long is refused as too large.
pub fn response(raw: &[u8]) -> Result<Response, TransportError> {
    if raw.len() > crate::proto::MAX_MESSAGE {
        return Err(TransportError::BadResponse("response too large".into()));
    }
    serde_json::from_slice(raw).map_err(|e| TransportError::BadResponse(e.to_string()))
}

/// What the binary prints on stdout and how it exits.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// JSON to print, if any (DEL/CHECK/STATUS/GC print nothing on success).
    pub stdout: Option<Value>,
    /// 0 on success, 1 with a CNI error on stdout.
    pub exit_code: i32,
}

impl Outcome {
    fn ok(stdout: Option<Value>) -> Self {
        Self { stdout, exit_code: 0 }
    }

    fn err(e: &CniError) -> Self {
        Self {
            // A CniError always serializes.
            stdout: serde_json::to_value(e).ok(),
            exit_code: 1,
        }
    }
}

/// Run one invocation. Never panics on any input (a proptest checks this).
pub fn run(lookup: impl Fn(&str) -> Option<String>, stdin: &[u8], transport: &dyn Transport) -> Outcome {
    let env = match CniEnv::from_lookup(lookup) {
        Ok(e) => e,
        Err(e) => {
            // Best effort: answer in the config's version if stdin has one.
            let v = serde_json::from_slice::<NetConf>(stdin)
                .map(|c| c.cni_version)
                .unwrap_or_default();
            return Outcome::err(&e.in_version(&v));
        }
    };
    match dispatch(&env, stdin, transport) {
        Ok(out) => Outcome::ok(out),
        Err((e, version)) => Outcome::err(&e.in_version(&version)),
    }
}

fn dispatch(
    env: &CniEnv,
    stdin: &[u8],
    transport: &dyn Transport,
) -> Result<Option<Value>, (CniError, String)> {
    // VERSION may come with an empty or minimal stdin; answer it without the agent.
    if env.command == Command::Version {
        let version = serde_json::from_slice::<NetConf>(stdin)
            .ok()
            .map(|c| c.cni_version)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| LATEST_VERSION.to_string());
        let answer = VersionResult {
            cni_version: version,
            supported_versions: SUPPORTED_VERSIONS.iter().map(ToString::to_string).collect(),
        };
        return Ok(serde_json::to_value(answer).ok());
    }

    let raw: Value = serde_json::from_slice(stdin).map_err(|e| {
        (
            CniError::new(
                ErrorCode::Decode,
                "failed to decode network configuration",
                e.to_string(),
            ),
            String::new(),
        )
    })?;
    let conf: NetConf = serde_json::from_value(raw.clone()).map_err(|e| {
        (
            CniError::new(
                ErrorCode::InvalidConfig,
                "invalid network configuration",
                e.to_string(),
            ),
            String::new(),
        )
    })?;
    let version = conf.cni_version.clone();
    let fail = |e: CniError| (e, version.clone());
    if !SUPPORTED_VERSIONS.contains(&version.as_str()) {
        return Err(fail(CniError::new(
            ErrorCode::IncompatibleVersion,
            "incompatible CNI version",
            format!("cniVersion {version:?} is not one of {SUPPORTED_VERSIONS:?}"),
        )));
    }
    if version_lt(&version, env.command.since()) {
        return Err(fail(CniError::new(
            ErrorCode::IncompatibleVersion,
            "incompatible CNI version",
            format!(
                "{:?} needs cniVersion {} or later",
                env.command,
                env.command.since()
            ),
        )));
    }

    let socket = conf.agent_socket.as_deref().unwrap_or(DEFAULT_AGENT_SOCKET);
    let timeout = Duration::from_secs(
        conf.agent_timeout_seconds
            .unwrap_or(NetConf::DEFAULT_TIMEOUT_SECS)
            .clamp(1, 600),
    );
    let req = Request {
        env: env.clone(),
        config: raw,
    };
    match transport.call(socket, &req, timeout) {
        Ok(Response::Ok { result }) => Ok(result),
        Ok(Response::Err { error }) => Err(fail(error)),
        // The agent is down: nothing of this attachment can be undone now, and the spec
        // wants DEL to succeed when there is nothing (known) to delete. The agent's
        // restart reconciliation and GC collect what is left.
        Err(TransportError::Unreachable(_)) if env.command == Command::Del => Ok(None),
        Err(TransportError::Unreachable(e)) => {
            let code = match env.command {
                Command::Status => ErrorCode::NotAvailable,
                _ => ErrorCode::TryAgainLater,
            };
            Err(fail(CniError::new(
                code,
                "cozyplane agent not reachable",
                format!("{socket}: {e}"),
            )))
        }
        Err(TransportError::Failed(e)) => {
            let code = match e.kind() {
                IoErrorKind::TimedOut | IoErrorKind::WouldBlock => ErrorCode::TryAgainLater,
                _ => ErrorCode::Io,
            };
            Err(fail(CniError::new(
                code,
                "talking to the cozyplane agent failed",
                format!("{socket}: {e}"),
            )))
        }
        Err(TransportError::BadResponse(e)) => Err(fail(CniError::new(
            ErrorCode::Internal,
            "the cozyplane agent sent an invalid response",
            e,
        ))),
    }
}

/// `a < b` for dotted versions; non-numeric parts compare as 0.
fn version_lt(a: &str, b: &str) -> bool {
    let parse = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(a) < parse(b)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    type Answer = Box<dyn Fn(&Request) -> Result<Response, TransportError>>;

    struct Fake {
        answer: Answer,
        seen: RefCell<Vec<(String, Request)>>,
    }

    impl Fake {
        fn new(answer: impl Fn(&Request) -> Result<Response, TransportError> + 'static) -> Self {
            Self {
                answer: Box::new(answer),
                seen: RefCell::new(Vec::new()),
            }
        }
    }

    impl Transport for Fake {
        fn call(&self, socket: &str, req: &Request, _: Duration) -> Result<Response, TransportError> {
            self.seen.borrow_mut().push((socket.to_string(), req.clone()));
            (self.answer)(req)
        }
    }

    fn unreachable() -> Result<Response, TransportError> {
        Err(TransportError::Unreachable(IoError::from_errno(2)))
    }

    fn lookup(cmd: &str) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<&str, String> = [
            ("CNI_COMMAND", cmd.to_string()),
            ("CNI_CONTAINERID", "ctr".into()),
            ("CNI_NETNS", "/run/netns/x".into()),
            ("CNI_IFNAME", "eth0".into()),
        ]
        .into();
        move |k| m.get(k).cloned()
    }

    const CONF: &[u8] =
        br#"{"cniVersion":"1.0.0","name":"cozy","type":"cozyplane","agentSocket":"/tmp/x.sock"}"#;

    #[test]
    fn version_is_answered_locally() {
        let fake = Fake::new(|_| panic!("VERSION must not reach the agent"));
        let out = run(lookup("VERSION"), b"", &fake);
        assert_eq!(out.exit_code, 0);
        let v = out.stdout.unwrap();
        assert_eq!(v["cniVersion"], "1.1.0");
        assert_eq!(v["supportedVersions"], serde_json::json!(SUPPORTED_VERSIONS));
        let out = run(lookup("VERSION"), br#"{"cniVersion":"0.4.0"}"#, &fake);
        assert_eq!(out.stdout.unwrap()["cniVersion"], "0.4.0");
    }

    #[test]
    fn add_forwards_and_prints_the_result() {
        let fake = Fake::new(|req| {
            assert_eq!(req.env.command, Command::Add);
            Ok(Response::Ok {
                result: Some(serde_json::json!({"cniVersion": "1.0.0", "ips": []})),
            })
        });
        let out = run(lookup("ADD"), CONF, &fake);
        assert_eq!(out.exit_code, 0);
        assert_eq!(out.stdout.unwrap()["cniVersion"], "1.0.0");
        assert_eq!(fake.seen.borrow()[0].0, "/tmp/x.sock");
    }

    #[test]
    fn agent_errors_are_printed_in_the_request_version() {
        let fake = Fake::new(|_| {
            Ok(Response::Err {
                error: CniError::plain(ErrorCode::VpcUnavailable, "no"),
            })
        });
        let out = run(lookup("ADD"), CONF, &fake);
        assert_eq!(out.exit_code, 1);
        let v = out.stdout.unwrap();
        assert_eq!(
            (v["code"].as_u64(), v["cniVersion"].as_str()),
            (Some(101), Some("1.0.0"))
        );
    }

    #[test]
    fn del_succeeds_when_the_agent_is_down_add_asks_to_retry_status_unavailable() {
        let fake = Fake::new(|_| unreachable());
        assert_eq!(run(lookup("DEL"), CONF, &fake), Outcome::ok(None));
        assert_eq!(run(lookup("ADD"), CONF, &fake).stdout.unwrap()["code"], 11);
        let status = br#"{"cniVersion":"1.1.0","name":"cozy","type":"cozyplane"}"#;
        let out = run(lookup("STATUS"), status, &fake);
        assert_eq!(out.stdout.unwrap()["code"], 50);
        assert_eq!(fake.seen.borrow()[2].0, DEFAULT_AGENT_SOCKET);
    }

    #[test]
    fn version_gates() {
        let fake = Fake::new(|_| Ok(Response::Ok { result: None }));
        let v = |conf: &[u8], cmd| run(lookup(cmd), conf, &fake);
        assert_eq!(v(br#"{"cniVersion":"9.9.9"}"#, "ADD").stdout.unwrap()["code"], 1);
        assert_eq!(
            v(br#"{"cniVersion":"0.3.1"}"#, "CHECK").stdout.unwrap()["code"],
            1
        );
        assert_eq!(v(br#"{"cniVersion":"1.0.0"}"#, "GC").stdout.unwrap()["code"], 1);
        assert_eq!(v(br#"{"cniVersion":"1.1.0"}"#, "GC").exit_code, 0);
        assert_eq!(v(b"{not json", "ADD").stdout.unwrap()["code"], 6);
        assert_eq!(v(br#"{"cniVersion":7}"#, "ADD").stdout.unwrap()["code"], 7);
    }

    proptest! {
        /// Arbitrary stdin never panics and always yields either success or an error object.
        #[test]
        fn random_stdin_never_panics(stdin in proptest::collection::vec(any::<u8>(), 0..512),
                                     cmd in prop::sample::select(vec!["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC", "", "X"])) {
            let fake = Fake::new(|_| unreachable());
            let out = run(lookup(cmd), &stdin, &fake);
            prop_assert!(out.exit_code == 0 || out.stdout.as_ref().is_some_and(|v| v["code"].is_u64()));
        }

        /// Arbitrary JSON configs (the shapes runtimes send, with random values) never panic.
        #[test]
        fn random_json_configs_never_panic(version in prop::sample::select(vec!["0.3.0", "0.4.0", "1.0.0", "1.1.0", "", "x"]),
                                           name in ".{0,20}", sock in proptest::option::of(".{0,40}"),
                                           timeout in proptest::option::of(any::<i64>()),
                                           prev in proptest::option::of(".{0,30}"),
                                           cmd in prop::sample::select(vec!["ADD", "DEL", "CHECK", "STATUS", "GC"])) {
            let mut conf = serde_json::json!({"cniVersion": version, "name": name, "type": "cozyplane"});
            if let Some(s) = sock { conf["agentSocket"] = s.into(); }
            if let Some(t) = timeout { conf["agentTimeoutSeconds"] = t.into(); }
            if let Some(p) = prev { conf["prevResult"] = serde_json::json!({"cniVersion": p, "ips": [{"address": p}]}); }
            let fake = Fake::new(|_| Ok(Response::Ok { result: None }));
            let out = run(lookup(cmd), conf.to_string().as_bytes(), &fake);
            prop_assert!(out.exit_code == 0 || out.stdout.is_some());
        }
    }
}
