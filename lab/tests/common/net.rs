//! What the lab tests read from pods and nodes: a pod's addresses, a node's drop counters and
//! remote entries, and DNS questions asked from inside a pod.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use cozyplane_lab::{Lab, LabPod, Node, run_in};
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};

use super::pod_addrs;

/// The one address of `family` (4 or 6) the pod has on `eth0`.
pub(crate) fn pod_addr(p: &LabPod, family: u8) -> IpAddr {
    let all = pod_addrs(p);
    let mut of = all.iter().filter(|a| (family == 4) == a.is_ipv4());
    let a = *of
        .next()
        .unwrap_or_else(|| panic!("{}: no IPv{family} address in {all:?}", p.name));
    assert!(
        of.next().is_none(),
        "{}: one IPv{family} address, got {all:?}",
        p.name
    );
    a
}

/// The non-zero drop counters of a node, for failure messages.
pub(crate) fn drops(n: &Node) -> Vec<(cozyplane_bpf::DropReason, u64)> {
    cozyplane_bpf::maps::drops::DropsMap::from_pin(&n.scratch.pins())
        .and_then(|m| m.all())
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, s)| s.packets > 0)
        .map(|(r, s)| (r, s.packets))
        .collect()
}

/// Every node's non-zero drop counters, for failure messages.
pub(crate) fn all_drops(lab: &Lab) -> String {
    lab.nodes
        .iter()
        .map(|n| format!("{}: {:?}", n.name, drops(n)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether node `i`'s datapath has a remote entry for `ip` in any VPC (the Port watch has
/// caught up with another node's Port).
pub(crate) fn remote_of(lab: &Lab, i: usize, ip: IpAddr) -> bool {
    let pins = lab.nodes[i].scratch.pins();
    let Ok(m) = cozyplane_bpf::maps::remotes::RemotesMap::from_pin(&pins) else {
        return false;
    };
    m.inner()
        .keys()
        .filter_map(Result::ok)
        .any(|k| IpAddr::from(k.ip) == ip)
}

/// One DNS query (recursion desired) from inside the pod to `server`:53 over UDP or TCP;
/// `None` when nothing came back. The UDP socket is connected: only an answer from
/// `server`:53 is taken.
pub(crate) fn dns_ask(p: &LabPod, server: IpAddr, name: &str, t: RecordType, tcp: bool) -> Option<Message> {
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).ok()?, t));
    let q = m.to_vec().ok()?;
    let to = SocketAddr::new(server, 53);
    run_in(&p.ns, || {
        if tcp {
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
            s.write_all(&u16::try_from(q.len()).ok()?.to_be_bytes()).ok()?;
            s.write_all(&q).ok()?;
            let mut len = [0u8; 2];
            s.read_exact(&mut len).ok()?;
            let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut buf).ok()?;
            Message::from_vec(&buf).ok()
        } else {
            let s = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
            s.connect(to).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
            s.send(&q).ok()?;
            let mut buf = [0u8; 1500];
            let n = s.recv(&mut buf).ok()?;
            Message::from_vec(&buf[..n]).ok()
        }
    })
}

/// The addresses of an answer, sorted.
pub(crate) fn answer_addrs(m: &Message) -> Vec<IpAddr> {
    let mut a: Vec<IpAddr> = m.answers.iter().filter_map(|r| r.data.ip_addr()).collect();
    a.sort();
    a
}

/// [`dns_ask`] again until `done` holds for the answer (the agents' watches and maps catch up),
/// at most 30 s.
pub(crate) fn dns_ask_until(
    p: &LabPod,
    (server, name, t): (IpAddr, &str, RecordType),
    tcp: bool,
    done: impl Fn(&Message) -> bool,
) -> Message {
    let started = Instant::now();
    loop {
        match dns_ask(p, server, name, t, tcp) {
            Some(m) if done(&m) => return m,
            other => assert!(
                started.elapsed() < Duration::from_secs(30),
                "{}/{} asking {server} for {name} {t} (tcp: {tcp}): last answer {other:?}",
                p.namespace,
                p.name
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pod's `/etc/resolv.conf` as kubelet writes it (`nameserver`, the namespace's search list
/// in the lab's cluster domain `cozy.local`), in `/etc/netns/<netns>/`, where `ip netns exec`
/// mounts it; removed on drop.
pub(crate) struct ResolvConf(std::path::PathBuf);

impl ResolvConf {
    pub(crate) fn new(p: &LabPod, nameserver: IpAddr) -> Self {
        let dir = std::path::PathBuf::from("/etc/netns").join(&p.ns.0);
        std::fs::create_dir_all(&dir).unwrap();
        let ns = &p.namespace;
        std::fs::write(
            dir.join("resolv.conf"),
            format!(
                "nameserver {nameserver}\nsearch {ns}.svc.cozy.local svc.cozy.local cozy.local\noptions ndots:5 timeout:2 attempts:2\n"
            ),
        )
        .unwrap();
        Self(dir)
    }
}

impl Drop for ResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
