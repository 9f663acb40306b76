//! [`EtcdCluster`]: an etcd cluster of several members of Debian's `etcd` on free loopback ports,
//! each with a fresh data directory, for the failover tests. Members are killed (SIGKILL),
//! frozen (SIGSTOP, a partition that sends no RST), thawed and restarted by PID; the leader is
//! found with etcd's status API. Dropping the cluster kills every member and removes the data.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{etcd_binary, free_port};
use crate::etcd;

/// One member of an [`EtcdCluster`].
pub struct ClusterMember {
    /// etcd's `--name`.
    pub name: String,
    /// `http://127.0.0.1:<port>`.
    pub client_url: String,
    peer_url: String,
    child: Option<Child>,
    frozen: bool,
    /// etcd's member ID, learned from its status once the cluster is up.
    id: u64,
}

impl ClusterMember {
    /// Whether the process runs and is not frozen.
    pub fn serving(&self) -> bool {
        self.child.is_some() && !self.frozen
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A running etcd cluster; see the [module documentation](self).
pub struct EtcdCluster {
    /// The members, in start order.
    pub members: Vec<ClusterMember>,
    token: String,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster has a leader.
    pub fn start(n: usize) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token = format!("cozyplane-test-{}", free_port());
        let mut c = Self {
            members: Vec::new(),
            token,
            dir,
        };
        for attempt in 1.. {
            c.members = (0..n)
                .map(|i| ClusterMember {
                    name: format!("m{i}"),
                    client_url: format!("http://127.0.0.1:{}", free_port()),
                    peer_url: format!("http://127.0.0.1:{}", free_port()),
                    child: None,
                    frozen: false,
                    id: 0,
                })
                .collect();
            for i in 0..n {
                c.spawn(i, "new");
            }
            match c.wait_ready(Duration::from_secs(30)) {
                Ok(()) => break,
                // A port found free can be taken before etcd binds it: new ports, new data.
                Err(log) if attempt < 5 && log.contains("address already in use") => {
                    c.kill_all();
                    for i in 0..n {
                        let _ = std::fs::remove_dir_all(c.data_dir(i));
                    }
                }
                Err(log) => {
                    c.kill_all();
                    panic!("the etcd cluster did not start:\n{log}");
                }
            }
        }
        for i in 0..n {
            c.members[i].id = status(&c.members[i].client_url)
                .map(|s| s.member_id)
                .expect("a started member answers its status");
        }
        c
    }

    fn data_dir(&self, i: usize) -> std::path::PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    fn log_file(&self, i: usize) -> std::path::PathBuf {
        self.dir.path().join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize, state: &str) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file(i))
            .expect("etcd log file");
        let m = &self.members[i];
        let child = Command::new(etcd_binary())
            .arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", self.data_dir(i).display()))
            .arg(format!("--listen-client-urls={}", m.client_url))
            .arg(format!("--advertise-client-urls={}", m.client_url))
            .arg(format!("--listen-peer-urls={}", m.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", m.peer_url))
            .arg(format!("--initial-cluster={}", initial.join(",")))
            .arg(format!("--initial-cluster-token={}", self.token))
            .arg(format!("--initial-cluster-state={state}"))
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start etcd ({e}); install it with `make deps`"));
        self.members[i].child = Some(child);
        self.members[i].frozen = false;
    }

    /// Waits until every running member reports a leader; `Err` with the logs if one exits.
    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            for i in 0..self.members.len() {
                let exited = self.members[i]
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(st) = exited {
                    self.members[i].child = None;
                    let log = std::fs::read_to_string(self.log_file(i)).unwrap_or_default();
                    return Err(format!("{} exited ({st}):\n{log}", self.members[i].name));
                }
            }
            let ready = self
                .members
                .iter()
                .filter(|m| m.serving())
                .all(|m| status(&m.client_url).is_some_and(|s| s.leader != 0));
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the cluster had no leader within {within:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// A backend configuration with every member as an endpoint.
    pub fn config(&self) -> etcd::Config {
        etcd::Config::new(self.endpoints())
    }

    /// The member that leads, as the serving members report it.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().filter(|m| m.serving()).find_map(|m| {
            let leader = status(&m.client_url)?.leader;
            self.members.iter().position(|l| l.id == leader && l.serving())
        })
    }

    /// Waits for a serving leader other than `old`; when it was seen.
    pub fn wait_leader_other_than(&self, old: Option<usize>, within: Duration) -> (usize, Instant) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.leader().filter(|l| Some(*l) != old) {
                return (l, Instant::now());
            }
            assert!(Instant::now() < deadline, "no new etcd leader within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A member that serves and does not lead.
    pub fn follower(&self) -> usize {
        let leader = self.leader();
        (0..self.members.len())
            .find(|i| Some(*i) != leader && self.members[*i].serving())
            .expect("a serving follower")
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.members[i].pid().expect("the member runs");
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {pid} failed");
    }

    /// SIGKILL member `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.members[i].frozen = false;
    }

    /// SIGSTOP member `i`: it keeps its sockets open and answers nothing.
    pub fn freeze(&mut self, i: usize) {
        self.signal(i, "STOP");
        self.members[i].frozen = true;
    }

    /// SIGCONT a frozen member.
    pub fn thaw(&mut self, i: usize) {
        self.signal(i, "CONT");
        self.members[i].frozen = false;
    }

    /// Starts a killed member again on its ports and data.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} still runs");
        self.spawn(i, "existing");
    }

    fn kill_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // SIGKILL ends frozen processes too; the data directory goes with `dir`.
        self.kill_all();
    }
}

/// What a member's status says.
struct Status {
    member_id: u64,
    leader: u64,
}

/// A member's status through etcd's JSON gateway, or `None` if it does not answer in 300 ms.
fn status(client_url: &str) -> Option<Status> {
    let addr = client_url.strip_prefix("http://")?;
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(300))).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(300))).ok()?;
    let body = "{}";
    let req = format!(
        "POST /v3/maintenance/status HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (_, json) = out.split_once("\r\n\r\n")?;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let num = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
    Some(Status {
        member_id: num(&v["header"]["member_id"])?,
        leader: v.get("leader").and_then(num).unwrap_or(0),
    })
}
