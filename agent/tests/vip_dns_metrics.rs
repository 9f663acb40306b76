//! The ServiceVIP load balancer's and the VPC resolver's families of `/metrics`, in the
//! agent's one registry: the load balancer's counters read from a real pinned `sdn_lb_stats`
//! (a private bpffs, the agent's own loader), the resolver's from queries answered by a
//! resolver built on the registry's handles. Needs root; fails (never skips) without it.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use aya::maps::{Map, MapData, PerCpuArray, PerCpuValues};
use cozyplane_agent::AgentConfig;
use cozyplane_agent::core::datapath::loader::Datapath;
use cozyplane_agent::core::feature::Feature as _;
use cozyplane_agent::core::metrics::{MetricsBuilder, VpcNames};
use cozyplane_agent::features::{dns::Dns, services::Services};
use cozyplane_bpf::DatapathConfig;
use cozyplane_bpf::maps::lb_stats;
use cozyplane_lab::require_root;
use cozyplane_resolver::{Resolver, Service, Transport, Upstreams, View, ViewHandle, Zone};
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};

fn query(name: &str) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    m.to_vec().unwrap()
}

#[test]
fn load_balancer_and_resolver_metrics_are_in_the_agents_registry() {
    require_root();
    let fs = common::Bpffs::new("cpvipdns");
    let dp = Datapath::load(&fs.pins(), &DatapathConfig::default()).expect("load the datapath");
    let pins = dp.pin_dir().to_path_buf();

    // The datapath's counters as two CPUs left them.
    let mut stats: PerCpuArray<MapData, u64> = PerCpuArray::try_from(
        Map::from_map_data(MapData::from_pin(pins.join(lb_stats::NAME)).unwrap()).unwrap(),
    )
    .unwrap();
    let n = aya::util::nr_cpus().unwrap();
    for (idx, first, second) in [
        (lb_stats::FLOWS, 3, 4),
        (lb_stats::SELECTIONS, 40, 2),
        (lb_stats::MISSES, 1, 0),
    ] {
        let mut v = vec![0u64; n];
        v[0] = first;
        if n > 1 {
            v[1] = second;
        } else {
            v[0] += second;
        }
        stats.set(idx, PerCpuValues::try_from(v).unwrap(), 0).unwrap();
    }

    // The registry with the two features' families, registered by the features themselves.
    let cfg = <AgentConfig as clap::Parser>::parse_from(["cozyplane-agent"]);
    let mut builder = MetricsBuilder::new(pins, "n1".into(), VpcNames::default());
    let mut dns = Dns::new(cfg.dns);
    dns.metrics(&mut builder);
    Services.metrics(&mut builder);
    let resolver_metrics = dns.resolver_metrics().expect("registered");
    let metrics = builder.build();
    // A resolver on the registry's handles: one local answer, one refusal, one forward that
    // fails (no upstream).
    let mut view = View::new();
    let querier: IpAddr = "10.244.1.10".parse().unwrap();
    view.add_querier(querier, ("t1".into(), "blue".into()));
    view.add_service(
        ("t1".into(), "web".into()),
        Service {
            vpc: ("t1".into(), "blue".into()),
            headless: false,
            vips: vec!["172.16.0.250".parse().unwrap()],
            ports: vec![],
            endpoints: vec![],
        },
    );
    let r = Resolver::new(
        ViewHandle::new(view),
        Zone::new("cozy.local", 5).unwrap(),
        Upstreams {
            servers: vec![],
            timeout: Duration::from_millis(100),
        },
        resolver_metrics,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(
            r.respond(querier, &query("web.t1.svc.cozy.local."), Transport::Udp)
                .await
                .is_some()
        );
        let stranger: IpAddr = "10.244.9.9".parse().unwrap();
        assert!(
            r.respond(stranger, &query("web.t1.svc.cozy.local."), Transport::Udp)
                .await
                .is_some()
        );
        assert!(
            r.respond(querier, &query("example.org."), Transport::Tcp)
                .await
                .is_some()
        );
    });

    let text = metrics.render();
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    has("cozyplane_lb_flows_total 7");
    has("cozyplane_lb_selections_total 42");
    has("cozyplane_lb_misses_total 1");
    has(r#"cozyplane_dns_queries_total{transport="udp",answer="answer"} 1"#);
    has(r#"cozyplane_dns_queries_total{transport="udp",answer="refused"} 1"#);
    has(r#"cozyplane_dns_queries_total{transport="tcp",answer="servfail"} 1"#);
    has(r#"cozyplane_dns_forwarded_total{transport="tcp",outcome="failed"} 1"#);
    has("cozyplane_dns_refused_total 1");
    has(r#"cozyplane_dns_latency_seconds_count{path="local"} 2"#);
    has(r#"cozyplane_dns_latency_seconds_count{path="forwarded"} 1"#);
    drop(dp);
}
