//! The invariants of `ARCHITECTURE.md` that are about the shape of the code, checked on the
//! source itself: no circles between modules, the one importer of each boundary crate, the
//! one module that orders stages, and the rooms of `github`, whose arrows point one way. (The others are kept by `clippy.toml`'s `disallowed-methods`
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
        ("aws_config::", "llm/aws_credentials"),
        ("google_cloud_auth::", "llm/google"),
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
fn one_module_owns_a_run_and_only_the_run_command_starts_it() {
    // `reconcile` is named by the commands and, for the `Delivery` trait it implements, by
    // `delivery`; nothing else reaches into the loop.
    let namers: Vec<String> = files_naming("crate::reconcile")
        .into_iter()
        .filter(|file| !file.starts_with("commands/") && file != "delivery.rs")
        .collect();
    assert!(namers.is_empty(), "reconcile is named from {namers:?}");
    // One owner of a run: only `bork-ci run` starts it, and only `reconcile` runs rounds.
    let starters = files_naming("reconcile::run(");
    assert_eq!(
        starters,
        BTreeSet::from(["commands/run.rs".to_owned()]),
        "a run is started from {starters:?}"
    );
    let rounds = files_naming("round::round(");
    assert_eq!(
        rounds,
        BTreeSet::from(["reconcile/mod.rs".to_owned()]),
        "a round is started from {rounds:?}"
    );
    let (_, delivery) = code()
        .into_iter()
        .find(|(file, _)| file == "delivery.rs")
        .expect("delivery.rs is read");
    for stage in ["for _round", "MAX_ROUNDS", "budget::"] {
        assert!(
            !delivery.contains(stage),
            "delivery orders rounds or budgets again (`{stage}`)"
        );
    }
}

/// The rooms of `github` (a file, or the `session/` folder) and their floors: a file names only
/// rooms on a lower floor, or its own room. A new file must be given a floor here.
const GITHUB_ROOMS: &[(&str, u8)] = &[
    ("data", 0),
    ("state", 0),
    ("approval", 0),
    ("context", 1),
    ("render", 1),
    ("git", 1),
    ("client", 1),
    ("session", 2),
    ("mod", 3),
];

fn github_floor(room: &str) -> Option<u8> {
    GITHUB_ROOMS
        .iter()
        .find(|(name, _)| *name == room)
        .map(|(_, floor)| *floor)
}

/// The room of a file under `src/github/` (`session/pulls.rs` → `session`, `git.rs` → `git`).
fn github_room(file: &str) -> String {
    file.split('/')
        .next()
        .unwrap_or(file)
        .trim_end_matches(".rs")
        .to_owned()
}

/// The first path segment of each item a `use` names from `rest` on (`::x`, `::{a, b::c}`);
/// one that is not a room is an item of `mod.rs`.
fn github_targets(rest: &str, rooms: &mut BTreeSet<String>) {
    let rest = rest.strip_prefix("::").unwrap_or("");
    let ident = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let room_of = |name: String| {
        if github_floor(&name).is_some() && name != "mod" {
            name
        } else {
            "mod".to_owned()
        }
    };
    match rest.strip_prefix('{') {
        Some(group) => {
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        rooms.insert(room_of(ident(&item)));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            if !item.trim().is_empty() {
                rooms.insert(room_of(ident(&item)));
            }
        }
        None => {
            rooms.insert(room_of(ident(rest)));
        }
    }
}

/// The rooms of `github` that the code of `file` (relative to `src/github/`) names, through
/// `crate::github::…` or `super::…` paths, comments left out.
fn github_arrows(file: &str, code: &str) -> BTreeSet<String> {
    let code: String = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let depth = file.matches('/').count();
    // How many `super::` lead from this file to `github` itself.
    let to_github = depth + 1 - usize::from(file.ends_with("mod.rs"));
    let mut rooms = BTreeSet::new();
    for (at, _) in code.match_indices("crate::github") {
        github_targets(&code[at + "crate::github".len()..], &mut rooms);
    }
    for (at, _) in code.match_indices("super::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c == ':' || c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut rest = &code[at..];
        let mut steps = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            steps += 1;
            rest = after;
        }
        if steps == to_github {
            github_targets(&format!("::{rest}"), &mut rooms);
        } else if steps < to_github {
            rooms.insert(github_room(file));
        }
    }
    rooms
}

/// Every arrow from `file` that does not point to a lower floor or its own room.
fn github_wrong_arrows(file: &str, code: &str) -> Vec<String> {
    let room = github_room(file);
    let Some(floor) = github_floor(&room) else {
        return vec![format!(
            "github/{file} is in no room: give `{room}` a floor in GITHUB_ROOMS"
        )];
    };
    github_arrows(file, code)
        .into_iter()
        .filter(|target| *target != room)
        .filter(|target| github_floor(target).is_none_or(|to| to >= floor))
        .map(|target| format!("github/{file} ({room}, floor {floor}) → {target}"))
        .collect()
}

#[test]
fn github_rooms_point_one_way() {
    let files: Vec<(String, String)> = code()
        .into_iter()
        .filter_map(|(relative, code)| {
            relative
                .strip_prefix("github/")
                .map(|file| (file.to_owned(), code))
        })
        .collect();
    assert!(files.len() >= 10, "the github files were read: {files:?}");
    let wrong: Vec<String> = files
        .iter()
        .flat_map(|(file, code)| github_wrong_arrows(file, code))
        .collect();
    assert!(
        wrong.is_empty(),
        "arrows the wrong way in github:\n{}",
        wrong.join("\n")
    );
    let session = files
        .iter()
        .find(|(file, _)| file == "session/pulls.rs")
        .map(|(file, code)| github_arrows(file, code))
        .expect("session/pulls.rs");
    assert!(
        ["client", "render", "git", "data", "session"]
            .iter()
            .all(|room| session.contains(*room)),
        "the arrows of session/pulls.rs were read: {session:?}"
    );
}

/// What a pure room of `github` must not name: files, processes, the network, the runtime.
const IO_NAMES: &[&str] = &[
    "std::fs",
    "safe_fs",
    "std::process",
    "blocking::",
    "std::env",
    "tokio",
    "reqwest",
    "octocrab",
    "std::net",
];

#[test]
fn githubs_pure_rooms_do_no_io() {
    let mut checked = 0;
    for (relative, code) in code() {
        let Some(file) = relative.strip_prefix("github/") else {
            continue;
        };
        if !["data", "state", "approval", "render"].contains(&github_room(file).as_str()) {
            continue;
        }
        checked += 1;
        let code: String = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let named: Vec<&str> = IO_NAMES
            .iter()
            .copied()
            .filter(|name| code.contains(name))
            .collect();
        assert!(named.is_empty(), "github/{file} is pure but names {named:?}");
    }
    assert_eq!(checked, 4, "the pure rooms were read");
}

#[test]
fn the_github_room_check_finds_a_wrong_arrow() {
    let sideways = "use super::{GithubError, render::iteration_message};\n\
                    // super::session is only mentioned\n\
                    fn f() { super::client::redact(); }";
    assert_eq!(
        github_arrows("git.rs", sideways),
        BTreeSet::from(["client".to_owned(), "mod".to_owned(), "render".to_owned()])
    );
    assert_eq!(github_wrong_arrows("git.rs", sideways).len(), 3);
    let upward = "use crate::github::session::Session;";
    assert_eq!(
        github_wrong_arrows("data.rs", upward),
        ["github/data.rs (data, floor 0) → session"]
    );
    let fine = "use super::Session;\nuse super::answers::Review;\nuse crate::github::data::X;\n\
                use super::super::render;\nuse crate::report::RunStatus;";
    assert_eq!(
        github_arrows("session/pulls.rs", fine),
        BTreeSet::from(["data".to_owned(), "render".to_owned(), "session".to_owned()])
    );
    assert!(github_wrong_arrows("session/pulls.rs", fine).is_empty());
    assert_eq!(
        github_arrows(
            "session/mod.rs",
            "use super::client::{self, Client};\nuse super::state::SavedState;"
        ),
        BTreeSet::from(["client".to_owned(), "state".to_owned()])
    );
    assert_eq!(github_wrong_arrows("extra.rs", "").len(), 1, "a file in no room");
}

/// Where processes start: git only in `git.rs` (with its one hardening set); the sandbox's
/// judges in `sandbox/none.rs`; `ldd` for the runner image. Returns what breaks that rule.
fn process_starts_out_of_place(code: &[(String, String)]) -> Vec<String> {
    const STARTERS: &[&str] = &["git.rs", "sandbox/none.rs", "sandbox/docker/runner_image.rs"];
    let mut wrong = Vec::new();
    for (file, text) in code {
        for (at, _) in text.match_indices("Command::new(") {
            let program: String = text[at + "Command::new(".len()..]
                .chars()
                .take_while(|c| *c != ')')
                .collect();
            let program = program.trim();
            if program.to_lowercase().contains("git") && file != "git.rs" {
                wrong.push(format!("{file} starts git ({program}) outside crate::git"));
            } else if !STARTERS.contains(&file.as_str()) {
                wrong.push(format!("{file} starts a process ({program})"));
            }
        }
    }
    wrong
}

#[test]
fn git_starts_only_in_crate_git() {
    let wrong = process_starts_out_of_place(&code());
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_git_check_finds_a_second_git_runner() {
    let planted = vec![
        (
            "pack/git.rs".to_owned(),
            "let c = std::process::Command::new(\"git\");".to_owned(),
        ),
        (
            "sandbox/none.rs".to_owned(),
            "Command::new(GIT_PROGRAM)".to_owned(),
        ),
        (
            "report/mod.rs".to_owned(),
            "tokio::process::Command::new(\"sh\")".to_owned(),
        ),
        ("git.rs".to_owned(), "Command::new(\"git\")".to_owned()),
    ];
    let wrong = process_starts_out_of_place(&planted);
    assert_eq!(wrong.len(), 3, "{wrong:#?}");
}

/// Who may name a path inside `.git`: the copy transport, which ships `.git` (hooks and
/// credentials stripped) into the tree volume; packing, which `lstat`s what is under it (never
/// opening it) to refuse hardlinks of it; finding the repository root, which asks whether `.git`
/// exists. Everything else asks git; the edit rules only refuse such paths (`edit::path`,
/// `edit::identity`, `edit::judge_files`, which never open one).
fn dot_git_readers_out_of_place(code: &[(String, String)]) -> Vec<String> {
    const READERS: &[&str] = &[
        "sandbox/docker/archive.rs",
        "sandbox/docker/mod.rs",
        "sandbox/docker/transport.rs",
        "pack/read.rs",
        "commands/mod.rs",
    ];
    code.iter()
        .filter(|(file, text)| {
            (text.contains(".join(\".git") || text.contains("\".git/")) && !READERS.contains(&file.as_str())
        })
        .map(|(file, _)| file.clone())
        .collect()
}

#[test]
fn only_the_copy_transport_packing_and_the_root_finder_name_dot_git() {
    let wrong = dot_git_readers_out_of_place(&code());
    assert!(wrong.is_empty(), "paths inside .git named in {wrong:?}");
}

#[test]
fn the_dot_git_check_finds_a_reader() {
    let planted = vec![(
        "verify.rs".to_owned(),
        "let head = safe_fs::read_regular(&repo.join(\".git/HEAD\"), 64);".to_owned(),
    )];
    assert_eq!(dot_git_readers_out_of_place(&planted), ["verify.rs"]);
}
