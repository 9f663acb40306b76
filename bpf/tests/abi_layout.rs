//! The Rust ABI mirror (`src/abi.rs`, `src/drop.rs`, `src/config.rs`, `src/maps`) agrees
//! with the C headers in `include/sdn`.
//!
//! Layout: a C file of `_Static_assert`s generated from the Rust types' sizes, alignments
//! and field offsets is compiled by clang against the real headers, for the BPF target,
//! so it is clang's layout that is compared. Names: the headers are scanned for every map,
//! drop reason and config knob, and each must exist on the Rust side and vice versa.
//!
//! Needs `clang-19` (as `make -C bpf` does); fails, never skips, without it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cozyplane_bpf::abi::{LAYOUTS, POLICY_CONSTANTS, POLICY_LAYOUTS};
use cozyplane_bpf::config::GLOBALS;
use cozyplane_bpf::drop::{DROP_MAX, DropReason};
use cozyplane_bpf::maps;

fn bpf_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header(name: &str) -> String {
    let path = bpf_dir().join("include/sdn").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn generated_asserts() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <sdn/addr.h>\n#include <sdn/maps.h>\n\
         #include <sdn/drop_reasons.h>\n#include <sdn/policy_maps.h>\n#define SDN_DEFINE_CONFIG\n#include <sdn/config.h>\n\n",
    );
    for l in LAYOUTS.iter().chain(POLICY_LAYOUTS) {
        let s = l.c_name;
        writeln!(
            c,
            "_Static_assert(sizeof(struct {s}) == {}, \"size of {s}\");",
            l.size
        )
        .unwrap();
        writeln!(
            c,
            "_Static_assert(_Alignof(struct {s}) == {}, \"align of {s}\");",
            l.align
        )
        .unwrap();
        for (field, off) in l.fields {
            writeln!(
                c,
                "_Static_assert(offsetof(struct {s}, {field}) == {off}, \"{s}.{field}\");"
            )
            .unwrap();
        }
    }
    for (name, v) in POLICY_CONSTANTS {
        writeln!(c, "_Static_assert({name} == {v}u, \"{name}\");").unwrap();
    }
    for &r in DropReason::ALL {
        writeln!(c, "_Static_assert({} == {}, \"{r:?}\");", r.c_name(), r as i32).unwrap();
    }
    writeln!(c, "_Static_assert(SDN_DROP_MAX == {DROP_MAX}, \"DROP_MAX\");").unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_LB_SLOTS == {} && SDN_LB_NET_EXTERNAL == {} && SDN_LB_F_HAIRPIN == {} \
         && SDN_LB_STAT_MAX == {} && SDN_LB_STAT_FLOWS == {} && SDN_LB_STAT_SELECTIONS == {} \
         && SDN_LB_STAT_MISSES == {} && SDN_LB_STAT_SNAT == {}, \"lb\");",
        cozyplane_bpf::abi::LB_SLOTS,
        cozyplane_bpf::abi::LB_NET_EXTERNAL,
        cozyplane_bpf::abi::LbFlow::F_HAIRPIN,
        maps::lb_stats::MAX,
        maps::lb_stats::FLOWS,
        maps::lb_stats::SELECTIONS,
        maps::lb_stats::MISSES,
        maps::lb_stats::SNAT,
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_LB_BIG_SLOTS == {} && SDN_LB_CHUNK_SLOTS == {} && SDN_LB_BIG_CHUNKS == {} \
         && SDN_LB_SVC_F_BIG == {}u && SDN_LB_BIG_MAX == {}, \"lb big tables\");",
        cozyplane_bpf::abi::LB_BIG_SLOTS,
        cozyplane_bpf::abi::LB_CHUNK_SLOTS,
        cozyplane_bpf::abi::LB_BIG_CHUNKS,
        cozyplane_bpf::abi::LbSvc::F_BIG,
        maps::lb_mag_big::MAX,
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_SOCK_AFF_NET == {}u && SDN_SOCK_STAT_MAX == {} && SDN_SOCK_STAT_CONNECT == {} \
         && SDN_SOCK_STAT_SENDMSG == {} && SDN_SOCK_STAT_REFUSED == {} && SDN_SOCK_STAT_REVERSED == {}, \"sock\");",
        cozyplane_bpf::abi::SOCK_AFF_NET,
        maps::sock_stats::MAX,
        maps::sock_stats::CONNECT,
        maps::sock_stats::SENDMSG,
        maps::sock_stats::REFUSED,
        maps::sock_stats::REVERSED,
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_DNS_CFG_V4 == {} && SDN_DNS_CFG_V6 == {} && SDN_DNS_CFG_MAX == {}, \"dns\");",
        maps::dns_cfg::V4,
        maps::dns_cfg::V6,
        maps::dns_cfg::MAX,
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_PORT_F_DNAT == {}, \"SDN_PORT_F_DNAT\");",
        cozyplane_bpf::abi::Port::F_DNAT
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_EP_F_SEVERED == {}, \"SDN_EP_F_SEVERED\");",
        cozyplane_bpf::abi::Endpoint::F_SEVERED
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_EP_F_MIGRATING == {}, \"SDN_EP_F_MIGRATING\");",
        cozyplane_bpf::abi::Endpoint::F_MIGRATING
    )
    .unwrap();
    writeln!(
        c,
        "_Static_assert(SDN_MIG_F_STANDBY == {}, \"SDN_MIG_F_STANDBY\");",
        cozyplane_bpf::maps::migrations::F_STANDBY
    )
    .unwrap();
    {
        use cozyplane_bpf::abi::{SnatRev, SnatRkey};
        writeln!(
            c,
            "_Static_assert(SDN_SNAT_S_REPLIED == {} && SDN_SNAT_S_FIN_OUT == {} && \
             SDN_SNAT_S_FIN_IN == {} && SDN_SNAT_S_CLOSED == {} && SDN_SNAT_CLAIM == {}, \"snat state\");",
            SnatRev::S_REPLIED,
            SnatRev::S_FIN_OUT,
            SnatRev::S_FIN_IN,
            SnatRev::S_CLOSED,
            SnatRkey::CLAIM,
        )
        .unwrap();
    }
    for (name, size) in GLOBALS {
        writeln!(
            c,
            "_Static_assert(sizeof(__config_{name}) == {size}, \"config {name}\");"
        )
        .unwrap();
    }
    c
}

#[test]
fn rust_layouts_match_what_clang_computes_from_the_headers() {
    let dir = std::env::temp_dir().join(format!("cpbpf-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi_check.c");
    std::fs::write(&src, generated_asserts()).unwrap();

    let arch = std::env::consts::ARCH;
    let out = Command::new("clang-19")
        .args(["-target", "bpf", "-fsyntax-only", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{arch}-linux-gnu"))
        .arg(format!("-I{}", bpf_dir().join("include").display()))
        .arg(&src)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("clang-19 must be installed (apt-get install clang-19) to check the ABI");
    assert!(
        out.status.success(),
        "the Rust ABI mirror disagrees with include/sdn:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Identifiers following `prefix` up to the first char not in `[A-Za-z0-9_]`.
fn idents_after<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.match_indices(prefix).map(move |(i, _)| {
        let rest = &text[i + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        &rest[..end]
    })
}

#[test]
fn every_c_drop_reason_has_a_rust_variant() {
    let h = header("drop_reasons.h");
    let c: Vec<String> = idents_after(&h, "#define DROP_")
        .map(|s| format!("DROP_{s}"))
        .collect();
    let rust: Vec<&str> = DropReason::ALL.iter().map(|r| r.c_name()).collect();
    assert_eq!(c, rust, "drop_reasons.h and DropReason::ALL differ");
}

#[test]
fn every_c_map_has_a_rust_wrapper() {
    // maps.h and every per-feature `<feature>_maps.h`, each of which it must include.
    let mut h = header("maps.h");
    let mut feature: Vec<String> = std::fs::read_dir(bpf_dir().join("include/sdn"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with("_maps.h"))
        .collect();
    feature.sort_unstable();
    for inc in &feature {
        assert!(
            h.contains(&format!("#include <sdn/{inc}>")),
            "maps.h includes {inc}"
        );
        h.push_str(&header(inc));
    }
    let mut c: Vec<&str> = h
        .lines()
        .filter_map(|l| l.strip_prefix("} ")?.strip_suffix(" SEC(\".maps\");"))
        .collect();
    let mut rust = maps::ALL.to_vec();
    c.sort_unstable();
    rust.sort_unstable();
    assert_eq!(c, rust, "maps.h and maps::ALL differ");
}

#[test]
fn every_c_config_knob_has_a_rust_field() {
    let h = header("config.h");
    let c: Vec<&str> = h
        .split("DECLARE_CONFIG(")
        .skip(2) // the text before the first use, and the #define itself
        .filter_map(|decl| decl.split(',').nth(1).map(str::trim))
        .collect();
    let rust: Vec<&str> = GLOBALS.iter().map(|(n, _)| *n).collect();
    assert_eq!(c, rust, "config.h and config::GLOBALS differ");
}

#[test]
fn committed_objects_exist_for_every_program_source() {
    for entry in std::fs::read_dir(bpf_dir().join("progs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap();
        if let Some(stem) = name.strip_suffix(".bpf.c") {
            assert!(
                Path::new(&bpf_dir().join("obj").join(format!("{stem}.o"))).exists(),
                "bpf/obj/{stem}.o missing: run `make -C bpf`"
            );
        }
    }
}
