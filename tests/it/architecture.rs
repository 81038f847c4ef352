//! The invariants of `ARCHITECTURE.md` that are about the shape of the code, checked on the
//! source itself: no circles between modules, the one importer of each boundary crate, the one
//! module that orders a run, the rooms of `github` and of `llm`, whose arrows point one way, the
//! pure modules,
//! where processes start and are waited for, who names paths inside `.git`, who writes files and
//! changes the checkout through git, who writes to stderr, where containers are created and
//! removed, and where the process ends; and that every guard ARCHITECTURE.md names is a test
//! that exists. Each check has a self-test that plants what it
//! must find. (The other invariants are kept by `clippy.toml`'s `disallowed-methods` and by the
//! behaviour tests named in ARCHITECTURE.md.)

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

/// The source roots: the binary crate's `src/` and each workspace crate's `crates/*/src/`. A
/// crate keeps its modules under their names (`crates/sandbox/src/sandbox/…`), so a path relative
/// to its root names the module wherever it lives.
fn source_roots() -> Vec<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![manifest.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(manifest.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|entry| entry.path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    roots.extend(crates);
    roots
}

/// Every source file (relative to its crate's `src/`) with its text before its `#[cfg(test)]`
/// module.
fn code() -> Vec<(String, String)> {
    source_roots().iter().flat_map(|root| code_under(root)).collect()
}

/// The source files under one crate's `src/` (relative to it), each before its tests.
fn code_under(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    sources(root, &mut files);
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
                .strip_prefix(root)
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

/// How code names a top-level module: `crate::` inside its crate, the crate's name across crates.
const CRATE_PREFIXES: [&str; 7] = [
    "crate::",
    "bork_ci_core::",
    "bork_ci_edit::",
    "bork_ci_llm::",
    "bork_ci_sandbox::",
    "bork_ci_run::",
    "bork_ci_github::",
];

/// Which top-level modules each top-level module names (`crate::name`, `bork_ci_core::name`).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, code) in code() {
        let from = module_of(&relative);
        if from == "main" || from == "lib" {
            continue;
        }
        let entry = graph.entry(from.clone()).or_default();
        // `crate::name` inside a crate, `bork_ci_core::name` (and the other crates) across them.
        for prefix in CRATE_PREFIXES {
            for (at, _) in code.match_indices(prefix) {
                let name: String = code[at + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != from {
                    entry.insert(name);
                }
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

/// The files (relative to `src/`) of `code` that mention `needle`.
fn files_naming(code: &[(String, String)], needle: &str) -> BTreeSet<String> {
    code.iter()
        .filter(|(_, text)| text.contains(needle))
        .map(|(relative, _)| relative.clone())
        .collect()
}

/// Each boundary crate (as its code names it) and the one place (a path prefix under `src/`)
/// that may use it. Percent-encoding is the `percent_encoding` crate in `url_text` only, and no
/// other file writes a `%XX` escape by hand.
const BOUNDARY_CRATES: &[(&str, &str)] = &[
    ("bollard", "sandbox/docker"),
    ("octocrab", "github/"),
    ("aws_sigv4", "llm/bedrock"),
    ("aws_smithy_eventstream", "llm/bedrock"),
    ("aws_config::", "llm/aws_credentials"),
    ("aws_sdk_sts", "llm/aws_credentials"),
    ("google_cloud_auth::", "llm/google"),
    ("percent_encoding", "url_text.rs"),
    (":02X}", "url_text.rs"),
];

/// Every use of a boundary crate outside its one place.
fn boundary_crossings(code: &[(String, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (needle, allowed) in BOUNDARY_CRATES {
        for file in files_naming(code, needle) {
            if !file.starts_with(allowed) {
                wrong.push(format!("{needle} is used in {file}, outside {allowed}"));
            }
        }
    }
    wrong
}

#[test]
fn boundary_crates_have_one_importer_each() {
    let wrong = boundary_crossings(&code());
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_boundary_check_finds_a_second_importer() {
    let planted = vec![
        (
            "sandbox/docker/transport.rs".to_owned(),
            "use bollard::Docker;".to_owned(),
        ),
        (
            "github/client.rs".to_owned(),
            "use octocrab::Octocrab;".to_owned(),
        ),
        (
            "verify.rs".to_owned(),
            "let d = bollard::Docker::connect_with_local_defaults();".to_owned(),
        ),
        (
            "llm/wire.rs".to_owned(),
            "use aws_config::BehaviorVersion;".to_owned(),
        ),
        (
            "llm/address.rs".to_owned(),
            "out.push_str(&format!(\"%{byte:02X}\"));".to_owned(),
        ),
    ];
    assert_eq!(
        boundary_crossings(&planted),
        [
            "bollard is used in verify.rs, outside sandbox/docker",
            "aws_config:: is used in llm/wire.rs, outside llm/aws_credentials",
            ":02X} is used in llm/address.rs, outside url_text.rs",
        ]
    );
}

/// The workspace's crates (as their manifests name them), the bork-ci crates each may depend on,
/// and the boundary crates only it may name. Cargo keeps these walls once the manifests say so
/// (a crate cannot use what it does not depend on, and crates cannot form a circle); this keeps
/// the manifests saying what ARCHITECTURE.md's code map says.
const CRATE_WALLS: &[(&str, &[&str], &[&str])] = &[
    ("bork-ci-core", &[], &["reqwest"]),
    ("bork-ci-edit", &["bork-ci-core"], &[]),
    (
        "bork-ci-llm",
        &["bork-ci-core"],
        &[
            "aws-sigv4",
            "aws-config",
            "aws-sdk-sts",
            "aws-credential-types",
            "aws-smithy-eventstream",
            "aws-smithy-runtime-api",
            "aws-smithy-types",
            "google-cloud-auth",
        ],
    ),
    ("bork-ci-sandbox", &["bork-ci-core", "bork-ci-edit"], &["bollard"]),
    (
        "bork-ci-run",
        &["bork-ci-core", "bork-ci-edit", "bork-ci-llm", "bork-ci-sandbox"],
        &[],
    ),
    ("bork-ci-github", &["bork-ci-core", "bork-ci-run"], &["octocrab"]),
    (
        "bork-ci",
        &[
            "bork-ci-core",
            "bork-ci-edit",
            "bork-ci-llm",
            "bork-ci-sandbox",
            "bork-ci-run",
            "bork-ci-github",
        ],
        &["figment"],
    ),
];

/// Crates a crate may not name at all: the run reads its plan, never the configuration or the
/// command line, so "resolved once" is the compiler's to keep.
const CRATE_NEVER: &[(&str, &[&str])] = &[("bork-ci-run", &["figment", "clap"])];

/// A manifest's package name and the names in its dependency tables (normal, dev and build).
fn manifest_dependencies(manifest: &str) -> (String, BTreeSet<String>) {
    let mut name = String::new();
    let mut deps = BTreeSet::new();
    let mut section = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            name = value.trim().trim_matches('"').to_owned();
        } else if section.ends_with("dependencies") && !section.starts_with("workspace") {
            deps.insert(key.to_owned());
        }
    }
    (name, deps)
}

/// What the manifests get wrong against `CRATE_WALLS`: an unknown crate, a bork-ci crate
/// depended on against the floors, a boundary crate named by a crate that does not own it.
fn wall_breaches(manifests: &[String]) -> Vec<String> {
    let owner_of = |dep: &str| {
        CRATE_WALLS
            .iter()
            .find(|(_, _, own)| own.contains(&dep))
            .map(|(name, _, _)| *name)
    };
    let mut wrong = Vec::new();
    for manifest in manifests {
        let (name, deps) = manifest_dependencies(manifest);
        let Some((_, allowed, _)) = CRATE_WALLS.iter().find(|(crate_name, _, _)| *crate_name == name) else {
            wrong.push(format!("{name} is not in the code map"));
            continue;
        };
        let never = CRATE_NEVER
            .iter()
            .find(|(crate_name, _)| *crate_name == name)
            .map_or(&[][..], |(_, never)| *never);
        for dep in &deps {
            if never.contains(&dep.as_str()) {
                wrong.push(format!("{name} names {dep}, which it may never name"));
            }
            if dep.starts_with("bork-ci") && !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} depends on {dep}"));
            }
            if let Some(owner) = owner_of(dep)
                && owner != name
            {
                wrong.push(format!("{name} names {dep}, which only {owner} may name"));
            }
        }
    }
    wrong
}

/// The root manifest and every `crates/*/Cargo.toml`.
fn manifests() -> Vec<String> {
    let mut out = vec![
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("Cargo.toml"),
    ];
    for src in source_roots().into_iter().skip(1) {
        let manifest = src.parent().expect("crate dir").join("Cargo.toml");
        out.push(std::fs::read_to_string(manifest).expect("a crate's Cargo.toml"));
    }
    out
}

#[test]
fn crates_depend_along_the_floors_and_boundary_crates_have_one_owner() {
    let manifests = manifests();
    assert_eq!(
        manifests.len(),
        CRATE_WALLS.len(),
        "every crate is in the code map"
    );
    let wrong = wall_breaches(&manifests);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_wall_check_finds_a_crate_out_of_place() {
    let planted = [
        "[package]\nname = \"bork-ci-llm\"\n[dependencies]\nbork-ci-sandbox = { workspace = true }\n"
            .to_owned(),
        "[package]\nname = \"bork-ci-edit\"\n[dev-dependencies]\nbollard = \"0.21\"\n".to_owned(),
        "[package]\nname = \"bork-ci\"\n[dependencies]\nreqwest = \"0.13\"\n".to_owned(),
        "[package]\nname = \"bork-ci-extra\"\n".to_owned(),
        "[package]\nname = \"bork-ci-sandbox\"\n[dependencies]\nbollard = \"0.21\"\nbork-ci-edit = \"0.1\"\n"
            .to_owned(),
        "[package]\nname = \"bork-ci-run\"\n[dependencies]\nclap = { workspace = true }\n".to_owned(),
        "[package]\nname = \"bork-ci-sandbox\"\n[dependencies]\nfigment = \"0.10\"\n".to_owned(),
    ];
    assert_eq!(
        wall_breaches(&planted),
        [
            "bork-ci-llm depends on bork-ci-sandbox",
            "bork-ci-edit names bollard, which only bork-ci-sandbox may name",
            "bork-ci names reqwest, which only bork-ci-core may name",
            "bork-ci-extra is not in the code map",
            "bork-ci-run names clap, which it may never name",
            "bork-ci-sandbox names figment, which only bork-ci may name",
        ]
    );
}

/// What in the run crate's code reads something besides its plan: the process environment or
/// a process-wide value (a `static` cell), either of which would let the loop resolve a setting
/// a second way.
fn reads_behind_the_plan(code: &[(String, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, text) in code {
        for pattern in [
            "env::var",
            "env::vars",
            "OnceLock",
            "LazyLock",
            "static mut",
            "thread_local!",
        ] {
            if text.contains(pattern) {
                wrong.push(format!("{file} reads `{pattern}`"));
            }
        }
        let statics = text
            .lines()
            .map(str::trim_start)
            .filter(|line| line.starts_with("static ") || line.starts_with("pub static "))
            .count();
        if statics > 0 {
            wrong.push(format!("{file} holds a static"));
        }
    }
    wrong
}

#[test]
fn the_run_reads_its_plan_and_nothing_behind_it() {
    let code = code_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/run/src"));
    assert!(
        code.iter().any(|(file, _)| file == "reconcile/round.rs"),
        "the run crate's files were read"
    );
    let wrong = reads_behind_the_plan(&code);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_plan_check_finds_a_read_behind_the_plan() {
    let planted = [
        (
            "a.rs".to_owned(),
            "let home = std::env::var(\"HOME\");".to_owned(),
        ),
        (
            "b.rs".to_owned(),
            "static LOGGING: std::sync::OnceLock<u8> = OnceLock::new();".to_owned(),
        ),
        (
            "c.rs".to_owned(),
            "fn name() -> &'static str { \"x\" }".to_owned(),
        ),
    ];
    assert_eq!(
        reads_behind_the_plan(&planted),
        [
            "a.rs reads `env::var`",
            "b.rs reads `OnceLock`",
            "b.rs holds a static",
        ]
    );
}

/// What breaks the one owner of a run: `reconcile` named outside the commands and `delivery`
/// (which implements its `Delivery` trait), a run started anywhere but `bork-ci run`, a round
/// started anywhere but `reconcile/mod.rs`, `delivery` looping over rounds or touching budgets.
fn run_owners_out_of_place(code: &[(String, String)]) -> Vec<String> {
    let mut wrong: Vec<String> = files_naming(code, "crate::reconcile")
        .into_iter()
        .filter(|file| !file.starts_with("commands/") && file != "delivery.rs")
        .map(|file| format!("reconcile is named from {file}"))
        .collect();
    let starters = files_naming(code, "reconcile::run(");
    if starters != BTreeSet::from(["commands/run.rs".to_owned()]) {
        wrong.push(format!("a run is started from {starters:?}"));
    }
    let rounds = files_naming(code, "round::round(");
    if rounds != BTreeSet::from(["reconcile/mod.rs".to_owned()]) {
        wrong.push(format!("a round is started from {rounds:?}"));
    }
    match code.iter().find(|(file, _)| file == "delivery.rs") {
        Some((_, delivery)) => {
            for stage in ["for _round", "MAX_ROUNDS", "budget::"] {
                if delivery.contains(stage) {
                    wrong.push(format!("delivery orders rounds or budgets again (`{stage}`)"));
                }
            }
        }
        None => wrong.push("delivery.rs was not read".to_owned()),
    }
    wrong
}

#[test]
fn one_module_owns_a_run_and_only_the_run_command_starts_it() {
    let wrong = run_owners_out_of_place(&code());
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_run_owner_check_finds_a_second_owner() {
    let fine = |extra: (&str, &str)| {
        let mut code = vec![
            (
                "commands/run.rs".to_owned(),
                "crate::reconcile::run(&resolved, &sandbox, options, &mut delivery)".to_owned(),
            ),
            (
                "reconcile/mod.rs".to_owned(),
                "round::round(resolved, sandbox, &round)".to_owned(),
            ),
            (
                "delivery.rs".to_owned(),
                "impl crate::reconcile::Delivery for Github {}".to_owned(),
            ),
        ];
        code.retain(|(file, _)| file != extra.0);
        code.push((extra.0.to_owned(), extra.1.to_owned()));
        code
    };
    assert!(run_owners_out_of_place(&fine(("prompt.rs", "fn p() {}"))).is_empty());
    assert_eq!(
        run_owners_out_of_place(&fine(("verify.rs", "crate::reconcile::run(r, s, o, d)"))),
        [
            "reconcile is named from verify.rs",
            "a run is started from {\"commands/run.rs\", \"verify.rs\"}",
        ]
    );
    assert_eq!(
        run_owners_out_of_place(&fine(("delivery.rs", "for _round in 0..3 {}"))),
        ["delivery orders rounds or budgets again (`for _round`)"]
    );
    assert_eq!(
        run_owners_out_of_place(&fine(("reconcile/round.rs", "round::round(r, s, o)"))),
        ["a round is started from {\"reconcile/mod.rs\", \"reconcile/round.rs\"}"]
    );
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

/// The rooms of `llm` and their floors, by the same rule: shared data, server-sent events,
/// retry timing and URL text ← the vendor traits and the credential sources ← one module per
/// vendor (and the scripted model) ← `endpoint`, which picks a vendor ← `wire`, the HTTP
/// exchange ← `mod.rs` (`Provider`).
const LLM_ROOMS: &[(&str, u8)] = &[
    ("data", 0),
    ("sse", 0),
    ("retry", 0),
    ("address", 0),
    ("vendor", 1),
    ("google", 1),
    ("aws_credentials", 1),
    ("openai", 2),
    ("anthropic", 2),
    ("bedrock", 2),
    ("scripted", 2),
    ("endpoint", 3),
    ("wire", 4),
    ("config", 4),
    ("mod", 5),
];

/// A module built in rooms: its name under `src/` and the floor of each room.
#[derive(Clone, Copy)]
struct Building {
    module: &'static str,
    table: &'static str,
    rooms: &'static [(&'static str, u8)],
}

const GITHUB: Building = Building {
    module: "github",
    table: "GITHUB_ROOMS",
    rooms: GITHUB_ROOMS,
};

const LLM: Building = Building {
    module: "llm",
    table: "LLM_ROOMS",
    rooms: LLM_ROOMS,
};

impl Building {
    fn floor(self, room: &str) -> Option<u8> {
        self.rooms
            .iter()
            .find(|(name, _)| *name == room)
            .map(|(_, floor)| *floor)
    }

    /// The first path segment of each item a `use` names from `rest` on (`::x`, `::{a, b::c}`);
    /// one that is not a room is an item of `mod.rs`.
    fn targets(self, rest: &str, rooms: &mut BTreeSet<String>) {
        let rest = rest.strip_prefix("::").unwrap_or("");
        let ident = |text: &str| -> String {
            text.trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let room_of = |name: String| {
            if self.floor(&name).is_some() && name != "mod" {
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

    /// The rooms of the module that the code of `file` (relative to its folder) names, through
    /// `crate::{module}::…` or `super::…` paths, comments left out.
    fn arrows(self, file: &str, code: &str) -> BTreeSet<String> {
        let code: String = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let depth = file.matches('/').count();
        // How many `super::` lead from this file to the module itself.
        let to_module = depth + 1 - usize::from(file.ends_with("mod.rs"));
        let path = format!("crate::{}", self.module);
        let mut rooms = BTreeSet::new();
        for (at, _) in code.match_indices(&path) {
            self.targets(&code[at + path.len()..], &mut rooms);
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
            if steps == to_module {
                self.targets(&format!("::{rest}"), &mut rooms);
            } else if steps < to_module {
                rooms.insert(room(file));
            }
        }
        rooms
    }

    /// Every arrow from `file` that does not point to a lower floor or its own room.
    fn wrong_arrows(self, file: &str, code: &str) -> Vec<String> {
        let module = self.module;
        let room = room(file);
        let Some(floor) = self.floor(&room) else {
            return vec![format!(
                "{module}/{file} is in no room: give `{room}` a floor in {}",
                self.table
            )];
        };
        self.arrows(file, code)
            .into_iter()
            .filter(|target| *target != room)
            .filter(|target| self.floor(target).is_none_or(|to| to >= floor))
            .map(|target| format!("{module}/{file} ({room}, floor {floor}) → {target}"))
            .collect()
    }

    /// The files under `src/{module}/` (relative to it) with their code.
    fn files(self) -> Vec<(String, String)> {
        let folder = format!("{}/", self.module);
        code()
            .into_iter()
            .filter_map(|(relative, code)| relative.strip_prefix(&folder).map(|file| (file.to_owned(), code)))
            .collect()
    }

    /// Every wrong arrow of the module's files.
    fn all_wrong_arrows(self, files: &[(String, String)]) -> Vec<String> {
        files
            .iter()
            .flat_map(|(file, code)| self.wrong_arrows(file, code))
            .collect()
    }
}

/// The room of a file under a module built in rooms (`session/pulls.rs` → `session`, `git.rs` →
/// `git`).
fn room(file: &str) -> String {
    file.split('/')
        .next()
        .unwrap_or(file)
        .trim_end_matches(".rs")
        .to_owned()
}

#[test]
fn github_rooms_point_one_way() {
    let files = GITHUB.files();
    assert!(files.len() >= 10, "the github files were read: {files:?}");
    let wrong = GITHUB.all_wrong_arrows(&files);
    assert!(
        wrong.is_empty(),
        "arrows the wrong way in github:\n{}",
        wrong.join("\n")
    );
    let session = files
        .iter()
        .find(|(file, _)| file == "session/pulls.rs")
        .map(|(file, code)| GITHUB.arrows(file, code))
        .expect("session/pulls.rs");
    assert!(
        ["client", "render", "git", "data", "session"]
            .iter()
            .all(|room| session.contains(*room)),
        "the arrows of session/pulls.rs were read: {session:?}"
    );
}

#[test]
fn llm_rooms_point_one_way() {
    let files = LLM.files();
    assert!(files.len() >= 14, "the llm files were read: {files:?}");
    let wrong = LLM.all_wrong_arrows(&files);
    assert!(
        wrong.is_empty(),
        "arrows the wrong way in llm:\n{}",
        wrong.join("\n")
    );
    let arrows_of = |name: &str| {
        files
            .iter()
            .find(|(file, _)| file == name)
            .map(|(file, code)| LLM.arrows(file, code))
            .unwrap_or_else(|| panic!("{name} is read"))
    };
    let wire = arrows_of("wire.rs");
    assert!(
        ["endpoint", "vendor", "data", "retry"]
            .iter()
            .all(|room| wire.contains(*room)),
        "the arrows of wire.rs were read: {wire:?}"
    );
    assert!(
        ["openai", "anthropic", "bedrock"]
            .iter()
            .all(|vendor| !wire.contains(*vendor)),
        "wire.rs names a vendor: {wire:?}"
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
    "cap_std",
    "rustix",
    "crate::git::",
    "crate::sandbox",
    "stdout()",
    "stderr()",
];

/// The I/O names of [`IO_NAMES`] that `code` holds, comments left out.
fn io_named(code: &str) -> Vec<&'static str> {
    let code = without_comments(code);
    IO_NAMES
        .iter()
        .copied()
        .filter(|name| code.contains(name))
        .collect()
}

/// Files (relative to `src/`) that are pure: text in, text or data out.
const PURE_FILES: &[&str] = &[
    "prompt.rs",
    "edit/parse.rs",
    "edit/path.rs",
    "edit/policy.rs",
    "pack/render.rs",
    "review/parse.rs",
    "review/prompt.rs",
    "review/version.rs",
    "findings.rs",
    "sarif.rs",
    "strict_json.rs",
    "url_text.rs",
    "llm/sse.rs",
    "llm/data.rs",
    "exit.rs",
];

#[test]
fn pure_modules_do_no_io() {
    let code = code();
    for pure in PURE_FILES {
        let (_, text) = code
            .iter()
            .find(|(file, _)| file == pure)
            .unwrap_or_else(|| panic!("{pure} is read"));
        let named = io_named(text);
        assert!(named.is_empty(), "{pure} is pure but names {named:?}");
    }
}

#[test]
fn the_purity_check_finds_io() {
    assert_eq!(
        io_named("// reads no std::fs\nfn f() { let _ = crate::safe_fs::read_regular(p, 1); }"),
        ["safe_fs"]
    );
    assert!(io_named("fn parse(text: &str) -> Plan { todo!() }").is_empty());
}

#[test]
fn githubs_pure_rooms_do_no_io() {
    let mut checked = 0;
    for (relative, code) in code() {
        let Some(file) = relative.strip_prefix("github/") else {
            continue;
        };
        if !["data", "state", "approval", "render"].contains(&room(file).as_str()) {
            continue;
        }
        checked += 1;
        let named = io_named(&code);
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
        GITHUB.arrows("git.rs", sideways),
        BTreeSet::from(["client".to_owned(), "mod".to_owned(), "render".to_owned()])
    );
    assert_eq!(GITHUB.wrong_arrows("git.rs", sideways).len(), 3);
    let upward = "use crate::github::session::Session;";
    assert_eq!(
        GITHUB.wrong_arrows("data.rs", upward),
        ["github/data.rs (data, floor 0) → session"]
    );
    let fine = "use super::Session;\nuse super::answers::Review;\nuse crate::github::data::X;\n\
                use super::super::render;\nuse crate::report::RunStatus;";
    assert_eq!(
        GITHUB.arrows("session/pulls.rs", fine),
        BTreeSet::from(["data".to_owned(), "render".to_owned(), "session".to_owned()])
    );
    assert!(GITHUB.wrong_arrows("session/pulls.rs", fine).is_empty());
    assert_eq!(
        GITHUB.arrows(
            "session/mod.rs",
            "use super::client::{self, Client};\nuse super::state::SavedState;"
        ),
        BTreeSet::from(["client".to_owned(), "state".to_owned()])
    );
    assert_eq!(GITHUB.wrong_arrows("extra.rs", "").len(), 1, "a file in no room");
}

#[test]
fn the_llm_room_check_finds_a_wrong_arrow() {
    // A vendor that reaches up into the exchange and sideways into another vendor, and names
    // the public face through `crate::llm`.
    let vendor = "use super::wire::StreamProblem;\nuse super::data::{LlmError, Usage};\n\
                  fn f() { super::anthropic::plain_content(b); let _ = crate::llm::Provider::new(s); }";
    assert_eq!(
        LLM.arrows("openai.rs", vendor),
        BTreeSet::from([
            "anthropic".to_owned(),
            "data".to_owned(),
            "mod".to_owned(),
            "wire".to_owned()
        ])
    );
    assert_eq!(
        LLM.wrong_arrows("openai.rs", vendor),
        [
            "llm/openai.rs (openai, floor 2) → anthropic",
            "llm/openai.rs (openai, floor 2) → mod",
            "llm/openai.rs (openai, floor 2) → wire",
        ]
    );
    // The vendor picker reaching up into the exchange.
    assert_eq!(
        LLM.wrong_arrows("endpoint.rs", "use super::{bedrock, wire::HttpProvider};"),
        ["llm/endpoint.rs (endpoint, floor 3) → wire"]
    );
    let fine =
        "use super::data::Usage;\nuse super::vendor::{Answers, Vendor};\nuse super::google::TokenSource;";
    assert!(LLM.wrong_arrows("anthropic.rs", fine).is_empty());
    assert_eq!(
        LLM.wrong_arrows("cache.rs", ""),
        ["llm/cache.rs is in no room: give `cache` a floor in LLM_ROOMS"]
    );
}

/// Where processes start: git only in `git.rs` (with its one hardening set); the sandbox's
/// judges in `sandbox/none.rs`; `ldd` for the runner image. Returns what breaks that rule.
fn process_starts_out_of_place(code: &[(String, String)]) -> Vec<String> {
    const STARTERS: &[&str] = &[
        "git.rs",
        "sandbox/none.rs",
        "sandbox/docker/runner_image.rs",
        "check/run.rs",
    ];
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
        "sandbox/docker/prepare.rs",
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

/// `code` without its comment lines (so a doc comment that names a call is not the call).
fn without_comments(code: &str) -> String {
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `needle` occurs in `text` at a word start (not inside a longer identifier).
fn names_call(text: &str, needle: &str) -> bool {
    text.match_indices(needle).any(|(at, _)| {
        !text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// What writes, creates or removes files and folders (std, tokio, cap-std, tempfile, `safe_fs`).
const WRITE_CALLS: &[&str] = &[
    "write_atomic(",
    "safe_fs::append(",
    "ActionsWriter::append(",
    "create_dir(",
    "create_dir_all(",
    "remove_file(",
    "remove_dir(",
    "remove_dir_all(",
    "remove_file_or_symlink(",
    "rename(",
    "set_permissions(",
    "hard_link(",
    "fs::write(",
    "File::create(",
    "fs::copy(",
    ".write(true)",
    ".append(true)",
    "create_new(true)",
    "tempfile::",
];

/// Every file (relative to `src/`) whose code writes, creates or removes files, and what. Only
/// the first two write the working tree; `github/git.rs` changes it through git as well (see
/// [`tree_changing_git_out_of_place`]). A new writer is added here, saying what it writes.
const WRITERS: &[(&str, &str)] = &[
    (
        "edit/apply.rs",
        "the working tree: the model's edits and its own `.bork-tmp-*` files",
    ),
    (
        "commands/init.rs",
        "the working tree, outside a run: the files `bork-ci init` writes",
    ),
    (
        "safe_fs.rs",
        "whole files and appends, at the paths its callers give",
    ),
    (
        "actions.rs",
        "appends to the runner's summary and outputs files, through `safe_fs`",
    ),
    (
        "outputs.rs",
        "the report, SARIF, summary and outputs files, through `safe_fs`",
    ),
    ("report/mod.rs", "the JSON report, through `safe_fs`"),
    ("commands/docs.rs", "the folder `bork-ci man --out-dir` names"),
    (
        "check/run.rs",
        "a private temporary folder for the test tool's report, removed when it ends",
    ),
    (
        "commands/gc.rs",
        "removes dead runs' build caches under the artifact root",
    ),
    ("edit_step.rs", "the edit step's state files"),
    ("reconcile/step.rs", "the edit step's temporary state folder"),
    (
        "sandbox/docker/runner_image.rs",
        "the remembered identity of an executable's runner image, under the artifact root's cache",
    ),
    (
        "github/git.rs",
        "removes the private index of a single-change commit",
    ),
    (
        "verify.rs",
        "the Verifier's logs and manifest in the artifact directory",
    ),
    (
        "sandbox/mod.rs",
        "the run's artifact and cache folders under the artifact root, each job's TMPDIR",
    ),
    (
        "sandbox/none.rs",
        "a judge job's private HOME and link to bork-ci; removes a dependency cache a judge wrote",
    ),
    (
        "sandbox/docker/mod.rs",
        "the id of each dev container image it built; the edit step's result that came on its stdout, into its state folder",
    ),
    (
        "sandbox/docker/prepare.rs",
        "a job's scratch folder: the stripped copy of `.git/config`, the empty folder and file over ignored paths; the setup's CA bundle",
    ),
    (
        "sandbox/docker/transport.rs",
        "anonymous archives, the `auto` probe's markers, the edit step's state files",
    ),
    (
        "sandbox/state_stdio.rs",
        "in the edit step's container: the state files that came on its stdin, into its state folder",
    ),
    (
        "sandbox/docker/archive.rs",
        "anonymous archives, artifacts copied back, the tree volume (in a helper container)",
    ),
    (
        "sandbox/build_cache.rs",
        "under the artifact root: the warm cache's lock file, a judge's own copy of the warm cache (through `safe_fs::copy_tree`), removed after the job",
    ),
];

/// Files that write files but are not in `writers`, and entries of `writers` that no longer do.
fn unlisted_writers(code: &[(String, String)], writers: &[(&str, &str)]) -> Vec<String> {
    let writing: BTreeSet<String> = code
        .iter()
        .filter(|(_, text)| {
            let text = without_comments(text);
            WRITE_CALLS.iter().any(|call| names_call(&text, call))
        })
        .map(|(file, _)| file.clone())
        .collect();
    let listed: BTreeSet<String> = writers.iter().map(|(file, _)| (*file).to_owned()).collect();
    let mut wrong: Vec<String> = writing
        .difference(&listed)
        .map(|file| format!("{file} writes files: add it to WRITERS, saying what it writes"))
        .collect();
    wrong.extend(
        listed
            .difference(&writing)
            .map(|file| format!("{file} no longer writes files: take it out of WRITERS")),
    );
    wrong
}

#[test]
fn filesystem_writers_are_listed() {
    let wrong = unlisted_writers(&code(), WRITERS);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_writer_check_finds_an_unlisted_writer() {
    let planted = vec![
        (
            "pack/mod.rs".to_owned(),
            "fn f(dir: &Dir) { dir.rename(\"a\", dir, \"b\").ok(); }".to_owned(),
        ),
        (
            "review/changes.rs".to_owned(),
            "/// Never calls `std::fs::write(` itself.\nfn f() {}".to_owned(),
        ),
        (
            "edit/apply.rs".to_owned(),
            "let _ = std::fs::remove_file(path);".to_owned(),
        ),
    ];
    let listed = [("edit/apply.rs", "the tree"), ("verify.rs", "artifacts")];
    assert_eq!(
        unlisted_writers(&planted, &listed),
        [
            "pack/mod.rs writes files: add it to WRITERS, saying what it writes",
            "verify.rs no longer writes files: take it out of WRITERS",
        ]
    );
}

/// Git subcommands that change the checkout (the working tree, the index or the current branch).
const TREE_CHANGING_GIT: &[&str] = &[
    "checkout",
    "switch",
    "restore",
    "reset",
    "merge",
    "rebase",
    "cherry-pick",
    "revert",
    "pull",
    "stash",
    "clean",
    "apply",
    "am",
    "mv",
    "rm",
    "add",
    "commit",
    "checkout-index",
    "read-tree",
    "update-index",
    "worktree",
];

/// Files that run git (name `crate::git::`) and name a subcommand that changes the checkout,
/// other than `github/git.rs`.
fn tree_changing_git_out_of_place(code: &[(String, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, text) in code {
        if file == "github/git.rs" || !text.contains("crate::git::") {
            continue;
        }
        let text = without_comments(text);
        for subcommand in TREE_CHANGING_GIT {
            if text.contains(&format!("\"{subcommand}\"")) {
                wrong.push(format!("{file} runs `git {subcommand}`"));
            }
        }
    }
    wrong
}

#[test]
fn only_github_git_changes_the_checkout_through_git() {
    let wrong = tree_changing_git_out_of_place(&code());
    assert!(wrong.is_empty(), "{wrong:#?}");
    let (_, github_git) = code()
        .into_iter()
        .find(|(file, _)| file == "github/git.rs")
        .expect("github/git.rs is read");
    assert!(
        ["\"checkout\"", "\"merge\"", "\"commit\""]
            .iter()
            .all(|subcommand| github_git.contains(subcommand)),
        "the subcommands of github/git.rs were read"
    );
}

#[test]
fn the_checkout_check_finds_git_changing_the_tree_elsewhere() {
    let planted = vec![
        (
            "verify.rs".to_owned(),
            "crate::git::run(repo, &[\"stash\", \"--include-untracked\"])".to_owned(),
        ),
        (
            "pack/git.rs".to_owned(),
            "crate::git::run(repo, &[\"ls-files\", \"-z\"])".to_owned(),
        ),
        (
            "github/git.rs".to_owned(),
            "crate::git::command(repo).args([\"checkout\", \"-B\"])".to_owned(),
        ),
    ];
    assert_eq!(
        tree_changing_git_out_of_place(&planted),
        ["verify.rs runs `git stash`"]
    );
}

/// Calls that wait for a std process to end.
const PROCESS_WAITS: &[&str] = &[".output()", ".wait()", ".wait_with_output()", ".status()"];

/// Where the parenthesis opening at `open` closes (string and character literals skipped).
fn closing_paren(text: &str, open: usize) -> usize {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut at = open;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if bytes.get(at + 2) == Some(&b'\'') => at += 2,
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return at;
                }
            }
            _ => {}
        }
        at += 1;
    }
    bytes.len()
}

/// Whether `at` lies inside the argument of a `blocking::run(` or `spawn_blocking(` call.
fn off_the_runtime(text: &str, at: usize) -> bool {
    ["blocking::run(", "spawn_blocking("].iter().any(|call| {
        text[..at].match_indices(call).any(|(start, _)| {
            let open = start + call.len() - 1;
            closing_paren(text, open) > at
        })
    })
}

/// The function around `at`: its name, and whether it is `async`.
fn enclosing_fn(text: &str, at: usize) -> Option<(String, bool)> {
    let start = text[..at]
        .match_indices("fn ")
        .map(|(start, _)| start)
        .filter(|start| {
            !text[..*start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .last()?;
    let name: String = text[start + 3..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let line_start = text[..start].rfind('\n').map_or(0, |newline| newline + 1);
    Some((name, text[line_start..start].contains("async ")))
}

/// Whether `text` can hold a std `Command` or `Child`: it names one, or gets one from `crate::git`.
fn holds_std_command(text: &str) -> bool {
    let group_names_one = text.match_indices("std::process::{").any(|(at, _)| {
        let group = &text[at..];
        let group = &group[..group.find('}').unwrap_or(group.len())];
        group.contains("Command") || group.contains("Child")
    });
    group_names_one
        || text.contains("std::process::Command")
        || text.contains("std::process::Child")
        || text.contains("git::command(")
}

/// Every process wait in `code` that may run on an async worker: not inside `blocking::run` or
/// `spawn_blocking`, nor in a function called (by name, anywhere, transitively) only from there.
/// Only files that can hold a std `Command` or `Child` are read (tokio's are awaited, and every
/// process starts in the files `git_starts_only_in_crate_git` allows).
fn waits_on_the_runtime(code: &[(String, String)]) -> Vec<String> {
    let code: Vec<(String, String)> = code
        .iter()
        .map(|(file, text)| (file.clone(), without_comments(text)))
        .collect();
    let mut wrong = Vec::new();
    // Functions that block, with the place that makes them so.
    let mut blocking: Vec<(String, String)> = Vec::new();
    let mut consider =
        |file: &str, text: &str, at: usize, what: &str, blocking: &mut Vec<(String, String)>| {
            if off_the_runtime(text, at) {
                return;
            }
            match enclosing_fn(text, at) {
                Some((name, false)) => {
                    if !blocking.iter().any(|(known, _)| *known == name) {
                        blocking.push((name, format!("{file}: {what}")));
                    }
                }
                Some((name, true)) => wrong.push(format!("{file}: {what} in `async fn {name}`")),
                None => wrong.push(format!("{file}: {what} outside any function")),
            }
        };
    for (file, text) in &code {
        if !holds_std_command(text) {
            continue;
        }
        for wait in PROCESS_WAITS {
            for (at, _) in text.match_indices(wait) {
                if text[at + wait.len()..].trim_start().starts_with(".await") {
                    continue;
                }
                consider(file, text, at, &format!("`{wait}`"), &mut blocking);
            }
        }
    }
    let mut next = 0;
    while next < blocking.len() {
        let (name, origin) = blocking[next].clone();
        next += 1;
        let call = format!("{name}(");
        for (file, text) in &code {
            for (at, _) in text.match_indices(&call) {
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    || text[..at].ends_with("fn ")
                {
                    continue;
                }
                consider(
                    file,
                    text,
                    at,
                    &format!("`{name}` (which waits: {origin})"),
                    &mut blocking,
                );
            }
        }
    }
    wrong
}

#[test]
fn processes_are_waited_for_off_the_runtime() {
    let code = code();
    let wrong = waits_on_the_runtime(&code);
    assert!(wrong.is_empty(), "{wrong:#?}");
    let (_, git) = code
        .iter()
        .find(|(file, _)| file == "git.rs")
        .expect("git.rs is read");
    assert!(
        git.contains(".wait()") && git.contains(".output()"),
        "git.rs's waits were read"
    );
}

#[test]
fn the_blocking_check_finds_a_wait_on_the_runtime() {
    let planted = vec![
        (
            "git.rs".to_owned(),
            "use std::process::Command;\n\
             pub fn output(mut c: Command) -> R { crate::blocking::run(|| c.output()) }\n\
             fn now(mut c: Command) -> R { c.status() }\n\
             pub fn later(c: Command) -> R { crate::blocking::run(|| now(c)) }\n\
             fn hidden(mut c: Command) -> R { let mut child = c.spawn()?; child.wait() }\n\
             pub fn exposed(c: Command) -> R { hidden(c) }"
                .to_owned(),
        ),
        (
            "sandbox/none.rs".to_owned(),
            "use std::process::Stdio;\nuse tokio::process::Command;\n\
             async fn run(mut child: Child) { timeout(t, child.wait()).await; child.wait().await; }"
                .to_owned(),
        ),
        (
            "verify.rs".to_owned(),
            "async fn steps(c: Command) { let _ = crate::git::exposed(c); }".to_owned(),
        ),
        (
            "review/changes.rs".to_owned(),
            "async fn diff(repo: &Path) { let out = std::process::Command::new(\"x\").output(); }".to_owned(),
        ),
        (
            "llm/wire.rs".to_owned(),
            "async fn send(r: Response) { let s = r.status(); }".to_owned(),
        ),
    ];
    let wrong = waits_on_the_runtime(&planted);
    assert_eq!(wrong.len(), 2, "{wrong:#?}");
    assert!(
        wrong[0].starts_with("review/changes.rs: `.output()` in `async fn diff`"),
        "{wrong:#?}"
    );
    assert!(
        wrong[1].starts_with("verify.rs: `exposed` (which waits: git.rs: `hidden`"),
        "{wrong:#?}"
    );
}

/// Names that end the process or set its status, allowed in `main.rs` alone; and the one enum
/// of exit codes, allowed in `exit.rs` alone.
fn exit_out_of_place(code: &[(String, String)]) -> Vec<String> {
    const ENDERS: &[&str] = &[
        "process::exit(",
        "process::abort(",
        "process::ExitCode",
        "libc::exit(",
        "libc::_exit(",
        "runtime::exit(",
    ];
    let mut wrong = Vec::new();
    for (file, text) in code {
        let text = without_comments(text);
        if file != "main.rs" {
            for ender in ENDERS {
                if text.contains(ender) {
                    wrong.push(format!("{file} names `{ender}`"));
                }
            }
        }
        if file != "exit.rs" && text.contains("enum ExitCode") {
            wrong.push(format!("{file} defines exit codes"));
        }
    }
    wrong
}

#[test]
fn the_process_ends_only_in_main_with_codes_from_exit() {
    let code = code();
    let wrong = exit_out_of_place(&code);
    assert!(wrong.is_empty(), "{wrong:#?}");
    let (_, main) = code
        .iter()
        .find(|(file, _)| file == "main.rs")
        .expect("main.rs is read");
    assert!(
        main.contains("commands::dispatch(") && main.contains(".code()"),
        "main.rs exits with the code `commands::dispatch` returns"
    );
}

#[test]
fn the_exit_check_finds_a_second_exit() {
    let planted = vec![
        (
            "main.rs".to_owned(),
            "fn main() -> std::process::ExitCode { todo!() }".to_owned(),
        ),
        (
            "commands/gc.rs".to_owned(),
            "// never std::process::exit(1)\nfn f() { std::process::exit(1) }".to_owned(),
        ),
        (
            "report/mod.rs".to_owned(),
            "pub enum ExitCode { Ok = 0 }".to_owned(),
        ),
        (
            "exit.rs".to_owned(),
            "pub enum ExitCode { Converged = 0 }".to_owned(),
        ),
    ];
    assert_eq!(
        exit_out_of_place(&planted),
        [
            "commands/gc.rs names `process::exit(`",
            "report/mod.rs defines exit codes"
        ]
    );
}

/// Who writes to stderr, with what passes its text through `untrusted` first. Print macros
/// appear nowhere: every `tracing` line goes through `untrusted::log_writer`.
const STDERR_WRITERS: &[(&str, &str)] = &[
    (
        "untrusted.rs",
        "the log writer: every tracing line as `untrusted::line`",
    ),
    (
        "sandbox/mod.rs",
        "an edit step's stderr, relayed as `untrusted::line`s",
    ),
    (
        "reconcile/judges.rs",
        "a judge's output, in a stop-commands block or as `untrusted::terminal_lines`",
    ),
    ("commands/pack.rs", "counts and the budget, no untrusted text"),
    (
        "commands/check.rs",
        "the test tool's output tails as `untrusted::terminal_lines`, one `untrusted::line`",
    ),
    ("commands/mod.rs", "asks only whether stderr is a terminal"),
    (
        "report/mod.rs",
        "an error's lines after its first (`log_error`), as `untrusted::terminal_lines`",
    ),
];

/// Files that write to stderr (or print) without being listed in `writers`.
fn unlisted_stderr_writers(code: &[(String, String)], writers: &[(&str, &str)]) -> Vec<String> {
    const PRINTS: &[&str] = &["eprintln!", "eprint!", "println!", "print!", "dbg!"];
    let mut wrong = Vec::new();
    for (file, text) in code {
        let text = without_comments(text);
        for print in PRINTS {
            if names_call(&text, print) {
                wrong.push(format!("{file} uses `{print}`"));
            }
        }
        if text.contains("io::stderr()") && !writers.iter().any(|(listed, _)| listed == file) {
            wrong.push(format!("{file} writes to stderr"));
        }
    }
    wrong
}

#[test]
fn terminal_lines_pass_untrusted() {
    let wrong = unlisted_stderr_writers(&code(), STDERR_WRITERS);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_terminal_check_finds_a_raw_print() {
    let planted = vec![
        ("gc.rs".to_owned(), "eprintln!(\"{name}\");".to_owned()),
        ("verify.rs".to_owned(), "let e = std::io::stderr();".to_owned()),
        (
            "untrusted.rs".to_owned(),
            "// eprintln!\nstd::io::stderr()".to_owned(),
        ),
        (
            "llm/x.rs".to_owned(),
            "fn print(x: u8) { my_print!(x) }".to_owned(),
        ),
    ];
    assert_eq!(
        unlisted_stderr_writers(&planted, STDERR_WRITERS),
        ["gc.rs uses `eprintln!`", "verify.rs writes to stderr"]
    );
}

/// Where the engine is asked to create or remove a container: once each, in
/// `sandbox/docker/mod.rs` (`create_named` behind `DockerSandbox::new_container`, and
/// `remove_container` behind `Container::remove`, its drop and the sweeps).
fn container_lifecycle_out_of_place(code: &[(String, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, text) in code {
        let text = without_comments(text);
        for call in [".create_container(", ".remove_container("] {
            let count = text.matches(call).count();
            let allowed = usize::from(file == "sandbox/docker/mod.rs");
            if count > allowed {
                wrong.push(format!("{file} calls `{call}` {count} times"));
            }
        }
    }
    wrong
}

#[test]
fn containers_live_one_life() {
    let wrong = container_lifecycle_out_of_place(&code());
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_container_check_finds_a_second_lifecycle() {
    let planted = vec![
        (
            "sandbox/docker/transport.rs".to_owned(),
            "let id = docker.create_container(None, body).await?.id;".to_owned(),
        ),
        (
            "sandbox/docker/mod.rs".to_owned(),
            "docker.create_container(o, b)\ndocker.remove_container(id, o)".to_owned(),
        ),
    ];
    assert_eq!(
        container_lifecycle_out_of_place(&planted),
        ["sandbox/docker/transport.rs calls `.create_container(` 1 times"]
    );
}

/// The guards `doc` names (backticked after "Guard:" or "Guards:" in each bullet) that `exists`
/// does not know: `file::name` is a test in `tests/it/file.rs`, a plain `snake_case` name one in
/// this file or under `src/`.
fn unknown_guards(doc: &str, exists: &dyn Fn(Option<&str>, &str) -> bool) -> Vec<String> {
    let mut unknown = Vec::new();
    for bullet in doc.split("\n- ") {
        let lower = bullet.to_lowercase();
        let Some(at) = lower.find("guard:").or_else(|| lower.find("guards:")) else {
            continue;
        };
        for (index, token) in bullet[at..].split('`').enumerate() {
            if index % 2 == 0 {
                continue;
            }
            let is_name = |text: &str| {
                !text.is_empty()
                    && text
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            };
            let found = match token.split_once("::") {
                Some((file, name)) if is_name(file) && is_name(name) => exists(Some(file), name),
                None if is_name(token) && token.contains('_') => exists(None, token),
                _ => continue,
            };
            if !found {
                unknown.push(token.to_owned());
            }
        }
    }
    unknown
}

#[test]
fn every_guard_architecture_md_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let here = std::fs::read_to_string(root.join("tests/it/architecture.rs")).expect("this file");
    let src: Vec<String> = {
        let mut files = Vec::new();
        for src in source_roots() {
            sources(&src, &mut files);
        }
        files
            .iter()
            .map(|file| std::fs::read_to_string(file).expect("read"))
            .collect()
    };
    let exists = |file: Option<&str>, name: &str| {
        let def = format!("fn {name}(");
        match file {
            Some(file) => std::fs::read_to_string(root.join(format!("tests/it/{file}.rs")))
                .is_ok_and(|text| text.contains(&def)),
            None => here.contains(&def) || src.iter().any(|text| text.contains(&def)),
        }
    };
    let unknown = unknown_guards(&doc, &exists);
    assert!(
        unknown.is_empty(),
        "ARCHITECTURE.md names guards that do not exist: {unknown:?}"
    );
    assert!(
        doc.matches("Guard").count() >= 15,
        "the guards of ARCHITECTURE.md were read"
    );
}

#[test]
fn the_guard_check_finds_an_invented_name() {
    let doc = "- **A.** Text naming `edit::apply`. Guards: `no_circles_between_modules`,\n  \
               `safety::made_up_test`, clippy.\n- **B.** `imaginary_test` outside a guard list.\n\
               - **C.** Guard: `checker`'s `invented_unit_test`.";
    let known = |file: Option<&str>, name: &str| {
        matches!(
            (file, name),
            (None, "no_circles_between_modules") | (Some("edit"), "apply")
        )
    };
    assert_eq!(
        unknown_guards(doc, &known),
        ["safety::made_up_test", "invented_unit_test"]
    );
}

/// The fields of a container's hardening (`HostConfig`): written by one constructor.
const HARDENING_FIELDS: &[&str] = &["cap_drop:", "readonly_rootfs:", "security_opt:"];

/// The files that write a hardening field of a container's host configuration.
fn hardening_writers(code: &[(String, String)]) -> Vec<String> {
    code.iter()
        .filter(|(_, text)| {
            let text = without_comments(text);
            HARDENING_FIELDS.iter().any(|field| names_call(&text, field))
        })
        .map(|(file, _)| file.clone())
        .collect()
}

/// Every container bork-ci starts (jobs, setup, the `copy` transport's helpers) is hardened by
/// `sandbox::docker::hardening::host_config` alone, so no container can miss a field of it.
#[test]
fn one_constructor_hardens_every_container() {
    assert_eq!(hardening_writers(&code()), ["sandbox/docker/hardening.rs"]);
    // Self-test: a second place that hardens a container by hand is found.
    let planted = vec![
        (
            "sandbox/docker/hardening.rs".to_owned(),
            "HostConfig { cap_drop: Some(vec![]) }".to_owned(),
        ),
        (
            "sandbox/docker/transport.rs".to_owned(),
            "let host = HostConfig {\n    readonly_rootfs: Some(true),\n};".to_owned(),
        ),
        (
            "sandbox/docker/mod.rs".to_owned(),
            "// cap_drop: in a comment only\nlet x = my_cap_drop: 1;".to_owned(),
        ),
    ];
    assert_eq!(
        hardening_writers(&planted),
        ["sandbox/docker/hardening.rs", "sandbox/docker/transport.rs"]
    );
}
