//! Load the lab's benches and churn tests put on a path: iperf3 throughput, and new TCP
//! connections per second against a listener that counts what it accepted.

use std::net::{IpAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Netns, run_in};

/// The port of [`conn_server`].
pub const CONN_PORT: u16 = 7070;
/// The port of the iperf3 server [`iperf`] starts.
pub const IPERF_PORT: u16 = 5201;
/// Threads accepting on each connection listener. One is not enough: where the path is fast
/// enough, two connecting threads outrun a lone acceptor, its accept queue fills, the
/// listener's kernel drops the next SYNs (`TcpExtListenOverflows`) and each such connection
/// waits a 1 s SYN retransmission. That, not the datapath, was the Floating IP's
/// internet-initiated set-up figure (17 %) before this fix. The queue's
/// length is raised too ([`conn_server`]).
pub const ACCEPTORS: usize = 4;

/// iperf3 for `secs` seconds from `client` to a server started in `server`, reached at `to`;
/// `reverse`: the server sends. Gbit/s received (0 if iperf3 failed).
pub fn iperf(server: &Netns, client: &Netns, to: IpAddr, reverse: bool, secs: u64) -> f64 {
    iperf_run(server, client, to, reverse, secs, None)
}

/// [`iperf`] with the client on CPU 0 and the server on CPU 1 (`-A 0,1`). On the two-core
/// machine where the scheduler puts the two ends moves single figures of one path by ±10 %
/// (4.0–6.8 Gbit/s for one path over 5 s rounds); a comparison of two configurations of the
/// same path pins both alike.
pub fn iperf_pinned(server: &Netns, client: &Netns, to: IpAddr, secs: u64) -> f64 {
    iperf_run(server, client, to, false, secs, Some("0,1"))
}

fn iperf_run(
    server: &Netns,
    client: &Netns,
    to: IpAddr,
    reverse: bool,
    secs: u64,
    affinity: Option<&str>,
) -> f64 {
    let srv = server.iperf_server(IPERF_PORT);
    let t = secs.to_string();
    let (to, port) = (to.to_string(), IPERF_PORT.to_string());
    let mut args = vec![
        "timeout", "60", "iperf3", "-c", &to, "-p", &port, "-t", &t, "-O", "1", "--json",
    ];
    if reverse {
        args.push("-R");
    }
    if let Some(cpus) = affinity {
        args.extend(["-A", cpus]);
    }
    let o = client.exec(&args);
    drop(srv);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9
}

/// A listener in `ns` on [`CONN_PORT`] (both families: IPv4 as v4-mapped addresses) that
/// accepts and drops connections until the process ends, on [`ACCEPTORS`] threads; the number
/// it accepted so far.
pub fn conn_server(ns: &Netns) -> Arc<AtomicU64> {
    let path = ns.path();
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("the namespace's handle");
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let l = TcpListener::bind(("::", CONN_PORT)).expect("the connection listener binds");
        // std listens with a backlog of 128, which the two connecting threads overflow in
        // bursts while the acceptors wait for a core: each overflow drops a SYN, whose
        // retransmission a second later stalls a thread (measured: 12–24 `ListenDrops` per
        // 5 s figure, 1.9–14k conn/s for the same path). Listening again raises it.
        nix::sys::socket::listen(&l, nix::sys::socket::Backlog::MAXCONN)
            .expect("the connection listener's backlog");
        tx.send(()).expect("the caller waits");
        let accept = |l: TcpListener, count: Arc<AtomicU64>| {
            for c in l.incoming() {
                if c.is_ok() {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                drop(c);
            }
        };
        for _ in 1..ACCEPTORS {
            let (l, count) = (l.try_clone().expect("listener clone"), count.clone());
            std::thread::spawn(move || accept(l, count));
        }
        accept(l, count);
    });
    rx.recv().expect("the listener started");
    accepted
}

/// New TCP connections per second from `client` to `to` (connect, then close), two connecting
/// threads for `secs` seconds: those the listener behind `to` accepted (its count
/// `accepted`), so a connect answered by anything else is not counted; the client's own count
/// is printed beside it (to stderr) for a look at the difference.
pub fn conn_rate(client: &Netns, to: IpAddr, accepted: &AtomicU64, secs: u64) -> f64 {
    // Every connect leaves its port in TIME_WAIT for 60 s at the client (it closes first), and
    // a figure uses 20,000–27,000 of the 28,232 ephemeral ports: without reuse, the next
    // figure from the same client searched a nearly exhausted range (the policy bench's
    // "rules" conn/s was 5× below "none" for that reason alone). Reuse of a TIME_WAIT port
    // older than 1 s is safe with TCP timestamps (on by default).
    client.sysctl("net.ipv4.tcp_tw_reuse=1");
    let before = accepted.load(Ordering::Relaxed);
    let dur = Duration::from_secs(secs);
    // (connects, connects that took over 0.5 s: a lost SYN or SYN-ACK costs a 1 s
    // retransmission, which is what makes a set-up rate spread between runs).
    let counts: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    run_in(client, || {
                        let t = Instant::now();
                        let (mut n, mut slow) = (0u64, 0u64);
                        while t.elapsed() < dur {
                            let c0 = Instant::now();
                            if let Ok(c) =
                                TcpStream::connect_timeout(&(to, CONN_PORT).into(), Duration::from_secs(2))
                            {
                                drop(c);
                                n += 1;
                            }
                            if c0.elapsed() > Duration::from_millis(500) {
                                slow += 1;
                            }
                        }
                        (n, slow)
                    })
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("connecting thread"))
            .collect()
    });
    // The last connections' accepts, done by now or never.
    std::thread::sleep(Duration::from_millis(300));
    let server = accepted.load(Ordering::Relaxed) - before;
    eprintln!(
        "conn/s to {to}: {} connects ({} slower than 0.5 s), {server} accepted",
        counts.iter().map(|c| c.0).sum::<u64>(),
        counts.iter().map(|c| c.1).sum::<u64>()
    );
    server as f64 / dur.as_secs_f64()
}
