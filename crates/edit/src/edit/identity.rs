//! Which paths of the repository name the same file or folder: symlinks that resolve inside the
//! repository, and hardlinks. Protection is by identity, not by spelling: `edit::policy`
//! classifies an edit by its own path and by every path that names the same thing, and the
//! stricter class wins.
//!
//! Owns [`scan`] (one walk of the working tree that stats entries and reads symlink targets,
//! never a file's contents, and never enters `.git`) and [`resolve`] (a path with every
//! in-repository symlink followed, or `None` when it leaves the repository).

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

/// At most this many directory entries are looked at; a larger tree is an error, not a guess.
pub const MAX_ENTRIES: usize = 2_000_000;
/// Symlinks followed while resolving one path (Linux's own limit).
const MAX_HOPS: usize = 40;

/// Two repository paths that name the same file or folder.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Alias {
    /// A path as it is spelt in the tree (a symlink, or one name of a hardlinked file).
    pub path: String,
    /// What it resolves to, relative to the repository root.
    pub same_as: String,
}

/// Resolves `rel` (a `/`-separated path relative to `repo_root`) by following every symlink
/// on it that stays inside the repository. `None` when it leaves the repository, loops, or
/// is the root itself. Parts that do not exist are kept as written.
pub fn resolve(repo_root: &Path, rel: &str) -> Option<String> {
    let canonical_root = std::fs::canonicalize(repo_root).ok();
    let mut queue: VecDeque<String> = rel.split('/').map(str::to_owned).collect();
    let mut resolved: Vec<String> = Vec::new();
    let mut hops = 0;
    let mut missing = false;
    while let Some(component) = queue.pop_front() {
        match component.as_str() {
            "" | "." => continue,
            ".." => {
                resolved.pop()?;
                continue;
            }
            _ => {}
        }
        resolved.push(component);
        if missing {
            continue;
        }
        let here = repo_root.join(resolved.join("/"));
        let meta = match std::fs::symlink_metadata(&here) {
            Ok(meta) => meta,
            Err(_) => {
                missing = true;
                continue;
            }
        };
        if !meta.file_type().is_symlink() {
            continue;
        }
        hops += 1;
        if hops > MAX_HOPS {
            return None;
        }
        let target = std::fs::read_link(&here).ok()?;
        resolved.pop();
        let mut rest: Vec<String> = Vec::new();
        if target.is_absolute() {
            let inside = [Some(repo_root.to_path_buf()), canonical_root.clone()]
                .into_iter()
                .flatten()
                .find_map(|root| target.strip_prefix(&root).ok().map(Path::to_path_buf))?;
            resolved.clear();
            for part in inside.components() {
                if let Component::Normal(name) = part {
                    rest.push(name.to_str()?.to_owned());
                }
            }
        } else {
            for part in target.components() {
                match part {
                    Component::Normal(name) => rest.push(name.to_str()?.to_owned()),
                    Component::ParentDir => rest.push("..".into()),
                    _ => {}
                }
            }
        }
        for part in rest.into_iter().rev() {
            queue.push_front(part);
        }
    }
    if resolved.is_empty() {
        return None;
    }
    Some(resolved.join("/"))
}

/// Every alias in the working tree at `repo_root`: each symlink that resolves inside the
/// repository (to what it resolves to), and each name of a file with more than one link (to
/// the first name found). `.git` is neither entered nor read.
pub fn scan(repo_root: &Path) -> io::Result<Vec<Alias>> {
    let mut aliases = Vec::new();
    let mut inodes: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    let mut stack = vec![String::new()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let full = if dir.is_empty() {
            repo_root.to_path_buf()
        } else {
            repo_root.join(&dir)
        };
        let entries = match std::fs::read_dir(&full) {
            Ok(entries) => entries,
            Err(error) if dir.is_empty() => return Err(error),
            Err(_) => continue,
        };
        for entry in entries {
            let entry = entry?;
            seen += 1;
            if seen > MAX_ENTRIES {
                return Err(io::Error::other(format!(
                    "the working tree has more than {MAX_ENTRIES} entries"
                )));
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if super::path::protected_key(&name) == ".git" {
                continue;
            }
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            // DirEntry::metadata does not follow a symlink.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                if let Some(target) = resolve(repo_root, &rel)
                    && target != rel
                {
                    aliases.push(Alias {
                        path: rel,
                        same_as: target,
                    });
                }
            } else if kind.is_dir() {
                stack.push(rel);
            } else if kind.is_file() && meta.nlink() > 1 {
                inodes.entry((meta.dev(), meta.ino())).or_default().push(rel);
            }
        }
    }
    for mut names in inodes.into_values() {
        names.sort();
        let Some((first, others)) = names.split_first() else {
            continue;
        };
        for other in others {
            aliases.push(Alias {
                path: other.clone(),
                same_as: first.clone(),
            });
        }
    }
    aliases.sort();
    Ok(aliases)
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn resolves_links_inside_and_refuses_outside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("ci")).expect("mkdir");
        std::fs::write(root.join("ci/check.py"), "x").expect("write");
        symlink("check.py", root.join("ci/check")).expect("link");
        symlink("ci", root.join("tools")).expect("link");
        symlink("../outside", root.join("out")).expect("link");
        symlink(root.join("ci"), root.join("abs")).expect("link");
        symlink("loop", root.join("loop")).expect("link");
        assert_eq!(resolve(root, "ci/check").as_deref(), Some("ci/check.py"));
        assert_eq!(resolve(root, "tools/check").as_deref(), Some("ci/check.py"));
        assert_eq!(resolve(root, "./tools//check").as_deref(), Some("ci/check.py"));
        assert_eq!(resolve(root, "abs/check").as_deref(), Some("ci/check.py"));
        assert_eq!(resolve(root, "tools/new.txt").as_deref(), Some("ci/new.txt"));
        assert_eq!(resolve(root, "out/x"), None);
        assert_eq!(resolve(root, "loop"), None);
        assert_eq!(resolve(root, "../x"), None);
    }

    #[test]
    fn scan_finds_symlinks_and_hardlinks_but_not_git() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("ci")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::write(root.join("ci/check.py"), "x").expect("write");
        std::fs::hard_link(root.join("ci/check.py"), root.join("copy.py")).expect("hardlink");
        symlink("ci", root.join("tools")).expect("link");
        symlink("../ci", root.join(".git/sneaky")).expect("link");
        let aliases = scan(root).expect("scan");
        assert_eq!(
            aliases,
            vec![
                Alias {
                    path: "copy.py".into(),
                    same_as: "ci/check.py".into()
                },
                Alias {
                    path: "tools".into(),
                    same_as: "ci".into()
                },
            ]
        );
    }
}
