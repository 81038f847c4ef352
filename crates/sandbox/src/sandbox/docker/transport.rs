//! How files reach a container: `bind` mounts host paths, `copy` moves archives through the
//! Engine API and assumes nothing about the engine's filesystem (docker-in-docker, a job in a
//! container with the host's socket, a remote `DOCKER_HOST`, Podman).
//!
//! `auto` (the default) picks `bind` only when bork-ci can show that the engine sees the same
//! paths: the endpoint is a local unix socket, and a probe container with the repository, the
//! temporary directory and the artifact root bind-mounted returns, through the archive API,
//! the very bytes bork-ci reads there (a marker file it just wrote in the two directories it
//! owns, and a file of the repository with its modification time). Otherwise `copy`.
//!
//! Over `copy`, checker and verify jobs mount the run's tree volume read-only at `/repo`: the
//! working tree (as git selects it) and the stripped git metadata, filled by the first job and
//! brought up to date with only what changed before each later one ([`TreeVolume`]); a volume
//! per run for `/artifacts`, copied back to the host after each job; a volume per repository for
//! `/cache`, kept across runs (removed by `bork-ci gc`). The edit step gets no working tree at
//! all: its state goes into a volume at `/state`, its result comes back as data.

use std::collections::HashMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, VolumeCreateRequest,
};
use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use bollard::Docker;

use super::{DockerSandbox, SandboxError, archive, docker_error, labels, no_logs};

/// `sandbox.transport`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// `bind` when a probe shows the engine sees this host's paths, else `copy`.
    #[default]
    Auto,
    /// Bind-mount host paths (the engine must share bork-ci's filesystem).
    Bind,
    /// Archives through the Engine API into volumes; no host path is assumed on the engine.
    Copy,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Bind => "bind",
            Transport::Copy => "copy",
        }
    }
}

/// Label on the cache volumes (value `1`); they carry no run label and outlive runs.
pub const CACHE_LABEL: &str = "bork-ci.cache";
/// Label naming the repository a cache volume belongs to (its path on the runner's host).
pub const REPO_LABEL: &str = "bork-ci.repo";
/// Largest archive of artifacts copied back after one job.
pub const ARTIFACT_LIMITS: archive::Limits = archive::Limits {
    bytes: 2 << 30,
    entries: 200_000,
};

/// A short stable digest of `text` for volume names.
pub fn digest16(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))[..16].to_owned()
}

/// The cache volume of the repository at `repo` (its canonical path on this host).
pub fn cache_volume(repo: &Path) -> String {
    format!("bork-ci-cache-{}", digest16(&repo.display().to_string()))
}

/// The dependency cache volume of a key (`SharedDirs::deps_key`, see `sandbox::deps`).
pub fn deps_volume(deps_key: &str) -> String {
    format!("bork-ci-deps-{deps_key}")
}

/// The build cache volume of a run.
pub fn build_volume(run_id: &str) -> String {
    format!("bork-ci-build-{}", digest16(run_id))
}

/// The artifacts volume of a run directory.
pub fn artifacts_volume(run_dir: &Path) -> String {
    format!("bork-ci-artifacts-{}", digest16(&run_dir.display().to_string()))
}

/// The id bork-ci gave `volume` when it created it ([`labels::VOLUME_ID`]).
pub(super) fn volume_id(volume: &bollard::models::Volume) -> Option<String> {
    volume
        .labels
        .get(labels::VOLUME_ID)
        .filter(|id| !id.is_empty())
        .cloned()
}

/// A volume mount; `no_copy` so that nothing of the image is copied into a fresh volume.
pub fn volume(name: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        source: Some(name.to_owned()),
        target: Some(target.to_owned()),
        typ: Some(MountType::VOLUME),
        read_only: Some(read_only),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `repo`'s tree as a tree volume gets it ([`tree_paths`], [`archive::manifest`]), hashed
/// ([`archive::content_manifest`]); `None` when git cannot list it.
fn hash_tree(repo: &Path) -> Option<archive::Hashed> {
    let paths = tree_paths(repo).ok()?;
    let manifest = archive::manifest(repo, &paths);
    let content = archive::content_manifest(repo, &manifest, &super::strip_git_credentials);
    Some(archive::Hashed { manifest, content })
}

/// The paths git selects in `repo`: tracked, and untracked but not ignored (what a run packs).
/// Not a git work tree: every file below `repo`, `.git` aside.
pub fn tree_paths(repo: &Path) -> std::io::Result<Vec<String>> {
    let output = bork_ci_core::git::run(
        repo,
        &["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
    );
    let mut paths: Vec<String> = match output {
        Ok(stdout) => stdout
            .split(|b| *b == 0)
            .filter(|raw| !raw.is_empty())
            .filter_map(|raw| std::str::from_utf8(raw).ok().map(str::to_owned))
            .collect(),
        _ => ignore::WalkBuilder::new(repo)
            .hidden(false)
            .ignore(false)
            .git_ignore(false)
            .git_exclude(false)
            .git_global(false)
            .parents(false)
            .build()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_some_and(|t| !t.is_dir()))
            .filter_map(|entry| {
                entry
                    .path()
                    .strip_prefix(repo)
                    .ok()
                    .and_then(Path::to_str)
                    .map(str::to_owned)
            })
            .filter(|path| path != ".git" && !path.starts_with(".git/"))
            .collect(),
    };
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// What git ignores in `repo` and finds there (`git status --ignored=matching
/// --untracked-files=all`): a folder a pattern names (`build/`, `node_modules`) is one entry,
/// without its trailing slash; an ignored file elsewhere, even inside an untracked folder, is
/// its own. The complement of [`tree_paths`] below `repo`. Empty outside a git repository, or
/// when git fails.
pub fn ignored_paths(repo: &Path) -> Vec<String> {
    let Ok(stdout) = bork_ci_core::git::run(
        repo,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain=v1",
            "-z",
            "--ignored=matching",
            "--untracked-files=all",
        ],
    ) else {
        return Vec::new();
    };
    let mut ignored = Vec::new();
    let mut records = stdout.split(|b| *b == 0);
    while let Some(record) = records.next() {
        let (Some(status), Some(path)) = (record.get(..2), record.get(3..)) else {
            continue;
        };
        if status.contains(&b'R') || status.contains(&b'C') {
            // A rename or copy: its source follows as a record of its own.
            records.next();
            continue;
        }
        if status != b"!!" {
            continue;
        }
        let Ok(path) = std::str::from_utf8(path) else {
            continue;
        };
        let path = path.trim_end_matches('/');
        if !path.is_empty() && path != ".git" && !path.starts_with(".git/") && !path.starts_with("../") {
            ignored.push(path.to_owned());
        }
    }
    ignored
}

/// The working tree's volume over `copy`: one per sandbox (run), filled by the first job and
/// brought up to date before each later one with only what changed; jobs mount it read-only,
/// so what is in it is exactly what bork-ci put there. Where it can, a run takes the volume the
/// previous run of the same repository left (`Kept`) and sends only what differs from it.
#[derive(Debug)]
pub struct TreeVolume {
    pub name: String,
    repo: std::path::PathBuf,
    manifest: archive::Manifest,
    /// The volume's id ([`labels::VOLUME_ID`]): a volume under `name` without it is not this one
    /// (an engine makes an empty one for a container that names a volume it does not have).
    id: String,
    /// A container created once and never started, with the volume mounted writable: files an
    /// edit wrote reach the volume through it by the archive API, without a container start.
    holder: Option<String>,
    /// Set when the volume is kept across runs.
    kept: Option<Kept>,
}

/// A tree volume kept across runs of a repository, claimed by one run at a time.
///
/// Per repository (its path's digest, `KEY`) the engine keeps a state volume
/// `bork-ci-kept-KEY-state` holding [`KEPT_STATE_FILE`]: the tree volume's name and id and what
/// it holds, by content ([`archive::ContentManifest`]). A run claims both by creating the
/// container `bork-ci-kept-KEY` (the engine refuses a second one of that name: a run that finds
/// it takes a volume of its own, as before), reads the state, and blanks it before anything
/// changes the volume. Its tree is then compared with the volume by content (a new checkout's
/// files all have new times) and only what differs is sent. At its end the run writes the state
/// again, describing exactly what it put there. A run killed in between leaves a blank state, so
/// the next one starts a new volume; a volume removed or replaced since (`bork-ci gc`) no longer
/// has the id the state names, likewise. The claim is a container of the run's, so it goes
/// with the run, or after a killed run's lease.
#[derive(Debug)]
struct Kept {
    /// The container whose name is the claim, with the state volume at [`KEPT_STATE_MOUNT`].
    lock: String,
    /// What the tree volume holds.
    content: archive::ContentManifest,
    /// The run's tree hashed while the claim talked to the engine (see [`hash_tree`]): the first
    /// update takes each path's content from it unless the path changed since.
    hashed: Option<archive::Hashed>,
    /// Whether this run has brought the volume up to date with its tree yet.
    synced: bool,
}

/// Where the state volume of a kept tree is mounted in its claim container.
const KEPT_STATE_MOUNT: &str = "/bork-ci-state";
/// The kept tree's state file: JSON of [`KeptState`], or empty while a run holds the tree.
const KEPT_STATE_FILE: &str = "tree.json";

/// What a run leaves in [`KEPT_STATE_FILE`].
#[derive(Debug, Serialize, Deserialize)]
struct KeptState {
    volume: String,
    id: String,
    content: archive::ContentManifest,
}

/// The state of a kept tree of `key` read back, if it is one (hostile input: a volume of another
/// name or a path that is not plain makes it no state).
fn parse_kept_state(bytes: &[u8], key: &str) -> Option<KeptState> {
    let state: KeptState = serde_json::from_slice(bytes).ok()?;
    let generation = state.volume.strip_prefix(&format!("bork-ci-kept-{key}-"))?;
    let plain = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric());
    (plain(generation)
        && generation != "state"
        && !state.id.is_empty()
        && state.content.keys().all(|path| archive::plain_relative(path)))
    .then_some(state)
}

impl TreeVolume {
    /// This tree after an update that removed `removed` and `sent` what it sent: for a kept
    /// tree, what the volume now holds.
    fn updated(mut self, removed: &[String], sent: Sent) -> Self {
        if let Some(kept) = &mut self.kept {
            archive::updated_content(&mut kept.content, removed, sent);
            kept.synced = true;
        }
        self
    }
}

/// Most files an update sends through the tree's holder (the engine extracts each, about half a
/// millisecond a file here); more go through the helper, whose start costs more than that.
const HOLDER_MAX_FILES: usize = 512;

/// Writes an archive of `paths` of `manifest` (all when `None`) into an anonymous file.
/// With `record`, what each path was sent as is noted there.
fn tree_archive(
    repo: &Path,
    manifest: &archive::Manifest,
    paths: Option<&[String]>,
    first: &[(&str, &[u8])],
    record: Option<&mut Vec<(String, archive::Content)>>,
) -> std::io::Result<std::fs::File> {
    let file = tempfile::tempfile()?;
    let file = archive::write_tree(
        file,
        first,
        repo,
        manifest,
        paths,
        &super::strip_git_credentials,
        record,
    )?;
    archive::rewind(file)
}

/// What an update sent, by content, when the tree is kept (else nothing).
type Sent = Vec<(String, archive::Content)>;

/// Says so when what came back from a job stopped at [`ARTIFACT_LIMITS`].
fn warn_if_cut(what: &str, extracted: &archive::Extracted) {
    if extracted.truncated {
        tracing::warn!(
            "{what}: more than {} bytes or {} entries; the rest stayed in the container",
            ARTIFACT_LIMITS.bytes,
            ARTIFACT_LIMITS.entries
        );
    }
}

/// [`tree_archive`] on a blocking thread; with `record`, what it sent.
async fn tree_archive_off_thread(
    repo: &Path,
    manifest: &archive::Manifest,
    paths: Option<Vec<String>>,
    replaced: &[String],
    record: bool,
) -> Result<(std::fs::File, Sent), SandboxError> {
    let (repo, manifest, replaced) = (repo.to_owned(), manifest.clone(), replaced.to_vec());
    tokio::task::spawn_blocking(move || {
        let mut sent = Vec::new();
        // An empty file where each replaced folder is: the engine removes the folder for it.
        let first: Vec<(&str, &[u8])> = replaced
            .iter()
            .map(|folder| (folder.as_str(), &b""[..]))
            .collect();
        let file = tree_archive(
            &repo,
            &manifest,
            paths.as_deref(),
            &first,
            record.then_some(&mut sent),
        )?;
        Ok((file, sent))
    })
    .await
    .map_err(|e| SandboxError::Backend(e.to_string()))?
    .map_err(|source| SandboxError::Prepare {
        what: "the tree archive".into(),
        source,
    })
}

fn file_stream(
    file: std::fs::File,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static {
    let file = tokio::fs::File::from_std(file);
    futures_util::stream::try_unfold(file, |mut file| async move {
        let mut buffer = vec![0u8; 1 << 20];
        let read = tokio::io::AsyncReadExt::read(&mut file, &mut buffer).await?;
        if read == 0 {
            return Ok(None);
        }
        buffer.truncate(read);
        Ok(Some((bytes::Bytes::from(buffer), file)))
    })
}

fn upload_error(path: &str) -> impl Fn(bollard::errors::Error) -> SandboxError + '_ {
    move |error| SandboxError::Docker {
        operation: "copy into a container",
        reason: format!("{path}: {error}"),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl DockerSandbox {
    /// The transport for jobs on `repo`: the setting, or for `auto` the probe's answer (asked
    /// once per sandbox, with `image`, which must be present). A `bind` answer is remembered for
    /// this engine, repository, temporary folder and artifact root ([`DockerSandbox::remembered_transport_file`]); a
    /// later run takes it without a probe, and its first job proves it before it starts
    /// (`prove_remembered_bind`), or the run goes over `copy`.
    pub async fn transport(&self, repo: &Path, image: &str) -> Transport {
        if let Some(chosen) = self.chosen_transport() {
            return chosen;
        }
        let _probing = self.probing.lock().await;
        if let Some(chosen) = self.chosen_transport() {
            return chosen;
        }
        // Only a local socket's answer is ever `bind`, so only one is remembered.
        let remembered = self
            .endpoint
            .starts_with("unix://")
            .then(|| self.remembered_transport_file(repo))
            .flatten();
        if remembered.as_deref().is_some_and(recalls_bind) {
            tracing::info!(
                "sandbox transport: bind (remembered for this engine; the first job checks it before it starts)"
            );
            self.set_transport(Transport::Bind, false);
            return Transport::Bind;
        }
        self.probed.store(true, std::sync::atomic::Ordering::Relaxed);
        let chosen = match self.probe_bind(repo, image).await {
            Ok(()) => {
                tracing::info!("sandbox transport: bind (the engine sees this host's paths)");
                if let Some(file) = &remembered {
                    remember_bind(file);
                }
                Transport::Bind
            }
            Err(reason) => {
                tracing::info!("sandbox transport: copy ({reason})");
                Transport::Copy
            }
        };
        self.set_transport(chosen, true);
        chosen
    }

    /// Proves a remembered `bind` that no job has proven yet with a probe container of `image`
    /// (created, never started), or forgets it and goes over `copy`. For a job that is made for
    /// its transport before its container is (the edit step's state and whether it applies the
    /// edits itself): such a job cannot be made again over `copy` once it is under way.
    pub(super) async fn prove_bind_now(&self, repo: &Path, image: &str) {
        if !self.bind_unproven() {
            return;
        }
        let _probing = self.probing.lock().await;
        if !self.bind_unproven() {
            return;
        }
        self.probed.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.probe_bind(repo, image).await {
            Ok(()) => self.set_transport(Transport::Bind, true),
            Err(reason) => self.bind_disproven(repo, &reason),
        }
    }

    fn set_transport(&self, transport: Transport, proven: bool) {
        if let Ok(mut state) = self.resolved_transport.lock() {
            *state = Some((transport, proven));
        }
    }

    /// The transport already chosen, if any (`None` for `auto` before the first job).
    pub fn chosen_transport(&self) -> Option<Transport> {
        match self.settings.transport {
            Transport::Auto => self
                .resolved_transport
                .lock()
                .ok()
                .and_then(|state| state.map(|(transport, _)| transport)),
            other => Some(other),
        }
    }

    /// Whether `auto` ran its probe container in this run (not when a remembered answer served).
    pub fn transport_probed(&self) -> bool {
        self.probed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the transport is a remembered `bind` no job has proven yet.
    pub(super) fn bind_unproven(&self) -> bool {
        self.settings.transport == Transport::Auto
            && self
                .resolved_transport
                .lock()
                .is_ok_and(|state| *state == Some((Transport::Bind, false)))
    }

    /// The file that remembers `auto`'s `bind` for `repo`: one per engine endpoint and version,
    /// repository, temporary folder and artifact root, under `<artifact root>/cache/transport/`.
    /// `None` when one of them cannot be named.
    pub fn remembered_transport_file(&self, repo: &Path) -> Option<std::path::PathBuf> {
        let repo = std::fs::canonicalize(repo).ok()?;
        let tmp = std::fs::canonicalize(std::env::temp_dir()).ok()?;
        let key = format!(
            "{}\0{}\0{}\0{}\0{}",
            self.endpoint,
            self.engine_version,
            repo.display(),
            tmp.display(),
            self.settings.artifact_dir.display()
        );
        Some(
            self.settings
                .artifact_dir
                .join("cache/transport")
                .join(format!("{}.bind", digest16(&key))),
        )
    }

    /// Before the first job of a remembered `bind` starts: its container (created, not started)
    /// must show, through the archive API, a marker bork-ci writes now into a folder of its own
    /// the job mounts (`proof`: the host folder and where the job sees it) and a file of the
    /// repository with its modification time (`.git/HEAD` first where the job sees `.git`).
    /// What it does not show ends the remembering.
    pub(super) async fn prove_remembered_bind(
        &self,
        id: &str,
        repo: &Path,
        proof: Option<&(std::path::PathBuf, String)>,
        git_visible: bool,
    ) -> Result<(), String> {
        let result = async {
            if let Some((host, seen_at)) = proof {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let name = format!(".bork-ci-probe-{token}");
                let marker = host.join(&name);
                bork_ci_core::safe_fs::write_atomic(&marker, token.as_bytes())
                    .map_err(|e| format!("writing a probe file: {e}"))?;
                let seen = self.read_back(id, format!("{seen_at}/{name}")).await;
                let _ = std::fs::remove_file(&marker);
                if seen?.0 != token.as_bytes() {
                    return Err("the engine sees another folder at this host's path".to_owned());
                }
            }
            let repo = std::fs::canonicalize(repo).map_err(|e| e.to_string())?;
            self.shows_sample(id, super::REPO_MOUNT, repo_sample(&repo, git_visible))
                .await
        }
        .await;
        match &result {
            Ok(()) => self.set_transport(Transport::Bind, true),
            Err(reason) => self.bind_disproven(repo, reason),
        }
        result
    }

    /// A remembered `bind` that did not hold: forgotten, and the run goes over `copy`.
    pub(super) fn bind_disproven(&self, repo: &Path, reason: &str) {
        tracing::warn!("sandbox transport: copy (the remembered bind no longer holds: {reason})");
        if let Some(file) = self.remembered_transport_file(repo) {
            let _ = std::fs::remove_file(file);
        }
        self.set_transport(Transport::Copy, true);
    }

    /// Whether container `id` shows, at `mount`, the repository file `sample` ([`repo_sample`])
    /// with its bytes and modification time; the reason when it does not.
    async fn shows_sample(
        &self,
        id: &str,
        mount: &str,
        sample: Option<(String, Vec<u8>, (i64, i64))>,
    ) -> Result<(), String> {
        let Some((relative, bytes, mtime)) = sample else {
            return Ok(());
        };
        let (seen, seen_mtime) = self.read_back(id, format!("{mount}/{relative}")).await?;
        if seen != bytes || !same_mtime(seen_mtime, mtime) {
            return Err("the engine sees another repository at this path".to_owned());
        }
        Ok(())
    }

    /// The first file of a download of `path` from container `id`: its bytes and modification
    /// time, or why it could not be read.
    pub(super) async fn read_back(&self, id: &str, path: String) -> Result<(Vec<u8>, u64), String> {
        let file = self
            .download(id, &path, 64 << 20)
            .await
            .map_err(|e| format!("{path} is not visible to the engine: {e}"))?;
        tokio::task::spawn_blocking(move || read_first(file))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("reading {path} back: {e}"))
    }

    /// Shows that a bind mount of `repo`, of a directory under `$TMPDIR` and of the artifact
    /// root gives a container the bytes bork-ci sees there; the reason when it does not.
    async fn probe_bind(&self, repo: &Path, image: &str) -> Result<(), String> {
        if !self.endpoint.starts_with("unix://") {
            return Err(format!("the engine at {} is not a local socket", self.endpoint));
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let scratch = tempfile::Builder::new()
            .prefix("bork-ci-probe-")
            .tempdir()
            .map_err(|e| format!("creating a probe directory: {e}"))?;
        let scratch_dir = scratch.path().to_owned();
        bork_ci_core::safe_fs::write_atomic(&scratch_dir.join("probe"), token.as_bytes())
            .map_err(|e| format!("writing a probe file: {e}"))?;
        let artifacts = self.settings.artifact_dir.clone();
        std::fs::create_dir_all(&artifacts).map_err(|e| format!("creating {}: {e}", artifacts.display()))?;
        let artifacts = std::fs::canonicalize(&artifacts).map_err(|e| e.to_string())?;
        let marker_name = format!(".bork-ci-probe-{token}");
        let marker = artifacts.join(&marker_name);
        bork_ci_core::safe_fs::write_atomic(&marker, token.as_bytes())
            .map_err(|e| format!("writing a probe file: {e}"))?;
        let result = self
            .probe_container(repo, &scratch_dir, &artifacts, &marker_name, &token, image)
            .await;
        let _ = std::fs::remove_file(&marker);
        result
    }

    async fn probe_container(
        &self,
        repo: &Path,
        scratch: &Path,
        artifacts: &Path,
        marker_name: &str,
        token: &str,
        image: &str,
    ) -> Result<(), String> {
        let repo = std::fs::canonicalize(repo).map_err(|e| e.to_string())?;
        let sample = repo_sample(&repo, true);
        let path = |p: &Path| {
            p.to_str()
                .map(str::to_owned)
                .ok_or("a path is not UTF-8".to_owned())
        };
        let mounts = vec![
            super::bind(&path(&repo)?, "/probe/repo", true),
            super::bind(&path(scratch)?, "/probe/tmp", true),
            super::bind(&path(artifacts)?, "/probe/artifacts", true),
        ];
        let probe = self
            .create_idle(image, mounts, "probe")
            .await
            .map_err(|e| format!("a container with this host's paths mounted could not be created: {e}"))?;
        let id = probe.id.clone();
        let check = async {
            let read = |path: String| self.read_back(&id, path);
            if read("/probe/tmp/probe".to_owned()).await?.0 != token.as_bytes() {
                return Err("the engine sees another temporary directory".to_owned());
            }
            if read(format!("/probe/artifacts/{marker_name}")).await?.0 != token.as_bytes() {
                return Err("the engine sees another artifact directory".to_owned());
            }
            self.shows_sample(&id, "/probe/repo", sample).await
        }
        .await;
        probe.remove().await;
        check
    }

    /// Opens the dependency cache volume `name` to the setup job's user: a volume's root
    /// belongs to root and no archive can change that, so a short container of the judge's
    /// `image`, as root with no capabilities and no network, makes it sticky and writable by
    /// all (`chmod 1777`), as the host folder is over `bind`. Without `chmod` in the image the
    /// setup commands can still write into the tool folders (`cargo-home`, `pip`, ...).
    pub(super) async fn open_deps_volume(&self, name: &str, image: &str) {
        let mut container_labels = self.labels(super::JobKind::Setup);
        container_labels.insert(labels::STEP.to_owned(), "open-deps".to_owned());
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(vec![
                "chmod".to_owned(),
                "1777".to_owned(),
                super::DEPS_MOUNT.to_owned(),
            ]),
            entrypoint: Some(Vec::new()),
            user: Some("0:0".to_owned()),
            labels: Some(container_labels),
            network_disabled: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            host_config: Some(super::hardening::host_config(
                &self.settings,
                vec![volume(name, super::DEPS_MOUNT, false)],
                "none",
            )),
            ..Default::default()
        };
        let ran = match self.new_container("open-deps", body).await {
            Ok(container) => {
                let job = super::Job::new(
                    super::JobKind::Setup,
                    Vec::new(),
                    std::time::Duration::from_secs(60),
                    16 << 10,
                );
                let ran = self.run_in(&container.id, &job, std::time::Instant::now()).await;
                container.remove().await;
                ran.map(|output| output.outcome)
            }
            Err(error) => Err(docker_error("create")(error)),
        };
        match ran {
            Ok(super::Outcome::Exited(0)) => {}
            other => tracing::warn!(
                "could not open the dependency cache volume to the setup commands' user ({other:?}): they can write only into its tool folders"
            ),
        }
    }

    /// Creates (never starts) a labelled container of `image` with `mounts`, for archive
    /// operations, or as an anchor the run keeps ([`super::Container::keep`]).
    pub(super) async fn create_idle(
        &self,
        image: &str,
        mounts: Vec<Mount>,
        step: &str,
    ) -> Result<super::Container, SandboxError> {
        let body = self.idle_body(image, mounts, step);
        self.new_container(step, body)
            .await
            .map_err(docker_error("create"))
    }

    /// What [`DockerSandbox::create_idle`] creates.
    pub(super) fn idle_body(&self, image: &str, mounts: Vec<Mount>, step: &str) -> ContainerCreateBody {
        let mut container_labels = self.labels(super::JobKind::Checker);
        container_labels.insert(labels::STEP.to_owned(), step.to_owned());
        ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(vec!["/bork-ci-never-started".to_owned()]),
            entrypoint: Some(Vec::new()),
            labels: Some(container_labels),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                mounts: Some(mounts),
                network_mode: Some("none".to_owned()),
                log_config: no_logs(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Creates a volume with this run's labels (or, for a cache, the cache labels).
    pub(super) async fn create_volume(
        &self,
        name: &str,
        volume_labels: HashMap<String, String>,
    ) -> Result<(), SandboxError> {
        self.create_or_find_volume(name, volume_labels).await.map(drop)
    }

    /// [`DockerSandbox::create_volume`] with a new id ([`labels::VOLUME_ID`]; the one in
    /// `volume_labels`, if any); returns the id
    /// of the volume now under `name` (the one there already, if any; empty when it has none):
    /// what tells one volume from another made later under its name.
    pub(super) async fn create_or_find_volume(
        &self,
        name: &str,
        mut volume_labels: HashMap<String, String>,
    ) -> Result<String, SandboxError> {
        volume_labels
            .entry(labels::VOLUME_ID.to_owned())
            .or_insert_with(|| uuid::Uuid::new_v4().simple().to_string());
        let request = VolumeCreateRequest {
            name: Some(name.to_owned()),
            labels: Some(volume_labels),
            ..Default::default()
        };
        let volume = self
            .docker
            .create_volume(request)
            .await
            .map_err(docker_error("create volume"))?;
        Ok(volume_id(&volume).unwrap_or_default())
    }

    /// Whether the skeleton of the run-wide volume `name`, of id `id`, is in it.
    pub(super) fn skeleton_in(&self, name: &str, id: &str) -> bool {
        !id.is_empty()
            && self
                .skeletons
                .lock()
                .is_ok_and(|sent| sent.contains(&(name.to_owned(), id.to_owned())))
    }

    /// Labels of a volume that lives as long as this run.
    pub(super) fn run_volume_labels(&self, what: &str) -> HashMap<String, String> {
        let mut volume_labels = self.labels(super::JobKind::Checker);
        volume_labels.insert(labels::STEP.to_owned(), what.to_owned());
        volume_labels
    }

    /// Labels of the cache volume of `repo`: no run and no lease, so only `bork-ci gc` removes
    /// it, once no container references it (a live run's anchor does) and it is old enough.
    pub(super) fn cache_volume_labels(&self, repo: &Path) -> HashMap<String, String> {
        let mut volume_labels = self.kept_volume_labels();
        volume_labels.insert(REPO_LABEL.to_owned(), repo.display().to_string());
        volume_labels
    }

    /// Labels of a volume kept across runs and repositories: no run and no lease, so only
    /// `bork-ci gc` removes it (see [`super::gc_caches`]), once no container references it.
    pub(super) fn kept_volume_labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (labels::MARK.to_owned(), "1".to_owned()),
            (CACHE_LABEL.to_owned(), "1".to_owned()),
            (labels::CREATED.to_owned(), now().to_string()),
            (labels::HOST.to_owned(), self.host_label.clone()),
        ])
    }

    /// The run's tree volume of `repo`: the one filled before, or when the run has none yet the
    /// volume kept from the previous run of `repo` ([`Kept`]) or a new, empty one, made now
    /// (labelled with its id) and brought up to date by the next [`Self::sync_tree`] while the
    /// job's container is made beside it. `None` while the sandbox holds the tree of another
    /// repository (the next [`Self::sync_tree`] replaces it).
    pub(super) async fn tree_volume_of(
        &self,
        repo: &Path,
        image: &str,
    ) -> Result<Option<String>, SandboxError> {
        let mut state = self.tree.lock().await;
        match state.as_ref() {
            Some(tree) if tree.repo == repo => return Ok(Some(tree.name.clone())),
            Some(_) => return Ok(None),
            None => {}
        }
        let kept = if self.settings.keep_tree && self.worth_keeping(repo).await {
            // Boxed: its many engine calls would otherwise make every job's preparation future
            // (and a debug build's stack) that much larger. The runner image, which unpacks the
            // tree, is made ready meanwhile (its failure is told by the update that needs it).
            let (kept, _) = tokio::join!(
                Box::pin(self.claim_kept(repo, image)),
                Box::pin(self.ready_image(super::JobKind::EditStep))
            );
            kept
        } else {
            None
        };
        let tree = match kept {
            Some(tree) => tree,
            None => self.new_tree_volume(repo).await?,
        };
        let name = tree.name.clone();
        *state = Some(tree);
        Ok(Some(name))
    }

    /// Whether this sandbox's tree volume has been brought up to date once (it then knows the
    /// files it holds; a new or just claimed one knows none).
    pub(super) async fn tree_filled(&self) -> bool {
        self.tree
            .lock()
            .await
            .as_ref()
            .is_some_and(|tree| !tree.manifest.is_empty())
    }

    /// Whether `repo`'s tree is worth a kept volume: more files than a first fill sends through
    /// the tree's holder in one upload (the claim's engine calls cost about that much).
    async fn worth_keeping(&self, repo: &Path) -> bool {
        let repo = repo.to_owned();
        tokio::task::spawn_blocking(move || {
            tree_paths(&repo).is_ok_and(|paths| paths.len() > HOLDER_MAX_FILES)
        })
        .await
        .unwrap_or(false)
    }

    /// A new, empty tree volume of `repo`, labelled with a fresh id.
    async fn new_tree_volume(&self, repo: &Path) -> Result<TreeVolume, SandboxError> {
        let name = super::spare::fresh_name("bork-ci-repo");
        let id = self
            .create_or_find_volume(&name, self.run_volume_labels("repo"))
            .await?;
        Ok(TreeVolume {
            name,
            repo: repo.to_owned(),
            manifest: archive::Manifest::new(),
            id,
            holder: None,
            kept: None,
        })
    }

    /// Claims the tree volume kept for `repo` ([`Kept`]): the one the previous run left, when
    /// the state names it and it is still that volume, else a new one. `None` when another run
    /// holds it or the engine refuses a step: the run then uses a volume of its own.
    async fn claim_kept(&self, repo: &Path, image: &str) -> Option<TreeVolume> {
        let key = digest16(&repo.display().to_string());
        let state_volume = format!("bork-ci-kept-{key}-state");
        // The first run of the repository on this engine keeps nothing: an engine that lives for
        // one job (docker-in-docker) would pay for the claim and never use what it kept. The
        // state volume it leaves (empty) tells the next run that the engine outlives its runs.
        let fresh_id = uuid::Uuid::new_v4().simple().to_string();
        let mut state_labels = self.kept_labels(repo, "kept-state");
        state_labels.insert(labels::VOLUME_ID.to_owned(), fresh_id.clone());
        match self.create_or_find_volume(&state_volume, state_labels).await {
            Ok(id) if id == fresh_id => {
                tracing::debug!(
                    "the first run of this repository on this engine: its tree is not kept (the next run's is)"
                );
                return None;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!("no kept tree: {error}");
                return None;
            }
        }
        // The tree is hashed while the claim talks to the engine: a kept volume is compared
        // with it by content.
        let hashing = {
            let repo = repo.to_owned();
            tokio::task::spawn_blocking(move || hash_tree(&repo))
        };
        let body = self.idle_body(
            image,
            vec![volume(&state_volume, KEPT_STATE_MOUNT, false)],
            "kept",
        );
        let lock = match self.new_container_as(&format!("bork-ci-kept-{key}"), body).await {
            Ok(lock) => lock,
            Err(error) => {
                tracing::debug!(
                    "the kept tree of this repository is not free ({error}); this run fills one of its own"
                );
                return None;
            }
        };
        let stored = self
            .read_back(&lock.id, format!("{KEPT_STATE_MOUNT}/{KEPT_STATE_FILE}"))
            .await
            .ok()
            // At most what `read_back` reads (64 MiB): a larger state is no state.
            .and_then(|(bytes, _)| parse_kept_state(&bytes, &key));
        // Blanked before anything changes the volume (a run that dies holding it leaves no
        // state), while the volume is claimed beside it.
        let blanking = async {
            match archive::skeleton_with_file(0o755, &[], Some((KEPT_STATE_FILE, b""))) {
                Ok(blank) => self.upload(&lock.id, KEPT_STATE_MOUNT, blank).await,
                Err(source) => Err(SandboxError::Prepare {
                    what: "the kept tree's state".into(),
                    source,
                }),
            }
        };
        let (blanked, claimed) = tokio::join!(blanking, self.claim_kept_volume(repo, &key, stored, image));
        let claimed = match (blanked, claimed) {
            (Ok(()), claimed) => claimed,
            (Err(error), claimed) => {
                tracing::debug!("no kept tree: {error}");
                if let Some((_, _, holder, _)) = claimed {
                    super::remove_container(&self.docker, &holder).await;
                }
                None
            }
        };
        let Some((name, id, holder, content)) = claimed else {
            lock.remove().await;
            return None;
        };
        let hashed = if content.is_empty() {
            // A new volume: the repository's older ones (a run died holding one) are of no use.
            self.remove_kept_trees_but(repo, &name).await;
            None
        } else {
            hashing.await.ok().flatten()
        };
        tracing::debug!(
            "claimed the kept tree volume {name} ({} paths known)",
            content.len()
        );
        Some(TreeVolume {
            name,
            repo: repo.to_owned(),
            manifest: archive::Manifest::new(),
            id,
            holder: Some(holder),
            kept: Some(Kept {
                lock: lock.keep(),
                content,
                hashed,
                synced: false,
            }),
        })
    }

    /// Labels of a kept tree's volumes of `repo`: a cache's, with the step `step`.
    fn kept_labels(&self, repo: &Path, step: &str) -> HashMap<String, String> {
        let mut volume_labels = self.cache_volume_labels(repo);
        volume_labels.insert(labels::STEP.to_owned(), step.to_owned());
        volume_labels
    }

    /// The tree volume a kept state describes (`stored`), when it is still that volume, else a
    /// new one of the repository `key`; mounted by a holder container made now (so no `gc`
    /// removes it under this run). Returns its name, id, holder and what it holds.
    async fn claim_kept_volume(
        &self,
        repo: &Path,
        key: &str,
        stored: Option<KeptState>,
        image: &str,
    ) -> Option<(String, String, String, archive::ContentManifest)> {
        let (name, mut content) = match stored {
            Some(state) => (state.volume, Some((state.id, state.content))),
            None => (
                format!(
                    "bork-ci-kept-{key}-{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..16]
                ),
                None,
            ),
        };
        let mut claimed = None;
        for name in [
            name,
            format!(
                "bork-ci-kept-{key}-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..16]
            ),
        ] {
            let made = match self
                .create_or_find_volume(&name, self.kept_labels(repo, "kept-tree"))
                .await
            {
                Ok(id) => id,
                Err(error) => {
                    tracing::debug!("no kept tree: {error}");
                    break;
                }
            };
            // The holder mounts it from now on, so no `gc` removes it under this run; its id,
            // read with the holder in place, tells whether it is the volume the state describes.
            let holder = match self
                .create_idle(
                    image,
                    vec![volume(&name, super::REPO_MOUNT, false)],
                    "tree-holder",
                )
                .await
            {
                Ok(holder) => holder,
                Err(error) => {
                    tracing::debug!("no kept tree: {error}");
                    break;
                }
            };
            let id = match self.docker.inspect_volume(&name).await {
                Ok(volume) => volume_id(&volume).unwrap_or_default(),
                Err(_) => String::new(),
            };
            let known = match content.take() {
                Some((stored_id, known)) if stored_id == id && !id.is_empty() => Some(known),
                Some(_) => None,
                // A volume made just now holds nothing.
                None if id == made && !id.is_empty() => Some(archive::ContentManifest::new()),
                None => None,
            };
            match known {
                Some(known) => {
                    claimed = Some((name, id, holder.keep(), known));
                    break;
                }
                None => {
                    // Not the volume the state describes: what it holds is unknown.
                    holder.remove().await;
                    tracing::debug!(
                        "the kept tree volume {name} is not the one its state describes; starting a new one"
                    );
                }
            }
        }
        claimed
    }

    /// Removes the kept tree volumes of `repo` other than `keep` (one still in use stays).
    async fn remove_kept_trees_but(&self, repo: &Path, keep: &str) {
        let options = bollard::query_parameters::ListVolumesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![
                    format!("{REPO_LABEL}={}", repo.display()),
                    format!("{}=kept-tree", labels::STEP),
                ],
            )])),
        };
        let Ok(listed) = self.docker.list_volumes(Some(options)).await else {
            return;
        };
        for old in listed.volumes.unwrap_or_default() {
            if old.name == keep {
                continue;
            }
            let options = bollard::query_parameters::RemoveVolumeOptions { force: false };
            if let Err(error) = self.docker.remove_volume(&old.name, Some(options)).await {
                tracing::debug!(volume = old.name, %error, "an older kept tree stays");
            }
        }
    }

    /// Writes the state of this run's kept tree, if it has one brought up to date (and no update
    /// is under way): what the next run of the repository compares its tree with.
    pub(super) async fn release_kept_tree(&self) {
        let Ok(state) = self.tree.try_lock() else {
            return;
        };
        let Some((tree, kept)) = state
            .as_ref()
            .and_then(|tree| Some((tree, tree.kept.as_ref().filter(|kept| kept.synced)?)))
        else {
            return;
        };
        let written = KeptState {
            volume: tree.name.clone(),
            id: tree.id.clone(),
            content: kept.content.clone(),
        };
        let uploaded = match serde_json::to_vec(&written)
            .map_err(std::io::Error::other)
            .and_then(|json| {
                archive::skeleton_with_file(0o755, &[], Some((KEPT_STATE_FILE, json.as_slice())))
            }) {
            Ok(archive) => self.upload(&kept.lock, KEPT_STATE_MOUNT, archive).await,
            Err(source) => Err(SandboxError::Prepare {
                what: "the kept tree's state".into(),
                source,
            }),
        };
        match uploaded {
            Ok(()) => tracing::debug!("kept the tree volume {} for the next run", tree.name),
            Err(error) => tracing::debug!("the tree volume {} is not kept: {error}", tree.name),
        }
    }

    /// Brings this sandbox's tree volume up to date with the working tree of `repo` and returns
    /// its name. The first call fills a new volume, or sends what differs by content from a kept
    /// one; later ones send only the paths that changed and the list of those gone, unpacked by
    /// bork-ci in a helper container of the runner image from its stdin (an engine extracts
    /// archives file by file, about 0.5 ms each on a fuse-overlayfs engine).
    /// When the helper cannot be had, the engine extracts the whole tree into a fresh volume
    /// through a container of `image` that never starts. Hold `tree_lock` for writing.
    pub(super) async fn sync_tree(&self, repo: &Path, image: &str) -> Result<String, SandboxError> {
        let mut state = self.tree.lock().await;
        let repo_owned = repo.to_owned();
        let manifest = tokio::task::spawn_blocking(move || {
            tree_paths(&repo_owned).map(|paths| archive::manifest(&repo_owned, &paths))
        })
        .await
        .map_err(|e| SandboxError::Backend(e.to_string()))?
        .map_err(|source| SandboxError::Prepare {
            what: format!("the file list of {}", repo.display()),
            source,
        })?;
        // The same repository, and its volume still there (a cleanup removes it): send changes.
        let previous = match state.take() {
            Some(tree)
                if tree.repo == repo
                    && self
                        .docker
                        .inspect_volume(&tree.name)
                        .await
                        .is_ok_and(|volume| volume_id(&volume).as_deref() == Some(tree.id.as_str())) =>
            {
                Some(tree)
            }
            Some(tree) => {
                self.drop_tree(&tree).await;
                None
            }
            None => None,
        };
        let helper_ok = !self.helper_failed.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(mut tree) = previous {
            let (mut write, mut remove) = match tree.kept.as_mut().filter(|kept| !kept.synced) {
                // A kept volume just made holds nothing: all of it goes, recorded as it is sent
                // (no reading of the tree beforehand).
                Some(kept) if kept.content.is_empty() => (manifest.keys().cloned().collect(), Vec::new()),
                // A kept volume, first time in this run: compared by content, each path's taken
                // from the hashing done during the claim unless the path changed since.
                Some(kept) => {
                    let (repo_owned, listed, hashed) =
                        (repo.to_owned(), manifest.clone(), kept.hashed.take());
                    let here = tokio::task::spawn_blocking(move || {
                        archive::content_manifest_reusing(
                            &repo_owned,
                            &listed,
                            &super::strip_git_credentials,
                            hashed.as_ref(),
                        )
                    })
                    .await
                    .map_err(|e| SandboxError::Backend(e.to_string()))?;
                    archive::content_changes(&kept.content, &here)
                }
                None => archive::changes(&tree.manifest, &manifest),
            };
            let record = tree.kept.is_some();
            if write.is_empty() && remove.is_empty() {
                let tree = TreeVolume { manifest, ..tree }.updated(&remove, Vec::new());
                let name = tree.name.clone();
                *state = Some(tree);
                return Ok(name);
            }
            // Through the holder (no container starts) when few paths change; removals by
            // replacing their folders whole (`archive::replacing_folders`).
            let through_holder = if remove.is_empty() {
                (write.len() <= HOLDER_MAX_FILES).then(|| (Vec::new(), write.clone()))
            } else {
                archive::replacing_folders(&manifest, &write, &remove, HOLDER_MAX_FILES)
            };
            if let Some((replaced, writes)) = through_holder {
                match self
                    .update_through_holder(&mut tree, repo, &manifest, &writes, &replaced, image, record)
                    .await
                {
                    Ok(sent) => {
                        let tree = TreeVolume { manifest, ..tree }.updated(&remove, sent);
                        let name = tree.name.clone();
                        *state = Some(tree);
                        return Ok(name);
                    }
                    Err(error) => {
                        tracing::debug!(
                            "updating the tree volume through its holder: {error}; the helper does it"
                        );
                        if !replaced.is_empty() {
                            // What the engine did before it failed is not known: the helper
                            // removes the folders whole and writes all the holder was to write.
                            remove.retain(|gone| !replaced.iter().any(|folder| archive::below(gone, folder)));
                            remove.extend(replaced);
                            write = writes;
                        }
                    }
                }
            }
            let updated = if helper_ok {
                self.update_tree(&tree.name, repo, &manifest, &write, &remove, record)
                    .await
            } else {
                Err(SandboxError::Backend("the helper failed before".into()))
            };
            match updated {
                Ok(sent) => {
                    let tree = TreeVolume { manifest, ..tree }.updated(&remove, sent);
                    let name = tree.name.clone();
                    *state = Some(tree);
                    return Ok(name);
                }
                Err(error) => {
                    tracing::info!("updating the tree volume failed ({error}); filling a new one");
                    self.drop_tree(&tree).await;
                }
            }
        }
        let empty = self.new_tree_volume(repo).await?;
        let (name, id) = (empty.name.clone(), empty.id.clone());
        // A small tree the engine extracts itself, through the tree's holder (a container that
        // never starts, kept for the updates): cheaper than starting the helper.
        if manifest.len() <= HOLDER_MAX_FILES {
            let mut tree = empty;
            let all: Vec<String> = manifest.keys().cloned().collect();
            if let Err(error) = self
                .update_through_holder(&mut tree, repo, &manifest, &all, &[], image, false)
                .await
            {
                self.drop_tree(&tree).await;
                return Err(error);
            }
            *state = Some(TreeVolume { manifest, ..tree });
            return Ok(name);
        }
        let filled = async {
            let fast = if helper_ok {
                self.update_tree(&name, repo, &manifest, &manifest.keys().cloned().collect::<Vec<_>>(), &[], false)
                    .await
            } else {
                Err(SandboxError::Backend("the helper failed before".into()))
            };
            if let Err(error) = fast {
                if helper_ok {
                    tracing::info!("unpacking the tree in a helper container failed ({error}); the engine extracts it instead");
                    self.helper_failed.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                super::remove_volume(&self.docker, &name).await;
                let id = self.create_or_find_volume(&name, self.run_volume_labels("repo")).await?;
                self.fill_through_engine(&name, repo, &manifest, image).await?;
                return Ok(id);
            }
            Ok::<String, SandboxError>(id)
        }
        .await;
        let id = match filled {
            Ok(id) => id,
            Err(error) => {
                super::remove_volume(&self.docker, &name).await;
                return Err(error);
            }
        };
        *state = Some(TreeVolume {
            name: name.clone(),
            repo: repo.to_owned(),
            manifest,
            id,
            holder: None,
            kept: None,
        });
        Ok(name)
    }

    /// Sends `write` (paths of `manifest`) and the `remove` list into volume `name` through the
    /// helper container: the archive is made on a blocking thread while the helper is made and
    /// starts, and goes in on its stdin. With `record`, returns what it sent.
    async fn update_tree(
        &self,
        name: &str,
        repo: &Path,
        manifest: &archive::Manifest,
        write: &[String],
        remove: &[String],
        record: bool,
    ) -> Result<Sent, SandboxError> {
        let runner = self.ready_image(super::JobKind::EditStep).await?;
        let token = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        let list = (!remove.is_empty()).then(|| {
            let bytes: Vec<u8> = remove
                .iter()
                .flat_map(|path| path.bytes().chain(std::iter::once(0)))
                .collect();
            (archive::remove_list_entry(&token), bytes)
        });
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Sent::new()));
        let making = {
            let (repo, manifest, write) = (repo.to_owned(), manifest.clone(), write.to_vec());
            let sent = std::sync::Arc::clone(&sent);
            tokio::task::spawn_blocking(move || {
                let first: Vec<(&str, &[u8])> = list
                    .iter()
                    .map(|(entry, bytes)| (entry.as_str(), bytes.as_slice()))
                    .collect();
                let mut noted = Vec::new();
                let file = tree_archive(
                    &repo,
                    &manifest,
                    Some(&write),
                    &first,
                    record.then_some(&mut noted),
                )?;
                if let Ok(mut sent) = sent.lock() {
                    *sent = noted;
                }
                Ok(file)
            })
        };
        self.unpack_in_helper(name, &runner, making, &token).await?;
        let sent = sent
            .lock()
            .map(|mut sent| std::mem::take(&mut *sent))
            .map_err(|_| SandboxError::Backend("the record of what was sent".into()))?;
        Ok(sent)
    }

    /// Sends the paths of `write` into the tree's volume through its holder, a container of
    /// `image` created once and never started: one archive upload, which the engine extracts,
    /// each folder of `replaced` first removed whole by an empty file put where it is
    /// ([`archive::replacing_folders`]; `write` then holds all that is in it). With `record`,
    /// returns what it sent.
    #[expect(clippy::too_many_arguments, reason = "one update's parts, each borrowed once")]
    async fn update_through_holder(
        &self,
        tree: &mut TreeVolume,
        repo: &Path,
        manifest: &archive::Manifest,
        write: &[String],
        replaced: &[String],
        image: &str,
        record: bool,
    ) -> Result<Sent, SandboxError> {
        let holder = match &tree.holder {
            Some(id) => id.clone(),
            None => {
                let container = self
                    .create_idle(
                        image,
                        vec![volume(&tree.name, super::REPO_MOUNT, false)],
                        "tree-holder",
                    )
                    .await?;
                let id = container.keep();
                tree.holder = Some(id.clone());
                id
            }
        };
        let (archive, sent) =
            tree_archive_off_thread(repo, manifest, Some(write.to_vec()), replaced, record).await?;
        self.upload_file(&holder, super::REPO_MOUNT, archive).await?;
        Ok(sent)
    }

    /// Removes a tree's holder, then its volume (a volume a container names cannot go). A kept
    /// tree's state is blank while this run holds it, so the next run does not take this volume.
    async fn drop_tree(&self, tree: &TreeVolume) {
        // A judge still finishing names the volume until its container is gone.
        self.settle().await;
        if let Some(holder) = &tree.holder {
            super::remove_container(&self.docker, holder).await;
        }
        super::remove_volume(&self.docker, &tree.name).await;
    }

    /// The fallback: the engine extracts the whole tree into volume `name`.
    async fn fill_through_engine(
        &self,
        name: &str,
        repo: &Path,
        manifest: &archive::Manifest,
        image: &str,
    ) -> Result<(), SandboxError> {
        let (archive, _) = tree_archive_off_thread(repo, manifest, None, &[], false).await?;
        let helper = self
            .create_idle(image, vec![volume(name, super::REPO_MOUNT, false)], "fill")
            .await?;
        let uploaded = self.upload_file(&helper.id, super::REPO_MOUNT, archive).await;
        helper.remove().await;
        uploaded
    }

    /// Runs `bork-ci sandbox-unpack` in a locked-down container of `runner` (root, no
    /// capabilities, no network, read-only root) with volume `name` at `/repo`, and sends it the
    /// archive `making` yields on its stdin (the archive is never a file in the volume).
    async fn unpack_in_helper(
        &self,
        name: &str,
        runner: &str,
        making: tokio::task::JoinHandle<std::io::Result<std::fs::File>>,
        token: &str,
    ) -> Result<(), SandboxError> {
        self.helper_runs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut container_labels = self.labels(super::JobKind::Checker);
        container_labels.insert(labels::STEP.to_owned(), "fill".to_owned());
        let cmd = vec![
            "bork-ci".to_owned(),
            "sandbox-unpack".to_owned(),
            "--into".to_owned(),
            super::REPO_MOUNT.to_owned(),
            "--token".to_owned(),
            token.to_owned(),
        ];
        let body = ContainerCreateBody {
            image: Some(runner.to_owned()),
            cmd: Some(cmd),
            entrypoint: Some(Vec::new()),
            user: Some("0:0".to_owned()),
            working_dir: Some("/".to_owned()),
            attach_stdin: Some(true),
            open_stdin: Some(true),
            // The helper's stdin closes when the archive has been sent.
            stdin_once: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            labels: Some(container_labels),
            network_disabled: Some(true),
            host_config: Some(super::hardening::host_config(
                &self.settings,
                vec![volume(name, super::REPO_MOUNT, false)],
                "none",
            )),
            ..Default::default()
        };
        // Without a helper the archive being made is dropped unread (a blocking task runs on).
        let helper = self
            .new_container("fill", body)
            .await
            .map_err(docker_error("create"))?;
        let job = super::Job::new(
            super::JobKind::Checker,
            Vec::new(),
            std::time::Duration::from_secs(600),
            64 << 10,
        );
        let ran = self
            .run_in_with_stdin(
                &helper.id,
                &job,
                std::time::Instant::now(),
                Some(super::Stdin::Archive(making)),
            )
            .await;
        helper.remove().await;
        let output = ran?;
        // The answer names the call: an image whose `bork-ci` is something else fails here.
        let expected = format!("bork-ci unpacked {token}");
        if output.outcome != super::Outcome::Exited(0)
            || String::from_utf8_lossy(&output.stdout).trim() != expected
        {
            return Err(SandboxError::Backend(format!(
                "`bork-ci sandbox-unpack` ended with {:?} and did not confirm: {}",
                output.outcome,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Extracts the tar `archive` at `path` in container `id` (created, not necessarily started).
    pub(super) async fn upload(&self, id: &str, path: &str, archive: Vec<u8>) -> Result<(), SandboxError> {
        let options = UploadToContainerOptions {
            path: path.to_owned(),
            ..Default::default()
        };
        self.docker
            .upload_to_container(id, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(upload_error(path))
    }

    /// As [`DockerSandbox::upload`], streaming the archive from a file.
    async fn upload_file(&self, id: &str, path: &str, archive: std::fs::File) -> Result<(), SandboxError> {
        let options = UploadToContainerOptions {
            path: path.to_owned(),
            ..Default::default()
        };
        self.docker
            .upload_to_container(id, Some(options), bollard::body_try_stream(file_stream(archive)))
            .await
            .map_err(upload_error(path))
    }

    /// Downloads `path` of container `id` as a tar into an anonymous temporary file, at most
    /// `limit` bytes (past it the download stops with an error).
    pub(super) async fn download(
        &self,
        id: &str,
        path: &str,
        limit: u64,
    ) -> Result<std::fs::File, SandboxError> {
        download_from(&self.docker, id, path, limit).await
    }

    /// Copies `/state/<name>` of the edit step's container into `state_dir` on the host, when
    /// the step wrote it.
    pub(super) async fn copy_state_back(
        &self,
        id: &str,
        state_dir: &Path,
        name: &str,
    ) -> Result<(), SandboxError> {
        const LIMIT: u64 = 256 << 20;
        let path = format!("{}/{name}", super::STATE_COPY_DIR);
        let file = match self.download(id, &path, LIMIT + (1 << 20)).await {
            Ok(file) => file,
            Err(error) => {
                tracing::debug!("no edit step result to copy back: {error}");
                return Ok(());
            }
        };
        let name_owned = name.to_owned();
        let bytes = tokio::task::spawn_blocking(move || archive::read_single(file, &name_owned, LIMIT))
            .await
            .map_err(|e| SandboxError::Backend(e.to_string()))?
            .map_err(|source| SandboxError::Prepare {
                what: format!("the edit step's {name}"),
                source,
            })?;
        let Some(bytes) = bytes else { return Ok(()) };
        let write = || -> std::io::Result<()> {
            let mut temporary = tempfile::NamedTempFile::new_in(state_dir)?;
            std::io::Write::write_all(&mut temporary, &bytes)?;
            temporary.persist(state_dir.join(name)).map_err(|e| e.error)?;
            Ok(())
        };
        write().map_err(|source| SandboxError::Prepare {
            what: format!("the edit step's {name} on the host"),
            source,
        })
    }
}

/// A file of the repository to compare through the probe: `.git/HEAD`, else the first regular
/// file at the top, at most 1 MiB; its relative path, bytes and modification time.
fn repo_sample(repo: &Path, with_git: bool) -> Option<(String, Vec<u8>, (i64, i64))> {
    use std::os::unix::fs::MetadataExt;
    let mut candidates = if with_git {
        vec![".git/HEAD".to_owned()]
    } else {
        Vec::new()
    };
    if let Ok(entries) = std::fs::read_dir(repo) {
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        candidates.extend(names.into_iter().filter(|name| with_git || name != ".git"));
    }
    candidates.into_iter().find_map(|relative| {
        let full = repo.join(&relative);
        let metadata = std::fs::symlink_metadata(&full).ok()?;
        if !metadata.is_file() || metadata.len() > 1 << 20 {
            return None;
        }
        let bytes = bork_ci_core::safe_fs::read_regular(&full, 1 << 20).ok()?;
        Some((relative, bytes, (metadata.mtime(), metadata.mtime_nsec())))
    })
}

/// Whether `file` remembers a `bind` answer.
fn recalls_bind(file: &Path) -> bool {
    bork_ci_core::safe_fs::read_regular(file, 64).is_ok_and(|bytes| bytes == b"bind\n")
}

/// Remembers a `bind` answer in `file`; a failure only costs the next run a probe.
fn remember_bind(file: &Path) {
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| bork_ci_core::safe_fs::write_atomic(file, b"bind\n"));
    if let Err(error) = written {
        tracing::debug!(%error, "the transport probe's answer is not remembered");
    }
}

/// Whether an archive's whole-second modification time is the file's `(seconds, nanoseconds)`:
/// Docker truncates to the second, Podman rounds to the nearest one.
fn same_mtime(seen: u64, (secs, nanos): (i64, i64)) -> bool {
    let truncated = u64::try_from(secs).unwrap_or(0);
    seen == truncated || (nanos >= 500_000_000 && seen == truncated + 1)
}

/// The first entry of a downloaded archive: its bytes and modification time.
fn read_first(file: std::fs::File) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::Read as _;
    let mut archive = tar::Archive::new(file);
    let mut entries = archive.entries()?;
    let mut entry = entries
        .next()
        .ok_or_else(|| std::io::Error::other("an empty archive"))??;
    let mtime = entry.header().mtime()?;
    let mut bytes = Vec::new();
    (&mut entry).take(1 << 20).read_to_end(&mut bytes)?;
    Ok((bytes, mtime))
}

/// Downloads `path` of container `id` as a tar into an anonymous temporary file, at most
/// `limit` bytes (past it the download stops with an error).
async fn download_from(
    docker: &Docker,
    id: &str,
    path: &str,
    limit: u64,
) -> Result<std::fs::File, SandboxError> {
    use std::io::Write as _;
    let failed = |reason: String| SandboxError::Docker {
        operation: "copy out of a container",
        reason: format!("{path}: {reason}"),
    };
    let options = DownloadFromContainerOptions {
        path: path.to_owned(),
    };
    let mut stream = docker.download_from_container(id, Some(options));
    let mut file = tempfile::tempfile().map_err(|e| failed(e.to_string()))?;
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| failed(e.to_string()))?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(failed(format!("larger than {limit} bytes")));
        }
        file.write_all(&chunk).map_err(|e| failed(e.to_string()))?;
    }
    archive::rewind(file).map_err(|e| failed(e.to_string()))
}

/// Copies a judge's `/artifacts` back into `run_dir` (the runner's `logs/` aside) and its
/// `/artifacts/tmp` (its `TMPDIR`) into `tmp_dir`, from one download, each within
/// [`ARTIFACT_LIMITS`]. Test temporaries are for people: more than the limits, or a failed
/// copy there, is a warning, never the job's failure.
pub(super) async fn copy_artifacts_and_tmp_back(
    docker: &Docker,
    id: &str,
    run_dir: &Path,
    tmp_dir: &Path,
) -> Result<(), SandboxError> {
    let limit = ARTIFACT_LIMITS.bytes + (ARTIFACT_LIMITS.bytes / 8);
    let file = download_from(docker, id, super::ARTIFACTS_MOUNT, limit).await?;
    let (run_dir, tmp_dir) = (run_dir.to_owned(), tmp_dir.to_owned());
    let (artifacts, tmp) = tokio::task::spawn_blocking(move || {
        let artifacts = archive::extract_into(&file, &run_dir, ARTIFACT_LIMITS, &["logs", "tmp"]);
        let tmp = archive::rewind(file)
            .and_then(|file| archive::extract_under(file, &tmp_dir, ARTIFACT_LIMITS, "tmp"));
        (artifacts.map(|done| (done, run_dir)), tmp)
    })
    .await
    .map_err(|e| SandboxError::Backend(e.to_string()))?;
    let (extracted, run_dir) = artifacts.map_err(|source| SandboxError::Prepare {
        what: "the artifacts copied back".to_owned(),
        source,
    })?;
    warn_if_cut("the job's artifacts", &extracted);
    match tmp {
        Ok(done) => warn_if_cut("the job's temporary folder", &done),
        Err(error) => tracing::warn!(
            "the job's temporary folder was not copied back beside {}: {error}",
            run_dir.display()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{archive, parse_kept_state, same_mtime};

    #[test]
    fn a_kept_trees_state_is_taken_only_when_it_is_one() {
        let key = "0123456789abcdef";
        let state = |volume: &str, id: &str, path: &str| {
            serde_json::json!({"volume": volume, "id": id, "content": {path: "Dir"}})
                .to_string()
                .into_bytes()
        };
        let good = state("bork-ci-kept-0123456789abcdef-00ff", "id1", "src");
        let parsed = parse_kept_state(&good, key).expect("a state");
        assert_eq!(parsed.content.get("src"), Some(&archive::Content::Dir));
        for (bytes, why) in [
            (Vec::new(), "blank: a run holds it or died holding it"),
            (b"{".to_vec(), "not JSON"),
            (
                state("bork-ci-kept-fedcba9876543210-00ff", "id1", "src"),
                "another repository's volume",
            ),
            (
                state("bork-ci-kept-0123456789abcdef-state", "id1", "src"),
                "its own state volume",
            ),
            (
                state("bork-ci-kept-0123456789abcdef-a/b", "id1", "src"),
                "not a plain name",
            ),
            (state("other", "id1", "src"), "not a kept tree"),
            (state("bork-ci-kept-0123456789abcdef-00ff", "", "src"), "no id"),
            (
                state("bork-ci-kept-0123456789abcdef-00ff", "id1", "../outside"),
                "a path out of the tree",
            ),
            (
                state("bork-ci-kept-0123456789abcdef-00ff", "id1", "/etc"),
                "an absolute path",
            ),
        ] {
            assert!(parse_kept_state(&bytes, key).is_none(), "{why}");
        }
    }

    #[test]
    fn an_archives_mtime_may_be_truncated_or_rounded_but_not_otherwise_off() {
        assert!(same_mtime(100, (100, 0)));
        assert!(same_mtime(100, (100, 999_999_999)), "Docker truncates");
        assert!(same_mtime(101, (100, 500_000_000)), "Podman rounds");
        assert!(!same_mtime(101, (100, 499_999_999)));
        assert!(!same_mtime(99, (100, 0)));
        assert!(!same_mtime(102, (100, 900_000_000)));
    }
}
