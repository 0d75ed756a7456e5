//! The core's layers: each top-level module of `crates/riffle/src` may use only the modules
//! below it in [`LAYERS`], never one above, so the core has no import cycles. A module that
//! needs something from above gets it handed down (a trait the higher layer implements, as the
//! runtime's `Planner` is implemented by the job graph), or the shared piece moves below both.
//!
//! `cargo test -p riffle --test layers` checks it; with `grep -rn "crate::<module>"
//! crates/riffle/src/<other>` a newcomer sees who uses what. Doc comments and unit-test modules
//! do not count (a doc link may point anywhere; tests sit above everything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Re-exports that keep a moved name at its old path for one release (CHANGELOG.md): a name,
/// not a use of the layer above. (module, the layer above it, the file.)
const COMPAT_REEXPORTS: &[(&str, &str, &str)] = &[("operators", "join", "operators/mod.rs")];

/// The top-level modules, lowest first. A module uses only modules before it.
const LAYERS: &[&str] = &[
    // Plain helpers and the data model.
    "util",
    "record",
    "error",
    "keys",
    "codec",
    "aggregate",
    "time",
    "metrics",
    "control",
    // State, and checkpoints of it.
    "state",
    "checkpoint",
    "config",
    "change",
    "bad_records",
    // What jobs are made of.
    "operators",
    "window",
    "join",
    "sink",
    "source",
    // Running them, planning them, declaring them.
    "runtime",
    "graph",
    "api",
    // Libraries on the API: patterns (CEP).
    "cep",
    "testing",
];

/// The top-level modules that `text` (a source file, comments removed) refers to as
/// `crate::<module>`, also inside `use crate::{a, b::c}` groups.
fn references(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let word = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect()
    };
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (1usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            found.insert(word(&group[start..i]));
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        found.insert(word(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(word(rest));
        }
    }
    found.remove("");
    found
}

/// A source file without its comment lines and its unit-test module.
fn code_of(source: &str) -> String {
    let body = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    body.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank: BTreeMap<&str, usize> = LAYERS.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut unlisted = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let Some(&own) = rank.get(module.as_str()) else {
            unlisted.insert(module);
            continue;
        };
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for used in references(&code) {
            if used == module {
                continue;
            }
            match rank.get(used.as_str()) {
                Some(&theirs)
                    if theirs > own
                        && !COMPAT_REEXPORTS.contains(&(
                            module.as_str(),
                            used.as_str(),
                            relative.display().to_string().as_str(),
                        )) =>
                {
                    upward
                        .entry((module.clone(), used))
                        .or_default()
                        .insert(relative.display().to_string());
                }
                Some(_) => {}
                // `crate::Error` and other names re-exported at the crate's root.
                None => {}
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "top-level modules missing from LAYERS (put each where it belongs): {unlisted:?}"
    );
    let report: Vec<String> = upward
        .iter()
        .map(|((from, to), files)| format!("{from} -> {to} (above it) in {files:?}"))
        .collect();
    assert!(
        report.is_empty(),
        "modules using a layer above them:\n{}",
        report.join("\n")
    );
}

#[test]
fn references_are_found_in_paths_and_groups() {
    let code = "use crate::a::B;\nuse crate::{c::D, e, f::{g, h}};\nlet x = crate::i::j();";
    let found: Vec<String> = references(code).into_iter().collect();
    assert_eq!(found, ["a", "c", "e", "f", "i"]);
    assert!(code_of("// crate::x\nuse crate::y;").contains("crate::y"));
    assert!(!code_of("/// see crate::x\nfn f() {}").contains("crate::x"));
}
