//! The plugin↔agent protocol over the agent's unix socket.
//!
//! One request per connection: the plugin writes a [`Request`] as JSON and shuts down its
//! write half; the agent answers with one [`Response`] as JSON and closes. No framing
//! beyond EOF is needed, and a crashed peer shows up as a short read, never a hang
//! (both sides use timeouts).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::env::CniEnv;
use crate::spec::CniError;

/// Upper bound for either message; a netconf with a prevResult is a few KiB.
pub const MAX_MESSAGE: usize = 1 << 20;

/// What the plugin forwards: the environment and the stdin config, both as received.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The validated `CNI_*` environment.
    pub env: CniEnv,
    /// The network configuration from stdin, verbatim.
    pub config: Value,
}

/// The agent's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Response {
    /// Success; ADD (and a chained GC/STATUS, never) carries a result to print.
    Ok {
        /// The CNI result to print on stdout, already in the request's version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
    },
    /// Failure, printed on stdout as the CNI error object.
    Err {
        /// The error.
        error: CniError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Command;

    #[test]
    fn round_trip() {
        let req = Request {
            env: CniEnv {
                command: Command::Add,
                container_id: "c".into(),
                netns: "/n".into(),
                ifname: "eth0".into(),
                args: vec![("K8S_POD_NAME".into(), "p".into())],
                path: vec![],
            },
            config: serde_json::json!({"cniVersion": "1.0.0"}),
        };
        let s = serde_json::to_string(&req).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), req);
        let resp = Response::Ok { result: None };
        let s = serde_json::to_string(&resp).unwrap();
        assert_eq!(s, r#"{"outcome":"ok"}"#);
        assert_eq!(serde_json::from_str::<Response>(&s).unwrap(), resp);
    }
}
