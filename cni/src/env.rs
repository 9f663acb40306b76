//! The `CNI_*` environment the runtime sets for every invocation.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use crate::spec::{CniError, ErrorCode};

/// `CNI_COMMAND`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach; must succeed when there is nothing to detach.
    Del,
    /// Verify an attachment.
    Check,
    /// Report supported versions (answered locally, never forwarded).
    Version,
    /// Is the plugin ready for ADDs (spec 1.1.0)?
    Status,
    /// Drop every attachment not in the valid list (spec 1.1.0).
    Gc,
}

impl Command {
    /// Parse the variable's value.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADD" => Self::Add,
            "DEL" => Self::Del,
            "CHECK" => Self::Check,
            "VERSION" => Self::Version,
            "STATUS" => Self::Status,
            "GC" => Self::Gc,
            _ => return None,
        })
    }

    /// The oldest spec version that defines this command.
    pub fn since(self) -> &'static str {
        match self {
            Self::Add | Self::Del | Self::Version => "0.3.0",
            Self::Check => "0.4.0",
            Self::Status | Self::Gc => "1.1.0",
        }
    }

    /// Whether the command names one container attachment.
    fn per_container(self) -> bool {
        matches!(self, Self::Add | Self::Del | Self::Check)
    }
}

/// The Kubernetes pod identity kubelet puts into `CNI_ARGS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_UID`.
    pub uid: String,
}

/// Everything the runtime passes in the environment, validated for the command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniEnv {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID` (empty for VERSION/STATUS/GC).
    pub container_id: String,
    /// `CNI_NETNS`: path of the container's netns (may be empty on DEL).
    pub netns: String,
    /// `CNI_IFNAME`: interface name inside the container.
    pub ifname: String,
    /// `CNI_ARGS` as key/value pairs, in order.
    pub args: Vec<(String, String)>,
    /// `CNI_PATH`, split on `:`.
    pub path: Vec<String>,
}

impl CniEnv {
    /// Read and validate the variables from (name, value) pairs in environment order, as
    /// [`vars_lookup`] reads them.
    pub fn from_vars<I, K, V>(vars: I) -> Result<Self, CniError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        Self::from_lookup(vars_lookup(vars))
    }

    /// Read and validate the variables through `get` (the process environment in the binary,
    /// a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let raw = get("CNI_COMMAND").unwrap_or_default();
        let command = Command::parse(&raw).ok_or_else(|| {
            CniError::new(
                ErrorCode::InvalidEnv,
                "invalid CNI_COMMAND",
                format!("CNI_COMMAND={raw:?}; expected ADD, DEL, CHECK, VERSION, STATUS or GC"),
            )
        })?;
        let var = |k: &str| get(k).unwrap_or_default();
        let env = Self {
            command,
            container_id: var("CNI_CONTAINERID"),
            netns: var("CNI_NETNS"),
            ifname: var("CNI_IFNAME"),
            args: parse_args(&var("CNI_ARGS"))?,
            path: var("CNI_PATH")
                .split(':')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
        };
        env.validate()?;
        Ok(env)
    }

    fn validate(&self) -> Result<(), CniError> {
        if !self.command.per_container() {
            return Ok(());
        }
        let missing = |k: &str| CniError::new(ErrorCode::InvalidEnv, format!("{k} is required"), "");
        if self.container_id.is_empty() {
            return Err(missing("CNI_CONTAINERID"));
        }
        if self.ifname.is_empty() {
            return Err(missing("CNI_IFNAME"));
        }
        // The kernel's IFNAMSIZ: a longer name cannot be created, so an ADD (or CHECK) of one
        // is refused up front. A DEL of one goes on, finding nothing to remove: a runtime (or
        // Multus, for each delegate it holds) sends the DEL of a failed ADD too, and refusing
        // it would make the sandbox's teardown fail for ever.
        if self.command != Command::Del && (self.ifname.len() > 15 || self.ifname.contains(['/', ' ', ':'])) {
            return Err(CniError::new(
                ErrorCode::InvalidEnv,
                "invalid CNI_IFNAME",
                format!("{:?} is not a valid interface name", self.ifname),
            ));
        }
        // DEL may come after the netns is gone; ADD and CHECK need it.
        if self.netns.is_empty() && self.command != Command::Del {
            return Err(missing("CNI_NETNS"));
        }
        Ok(())
    }

    /// The value of `key` in `CNI_ARGS`.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The pod kubelet named, if it did.
    pub fn pod(&self) -> Option<PodRef> {
        Some(PodRef {
            namespace: self.arg("K8S_POD_NAMESPACE")?.to_string(),
            name: self.arg("K8S_POD_NAME")?.to_string(),
            uid: self.arg("K8S_POD_UID").unwrap_or_default().to_string(),
        })
    }
}

/// `CNI_ARGS`: `K=V;K=V`. Empty segments are tolerated (kubelet emits `IgnoreUnknown=1;...`).
fn parse_args(raw: &str) -> Result<Vec<(String, String)>, CniError> {
    raw.split(';')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| {
                    CniError::new(
                        ErrorCode::InvalidEnv,
                        "invalid CNI_ARGS",
                        format!("{kv:?} is not KEY=VALUE"),
                    )
                })
        })
        .collect()
}

/// An environment as a lookup function, from (name, value) pairs in environment order: a
/// pair whose name or value is not UTF-8 is ignored, and of two pairs with the same name the
/// later one wins (as std's `env::vars_os` collected into a map, which the plugin used when
/// it had std).
pub fn vars_lookup<I, K, V>(vars: I) -> impl Fn(&str) -> Option<String>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let vars: BTreeMap<String, String> = vars
        .into_iter()
        .filter_map(|(k, v)| {
            Some((
                core::str::from_utf8(k.as_ref()).ok()?.to_string(),
                core::str::from_utf8(v.as_ref()).ok()?.to_string(),
            ))
        })
        .collect();
    move |k| vars.get(k).cloned()
}

/// Split one `environ` entry into name and value as std (and glibc) do: the name ends at the
/// first `=` after the first byte (so a name may start with `=`); an entry without one is
/// not a variable.
pub fn split_environ_entry(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let eq = 1 + entry.get(1..)?.iter().position(|&b| b == b'=')?;
    Some((&entry[..eq], &entry[eq + 1..]))
}

/// The process environment as a lookup function (see [`vars_lookup`]).
#[cfg(feature = "std")]
pub fn process_env() -> impl Fn(&str) -> Option<String> {
    vars_lookup(std::env::vars_os().map(|(k, v)| (k.into_encoded_bytes(), v.into_encoded_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<CniEnv, CniError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        CniEnv::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn kubelet_add() {
        let e = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_NETNS", "/var/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            (
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
            ),
            ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ])
        .unwrap();
        assert_eq!(e.command, Command::Add);
        let pod = e.pod().unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
            ("default", "web", "u-1")
        );
        assert_eq!(e.path, ["/opt/cni/bin", "/usr/lib/cni"]);
    }

    #[test]
    fn missing_and_bad_variables_are_code_4() {
        for pairs in [
            &[("CNI_COMMAND", "FROB")][..],
            &[][..],
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_NETNS", "/x"),
            ][..],
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c"),
                ("CNI_IFNAME", "eth0"),
            ][..],
            &[
                ("CNI_COMMAND", "CHECK"),
                ("CNI_CONTAINERID", "c"),
                ("CNI_NETNS", "/x"),
                ("CNI_IFNAME", "this-name-is-too-long"),
            ][..],
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "c"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", "novalue"),
            ][..],
        ] {
            assert_eq!(env(pairs).unwrap_err().code, 4, "{pairs:?}");
        }
    }

    #[test]
    fn del_without_netns_and_status_without_container_are_fine() {
        // The DEL of an ADD refused for its interface name (Multus sends it).
        env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "this-name-is-too-long"),
        ])
        .unwrap();
        env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap();
        env(&[("CNI_COMMAND", "STATUS")]).unwrap();
        env(&[("CNI_COMMAND", "GC")]).unwrap();
        env(&[("CNI_COMMAND", "VERSION")]).unwrap();
    }

    #[test]
    fn pairs_later_wins_and_non_utf8_is_skipped() {
        let get = vars_lookup([
            (&b"CNI_COMMAND"[..], &b"ADD"[..]),
            (b"CNI_COMMAND", b"VERSION"),
            (b"CNI_IFNAME", b"eth0"),
            (b"CNI_IFNAME", b"\xff"),
            (b"\xff", b"x"),
        ]);
        assert_eq!(get("CNI_COMMAND").as_deref(), Some("VERSION"));
        assert_eq!(get("CNI_IFNAME").as_deref(), Some("eth0"));
        let e = CniEnv::from_vars([("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/a::/b")]).unwrap();
        assert_eq!(
            (e.command, e.path),
            (Command::Status, vec!["/a".to_string(), "/b".to_string()])
        );
    }

    #[test]
    fn environ_entries_split_like_std() {
        assert_eq!(split_environ_entry(b"A=b=c"), Some((&b"A"[..], &b"b=c"[..])));
        assert_eq!(split_environ_entry(b"=A=b"), Some((&b"=A"[..], &b"b"[..])));
        assert_eq!(split_environ_entry(b"A="), Some((&b"A"[..], &b""[..])));
        for bad in [&b""[..], b"A", b"="] {
            assert_eq!(split_environ_entry(bad), None, "{bad:?}");
        }
    }
}
