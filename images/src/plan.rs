//! What each image holds, file by file, and where every file comes from.
//!
//! The Containerfiles (images/<image>/Containerfile) say how an image is assembled from its
//! staged root filesystem; this says what the root filesystem is. [`crate::stage`] adds to
//! every image the shared libraries its files link, /etc/passwd, /etc/group,
//! /etc/nsswitch.conf, /tmp and the SBOM.

/// One image.
#[derive(Debug)]
pub struct Plan {
    /// The short name on the command line (`agent`) and the directory of its Containerfile
    /// under images/.
    pub short: &'static str,
    /// The image's name, the last component of its repository (`cozyplane-agent`).
    pub name: &'static str,
    /// Its files.
    pub files: &'static [File],
    /// Symbolic links: path in the image, target.
    pub links: &'static [(&'static str, &'static str)],
}

/// One file of an image.
#[derive(Debug)]
pub struct File {
    /// Absolute path inside the image.
    pub path: &'static str,
    /// Where it comes from.
    pub source: Source,
}

/// Where a file comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// A binary this repository builds, from the build's binary directory (target/release);
    /// its crates come from `cargo metadata` of `manifest`.
    Built {
        /// File name in the binary directory.
        bin: &'static str,
        /// The package that builds it.
        package: &'static str,
        /// Its workspace's Cargo.toml, relative to the repository root.
        manifest: &'static str,
    },
    /// A file of the build host, which must belong to a Debian package (the SBOM names it).
    Host(&'static str),
}

const APISERVER_BIN: Source = Source::Built {
    bin: "cozyplane-apiserver",
    package: "cozyplane-apiserver",
    manifest: "Cargo.toml",
};
const AGENT_BIN: Source = Source::Built {
    bin: "cozyplane-agent",
    package: "cozyplane-agent",
    manifest: "Cargo.toml",
};
// The plugin is a workspace of its own (cni/bin/Cargo.toml says why).
const CNI_BIN: Source = Source::Built {
    bin: "cozyplane-cni",
    package: "cozyplane-cni-bin",
    manifest: "cni/bin/Cargo.toml",
};

/// The API server: its binary and nothing else.
pub const APISERVER: Plan = Plan {
    short: "apiserver",
    name: "cozyplane-apiserver",
    files: &[File {
        path: "/usr/bin/cozyplane-apiserver",
        source: APISERVER_BIN,
    }],
    links: &[],
};

/// The agent, the CNI plugin and what they exec or the chart's init container runs.
pub const AGENT: Plan = Plan {
    short: "agent",
    name: "cozyplane-agent",
    files: &[
        File {
            path: "/usr/bin/cozyplane-agent",
            source: AGENT_BIN,
        },
        File {
            path: "/usr/bin/cozyplane-cni",
            source: CNI_BIN,
        },
        // The agent execs `nft -f -` (agent/src/core/datapath/netfilter.rs).
        File {
            path: "/usr/sbin/nft",
            source: Source::Host("/usr/sbin/nft"),
        },
        // Installed on the node next to ours by the init container; the chart expects this
        // path.
        File {
            path: "/usr/lib/cni/portmap",
            source: Source::Host("/usr/lib/cni/portmap"),
        },
        // Static: one file gives the init container its shell and tools.
        File {
            path: "/bin/busybox",
            source: Source::Host("/bin/busybox"),
        },
    ],
    // What charts/cozyplane/files/install-cni.sh runs (sh, grep, sed, head, mkdir, cp,
    // chmod, mv, basename, echo), and cat, ls, ln, rm and test for looking around.
    links: &[
        ("/bin/basename", "busybox"),
        ("/bin/cat", "busybox"),
        ("/bin/chmod", "busybox"),
        ("/bin/cp", "busybox"),
        ("/bin/echo", "busybox"),
        ("/bin/grep", "busybox"),
        ("/bin/head", "busybox"),
        ("/bin/ln", "busybox"),
        ("/bin/ls", "busybox"),
        ("/bin/mkdir", "busybox"),
        ("/bin/mv", "busybox"),
        ("/bin/rm", "busybox"),
        ("/bin/sed", "busybox"),
        ("/bin/sh", "busybox"),
        ("/bin/test", "busybox"),
    ],
};

/// Every image, in build order.
pub const ALL: &[&Plan] = &[&APISERVER, &AGENT];

/// The image called `short` (`apiserver`, `agent`) or by its full name.
pub fn find(name: &str) -> Option<&'static Plan> {
    ALL.iter().copied().find(|p| p.short == name || p.name == name)
}
