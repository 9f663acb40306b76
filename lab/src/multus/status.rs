//! The `k8s.v1.cni.cncf.io/network-status` annotation as Multus writes it: one entry per pod
//! interface of every delegate's result (network-attachment-definition-client v1.7.6,
//! `pkg/utils` `CreateNetworkStatuses`), the list written with Go's `json.MarshalIndent(…,
//! "", "    ")` per entry, joined by `,` inside `[…]` (`SetNetworkStatus`).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One entry of the annotation (`NetworkStatus` of the NAD client, fields in its order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// `<namespace>/<nad>` for a NetworkAttachmentDefinition, the configuration's name for
    /// the cluster network.
    pub name: String,
    /// The pod interface.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface: String,
    /// Its addresses, without prefix length.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// Its MAC, as the delegate's result gave it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// Its MTU, as the delegate's result gave it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u64,
    /// The cluster network's interface.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// The result's DNS (Go's `omitempty` does not omit a struct: always present).
    #[serde(default)]
    pub dns: Dns,
    /// Device information (none of the lab's delegates has any).
    #[serde(default, rename = "device-info", skip_serializing_if = "Option::is_none")]
    pub device_info: Option<Value>,
    /// The gateways of the result's default routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
}

/// The `dns` of an entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// `nameservers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// `domain`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// `search`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// `options`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The annotation's value: each entry indented as Go's `MarshalIndent("", "    ")`.
pub fn annotation_text(statuses: &[NetworkStatus]) -> String {
    let entries: Vec<String> = statuses
        .iter()
        .map(|s| {
            let mut out = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            s.serialize(&mut ser).expect("a status serializes");
            String::from_utf8(out).expect("JSON is UTF-8")
        })
        .collect();
    format!("[{}]", entries.join(","))
}

/// Parses the annotation's value back.
pub fn parse_annotation(text: &str) -> Result<Vec<NetworkStatus>, String> {
    serde_json::from_str(text).map_err(|e| format!("network-status {text:?}: {e}"))
}

/// The entries of one delegate's CNI `result` (`CreateNetworkStatuses`): with one interface
/// in the result, one entry (`CreateNetworkStatus`: every address, `default` as given);
/// otherwise one entry per interface with a `sandbox`, each with the addresses whose
/// `interface` index names it (addresses naming none go to the last), and for the cluster
/// network `default` on the interface of the first address with a gateway, else the first.
pub fn create_network_statuses(
    result: &Value,
    name: &str,
    default: bool,
) -> Result<Vec<NetworkStatus>, String> {
    let ifaces = result["interfaces"].as_array().cloned().unwrap_or_default();
    let ips = result["ips"].as_array().cloned().unwrap_or_default();
    let gateway: Vec<String> = result["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| is_default_route(r))
        .map(|r| go_ip(r["gw"].as_str()))
        .collect();
    let dns: Dns = serde_json::from_value(result["dns"].clone()).unwrap_or_default();
    let addr = |ip: &Value| -> Result<String, String> {
        let a = ip["address"].as_str().unwrap_or_default();
        let host = a.split('/').next().unwrap_or_default();
        let parsed = host
            .parse::<IpAddr>()
            .map_err(|e| format!("error converting the type.Result to cni100.Result: address {a:?}: {e}"))?;
        Ok(go_ip(Some(&parsed.to_string())))
    };
    if ifaces.len() == 1 {
        let mut st = NetworkStatus {
            name: name.into(),
            default,
            gateway,
            dns,
            ..NetworkStatus::default()
        };
        for i in ifaces.iter().filter(|i| sandboxed(i)) {
            st.interface = i["name"].as_str().unwrap_or_default().into();
            st.mac = i["mac"].as_str().unwrap_or_default().into();
            st.mtu = i["mtu"].as_u64().unwrap_or(0);
        }
        st.ips = ips.iter().map(addr).collect::<Result<_, _>>()?;
        return Ok(vec![st]);
    }
    let gw_iface = if default {
        ips.iter()
            .find(|ip| !ip["gateway"].is_null() && !ip["interface"].is_null())
            .and_then(|ip| ip["interface"].as_u64())
    } else {
        None
    };
    let mut out: Vec<NetworkStatus> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut did_default = false;
    for (i, iface) in ifaces.iter().enumerate() {
        if !sandboxed(iface) {
            continue;
        }
        let i = i as u64;
        let is_default = default
            && match gw_iface {
                Some(g) => g == i && !did_default,
                None => !did_default,
            };
        did_default |= is_default;
        index.insert(i, out.len());
        out.push(NetworkStatus {
            name: name.into(),
            interface: iface["name"].as_str().unwrap_or_default().into(),
            mac: iface["mac"].as_str().unwrap_or_default().into(),
            mtu: iface["mtu"].as_u64().unwrap_or(0),
            default: is_default,
            dns: dns.clone(),
            gateway: gateway.clone(),
            ..NetworkStatus::default()
        });
    }
    for ip in &ips {
        let slot = match ip["interface"].as_u64() {
            Some(i) => index.get(&i).copied(),
            None => out.len().checked_sub(1),
        };
        if let Some(k) = slot {
            let a = addr(ip)?;
            out[k].ips.push(a);
        }
    }
    Ok(out)
}

fn sandboxed(iface: &Value) -> bool {
    iface["sandbox"].as_str().is_some_and(|s| !s.is_empty())
}

/// `isDefaultRoute`: a destination whose address is all zeros.
fn is_default_route(route: &Value) -> bool {
    route["dst"]
        .as_str()
        .and_then(|d| d.split('/').next()?.parse::<IpAddr>().ok())
        .is_some_and(|a| a.is_unspecified())
}

/// Go's `net.IP.String()`: `<nil>` for none, an IPv4-mapped IPv6 address as IPv4.
fn go_ip(ip: Option<&str>) -> String {
    match ip.and_then(|s| s.parse::<IpAddr>().ok()) {
        None => "<nil>".into(),
        Some(IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or_else(|| v6.to_string(), |v4| v4.to_string()),
        Some(a) => a.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn two_ifaces() -> Value {
        json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "cph0123", "mac": "aa:aa:aa:aa:aa:01"},
                           {"name": "net1", "mac": "02:b1:00:00:00:50", "mtu": 1450, "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.10.0.50/32", "gateway": "169.254.1.1", "interface": 1}],
            "routes": [{"dst": "10.10.0.0/24", "gw": "169.254.1.1"}],
            "dns": {}})
    }

    #[test]
    fn a_secondary_interface() {
        let got = create_network_statuses(&two_ifaces(), "apps/blue", false).unwrap();
        assert_eq!(
            got,
            vec![NetworkStatus {
                name: "apps/blue".into(),
                interface: "net1".into(),
                ips: vec!["10.10.0.50".into()],
                mac: "02:b1:00:00:00:50".into(),
                mtu: 1450,
                ..NetworkStatus::default()
            }]
        );
        assert_eq!(
            annotation_text(&got),
            "[{\n    \"name\": \"apps/blue\",\n    \"interface\": \"net1\",\n    \"ips\": [\n        \"10.10.0.50\"\n    ],\n    \"mac\": \"02:b1:00:00:00:50\",\n    \"mtu\": 1450,\n    \"dns\": {}\n}]"
        );
        assert_eq!(parse_annotation(&annotation_text(&got)).unwrap(), got);
    }

    #[test]
    fn the_cluster_network() {
        let r = json!({"interfaces": [{"name": "cph1"}, {"name": "eth0", "mac": "m", "sandbox": "/x"}],
            "ips": [{"address": "10.244.1.5/32", "gateway": "169.254.1.1", "interface": 1},
                    {"address": "fd44::5/128", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}, {"dst": "::/0"}],
            "dns": {"nameservers": ["10.96.0.10"]}});
        let got = create_network_statuses(&r, "cozyplane", true).unwrap();
        assert_eq!(got.len(), 1);
        let s = &got[0];
        assert!(s.default);
        assert_eq!((s.interface.as_str(), s.mac.as_str()), ("eth0", "m"));
        assert_eq!(s.ips, vec!["10.244.1.5", "fd44::5"]);
        assert_eq!(
            s.gateway,
            vec!["169.254.1.1", "<nil>"],
            "Go prints a missing gateway so"
        );
        assert_eq!(s.dns.nameservers, vec!["10.96.0.10"]);
    }

    #[test]
    fn one_interface_and_addresses_without_index() {
        // One interface: every address, even without a sandbox interface.
        let r = json!({"interfaces": [{"name": "host"}], "ips": [{"address": "10.0.0.1/24"}]});
        let got = create_network_statuses(&r, "n", true).unwrap();
        assert_eq!((got[0].interface.as_str(), got[0].default), ("", true));
        assert_eq!(got[0].ips, vec!["10.0.0.1"]);
        // Several pod interfaces: addresses without an index go to the last one, the first
        // is the default when no address has a gateway.
        let r = json!({"interfaces": [{"name": "a", "sandbox": "x"}, {"name": "b", "sandbox": "x"}],
            "ips": [{"address": "10.0.0.1/24"}, {"address": "10.0.0.2/24", "interface": 0}]});
        let got = create_network_statuses(&r, "n", true).unwrap();
        assert_eq!(got[0].ips, vec!["10.0.0.2"]);
        assert_eq!(got[1].ips, vec!["10.0.0.1"]);
        assert!(got[0].default && !got[1].default);
        // No interface at all: no entry.
        assert!(
            create_network_statuses(&json!({"ips": []}), "n", true)
                .unwrap()
                .is_empty()
        );
        assert!(
            create_network_statuses(
                &json!({"interfaces": [{}], "ips": [{"address": "x/1"}]}),
                "n",
                false
            )
            .is_err()
        );
    }
}
