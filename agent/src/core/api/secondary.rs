//! Secondary interfaces (issue 37): a pod on the default network (or a VPC) that joins more
//! VPCs, one interface each, as Cozystack's VMs do under Multus.
//!
//! Two requests lead here, and both make the same Ports and the same
//! `k8s.v1.cni.cncf.io/network-status` entries:
//!
//! - **A Multus delegate call.** A NetworkAttachmentDefinition whose config is
//!   `{"type": "cozyplane", "vpc": "<namespace>/<name>"}`: `CNI_IFNAME` (`net1`, or the
//!   name the pod's selection element gives) is attached to that VPC. A fixed address and MAC
//!   come as Multus passes them: `runtimeConfig.ips`/`mac` (when the config declares the
//!   `ips`/`mac` capabilities) or `IP=`/`MAC=` in `CNI_ARGS`. Multus writes the annotation.
//! - **The pod's own list, without Multus:** the annotation `sdn.cozystack.io/vpcs`, either
//!   `t1/blue,t1/green@net5` (a VPC reference, optionally `@<interface>`) or a JSON list in
//!   the shape of Multus's network selection elements,
//!   `[{"vpc": "t1/blue", "interface": "net1", "ips": ["10.0.0.9"], "mac": "02:…"}]`.
//!   Interfaces without a name are `net1`, `net2`… in order, skipping names taken. The ADD of
//!   the pod's network attaches them after `eth0`, its DEL removes them, and the agent writes
//!   the annotation.
//!
//! A secondary interface has no fabric address (the pod's network has one): it carries the
//! VPC addresses, routes only the VPC's ranges to its gateway, and its Ports name it in
//! `spec.interface`. This module is what a pod asks for (the request's parsing, read by the
//! Pod watch too, which makes the Ports ahead) and what is reported; the CNI server
//! (`core::cni`, `add.rs`) attaches.

use std::collections::BTreeSet;
use std::net::IpAddr;

use cozyplane_cni::env::CniEnv;
use cozyplane_cni::spec::{CniError, ErrorCode};
use serde_json::Value;

use crate::core::api::PortAsk;
use crate::core::datapath::netdev::parse_mac;

/// The pod annotation listing its secondary VPC interfaces.
pub const VPCS_ANNOTATION: &str = "sdn.cozystack.io/vpcs";
/// Where Multus, and the agent for the pod's own list, report every interface of a pod.
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// The netconf key that makes a call a delegate call for a secondary interface.
pub const NETCONF_VPC: &str = "vpc";

/// One secondary interface a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// `[<owner-namespace>/]<vpc>`.
    pub vpc: String,
    /// The interface in the pod.
    pub interface: String,
    /// Pinned addresses (one per family at most), as written.
    pub ips: Vec<String>,
    /// Pinned MAC.
    pub mac: Option<String>,
}

impl Wanted {
    /// The Port request of this interface.
    pub fn ask(&self) -> PortAsk {
        PortAsk {
            interface: self.interface.clone(),
            pins: (self.ips.clone(), self.mac.clone()),
        }
    }
}

fn invalid(msg: impl Into<String>, details: impl Into<String>) -> CniError {
    CniError::new(ErrorCode::InvalidConfig, msg, details)
}

/// A Linux interface name (the kernel's `dev_valid_name`).
pub fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
}

/// An address as Multus passes it (`10.0.0.9/24` or `10.0.0.9`), without the length.
fn address(text: &str) -> Result<String, CniError> {
    let ip = text.split('/').next().unwrap_or_default().trim();
    ip.parse::<IpAddr>().map(|a| a.to_string()).map_err(|_| {
        invalid(
            format!("invalid address {text:?} requested for a secondary interface"),
            "expected an IPv4 or IPv6 address, optionally with a prefix length",
        )
    })
}

/// Checks what one interface pins: addresses parse, one per family at most; the MAC is a
/// unicast MAC. The VPC's ranges and who holds an address are the server's to check.
fn checked(mut w: Wanted) -> Result<Wanted, CniError> {
    if !valid_ifname(&w.interface) {
        return Err(invalid(
            format!("invalid interface name {:?}", w.interface),
            "an interface name has 1 to 15 characters, without '/', ':' or whitespace",
        ));
    }
    w.ips = w.ips.iter().map(|a| address(a)).collect::<Result<_, _>>()?;
    let v4 = w.ips.iter().filter(|a| !a.contains(':')).count();
    if v4 > 1 || w.ips.len() - v4 > 1 {
        return Err(invalid(
            format!("interface {} asks for {:?}", w.interface, w.ips),
            "at most one address per family",
        ));
    }
    if let Some(m) = &w.mac
        && parse_mac(m).is_none_or(|b| b[0] & 1 == 1 || b == [0; 6])
    {
        return Err(invalid(
            format!("invalid MAC {m:?} requested for interface {}", w.interface),
            "expected a unicast MAC: six hexadecimal octets separated by ':'",
        ));
    }
    Ok(w)
}

/// The secondary interface a Multus delegate call asks for: `None` when the netconf names no
/// `vpc` (the pod's network).
pub fn delegated(env: &CniEnv, config: &Value) -> Result<Option<Wanted>, CniError> {
    let vpc = match config.get(NETCONF_VPC) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(v)) if !v.trim().is_empty() => v.trim().to_string(),
        Some(other) => {
            return Err(invalid(
                format!("invalid \"vpc\" in the network configuration: {other}"),
                "expected \"<owner-namespace>/<vpc>\"",
            ));
        }
    };
    let rc = &config["runtimeConfig"];
    let ips: Vec<String> = match rc.get("ips") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid("invalid runtimeConfig.ips", format!("{v} is not a string")))
            })
            .collect::<Result<_, _>>()?,
        _ => env
            .arg("IP")
            .map(|s| {
                s.split(',')
                    .map(str::to_string)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
    };
    let mac = rc
        .get("mac")
        .and_then(Value::as_str)
        .or_else(|| env.arg("MAC"))
        .filter(|m| !m.is_empty())
        .map(str::to_string);
    checked(Wanted {
        vpc,
        interface: env.ifname.clone(),
        ips,
        mac,
    })
    .map(Some)
}

/// One entry of the list as written: VPC, interface (if named), addresses, MAC.
type Entry = (String, Option<String>, Vec<String>, Option<String>);

/// The interfaces the pod's `sdn.cozystack.io/vpcs` lists; `primary` is the interface of the
/// pod's network (no listed interface may take it).
pub fn listed(value: &str, primary: &str) -> Result<Vec<Wanted>, CniError> {
    let bad = |why: String| {
        invalid(
            format!("invalid {VPCS_ANNOTATION} annotation"),
            format!(
                "{why}; expected \"<ns>/<vpc>[@<interface>],…\" or a JSON list of {{\"vpc\", \"interface\", \"ips\", \"mac\"}}"
            ),
        )
    };
    let text = value.trim();
    let mut entries: Vec<Entry> = Vec::new();
    if text.starts_with('[') {
        let list: Vec<Value> = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        for e in list {
            let o = e
                .as_object()
                .ok_or_else(|| bad(format!("{e} is not an object")))?;
            let s = |k: &str| -> Result<Option<String>, CniError> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(v)) => Ok(Some(v.clone())),
                    Some(v) => Err(bad(format!("{k:?} is {v}, not a string"))),
                }
            };
            let vpc = s("vpc")?.ok_or_else(|| bad(format!("{e} names no \"vpc\"")))?;
            let ips = match o.get("ips") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad(format!("ips: {v} is not a string")))
                    })
                    .collect::<Result<_, _>>()?,
                Some(v) => return Err(bad(format!("\"ips\" is {v}, not a list"))),
            };
            entries.push((vpc, s("interface")?, ips, s("mac")?));
        }
    } else {
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(bad("an empty entry".into()));
            }
            let (vpc, ifname) = match item.split_once('@') {
                Some((v, i)) => (v.trim(), Some(i.trim().to_string())),
                None => (item, None),
            };
            entries.push((vpc.to_string(), ifname, Vec::new(), None));
        }
    }
    let mut taken: BTreeSet<String> = entries.iter().filter_map(|e| e.1.clone()).collect();
    if taken.contains(primary) {
        return Err(bad(format!("{primary} is the pod's network interface")));
    }
    if taken.len() != entries.iter().filter(|e| e.1.is_some()).count() {
        return Err(bad("an interface name is given twice".into()));
    }
    taken.insert(primary.to_string());
    let mut next = 1;
    entries
        .into_iter()
        .map(|(vpc, ifname, ips, mac)| {
            let interface = ifname.unwrap_or_else(|| {
                loop {
                    let n = format!("net{next}");
                    next += 1;
                    if taken.insert(n.clone()) {
                        break n;
                    }
                }
            });
            checked(Wanted {
                vpc,
                interface,
                ips,
                mac,
            })
        })
        .collect()
}

/// One entry of `k8s.v1.cni.cncf.io/network-status` (the Kubernetes Network Plumbing WG's
/// format, as Multus writes it).
pub fn network_status(name: &str, interface: &str, ips: &[IpAddr], mac: &str, default: bool) -> Value {
    let mut v = serde_json::json!({
        "name": name,
        "interface": interface,
        "ips": ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "mac": mac,
        "dns": {},
    });
    if default {
        v["default"] = Value::Bool(true);
    }
    v
}

#[cfg(test)]
mod tests {
    use cozyplane_cni::env::Command;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn env(ifname: &str, args: &[(&str, &str)]) -> CniEnv {
        CniEnv {
            command: Command::Add,
            container_id: "c".into(),
            netns: "/n".into(),
            ifname: ifname.into(),
            args: args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            path: vec![],
        }
    }

    #[test]
    fn a_delegate_call_names_its_vpc_and_pins_as_multus_passes_them() {
        assert_eq!(
            delegated(&env("eth0", &[]), &json!({"type": "cozyplane"})).unwrap(),
            None
        );
        let conf = json!({"type": "cozyplane", "vpc": "t1/blue",
            "runtimeConfig": {"ips": ["10.0.0.9/24", "fd00::9/64"], "mac": "02:00:00:00:00:09"}});
        let w = delegated(&env("net1", &[]), &conf).unwrap().unwrap();
        assert_eq!(
            w,
            Wanted {
                vpc: "t1/blue".into(),
                interface: "net1".into(),
                ips: vec!["10.0.0.9".into(), "fd00::9".into()],
                mac: Some("02:00:00:00:00:09".into()),
            }
        );
        // Without the capabilities, Multus passes them in CNI_ARGS.
        let w = delegated(
            &env("net2", &[("IP", "10.0.0.7/24"), ("MAC", "02:00:00:00:00:07")]),
            &json!({"vpc": "t1/blue"}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (w.ips, w.mac.as_deref()),
            (vec!["10.0.0.7".to_string()], Some("02:00:00:00:00:07"))
        );
        for bad in [
            json!({"vpc": 7}),
            json!({"vpc": ""}),
            json!({"vpc": "t/b", "runtimeConfig": {"ips": ["nope"]}}),
            json!({"vpc": "t/b", "runtimeConfig": {"ips": ["10.0.0.1", "10.0.0.2"]}}),
            json!({"vpc": "t/b", "runtimeConfig": {"ips": [7]}}),
            json!({"vpc": "t/b", "runtimeConfig": {"mac": "03:00:00:00:00:01"}}),
        ] {
            let e = delegated(&env("net1", &[]), &bad).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
        }
    }

    #[test]
    fn the_list_names_interfaces_in_order_skipping_the_taken_ones() {
        let l = listed("t1/blue, t2/green@net1 ,red", "eth0").unwrap();
        let names: Vec<_> = l.iter().map(|w| (w.vpc.as_str(), w.interface.as_str())).collect();
        assert_eq!(
            names,
            [("t1/blue", "net2"), ("t2/green", "net1"), ("red", "net3")]
        );
        let l = listed(
            r#"[{"vpc": "t1/blue", "ips": ["10.1.0.5"], "mac": "02:00:00:00:00:05"}, {"vpc": "t2/g", "interface": "lan"}]"#,
            "eth0",
        )
        .unwrap();
        assert_eq!(l[0].interface, "net1");
        assert_eq!(l[0].ips, ["10.1.0.5"]);
        assert_eq!(l[1].interface, "lan");
        for bad in [
            "",
            "t1/a,,t1/b",
            "t1/a@eth0",
            "t1/a@x,t1/b@x",
            "t1/a@this-name-is-too-long",
            "[{\"interface\": \"net1\"}]",
            "[7]",
            "[{\"vpc\": \"t/a\", \"ips\": \"10.0.0.1\"}]",
            "[not json",
        ] {
            assert!(listed(bad, "eth0").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_status_entry_is_what_multus_writes() {
        let v = network_status(
            "t1/blue",
            "net1",
            &["10.0.0.9".parse().unwrap()],
            "02:00:00:00:00:09",
            false,
        );
        assert_eq!(
            v,
            json!({"name": "t1/blue", "interface": "net1", "ips": ["10.0.0.9"], "mac": "02:00:00:00:00:09", "dns": {}})
        );
        assert_eq!(
            network_status("cozyplane", "eth0", &[], "", true)["default"],
            true
        );
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in ".{0,80}") {
            let _ = listed(&s, "eth0");
            let _ = delegated(&env("net1", &[("IP", &s), ("MAC", &s)]), &json!({"vpc": s.clone()}));
        }

        #[test]
        fn listed_interfaces_are_unique_valid_and_never_the_primary(
            refs in proptest::collection::vec(("[a-z]{1,5}", proptest::option::of("[a-z0-9]{1,15}")), 1..6)
        ) {
            let text = refs
                .iter()
                .map(|(v, i)| i.as_ref().map_or(v.clone(), |i| format!("{v}@{i}")))
                .collect::<Vec<_>>()
                .join(",");
            if let Ok(l) = listed(&text, "eth0") {
                let names: BTreeSet<_> = l.iter().map(|w| w.interface.clone()).collect();
                prop_assert_eq!(names.len(), l.len());
                prop_assert!(!names.contains("eth0"));
                prop_assert!(l.iter().all(|w| valid_ifname(&w.interface)));
            }
        }
    }
}
