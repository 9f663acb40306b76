//! The sockets: a UDP loop and a TCP accept loop around [`Resolver::respond`].
//!
//! Every query is its own task (a forwarded one may wait for an upstream), bounded by an
//! in-flight limit: past it UDP queries are dropped (the client retries) and TCP
//! connections wait to be accepted. A TCP connection carries any number of queries, one
//! after the other; a length prefix that promises more than arrives, or a silent peer, is
//! cut by the idle timeout, and a zero length closes the connection.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::answer::{Action, Transport, Zone, handle, servfail};
use crate::dns64;
use crate::forward::Upstreams;
use crate::metrics::Metrics;
use crate::view::ViewHandle;

/// Queries (UDP) and connections (TCP) served at once.
const IN_FLIGHT: usize = 1024;
/// How long a TCP connection may sit idle or in the middle of a message.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// One resolver: the view it answers from, its zone, its upstreams, its metrics.
#[derive(Debug)]
pub struct Resolver {
    view: ViewHandle,
    zone: Zone,
    upstreams: Upstreams,
    metrics: Metrics,
    udp_turns: Arc<Semaphore>,
    tcp_turns: Arc<Semaphore>,
}

impl Resolver {
    /// A resolver answering from `view`.
    pub fn new(view: ViewHandle, zone: Zone, upstreams: Upstreams, metrics: Metrics) -> Self {
        Self {
            view,
            zone,
            upstreams,
            metrics,
            udp_turns: Arc::new(Semaphore::new(IN_FLIGHT)),
            tcp_turns: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }

    /// The answer to one query from `src`, or `None` to say nothing.
    pub async fn respond(&self, src: IpAddr, wire: &[u8], t: Transport) -> Option<Vec<u8>> {
        let started = Instant::now();
        let view = self.view.get();
        match handle(&view, &self.zone, src, wire, t) {
            Action::Reply { bytes, outcome } => {
                self.metrics.query(t.label(), outcome.label());
                self.metrics.latency("local", started.elapsed());
                Some(bytes)
            }
            Action::Drop(r) => {
                self.metrics.dropped(r.label());
                None
            }
            Action::Forward => {
                drop(view);
                let answer = self.upstream(src, wire, t).await;
                self.relayed(wire, t, answer, started)
            }
            Action::ForwardDns64 => {
                drop(view);
                let Some(aaaa) = self.upstream(src, wire, t).await else {
                    return self.relayed(wire, t, None, started);
                };
                if dns64::wants_a(&aaaa)
                    && let Some(q) = dns64::a_query(wire)
                    && let Some(a) = self.upstream(src, &q, t).await
                    && let Some(synth) = dns64::synthesize(wire, &aaaa, &a, t)
                {
                    self.metrics.query(t.label(), "dns64");
                    self.metrics.latency("forwarded", started.elapsed());
                    return Some(synth);
                }
                self.relayed(wire, t, Some(aaaa), started)
            }
        }
    }

    /// One exchange with the upstreams, counted; `None` when all of them failed.
    async fn upstream(&self, src: IpAddr, wire: &[u8], t: Transport) -> Option<Vec<u8>> {
        match self.upstreams.forward(wire, t).await {
            Ok(a) => {
                self.metrics.forwarded(t.label(), true);
                Some(a)
            }
            Err(e) => {
                tracing::debug!("forwarding for {src}: {e}");
                self.metrics.forwarded(t.label(), false);
                None
            }
        }
    }

    /// The upstream's answer to `wire` as the client gets it: relayed unchanged, or SERVFAIL
    /// when the upstreams failed (`None`: not even that could be built; say nothing).
    fn relayed(
        &self,
        wire: &[u8],
        t: Transport,
        answer: Option<Vec<u8>>,
        started: Instant,
    ) -> Option<Vec<u8>> {
        self.metrics.latency("forwarded", started.elapsed());
        match answer {
            Some(a) => {
                self.metrics.query(t.label(), "forwarded");
                Some(a)
            }
            None => {
                self.metrics.query(t.label(), "servfail");
                servfail(wire, t)
            }
        }
    }

    /// Serve UDP on `sock` until it fails.
    pub async fn serve_udp(self: Arc<Self>, sock: Arc<UdpSocket>) -> std::io::Result<()> {
        let mut buf = vec![0u8; 65535];
        loop {
            let (n, src) = match sock.recv_from(&mut buf).await {
                Ok(r) => r,
                // An ICMP error about an earlier answer surfaces here on some kernels.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            let Ok(turn) = self.udp_turns.clone().try_acquire_owned() else {
                self.metrics.dropped("busy");
                continue;
            };
            let wire = buf[..n].to_vec();
            let me = self.clone();
            let sock = sock.clone();
            tokio::spawn(async move {
                if let Some(a) = me.respond(src.ip(), &wire, Transport::Udp).await
                    && let Err(e) = sock.send_to(&a, src).await
                {
                    tracing::debug!("answer to {src}: {e}");
                }
                drop(turn);
            });
        }
    }

    /// Serve TCP on `listener` until it fails.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let Ok(turn) = self.tcp_turns.clone().acquire_owned().await else {
                return Ok(());
            };
            let (stream, peer) = match listener.accept().await {
                Ok(r) => r,
                Err(e) => {
                    // Out of descriptors and the like: back off rather than spin.
                    tracing::warn!("dns tcp accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let me = self.clone();
            tokio::spawn(async move {
                me.connection(stream, peer).await;
                drop(turn);
            });
        }
    }

    async fn connection(&self, mut s: TcpStream, peer: SocketAddr) {
        loop {
            let len = match tokio::time::timeout(TCP_IDLE, s.read_u16()).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                Ok(Ok(n)) => usize::from(n),
            };
            let mut wire = vec![0u8; len];
            match tokio::time::timeout(TCP_IDLE, s.read_exact(&mut wire)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            let Some(a) = self.respond(peer.ip(), &wire, Transport::Tcp).await else {
                continue;
            };
            let Ok(n) = u16::try_from(a.len()) else {
                return;
            };
            let mut framed = Vec::with_capacity(a.len() + 2);
            framed.extend_from_slice(&n.to_be_bytes());
            framed.extend_from_slice(&a);
            if tokio::time::timeout(TCP_IDLE, s.write_all(&framed))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Bind the UDP socket and the TCP listener of `addr` (same port for both). With port 0 the
/// kernel picks the UDP port, which TCP may already use (another socket's ephemeral port):
/// then another UDP port is tried, a few times.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(Arc<UdpSocket>, TcpListener)> {
    let mut tries = 0;
    loop {
        let udp = UdpSocket::bind(addr).await?;
        let bound = udp.local_addr()?;
        match TcpListener::bind(bound).await {
            Ok(tcp) => return Ok((Arc::new(udp), tcp)),
            Err(e) if addr.port() == 0 && e.kind() == std::io::ErrorKind::AddrInUse && tries < 16 => {
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Bind `addr` and serve both transports until one fails.
pub async fn run(resolver: Arc<Resolver>, addr: SocketAddr) -> std::io::Result<()> {
    let (udp, tcp) = bind(addr).await?;
    tracing::info!(%addr, "dns resolver listening (udp, tcp)");
    tokio::select! {
        r = resolver.clone().serve_udp(udp) => r,
        r = resolver.serve_tcp(tcp) => r,
    }
}
