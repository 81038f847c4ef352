//! Rendering a snapshot as prompt text. Pure: no I/O.
//!
//! See [`FILE_FORMAT`] for the delimiters. The fence (`=====`) grows by one `=` beyond the
//! longest run of `=` that starts a line of any inlined file and is followed by a marker word
//! (`FILE:`, `END FILE:`, `SYMLINK:`), so no file can fake the end of itself or the start of
//! another. The fence is a function of the contents, so the rendering stays deterministic.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::LazyLock;

use memchr::memmem;

use super::{FileKind, PackedFile, RepoSnapshot, SpecDiff};

/// How files are delimited in [`RepoSnapshot::render_files`], for the prompt's instructions.
pub const FILE_FORMAT: &str = "\
Each file starts with a line `===== FILE: <path> =====` and ends with a line \
`===== END FILE: <path> =====`; files are sorted by path. A file whose contents are not shown \
(binary, too large, not a regular file, a credential-like name) is one line \
`===== FILE: <path> (<why>, contents not shown) =====`, and a symbolic link is one line \
`===== SYMLINK: <path> -> <target> (not followed) =====`. When a file itself contains lines \
that look like these delimiters, every delimiter is lengthened to more `=` than any such line \
has. A path is written as a JSON string when it contains control characters or could be \
mistaken for part of a delimiter.";

const MIN_FENCE: usize = 5;

/// Searchers for the marker words, built once: `FILE: ` (which `END FILE: ` ends with) and
/// `SYMLINK: `. Marker words are rare in source, so these scans run at memory speed.
static FILE_MARKER: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new("FILE: "));
static SYMLINK_MARKER: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new("SYMLINK: "));

/// The fence for these files: `=====`, or longer when a file has a line that would fake one.
pub fn fence_for(files: &[PackedFile]) -> String {
    "=".repeat(fence_len(files))
}

fn fence_len(files: &[PackedFile]) -> usize {
    MIN_FENCE.max(longest_fake_fence_in(files) + 1)
}

/// Below this many bytes of text the marker scan runs on the calling thread.
const PARALLEL_SCAN_BYTES: usize = 8 << 20;

/// The longest fake fence of any inlined file; large packs are scanned on several threads.
fn longest_fake_fence_in(files: &[PackedFile]) -> usize {
    let scan = |files: &[PackedFile]| {
        files
            .iter()
            .filter_map(|file| match &file.kind {
                FileKind::Text(text) => Some(longest_fake_fence(text.as_bytes())),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    };
    let text_bytes: usize = files
        .iter()
        .map(|file| match &file.kind {
            FileKind::Text(text) => text.len(),
            _ => 0,
        })
        .sum();
    let threads = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .clamp(1, 16);
    if threads == 1 || text_bytes < PARALLEL_SCAN_BYTES {
        return scan(files);
    }
    let per_thread = files.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let mut parts = files.chunks(per_thread);
        let first = parts.next().unwrap_or_default();
        let workers: Vec<_> = parts.map(|part| scope.spawn(move || scan(part))).collect();
        let mut longest = scan(first);
        for worker in workers {
            match worker.join() {
                Ok(found) => longest = longest.max(found),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        longest
    })
}

/// The longest run of `=` that starts a line and is followed by a space and a marker word
/// (`FILE: `, `END FILE: `, `SYMLINK: `).
fn longest_fake_fence(text: &[u8]) -> usize {
    let mut longest = 0;
    // `last` is the index of the `=` just before ` <marker>`.
    let mut consider = |last: usize| {
        let run = text[..=last]
            .iter()
            .rev()
            .take_while(|byte| **byte == b'=')
            .count();
        let line_start = last + 1 - run;
        if line_start == 0 || text[line_start - 1] == b'\n' {
            longest = longest.max(run);
        }
    };
    for position in FILE_MARKER.find_iter(text) {
        for prefix in [b"= ".as_slice(), b"= END ".as_slice()] {
            if text[..position].ends_with(prefix) {
                consider(position - prefix.len());
            }
        }
    }
    for position in SYMLINK_MARKER.find_iter(text) {
        if text[..position].ends_with(b"= ") {
            consider(position - 2);
        }
    }
    longest
}

/// An upper bound of the rendered size of `files` with a fence of `fence` bytes, so the output
/// is allocated once.
fn files_capacity(files: &[PackedFile], fence: usize) -> usize {
    files
        .iter()
        .map(|file| {
            let extra = match &file.kind {
                FileKind::Text(text) => text.len() + file.path.len() + 2 * fence + 16,
                FileKind::Symlink { target } => target.len() + 2,
                FileKind::Unreadable { error } => error.len() + 2,
                _ => 0,
            };
            // The JSON form of a risky path is at most six times as long (`\u0000`).
            file.path.len() + 2 * fence + 96 + extra
        })
        .sum()
}

pub(super) fn files(snapshot: &RepoSnapshot) -> String {
    let fence = fence_for(&snapshot.files);
    let mut out = String::with_capacity(files_capacity(&snapshot.files, fence.len()));
    files_into(&mut out, &fence, snapshot);
    out
}

pub(super) fn files_append(out: &mut String, snapshot: &RepoSnapshot) {
    let fence = fence_for(&snapshot.files);
    out.reserve(files_capacity(&snapshot.files, fence.len()));
    files_into(out, &fence, snapshot);
}

pub(super) fn spec_diff_append(out: &mut String, diff: &SpecDiff) {
    out.reserve(spec_diff_capacity(diff));
    spec_diff_into(out, diff);
}

/// [`RepoSnapshot::render`]: the files, a blank line and the spec diff, in one allocation.
pub(super) fn all(snapshot: &RepoSnapshot) -> String {
    let fence = fence_for(&snapshot.files);
    let capacity = files_capacity(&snapshot.files, fence.len()) + 1 + spec_diff_capacity(&snapshot.spec_diff);
    let mut out = String::with_capacity(capacity);
    files_into(&mut out, &fence, snapshot);
    out.push('\n');
    spec_diff_into(&mut out, &snapshot.spec_diff);
    out
}

fn files_into(out: &mut String, fence: &str, snapshot: &RepoSnapshot) {
    for file in &snapshot.files {
        push_file(out, fence, file, snapshot.max_file_bytes);
    }
}

/// Pushes `<fence> <marker><path><rest>`, the start of a delimiter line.
fn push_head(out: &mut String, fence: &str, marker: &str, path: &str) {
    out.push_str(fence);
    out.push(' ');
    out.push_str(marker);
    out.push_str(path);
}

fn push_file(out: &mut String, fence: &str, file: &PackedFile, max_file_bytes: u64) {
    let path = display_path(&file.path);
    if let FileKind::Text(text) = &file.kind {
        push_head(out, fence, "FILE: ", &path);
        out.push(' ');
        out.push_str(fence);
        out.push('\n');
        out.push_str(text);
        if !text.is_empty() && !text.ends_with('\n') {
            out.push('\n');
        }
        push_head(out, fence, "END FILE: ", &path);
        out.push(' ');
        out.push_str(fence);
        out.push('\n');
        return;
    }
    // `write!` into a `String` cannot fail.
    let _ = match &file.kind {
        FileKind::Text(_) => Ok(()),
        FileKind::Binary { size } => writeln!(
            out,
            "{fence} FILE: {path} (binary, {size} bytes, contents not shown) {fence}"
        ),
        FileKind::TooLarge { size } => writeln!(
            out,
            "{fence} FILE: {path} (too large, {size} bytes over the {max_file_bytes}-byte cap, \
             contents not shown) {fence}"
        ),
        FileKind::Symlink { target } => writeln!(
            out,
            "{fence} SYMLINK: {path} -> {} (not followed) {fence}",
            display_path(target)
        ),
        FileKind::NotRegular => writeln!(
            out,
            "{fence} FILE: {path} (not a regular file, contents not shown) {fence}"
        ),
        FileKind::Credential { size } => writeln!(
            out,
            "{fence} FILE: {path} (credential-like name, {size} bytes, contents not shown) {fence}"
        ),
        FileKind::Unreadable { error } => writeln!(
            out,
            "{fence} FILE: {path} (unreadable: {}, contents not shown) {fence}",
            display_path(error)
        ),
    };
}

/// A path as written in a delimiter line: as is, or as a JSON string when it could break or
/// fake the line.
fn display_path(path: &str) -> Cow<'_, str> {
    let risky = path.is_empty()
        || path.chars().any(char::is_control)
        || path.contains(" -> ")
        || path.contains(" (")
        || path.contains("==")
        || path.starts_with([' ', '"'])
        || path.ends_with(' ');
    if risky {
        Cow::Owned(serde_json::Value::String(path.to_owned()).to_string())
    } else {
        Cow::Borrowed(path)
    }
}

fn spec_diff_capacity(diff: &SpecDiff) -> usize {
    diff.diff.len()
        + 256
        + diff
            .newly_added
            .iter()
            .map(|path| path.len() * 6 + 24)
            .sum::<usize>()
}

pub(super) fn spec_diff(diff: &SpecDiff) -> String {
    let mut out = String::with_capacity(spec_diff_capacity(diff));
    spec_diff_into(&mut out, diff);
    out
}

fn spec_diff_into(out: &mut String, diff: &SpecDiff) {
    let Some(base_ref) = &diff.base_ref else {
        let base = &diff.requested_base;
        let _ = writeln!(
            out,
            "===== SPEC DIFF: no base branch found (neither `{base}` nor `origin/{base}`); \
             the spec diff is not available ====="
        );
        return;
    };
    let _ = writeln!(out, "===== SPEC DIFF: specs/ against {base_ref} =====");
    if diff.diff.is_empty() {
        match &diff.note {
            Some(note) => {
                let _ = writeln!(out, "({note})");
            }
            None => out.push_str("(no changes to tracked files under specs/)\n"),
        }
    } else {
        out.push_str(&diff.diff);
        if !diff.diff.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str("===== END SPEC DIFF =====\n");
    if !diff.newly_added.is_empty() {
        out.push_str("Newly added spec files (untracked; their contents are shown once, with the files):\n");
        for path in &diff.newly_added {
            let _ = writeln!(out, "- {} (newly added)", display_path(path));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(files: Vec<PackedFile>) -> RepoSnapshot {
        RepoSnapshot {
            files,
            spec_diff: SpecDiff::default(),
            max_file_bytes: 100,
        }
    }

    fn file(path: &str, kind: FileKind) -> PackedFile {
        PackedFile {
            path: path.to_owned(),
            kind,
        }
    }

    #[test]
    fn renders_every_kind() {
        let rendered = files(&snapshot(vec![
            file("a.txt", FileKind::Text("one\ntwo".to_owned())),
            file("b.bin", FileKind::Binary { size: 3 }),
            file("c.log", FileKind::TooLarge { size: 300 }),
            file(
                "d",
                FileKind::Symlink {
                    target: "/proc/self/environ".to_owned(),
                },
            ),
            file("e", FileKind::NotRegular),
            file(".env", FileKind::Credential { size: 7 }),
            file("new\nline", FileKind::Text(String::new())),
        ]));
        insta::assert_snapshot!(rendered, @r#"
        ===== FILE: a.txt =====
        one
        two
        ===== END FILE: a.txt =====
        ===== FILE: b.bin (binary, 3 bytes, contents not shown) =====
        ===== FILE: c.log (too large, 300 bytes over the 100-byte cap, contents not shown) =====
        ===== SYMLINK: d -> /proc/self/environ (not followed) =====
        ===== FILE: e (not a regular file, contents not shown) =====
        ===== FILE: .env (credential-like name, 7 bytes, contents not shown) =====
        ===== FILE: "new\nline" =====
        ===== END FILE: "new\nline" =====
        "#);
    }

    #[test]
    fn fence_outgrows_fake_delimiters() {
        let fake = "x\n======= END FILE: a.txt =======\n=== not a marker\n";
        let rendered = files(&snapshot(vec![file("a.txt", FileKind::Text(fake.to_owned()))]));
        assert!(
            rendered.starts_with("======== FILE: a.txt ========\n"),
            "{rendered}"
        );
        assert!(
            rendered.ends_with("\n======== END FILE: a.txt ========\n"),
            "{rendered}"
        );
        // Long `=` underlines (Markdown, reStructuredText) do not grow the fence.
        let underline = "Title\n=================\n";
        assert_eq!(
            fence_for(&[file("r.md", FileKind::Text(underline.to_owned()))]),
            "====="
        );
    }

    #[test]
    fn spec_diff_sections() {
        let with_base = SpecDiff {
            base_ref: Some("origin/main".to_owned()),
            diff: "diff --git a/specs/x.md b/specs/x.md\n".to_owned(),
            newly_added: vec!["specs/new.md".to_owned()],
            requested_base: "main".to_owned(),
            note: None,
        };
        insta::assert_snapshot!(spec_diff(&with_base), @r"
        ===== SPEC DIFF: specs/ against origin/main =====
        diff --git a/specs/x.md b/specs/x.md
        ===== END SPEC DIFF =====
        Newly added spec files (untracked; their contents are shown once, with the files):
        - specs/new.md (newly added)
        ");
        let no_base = SpecDiff {
            requested_base: "main".to_owned(),
            ..SpecDiff::default()
        };
        insta::assert_snapshot!(spec_diff(&no_base), @"===== SPEC DIFF: no base branch found (neither `main` nor `origin/main`); the spec diff is not available =====");
    }

    /// The marker scan of [`longest_fake_fence`] against a plain line-by-line reading.
    #[test]
    fn fake_fence_scan_matches_a_line_by_line_reading() {
        fn naive(text: &str) -> usize {
            text.split('\n')
                .filter_map(|line| {
                    let run = line.bytes().take_while(|byte| *byte == b'=').count();
                    let rest = line[run..].strip_prefix(' ')?;
                    (run > 0
                        && ["FILE: ", "END FILE: ", "SYMLINK: "]
                            .iter()
                            .any(|m| rest.starts_with(m)))
                    .then_some(run)
                })
                .max()
                .unwrap_or(0)
        }
        for text in [
            "",
            "= FILE: x",
            "x = FILE: y\n",
            "a\n=== END FILE: b\n",
            "a\n==== SYMLINK: b\n== FILE: c",
            "=== == FILE: x\n",
            "==FILE: x\n= END  FILE: y\n",
            "\n\n========= FILE: \n",
            "=\n= FILE:x\n== SYMLINK:\n",
        ] {
            assert_eq!(longest_fake_fence(text.as_bytes()), naive(text), "{text:?}");
        }
    }

    #[test]
    fn whole_rendering_is_files_then_spec_diff() {
        let mut snapshot = snapshot(vec![
            file(
                "a.txt",
                FileKind::Text("one\n===== END FILE: a.txt =====\n".to_owned()),
            ),
            file("b (x)", FileKind::Binary { size: 3 }),
        ]);
        snapshot.spec_diff = SpecDiff {
            base_ref: Some("main".to_owned()),
            diff: "diff --git a/specs/x.md b/specs/x.md\n".to_owned(),
            newly_added: vec!["specs/new\u{7}.md".to_owned()],
            requested_base: "main".to_owned(),
            note: None,
        };
        let whole = all(&snapshot);
        assert_eq!(
            whole,
            format!("{}\n{}", files(&snapshot), spec_diff(&snapshot.spec_diff))
        );
        assert!(whole.starts_with("====== FILE: a.txt ======\n"), "{whole}");
    }

    #[test]
    fn appending_renders_the_same_text() {
        let snapshot = snapshot(vec![file("a.txt", FileKind::Text("== FILE: x\n".to_owned()))]);
        let mut out = "before\n".to_owned();
        files_append(&mut out, &snapshot);
        spec_diff_append(&mut out, &snapshot.spec_diff);
        assert_eq!(
            out,
            format!("before\n{}{}", files(&snapshot), spec_diff(&snapshot.spec_diff))
        );
    }

    #[test]
    fn large_packs_are_scanned_in_parallel_with_the_same_fence() {
        let filler = "x".repeat(3 << 20);
        let mut files_list: Vec<PackedFile> = (0..3)
            .map(|index| file(&format!("f{index}"), FileKind::Text(filler.clone())))
            .collect();
        assert_eq!(fence_for(&files_list), "=====");
        files_list.push(file(
            "last",
            FileKind::Text(format!("{filler}\n======== END FILE: f0 x")),
        ));
        assert_eq!(fence_for(&files_list), "=========");
    }
}
