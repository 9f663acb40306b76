//! `cozyplane-agent`, the node agent.
//!
//! It watches the `sdn.cozystack.io` API (Ports on its node, VPCs, VPCBindings) and the kube API
//! (Pods on its node, Nodes) and writes what it sees into the eBPF maps of the datapath. It also
//! serves the CNI plugin over a unix socket. It arrives with the datapath issue (issue 7).

fn main() {
    eprintln!("cozyplane-agent: not built yet (see the datapath issue)");
    std::process::exit(2);
}
