//! The invariants of `ARCHITECTURE.md` that are about the shape of the code, checked on the
//! source itself: no circles between modules, the one importer of each boundary crate, and the
//! one module that orders stages. (The others are kept by `clippy.toml`'s `disallowed-methods`
//! and by the behaviour tests named in ARCHITECTURE.md.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Every source file (relative to `src/`) with its text before its `#[cfg(test)]` module.
fn code() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read");
            let code = match text.find("#[cfg(test)]") {
                Some(at) => text[..at].to_owned(),
                None => text,
            };
            let relative = path
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .into_owned();
            (relative, code)
        })
        .collect()
}

/// The top-level module a file belongs to (`llm/openai.rs` → `llm`).
fn module_of(relative: &str) -> String {
    relative
        .split('/')
        .next()
        .unwrap_or(relative)
        .trim_end_matches(".rs")
        .to_owned()
}

/// Which top-level modules each top-level module names (`crate::name`).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, code) in code() {
        let from = module_of(&relative);
        if from == "main" || from == "lib" {
            continue;
        }
        let entry = graph.entry(from.clone()).or_default();
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != from {
                entry.insert(name);
            }
        }
    }
    graph
}

/// A circle through `start`, if there is one.
fn circle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_owned(), vec![start.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                let mut circle = path.clone();
                circle.push(start.to_owned());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_circles_between_modules() {
    let graph = graph();
    assert!(graph.len() > 20, "the module graph was read: {graph:?}");
    let circles: Vec<String> = graph
        .keys()
        .filter_map(|module| circle_from(&graph, module))
        .map(|circle| circle.join(" → "))
        .collect();
    assert!(circles.is_empty(), "modules in a circle:\n{}", circles.join("\n"));
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        circle_from(&graph, "a").map(|circle| circle.join(" → ")),
        Some("a → b → c → a".to_owned())
    );
    graph.get_mut("c").expect("c").clear();
    assert_eq!(circle_from(&graph, "a"), None);
}

/// The files (relative to `src/`) whose code mentions `needle`.
fn files_naming(needle: &str) -> BTreeSet<String> {
    code()
        .into_iter()
        .filter(|(_, code)| code.contains(needle))
        .map(|(relative, _)| relative)
        .collect()
}

#[test]
fn boundary_crates_have_one_importer_each() {
    for (needle, allowed) in [
        ("bollard", "sandbox/docker"),
        ("octocrab", "github/"),
        ("aws_sigv4", "llm/bedrock"),
    ] {
        let outside: Vec<String> = files_naming(needle)
            .into_iter()
            .filter(|file| !file.starts_with(allowed))
            .collect();
        assert!(
            outside.is_empty(),
            "{needle} is used outside {allowed}: {outside:?}"
        );
    }
}

#[test]
fn only_the_commands_and_delivery_start_the_loop() {
    let callers: Vec<String> = files_naming("crate::reconcile")
        .into_iter()
        .filter(|file| !file.starts_with("commands/") && file != "delivery.rs")
        .collect();
    assert!(callers.is_empty(), "reconcile is called from {callers:?}");
}
