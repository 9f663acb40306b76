//! The pod's `k8s.v1.cni.cncf.io/networks` annotation, parsed as multus-cni's
//! `pkg/k8sclient` `parsePodNetworkAnnotation` does (into `pkg/types`
//! `NetworkSelectionElement`), with its error messages.

use serde_json::{Map, Value};

/// One element of the annotation: the network selection of one interface.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// The NetworkAttachmentDefinition's name (`name`).
    pub name: String,
    /// Its namespace (`namespace`; the pod's when not given).
    pub namespace: String,
    /// Addresses asked for (`ips`; `Some(vec![])` for an empty list, which Multus still passes
    /// on as an empty `IP=` argument).
    pub ips: Option<Vec<String>>,
    /// The MAC asked for (`mac`).
    pub mac: String,
    /// The interface name asked for (`interface`, or the pre-3.2 `interfaceRequest`; the comma
    /// form's `@ifname`).
    pub interface: String,
    /// `infiniband-guid`.
    pub infiniband_guid: String,
    /// `portMappings`, as given.
    pub port_mappings: Option<Value>,
    /// `bandwidth`, as given.
    pub bandwidth: Option<Value>,
    /// `deviceID`.
    pub device_id: String,
    /// `cni-args`: merged into the delegate configuration's `args.cni`.
    pub cni_args: Option<Map<String, Value>>,
    /// `default-route` (gateway addresses); the player refuses to play it.
    pub default_route: Option<Vec<String>>,
}

/// The fields of `NetworkSelectionElement` by their JSON names.
const FIELDS: [&str; 12] = [
    "name",
    "namespace",
    "ips",
    "mac",
    "infiniband-guid",
    "interface",
    "interfaceRequest",
    "portMappings",
    "bandwidth",
    "deviceID",
    "cni-args",
    "default-route",
];

/// Parses the annotation's value for a pod of namespace `default_ns`, as Multus does: the JSON
/// list of selection elements when the text holds any of `[`, `{` or `"`, else the comma form
/// `[<namespace>/]<name>[@<ifname>]`. Then each element's namespace defaults to the pod's, and
/// its MAC and addresses must parse.
pub fn parse_networks(annotation: &str, default_ns: &str) -> Result<Vec<Selection>, String> {
    if annotation.is_empty() {
        return Err("parsePodNetworkAnnotation: pod annotation does not have \"network\" as key".into());
    }
    let mut networks = if annotation.contains(['[', '{', '"']) {
        json_list(annotation).map_err(|e| {
            format!(
                "parsePodNetworkAnnotation: failed to parse pod Network Attachment Selection Annotation JSON format: {e}"
            )
        })?
    } else {
        annotation
            .split(',')
            .map(|item| object_name(item.trim()).map_err(|e| format!("parsePodNetworkAnnotation: {e}")))
            .collect::<Result<Vec<_>, _>>()?
    };
    for n in &mut networks {
        if n.namespace.is_empty() {
            n.namespace = default_ns.to_string();
        }
        if !n.mac.is_empty() {
            parse_mac(&n.mac).map_err(|e| format!("parsePodNetworkAnnotation: failed to mac: {e}"))?;
        }
        if !n.infiniband_guid.is_empty() {
            parse_mac(&n.infiniband_guid)
                .map_err(|e| format!("parsePodNetworkAnnotation: failed to validate infiniband GUID: {e}"))?;
        }
        for ip in n.ips.iter().flatten() {
            check_ip(ip)?;
        }
    }
    Ok(networks)
}

/// An address request as Multus validates it: `ip/len` (Go's `net.ParseCIDR`) or an address.
pub(crate) fn check_ip(ip: &str) -> Result<(), String> {
    if let Some((addr, len)) = ip.split_once('/') {
        let bits = match addr.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => return Err(format!("failed to parse CIDR {ip:?}: invalid CIDR address: {ip}")),
        };
        let ok = !len.is_empty()
            && len.bytes().all(|b| b.is_ascii_digit())
            && len.parse::<u32>().is_ok_and(|l| l <= bits);
        if !ok {
            return Err(format!("failed to parse CIDR {ip:?}: invalid CIDR address: {ip}"));
        }
        Ok(())
    } else if ip.parse::<std::net::IpAddr>().is_ok() {
        Ok(())
    } else {
        Err(format!("failed to parse IP address {ip:?}"))
    }
}

/// Go's `net.ParseMAC`: 6, 8 or 20 octets, as `xx:xx:…`, `xx-xx-…` or `xxxx.xxxx.…`.
pub(crate) fn parse_mac(s: &str) -> Result<Vec<u8>, String> {
    let bad = || format!("address {s}: invalid MAC address");
    let b = s.as_bytes();
    if b.len() < 14 {
        return Err(bad());
    }
    let hex = |t: &[u8]| -> Option<Vec<u8>> {
        t.chunks(2)
            .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
            .collect()
    };
    let (groups, width, sep) = if b[2] == b':' || b[2] == b'-' {
        (b.len() + 1)
            .is_multiple_of(3)
            .then_some(((b.len() + 1) / 3, 2, b[2]))
    } else if b[4] == b'.' {
        (b.len() + 1)
            .is_multiple_of(5)
            .then_some(((b.len() + 1) / 5, 4, b'.'))
    } else {
        None
    }
    .ok_or_else(bad)?;
    let octets = groups * width / 2;
    if ![6, 8, 20].contains(&octets) {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(octets);
    for (i, g) in b.split(|c| *c == sep).enumerate() {
        if g.len() != width || i >= groups || !g.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad());
        }
        out.extend(hex(g).ok_or_else(bad)?);
    }
    if out.len() == octets { Ok(out) } else { Err(bad()) }
}

/// The comma form's item: `[<namespace>/]<name>[@<ifname>]` (`parsePodNetworkObjectName`).
fn object_name(item: &str) -> Result<Selection, String> {
    let slash: Vec<&str> = item.split('/').collect();
    let (ns, rest) = match slash.as_slice() {
        [ns, rest] => (ns.trim(), *rest),
        [rest] => ("", *rest),
        _ => {
            return Err("parsePodNetworkObjectName: Invalid network object (failed at '/')".into());
        }
    };
    let at: Vec<&str> = rest.split('@').collect();
    let (name, ifname) = match at.as_slice() {
        [name, ifname] => (name.trim(), ifname.trim()),
        [name] => (name.trim(), ""),
        _ => {
            return Err("parsePodNetworkObjectName: Invalid network object (failed at '@')".into());
        }
    };
    for x in [ns, name] {
        if !x.is_empty() && !dns_label(x) {
            return Err(format!(
                "parsePodNetworkObjectName: Failed to parse: one or more items did not match comma-delimited format (must consist of lower case alphanumeric characters). Must start and end with an alphanumeric character), mismatch @ '{x}'"
            ));
        }
    }
    if ifname.len() > 15 || ifname.contains([' ', '\t', '\n', '\x0b', '\x0c', '\r', '/']) {
        return Err(format!(
            "parsePodNetworkObjectName: Failed to parse interface name: must be less than 15 chars and not contain '/' or spaces. interface name '{ifname}'"
        ));
    }
    Ok(Selection {
        name: name.into(),
        namespace: ns.into(),
        interface: ifname.into(),
        ..Selection::default()
    })
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`.
fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && alnum(&b[0]) && alnum(&b[b.len() - 1]) && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// `json.Unmarshal` into `[]*NetworkSelectionElement`: unknown keys ignored, a key matched to
/// its field exactly or else case-insensitively, `null` leaves a field unset.
fn json_list(text: &str) -> Result<Vec<Selection>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Array(items) = v else {
        return Err(format!(
            "json: cannot unmarshal {} into Go value of type []*types.NetworkSelectionElement",
            go_kind(&v)
        ));
    };
    items.iter().map(element).collect()
}

fn element(v: &Value) -> Result<Selection, String> {
    let m = match v {
        Value::Object(m) => m,
        // A null element is a nil pointer, which Multus then dereferences (it would panic).
        Value::Null => return Err("a null network selection element".into()),
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type types.NetworkSelectionElement",
                go_kind(other)
            ));
        }
    };
    let mut s = Selection::default();
    let mut deprecated_ifname = String::new();
    for (key, val) in m {
        let Some(field) = FIELDS
            .iter()
            .find(|f| *f == key)
            .or_else(|| FIELDS.iter().find(|f| f.eq_ignore_ascii_case(key)))
        else {
            continue;
        };
        if val.is_null() {
            continue;
        }
        let string = || -> Result<String, String> {
            val.as_str()
                .map(str::to_string)
                .ok_or_else(|| mismatch(val, field, "string"))
        };
        let strings = || -> Result<Vec<String>, String> {
            val.as_array()
                .ok_or_else(|| mismatch(val, field, "[]string"))?
                .iter()
                .map(|x| match x {
                    Value::Null => Ok(String::new()),
                    Value::String(s) => Ok(s.clone()),
                    other => Err(mismatch(other, field, "string")),
                })
                .collect()
        };
        match *field {
            "name" => s.name = string()?,
            "namespace" => s.namespace = string()?,
            "ips" => s.ips = Some(strings()?),
            "mac" => s.mac = string()?,
            "infiniband-guid" => s.infiniband_guid = string()?,
            "interface" => s.interface = string()?,
            "interfaceRequest" => deprecated_ifname = string()?,
            "deviceID" => s.device_id = string()?,
            "portMappings" => {
                if !val.is_array() {
                    return Err(mismatch(val, field, "[]*types.PortMapEntry"));
                }
                s.port_mappings = Some(val.clone());
            }
            "bandwidth" => {
                if !val.is_object() {
                    return Err(mismatch(val, field, "types.BandwidthEntry"));
                }
                s.bandwidth = Some(val.clone());
            }
            "cni-args" => {
                let args = val
                    .as_object()
                    .ok_or_else(|| mismatch(val, field, "map[string]interface {}"))?;
                s.cni_args = Some(args.clone());
            }
            "default-route" => {
                let gws = strings()?;
                if let Some(bad) = gws.iter().find(|g| g.parse::<std::net::IpAddr>().is_err()) {
                    return Err(format!("invalid IP address: {bad}"));
                }
                s.default_route = Some(gws);
            }
            _ => unreachable!("every field of FIELDS has an arm"),
        }
    }
    // Compatibility with pre-3.2 annotations.
    if s.interface.is_empty() {
        s.interface = deprecated_ifname;
    }
    Ok(s)
}

fn mismatch(v: &Value, field: &str, ty: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field NetworkSelectionElement.{field} of type {ty}",
        go_kind(v)
    )
}

fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(ns: &str, name: &str, ifname: &str) -> Selection {
        Selection {
            name: name.into(),
            namespace: ns.into(),
            interface: ifname.into(),
            ..Selection::default()
        }
    }

    #[test]
    fn comma_form() {
        let got = parse_networks(" blue, t2/green@net9 ,red@eth1", "apps").unwrap();
        assert_eq!(
            got,
            vec![
                sel("apps", "blue", ""),
                sel("t2", "green", "net9"),
                sel("apps", "red", "eth1")
            ]
        );
    }

    #[test]
    fn comma_form_refusals() {
        for (bad, want) in [
            ("a/b/c", "failed at '/'"),
            ("a@b@c", "failed at '@'"),
            ("Blue", "mismatch @ 'Blue'"),
            ("apps_x/blue", "mismatch @ 'apps_x'"),
            ("blue-", "mismatch @ 'blue-'"),
            ("blue@averyveryverylongname", "must be less than 15 chars"),
            ("blue@a/b", "mismatch @ 'blue@a'"),
            (
                "blue@a b",
                "must be less than 15 chars and not contain '/' or spaces",
            ),
        ] {
            let e = parse_networks(bad, "apps").unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
        assert_eq!(
            parse_networks("", "apps").unwrap_err(),
            "parsePodNetworkAnnotation: pod annotation does not have \"network\" as key"
        );
        // Exactly 15 bytes is a valid interface name.
        assert_eq!(
            parse_networks("b@abcdefghijklmno", "x").unwrap()[0].interface,
            "abcdefghijklmno"
        );
    }

    #[test]
    fn json_form() {
        let text = r#"[
            {"name": "blue", "interface": "net1", "ips": ["10.10.0.50/24"], "mac": "02:b1:00:00:00:50"},
            {"name": "green", "namespace": "t2", "ips": ["10.10.0.50"], "Interface": "net2",
             "cni-args": {"x": 1}, "unknown": true},
            {"name": "old", "interfaceRequest": "net7", "ips": [], "mac": null}
        ]"#;
        let got = parse_networks(text, "apps").unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0],
            Selection {
                ips: Some(vec!["10.10.0.50/24".into()]),
                mac: "02:b1:00:00:00:50".into(),
                ..sel("apps", "blue", "net1")
            }
        );
        assert_eq!(got[1].namespace, "t2");
        assert_eq!(got[1].interface, "net2", "keys match case-insensitively, as Go's");
        assert_eq!(got[1].cni_args.as_ref().unwrap()["x"], 1);
        assert_eq!(got[2].interface, "net7", "the pre-3.2 interfaceRequest");
        assert_eq!(got[2].ips, Some(vec![]), "an empty list is kept");
        assert_eq!(got[2].mac, "");
    }

    #[test]
    fn json_form_refusals() {
        for (bad, want) in [
            (
                "[{\"name\": \"a\"",
                "failed to parse pod Network Attachment Selection Annotation JSON format",
            ),
            (
                "{\"name\": \"a\"}",
                "cannot unmarshal object into Go value of type []",
            ),
            ("[\"blue\"]", "cannot unmarshal string into Go value"),
            ("[{\"name\": 5}]", "NetworkSelectionElement.name of type string"),
            (
                "[{\"name\": \"a\", \"ips\": \"10.0.0.1\"}]",
                "NetworkSelectionElement.ips of type []string",
            ),
            (
                "[{\"name\": \"a\", \"ips\": [\"10.0.0.256\"]}]",
                "failed to parse IP address \"10.0.0.256\"",
            ),
            (
                "[{\"name\": \"a\", \"ips\": [\"10.0.0.1/33\"]}]",
                "failed to parse CIDR \"10.0.0.1/33\"",
            ),
            (
                "[{\"name\": \"a\", \"mac\": \"02:00:00:00:00\"}]",
                "failed to mac: address 02:00:00:00:00",
            ),
            (
                "[{\"name\": \"a\", \"mac\": \"02:00:00:00:00:0g\"}]",
                "invalid MAC address",
            ),
            (
                "[{\"name\": \"a\", \"default-route\": [\"x\"]}]",
                "invalid IP address: x",
            ),
            ("[null]", "null network selection element"),
        ] {
            let e = parse_networks(bad, "apps").unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn json_form_passes_long_interface_names() {
        // Only the comma form limits the name's length; a JSON request reaches the delegate
        // step, where Multus asks the kernel for the link (which refuses the name).
        let got = parse_networks(r#"[{"name":"blue","interface":"averyveryverylongname"}]"#, "apps").unwrap();
        assert_eq!(got[0].interface, "averyveryverylongname");
    }

    #[test]
    fn go_parse_mac() {
        assert_eq!(
            parse_mac("02:b1:0e:00:00:50").unwrap(),
            vec![2, 0xb1, 0x0e, 0, 0, 0x50]
        );
        assert_eq!(parse_mac("02-B1-0E-00-00-50").unwrap().len(), 6);
        assert_eq!(parse_mac("02b1.0e00.0050").unwrap().len(), 6);
        assert_eq!(parse_mac("00:00:00:00:fe:80:00:00").unwrap().len(), 8);
        for bad in [
            "02:b1:0e:00:00",
            "02:b1-0e:00:00:50",
            "02:b1:0e:00:00:50:",
            "0:b1:0e:00:00:500",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }
}
