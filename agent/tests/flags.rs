//! The agent's whole command line, as the composition root assembles it from the core's flags
//! and each feature's (`agent/src/lib.rs`): features' flags parse beside the core's, and the
//! core's aliases still reach it.

use clap::Parser as _;
use cozyplane_agent::AgentConfig;
use cozyplane_agent::features::policy::Mode;

#[test]
fn resolver_flags_parse_with_defaults() {
    let c = AgentConfig::try_parse_from(["cozyplane-agent"]).unwrap();
    assert!(!c.dns.dns_resolver);
    assert_eq!(c.dns.dns_port, 15353);
    assert_eq!(c.dns.cluster_domain, "cluster.local");
    let c = AgentConfig::try_parse_from([
        "cozyplane-agent",
        "--dns-resolver",
        "--cluster-domain",
        "cozy.local",
        "--dns-upstream",
        "10.0.0.2,10.0.0.3:5353",
    ])
    .unwrap();
    assert!(c.dns.dns_resolver);
    assert_eq!(c.dns.cluster_domain, "cozy.local");
    assert_eq!(
        c.dns.dns_upstream,
        vec!["10.0.0.2:53".parse().unwrap(), "10.0.0.3:5353".parse().unwrap()]
    );
    assert!(AgentConfig::try_parse_from(["cozyplane-agent", "--dns-internal-cidrs", "nope"]).is_err());
    let c = AgentConfig::try_parse_from(["cozyplane-agent", "--dns-addresses", "10.0.0.1,fd00::1"]).unwrap();
    assert_eq!(c.dns.dns_addresses.len(), 2);
}

#[test]
fn the_policy_layers_are_on_unless_turned_off() {
    let c = AgentConfig::try_parse_from(["cozyplane-agent"]).unwrap();
    assert_eq!(c.policy.policy, Mode::On);
    let c = AgentConfig::try_parse_from(["cozyplane-agent", "--policy=off"]).unwrap();
    assert_eq!(c.policy.policy, Mode::Off);
    assert!(AgentConfig::try_parse_from(["cozyplane-agent", "--policy=maybe"]).is_err());
}
