//! The control plane of the lab runs (`e2e.rs`, `peering.rs`, `ranges.rs`): the kube stand-in and
//! cozyplane-apiserver, pods created and wired as kubelet does, tenants. Test files are separate
//! crates, so each includes this module; a helper one of them does not call is not dead code.
#![allow(dead_code)]

pub(crate) mod net;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cozyplane_apis::v1alpha1::{VPC, VPCBinding};
use cozyplane_conformance::standin::{Options, StandIn};
use cozyplane_conformance::{Backend, TestServer};
use cozyplane_lab::{Lab, LabPod, Netns, add_network, result_ip};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Clients of the two API servers, and the servers themselves (stopped when dropped).
pub(crate) struct Cp {
    /// The kube API (Nodes, Pods, namespaces): the stand-in's or the real one's.
    pub(crate) kube: kube::Client,
    /// cozyplane-apiserver.
    pub(crate) sdn: kube::Client,
    pub(crate) kube_cp: KubeCp,
    pub(crate) server: TestServer,
}

/// What serves the kube API of the lab.
pub(crate) enum KubeCp {
    /// The project's stand-in (it plays kubelet-side parts: the LoadBalancer pool).
    StandIn(StandIn),
    /// The real kube-apiserver and kube-controller-manager (`KUBE_BIN_DIR`).
    Real(Box<cozyplane_conformance::realkube::ControlPlane>),
}

impl Cp {
    /// The kube API's admin kubeconfig (what the agents are given).
    pub(crate) fn kube_kubeconfig(&self) -> std::path::PathBuf {
        match &self.kube_cp {
            KubeCp::StandIn(s) => s.admin_kubeconfig(),
            KubeCp::Real(c) => c.admin.clone(),
        }
    }

    /// The kube API's URL.
    pub(crate) fn kube_url(&self) -> &str {
        match &self.kube_cp {
            KubeCp::StandIn(s) => &s.url,
            KubeCp::Real(c) => &c.url,
        }
    }

    /// The real kube-apiserver and kube-controller-manager instead of the stand-in, with
    /// cozyplane-apiserver connected to it (`--kubeconfig`: its kube loops run, the
    /// live-migration loop among them) and `server_args`; every node registered and its
    /// agent started. Fails the test when the binaries are missing in CI.
    pub(crate) async fn start_real(lab: &mut Lab, server_args: &[&str]) -> Self {
        use cozyplane_conformance::realkube;
        let bins = match realkube::bins() {
            Ok(b) => b,
            Err(why) => {
                realkube::not_run(&why);
                panic!("the real kube-apiserver is needed: {why}");
            }
        };
        let kcp = realkube::ControlPlane::start(&bins).await;
        let kc = format!("--kubeconfig={}", kcp.admin.display());
        let args: Vec<&str> = std::iter::once(kc.as_str())
            .chain(server_args.iter().copied())
            .collect();
        let server = TestServer::start_bare(Backend::Embedded, &args).await;
        lab.expose_url(&kcp.url);
        lab.expose_url(&server.url);
        let (kube, sdn) = nodes_up(lab, &kcp.admin, &server, &[]).await;
        Self {
            kube,
            sdn,
            kube_cp: KubeCp::Real(Box::new(kcp)),
            server,
        }
    }
}

/// What the lab's control plane plays besides the API servers ([`Cp::start_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpOptions {
    /// The doors of VPCs for real: the stand-in plays the LoadBalancer implementation (it
    /// assigns addresses from [`cozyplane_lab::LB_POOL_V4`]/`V6`, the pool the outside
    /// router attracts), and cozyplane-apiserver runs with a kube connection to the
    /// stand-in, so its kube loops (VPCGateway NAT Services, FloatingIPs, ServiceVIPs, Port
    /// GC) run. Namespaces are then the stand-in's only ([`tenant`] creates them there).
    pub(crate) doors: bool,
    /// More flags for cozyplane-apiserver (with `doors`).
    pub(crate) server_args: &'static [&'static str],
}

impl CpOptions {
    /// The door loops for real (`doors`), nothing else.
    pub(crate) fn doors() -> Self {
        Self {
            doors: true,
            ..Self::default()
        }
    }
}

impl Cp {
    /// Starts both servers, exposes them to the lab's nodes, registers every node and starts
    /// its agent. The API server has no kube connection (its kube loops do not run).
    pub(crate) async fn start(lab: &mut Lab) -> Self {
        Self::start_with(lab, CpOptions::default()).await
    }

    /// [`Cp::start`] as `opts` says.
    pub(crate) async fn start_with(lab: &mut Lab, opts: CpOptions) -> Self {
        Self::start_with_args(lab, opts, &[]).await
    }

    /// [`Cp::start_with`], every agent started with the extra flags `agent_args`.
    pub(crate) async fn start_with_args(lab: &mut Lab, opts: CpOptions, agent_args: &[&str]) -> Self {
        let (standin, server) = if opts.doors {
            let s = StandIn::start(
                Options::default().lb_pool(cozyplane_lab::LB_POOL_V4, cozyplane_lab::LB_POOL_V6),
            )
            .await;
            let kc = format!("--kubeconfig={}", s.admin_kubeconfig().display());
            let args: Vec<&str> = std::iter::once(kc.as_str())
                .chain(opts.server_args.iter().copied())
                .collect();
            let server = TestServer::start_bare(Backend::Embedded, &args).await;
            (s, server)
        } else {
            (
                StandIn::start(Options::default()).await,
                TestServer::start(Backend::Embedded).await,
            )
        };
        lab.expose_url(&standin.url);
        lab.expose_url(&server.url);
        let (kube, sdn) = nodes_up(lab, &standin.admin_kubeconfig(), &server, agent_args).await;
        Self {
            kube,
            sdn,
            kube_cp: KubeCp::StandIn(standin),
            server,
        }
    }
}

/// The clients of the kube API (admin kubeconfig `kube_kc`) and of `server`, once every node
/// is registered and its agent started with `agent_args`.
async fn nodes_up(
    lab: &Lab,
    kube_kc: &std::path::Path,
    server: &TestServer,
    agent_args: &[&str],
) -> (kube::Client, kube::Client) {
    let kube = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kube_kc).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let sdn = server.client().await;
    for n in &lab.nodes {
        n.register(&kube).await;
        n.start_agent_with(kube_kc, &server.kubeconfig, agent_args);
    }
    (kube, sdn)
}

/// The Pod object, as the scheduler leaves it bound to `node`.
pub(crate) async fn create_pod(
    cp: &Cp,
    lab: &Lab,
    node: usize,
    ns: &str,
    name: &str,
    vpc: Option<&str>,
) -> Pod {
    let pod = cozyplane_lab::kubelet::pod_object(&lab.nodes[node].name, ns, name, vpc);
    Api::<Pod>::namespaced(cp.kube.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
}

/// Pod object + netns + CNI ADD + status (as kubelet). Panics if ADD fails.
pub(crate) async fn pod(cp: &Cp, lab: &Lab, node: usize, ns: &str, name: &str, vpc: Option<&str>) -> LabPod {
    pod_with(cp, lab, (node, ns, name, vpc), &json!({})).await
}

/// [`pod`] with the runtime's capability arguments (`portMappings` for hostPorts): ADD runs
/// the node's whole conflist, as installed by the chart's installer, each plugin found by
/// its `type` in the node's CNI_PATH.
pub(crate) async fn pod_with(
    cp: &Cp,
    lab: &Lab,
    (node, ns, name, vpc): (usize, &str, &str, Option<&str>),
    runtime: &serde_json::Value,
) -> LabPod {
    let uid = create_pod(cp, lab, node, ns, name, vpc)
        .await
        .metadata
        .uid
        .unwrap_or_default();
    attach(cp, lab, (node, ns, name, &uid), runtime).await
}

/// Labels and annotations of a Pod object: `(key, value)` pairs.
pub(crate) type Meta<'a> = (&'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);

/// The Pod object of [`create_pod`] with more labels and annotations; returns its uid.
pub(crate) async fn create_pod_with(
    cp: &Cp,
    lab: &Lab,
    (node, ns, name, vpc): (usize, &str, &str, Option<&str>),
    (labels, annotations): Meta<'_>,
) -> String {
    let mut obj = cozyplane_lab::kubelet::pod_object(&lab.nodes[node].name, ns, name, vpc);
    obj.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let ann = obj.metadata.annotations.get_or_insert_with(Default::default);
    ann.extend(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Api::<Pod>::namespaced(cp.kube.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap_or_default()
}

/// [`pod`] with labels and annotations on the Pod object (a KubeVirt launcher's
/// `vm.kubevirt.io/name`, say).
pub(crate) async fn pod_labelled(
    cp: &Cp,
    lab: &Lab,
    at: (usize, &str, &str, Option<&str>),
    meta: Meta<'_>,
) -> LabPod {
    let uid = create_pod_with(cp, lab, at, meta).await;
    attach(cp, lab, (at.0, at.1, at.2, &uid), &json!({})).await
}

/// The pod goes as kubelet and the API see it: CNI DEL of its sandbox, then the Pod object
/// deleted at once.
pub(crate) async fn gone(cp: &Cp, lab: &Lab, p: &LabPod) {
    let n = &lab.nodes[p.node];
    let (code, out) = cozyplane_lab::del_network(
        n,
        &p.cid,
        &p.ns.path(),
        (&p.namespace, &p.name, &p.uid),
        (&json!({}), Some(&p.result)),
    );
    assert_eq!(code, 0, "DEL {}: {out}", p.name);
    Api::<Pod>::namespaced(cp.kube.clone(), &p.namespace)
        .delete(&p.name, &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
}

/// The sandbox of a created Pod object: netns, CNI ADD of the node's conflist, status (as
/// kubelet). Panics if ADD fails.
async fn attach(
    cp: &Cp,
    lab: &Lab,
    (node, ns, name, uid): (usize, &str, &str, &str),
    runtime: &serde_json::Value,
) -> LabPod {
    let uid = uid.to_string();
    let pns = Netns::new("p");
    let cid = format!("{ns}-{name}");
    let n = &lab.nodes[node];
    let (code, result) = add_network(n, &cid, &pns.path(), (ns, name, &uid), runtime);
    assert_eq!(code, 0, "ADD {ns}/{name}: {result}\n{}", n.log_text());
    let fabric = result_ip(&result).unwrap();
    // The addresses of the result's `eth0`, as kubelet reports them (one per family): the
    // runtime takes the pod's IPs from its default interface only, not from the secondary
    // interfaces a pod's `sdn.cozystack.io/vpcs` adds.
    let on_eth0 = |i: &serde_json::Value| {
        i["interface"]
            .as_u64()
            .is_none_or(|at| result["interfaces"][at as usize]["name"] == "eth0")
    };
    let pod_ips: Vec<serde_json::Value> = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| on_eth0(i))
        .filter_map(|i| Some(json!({"ip": i["address"].as_str()?.split('/').next()?})))
        .collect();
    let status = json!({ "status": { "podIP": fabric.to_string(), "podIPs": pod_ips,
        "hostIP": n.ip.to_string(), "phase": "Running" } });
    Api::<Pod>::namespaced(cp.kube.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    LabPod {
        name: name.into(),
        namespace: ns.into(),
        node,
        cid,
        uid,
        result,
        fabric,
        ns: pns,
    }
}

/// The VPC address the agent stamped on a VPC pod.
pub(crate) async fn vpc_ip(cp: &Cp, p: &LabPod) -> Ipv4Addr {
    let pod = Api::<Pod>::namespaced(cp.kube.clone(), &p.namespace)
        .get(&p.name)
        .await
        .unwrap();
    let ann = pod.metadata.annotations.unwrap_or_default();
    assert!(ann.contains_key("sdn.cozystack.io/vpc-mac"), "{ann:?}");
    ann["sdn.cozystack.io/vpc-ip"].parse().unwrap()
}

/// The VNI the server allocated to VPC `ns/name`, once it has.
pub(crate) async fn vni(cp: &Cp, ns: &str, name: &str) -> u32 {
    let t = Instant::now();
    loop {
        let v = Api::<VPC>::namespaced(cp.sdn.clone(), ns)
            .get(name)
            .await
            .unwrap();
        let vni = v.status.map_or(0, |s| s.vni);
        if vni > 0 {
            return u32::try_from(vni).unwrap();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "VPC {ns}/{name} got no VNI"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A namespace (at the stand-in) with one VPC and its VPCBinding.
pub(crate) async fn tenant(cp: &Cp, ns: &str, vpc: &str, cidr: &str) {
    tenant_ranges(cp, ns, vpc, &[cidr]).await;
}

/// The addresses of a pod's `eth0` (global scope: IPv6 link-local left out), as the pod
/// sees them.
pub(crate) fn pod_addrs(p: &LabPod) -> Vec<std::net::IpAddr> {
    let out =
        p.ns.ip_ok(&["-o", "addr", "show", "dev", "eth0", "scope", "global"]);
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip_while(|w| *w != "inet" && *w != "inet6");
            w.next()?;
            w.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// [`tenant`] with a VPC of several ranges (e.g. one per family: dual stack).
pub(crate) async fn tenant_ranges(cp: &Cp, ns: &str, vpc: &str, cidrs: &[&str]) {
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.kube.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let v: VPC = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPC",
        "metadata": {"name": vpc, "namespace": ns}, "spec": {"cidrs": cidrs}}))
    .unwrap();
    Api::<VPC>::namespaced(cp.sdn.clone(), ns)
        .create(&PostParams::default(), &v)
        .await
        .unwrap();
    let b: VPCBinding = serde_json::from_value(
        json!({"apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "VPCBinding",
        "metadata": {"name": vpc, "namespace": ns}, "spec": {"vpcRef": {"namespace": ns, "name": vpc}}}),
    )
    .unwrap();
    Api::<VPCBinding>::namespaced(cp.sdn.clone(), ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

/// The value of one sample (`name{labels}` exactly as exposed) in Prometheus text; 0 if absent.
pub(crate) fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().split(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `f` every 100 ms until it holds; fails the test after 20 s (a hang guard).
pub(crate) fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The capture times (`tcpdump -tt`, seconds since the epoch) of every packet in `file`.
pub(crate) fn stamps(file: &std::path::Path) -> Vec<f64> {
    let out = std::process::Command::new("tcpdump")
        .args(["-tt", "-n", "-r", file.to_str().unwrap()])
        .output()
        .expect("tcpdump -r");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Now, in the clock [`stamps`] reads.
pub(crate) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The half of a peering owned by `ns`: its VPC `vpc` (named like the namespace's tenant)
/// towards `peer_ns/peer`.
pub(crate) async fn half(cp: &Cp, (ns, vpc): (&str, &str), (peer_ns, peer): (&str, &str)) -> String {
    let name = format!("{vpc}-to-{peer}");
    let p: cozyplane_apis::v1alpha1::VPCPeering =
        serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
        "kind": "VPCPeering", "metadata": {"name": name, "namespace": ns},
        "spec": {"vpcRef": {"name": vpc}, "peerRef": {"namespace": peer_ns, "name": peer}}}))
        .unwrap();
    Api::<cozyplane_apis::v1alpha1::VPCPeering>::namespaced(cp.sdn.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    name
}

/// One per-door counter of `node`'s agent, scraped now: `cozyplane_vpc_door_<what>_total`
/// (`what`: `packets`, `bytes`, `refused_packets`, `refused_bytes`) of VPC `(vni, namespace,
/// name)` through `door` (`gateway`, `eip`, `loadbalancer`) in `direction` (`in`, `out`),
/// with every label the agent must set, in its order; 0 if absent.
pub(crate) fn door_metric(
    node: &cozyplane_lab::Node,
    what: &str,
    (vni, ns, vpc): (u32, &str, &str),
    door: &str,
    direction: &str,
) -> f64 {
    let sample = format!(
        "cozyplane_vpc_door_{what}_total{{vni=\"{vni}\",vpc_namespace=\"{ns}\",vpc=\"{vpc}\",node=\"{}\",door=\"{door}\",direction=\"{direction}\"}}",
        node.name
    );
    metric(&node.metrics(), &sample)
}

/// Polls `f` (async: an API read) every 100 ms until it yields a value; fails the test after
/// 20 s (a hang guard).
pub(crate) async fn until<T, F: Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sources of the packets in tcpdump lines (`IP a.b.c.d > ...`, `IP6 x > ...`), ports cut.
pub(crate) fn sources(lines: &[String]) -> std::collections::HashSet<String> {
    lines
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip_while(|w| *w != "IP" && *w != "IP6");
            let fam = w.next()?;
            let src = w.next()?;
            Some(if fam == "IP" {
                // a.b.c.d or a.b.c.d.port
                src.split('.').take(4).collect::<Vec<_>>().join(".")
            } else {
                src.rsplit_once('.')
                    .map_or(src, |(a, p)| if p.parse::<u16>().is_ok() { a } else { src })
                    .to_string()
            })
        })
        .collect()
}
