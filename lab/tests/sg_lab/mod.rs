//! The SecurityGroup suite's parts (`sg.rs`): echo servers in pods, probes with real
//! connections, a long TCP flow that notices its first lost exchange, the API objects, and
//! the compiler's view of the same world (`verdict::sg`) to compare every probe with.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use cozyplane_apis::v1alpha1::{Port, SecurityGroup, VPC};
use cozyplane_bpf::abi::LAYER_SG;
use cozyplane_bpf::maps::pol_rules::PolRulesMap;
use cozyplane_bpf::maps::sg_members::SgMembersMap;
use cozyplane_lab::{Lab, LabPod, Netns, run_in, start_tcpdump, stop_tcpdump};
use cozyplane_policy::sg::SgCompiler;
use cozyplane_policy::verdict::{self, Endpoint};
use cozyplane_policy::{Layer, Tables};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::{Cp, now, until};

/// The port the rules open.
pub(crate) const OPEN: u16 = 8080;
/// A port no rule names.
pub(crate) const SHUT: u16 = 8081;
pub(crate) const TCP: u8 = 6;
pub(crate) const ICMP: u8 = 1;

/// Echo servers on [`OPEN`] and [`SHUT`] in `p`'s netns (threads, until the process ends):
/// every line a client sends comes back.
pub(crate) fn serve(p: &LabPod) {
    serve_in(&p.ns);
}

/// [`serve`] in any netns (the internet host).
pub(crate) fn serve_in(ns: &Netns) {
    for port in [OPEN, SHUT] {
        let path = ns.path();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let l = TcpListener::bind(("0.0.0.0", port)).unwrap();
            tx.send(()).unwrap();
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                std::thread::spawn(move || {
                    let mut w = c.try_clone().unwrap();
                    for line in BufReader::new(c).lines() {
                        let Ok(line) = line else { return };
                        if writeln!(w, "{line}").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        rx.recv().unwrap();
    }
}

/// One TCP exchange from `from` to `to:port`: connected within 1 s and a line echoed within
/// 2 s. A SYN a policy drops never connects.
pub(crate) fn tcp_ok(from: &Netns, to: IpAddr, port: u16) -> bool {
    run_in(from, || {
        let Ok(s) = TcpStream::connect_timeout(&SocketAddr::new(to, port), Duration::from_secs(1)) else {
            return false;
        };
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut w = s.try_clone().unwrap();
        if writeln!(w, "probe").is_err() {
            return false;
        }
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).is_ok() && line.trim() == "probe"
    })
}

/// A TCP flow exchanging one line every 50 ms until its first lost exchange (no echo within
/// 1 s) or until stopped.
pub(crate) struct Flow {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU32>,
    done: std::thread::JoinHandle<Option<f64>>,
}

impl Flow {
    /// Connects from `from` to `to:port` (panics if it cannot: the flow must start allowed).
    pub(crate) fn start(from: &Netns, to: IpAddr, port: u16) -> Self {
        let path = from.path();
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU32::new(0));
        let (s2, o2) = (stop.clone(), ok.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let done = std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let s = TcpStream::connect_timeout(&SocketAddr::new(to, port), Duration::from_secs(2))
                .expect("the long flow connects");
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            tx.send(()).unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let mut line = String::new();
            while !s2.load(Ordering::Relaxed) {
                let sent = now();
                line.clear();
                let echoed = writeln!(w, "x").is_ok() && r.read_line(&mut line).is_ok_and(|n| n > 0);
                if !echoed {
                    return Some(sent);
                }
                o2.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
            None
        });
        rx.recv().unwrap();
        Self { stop, ok, done }
    }

    /// Exchanges that came back so far.
    pub(crate) fn exchanges(&self) -> u32 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Whether the flow has ended (its first lost exchange).
    pub(crate) fn ended(&self) -> bool {
        self.done.is_finished()
    }

    /// Stops it; the send time of its first lost exchange, if one was lost.
    pub(crate) fn finish(self) -> Option<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.done.join().unwrap()
    }
}

/// Sets (or with `None` removes) the label `role` of pod `p`; returns when the API answered.
pub(crate) async fn relabel(cp: &Cp, p: &LabPod, role: Option<&str>) {
    let patch = json!({"metadata": {"labels": {"role": role}}});
    Api::<Pod>::namespaced(cp.kube.clone(), &p.namespace)
        .patch(&p.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// A SecurityGroup `name` of VPC `vpc` in `ns` selecting `role=<role>`, with these rules
/// (the API's JSON); its id once allocated.
pub(crate) async fn group(
    cp: &Cp,
    (ns, vpc, name): (&str, &str, &str),
    role: &str,
    (ingress, egress): (&Value, &Value),
) -> u32 {
    let sg: SecurityGroup = serde_json::from_value(json!({
        "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "SecurityGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"vpcRef": {"name": vpc}, "podSelector": {"matchLabels": {"role": role}},
                 "ingress": ingress, "egress": egress}
    }))
    .unwrap();
    let api: Api<SecurityGroup> = Api::namespaced(cp.sdn.clone(), ns);
    api.create(&PostParams::default(), &sg).await.unwrap();
    until(&format!("SecurityGroup {ns}/{name} gets an id"), || async {
        let id = api.get(name).await.ok()?.status?.id;
        (id > 0).then(|| u32::try_from(id).unwrap())
    })
    .await
}

/// `status.groups` of the Port of `ip` in VPC `vni`, once it is `want`.
pub(crate) async fn port_groups(cp: &Cp, vni: u32, ip: IpAddr, want: &[i32]) {
    let name = format!("v{vni}.{}", ip.to_string().replace(['.', ':'], "-"));
    let api: Api<Port> = Api::all(cp.sdn.clone());
    until(&format!("Port {name} status.groups = {want:?}"), || async {
        let g = api
            .get(&name)
            .await
            .ok()?
            .status
            .map(|s| s.groups)
            .unwrap_or_default();
        (g == want).then_some(())
    })
    .await;
}

/// The world as the compiler sees it, built from the API objects the agents watch.
pub(crate) struct Oracle {
    pub(crate) tables: Tables,
}

impl Oracle {
    pub(crate) async fn load(cp: &Cp) -> Self {
        let mut c = SgCompiler::new();
        let lp = ListParams::default();
        for v in Api::<VPC>::all(cp.sdn.clone()).list(&lp).await.unwrap() {
            let vni = v.status.as_ref().map_or(0, |s| s.vni);
            if vni > 0 {
                let (ns, name) = (
                    v.metadata.namespace.unwrap_or_default(),
                    v.metadata.name.unwrap_or_default(),
                );
                c.set_vpc(&ns, &name, u32::try_from(vni).unwrap());
            }
        }
        for g in Api::<SecurityGroup>::all(cp.sdn.clone()).list(&lp).await.unwrap() {
            c.set_group(&g);
        }
        for p in Api::<Port>::all(cp.sdn.clone()).list(&lp).await.unwrap() {
            c.set_port(&p);
        }
        Self { tables: c.tables() }
    }

    /// `verdict::sg` for a first packet from `src` to `dst`.
    pub(crate) fn allows(&self, src: (u32, IpAddr), dst: (u32, IpAddr), proto: u8, port: u16) -> bool {
        let ep = |(net, ip)| Endpoint { net, ip };
        verdict::sg(&self.tables, ep(src), ep(dst), proto, port).allowed()
    }

    /// Every node's maps hold what the compiler does: the same members, as many SG rules.
    pub(crate) fn programmed(&self, lab: &Lab) -> bool {
        let rules = self.tables.rules.keys().filter(|k| k.layer == Layer::Sg).count();
        lab.nodes.iter().all(|n| {
            let pins = n.scratch.pins();
            let members: std::collections::BTreeMap<(u32, IpAddr), u64> = SgMembersMap::from_pin(&pins)
                .and_then(|m| m.entries())
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| ((k.net, k.ip.into()), v.groups))
                .collect();
            let on_node = PolRulesMap::from_pin(&pins)
                .and_then(|m| m.entries())
                .unwrap_or_default()
                .iter()
                .filter(|(k, _)| k.layer == LAYER_SG)
                .count();
            members == self.tables.sg_members && on_node == rules
        })
    }
}

/// The 8-byte VXLAN headers of the packets `dev` in `ns` sends or receives matching
/// `filter` while `f` runs (IPv4 underlay: the header follows 20 bytes of IP and 8 of UDP).
pub(crate) fn vxlan_headers(ns: &Netns, dev: &str, filter: &str, f: impl FnOnce()) -> Vec<[u8; 8]> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vxlan.pcap");
    let p = start_tcpdump(ns, dev, filter, &file);
    std::thread::sleep(Duration::from_millis(300));
    f();
    std::thread::sleep(Duration::from_millis(300));
    stop_tcpdump(p);
    let out = std::process::Command::new("tcpdump")
        .args(["-n", "-x", "-r", file.to_str().unwrap()])
        .output()
        .expect("tcpdump -r");
    let mut packets: Vec<Vec<u8>> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(hex) = line.trim_start().strip_prefix("0x") else {
            packets.push(Vec::new());
            continue;
        };
        let Some(last) = packets.last_mut() else { continue };
        let words = hex.split_once(':').map_or("", |(_, w)| w);
        for w in words.split_whitespace() {
            let v = u16::from_str_radix(w, 16).unwrap_or_default();
            if w.len() == 4 {
                last.extend(v.to_be_bytes());
            } else {
                last.push(u8::try_from(v).unwrap_or_default());
            }
        }
    }
    packets
        .iter()
        .filter_map(|p| p.get(28..36)?.try_into().ok())
        .collect()
}
