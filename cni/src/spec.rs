//! CNI spec 1.1.0 wire types: network configuration, result, error, version answer.
//!
//! Only the fields cozyplane reads or writes are typed; everything else a runtime sends
//! is kept in `extra` so it can be forwarded untouched.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The versions this plugin answers `VERSION` with, oldest first.
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest version, used when a request names none (VERSION without config).
pub const LATEST_VERSION: &str = "1.1.0";

/// Where the agent listens when the config does not say.
pub const DEFAULT_AGENT_SOCKET: &str = "/run/cozyplane/cni.sock";

/// The network configuration on stdin (one plugin of a conflist, as the runtime passes it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    /// Spec version the runtime speaks; the result is written in it.
    #[serde(default)]
    pub cni_version: String,
    /// Network name.
    #[serde(default)]
    pub name: String,
    /// Plugin type (binary name).
    #[serde(default, rename = "type")]
    pub plugin_type: String,
    /// The agent's unix socket; [`DEFAULT_AGENT_SOCKET`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_socket: Option<String>,
    /// How long to wait for the agent, in seconds (default [`NetConf::DEFAULT_TIMEOUT_SECS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_timeout_seconds: Option<u64>,
    /// Result of the previous plugin in the chain (CHECK, DEL, or ADD when chained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_result: Option<Value>,
    /// Every other key, kept verbatim (runtimeConfig, args, GC's valid attachments, ...).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl NetConf {
    /// Default agent timeout: long enough for a loaded node, short enough that kubelet
    /// retries instead of hanging (its own CNI timeout is minutes).
    pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
}

/// A CNI result (spec §"Success"): what the plugin created.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    /// Same as the request's `cniVersion`.
    pub cni_version: String,
    /// Interfaces created, host side first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// Addresses assigned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    /// Routes installed in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// DNS settings (empty: the runtime's defaults).
    #[serde(default)]
    pub dns: Dns,
}

/// One interface of a result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// MAC, `aa:bb:cc:dd:ee:ff`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// MTU (spec 1.1.0; older readers ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path for container interfaces; absent for host interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// One address of a result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpConfig {
    /// `"4"`/`"6"`: required by 0.3.x/0.4.0 readers, removed in 1.0.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// CIDR notation, e.g. `10.1.2.3/32`.
    pub address: String,
    /// Default gateway for this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

/// One route of a result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// Destination CIDR.
    pub dst: String,
    /// Next hop; absent means the interface's default gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// DNS part of a result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dns {
    /// Resolvers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Local domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// resolv.conf options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl CniResult {
    /// Adapt the result to `version`: before 1.0.0 every IP carried `"version"`, and
    /// chained plugins of that era reject a result without it.
    pub fn for_version(mut self, version: &str) -> Self {
        let legacy = matches!(version, "0.3.0" | "0.3.1" | "0.4.0");
        for ip in &mut self.ips {
            ip.version = legacy.then(|| if ip.address.contains(':') { "6" } else { "4" }.to_string());
        }
        if legacy {
            for i in &mut self.interfaces {
                i.mtu = None;
            }
        }
        self.cni_version = version.to_string();
        self
    }
}

/// The answer to VERSION.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionResult {
    /// The request's version, or [`LATEST_VERSION`].
    pub cni_version: String,
    /// [`SUPPORTED_VERSIONS`].
    pub supported_versions: Vec<String>,
}

/// The spec's well-known error codes (0–99 are reserved by the spec; 999 is libcni's
/// "internal"), plus cozyplane's own from 100 up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 1: the config's `cniVersion` is not supported.
    IncompatibleVersion,
    /// 2: a config field is not supported.
    UnsupportedField,
    /// 3: the container does not exist or is unknown.
    UnknownContainer,
    /// 4: a required `CNI_*` variable is missing or invalid.
    InvalidEnv,
    /// 5: an I/O failure (e.g. the agent's socket).
    Io,
    /// 6: the input could not be decoded.
    Decode,
    /// 7: the network configuration is invalid.
    InvalidConfig,
    /// 11: transient; the runtime should retry later.
    TryAgainLater,
    /// 50: STATUS: the plugin cannot serve ADDs.
    NotAvailable,
    /// 51: STATUS: the plugin can serve ADDs with limited connectivity.
    LimitedConnectivity,
    /// 100: CHECK found the attachment differs from what ADD created.
    CheckFailed,
    /// 101: the pod asks for a VPC attachment, which this agent cannot serve yet.
    VpcUnavailable,
    /// 102: the pod asks for a VPC that no VPCBinding in its namespace grants.
    VpcNotBound,
    /// 999: an internal error of the plugin or the agent.
    Internal,
}

impl ErrorCode {
    /// The numeric code on the wire.
    pub const fn code(self) -> u32 {
        match self {
            Self::IncompatibleVersion => 1,
            Self::UnsupportedField => 2,
            Self::UnknownContainer => 3,
            Self::InvalidEnv => 4,
            Self::Io => 5,
            Self::Decode => 6,
            Self::InvalidConfig => 7,
            Self::TryAgainLater => 11,
            Self::NotAvailable => 50,
            Self::LimitedConnectivity => 51,
            Self::CheckFailed => 100,
            Self::VpcUnavailable => 101,
            Self::VpcNotBound => 102,
            Self::Internal => 999,
        }
    }

    /// The spec's meaning, used as `msg` when nothing more specific is known.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::IncompatibleVersion => "incompatible CNI version",
            Self::UnsupportedField => "unsupported field in network configuration",
            Self::UnknownContainer => "container unknown or does not exist",
            Self::InvalidEnv => "invalid necessary environment variables",
            Self::Io => "I/O failure",
            Self::Decode => "failed to decode content",
            Self::InvalidConfig => "invalid network config",
            Self::TryAgainLater => "try again later",
            Self::NotAvailable => "plugin not available",
            Self::LimitedConnectivity => "plugin not available: limited connectivity",
            Self::CheckFailed => "attachment does not match what ADD created",
            Self::VpcUnavailable => "VPC attachment not available",
            Self::VpcNotBound => "VPC not bound to the pod's namespace",
            Self::Internal => "internal error",
        }
    }
}

/// The error object a plugin prints on failure (spec §"Error").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniError {
    /// The request's version.
    pub cni_version: String,
    /// A well-known code or one of ours.
    pub code: u32,
    /// Short message.
    pub msg: String,
    /// Longer explanation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    /// An error with `code`, `msg` and `details`, in the latest version (callers set it).
    pub fn new(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Self {
        Self {
            cni_version: LATEST_VERSION.to_string(),
            code: code.code(),
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// `code` with the spec's meaning as the message.
    pub fn plain(code: ErrorCode, details: impl Into<String>) -> Self {
        Self::new(code, code.meaning(), details)
    }

    /// The same error in `version`.
    pub fn in_version(mut self, version: &str) -> Self {
        if !version.is_empty() {
            self.cni_version = version.to_string();
        }
        self
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl core::error::Error for CniError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netconf_keeps_unknown_keys_and_prev_result() {
        let raw = r#"{"cniVersion":"1.0.0","name":"n","type":"cozyplane","mtu":1400,
            "prevResult":{"cniVersion":"1.0.0"},"runtimeConfig":{"portMappings":[]}}"#;
        let c: NetConf = serde_json::from_str(raw).unwrap();
        assert_eq!(c.plugin_type, "cozyplane");
        assert!(c.prev_result.is_some());
        assert_eq!(c.extra["mtu"], 1400);
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(back["runtimeConfig"]["portMappings"], serde_json::json!([]));
    }

    #[test]
    fn legacy_results_carry_ip_version() {
        let r = CniResult {
            ips: vec![IpConfig {
                address: "10.0.0.2/32".into(),
                ..IpConfig::default()
            }],
            ..CniResult::default()
        };
        let old = r.clone().for_version("0.3.1");
        assert_eq!(old.ips[0].version.as_deref(), Some("4"));
        let new = r.for_version("1.1.0");
        let v = serde_json::to_value(&new).unwrap();
        assert!(v["ips"][0].get("version").is_none());
        assert_eq!(v["cniVersion"], "1.1.0");
    }

    #[test]
    fn error_json_has_the_spec_fields() {
        let e = CniError::plain(ErrorCode::TryAgainLater, "agent busy").in_version("1.0.0");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 11);
        assert_eq!(v["msg"], "try again later");
        assert_eq!(v["details"], "agent busy");
    }

    #[test]
    fn well_known_codes() {
        let codes: Vec<u32> = [
            ErrorCode::IncompatibleVersion,
            ErrorCode::UnsupportedField,
            ErrorCode::UnknownContainer,
            ErrorCode::InvalidEnv,
            ErrorCode::Io,
            ErrorCode::Decode,
            ErrorCode::InvalidConfig,
            ErrorCode::TryAgainLater,
            ErrorCode::NotAvailable,
            ErrorCode::Internal,
        ]
        .iter()
        .map(|c| c.code())
        .collect();
        assert_eq!(codes, [1, 2, 3, 4, 5, 6, 7, 11, 50, 999]);
    }
}
