//! The agent's layout, kept (`docs/architecture.md`, "The agent: a core and features"): the
//! core names no feature, a feature names no other feature, and the modules of `agent/src`
//! import each other without a cycle.
//!
//! It reads the sources as text: every `crate::…`, `super::…` and `self::…` path (in code and
//! in doc links alike: a doc link to a feature is a dependency on it too), `use` groups
//! expanded, each resolved to the module file it names. The unit the rules speak of is a
//! **component**: `lib.rs` (the composition root), `core/mod.rs`, `features/mod.rs`, each
//! `core/<name>` and each `features/<name>` (a file, or a folder with everything below it).
//! As with Go's packages, the files inside one component may use each other freely; between
//! components the graph must be acyclic.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module of the crate as the path segments below `crate` (`[]` is `lib.rs`).
type ModPath = Vec<String>;

/// One reference from a file to a module.
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    file: String,
    line: usize,
    text: String,
}

/// Every `.rs` file below `src` by its module path (`main.rs`, a binary of its own, left out).
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut segs: ModPath = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            match segs.last().map(String::as_str) {
                Some("main") if segs.len() == 1 => continue,
                Some("lib") if segs.len() == 1 => segs.clear(),
                Some("mod") => {
                    segs.pop();
                }
                _ => {}
            }
            out.insert(segs, p);
        }
    }
    out
}

/// The component a module belongs to.
fn component(m: &[String]) -> String {
    match m {
        [] => "lib".into(),
        [top] => top.clone(),
        [top, name, ..] if top == "core" || top == "features" => format!("{top}::{name}"),
        [top, ..] => top.clone(),
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths `text` names after a `crate::`, `super::` or `self::` at `at`: `a::b`, or each
/// item of a `{…}` group, expanded.
fn paths_at(text: &str, prefix: Vec<String>) -> Vec<Vec<String>> {
    let mut segs = prefix;
    let b = text.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        match &text[start..i] {
            "" | "self" => {}
            "super" => {
                segs.pop();
            }
            seg => segs.push(seg.to_string()),
        }
        // A group (`a::{b, c}`, or `{b, c}` right after the keyword): split at top-level commas.
        let group = if text[i..].starts_with("::{") {
            Some(i + 3)
        } else if i == 0 && text.starts_with('{') {
            Some(1)
        } else {
            None
        };
        if let Some(body_start) = group {
            let mut depth = 1;
            let mut j = body_start;
            let mut items = Vec::new();
            let mut item_start = body_start;
            while j < b.len() && depth > 0 {
                match b[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            items.push(&text[item_start..j]);
                        }
                    }
                    b',' if depth == 1 => {
                        items.push(&text[item_start..j]);
                        item_start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            let mut out = Vec::new();
            for it in items {
                let it = it.trim();
                if it.is_empty() || it == "self" {
                    out.push(segs.clone());
                } else {
                    out.extend(paths_at(it, segs.clone()));
                }
            }
            return out;
        }
        if text[i..].starts_with("::") && text[i + 2..].starts_with(|c: char| is_ident(c)) {
            i += 2;
            continue;
        }
        return vec![segs];
    }
}

/// Every module path `src` (the text of module `me`) refers to, with its line.
fn references(me: &[String], src: &str) -> Vec<(ModPath, usize, String)> {
    let mut out = Vec::new();
    // `super` inside the file's own test module means the file's module.
    let tests_at = src.find("#[cfg(test)]\nmod tests").unwrap_or(usize::MAX);
    for (kw, base) in [("crate::", 0usize), ("super::", 1), ("self::", 2)] {
        let mut from = 0;
        while let Some(k) = src[from..].find(kw) {
            let at = from + k;
            from = at + kw.len();
            let before = &src[..at];
            if before.ends_with(|c: char| is_ident(c) || c == '$') || before.ends_with("::") {
                continue; // `$crate::`, `my_self::`, the middle of `super::super::`, …
            }
            let prefix: ModPath = match base {
                0 => Vec::new(),
                1 if at > tests_at => me.to_vec(),
                1 => me[..me.len().saturating_sub(1)].to_vec(),
                _ => me.to_vec(),
            };
            let line = src[..at].matches('\n').count() + 1;
            let text = src[at..].lines().next().unwrap_or_default().trim().to_string();
            for p in paths_at(&src[at + kw.len()..], prefix) {
                out.push((p, line, text.clone()));
            }
        }
    }
    out
}

/// The longest prefix of `p` that is a module file; the root only for a name `lib.rs`
/// declares (`root_items`): a path like `crate::gone` names nothing that exists.
fn resolve<'a>(
    mods: &'a BTreeMap<ModPath, PathBuf>,
    root_items: &BTreeSet<String>,
    p: &[String],
) -> Option<&'a ModPath> {
    let found = (0..=p.len())
        .rev()
        .find_map(|n| mods.get_key_value(&p[..n]).map(|(k, _)| k))?;
    (!found.is_empty() || p.first().is_none_or(|first| root_items.contains(first))).then_some(found)
}

/// The names `lib.rs` declares or imports: `fn`, `struct`, `enum`, `mod`, … and `use` leaves.
fn root_items(lib: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in [
        "fn ", "struct ", "enum ", "mod ", "type ", "const ", "static ", "trait ",
    ] {
        for (at, _) in lib.match_indices(kw) {
            let name: String = lib[at + kw.len()..]
                .chars()
                .take_while(|c| is_ident(*c))
                .collect();
            out.insert(name);
        }
    }
    for (at, _) in lib.match_indices("use ") {
        let stmt = &lib[at..lib[at..].find(';').map_or(lib.len(), |e| at + e)];
        out.extend(
            stmt.split(|c: char| !is_ident(c))
                .filter(|w| !w.is_empty())
                .map(str::to_string),
        );
    }
    out
}

/// Edges between components, from every file below `src`.
fn edges(src: &Path) -> Vec<Edge> {
    let mods = modules(src);
    let roots = root_items(&std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default());
    let mut out = Vec::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let me = component(m);
        for (p, line, t) in references(m, &text) {
            let Some(target) = resolve(&mods, &roots, &p) else {
                continue;
            };
            let to = component(target);
            if to != me {
                out.push(Edge {
                    from: me.clone(),
                    to,
                    file: file.strip_prefix(src).unwrap().display().to_string(),
                    line,
                    text: t,
                });
            }
        }
    }
    out
}

/// What breaks the layout, one line each.
fn violations(src: &Path) -> Vec<String> {
    let edges = edges(src);
    let mut out = Vec::new();
    let where_ = |e: &Edge| format!("{}:{}: {}", e.file, e.line, e.text);
    for e in &edges {
        let core = e.from == "core" || e.from.starts_with("core::");
        let feature = e.from.starts_with("features::");
        let to_feature = e.to == "features" || e.to.starts_with("features::");
        if core && (to_feature || e.to == "lib") {
            out.push(format!(
                "the core names a feature or the root: {} -> {} at {}",
                e.from,
                e.to,
                where_(e)
            ));
        }
        if feature && (to_feature || e.to == "lib") {
            out.push(format!(
                "a feature names another feature or the root: {} -> {} at {}",
                e.from,
                e.to,
                where_(e)
            ));
        }
    }
    // Cycles: a component that reaches itself.
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in &edges {
        graph.entry(&e.from).or_default().insert(&e.to);
    }
    let mut reported = BTreeSet::new();
    for &start in graph.keys() {
        // Depth-first, remembering the path that got here.
        let mut stack = vec![(start, vec![start])];
        let mut seen = BTreeSet::new();
        while let Some((n, path)) = stack.pop() {
            for &next in graph.get(n).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    let min = cycle.iter().min().copied().unwrap_or(start);
                    let at = cycle.iter().position(|c| *c == min).unwrap_or(0);
                    cycle.rotate_left(at);
                    if reported.insert(cycle.clone()) {
                        let steps: Vec<String> = cycle
                            .iter()
                            .zip(cycle.iter().cycle().skip(1))
                            .map(|(a, b)| {
                                let e = edges.iter().find(|e| e.from == *a && e.to == *b).unwrap();
                                format!("{a} -> {b} ({})", where_(e))
                            })
                            .collect();
                        out.push(format!("import cycle: {}", steps.join("; ")));
                    }
                } else if seen.insert(next) {
                    let mut p = path.clone();
                    p.push(next);
                    stack.push((next, p));
                }
            }
        }
    }
    out
}

#[test]
fn the_agent_is_a_core_and_features_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let v = violations(&src);
    assert!(v.is_empty(), "agent/src breaks its layout:\n{}", v.join("\n"));
    // The check reads something: known edges are found, the components are there.
    let e = edges(&src);
    for (from, to) in [
        ("features::sever", "core::api"),
        ("core::cni", "core::ipam"),
        ("lib", "core::run"),
    ] {
        assert!(
            e.iter().any(|e| e.from == from && e.to == to),
            "no edge {from} -> {to} found: the reader is broken"
        );
    }
    let comps: BTreeSet<String> = modules(&src).keys().map(|m| component(m)).collect();
    for c in [
        "core::api",
        "core::cni",
        "core::watch",
        "features::policy",
        "features::doors",
    ] {
        assert!(comps.contains(c), "{c} not found among {comps:?}");
    }
}

/// A tree of files under a temporary `src`.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

const BASE: &[(&str, &str)] = &[
    (
        "lib.rs",
        "pub mod core;\npub mod features;\nuse crate::features::a::A;\n",
    ),
    ("core/mod.rs", "pub mod api;\npub mod cni;\n"),
    ("core/api/mod.rs", "pub struct Clients;\n"),
    ("core/cni.rs", "use crate::core::api::Clients;\n"),
    ("features/mod.rs", "pub mod a;\npub mod b;\n"),
    (
        "features/a/mod.rs",
        "mod x;\nuse crate::core::{api::Clients, cni};\n",
    ),
    ("features/a/x.rs", "use super::A;\n"),
    ("features/b.rs", "use crate::core::cni;\n"),
];

fn with(extra: &[(&str, &str)]) -> Vec<String> {
    let mut files: BTreeMap<&str, &str> = BASE.iter().copied().collect();
    files.extend(extra.iter().copied());
    let files: Vec<_> = files.into_iter().collect();
    let t = tree(&files);
    violations(t.path())
}

#[test]
fn a_clean_tree_passes() {
    assert_eq!(with(&[]), Vec::<String>::new());
}

#[test]
fn a_feature_naming_another_fails() {
    let v = with(&[("features/b.rs", "use crate::features::a::A;\n")]);
    assert!(
        v.iter().any(|l| l.starts_with("a feature names another feature")),
        "{v:?}"
    );
    // Through a group and through `super` too.
    let v = with(&[("features/b.rs", "use crate::{core::cni, features::{a}};\n")]);
    assert!(
        v.iter().any(|l| l.contains("features::b -> features::a")),
        "{v:?}"
    );
    let v = with(&[("features/a/x.rs", "use super::super::b;\n")]);
    assert!(
        v.iter().any(|l| l.contains("features::a -> features::b")),
        "{v:?}"
    );
}

#[test]
fn the_core_naming_a_feature_fails_in_code_and_in_doc_links() {
    let v = with(&[("core/cni.rs", "fn f() { crate::features::b::run(); }\n")]);
    assert!(
        v.iter().any(|l| l.starts_with("the core names a feature")),
        "{v:?}"
    );
    let v = with(&[("core/cni.rs", "//! See [`crate::features::a`].\n")]);
    assert!(
        v.iter().any(|l| l.starts_with("the core names a feature")),
        "{v:?}"
    );
}

#[test]
fn a_cycle_between_core_components_fails_and_one_inside_a_component_does_not() {
    let v = with(&[("core/api/mod.rs", "use crate::core::cni;\npub struct Clients;\n")]);
    assert!(
        v.iter()
            .any(|l| l.starts_with("import cycle: core::api -> core::cni")),
        "{v:?}"
    );
    let v = with(&[
        (
            "core/api/mod.rs",
            "mod calls;\nuse self::calls::Call;\npub struct Clients;\n",
        ),
        ("core/api/calls.rs", "use super::Clients;\npub struct Call;\n"),
    ]);
    assert_eq!(v, Vec::<String>::new());
}

#[test]
fn super_in_a_test_module_is_the_files_own_module() {
    let v = with(&[(
        "core/cni.rs",
        "use crate::core::api::Clients;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    )]);
    assert_eq!(v, Vec::<String>::new());
}
