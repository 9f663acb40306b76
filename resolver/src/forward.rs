//! Forwarding names outside the cluster domain to the node's upstream resolvers.
//!
//! The query is relayed as the client sent it (its id, its EDNS payload size, its DO bit):
//! the upstream then answers for that client, truncating over UDP where the client's limit
//! asks for it, and the answer is relayed back unchanged. Over the client's transport:
//! a UDP query goes out over UDP from a fresh connected socket (the kernel then accepts
//! only the upstream's datagrams, and the random source port defeats spoofed answers
//! with the id), a TCP one over a new TCP connection. Upstreams are tried in order,
//! each with the timeout; when all fail the client gets SERVFAIL.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Header, MessageType};
use hickory_proto::serialize::binary::BinDecodable as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};

use crate::answer::Transport;

/// Why one upstream did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// Socket work failed (refused, unreachable, reset).
    #[error("{upstream}: {source}")]
    Io {
        /// The upstream.
        upstream: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// No answer within the timeout.
    #[error("{upstream}: no answer within {timeout:?}")]
    Timeout {
        /// The upstream.
        upstream: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
    /// No upstream is configured.
    #[error("no upstream resolver configured")]
    NoUpstream,
}

/// The upstream resolvers and how long each may take.
#[derive(Clone, Debug)]
pub struct Upstreams {
    /// Tried in order.
    pub servers: Vec<SocketAddr>,
    /// Per upstream and attempt.
    pub timeout: Duration,
}

/// The largest UDP datagram an upstream can send.
const MAX_UDP: usize = 65535;

impl Upstreams {
    /// Relay `query` and return the first matching answer; the error of the last upstream
    /// when none answers.
    pub async fn forward(&self, query: &[u8], transport: Transport) -> Result<Vec<u8>, ForwardError> {
        let mut last = ForwardError::NoUpstream;
        for up in &self.servers {
            let attempt = match transport {
                Transport::Udp => udp(*up, query),
                Transport::Tcp => Box::pin(tcp(*up, query)),
            };
            match tokio::time::timeout(self.timeout, attempt).await {
                Ok(Ok(a)) => return Ok(a),
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = ForwardError::Timeout {
                        upstream: *up,
                        timeout: self.timeout,
                    };
                }
            }
        }
        Err(last)
    }
}

type Attempt<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, ForwardError>> + Send + 'a>>;

/// Whether `answer` answers `query`: a response with the same id. Anything else from the
/// upstream's address (a late answer to another query cannot reach this socket; a broken
/// upstream can) is ignored and the wait goes on.
fn answers(query: &[u8], answer: &[u8]) -> bool {
    match (Header::from_bytes(query), Header::from_bytes(answer)) {
        (Ok(q), Ok(a)) => a.metadata.message_type == MessageType::Response && a.metadata.id == q.metadata.id,
        _ => false,
    }
}

fn udp(up: SocketAddr, query: &[u8]) -> Attempt<'_> {
    Box::pin(async move {
        let io = |source| ForwardError::Io { upstream: up, source };
        let bind: SocketAddr = if up.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind).await.map_err(io)?;
        sock.connect(up).await.map_err(io)?;
        sock.send(query).await.map_err(io)?;
        let mut buf = vec![0u8; MAX_UDP];
        loop {
            let n = sock.recv(&mut buf).await.map_err(io)?;
            if answers(query, &buf[..n]) {
                buf.truncate(n);
                return Ok(buf);
            }
        }
    })
}

async fn tcp(up: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ForwardError> {
    let io = |source| ForwardError::Io { upstream: up, source };
    let len = u16::try_from(query.len()).map_err(|_| io(std::io::ErrorKind::InvalidInput.into()))?;
    let mut s = TcpStream::connect(up).await.map_err(io)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    s.write_all(&framed).await.map_err(io)?;
    loop {
        let n = s.read_u16().await.map_err(io)?;
        let mut buf = vec![0u8; usize::from(n)];
        s.read_exact(&mut buf).await.map_err(io)?;
        if answers(query, &buf) {
            return Ok(buf);
        }
    }
}

/// The `nameserver` lines of a resolv.conf, on port 53. Loopback servers are kept: the
/// agent runs in the host's network namespace, where a local stub (systemd-resolved's
/// 127.0.0.53) is reachable.
pub fn from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "nameserver").then_some(())?;
            // A scoped IPv6 address (fe80::1%eth0) is not usable from a plain socket address.
            let ip: std::net::IpAddr = w.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_from_resolv_conf() {
        let t = "# generated\nsearch example.org\nnameserver 10.0.0.2\nnameserver  2001:db8::53 \nnameserver fe80::1%eth0\noptions ndots:5\n";
        assert_eq!(
            from_resolv_conf(t),
            vec![
                "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
                "[2001:db8::53]:53".parse().unwrap()
            ]
        );
    }
}
