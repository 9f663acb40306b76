//! The one list of which program calls which feature (`docs/datapath.md`, "Which program
//! calls which feature") agrees with the sources: every `sdn_*` function a program object
//! (`progs/*.bpf.c`) calls that a feature header (`lib/<feature>.h`) defines is a row of the
//! table, and every row is such a call. Every header under `lib/` is either a feature's (in the
//! table) or listed as shared. Reads text only; no clang.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn bpf_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `sdn_*` names followed by `(` in `text`.
fn calls(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("sdn_") {
        if text[..at].ends_with(is_ident) {
            continue;
        }
        let name: String = text[at..].chars().take_while(|c| is_ident(*c)).collect();
        if text[at + name.len()..].starts_with('(') {
            out.insert(name);
        }
    }
    out
}

/// Functions a header defines: a line that starts with `static` (or with the name, when the
/// return type stands on the line before) and names `sdn_*(` without ending in `;`.
fn definitions(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let l = line.trim_end();
        if l.ends_with(';') || !(l.starts_with("static") || l.starts_with("sdn_")) {
            continue;
        }
        // The first name on the line is the one defined; the rest are its arguments' calls.
        let first = l.match_indices("sdn_").find_map(|(at, _)| {
            let name: String = l[at..].chars().take_while(|c| is_ident(*c)).collect();
            l[at + name.len()..].starts_with('(').then_some(name)
        });
        out.extend(first);
    }
    out
}

/// The section of `docs/datapath.md`: its table rows `(object, header, function)`, the
/// feature headers behind the entry headers, and the shared headers.
type Documented = (
    BTreeSet<(String, String, String)>,
    BTreeSet<String>,
    BTreeSet<String>,
);

fn documented() -> Documented {
    let doc = std::fs::read_to_string(bpf_dir().join("../docs/datapath.md")).unwrap();
    let start = doc
        .find("## Which program calls which feature")
        .expect("the section in docs/datapath.md");
    let section = &doc[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let section = &section[..end];
    let ticked = |s: &str| -> Vec<String> { s.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    let mut rows = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `object` | feature | `header` | `fn`, `fn` |
        let object = ticked(cells[1]).remove(0);
        let header = ticked(cells[3]).remove(0);
        for f in ticked(cells[4]) {
            rows.insert((object.clone(), header.clone(), f));
        }
    }
    // A paragraph that starts with `start`, up to the blank line after it.
    let list = |start: &str| -> BTreeSet<String> {
        let at = section
            .find(&format!("\n{start}"))
            .unwrap_or_else(|| panic!("a paragraph `{start} …`"));
        let para = &section[at + 1..];
        let para = &para[..para.find("\n\n").unwrap_or(para.len())];
        ticked(para).into_iter().filter(|h| h.ends_with(".h")).collect()
    };
    (rows, list("Behind the entry headers:"), list("Shared headers:"))
}

/// What the sources say, for the feature headers `features`.
fn from_sources(features: &BTreeSet<String>) -> BTreeSet<(String, String, String)> {
    let lib = bpf_dir().join("lib");
    let mut defined: BTreeMap<String, String> = BTreeMap::new();
    for h in features {
        let text = std::fs::read_to_string(lib.join(h)).unwrap_or_else(|e| panic!("lib/{h}: {e}"));
        for f in definitions(&text) {
            defined.insert(f, h.clone());
        }
    }
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(bpf_dir().join("progs"))
        .unwrap()
        .map(Result::unwrap)
    {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.ends_with(".bpf.c") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        for f in calls(&text) {
            if let Some(h) = defined.get(&f) {
                out.insert((name.clone(), h.clone(), f));
            }
        }
    }
    out
}

#[test]
fn the_table_of_feature_calls_matches_the_programs() {
    let (rows, behind, shared) = documented();
    let features: BTreeSet<String> = rows.iter().map(|(_, h, _)| h.clone()).collect();
    let lib = bpf_dir().join("lib");
    for h in &behind {
        let included = features.iter().any(|f| {
            let text = std::fs::read_to_string(lib.join(f)).unwrap();
            text.contains(&format!("#include \"{h}\""))
        });
        assert!(
            included,
            "{h} is listed behind an entry header that none includes"
        );
    }
    let features: BTreeSet<String> = features.union(&behind).cloned().collect();
    let both: Vec<_> = features.intersection(&shared).collect();
    assert!(both.is_empty(), "headers both shared and a feature's: {both:?}");
    let headers: BTreeSet<String> = std::fs::read_dir(bpf_dir().join("lib"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".h"))
        .collect();
    let listed: BTreeSet<String> = features.union(&shared).cloned().collect();
    assert_eq!(
        listed, headers,
        "every lib/ header is a feature's or shared, and only those"
    );
    let got = from_sources(&features);
    let missing: Vec<_> = got.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&got).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/datapath.md, \"Which program calls which feature\":\nnot in the table: {missing:#?}\nnot in the programs: {stale:#?}"
    );
}

#[test]
fn the_reader_finds_calls_and_definitions() {
    let c = calls("x = sdn_a(1) + my_sdn_b(2) + sdn_c (3); sdn_d(sdn_e(4));");
    assert_eq!(
        c,
        BTreeSet::from(["sdn_a".into(), "sdn_d".into(), "sdn_e".into()])
    );
    let d = definitions(
        "static __always_inline int sdn_f(struct x *p)\n{\n\treturn sdn_g(p);\n}\n\
         static __always_inline int\nsdn_h(void)\nint sdn_i(void);\n",
    );
    assert_eq!(d, BTreeSet::from(["sdn_f".into(), "sdn_h".into()]));
}
