//! Debian's dnsmasq on loopback, as an upstream (tests) and as the reference (bench).
//! Started with its records only (no /etc/hosts, no resolv.conf), stopped by PID.
#![allow(dead_code, unreachable_pub)]

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};

/// A running dnsmasq; killed (by its PID) when dropped.
pub struct Dnsmasq {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

/// A loopback port free for both UDP and TCP right now.
pub fn free_port() -> u16 {
    loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Dnsmasq {
    /// dnsmasq answering `hosts` (an /etc/hosts-format text) and `host_records`
    /// (`name,addr` for `--host-record`), caching everything.
    pub fn start(hosts: &str, host_records: &[&str]) -> Self {
        Self::start_with(hosts, host_records, &[])
    }

    /// [`Dnsmasq::start`] with more dnsmasq flags (`--cname=...`).
    pub fn start_with(hosts: &str, host_records: &[&str], extra: &[&str]) -> Self {
        let bin = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("dnsmasq is installed (make deps installs dnsmasq-base)");
        let dir = tempfile::tempdir().unwrap();
        let hosts_file = dir.path().join("hosts");
        std::fs::write(&hosts_file, hosts).unwrap();
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--pid-file=",
            "--user=root",
            "--cache-size=10000",
            "--local-ttl=60",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--addn-hosts={}", hosts_file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        for r in host_records {
            cmd.arg(format!("--host-record={r}"));
        }
        cmd.args(extra);
        let child = cmd.spawn().expect("spawn dnsmasq");
        let d = Self {
            child,
            addr: ([127, 0, 0, 1], port).into(),
            _dir: dir,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&self) {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let mut q = Message::query();
        q.add_query(Query::query(
            Name::from_ascii("ready.invalid.").unwrap(),
            RecordType::A,
        ));
        let q = q.to_vec().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 512];
        while Instant::now() < deadline {
            let _ = sock.send_to(&q, self.addr);
            if sock.recv_from(&mut buf).is_ok() {
                return;
            }
        }
        panic!("dnsmasq on {} did not answer within 10 s", self.addr);
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
