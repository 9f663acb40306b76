//! End-to-end tests of the agent and the real `cozyplane-cni` binary in network
//! namespaces this test creates (`cplab-*`, the lab's helpers), with a private bpffs per test.
//!
//! Needs root; without it every test fails (it does not skip). Needs `ping`
//! (iputils-ping) and Debian's containernetworking-plugins for the chaining test.
//! Run: `cargo build --manifest-path cni/bin/Cargo.toml && cargo test -p cozyplane-agent --test
//! netns` (the plugin is a workspace of its own; `make test` builds it first).

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cozyplane_bpf::maps::endpoints::EndpointsMap;
use cozyplane_bpf::maps::ports::PortsMap;
use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
// The lab's netns and process helpers: one implementation for every netns test.
use cozyplane_lab::{Netns, require_root, sh, sh_ok};
use serde_json::{Value, json};

/// A temp dir with a private bpffs mounted at `bpffs`, unmounted on drop.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("cpag-").tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bpffs")).unwrap();
        let s = Self { dir };
        sh_ok(&["mount", "-t", "bpf", "cpag", s.bpffs().to_str().unwrap()]);
        s
    }
    fn bpffs(&self) -> PathBuf {
        self.dir.path().join("bpffs")
    }
    fn pins(&self) -> PathBuf {
        self.bpffs().join("cozyplane")
    }
    fn socket(&self) -> PathBuf {
        self.dir.path().join("cni.sock")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = sh(&["umount", "-l", self.bpffs().to_str().unwrap()]);
    }
}

/// The agent process inside the node netns; SIGKILLed by PID on drop.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(node: &Netns, s: &Scratch, run: u32) -> Self {
        let log = s.dir.path().join(format!("agent-{run}.log"));
        let child = Command::new("nsenter")
            .arg(format!("--net={}", node.path()))
            .arg(env!("CARGO_BIN_EXE_cozyplane-agent"))
            .args(["--state-dir", s.dir.path().join("state").to_str().unwrap()])
            .args(["--bpffs-dir", s.pins().to_str().unwrap()])
            .args(["--cni-socket", s.socket().to_str().unwrap()])
            .args([
                "--fabric-block",
                "10.77.0.0/24",
                "--tunnel-dev",
                "cpag-vx0",
                "--underlay-dev",
                "cpag-ul",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn agent");
        let a = Self { child, log };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !a.log_text().contains("agent ready") {
            assert!(Instant::now() < deadline, "agent not ready:\n{}", a.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        a
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = nix_kill(self.child.id());
        }
        let _ = self.child.wait();
    }
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .map(drop)
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A node netns with an underlay veth (MTU 1400; this kernel has no dummy driver) and a running agent.
struct Node {
    agent: Option<Agent>,
    ns: Netns,
    s: Scratch,
}

impl Node {
    fn new() -> Self {
        require_root();
        let ns = Netns::new("n");
        assert!(
            ns.ip(&[
                "link",
                "add",
                "cpag-ul",
                "mtu",
                "1400",
                "type",
                "veth",
                "peer",
                "name",
                "cpag-ul-peer"
            ])
            .status
            .success()
        );
        let s = Scratch::new();
        let agent = Some(Agent::start(&ns, &s, 0));
        Self { agent, ns, s }
    }

    fn conf(&self, version: &str) -> Value {
        json!({"cniVersion": version, "name": "cozy", "type": "cozyplane",
               "agentSocket": self.s.socket().to_str().unwrap()})
    }

    fn endpoints(&self) -> EndpointsMap<aya::maps::MapData> {
        EndpointsMap::from_pin(&self.s.pins()).unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Order: agent, then netns (Netns drop), then bpffs (Scratch drop).
        self.agent.take();
    }
}

fn cni_bin() -> PathBuf {
    let agent = Path::new(env!("CARGO_BIN_EXE_cozyplane-agent"));
    let p = agent.with_file_name("cozyplane-cni");
    assert!(
        p.exists(),
        "{} missing: run `cargo build --manifest-path cni/bin/Cargo.toml` first",
        p.display()
    );
    p
}

/// Run a plugin exactly as kubelet/the runtime does: CNI_* env and the config on stdin.
fn invoke(
    bin: &Path,
    via_node: Option<&Netns>,
    cmd: &str,
    cid: &str,
    netns: &str,
    conf: &Value,
) -> (i32, Value) {
    let mut c = match via_node {
        // Plugins that program the host (portmap) must run in the node's netns.
        Some(n) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", n.path())).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let mut child = c
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid};K8S_POD_UID=uid-{cid}"),
        )
        .env("CNI_PATH", "/usr/lib/cni")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{cmd}: not JSON ({e}): {text} / {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    (out.status.code().unwrap_or(-1), v)
}

fn add(node: &Node, pod: &Netns, cid: &str) -> (Value, Ipv4Addr) {
    let t = Instant::now();
    let (code, v) = invoke(&cni_bin(), None, "ADD", cid, &pod.path(), &node.conf("1.0.0"));
    eprintln!("ADD {cid}: {:?} (via the cozyplane-cni binary)", t.elapsed());
    assert_eq!(
        code,
        0,
        "ADD failed: {v}\n{}",
        node.agent.as_ref().unwrap().log_text()
    );
    let addr = v["ips"][0]["address"].as_str().unwrap();
    let ip: Ipv4Addr = addr.trim_end_matches("/32").parse().unwrap();
    (v, ip)
}

fn ping(from: &Netns, to: Ipv4Addr, count: u32, interval: &str) -> std::process::Output {
    sh(&[
        "ip",
        "netns",
        "exec",
        &from.0,
        "ping",
        "-n",
        "-q",
        "-c",
        &count.to_string(),
        "-i",
        interval,
        "-W",
        "1",
        &to.to_string(),
    ])
}

#[test]
fn add_two_pods_and_ping_over_the_fabric() {
    let node = Node::new();
    let (p1, p2) = (Netns::new("a"), Netns::new("b"));
    let (r1, ip1) = add(&node, &p1, "ctr-a");
    let (_, ip2) = add(&node, &p2, "ctr-b");
    assert_eq!(ip1, Ipv4Addr::new(10, 77, 0, 1));
    assert_eq!(ip2, Ipv4Addr::new(10, 77, 0, 2));
    assert_eq!(r1["cniVersion"], "1.0.0");
    assert_eq!(r1["routes"][0]["gw"], "169.254.1.1");
    assert_eq!(r1["interfaces"][1]["sandbox"], p1.path());
    // Underlay 1400 minus VXLAN overhead.
    let link = String::from_utf8_lossy(&p1.ip(&["link", "show", "eth0"]).stdout).to_string();
    assert!(link.contains("mtu 1350"), "{link}");
    let out = ping(&p1, ip2, 3, "0.2");
    assert!(
        out.status.success(),
        "ping failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = ping(&p2, ip1, 3, "0.2");
    assert!(
        out.status.success(),
        "ping failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The datapath saw it: net 0 traffic counted, maps populated, tunnel device up.
    let ep = node
        .endpoints()
        .get(0, IpAddr::V4(ip1))
        .unwrap()
        .expect("endpoint of pod a");
    assert_ne!(ep.ifindex, 0);
    let vx = String::from_utf8_lossy(&node.ns.ip(&["-d", "link", "show", "cpag-vx0"]).stdout).to_string();
    assert!(
        vx.contains("external") && vx.contains("mtu 1350") && vx.contains("02:cf:cf:cf:cf:cf"),
        "{vx}"
    );
}

#[test]
fn del_is_idempotent_and_removes_everything() {
    let node = Node::new();
    let p = Netns::new("a");
    let (_, ip) = add(&node, &p, "ctr-del");
    let host = cozyplane_agent::core::cni::host_veth_name("ctr-del", "eth0");
    let ifindex = node.endpoints().get(0, IpAddr::V4(ip)).unwrap().unwrap().ifindex;
    assert!(
        PortsMap::from_pin(&node.s.pins())
            .unwrap()
            .get(ifindex)
            .unwrap()
            .is_some()
    );
    // The socket hooks serve the pod's netns and the node's own (the agent's), both on net 0.
    let cookie =
        |path: &str| cozyplane_agent::core::datapath::netns_cookie::of_path(Path::new(path)).unwrap();
    let sock_netns = || SockNetnsMap::from_pin(&node.s.pins()).unwrap();
    assert_eq!(sock_netns().get(cookie(&p.path())).unwrap(), Some(0));
    assert_eq!(sock_netns().get(cookie(&node.ns.path())).unwrap(), Some(0));
    for dir in ["ingress", "egress"] {
        let tc = sh(&[
            "ip", "netns", "exec", &node.ns.0, "tc", "filter", "show", "dev", &host, dir,
        ]);
        let tc = String::from_utf8_lossy(&tc.stdout);
        let want = if dir == "ingress" {
            "sdn_from_pod"
        } else {
            "sdn_to_pod"
        };
        assert!(
            tc.contains(want) && tc.contains("direct-action"),
            "{dir} filter of {host}: {tc}"
        );
    }
    for _ in 0..2 {
        let (code, v) = invoke(&cni_bin(), None, "DEL", "ctr-del", &p.path(), &node.conf("1.0.0"));
        assert_eq!((code, &v), (0, &Value::Null));
    }
    assert!(
        !node.ns.ip(&["link", "show", &host]).status.success(),
        "host veth still there"
    );
    assert!(
        !p.ip(&["link", "show", "eth0"]).status.success(),
        "pod eth0 still there"
    );
    assert!(node.endpoints().get(0, IpAddr::V4(ip)).unwrap().is_none());
    assert!(
        PortsMap::from_pin(&node.s.pins())
            .unwrap()
            .get(ifindex)
            .unwrap()
            .is_none()
    );
    assert_eq!(sock_netns().get(cookie(&p.path())).unwrap(), None);
    // A DEL for something never added is fine too, and the address is reusable.
    let (code, _) = invoke(&cni_bin(), None, "DEL", "never", "", &node.conf("1.0.0"));
    assert_eq!(code, 0);
    let (_, again) = add(&node, &p, "ctr-del2");
    assert_eq!(again, ip);
}

#[test]
fn gc_collects_only_what_the_runtimes_list_lacks_and_nothing_without_a_list() {
    let node = Node::new();
    let (pa, pb, pc) = (Netns::new("a"), Netns::new("b"), Netns::new("c"));
    let (_, ip_a) = add(&node, &pa, "ctr-gc-a");
    let (_, ip_b) = add(&node, &pb, "ctr-gc-b");
    let wired = |cid: &str, ip: Ipv4Addr| {
        let host = cozyplane_agent::core::cni::host_veth_name(cid, "eth0");
        node.ns.ip(&["link", "show", &host]).status.success()
            && node.endpoints().get(0, IpAddr::V4(ip)).unwrap().is_some()
    };
    let gc = |conf: &Value| invoke(&cni_bin(), None, "GC", "", "", conf);

    // No list: the runtime said nothing about what it holds, and nothing goes.
    assert_eq!(gc(&node.conf("1.1.0")), (0, Value::Null));
    assert!(
        wired("ctr-gc-a", ip_a) && wired("ctr-gc-b", ip_b),
        "GC without a list removed pods"
    );

    // A list that is not one is refused whole.
    let mut conf = node.conf("1.1.0");
    conf["cni.dev/valid-attachments"] = json!([{ "containerID": "ctr-gc-a" }]);
    let (code, v) = gc(&conf);
    assert_eq!((code, v["code"].as_u64()), (1, Some(7)), "{v}");
    assert!(wired("ctr-gc-a", ip_a) && wired("ctr-gc-b", ip_b));

    // A list: only the attachment it lacks goes, with its veth, map entries and address.
    conf["cni.dev/valid-attachments"] = json!([{ "containerID": "ctr-gc-a", "ifname": "eth0" }]);
    assert_eq!(gc(&conf), (0, Value::Null));
    assert!(
        wired("ctr-gc-a", ip_a),
        "GC removed an attachment the runtime holds"
    );
    assert!(!wired("ctr-gc-b", ip_b));
    assert!(
        !pb.ip(&["link", "show", "eth0"]).status.success(),
        "pod eth0 of b still there"
    );
    let (_, again) = add(&node, &pc, "ctr-gc-c");
    assert_eq!(again, ip_b, "b's address is free again");
    assert!(
        ping(&pa, again, 2, "0.2").status.success(),
        "a still reaches the pod that took b's address"
    );
}

#[test]
fn check_passes_then_fails_when_the_address_is_removed() {
    let node = Node::new();
    let p = Netns::new("a");
    let (res, ip) = add(&node, &p, "ctr-chk");
    let mut conf = node.conf("1.0.0");
    conf["prevResult"] = res;
    let (code, v) = invoke(&cni_bin(), None, "CHECK", "ctr-chk", &p.path(), &conf);
    assert_eq!((code, &v), (0, &Value::Null));
    assert!(
        p.ip(&["addr", "del", &format!("{ip}/32"), "dev", "eth0"])
            .status
            .success()
    );
    let (code, v) = invoke(&cni_bin(), None, "CHECK", "ctr-chk", &p.path(), &conf);
    assert_eq!(code, 1);
    assert_eq!(v["code"], 100, "{v}");
    assert_eq!(v["cniVersion"], "1.0.0");
    // VPC requests are refused clearly, not put on net 0.
    let mut c = Command::new(cni_bin());
    let out = c
        .env_clear()
        .envs([
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "vpc"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "SDN_VPC=t/a"),
        ])
        .env("CNI_NETNS", p.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = out;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(node.conf("1.0.0").to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["code"], 101, "{v}");
    // STATUS answers (1.1.0 only).
    let (code, _) = invoke(&cni_bin(), None, "STATUS", "", "", &node.conf("1.1.0"));
    assert_eq!(code, 0);
}

#[test]
fn debian_portmap_and_tuning_accept_our_result_as_prev_result() {
    let node = Node::new();
    let p = Netns::new("a");
    for plugin in ["portmap", "tuning"] {
        assert!(
            Path::new("/usr/lib/cni").join(plugin).exists(),
            "install containernetworking-plugins"
        );
    }
    let (res, _) = add(&node, &p, "ctr-chain");
    let portmap = json!({"cniVersion": "1.0.0", "name": "cozy", "type": "portmap",
        "capabilities": {"portMappings": true}, "snat": true,
        "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]},
        "prevResult": res.clone()});
    let tuning = json!({"cniVersion": "1.0.0", "name": "cozy", "type": "tuning",
        "sysctl": {"net.core.somaxconn": "512"}, "prevResult": res.clone()});
    for (name, conf) in [("portmap", &portmap), ("tuning", &tuning)] {
        let bin = Path::new("/usr/lib/cni").join(name);
        let (code, v) = invoke(&bin, Some(&node.ns), "ADD", "ctr-chain", &p.path(), conf);
        assert_eq!(code, 0, "{name} rejected our prevResult: {v}");
        assert_eq!(
            v["ips"][0]["address"], res["ips"][0]["address"],
            "{name} passes the result on"
        );
        let (code, v) = invoke(&bin, Some(&node.ns), "DEL", "ctr-chain", &p.path(), conf);
        assert_eq!(code, 0, "{name} DEL: {v}");
    }
    // tuning really ran inside the pod.
    let v = sh_ok(&["ip", "netns", "exec", &p.0, "cat", "/proc/sys/net/core/somaxconn"]);
    assert_eq!(v.trim(), "512");
}

#[test]
fn agent_restart_keeps_traffic_flowing_and_reuses_pins() {
    let mut node = Node::new();
    let (p1, p2) = (Netns::new("a"), Netns::new("b"));
    let (_, _ip1) = add(&node, &p1, "ctr-r1");
    let (_, ip2) = add(&node, &p2, "ctr-r2");
    let map_id = |n: &Node| {
        aya::maps::MapData::from_pin(n.s.pins().join("sdn_endpoints"))
            .unwrap()
            .info()
            .unwrap()
            .id()
    };
    let before = map_id(&node);
    // 60 pings over 6 s; the agent is down for ~1.5 s in the middle.
    let pinger = Command::new("ip")
        .args([
            "netns", "exec", &p1.0, "ping", "-n", "-q", "-c", "60", "-i", "0.1", "-W", "1",
        ])
        .arg(ip2.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    node.agent.as_mut().unwrap().kill();
    std::thread::sleep(Duration::from_millis(1500));
    node.agent = Some(Agent::start(&node.ns, &node.s, 1));
    let out = pinger.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let received: u32 = text
        .split(", ")
        .find_map(|s| s.strip_suffix(" received"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ping summary: {text}"));
    eprintln!("ping across restart: {text}");
    assert!(
        received >= 55,
        "lost {} of 60 packets across the restart: {text}",
        60 - received
    );
    let log = node.agent.as_ref().unwrap().log_text();
    assert!(
        log.contains(&format!("reused_maps={}", cozyplane_bpf::maps::ALL.len())),
        "restarted agent did not reuse the pins:\n{log}"
    );
    assert!(log.contains("kept=2"), "{log}");
    // Both pods' filters were taken over (program replaced in place), not failed.
    assert!(
        !log.lines().any(|l| l.contains("WARN") && l.contains("reconcile")),
        "reconcile reported a failure:\n{log}"
    );
    assert_eq!(map_id(&node), before, "sdn_endpoints was recreated");
    // The restarted agent still serves: CHECK both pods.
    for (cid, p) in [("ctr-r1", &p1), ("ctr-r2", &p2)] {
        let (code, v) = invoke(&cni_bin(), None, "CHECK", cid, &p.path(), &node.conf("1.0.0"));
        assert_eq!(code, 0, "{v}");
    }
}

// An ADD writes its record last, so one cut short by a crash leaves at most a host veth named
// as ours without a record: the next start deletes it and keeps the pods whose ADD finished.
#[test]
fn restart_removes_the_veth_of_an_add_that_never_finished() {
    let mut node = Node::new();
    let p = Netns::new("a");
    let (_, ip) = add(&node, &p, "ctr-done");
    let half = Netns::new("h");
    let orphan = "cph0123456789a";
    let made = node.ns.ip(&[
        "link", "add", orphan, "type", "veth", "peer", "name", "eth0", "netns", &half.0,
    ]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    node.agent.as_mut().unwrap().kill();
    node.agent = Some(Agent::start(&node.ns, &node.s, 1));
    let links = String::from_utf8_lossy(&node.ns.ip(&["-o", "link"]).stdout).to_string();
    assert!(
        !links.contains(orphan),
        "the unfinished ADD's veth is still there: {links}"
    );
    let kept = cozyplane_agent::core::cni::host_veth_name("ctr-done", "eth0");
    assert!(
        links.contains(&kept),
        "the finished ADD's veth {kept} is gone: {links}"
    );
    let log = node.agent.as_ref().unwrap().log_text();
    assert!(log.contains("kept=1"), "{log}");
    assert!(
        node.endpoints().get(0, IpAddr::V4(ip)).unwrap().is_some(),
        "the kept pod's endpoint is still mapped"
    );
}

// Concurrent ADDs: distinct addresses, every one on disk (the IPAM file is written by group
// commit: one write may carry several pods' records).
#[test]
fn concurrent_adds_get_distinct_addresses_all_persisted() {
    let node = Node::new();
    let pods: Vec<Netns> = (0..8).map(|i| Netns::new(&format!("c{i}"))).collect();
    let ips: Vec<Ipv4Addr> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let node = &node;
                s.spawn(move || add(node, p, &format!("ctr-c{i}")).1)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: std::collections::BTreeSet<_> = ips.iter().collect();
    assert_eq!(distinct.len(), 8, "{ips:?}");
    let file = node.s.dir.path().join("state").join("ipam.json");
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let on_disk: std::collections::BTreeSet<String> = v["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["mac"].is_string())
        .map(|a| a["ip"].as_str().unwrap().to_string())
        .collect();
    let want: std::collections::BTreeSet<String> = ips.iter().map(ToString::to_string).collect();
    assert_eq!(on_disk, want, "every ADD's completed record is on disk");
    for (i, p) in pods.iter().enumerate() {
        let (code, _) = invoke(
            &cni_bin(),
            None,
            "DEL",
            &format!("ctr-c{i}"),
            &p.path(),
            &node.conf("1.0.0"),
        );
        assert_eq!(code, 0);
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        v["allocations"].as_array().unwrap().len(),
        0,
        "DELs persisted: {v}"
    );
}
