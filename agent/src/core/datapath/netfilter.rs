//! The one netfilter rule the datapath relies on: it marks packets of connections the host
//! DNATed (portmap's hostPorts, kube-proxy's NodePorts and externalIPs) as they are routed
//! into a pod veth, so that `sdn_to_pod` can record the flow and `sdn_from_pod` hands its
//! replies back to the host's conntrack instead of encapsulating them straight to the
//! client's node (`bpf/lib/dnat.h`, docs/datapath.md). tc ingress, where the reply is seen,
//! runs before netfilter, so the datapath cannot ask conntrack itself.
//!
//! The rule lives in a table of its own (`inet cozyplane`), replaced whole and atomically by
//! one `nft -f` transaction at every start, so it never duplicates and never touches the
//! rules of kube-proxy, portmap or anyone else. Only the mark bit is set (`mark | bit`).

use std::process::Stdio;

use tokio::io::AsyncWriteExt as _;

/// The nftables table the agent owns.
pub const TABLE: &str = "cozyplane";

/// Why the rule could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum NetfilterError {
    /// `nft` could not be run or fed.
    #[error("running nft: {0}")]
    Spawn(#[from] std::io::Error),
    /// `nft` refused the ruleset.
    #[error("nft -f refused the rule ({status}): {stderr}")]
    Refused {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
}

/// The ruleset: mark packets of DNATed connections, original direction, leaving through a
/// host veth whose name starts with `veth_prefix`. The first two lines make the transaction
/// idempotent (create the table if missing, then drop it with whatever it held).
pub fn ruleset(mark: u32, veth_prefix: &str) -> String {
    format!(
        "table inet {TABLE}\n\
         delete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \tchain dnat-mark {{\n\
         \t\ttype filter hook postrouting priority mangle; policy accept;\n\
         \t\toifname \"{veth_prefix}*\" ct direction original ct status dnat meta mark set meta mark | {mark:#010x}\n\
         \t}}\n\
         }}\n"
    )
}

/// Installs (or replaces) the rule in the agent's network namespace. `mark` 0 installs
/// nothing: the datapath then never sees the mark.
pub async fn install(mark: u32, veth_prefix: &str) -> Result<(), NetfilterError> {
    if mark == 0 {
        return Ok(());
    }
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(ruleset(mark, veth_prefix).as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        return Err(NetfilterError::Refused {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_sets_only_the_configured_bit_on_dnated_traffic_into_pod_veths() {
        let r = ruleset(0x0010_0000, "cph");
        assert!(
            r.starts_with("table inet cozyplane\ndelete table inet cozyplane\n"),
            "{r}"
        );
        assert!(
            r.contains(
                "oifname \"cph*\" ct direction original ct status dnat meta mark set meta mark | 0x00100000"
            ),
            "{r}"
        );
    }
}
