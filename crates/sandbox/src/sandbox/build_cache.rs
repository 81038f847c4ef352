//! Which build cache a judge job works in, and the warm cache of approved builds.
//!
//! A judge job runs code; what it writes in its build cache (`CARGO_TARGET_DIR`,
//! `XDG_CACHE_HOME`) could stand in for the code a later judge is meant to build. So:
//!
//! - The **warm cache** (`<root>/warm/<key>/cache`, keyed like the dependency cache: the
//!   repository, the setup commands, the judges' image and every file that is not code) is
//!   written only by a job that runs approved code and nothing else: the preflight, on the
//!   approved revision before any model call ([`BuildCache::Warm`]). It lives across runs, so a
//!   run's preflight starts from the builds of the runs before it.
//! - Every other judge reads it through a **layer of its own** ([`BuildCache::Layer`]): a copy
//!   made before the job (file times kept, so a build tool's staleness checks see what the warm
//!   cache holds) and removed after it. Nothing a judge writes reaches a later judge, so a clean
//!   verdict needs no confirming pass with an empty cache.
//! - `confirm-clean: false` gives the judges of a run one shared cache ([`BuildCache::Run`],
//!   `<root>/build/<run id>`): each iteration builds on the last, and a plant of one iteration
//!   may reach the next.
//!
//! Two runs of one key: the preflight takes the warm cache's lock exclusively, a layer's copy
//! takes it shared; a job that cannot have it at once starts from an empty cache of its own
//! (correct, only cold) instead of waiting.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The build cache of a judge job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BuildCache {
    /// The run's build cache, shared by the run's judges and removed at its end.
    #[default]
    Run,
    /// The warm cache itself, read and written: only for a job that runs approved code (the
    /// preflight).
    Warm,
    /// A throwaway copy of the warm cache, the job's own (an empty one while another run writes
    /// the warm cache).
    Layer,
}

/// Whether the build cache is a folder on this host, and who writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildHost {
    /// In a container as another user: a layer's files are made writable by any user (the
    /// layer is the job's own and removed after it).
    Container,
    /// A local process of this user: a layer keeps the modes.
    Process,
    /// Not on this host (a volume on the engine, the `copy` transport).
    Engine,
}

/// What a job holds of its build cache while it runs: a folder of its own, removed when the job
/// ends, and the warm cache's lock.
#[derive(Debug, Default)]
pub struct JobBuild {
    remove: Option<PathBuf>,
    _lock: Option<File>,
}

impl Drop for JobBuild {
    fn drop(&mut self) {
        if let Some(path) = &self.remove {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// The warm cache of one key: `<root>/warm/<key>`, holding `lock` and `cache/`.
#[derive(Debug, Clone)]
pub struct Warm {
    dir: PathBuf,
}

impl Warm {
    /// The warm cache of `key` under the artifact root `root`.
    pub fn new(root: &Path, key: &str) -> Warm {
        Warm {
            dir: root.join("warm").join(key),
        }
    }

    /// The folder a job sees as its build cache.
    pub fn cache(&self) -> PathBuf {
        self.dir.join("cache")
    }

    /// The lock, exclusive (writing) or shared (copying); `None` when another run holds it the
    /// other way, or it cannot be had.
    fn lock(&self, exclusive: bool) -> Option<File> {
        std::fs::create_dir_all(&self.dir).ok()?;
        let file = bork_ci_core::safe_fs::lock_file(&self.dir.join("lock")).ok()?;
        let locked = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        // Used now: what `bork-ci gc` goes by.
        bork_ci_core::safe_fs::touch_folder(&self.dir);
        locked.ok().map(|()| file)
    }

    /// The warm cache for the preflight to write, locked for it; `None` while another run reads
    /// or writes it.
    pub fn for_writing(&self) -> Option<(PathBuf, JobBuild)> {
        let lock = self.lock(true)?;
        Some((
            self.cache(),
            JobBuild {
                remove: None,
                _lock: Some(lock),
            },
        ))
    }

    /// Copies the warm cache into `layer` (a folder that does not exist yet). When another run
    /// is writing the warm cache, or the copy fails, `layer` is left an empty folder (the judge
    /// builds cold) and the reason is logged.
    pub fn layer_into(&self, layer: &Path, host: BuildHost) {
        let source = self.cache();
        let copied = match self.lock(false) {
            None => {
                tracing::info!(
                    "another run is writing the warm build cache: this judge builds in an empty cache of its own"
                );
                Ok(())
            }
            Some(_lock) if source.is_dir() => layer
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| {
                    bork_ci_core::safe_fs::copy_tree(&source, layer, host == BuildHost::Container)
                }),
            Some(_) => Ok(()),
        };
        if let Err(error) = copied {
            tracing::warn!(
                "copying the warm build cache {} failed ({error}): the judge builds in an empty cache of its own",
                source.display()
            );
            let _ = std::fs::remove_dir_all(layer);
        }
    }
}

/// The build cache of a job with `build` on `host`: the folder it sees (`None`: the run's) and
/// what it holds while it runs. `own` names a fresh folder of the job's own.
pub fn for_job(build: BuildCache, host: BuildHost, warm: &Warm, own: PathBuf) -> (Option<PathBuf>, JobBuild) {
    let owned = |path: PathBuf| {
        (
            Some(path.clone()),
            JobBuild {
                remove: Some(path),
                _lock: None,
            },
        )
    };
    match (build, host) {
        (BuildCache::Run, _) | (_, BuildHost::Engine) => (None, JobBuild::default()),
        (BuildCache::Warm, _) => match warm.for_writing() {
            Some((path, held)) => (Some(path), held),
            None => {
                tracing::info!(
                    "another run is using the warm build cache: this job builds in an empty one of its own"
                );
                owned(own)
            }
        },
        (BuildCache::Layer, _) => {
            warm.layer_into(&own, host);
            owned(own)
        }
    }
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_a_copy_with_the_times_kept_and_nothing_flows_back() {
        let root = tempfile::tempdir().expect("tempdir");
        let warm = Warm::new(root.path(), "k");
        let (cache, held) = warm.for_writing().expect("free");
        std::fs::create_dir_all(cache.join("cargo-target/debug")).expect("mkdir");
        let built = cache.join("cargo-target/debug/app");
        std::fs::write(&built, b"approved").expect("write");
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .write(true)
            .open(&built)
            .and_then(|file| file.set_modified(old))
            .expect("times");
        std::os::unix::fs::symlink("app", cache.join("cargo-target/debug/link")).expect("link");
        // While the preflight writes, no layer is copied: the judge starts empty.
        let busy = root.path().join("busy");
        let (path, busy_held) = for_job(BuildCache::Layer, BuildHost::Process, &warm, busy.clone());
        assert_eq!(path.as_deref(), Some(busy.as_path()));
        assert!(!busy.join("cargo-target").exists());
        drop(busy_held);
        assert!(!busy.exists(), "an own folder goes with the job");
        drop(held);

        let layer = root.path().join("layer");
        let (path, layer_held) = for_job(BuildCache::Layer, BuildHost::Container, &warm, layer.clone());
        assert_eq!(path.as_deref(), Some(layer.as_path()));
        let copy = layer.join("cargo-target/debug/app");
        assert_eq!(std::fs::read(&copy).expect("copied"), b"approved");
        assert_eq!(
            std::fs::metadata(&copy).expect("meta").modified().expect("mtime"),
            old
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&copy).expect("meta").permissions().mode() & 0o666,
            0o666
        );
        assert_eq!(
            std::fs::read_link(layer.join("cargo-target/debug/link")).expect("link"),
            Path::new("app")
        );
        // A plant in the layer stays there.
        std::fs::write(&copy, b"planted").expect("write");
        drop(layer_held);
        assert!(!layer.exists());
        assert_eq!(std::fs::read(&built).expect("warm"), b"approved");
        // The run's own cache is not a folder of the job's.
        let (path, _) = for_job(BuildCache::Run, BuildHost::Process, &warm, root.path().join("x"));
        assert!(path.is_none());
        let (path, _) = for_job(BuildCache::Layer, BuildHost::Engine, &warm, root.path().join("y"));
        assert!(path.is_none() && !root.path().join("y").exists());
    }
}
