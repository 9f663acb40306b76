//! `cozyplane-cni`, the CNI plugin (spec 1.1.0).
//!
//! A thin binary: it reads the CNI environment and the stdin config, forwards the command
//! to the node agent over a unix socket and prints the agent's result or a CNI error. All
//! logic is in the library ([`cozyplane_cni::plugin`]) so it can be tested without a process.

use std::io::{Read, Write};

use cozyplane_cni::plugin::{UnixTransport, run};
use cozyplane_cni::proto::MAX_MESSAGE;

fn main() {
    let mut stdin = Vec::new();
    // An unreadable stdin is treated as empty; the config parser reports it as code 6.
    let _ = std::io::stdin().take(MAX_MESSAGE as u64).read_to_end(&mut stdin);
    let out = run(cozyplane_cni::env::process_env(), &stdin, &UnixTransport);
    if let Some(v) = out.stdout {
        let mut stdout = std::io::stdout().lock();
        // Nothing useful can be done if stdout is closed; the exit code still tells.
        let _ = writeln!(stdout, "{v}");
        let _ = stdout.flush();
    }
    std::process::exit(out.exit_code);
}
