//! Which network a CNI request attaches the pod to.
//!
//! A pod annotated `sdn.cozystack.io/vpc` (or asking with `SDN_VPC` in `CNI_ARGS`) resolves
//! to [`Attachment::Vpc`]: the agent checks the VPCBinding, claims a Port through the API,
//! and wires the VPC address plus a bridge entry for the fabric address. Without an API
//! connection such requests are refused with a clear CNI error instead of silently landing
//! on the default network.

use cozyplane_cni::env::CniEnv;
use cozyplane_cni::spec::{CniError, ErrorCode};
use serde_json::Value;

/// The annotation that asks for a VPC attachment.
pub const VPC_ANNOTATION: &str = "sdn.cozystack.io/vpc";
/// The same request in `CNI_ARGS` (runtimes and tests that cannot pass annotations).
pub const VPC_CNI_ARG: &str = "SDN_VPC";

/// Where the pod goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// Net 0: a fabric address from the node block, routed by the host.
    Default,
    /// A tenant VPC, `namespace/name`.
    Vpc {
        /// The VPC reference as requested.
        vpc: String,
    },
}

/// Decide from what the request carries: the annotation as runtimes forward it in the
/// netconf (`args.cni` or `runtimeConfig`), or `SDN_VPC` in `CNI_ARGS`. The pod's own
/// annotations need the kube API and will be read here later.
pub fn classify(env: &CniEnv, config: &Value) -> Attachment {
    let from_conf = [
        &config["args"]["cni"][VPC_ANNOTATION],
        &config["runtimeConfig"][VPC_ANNOTATION],
    ]
    .into_iter()
    .find_map(|v| v.as_str().map(str::to_string));
    match from_conf.or_else(|| env.arg(VPC_CNI_ARG).map(str::to_string)) {
        Some(vpc) if !vpc.is_empty() => Attachment::Vpc { vpc },
        _ => Attachment::Default,
    }
}

/// The error for an attachment this agent cannot serve yet.
pub fn unsupported(att: &Attachment) -> Option<CniError> {
    match att {
        Attachment::Default => None,
        Attachment::Vpc { vpc } => Some(CniError::new(
            ErrorCode::VpcUnavailable,
            format!("pod requests VPC {vpc:?}, but VPC attachments are not implemented in this agent yet"),
            "only the default network (net 0) is served; remove the sdn.cozystack.io/vpc request or upgrade the agent",
        )),
    }
}

#[cfg(test)]
mod tests {
    use cozyplane_cni::env::Command;

    use super::*;

    fn env(args: &[(&str, &str)]) -> CniEnv {
        CniEnv {
            command: Command::Add,
            container_id: "c".into(),
            netns: "/n".into(),
            ifname: "eth0".into(),
            args: args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            path: vec![],
        }
    }

    #[test]
    fn default_unless_a_vpc_is_named() {
        assert_eq!(classify(&env(&[]), &serde_json::json!({})), Attachment::Default);
        let vpc = classify(&env(&[("SDN_VPC", "t/a")]), &serde_json::json!({}));
        assert_eq!(vpc, Attachment::Vpc { vpc: "t/a".into() });
        assert_eq!(unsupported(&vpc).unwrap().code, 101);
        let conf = serde_json::json!({"args": {"cni": {"sdn.cozystack.io/vpc": "t/b"}}});
        assert_eq!(classify(&env(&[]), &conf), Attachment::Vpc { vpc: "t/b".into() });
    }
}
