//! What the agent's integration tests share.

#![allow(dead_code, reason = "each test binary uses part of the kit")]

use std::path::PathBuf;

use cozyplane_agent::AgentConfig;
use cozyplane_agent::core::metrics::{Metrics, MetricsBuilder, VpcNames};

/// The agent's registry as it starts with its default flags: the core's families and every
/// feature's of the composition root, labelled with `node` and the names in `vpcs`.
pub(crate) fn agent_metrics(pin_dir: PathBuf, node: &str, vpcs: VpcNames) -> Metrics {
    let cfg = <AgentConfig as clap::Parser>::parse_from(["cozyplane-agent"]);
    let mut builder = MetricsBuilder::new(pin_dir, node.to_string(), vpcs);
    for f in &mut cozyplane_agent::assemble(&cfg) {
        f.metrics(&mut builder);
    }
    builder.build()
}

/// A private bpffs, unmounted on drop.
pub(crate) struct Bpffs(pub(crate) tempfile::TempDir);

impl Bpffs {
    /// Mounted now; `name` shows in `mount`'s list (which test left it, should one stay).
    pub(crate) fn new(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        cozyplane_lab::sh_ok(&["mount", "-t", "bpf", name, dir.path().to_str().unwrap()]);
        Self(dir)
    }

    /// The pin directory the agent would use on it.
    pub(crate) fn pins(&self) -> PathBuf {
        self.0.path().join("cozyplane")
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = cozyplane_lab::sh(&["umount", "-l", self.0.path().to_str().unwrap()]);
    }
}
