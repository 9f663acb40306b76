//! Delegates as Multus loads them (`pkg/types` `LoadDelegateNetConf`, `pkg/k8sclient`
//! `GetNetworkDelegates`) and the environment and configuration it runs them with
//! (`CreateCNIRuntimeConf`, libcni's `buildOneConfig`).

use serde_json::{Map, Value, json};

use super::{Selection, kube_msg, nads, parse_networks};
use crate::plugin_conf;

/// One delegate as Multus loaded it (`DelegateNetConf`).
#[derive(Clone, Debug, PartialEq)]
pub struct Delegate {
    /// `<namespace>/<nad>` for a NetworkAttachmentDefinition, the configuration's name for
    /// the cluster network: the name of its network-status entries.
    pub name: String,
    /// The configuration (one plugin, or a conflist with `plugins`).
    pub conf: Value,
    /// A conflist.
    pub list: bool,
    /// The cluster network (delegate 0).
    pub master: bool,
    /// The selection element it came from (none for the cluster network).
    pub request: Selection,
}

impl Delegate {
    /// The configuration's `name`, which Multus's errors name.
    pub fn net_name(&self) -> &str {
        self.conf["name"].as_str().unwrap_or_default()
    }
}

/// The `CNI_ARGS` Multus gives a delegate of sandbox `cid` (`CreateCNIRuntimeConf`): its own
/// five pairs, then each pair of the runtime's `incoming` that does not fill an empty one of
/// them, then `extra` (`MAC`, `IP`).
pub fn delegate_args(
    incoming: &str,
    cid: &str,
    (ns, name, uid): (&str, &str, &str),
    extra: &[(&str, String)],
) -> String {
    // Multus reads the pod and sandbox from the runtime's CNI_ARGS (K8sArgs).
    let arg = |k: &str| {
        incoming
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(key, _)| *key == k)
            .map_or("", |(_, v)| v)
    };
    let sandbox = if arg("K8S_POD_INFRA_CONTAINER_ID").is_empty() {
        cid
    } else {
        arg("K8S_POD_INFRA_CONTAINER_ID")
    };
    let mut args: Vec<(String, String)> = [
        ("IgnoreUnknown", "true"),
        ("K8S_POD_NAMESPACE", ns),
        ("K8S_POD_NAME", name),
        ("K8S_POD_INFRA_CONTAINER_ID", sandbox),
        ("K8S_POD_UID", uid),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
    .collect();
    for kv in incoming.split(';') {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        match args
            .iter_mut()
            .find(|(key, val)| key == k && val.is_empty() && !v.is_empty())
        {
            Some(slot) => slot.1 = v.to_string(),
            None => args.push((k.to_string(), v.to_string())),
        }
    }
    args.extend(extra.iter().map(|(k, v)| ((*k).to_string(), v.clone())));
    args.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// Every element's NAD, loaded as a delegate (`GetNetworkDelegates`).
pub(super) async fn load_delegates(
    kube: &kube::Client,
    text: &str,
    pod_ns: &str,
) -> Result<Vec<Delegate>, String> {
    let mut out = Vec::new();
    for sel in parse_networks(text, pod_ns)? {
        let obj = nads(kube, &sel.namespace).get(&sel.name).await.map_err(|e| {
            format!(
                "GetNetworkDelegates: failed getting the delegate: getKubernetesDelegate: cannot find a network-attachment-definition ({}) in namespace ({}): {}",
                sel.name,
                sel.namespace,
                kube_msg(&e)
            )
        })?;
        let config = obj.data["spec"]["config"].as_str().unwrap_or_default();
        if config.is_empty() {
            return Err(
                "GetCNIConfig: err in GetCNIConfigFromFile: No networks found in /etc/cni/multus/net.d"
                    .into(),
            );
        }
        let mut conf: Value = serde_json::from_str(config).map_err(|e| {
            format!("GetCNIConfig: err in getCNIConfigFromSpec: failed to unmarshal Spec.Config: {e}")
        })?;
        if !conf.is_object() {
            return Err("GetCNIConfig: err in getCNIConfigFromSpec: failed to unmarshal Spec.Config".into());
        }
        if conf["name"].as_str().unwrap_or_default().is_empty() {
            conf["name"] = json!(sel.name);
        }
        out.push(load_delegate(conf, sel)?);
    }
    Ok(out)
}

/// `LoadDelegateNetConf`: one plugin (a `type`), else a conflist whose first plugin has one.
pub(super) fn load_delegate(mut conf: Value, sel: Selection) -> Result<Delegate, String> {
    let list = conf["type"].as_str().unwrap_or_default().is_empty();
    if list {
        let plugins = conf["plugins"].as_array().ok_or(
            "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: delegate must have the 'type' or 'plugin' field",
        )?;
        if plugins
            .first()
            .and_then(|p| p["type"].as_str())
            .unwrap_or_default()
            .is_empty()
        {
            return Err(
                "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: a plugin delegate must have the 'type' field"
                    .into(),
            );
        }
    }
    if let Some(args) = &sel.cni_args {
        let targets: Vec<&mut Value> = if list {
            conf["plugins"].as_array_mut().into_iter().flatten().collect()
        } else {
            vec![&mut conf]
        };
        for t in targets {
            let cni = &mut t["args"]["cni"];
            if !cni.is_object() {
                *cni = Value::Object(Map::new());
            }
            for (k, v) in args {
                cni[k] = v.clone();
            }
        }
    }
    Ok(Delegate {
        name: format!("{}/{}", sel.namespace, sel.name),
        conf,
        list,
        master: false,
        request: sel,
    })
}

/// The capability arguments of a delegate (`mergeCNIRuntimeConfig`, then the non-empty ones).
pub(super) fn capability_args(runtime: &Value, d: &Delegate) -> Value {
    let mut rc = Map::new();
    for k in ["portMappings", "bandwidth"] {
        if let Some(v) = runtime.get(k).filter(|v| !v.is_null()) {
            rc.insert(k.into(), v.clone());
        }
    }
    if !d.master {
        let r = &d.request;
        if let Some(v) = &r.port_mappings {
            rc.insert("portMappings".into(), v.clone());
        }
        if let Some(v) = &r.bandwidth {
            rc.insert("bandwidth".into(), v.clone());
        }
        if let Some(ips) = &r.ips {
            rc.insert("ips".into(), json!(ips));
        }
        for (k, v) in [
            ("mac", &r.mac),
            ("infinibandGUID", &r.infiniband_guid),
            ("deviceID", &r.device_id),
        ] {
            if !v.is_empty() {
                rc.insert(k.into(), json!(v));
            }
        }
    }
    rc.retain(|_, v| match v {
        Value::Array(a) => !a.is_empty(),
        Value::String(s) => !s.is_empty(),
        v => !v.is_null(),
    });
    Value::Object(rc)
}

/// The configurations libcni hands the plugins of delegate `d` (one, or each of a
/// conflist's), `prev` as `prevResult` of each (ADD passes each plugin's result on itself).
pub(super) fn plugin_confs(d: &Delegate, caps: &Value) -> Vec<Value> {
    let list = if d.list {
        d.conf.clone()
    } else {
        // libcni injects the configuration's own `cniVersion` (empty when missing) and `name`.
        let version = d.conf.get("cniVersion").cloned().unwrap_or_else(|| json!(""));
        json!({ "cniVersion": version, "name": d.conf["name"], "plugins": [d.conf] })
    };
    let n = list["plugins"].as_array().map_or(0, Vec::len);
    (0..n).map(|i| plugin_conf(&list, i, None, caps)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet_cni_args;

    #[test]
    fn delegate_args_are_multus_s() {
        let kubelet = kubelet_cni_args("c1", ("apps", "router", "u1"));
        assert_eq!(
            delegate_args(
                &kubelet,
                "c1",
                ("apps", "router", "u1"),
                &[("MAC", "02:00:00:00:00:01".into())]
            ),
            "IgnoreUnknown=true;K8S_POD_NAMESPACE=apps;K8S_POD_NAME=router;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=u1;\
             IgnoreUnknown=1;K8S_POD_NAMESPACE=apps;K8S_POD_NAME=router;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=u1;\
             MAC=02:00:00:00:00:01"
        );
        // A runtime that passes no UID: Multus's empty pair is filled, not repeated.
        assert_eq!(
            delegate_args("K8S_POD_UID=u2;X=y", "c", ("n", "p", ""), &[]),
            "IgnoreUnknown=true;K8S_POD_NAMESPACE=n;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u2;X=y"
        );
    }

    fn delegate(conf: Value, sel: Selection) -> Delegate {
        load_delegate(conf, sel).unwrap()
    }

    #[test]
    fn runtime_config_follows_capabilities() {
        let sel = Selection {
            name: "blue".into(),
            namespace: "apps".into(),
            ips: Some(vec!["10.10.0.50/24".into()]),
            mac: "02:b1:00:00:00:50".into(),
            cni_args: Some(json!({"a": 1}).as_object().unwrap().clone()),
            ..Selection::default()
        };
        let d = delegate(
            json!({"cniVersion": "1.1.0", "name": "blue", "type": "cozyplane", "capabilities": {"ips": true}}),
            sel,
        );
        assert_eq!(d.name, "apps/blue");
        let caps = capability_args(&json!({"portMappings": []}), &d);
        assert_eq!(
            caps,
            json!({"ips": ["10.10.0.50/24"], "mac": "02:b1:00:00:00:50"})
        );
        let confs = plugin_confs(&d, &caps);
        assert_eq!(confs.len(), 1);
        assert_eq!(
            confs[0]["runtimeConfig"],
            json!({"ips": ["10.10.0.50/24"]}),
            "mac is no declared capability"
        );
        assert_eq!(confs[0]["args"]["cni"]["a"], 1);
        assert_eq!(confs[0]["type"], "cozyplane");
    }

    #[test]
    fn a_conflist_delegate() {
        let d = delegate(
            json!({"cniVersion": "1.0.0", "name": "l", "plugins": [{"type": "a"}, {"type": "b"}]}),
            Selection::default(),
        );
        assert!(d.list);
        let confs = plugin_confs(&d, &json!({}));
        assert_eq!(
            confs.iter().map(|c| c["type"].clone()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert_eq!(confs[1]["name"], "l");
        assert!(load_delegate(json!({"name": "x"}), Selection::default()).is_err());
        assert!(load_delegate(json!({"plugins": [{}]}), Selection::default()).is_err());
    }
}
