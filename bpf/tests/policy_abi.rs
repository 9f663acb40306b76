//! The policy layers' map definitions (`include/sdn/policy_maps.h`) agree with the Rust
//! wrappers: the header is compiled for the BPF target the way `make -C bpf` compiles a
//! program, and the ELF's map table (names, key and value sizes) is compared with
//! `maps::POLICY` and the `abi` types. The structs' field layout is checked by
//! `abi_layout.rs`. Needs `clang-19`; fails, never skips, without it.
//!
//! The objects carry these maps too (maps.h includes the header; `maps::ALL` lists them);
//! this test also proves the header stands alone.

use std::mem::size_of;
use std::path::PathBuf;
use std::process::Command;

use cozyplane_bpf::abi::{
    Addr, EpKey, HfSelf, NpIdent, Pcidr, PcidrKey, Pct, PctKey, PolState, PolWork, Prule, PruleKey, SgMember,
};
use cozyplane_bpf::maps::{
    self, hf_self, np_idents, pol_cidrs, pol_ct, pol_rules, pol_state, pol_work, sg_members,
};

fn compile_header() -> Vec<u8> {
    let bpf = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("cpbpf-pol-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("policy_maps.c");
    let obj = dir.join("policy_maps.o");
    std::fs::write(
        &src,
        "#include <sdn/policy_maps.h>\nchar _license[] SEC(\"license\") = \"GPL\";\n",
    )
    .unwrap();
    let arch = std::env::consts::ARCH;
    let out = Command::new("clang-19")
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-c"])
        .arg(format!("-I/usr/include/{arch}-linux-gnu"))
        .arg(format!("-I{}", bpf.join("include").display()))
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .expect("clang-19 must be installed (apt-get install clang-19) to check the ABI");
    let bytes = std::fs::read(&obj);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "policy_maps.h does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bytes.unwrap()
}

#[test]
fn policy_map_definitions_match_the_rust_wrappers() {
    let elf = compile_header();
    let parsed = aya_obj::Object::parse(&elf).expect("the compiled header parses");
    // policy_maps.h includes maps.h (for sdn_ep_key), so the object carries those too.
    let mut names: Vec<&str> = parsed
        .maps
        .keys()
        .map(String::as_str)
        .filter(|n| maps::POLICY.contains(n) || !maps::ALL.contains(n))
        .collect();
    names.sort_unstable();
    let mut want = maps::POLICY.to_vec();
    want.sort_unstable();
    assert_eq!(names, want, "policy_maps.h and maps::POLICY differ");

    let expect: [(&str, usize, usize); 8] = [
        (pol_ct::NAME, size_of::<PctKey>(), size_of::<Pct>()),
        (pol_state::NAME, size_of::<u32>(), size_of::<PolState>()),
        (pol_rules::NAME, size_of::<PruleKey>(), size_of::<Prule>()),
        (pol_cidrs::NAME, size_of::<PcidrKey>(), size_of::<Pcidr>()),
        (sg_members::NAME, size_of::<EpKey>(), size_of::<SgMember>()),
        (np_idents::NAME, size_of::<Addr>(), size_of::<NpIdent>()),
        (hf_self::NAME, size_of::<Addr>(), size_of::<HfSelf>()),
        (pol_work::NAME, size_of::<u32>(), size_of::<PolWork>()),
    ];
    for (name, key, value) in expect {
        let m = &parsed.maps[name];
        assert_eq!(m.key_size() as usize, key, "{name} key");
        assert_eq!(m.value_size() as usize, value, "{name} value");
        assert!(name.len() <= 15, "{name} would be truncated by the kernel");
    }
}
