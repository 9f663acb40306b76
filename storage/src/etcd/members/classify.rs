//! Which failures of a request to one member are safe to send again elsewhere: not sent at all,
//! refused for want of a leader, sent with an unknown outcome, or answered.

use tonic::Code;

/// How a failed attempt is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// Nothing reached etcd, or etcd refused before acting: safe to send again elsewhere.
    NotSent,
    /// The member has no leader: try another, and wait out an election.
    NoLeader,
    /// Sent; the outcome is unknown.
    Unknown,
    /// An answer: retrying changes nothing.
    Final,
}

pub(super) fn classify(e: &etcd_client::Error) -> Class {
    use etcd_client::Error as E;
    let status = match e {
        E::GRpcStatus(s) => s,
        E::TransportError(_) | E::IoError(_) | E::InvalidUri(_) | E::EndpointError(_) => {
            return Class::NotSent;
        }
        E::WatchError(_) => return Class::Unknown,
        _ => return Class::Final,
    };
    let msg = status.message();
    if msg.contains("etcdserver: no leader") {
        return Class::NoLeader;
    }
    if msg.contains("etcdserver: too many requests")
        || msg.contains("not supported for learner")
        || msg.contains("not capable")
    {
        return Class::NotSent;
    }
    // tonic maps a connection that could not be made to Unavailable with the connector's
    // message (hyper's "tcp connect error", a DNS or TLS failure).
    let not_connected = [
        "tcp connect error",
        "tcp open error",
        "dns error",
        "error trying to connect",
    ]
    .iter()
    .any(|m| msg.contains(m))
        || msg.to_ascii_lowercase().contains("connection refused");
    match status.code() {
        Code::Unavailable if not_connected => Class::NotSent,
        // A transport or a consensus failure.
        Code::Cancelled
        | Code::Unknown
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Internal
        | Code::Unavailable => Class::Unknown,
        _ => Class::Final,
    }
}

/// etcd's or the transport's message, without the source chain tonic prints.
pub(super) fn short(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.message().to_string(),
        other => other.to_string(),
    }
}

/// Whether `e` says the connection could not be made (as opposed to etcd refusing).
pub(super) fn is_connect_error(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == Code::Unavailable && !s.message().contains("etcdserver:")
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: i32, msg: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code.into(), msg))
    }

    #[test]
    fn a_refused_connection_was_not_sent() {
        assert_eq!(classify(&status(14, "tcp connect error")), Class::NotSent);
        assert_eq!(classify(&status(14, "etcdserver: no leader")), Class::NoLeader);
    }

    #[test]
    fn a_broken_connection_or_an_etcd_timeout_is_an_unknown_outcome() {
        assert_eq!(
            classify(&status(14, "error reading a body from connection")),
            Class::Unknown
        );
        assert_eq!(
            classify(&status(14, "etcdserver: request timed out")),
            Class::Unknown
        );
        assert_eq!(classify(&status(2, "h2 protocol error")), Class::Unknown);
    }

    #[test]
    fn an_answer_is_final() {
        assert_eq!(
            classify(&status(
                11,
                "etcdserver: mvcc: required revision has been compacted"
            )),
            Class::Final
        );
        assert_eq!(
            classify(&status(7, "etcdserver: permission denied")),
            Class::Final
        );
    }
}
