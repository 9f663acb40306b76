//! The chart's DaemonSet speaks the agent's command line: in every documented mode
//! (`cozyplane_chartkit::MODES`, rendered by Helm) the agent container's `args` parse with
//! `AgentConfig` as `main` parses them, to the values the mode chose, and every environment
//! variable the DaemonSet sets (besides `RUST_LOG`) is one a flag reads. A flag renamed or
//! removed in the agent fails here, not on a node.

use std::collections::BTreeSet;

use clap::{CommandFactory as _, Parser as _};
use cozyplane_agent::AgentConfig;
use cozyplane_agent::core::config::{TunnelGroups, TunnelKind};
use cozyplane_agent::features::kubeproxy::model::NodePortAddresses;
use cozyplane_agent::features::uplink::Masquerade;
use cozyplane_chartkit::{MODES, Manifest};

#[test]
fn every_modes_agent_args_parse_with_the_agents_command_line() {
    let mut parsed = 0;
    for m in MODES {
        let r = m.render("cozy-system").ok();
        if r.get("DaemonSet", "cozyplane-agent").is_none() {
            assert_eq!(m.name, "agent-disabled", "mode {} renders no agent", m.name);
            continue;
        }
        let agent = r.container("DaemonSet", "cozyplane-agent", "agent");
        let args = Manifest::strings(agent, "args");
        let cfg =
            AgentConfig::try_parse_from(std::iter::once("cozyplane-agent".to_string()).chain(args.clone()))
                .unwrap_or_else(|e| panic!("mode {}: the agent refuses {args:?}:\n{e}", m.name));
        parsed += 1;
        let set = |k: &str| m.values.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        assert!(cfg.core.in_cluster, "{}", m.name);
        assert_eq!(cfg.core.tunnel, TunnelKind::Vxlan, "{}", m.name);
        assert_eq!(
            cfg.core.tunnel_groups,
            if set("agent.tunnelGroups") == Some("false") {
                TunnelGroups::Off
            } else {
                TunnelGroups::On
            },
            "{}",
            m.name
        );
        assert_eq!(
            cfg.uplink.masquerade,
            if set("agent.masquerade") == Some("off") {
                Masquerade::Off
            } else {
                Masquerade::Bpf
            },
            "{}",
            m.name
        );
        assert_eq!(
            cfg.kube_proxy.kube_proxy_replacement,
            set("agent.kubeProxyReplacement") != Some("false"),
            "{}: the Service proxy is on by default",
            m.name
        );
        // `--set` writes a list as `{a,b}`; the flag joins it with commas.
        let node_ports = set("agent.nodePortAddresses").map_or("", |v| v.trim_matches(['{', '}']));
        assert_eq!(
            cfg.kube_proxy.nodeport_addresses,
            NodePortAddresses::parse(node_ports).unwrap(),
            "{}: NodePorts on every node address by default",
            m.name
        );
        let devs = set("agent.hostDevices").map_or("", |v| v.trim_matches(['{', '}']));
        assert_eq!(
            cfg.policy.host_devices.join(","),
            devs,
            "{}: no host devices but the uplink by default",
            m.name
        );
        let dns = set("agent.dns.enabled") != Some("false");
        assert_eq!(
            cfg.dns.dns_resolver, dns,
            "{}: DNS steering is on by default",
            m.name
        );
        if dns {
            assert_eq!(
                cfg.dns.cluster_domain,
                // Cozystack's values file empties `clusterDomain` for the platform's `_cluster`.
                set("clusterDomain")
                    .or(set("_cluster.cluster-domain"))
                    .unwrap_or("cluster.local"),
                "{}",
                m.name
            );
        }
        assert_eq!(
            cfg.core.metrics_addr.map(|a| a.port()),
            match set("agent.metricsPort") {
                Some("0") => None,
                _ => Some(9965),
            },
            "{}",
            m.name
        );
    }
    assert!(parsed >= MODES.len() - 1, "parsed {parsed} modes");
}

#[test]
fn the_daemonsets_environment_is_read_by_the_agents_flags() {
    let read: BTreeSet<String> = AgentConfig::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let r = cozyplane_chartkit::Render::new("cozy-system").ok();
    let agent = r.container("DaemonSet", "cozyplane-agent", "agent");
    let env: Vec<&str> = agent["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        env.contains(&"NODE_NAME") && env.contains(&"COZYPLANE_NODE_IP"),
        "{env:?}"
    );
    for name in env {
        assert!(
            name == "RUST_LOG" || read.contains(name),
            "the DaemonSet sets {name}, which no agent flag reads (flags read {read:?})"
        );
    }
    // The kube API's address for an agent that is the Service proxy: what kube-rs' in-cluster
    // configuration reads instead of the `kubernetes` Service's ClusterIP.
    let r = cozyplane_chartkit::Render::new("cozy-system")
        .set("agent.k8sServiceHost", "localhost")
        .set("agent.k8sServicePort", "7445")
        .ok();
    let agent = r.container("DaemonSet", "cozyplane-agent", "agent");
    let env: BTreeSet<(String, String)> = agent["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .collect();
    for want in [
        ("KUBERNETES_SERVICE_HOST", "localhost"),
        ("KUBERNETES_SERVICE_PORT", "7445"),
    ] {
        assert!(
            env.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} not in {env:?}"
        );
    }
}
