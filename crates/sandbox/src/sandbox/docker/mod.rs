//! The `docker` backend: every job runs in a fresh, locked-down container, removed afterwards.
//!
//! This module and its children are the only code that talks to the Docker engine (through
//! `bollard`). It owns the two container profiles (checker/verify: repo read-only, no network,
//! no secrets; edit step: host network, the LLM key, and over `bind` the working tree read-write
//! without `.git`), image presence and pulls, the labels on everything it creates, removal on
//! every path (a guard for errors and cancellation, [`DockerSandbox::cleanup_all`] for signal
//! handlers) and [`gc`] for leftovers of killed runs. [`transport`] moves files in and out
//! (bind mounts or archives through the API), [`runner_image`] loads the edit step's image
//! from this executable, `archive` writes and reads the tars. It does not judge what a job
//! printed: that is `checker`'s and `verify`'s business.

mod archive;
mod hardening;
pub mod liveness;
mod prepare;
pub mod runner_image;
mod spare;
pub mod transport;

/// The engine client crate, for tests and benchmarks that inspect the engine directly; bollard is
/// a dependency of this crate only.
pub use bollard;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, Mount, MountType};
use bollard::query_parameters::{
    AttachContainerOptions, BuildImageOptions, CreateContainerOptions, CreateImageOptions,
    KillContainerOptions, ListContainersOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions, StartContainerOptions, WaitContainerOptions,
};
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::{Job, JobKind, JobOutput, Outcome, SandboxError, state_stdio};
pub use archive::unpack_tree;
pub use transport::Transport;

/// The endpoint used when neither the settings nor `DOCKER_HOST` name one.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";
/// Where the repository is mounted in every container; it is the working directory.
pub const REPO_MOUNT: &str = "/repo";
/// Where the run's artifact directory is mounted (checker and verify jobs).
pub const ARTIFACTS_MOUNT: &str = "/artifacts";
/// Where the run's build cache is mounted (judges).
pub const CACHE_MOUNT: &str = "/cache";
/// Where the dependency cache is mounted (read-only for judges, read-write for setup).
pub const DEPS_MOUNT: &str = "/deps";
/// A judge's own empty home (a tmpfs per container).
pub const JUDGE_HOME: &str = "/home/judge";
/// Where a judge sees its own `TMPDIR`, the host's `runs/<run id>/tmp/<n>-<kind>`, over `bind`.
pub const JUDGE_TMP: &str = "/tmp";
/// Where a judge sees its own `TMPDIR` over `copy`: a folder of its artifacts volume, copied
/// back into `runs/<run id>/tmp/<n>-<kind>` (seed 003's `TMPDIR=/artifacts/tmp`).
pub const COPY_TMP: &str = "/artifacts/tmp";
/// Where the setup job finds the runner's CA bundle (inside the dependency cache).
pub const SETUP_CA: &str = "/deps/.bork-ci/ca-certificates.crt";
/// Where the edit step's state directory is mounted.
pub const STATE_MOUNT: &str = "/state";
/// Over `copy`, where the edit step's state is: a directory inside the state volume, owned by
/// the step's user (the root of a volume cannot be given to another user through the API).
pub const STATE_COPY_DIR: &str = "/state/step";
/// Where the edit step keeps its state when it comes over stdio: a folder of its tmpfs `/tmp`.
pub const STATE_STDIO_DIR: &str = "/tmp/bork-ci-state";

/// Label keys put on every container bork-ci creates.
pub mod labels {
    /// Always `1`: marks a container as bork-ci's.
    pub const MARK: &str = "bork-ci";
    pub const RUN: &str = "bork-ci.run";
    pub const STEP: &str = "bork-ci.step";
    pub const CREATED: &str = "bork-ci.created";
    /// Unix seconds until which the object's run may still use it: the run's own deadline
    /// (`run-timeout-secs`) plus a grace, set when the object is created. Any bork-ci, on any
    /// host or in any namespace, may remove the object once it passed (see [`super::gc`]);
    /// before, only a run proven dead (see [`super::liveness`]) loses it.
    pub const LEASE: &str = "bork-ci.lease-until";
    /// The host that created the object: for people reading `docker ps`.
    pub const HOST: &str = "bork-ci.host";
    /// The process that created the object: for people, and, with the boot, the PID namespace
    /// and its start time ([`super::liveness::keys`]), the proof that its run died.
    pub const PID: &str = "bork-ci.pid";
    /// A volume's own random id, set when bork-ci creates it: a volume removed and made again
    /// under its name (by bork-ci, or by the engine for a container that names it) is another
    /// volume, whatever the clock says (an engine gives its creation time to the second).
    pub const VOLUME_ID: &str = "bork-ci.volume-id";
    /// On a mark that a volume was filled whole: that volume's name. The mark vouches for the
    /// volume of that name only while it has the id in [`MARKS_ID`]; `gc` removes it with it.
    pub const MARKS: &str = "bork-ci.marks";
    /// On a mark: the [`VOLUME_ID`] of the volume it vouches for.
    pub const MARKS_ID: &str = "bork-ci.marks-id";
}

/// When to pull the image (`sandbox.pull`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PullPolicy {
    /// Pull only when the image is not present locally.
    #[default]
    Missing,
    /// Pull before every first use in a run.
    Always,
    /// Never pull; a missing image is an error.
    Never,
}

/// The lease of a run's objects when the run names no time budget: a day.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(24 * 3600);
/// Added to a run's time budget for its lease: the time a run may still need after its budget
/// ran out (stopping, the report, removing its containers).
pub const LEASE_GRACE: Duration = Duration::from_secs(15 * 60);

/// The size of the `/tmp` tmpfs of every container (and of a judge's `HOME`).
pub const TMPFS_BYTES: u64 = 256 << 20;

/// The `sandbox.*` settings the docker backend needs, as plain values; made from the
/// configuration (`config::SandboxConfig::docker_settings`), which holds their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerSettings {
    /// Engine endpoint (`unix://…`, `tcp://…`), `DOCKER_HOST` as `config` read it; `None`: the
    /// local socket.
    pub host: Option<String>,
    /// The TLS client certificate folder (`ca.pem`, `cert.pem`, `key.pem`) for a `tcp://`
    /// engine: `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` as `config` read them.
    pub tls: Option<std::path::PathBuf>,
    /// `sandbox.image`: the toolchain image the checker and the verifier run in.
    pub image: String,
    /// `sandbox.runner-image`: the bork-ci image the edit step runs in; `None` builds one from
    /// this executable (see [`runner_image`]).
    pub runner_image: Option<String>,
    /// The bork-ci executable the edit step's image is made from when `runner_image` is
    /// `None`; `None` here means this process's own (tests and benchmarks, which are not
    /// bork-ci, name the binary).
    pub runner_binary: Option<PathBuf>,
    /// `sandbox.transport`.
    pub transport: Transport,
    /// `sandbox.keep-tree`: over `copy`, the tree volume is kept for the next run of the
    /// repository (`transport::Kept`).
    pub keep_tree: bool,
    /// `sandbox.ulimits.nofile` and `sandbox.ulimits.nproc` (soft = hard) for every container.
    pub ulimits: Ulimits,
    /// `sandbox.pull`.
    pub pull: PullPolicy,
    /// `sandbox.network` for checker and verify jobs: `none` (default), `bridge`, or a network name.
    pub network: String,
    /// `sandbox.memory` in bytes (swap is set to the same value, so there is none).
    pub memory: Option<u64>,
    /// `sandbox.cpus` (for example `1.5`).
    pub cpus: Option<f64>,
    /// `sandbox.pids-limit`.
    pub pids_limit: Option<i64>,
    /// `sandbox.user` for checker and verify jobs, `uid:gid`.
    pub user: String,
    /// `sandbox.artifact-dir`: the artifact root (`runs/`, `cache/`).
    pub artifact_dir: PathBuf,
    /// Size of the `/tmp` tmpfs in bytes (and of a judge's `HOME`).
    pub tmpfs_bytes: u64,
    /// Names the repository and base branch whose dependency cache the judges read (see
    /// [`super::SharedDirs`]).
    pub deps_identity: String,
    /// `sandbox.setup-network`: the network of the setup commands.
    pub setup_network: String,
    /// The runner's proxy variables and CA bundle, passed into the setup job.
    pub setup_egress: super::SetupNetwork,
    /// How long what this run creates is leased for, from its creation: the run's time budget
    /// plus a grace (see [`labels::LEASE`]).
    pub lease: Duration,
}

/// Resource limits set on every container: at or below the hard limits of usual hosts, so that
/// engines that apply their own larger defaults (Podman) do not fail with "error setting rlimit".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ulimits {
    /// Open files (`RLIMIT_NOFILE`).
    pub nofile: i64,
    /// Processes of the container's user (`RLIMIT_NPROC`).
    pub nproc: i64,
}

impl Ulimits {
    fn to_api(self) -> Vec<bollard::models::ResourcesUlimits> {
        [("nofile", self.nofile), ("nproc", self.nproc)]
            .into_iter()
            .map(|(name, value)| bollard::models::ResourcesUlimits {
                name: Some(name.to_owned()),
                soft: Some(value),
                hard: Some(value),
            })
            .collect()
    }
}

/// Fails early, with a way out, when the checker's user could not even enter the repository
/// (a checkout in a `0700` directory owned by someone else): otherwise every check would fail
/// with "permission denied" inside the container.
fn check_readable(repo: &Path, user: &str) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = std::fs::metadata(repo) else {
        return Ok(());
    };
    let uid = user.split(':').next().and_then(|uid| uid.parse::<u32>().ok());
    let gid = user.split(':').nth(1).and_then(|gid| gid.parse::<u32>().ok());
    let mode = metadata.mode();
    let readable = match (uid, gid) {
        (Some(0), _) => true,
        (Some(uid), _) if uid == metadata.uid() => mode & 0o500 == 0o500,
        (_, Some(gid)) if gid == metadata.gid() => mode & 0o050 == 0o050,
        (Some(_), _) => mode & 0o005 == 0o005,
        // A user name: let the engine resolve it.
        (None, _) => true,
    };
    if readable {
        return Ok(());
    }
    Err(SandboxError::Docker {
        operation: "checking the repository's permissions",
        reason: format!(
            "the checker runs as {user} (`sandbox.user`), which cannot read {} (mode {:o}, owner {}:{}); make the checkout readable (chmod o+rx) or set `sandbox.user` to its owner",
            repo.display(),
            mode & 0o7777,
            metadata.uid(),
            metadata.gid()
        ),
    })
}

/// Parses a memory size as `docker run --memory` does: `1073741824`, `512m`, `2g`, `2GiB`.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let digits_end = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits_end);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{trimmed}` is not a memory size (e.g. 512m, 2g)"))?;
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown memory unit `{other}` in `{trimmed}`")),
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("memory size `{trimmed}` is too large"))
}

/// Runs jobs in ephemeral containers. One per bork-ci run: its run id labels every container.
pub struct DockerSandbox {
    docker: Docker,
    settings: DockerSettings,
    endpoint: String,
    run_id: String,
    host_label: String,
    /// What proves this run dead once its process is gone (see [`liveness`]).
    proof_labels: Vec<(String, String)>,
    /// The container that holds this run's cache volumes while it lives (created, never
    /// started), so that no `gc` finds them unused between two jobs.
    anchor: tokio::sync::OnceCell<()>,
    images_ready: Mutex<HashSet<String>>,
    live: Arc<Mutex<HashSet<String>>>,
    /// What `auto` resolved to, and whether that is proven (a probe, or a job's check of a
    /// remembered `bind`).
    resolved_transport: Mutex<Option<(Transport, bool)>>,
    /// Held while `auto` is being resolved.
    probing: tokio::sync::Mutex<()>,
    /// `auto`'s probe container ran in this run.
    probed: std::sync::atomic::AtomicBool,
    /// The engine's version as it reports it (part of what a remembered answer is for).
    engine_version: String,
    /// The tag of the edit step's image loaded from this executable and checked, once loaded or found.
    built_runner: tokio::sync::OnceCell<runner_image::RunnerImage>,
    /// Over `copy`: the working tree's volume and what is in it.
    tree: tokio::sync::Mutex<Option<transport::TreeVolume>>,
    /// Taken for writing while the tree volume is updated, for reading while a job uses it.
    tree_lock: Arc<tokio::sync::RwLock<()>>,
    /// The helper that unpacks the tree failed once: the engine extracts it from then on.
    helper_failed: std::sync::atomic::AtomicBool,
    /// How many times a helper container unpacked into the tree volume.
    helper_runs: std::sync::atomic::AtomicUsize,
    /// Over `copy`: the run-wide volumes whose skeleton is in, each as `(name, the time the
    /// engine created it)`; a volume removed and made again under the same name is another one.
    skeletons: Mutex<HashSet<(String, String)>>,
    /// The engine is Podman (its Docker-compatible API): see [`Podman`].
    podman: bool,
    /// The run's build cache and the repository's dependency cache on the host (`bind`).
    shared: super::SharedDirs,
    /// With `sandbox.image = "devcontainer"`: the dev container's image, once found or built.
    devcontainer: tokio::sync::OnceCell<String>,
    /// Over `copy`: the next judge's own volumes, made while the edit step runs (`spare`).
    spare: tokio::sync::Mutex<Option<spare::Spare>>,
    /// Over `copy`: judges whose artifacts are still being copied back and whose container and
    /// volumes are still being removed, after their result was returned ([`Self::settle`]).
    finishing: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// What the last judge over `copy` wanted, which the next spare is made for.
    spare_wanted: Mutex<Option<spare::SpareKind>>,
    /// bork-ci itself for the judges (see [`DockerSandbox::tool_mounts`]), made once a run;
    /// `None` when it could not be (judges then run without it).
    tool: tokio::sync::OnceCell<Option<ToolMounts>>,
    /// The same over `copy`, apart: a run whose remembered `bind` failed its proof goes on over
    /// `copy`, where the host paths of the other do not exist.
    tool_copy: tokio::sync::OnceCell<Option<ToolMounts>>,
}

/// Where the judges' copy of bork-ci comes from: files of this host bound in (host path,
/// path inside; the scratch folder holds the script a dynamically linked executable needs), or
/// a volume of this run.
/// The file the judges' bork-ci volume gets last, holding its key: a volume without it is
/// still being filled, or was left half filled.
const TOOL_COMPLETE: &str = ".bork-ci-complete";

enum ToolMounts {
    Binds {
        binds: Vec<(String, String)>,
        _scratch: tempfile::TempDir,
    },
    Volume(String),
}

/// What differs on Podman's Docker-compatible API (4.x), and how the backend meets it:
/// - A tmpfs mount copies up what lies beneath it by default (`tmpcopyup`): the edit step's
///   empty `.git` would be a copy of the real one. It is asked for with `notmpcopyup`, an option
///   Docker refuses, so only on Podman.
/// - `State.OOMKilled` stays false on cgroup v1 hosts: a job killed by SIGKILL (exit 137) that
///   bork-ci did not kill itself, under a memory limit, is reported as out of memory.
/// - A fresh volume's root is given to the first container's user: the edit step may write
///   beside `step/` in its own state volume (nothing but `step/` comes back), the checker beside
///   the skeleton in its artifact volume (`logs/` never comes back).
/// - Default ulimits above the host's hard limits make every container fail to start
///   ("error setting rlimit"): bork-ci always sets `nofile` and `nproc` (`sandbox.ulimits`).
/// - The init process (`--init`) is `catatonit`, a separate Debian package: without it creating
///   a container fails with "container-init binary not found".
pub struct Podman;

impl Podman {
    /// Whether `GET /version` names Podman among the engine's components.
    fn named_in(version: &bollard::models::SystemVersion) -> bool {
        version
            .components
            .iter()
            .flatten()
            .any(|component| component.name.to_ascii_lowercase().contains("podman"))
    }
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("endpoint", &self.endpoint)
            .field("run_id", &self.run_id)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

use hardening::no_logs;
use prepare::{Prepared, prepare_error};

/// Creates a container named `bork-ci-<role>-<12 hex>`, so whoever lists the engine's
/// containers sees whose it is and what it is for; returns its id.
async fn create_named(
    docker: &Docker,
    role: &str,
    body: ContainerCreateBody,
) -> Result<String, bollard::errors::Error> {
    let name = format!(
        "bork-ci-{role}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    create_as(docker, name, body).await
}

/// Creates a container named exactly `name`; returns its id.
async fn create_as(
    docker: &Docker,
    name: String,
    body: ContainerCreateBody,
) -> Result<String, bollard::errors::Error> {
    let options = CreateContainerOptions {
        name: Some(name),
        ..Default::default()
    };
    Ok(docker.create_container(Some(options), body).await?.id)
}

fn docker_error(operation: &'static str) -> impl Fn(bollard::errors::Error) -> SandboxError {
    move |error| SandboxError::Docker {
        operation,
        reason: error.to_string(),
    }
}

fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }
    )
}

/// The engine at `endpoint`: over TCP with TLS when `tls` names the client's certificate folder
/// (`ca.pem`, `cert.pem` and `key.pem`, e.g. a `docker:dind` service's `/certs/client`), plain
/// HTTP over TCP otherwise; a Unix socket as its URL says.
fn connect_to(endpoint: &str, tls: Option<std::path::PathBuf>) -> Result<Docker, bollard::errors::Error> {
    let tcp = endpoint.starts_with("tcp://") || endpoint.starts_with("https://");
    match tls {
        Some(certs) if tcp => Docker::connect_with_ssl(
            endpoint,
            &certs.join("key.pem"),
            &certs.join("cert.pem"),
            &certs.join("ca.pem"),
            120,
            bollard::API_DEFAULT_VERSION,
        ),
        _ if endpoint.starts_with("tcp://") || endpoint.starts_with("http://") => {
            Docker::connect_with_http(endpoint, 120, bollard::API_DEFAULT_VERSION)
        }
        _ => Docker::connect_with_host(endpoint),
    }
}

impl DockerSandbox {
    /// Connects to the engine, negotiates the API version and checks that it answers.
    pub async fn connect(settings: DockerSettings, run_id: &str) -> Result<DockerSandbox, SandboxError> {
        let endpoint = settings
            .host
            .clone()
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_owned());
        let unreachable = |reason: String| SandboxError::Unreachable {
            host: endpoint.clone(),
            reason,
        };
        let docker = connect_to(&endpoint, settings.tls.clone()).map_err(|e| unreachable(e.to_string()))?;
        let docker = match tokio::time::timeout(Duration::from_secs(15), docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(error)) => return Err(unreachable(error.to_string())),
            Err(_) => return Err(unreachable("no answer within 15 s".to_owned())),
        };
        let (podman, engine_version) =
            match tokio::time::timeout(Duration::from_secs(15), docker.version()).await {
                Ok(Ok(version)) => (
                    Podman::named_in(&version),
                    format!(
                        "{} {} {}",
                        version.version.as_deref().unwrap_or_default(),
                        version.git_commit.as_deref().unwrap_or_default(),
                        version.kernel_version.as_deref().unwrap_or_default()
                    ),
                ),
                Ok(Err(error)) => return Err(unreachable(error.to_string())),
                Err(_) => return Err(unreachable("no answer within 15 s".to_owned())),
            };
        Ok(DockerSandbox {
            docker,
            endpoint,
            run_id: run_id.to_owned(),
            host_label: hostname(),
            proof_labels: liveness::labels_of_this_process(),
            anchor: tokio::sync::OnceCell::new(),
            images_ready: Mutex::new(HashSet::new()),
            live: Arc::new(Mutex::new(HashSet::new())),
            resolved_transport: Mutex::new(None),
            probing: tokio::sync::Mutex::new(()),
            probed: std::sync::atomic::AtomicBool::new(false),
            engine_version,
            built_runner: tokio::sync::OnceCell::new(),
            podman,
            tree: tokio::sync::Mutex::new(None),
            tree_lock: Arc::new(tokio::sync::RwLock::new(())),
            helper_failed: std::sync::atomic::AtomicBool::new(false),
            helper_runs: std::sync::atomic::AtomicUsize::new(0),
            skeletons: Mutex::new(HashSet::new()),
            spare: tokio::sync::Mutex::new(None),
            finishing: Mutex::new(Vec::new()),
            spare_wanted: Mutex::new(None),
            shared: super::SharedDirs::new(&settings.artifact_dir, run_id, &settings.deps_identity, ""),
            devcontainer: tokio::sync::OnceCell::new(),
            tool: tokio::sync::OnceCell::new(),
            tool_copy: tokio::sync::OnceCell::new(),
            settings,
        })
    }

    /// The run's build cache and the repository's dependency cache on the host.
    pub fn shared(&self) -> &super::SharedDirs {
        &self.shared
    }

    /// The run id on this sandbox's labels.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The settings it was built with.
    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }

    /// The engine endpoint in use.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The image a job of this kind runs in (for reports: the edit step's built image is named
    /// once it is known).
    pub fn image_for(&self, kind: JobKind) -> String {
        match kind {
            JobKind::Checker | JobKind::Verify | JobKind::Setup => {
                match (self.settings.image.as_str(), self.devcontainer.get()) {
                    (super::devcontainer::IMAGE_VALUE, Some(image)) => image.clone(),
                    (super::devcontainer::IMAGE_VALUE, None) => "the repository's dev container".to_owned(),
                    (image, _) => image.to_owned(),
                }
            }
            JobKind::EditStep => match (&self.settings.runner_image, self.built_runner.get()) {
                (Some(image), _) => image.clone(),
                (None, Some(built)) => built.tag.clone(),
                (None, None) => format!("{}:<sha256 of bork-ci>", runner_image::REPOSITORY),
            },
        }
    }

    /// Makes the image for a job of `kind` available and returns its name: the configured
    /// images (pulled as `sandbox.pull` says), or the edit step's image loaded from this
    /// executable when `sandbox.runner-image` is not set.
    pub async fn ready_image(&self, kind: JobKind) -> Result<String, SandboxError> {
        match (kind, &self.settings.runner_image) {
            (JobKind::EditStep, None) => {
                let built = self
                    .built_runner
                    .get_or_try_init(|| async {
                        let built = runner_image::ensure_cached(
                            &self.docker,
                            self.settings.runner_binary.clone(),
                            &self.settings.artifact_dir.join("cache").join("runner-image"),
                        )
                        .await?;
                        // Held by an idle container of this run: `gc` of older runner images
                        // (any bork-ci's) never removes it while the run lives.
                        match self.create_idle(&built.id, Vec::new(), "anchor").await {
                            Ok(anchor) => {
                                anchor.keep();
                            }
                            Err(error) => {
                                tracing::debug!(%error, "no anchor container for the runner image");
                            }
                        }
                        Ok::<_, SandboxError>(built)
                    })
                    .await?;
                // By id: a tag moved after the check changes nothing.
                Ok(built.id.clone())
            }
            _ => {
                let image = self.image_for(kind);
                self.ensure_image(&image).await?;
                Ok(image)
            }
        }
    }

    /// The id of the image the judges (checker, Verifier, setup) run in, made available first.
    pub async fn judge_image_id(&self, repo: &Path) -> Result<String, SandboxError> {
        let image = if self.settings.image == super::devcontainer::IMAGE_VALUE {
            let repo = std::fs::canonicalize(repo).map_err(|source| SandboxError::Prepare {
                what: "the repository path".to_owned(),
                source,
            })?;
            self.devcontainer_image(&repo).await?
        } else {
            self.ready_image(JobKind::Checker).await?
        };
        let found = self
            .docker
            .inspect_image(&image)
            .await
            .map_err(docker_error("inspect image"))?;
        Ok(found.id.unwrap_or(image))
    }

    /// The image of the repository's dev container (`sandbox.image = "devcontainer"`), found
    /// once per run on the tree as the run starts (the approved revision): `image` as
    /// `sandbox.pull` says, or `build.dockerfile` built through the Engine API, tagged by a
    /// digest of everything it is built from (`bork-ci-devcontainer:<digest>`) and used by id.
    /// The id bork-ci built is recorded under the artifact root ([`DEVCONTAINER_RECORDS`]); a
    /// tag that names another image (moved by anyone with the engine) is built again.
    pub async fn devcontainer_image(&self, repo: &Path) -> Result<String, SandboxError> {
        self.devcontainer
            .get_or_try_init(|| async {
                let repo_owned = repo.to_owned();
                let spec = tokio::task::spawn_blocking(move || super::devcontainer::read(&repo_owned))
                    .await
                    .map_err(|e| SandboxError::Backend(e.to_string()))?
                    .map_err(SandboxError::Backend)?;
                match spec {
                    super::devcontainer::DevContainer::Image(image) => {
                        self.ensure_image(&image).await?;
                        tracing::info!("the judges run in the dev container's image {image}");
                        Ok(image)
                    }
                    super::devcontainer::DevContainer::Build {
                        dockerfile,
                        context,
                        args,
                        target,
                    } => {
                        build_devcontainer(
                            &self.docker,
                            &self.settings.artifact_dir,
                            repo,
                            &dockerfile,
                            &context,
                            &args,
                            target.as_deref(),
                        )
                        .await
                    }
                }
            })
            .await
            .cloned()
    }

    /// Where the edit step sees its state directory: [`STATE_MOUNT`] over `bind`, over `copy`
    /// [`STATE_STDIO_DIR`] when the state goes over the step's stdio
    /// ([`Self::step_state_over_stdio`]), else [`STATE_COPY_DIR`] (asked after the transport
    /// was chosen).
    pub fn state_path(&self) -> &'static str {
        match self.chosen_transport() {
            Some(Transport::Copy) if self.step_state_over_stdio() => STATE_STDIO_DIR,
            Some(Transport::Copy) => STATE_COPY_DIR,
            _ => STATE_MOUNT,
        }
    }

    /// Whether the edit step gets its state on stdin and gives its result on stdout: over
    /// `copy` (asked after the transport was chosen), with the runner image this executable
    /// makes (a configured `sandbox.runner-image` may hold a bork-ci without `--stdio`).
    pub fn step_state_over_stdio(&self) -> bool {
        self.chosen_transport() == Some(Transport::Copy) && self.settings.runner_image.is_none()
    }

    /// Over `copy`: true once the helper that unpacks the tree failed and the engine extracts
    /// it instead (slower, and the whole tree each time).
    pub fn tree_through_engine(&self) -> bool {
        self.helper_failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Over `copy`: how many times a helper container was started to bring the tree volume up
    /// to date (a fill, or an update the tree's holder could not take).
    pub fn tree_helper_runs(&self) -> usize {
        self.helper_runs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The transport the edit step will use on `repo` (probing for `auto` with its image). The
    /// step is made for its transport, so a remembered `bind` is proven first, not by the
    /// step's own container.
    pub async fn edit_step_transport(&self, repo: &Path) -> Result<Transport, SandboxError> {
        if let Some(chosen) = self.chosen_transport()
            && !self.bind_unproven()
        {
            return Ok(chosen);
        }
        let image = self.ready_image(JobKind::EditStep).await?;
        let transport = self.transport(repo, &image).await;
        self.prove_bind_now(repo, &image).await;
        Ok(self.chosen_transport().unwrap_or(transport))
    }

    /// Makes sure `image` is present, pulling it as `sandbox.pull` says (progress as log lines).
    pub async fn ensure_image(&self, image: &str) -> Result<(), SandboxError> {
        if self
            .images_ready
            .lock()
            .map(|ready| ready.contains(image))
            .unwrap_or(false)
        {
            return Ok(());
        }
        let present = match self.docker.inspect_image(image).await {
            Ok(_) => true,
            Err(error) if is_not_found(&error) => false,
            Err(error) => return Err(docker_error("inspect image")(error)),
        };
        match (self.settings.pull, present) {
            (PullPolicy::Never, false) => {
                return Err(SandboxError::ImageMissing {
                    image: image.to_owned(),
                    reason: "it is not present locally and sandbox.pull is `never`".to_owned(),
                });
            }
            (PullPolicy::Missing, false) | (PullPolicy::Always, _) => self.pull(image).await?,
            (_, true) => {}
        }
        // Record exactly what ran: a tag can move, the image id and digests cannot (K29).
        if let Ok(inspected) = self.docker.inspect_image(image).await {
            tracing::info!(
                "image {image} is {} (digests: {})",
                inspected.id.as_deref().unwrap_or("unknown"),
                inspected.repo_digests.as_deref().unwrap_or_default().join(", ")
            );
        }
        if let Ok(mut ready) = self.images_ready.lock() {
            ready.insert(image.to_owned());
        }
        Ok(())
    }

    async fn pull(&self, image: &str) -> Result<(), SandboxError> {
        let options = CreateImageOptions {
            from_image: Some(image.to_owned()),
            ..Default::default()
        };
        let mut progress = self.docker.create_image(Some(options), None, None);
        tracing::info!(image, "pulling {image}");
        // One line per layer and state, not per progress tick.
        let mut said = HashSet::new();
        while let Some(item) = progress.next().await {
            match item {
                Ok(info) => {
                    if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                        return Err(SandboxError::ImageMissing {
                            image: image.to_owned(),
                            reason: format!("pulling it failed: {detail}"),
                        });
                    }
                    let status = info.status.unwrap_or_default();
                    let id = info.id.unwrap_or_default();
                    if said.insert((id.clone(), status.clone())) {
                        tracing::debug!(image, layer = %id, "pulling {image}: {id} {status}");
                    }
                }
                Err(error) => {
                    return Err(SandboxError::ImageMissing {
                        image: image.to_owned(),
                        reason: format!("it is not present locally and pulling it failed: {error}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Runs `job` in a fresh container and removes the container (and the volumes made for
    /// it), whatever happens.
    pub async fn run(&self, repo: &Path, job: &Job) -> Result<JobOutput, SandboxError> {
        if job.kind != JobKind::EditStep {
            return self.run_job(repo, job).await;
        }
        // The edit step waits on the model: the next judge's volumes are made meanwhile.
        let (result, ()) = tokio::join!(self.run_job(repo, job), self.prepare_spare());
        result
    }

    async fn run_job(&self, repo: &Path, job: &Job) -> Result<JobOutput, SandboxError> {
        let started = Instant::now();
        let (mut prepared, guard) = self.prepare_and_create(repo, job, job.argv.clone()).await?;
        if finishes_later(job, &prepared) {
            let ran = self.run_in(&guard.id, job, started).await;
            if ran.is_ok() {
                // The verdict is in the output: the copy back and the removals go on meanwhile.
                prepared.tree_guard = None;
                self.finish_later(guard, prepared);
                return ran;
            }
            guard.remove().await;
            self.release(prepared).await;
            return ran;
        }
        let result = async {
            let result = async {
                let mut output = self
                    .run_in_with_stdin(
                        &guard.id,
                        job,
                        started,
                        prepared.state_stdio.clone().map(Stdin::State),
                    )
                    .await?;
                self.stage_out(&guard.id, &prepared).await?;
                if let Some(state) = &prepared.state_stdio {
                    state_result_back(&mut output, state)?;
                }
                Ok(output)
            }
            .await;
            guard.remove().await;
            result
        }
        .await;
        self.release(prepared).await;
        result
    }

    pub(super) async fn run_in(
        &self,
        id: &str,
        job: &Job,
        started: Instant,
    ) -> Result<JobOutput, SandboxError> {
        self.run_in_with_stdin(id, job, started, None).await
    }

    /// [`Self::run_in`], with `stdin` sent to the job's stdin while its container starts: the
    /// edit step's state folder ([`state_stdio::send`]; its stdout is then kept up to
    /// [`state_stdio::RESULT_LIMIT`]) or an archive still being made.
    async fn run_in_with_stdin(
        &self,
        id: &str,
        job: &Job,
        started: Instant,
        stdin: Option<Stdin>,
    ) -> Result<JobOutput, SandboxError> {
        let attach = AttachContainerOptions {
            stream: true,
            stdin: stdin.is_some(),
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let attached = self
            .docker
            .attach_container(id, Some(attach))
            .await
            .map_err(docker_error("attach"))?;
        let stdout_cap = if matches!(stdin, Some(Stdin::State(_))) {
            state_stdio::RESULT_LIMIT as usize
        } else {
            job.output_cap
        };
        let reader = tokio::spawn(read_capped(
            attached.output,
            stdout_cap,
            job.output_cap,
            job.live_stderr,
        ));
        // Written while the container starts: the engine takes stdin once it runs.
        let writer = stdin.map(|stdin| tokio::spawn(stdin.send(attached.input)));
        self.docker
            .start_container(id, None::<StartContainerOptions>)
            .await
            .map_err(docker_error("start"))?;
        let mut wait = self.docker.wait_container(id, None::<WaitContainerOptions>);
        let timed_out = tokio::time::timeout(job.timeout, wait.next()).await.is_err();
        if timed_out {
            self.kill(id).await;
        }
        if let Some(mut writer) = writer {
            // The engine closes stdin when the job ends; bound the wait all the same.
            match tokio::time::timeout(Duration::from_secs(5), &mut writer).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(Unsent::Making(source)))) => {
                    return Err(SandboxError::Prepare {
                        what: "the archive for the job's stdin".into(),
                        source,
                    });
                }
                Ok(Ok(Err(Unsent::Sending(error)))) => tracing::warn!("sending the job its stdin: {error}"),
                Ok(Err(_)) | Err(_) => {
                    writer.abort();
                    tracing::warn!("sending the job its stdin did not end");
                }
            }
        }
        let output = join_reader(reader).await;
        let mut state = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(docker_error("inspect"))?
            .state
            .unwrap_or_default();
        if !timed_out {
            state.oom_killed = self.oom_killed(id, state.oom_killed, state.exit_code).await;
        }
        let outcome = if timed_out {
            Outcome::TimedOut
        } else if self.out_of_memory(state.oom_killed, state.exit_code) {
            Outcome::OomKilled
        } else {
            Outcome::Exited(exit_code(state.exit_code))
        };
        Ok(output.into_job_output(outcome, started.elapsed()))
    }

    /// Runs `commands` one after another in one fresh container (`docker exec` each), stopping
    /// after the first that does not exit 0; the container is removed afterwards.
    pub async fn run_sequence(
        &self,
        repo: &Path,
        job: &Job,
        commands: &[Vec<String>],
    ) -> Result<Vec<JobOutput>, SandboxError> {
        // PID 1 only waits; the steps are `exec`ed so each has its own streams and exit code.
        let idle = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done".to_owned(),
        ];
        let (prepared, guard) = self.prepare_and_create(repo, job, idle).await?;
        let result = async {
            let result = async {
                let outputs = self.sequence_in(&guard.id, job, commands, &prepared).await?;
                self.stage_out(&guard.id, &prepared).await?;
                Ok(outputs)
            }
            .await;
            guard.remove().await;
            result
        }
        .await;
        self.release(prepared).await;
        result
    }

    async fn sequence_in(
        &self,
        id: &str,
        job: &Job,
        commands: &[Vec<String>],
        prepared: &Prepared,
    ) -> Result<Vec<JobOutput>, SandboxError> {
        self.docker
            .start_container(id, None::<StartContainerOptions>)
            .await
            .map_err(docker_error("start"))?;
        let deadline = Instant::now() + job.timeout;
        let mut outputs = Vec::new();
        for argv in commands {
            let started = Instant::now();
            let remaining = deadline.saturating_duration_since(started);
            let output = if remaining.is_zero() {
                Captured::default().into_job_output(Outcome::TimedOut, Duration::ZERO)
            } else {
                self.exec_one(id, argv, remaining, job.output_cap, prepared, started)
                    .await?
            };
            let passed = output.outcome == Outcome::Exited(0);
            outputs.push(output);
            if !passed {
                break;
            }
        }
        Ok(outputs)
    }

    async fn exec_one(
        &self,
        id: &str,
        argv: &[String],
        remaining: Duration,
        cap: usize,
        prepared: &Prepared,
        started: Instant,
    ) -> Result<JobOutput, SandboxError> {
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv.to_vec()),
            env: prepared.body.env.clone(),
            user: prepared.body.user.clone(),
            working_dir: Some(REPO_MOUNT.to_owned()),
            privileged: Some(false),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(id, config)
            .await
            .map_err(docker_error("exec create"))?;
        let started_exec = self
            .docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
            .map_err(docker_error("exec start"))?;
        let StartExecResults::Attached { output, .. } = started_exec else {
            return Err(SandboxError::Docker {
                operation: "exec start",
                reason: "the engine did not attach the exec streams".to_owned(),
            });
        };
        let reader = tokio::spawn(read_capped(output, cap, cap, false));
        let mut reader = reader;
        let captured = match tokio::time::timeout(remaining, &mut reader).await {
            Ok(Ok(captured)) => captured,
            Ok(Err(join)) => {
                return Err(SandboxError::Docker {
                    operation: "exec output",
                    reason: join.to_string(),
                });
            }
            Err(_) => {
                self.kill(id).await;
                let captured = join_reader(reader).await;
                return Ok(captured.into_job_output(Outcome::TimedOut, started.elapsed()));
            }
        };
        let inspected = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(docker_error("exec inspect"))?;
        let reported = self.reported_oom(id).await;
        let container_oom = self.out_of_memory(
            self.oom_killed(id, reported, inspected.exit_code).await,
            inspected.exit_code,
        );
        let outcome = if container_oom {
            Outcome::OomKilled
        } else {
            Outcome::Exited(exit_code(inspected.exit_code))
        };
        Ok(captured.into_job_output(outcome, started.elapsed()))
    }

    /// The container's `OOMKilled`, as the engine reports it now (`None`: it could not say).
    async fn reported_oom(&self, id: &str) -> Option<bool> {
        self.docker
            .inspect_container(id, None)
            .await
            .ok()
            .and_then(|c| c.state)
            .and_then(|s| s.oom_killed)
    }

    /// The container's `OOMKilled` as the engine reports it, given a moment to settle when the
    /// job died of SIGKILL under a memory limit: dockerd can record the exit before the kernel's
    /// OOM event reaches it (seen on dockerd 20.10 in a container), so a first `false` is asked
    /// again for up to a second.
    async fn oom_killed(&self, id: &str, reported: Option<bool>, exit_code: Option<i64>) -> Option<bool> {
        if reported == Some(true) || exit_code != Some(137) || self.settings.memory.is_none() {
            return reported;
        }
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let later = self.reported_oom(id).await;
            if later == Some(true) {
                return later;
            }
        }
        reported
    }

    /// Whether a job that bork-ci did not kill ended out of memory: the engine says so, or (on
    /// Podman, which does not say so on cgroup v1) it died of SIGKILL under a memory limit.
    fn out_of_memory(&self, oom_killed: Option<bool>, exit_code: Option<i64>) -> bool {
        oom_killed == Some(true) || (self.podman && exit_code == Some(137) && self.settings.memory.is_some())
    }

    /// Whether the engine is Podman (see [`Podman`]).
    pub fn is_podman(&self) -> bool {
        self.podman
    }

    async fn kill(&self, id: &str) {
        let options = KillContainerOptions {
            signal: "SIGKILL".to_owned(),
        };
        if let Err(error) = self.docker.kill_container(id, Some(options)).await {
            tracing::debug!(container = id, %error, "kill after timeout");
        }
    }

    /// Removes every container and volume of this run (for a SIGINT/SIGTERM handler). Returns
    /// how many were removed.
    pub async fn cleanup_all(&self) -> Result<usize, SandboxError> {
        let filter = format!("{}={}", labels::RUN, self.run_id);
        // The kept tree's state is written, and the anchors and holders go, while the last
        // judge's artifacts come back (none of the three touches what another does).
        let holders = async {
            let listed = self.list_labelled(&filter).await?;
            let holders: Vec<String> = listed
                .into_iter()
                .filter(|(_, labelled)| {
                    labelled
                        .get(labels::STEP)
                        .is_some_and(|step| step == "anchor" || step == "tree-holder")
                })
                .filter_map(|(id, _)| id)
                .collect();
            remove_containers(&self.docker, &holders).await;
            Ok::<usize, SandboxError>(holders.len())
        };
        let ((), (), holders) = tokio::join!(self.settle(), self.release_kept_tree(), holders);
        let mut removed = holders?;
        let rest: Vec<String> = self
            .list_labelled(&filter)
            .await?
            .into_iter()
            .filter_map(|(id, _)| id)
            .collect();
        remove_containers(&self.docker, &rest).await;
        removed += rest.len();
        let volumes = self.list_volumes(&filter).await?;
        futures_util::future::join_all(
            volumes
                .iter()
                .map(|volume| remove_volume(&self.docker, &volume.name)),
        )
        .await;
        removed += volumes.len();
        if let Ok(mut live) = self.live.lock() {
            live.clear();
        }
        if let Ok(mut tree) = self.tree.try_lock() {
            *tree = None;
        }
        Ok(removed)
    }

    /// How many times a container list is asked for before a state that does not parse is an
    /// error (see `list_labelled`): 10 s at most.
    const LIST_ATTEMPTS: u32 = 50;

    async fn list_labelled(
        &self,
        label_filter: &str,
    ) -> Result<Vec<(Option<String>, HashMap<String, String>)>, SandboxError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![label_filter.to_owned()],
            )])),
            ..Default::default()
        };
        // Podman before 5 (Debian's 4.3 among them) can list a container that is being stopped
        // in the state `stopped`, which the Engine API does not have, and bollard then refuses
        // the whole list. The state lasts only while a container stops, so the list is asked
        // again, a bounded number of times.
        let mut attempt = 1;
        let containers = loop {
            match self.docker.list_containers(Some(options.clone())).await {
                Err(bollard::errors::Error::JsonDataError { message, .. })
                    if attempt < Self::LIST_ATTEMPTS && message.contains("unknown variant") =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                listed => break listed.map_err(docker_error("list containers"))?,
            }
        };
        Ok(containers
            .into_iter()
            .map(|c| (c.id, c.labels.unwrap_or_default()))
            .collect())
    }

    async fn list_volumes(&self, label_filter: &str) -> Result<Vec<bollard::models::Volume>, SandboxError> {
        let options = ListVolumesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![label_filter.to_owned()],
            )])),
        };
        let listed = self
            .docker
            .list_volumes(Some(options))
            .await
            .map_err(docker_error("list volumes"))?;
        Ok(listed.volumes.unwrap_or_default())
    }

    fn labels(&self, kind: JobKind) -> HashMap<String, String> {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut labelled = HashMap::from([
            (labels::MARK.to_owned(), "1".to_owned()),
            (labels::RUN.to_owned(), self.run_id.clone()),
            (labels::STEP.to_owned(), kind.as_str().to_owned()),
            (labels::CREATED.to_owned(), created.to_string()),
            (labels::LEASE.to_owned(), self.lease_until().to_string()),
            (labels::HOST.to_owned(), self.host_label.clone()),
            (labels::PID.to_owned(), std::process::id().to_string()),
        ]);
        labelled.extend(self.proof_labels.iter().cloned());
        labelled
    }

    /// Creates, once a run, a container that never starts and mounts the run's cache volume:
    /// while it exists the engine counts the cache as used, so no `gc` (of this run or any
    /// other) finds it unused between two of this run's jobs. It carries the run's labels and
    /// lease, goes with the run's other containers at its end, and after a killed run's lease.
    async fn anchor_cache(&self, volume: &str, image: &str) {
        self.anchor
            .get_or_init(|| async {
                let mounts = vec![transport::volume(volume, DEPS_MOUNT, true)];
                match self.create_idle(image, mounts, "anchor").await {
                    Ok(anchor) => {
                        anchor.keep();
                    }
                    Err(error) => {
                        tracing::debug!(%error, "no anchor container for the cache volume {volume}");
                    }
                }
            })
            .await;
    }

    /// The mounts that put bork-ci itself at [`runner_image::TOOL_DIR`], read-only, for a
    /// judge of `image`: over `bind` its files from this host (the script a dynamically linked
    /// executable needs written once into a scratch folder); over `copy` the executable's volume
    /// ([`DockerSandbox::tool_volume`]). Made once per transport a run uses. A failure is logged once
    /// and the judges run without it (a checker that does not call `bork-ci` needs nothing).
    async fn tool_mounts(&self, image: &str, copy: bool) -> Option<Vec<Mount>> {
        let cell = if copy { &self.tool_copy } else { &self.tool };
        let prepared = cell
            .get_or_init(|| async {
                let started = Instant::now();
                let made = async {
                    let executable = std::env::current_exe().map_err(|source| SandboxError::Prepare {
                        what: "bork-ci's own executable for the judges".to_owned(),
                        source,
                    })?;
                    let layout = tokio::task::spawn_blocking(move || runner_image::tool_layout(&executable))
                        .await
                        .map_err(|error| SandboxError::Backend(error.to_string()))??;
                    if copy {
                        return self.tool_volume(image, layout).await.map(ToolMounts::Volume);
                    }
                    let scratch = tempfile::Builder::new()
                        .prefix("bork-ci-tool-")
                        .tempdir()
                        .map_err(|source| SandboxError::Prepare {
                            what: "a scratch folder for bork-ci's own script".to_owned(),
                            source,
                        })?;
                    let mut binds = Vec::new();
                    for (inside, file) in layout {
                        let host = match file {
                            runner_image::ToolFile::Host(host) => host,
                            runner_image::ToolFile::Text(text) => {
                                let host = scratch.path().join(inside.replace('/', "-"));
                                bork_ci_core::safe_fs::write_atomic(&host, text.as_bytes())
                                    .and_then(|()| {
                                        std::fs::set_permissions(
                                            &host,
                                            std::os::unix::fs::PermissionsExt::from_mode(0o755),
                                        )
                                    })
                                    .map_err(|source| SandboxError::Prepare {
                                        what: "bork-ci's own script for the judges".to_owned(),
                                        source,
                                    })?;
                                host
                            }
                        };
                        binds.push((path_str(&host)?, format!("{}/{inside}", runner_image::TOOL_DIR)));
                    }
                    Ok::<_, SandboxError>(ToolMounts::Binds {
                        binds,
                        _scratch: scratch,
                    })
                };
                match made.await {
                    Ok(mounts) => {
                        tracing::debug!(
                            "bork-ci for the judges ready in {} ms",
                            started.elapsed().as_millis()
                        );
                        Some(mounts)
                    }
                    Err(error) => {
                        tracing::warn!("judges run without `bork-ci` on their PATH: {error}");
                        None
                    }
                }
            })
            .await
            .as_ref()?;
        Some(match prepared {
            // Over `copy`, the executable's volume; over `bind`, this host's files.
            ToolMounts::Volume(name) => vec![transport::volume(name, runner_image::TOOL_DIR, true)],
            ToolMounts::Binds { binds, .. } => binds
                .iter()
                .map(|(host, inside)| bind(host, inside, true))
                .collect(),
        })
    }

    /// Over `copy`: the volume holding bork-ci's files for the judges (`layout`), one per
    /// executable (named by [`runner_image::tool_key`]), filled once and kept across runs (a
    /// cache volume, for `bork-ci gc`). A run holds it with a container that never starts, so no
    /// `gc` removes it while the run lives. A run that finds it takes it only once it shows the
    /// mark its filling wrote last; one being filled by another run, or left half filled, is
    /// not used: the run fills a volume of its own, as every run did before.
    async fn tool_volume(
        &self,
        image: &str,
        mut layout: Vec<(String, runner_image::ToolFile)>,
    ) -> Result<String, SandboxError> {
        let key = transport::digest16(&runner_image::tool_key(&layout));
        layout.push((
            TOOL_COMPLETE.to_owned(),
            runner_image::ToolFile::Text(key.clone()),
        ));
        let name = format!("bork-ci-tool-{key}");
        let mut volume_labels = self.kept_volume_labels();
        volume_labels.insert(labels::STEP.to_owned(), "tool".to_owned());
        let ours = uuid::Uuid::new_v4().simple().to_string();
        volume_labels.insert(labels::VOLUME_ID.to_owned(), ours.clone());
        let id = self.create_or_find_volume(&name, volume_labels).await?;
        let made = id == ours;
        // The volume's mark of completeness, looked for while its holder is made.
        let (holder, marked) = tokio::join!(
            self.create_idle(
                image,
                vec![transport::volume(&name, runner_image::TOOL_DIR, !made)],
                "anchor",
            ),
            async {
                !made && !id.is_empty() && self.docker.inspect_volume(&tool_mark(&name, &id)).await.is_ok()
            }
        );
        let holder = holder?;
        if made {
            if let Err(error) = self.fill_tool_volume(&holder.id, &layout).await {
                holder.remove().await;
                remove_volume(&self.docker, &name).await;
                return Err(error);
            }
            holder.keep();
            self.mark_tool_volume(&name, &id).await;
            return Ok(name);
        }
        if marked {
            holder.keep();
            return Ok(name);
        }
        // No mark (the volume of an older bork-ci, or its mark removed): the file its filling
        // wrote last.
        let complete = self
            .read_back(&holder.id, format!("{}/{TOOL_COMPLETE}", runner_image::TOOL_DIR))
            .await
            .is_ok_and(|(bytes, _)| bytes == key.as_bytes());
        if complete {
            holder.keep();
            if !id.is_empty() {
                self.mark_tool_volume(&name, &id).await;
            }
            return Ok(name);
        }
        holder.remove().await;
        tracing::debug!("the judges' bork-ci volume {name} is not complete; this run fills one of its own");
        let own = format!(
            "bork-ci-tool-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        );
        self.create_volume(&own, self.run_volume_labels("tool")).await?;
        let helper = self
            .create_idle(
                image,
                vec![transport::volume(&own, runner_image::TOOL_DIR, false)],
                "tool",
            )
            .await?;
        let filled = self.fill_tool_volume(&helper.id, &layout).await;
        helper.remove().await;
        filled.map(|()| own)
    }

    /// Marks the judges' bork-ci volume `name` of id `id` whole: an empty volume named for both
    /// ([`tool_mark`]), made once the volume is filled. A later run learns from one inspection
    /// that the volume is whole, where reading its last file back mounts a container.
    async fn mark_tool_volume(&self, name: &str, id: &str) {
        let mut mark_labels = self.kept_volume_labels();
        mark_labels.insert(labels::STEP.to_owned(), "tool-mark".to_owned());
        mark_labels.insert(labels::MARKS.to_owned(), name.to_owned());
        mark_labels.insert(labels::MARKS_ID.to_owned(), id.to_owned());
        if let Err(error) = self.create_volume(&tool_mark(name, id), mark_labels).await {
            tracing::debug!("the judges' bork-ci volume is not marked whole: {error}");
        }
    }

    /// Uploads the judges' bork-ci folder of `layout` through container `id`.
    async fn fill_tool_volume(
        &self,
        id: &str,
        layout: &[(String, runner_image::ToolFile)],
    ) -> Result<(), SandboxError> {
        let layout = layout.to_vec();
        let folder = tokio::task::spawn_blocking(move || runner_image::tool_folder(&layout))
            .await
            .map_err(|error| SandboxError::Backend(error.to_string()))??;
        self.upload(id, runner_image::TOOL_DIR, folder).await
    }

    /// The `PATH` `image` sets, or the engine's default when it sets none.
    async fn image_path(&self, image: &str) -> String {
        const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        let inspected = self.docker.inspect_image(image).await.ok();
        inspected
            .and_then(|image| image.config)
            .and_then(|config| config.env)
            .and_then(|env| {
                env.into_iter()
                    .find_map(|pair| pair.strip_prefix("PATH=").map(str::to_owned))
            })
            .unwrap_or_else(|| DEFAULT_PATH.to_owned())
    }

    /// Unix seconds until which an object created now is leased: now plus the run's whole
    /// budget and a grace (no job of the run can outlast that, whenever it starts).
    pub fn lease_until(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        now.saturating_add(self.settings.lease.as_secs())
    }

    /// The dependency cache in use as this engine holds it (see `Sandbox::setup_done`): over
    /// `bind` the host folder; over `copy` its volume and its id ([`labels::VOLUME_ID`]), or
    /// `None` when there is no such volume yet or it has no id.
    pub async fn deps_cache_stamp(&self, repo: &Path) -> Option<String> {
        let repo = std::fs::canonicalize(repo).ok()?;
        let image = if self.settings.image == super::devcontainer::IMAGE_VALUE {
            self.devcontainer_image(&repo).await.ok()?
        } else {
            self.ready_image(JobKind::Setup).await.ok()?
        };
        match self.transport(&repo, &image).await {
            Transport::Copy => {
                let name = transport::deps_volume(&self.shared.deps_key());
                let volume = self.docker.inspect_volume(&name).await.ok()?;
                let id = transport::volume_id(&volume)?;
                Some(format!("volume {name} id {id}"))
            }
            Transport::Bind | Transport::Auto => Some("host folder".to_owned()),
        }
    }

    /// Builds the container description for `job` (its profile), and over `copy` the volumes
    /// and archives it needs; the image is made available first.
    async fn prepare(&self, repo: &Path, job: &Job, cmd: Vec<String>) -> Result<Prepared, SandboxError> {
        let repo = std::fs::canonicalize(repo).map_err(prepare_error("the repository path"))?;
        let image = match job.kind {
            JobKind::Checker | JobKind::Verify | JobKind::Setup
                if self.settings.image == super::devcontainer::IMAGE_VALUE =>
            {
                self.devcontainer_image(&repo).await?
            }
            kind => self.ready_image(kind).await?,
        };
        let transport = self.transport(&repo, &image).await;
        let mut prepared = Prepared {
            body: ContainerCreateBody::default(),
            _scratch: None,
            build: super::JobBuild::default(),
            uploads: Vec::new(),
            artifacts_back: None,
            state_back: None,
            state_stdio: None,
            volumes: Vec::new(),
            tree_guard: None,
            tree_pending: None,
            over_bind: false,
            bind_proof: None,
            skeleton_sent: None,
        };
        let filled = self
            .prepare_into(&repo, job, cmd, image, transport, &mut prepared)
            .await;
        match filled {
            Ok(()) => Ok(prepared),
            Err(error) => {
                self.release(prepared).await;
                Err(error)
            }
        }
    }

    /// Prepares `job`, creates its container and stages it in ([`Self::create_staged`]). Under
    /// a remembered `bind` not yet proven, the container proves it before it starts; if it
    /// cannot, the job is prepared again over `copy`.
    async fn prepare_and_create(
        &self,
        repo: &Path,
        job: &Job,
        cmd: Vec<String>,
    ) -> Result<(Prepared, Container), SandboxError> {
        loop {
            let mut prepared = self.prepare(repo, job, cmd.clone()).await?;
            let container = match self.create_staged(&mut prepared, job.kind).await {
                Ok(container) => container,
                Err(error) => {
                    let unproven = prepared.over_bind && self.bind_unproven();
                    self.release(prepared).await;
                    if unproven {
                        // An engine that does not have this host's paths refuses to make the
                        // container at all: the remembered bind no longer holds.
                        self.bind_disproven(
                            repo,
                            &format!("a container with this host's paths could not be made: {error}"),
                        );
                        continue;
                    }
                    return Err(error);
                }
            };
            if prepared.over_bind && self.bind_unproven() {
                let proven = self
                    .prove_remembered_bind(
                        &container.id,
                        repo,
                        prepared.bind_proof.as_ref(),
                        job.kind != JobKind::EditStep,
                    )
                    .await;
                if proven.is_err() {
                    container.remove().await;
                    self.release(prepared).await;
                    continue;
                }
            }
            return Ok((prepared, container));
        }
    }

    /// Creates the job's container and puts the prepared archives in. Over `copy`, when the
    /// run's tree volume is there already, the tree is brought up to date while the container
    /// is made and staged (the two talk to the engine side by side); the job then holds the
    /// tree still until it ends. Should the update have to fill a new volume, the container is
    /// made again on it.
    async fn create_staged(&self, prepared: &mut Prepared, kind: JobKind) -> Result<Container, SandboxError> {
        let Some(pending) = prepared.tree_pending.take() else {
            return self.create_and_stage_in(prepared, kind).await;
        };
        let syncing = async {
            let writing = Arc::clone(&self.tree_lock).write_owned().await;
            // Boxed: its many engine calls would otherwise make every job's future that much larger.
            let name = Box::pin(self.sync_tree(&pending.repo, &pending.image)).await?;
            // Held still from the update to the job's end, with no other update between.
            Ok::<_, SandboxError>((name, writing.downgrade()))
        };
        let (synced, staged) = tokio::join!(syncing, self.create_and_stage_in(prepared, kind));
        let (name, tree_guard) = match synced {
            Ok(synced) => synced,
            Err(error) => {
                if let Ok(container) = staged {
                    container.remove().await;
                }
                return Err(error);
            }
        };
        prepared.tree_guard = Some(tree_guard);
        if name == pending.name {
            return staged;
        }
        // A new volume: the container made on the old one goes (an engine may also have refused
        // to make it, the old volume gone), and with it the old volume.
        if let Ok(container) = staged {
            container.remove().await;
        }
        remove_volume(&self.docker, &pending.name).await;
        let mounts = prepared
            .body
            .host_config
            .as_mut()
            .and_then(|host| host.mounts.as_mut());
        for mount in mounts.into_iter().flatten() {
            if mount.target.as_deref() == Some(REPO_MOUNT) {
                mount.source = Some(name.clone());
            }
        }
        self.create_and_stage_in(prepared, kind).await
    }

    async fn create_and_stage_in(
        &self,
        prepared: &Prepared,
        kind: JobKind,
    ) -> Result<Container, SandboxError> {
        let container = self.create(prepared, kind).await?;
        match self.stage_in(&container.id, prepared).await {
            Ok(()) => Ok(container),
            Err(error) => {
                container.remove().await;
                Err(error)
            }
        }
    }

    /// Copy transport: puts the prepared archives into the created container.
    async fn stage_in(&self, id: &str, prepared: &Prepared) -> Result<(), SandboxError> {
        // Each into a volume of its own: side by side.
        futures_util::future::try_join_all(
            prepared
                .uploads
                .iter()
                .map(|(path, archive)| self.upload(id, path, archive.clone())),
        )
        .await?;
        if let (Some(sent), Ok(mut skeletons)) = (&prepared.skeleton_sent, self.skeletons.lock()) {
            skeletons.insert(sent.clone());
        }
        Ok(())
    }

    /// Copy transport: brings the artifacts and the edit step's result back to the host.
    async fn stage_out(&self, id: &str, prepared: &Prepared) -> Result<(), SandboxError> {
        if let Some((run_dir, tmp_dir)) = &prepared.artifacts_back {
            transport::copy_artifacts_and_tmp_back(&self.docker, id, run_dir, tmp_dir).await?;
        }
        if let Some(state_dir) = &prepared.state_back {
            self.copy_state_back(id, state_dir, crate::sandbox::STATE_OUTPUT)
                .await?;
        }
        Ok(())
    }

    /// Copies a judge's artifacts back, then removes its container and the volumes made for it,
    /// in a task of its own: the run goes on. [`Self::settle`] waits for every such task. The
    /// verdict is already returned, so a failed copy is a warning (the artifacts are for people).
    fn finish_later(&self, container: Container, prepared: Prepared) {
        let docker = self.docker.clone();
        let task = tokio::spawn(async move {
            if let Some((run_dir, tmp_dir)) = &prepared.artifacts_back
                && let Err(error) =
                    transport::copy_artifacts_and_tmp_back(&docker, &container.id, run_dir, tmp_dir).await
            {
                tracing::warn!(
                    "the job's artifacts were not copied back into {}: {error}",
                    run_dir.display()
                );
            }
            container.remove().await;
            for name in &prepared.volumes {
                remove_volume(&docker, name).await;
            }
        });
        if let Ok(mut finishing) = self.finishing.lock() {
            finishing.retain(|task| !task.is_finished());
            finishing.push(task);
        }
    }

    /// Waits until every judge whose result was returned before its artifacts came back has
    /// its artifacts on the host and its container and volumes removed. The run's cleanup
    /// (`cleanup_all`) does this first; so does anything that removes a volume a finished
    /// judge may still name.
    pub async fn settle(&self) {
        let tasks = self
            .finishing
            .lock()
            .map(|mut finishing| std::mem::take(&mut *finishing))
            .unwrap_or_default();
        for task in tasks {
            if let Err(error) = task.await {
                tracing::warn!("finishing a job: {error}");
            }
        }
    }

    /// Removes the volumes made for one job.
    async fn release(&self, prepared: Prepared) {
        for name in &prepared.volumes {
            remove_volume(&self.docker, name).await;
        }
    }

    async fn create(&self, prepared: &Prepared, kind: JobKind) -> Result<Container, SandboxError> {
        let image = prepared.body.image.clone().unwrap_or_default();
        self.new_container(kind.as_str(), prepared.body.clone())
            .await
            .map_err(|error| match error {
                ref e if is_not_found(e) => SandboxError::ImageMissing {
                    image: image.clone(),
                    reason: e.to_string(),
                },
                other => docker_error("create")(other),
            })
    }

    /// Creates a container named for `role` (see [`create_named`]): the one start of every
    /// container's life, which [`Container`] ends on every path.
    pub(super) async fn new_container(
        &self,
        role: &str,
        body: ContainerCreateBody,
    ) -> Result<Container, bollard::errors::Error> {
        let created = create_named(&self.docker, role, body).await?;
        Ok(self.tracked(created))
    }

    /// [`DockerSandbox::new_container`] under exactly `name`: the engine refuses it while a
    /// container of that name exists (what makes the name a lock, see `transport::claim_kept`).
    pub(super) async fn new_container_as(
        &self,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<Container, bollard::errors::Error> {
        let created = create_as(&self.docker, name.to_owned(), body).await?;
        Ok(self.tracked(created))
    }

    /// A handle on container `created`, counted among this run's live containers.
    fn tracked(&self, created: String) -> Container {
        if let Ok(mut live) = self.live.lock() {
            live.insert(created.clone());
        }
        Container {
            docker: self.docker.clone(),
            id: created,
            live: Arc::clone(&self.live),
            armed: true,
        }
    }
}

/// The name of the mark that the judges' bork-ci volume `name` of id `id` ([`labels::VOLUME_ID`])
/// was filled whole: a volume of this name exists only once it was. A volume made again under
/// the same name has another id, so an older mark does not vouch for it.
fn tool_mark(name: &str, id: &str) -> String {
    format!("{name}-whole-{id}")
}

/// Largest build context of a dev container sent to the engine.
const DEVCONTAINER_CONTEXT_MAX: u64 = 1 << 30;

/// Builds the dev container's Dockerfile, or reuses the image built from the same inputs: the
/// tag is a digest of the context's files (names, modes, contents), the Dockerfile's path, the
/// build arguments and the target.
async fn build_devcontainer(
    docker: &Docker,
    artifact_root: &Path,
    repo: &Path,
    dockerfile: &Path,
    context: &Path,
    args: &std::collections::BTreeMap<String, String>,
    target: Option<&str>,
) -> Result<String, SandboxError> {
    let context_dir = repo.join(context);
    let dockerfile_in_context = dockerfile.strip_prefix(context).map_err(|_| {
        SandboxError::Backend(format!(
            "the dev container's Dockerfile {} is not inside its build context {}",
            dockerfile.display(),
            if context.as_os_str().is_empty() {
                ".".to_owned()
            } else {
                context.display().to_string()
            }
        ))
    })?;
    let dir = context_dir.clone();
    let tar = tokio::task::spawn_blocking(move || archive::context(&dir, DEVCONTAINER_CONTEXT_MAX))
        .await
        .map_err(|e| SandboxError::Backend(e.to_string()))?
        .map_err(|source| SandboxError::Prepare {
            what: format!("the dev container's build context {}", context_dir.display()),
            source,
        })?;
    let mut hasher = sha2::Sha256::new();
    use sha2::Digest as _;
    hasher.update(&tar);
    hasher.update(dockerfile_in_context.to_string_lossy().as_bytes());
    for (name, value) in args {
        hasher.update(format!("\0{name}={value}").as_bytes());
    }
    hasher.update(format!("\0target={}", target.unwrap_or("")).as_bytes());
    let digest = hex::encode(hasher.finalize());
    let tag = format!("bork-ci-devcontainer:{}", &digest[..16]);
    let record = artifact_root.join(DEVCONTAINER_RECORDS).join(&digest);
    // Reused only when the tag still names the image bork-ci built from these files (the id it
    // recorded then): anyone with the engine can put any image under the tag, or a label on it.
    let recorded = {
        let record = record.clone();
        tokio::task::spawn_blocking(move || bork_ci_core::safe_fs::read_regular(&record, 256))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
    };
    if let Ok(found) = docker.inspect_image(&tag).await {
        match (found.id, recorded) {
            (Some(id), Some(recorded)) if id == recorded => {
                tracing::info!(
                    "the judges run in the dev container's image {tag} ({id}, built before from the same files)"
                );
                return Ok(id);
            }
            (id, _) => tracing::warn!(
                "{tag} names an image bork-ci did not build from these files ({}); building it again",
                id.as_deref().unwrap_or("no id")
            ),
        }
    }
    tracing::info!(
        "building the dev container's image {tag} from {} ({} bytes of context)",
        dockerfile.display(),
        tar.len()
    );
    let options = BuildImageOptions {
        dockerfile: dockerfile_in_context.to_string_lossy().into_owned(),
        t: Some(tag.clone()),
        rm: true,
        forcerm: true,
        buildargs: Some(args.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        target: target.unwrap_or_default().to_owned(),
        labels: Some(HashMap::from([
            (labels::MARK.to_owned(), "1".to_owned()),
            ("bork-ci.devcontainer".to_owned(), digest.clone()),
        ])),
        ..Default::default()
    };
    let failed = |reason: String| SandboxError::ImageMissing {
        image: tag.clone(),
        reason: format!("building the dev container's Dockerfile failed: {reason}"),
    };
    let mut progress = docker.build_image(options, None, Some(bollard::body_full(tar.into())));
    let mut last = Vec::new();
    while let Some(item) = progress.next().await {
        match item {
            Ok(info) => {
                if let Some(message) = info.error_detail.and_then(|detail| detail.message) {
                    return Err(failed(format!("{message}; last lines: {}", last.join(" | "))));
                }
                if let Some(stream) = info.stream.filter(|s| !s.trim().is_empty()) {
                    let line = bork_ci_core::untrusted::one_line(stream.trim());
                    tracing::debug!("dev container build: {line}");
                    last.push(line);
                    if last.len() > 5 {
                        last.remove(0);
                    }
                }
            }
            Err(error) => return Err(failed(error.to_string())),
        }
    }
    let id = match docker.inspect_image(&tag).await {
        Ok(built) => built
            .id
            .ok_or_else(|| failed("the engine names no id for the built image".to_owned()))?,
        Err(error) => return Err(failed(format!("the engine reported no error, but: {error}"))),
    };
    let written = {
        let (record, id) = (record.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(parent_of(&record))?;
            bork_ci_core::safe_fs::write_atomic(&record, id.as_bytes())
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|written| written)
    };
    if let Err(error) = written {
        // Without the record the image is built again next time, never trusted by its tag.
        tracing::warn!(
            "recording the dev container's image {id} in {}: {error}",
            record.display()
        );
    }
    tracing::info!("the judges run in the dev container's image {tag} ({id})");
    Ok(id)
}

/// The folder under the artifact root holding, per digest of a dev container's build inputs,
/// the id of the image bork-ci built from them.
pub const DEVCONTAINER_RECORDS: &str = "devcontainer-images";

fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// What [`gc`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
}

/// Removes labelled containers and volumes of runs proven dead (see [`liveness`]: same boot and
/// PID namespace as this process, and the run's pid gone or another process), and of any run
/// whose lease ran out (see [`labels::LEASE`]); those without a lease (made by an older bork-ci)
/// once older than `ttl`. What cannot be proven (another host or boot, another PID namespace,
/// a process table this process may not read) waits for its lease, so a bork-ci elsewhere
/// sharing the engine never loses a live run's objects. Never touches unlabelled objects, this
/// run's own, or cache volumes (see [`gc_caches`]).
pub async fn gc(sandbox: &DockerSandbox, ttl: Duration) -> Result<GcReport, SandboxError> {
    let filter = format!("{}=1", labels::MARK);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let here = tokio::task::spawn_blocking(liveness::Place::current)
        .await
        .ok()
        .flatten();
    let expired = |labels: &HashMap<String, String>| -> bool {
        if labels.get(labels::MARK).map(String::as_str) != Some("1")
            || labels.contains_key(transport::CACHE_LABEL)
            || labels.get(labels::RUN).map(String::as_str) == Some(sandbox.run_id.as_str())
        {
            return false;
        }
        if liveness::provably_dead(labels, here.as_ref(), liveness::look_up) {
            return true;
        }
        let number = |key: &str| labels.get(key).and_then(|value| value.parse::<u64>().ok());
        match number(labels::LEASE) {
            Some(until) => until < now,
            None => now.saturating_sub(number(labels::CREATED).unwrap_or(0)) > ttl.as_secs(),
        }
    };
    let mut report = GcReport::default();
    for (id, container_labels) in sandbox.list_labelled(&filter).await? {
        if let Some(id) = id.filter(|_| expired(&container_labels)) {
            remove_container(&sandbox.docker, &id).await;
            report.containers.push(id);
        }
    }
    for volume in sandbox.list_volumes(&filter).await? {
        if expired(&volume.labels) {
            remove_volume(&sandbox.docker, &volume.name).await;
            report.volumes.push(volume.name);
        }
    }
    if !report.containers.is_empty() || !report.volumes.is_empty() {
        tracing::info!(
            containers = report.containers.len(),
            volumes = report.volumes.len(),
            "removed leftovers of dead runs and of runs whose lease ran out"
        );
    }
    Ok(report)
}

/// Removes the cache volumes (one per repository and base, see [`transport`]) that no container
/// references and that were made more than `ttl` ago; returns their names. A live run keeps its
/// caches referenced by its anchor container for as long as it runs, so none of them is ever
/// unused here; the engine itself refuses to remove a volume a container references.
pub async fn gc_caches(sandbox: &DockerSandbox, ttl: Duration) -> Result<Vec<String>, SandboxError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let options = ListVolumesOptions {
        filters: Some(HashMap::from([
            ("label".to_owned(), vec![format!("{}=1", transport::CACHE_LABEL)]),
            ("dangling".to_owned(), vec!["true".to_owned()]),
        ])),
    };
    let listed = sandbox
        .docker
        .list_volumes(Some(options))
        .await
        .map_err(docker_error("list volumes"))?;
    let mut removed = Vec::new();
    // Marks last: a mark goes once the volume it vouches for is gone (or another), never before.
    let (marks, volumes): (Vec<_>, Vec<_>) = listed
        .volumes
        .unwrap_or_default()
        .into_iter()
        .partition(|volume| volume.labels.contains_key(labels::MARKS));
    for volume in volumes {
        let created = volume
            .labels
            .get(labels::CREATED)
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or(0);
        if now.saturating_sub(created) < ttl.as_secs() {
            continue;
        }
        let options = RemoveVolumeOptions { force: false };
        match sandbox.docker.remove_volume(&volume.name, Some(options)).await {
            Ok(()) => removed.push(volume.name),
            Err(error) if is_not_found(&error) => {}
            Err(error) => tracing::debug!(volume = volume.name, %error, "keeping a cache volume in use"),
        }
    }
    for mark in marks {
        let marked = mark
            .labels
            .get(labels::MARKS)
            .map(String::as_str)
            .unwrap_or_default();
        let vouched = match sandbox.docker.inspect_volume(marked).await {
            Ok(volume) => {
                transport::volume_id(&volume).as_deref()
                    == mark.labels.get(labels::MARKS_ID).map(String::as_str)
            }
            Err(error) => !is_not_found(&error),
        };
        if vouched {
            continue;
        }
        match sandbox
            .docker
            .remove_volume(&mark.name, Some(RemoveVolumeOptions { force: false }))
            .await
        {
            Ok(()) => removed.push(mark.name),
            Err(error) if is_not_found(&error) => {}
            Err(error) => tracing::debug!(volume = mark.name, %error, "keeping a mark"),
        }
    }
    Ok(removed)
}

/// Removes runner images built from other (older) bork-ci executables than this one; returns
/// their tags. Nothing is removed while this executable's image does not exist.
pub async fn gc_runner_images(sandbox: &DockerSandbox) -> Result<Vec<String>, SandboxError> {
    let executable = tokio::task::spawn_blocking(runner_image::Executable::current)
        .await
        .map_err(|e| SandboxError::Backend(e.to_string()))??;
    runner_image::remove_stale(&sandbox.docker, &executable.tag()).await
}

fn hostname() -> String {
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .trim()
        .to_owned();
    if name.is_empty() {
        "unknown".to_owned()
    } else {
        name
    }
}

pub(super) async fn remove_container(docker: &Docker, id: &str) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => {}
        Err(error) if is_not_found(&error) => {}
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {
            // Another removal (a dropped job's guard) is under way: wait until it is done.
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                match docker.inspect_container(id, None).await {
                    Err(error) if is_not_found(&error) => return,
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            tracing::warn!(container = id, "removal still in progress after 10 s");
        }
        Err(error) => tracing::warn!(container = id, %error, "removing container"),
    }
}

/// Removes containers `ids` side by side.
async fn remove_containers(docker: &Docker, ids: &[String]) {
    futures_util::future::join_all(ids.iter().map(|id| remove_container(docker, id))).await;
}

pub(super) async fn remove_volume(docker: &Docker, name: &str) {
    let options = RemoveVolumeOptions { force: true };
    if let Err(error) = docker.remove_volume(name, Some(options)).await
        && !is_not_found(&error)
    {
        tracing::warn!(volume = name, %error, "removing volume");
    }
}

/// Whether a job's artifacts can come back after its result is returned: a judge over `copy`
/// whose artifact folder is a fresh one of its own (nothing reads it during the run; a Verifier
/// pipeline, which names its folder and reads it at once, waits), with no edit step state.
fn finishes_later(job: &Job, prepared: &Prepared) -> bool {
    job.artifacts.is_none()
        && !prepared.over_bind
        && prepared.artifacts_back.is_some()
        && prepared.state_back.is_none()
        && prepared.state_stdio.is_none()
}

/// A container of this run, from [`DockerSandbox::new_container`]: removed by
/// [`Container::remove`], or when dropped (error paths, cancelled futures), unless
/// [`Container::keep`] handed it to the run's cleanup. Jobs, helpers (probe, fill, open-deps)
/// and anchors all live this one life.
pub(super) struct Container {
    docker: Docker,
    /// The engine's id of the container.
    pub(super) id: String,
    live: Arc<Mutex<HashSet<String>>>,
    armed: bool,
}

impl Container {
    /// Removes the container (and its anonymous volumes), waiting until it is gone.
    pub(super) async fn remove(mut self) {
        remove_container(&self.docker, &self.id).await;
        self.armed = false;
        if let Ok(mut live) = self.live.lock() {
            live.remove(&self.id);
        }
    }

    /// Leaves the container to the run's end (`cleanup_all`, or `gc` after a killed run's
    /// lease): an anchor that must outlive this value.
    pub(super) fn keep(mut self) -> String {
        self.armed = false;
        std::mem::take(&mut self.id)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(mut live) = self.live.lock() {
            live.remove(&self.id);
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let docker = self.docker.clone();
            let id = std::mem::take(&mut self.id);
            handle.spawn(async move { remove_container(&docker, &id).await });
        }
    }
}

pub(super) fn bind(source: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        source: Some(source.to_owned()),
        target: Some(target.to_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Default::default()
    }
}

fn path_str(path: &Path) -> Result<String, SandboxError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| SandboxError::Prepare {
            what: format!("a mount of {}", path.display()),
            source: std::io::Error::other("the path is not UTF-8"),
        })
}

/// Returns a git config keeping only what a checker needs to read the history: the `core`,
/// `remote`, `branch`, `extensions` and `user` sections, with userinfo removed from remote URLs.
/// Everything else goes, and with it every place a checkout leaves credentials
/// (`http.*.extraheader`, `credential.*`, `url.*.insteadOf`, `include*`, `lfs.*`).
pub fn strip_git_credentials(config: &str) -> String {
    const KEPT: &[&str] = &["core", "remote", "branch", "extensions", "user"];
    const REMOTE_KEYS: &[&str] = &["url", "pushurl", "fetch", "push", "tagopt", "mirror", "prune"];
    let mut out = String::new();
    let mut section: Option<String> = None;
    let mut continuing = false;
    for line in config.lines() {
        let trimmed = line.trim_start();
        if continuing {
            continuing = line.ends_with('\\');
            continue;
        }
        if trimmed.starts_with('[') {
            let header = trimmed.get(1..).unwrap_or_default();
            let name: String = header
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
                .to_ascii_lowercase();
            let keep = KEPT.contains(&name.as_str());
            // Anything after the closing bracket (an inline `key = value`) is dropped.
            let header_only = match trimmed.find(']') {
                Some(end) if keep => trimmed.get(..=end).unwrap_or_default(),
                _ => "",
            };
            section = keep.then_some(name);
            if keep {
                out.push_str(&strip_userinfo(header_only));
                out.push('\n');
            }
            continue;
        }
        let Some(current) = &section else {
            continuing = line.ends_with('\\');
            continue;
        };
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let key = trimmed
            .split(|c: char| c == '=' || c.is_whitespace())
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let keep = match current.as_str() {
            "remote" => REMOTE_KEYS.contains(&key.as_str()),
            "core" => !matches!(key.as_str(), "askpass" | "sshcommand" | "hookspath" | "fsmonitor"),
            _ => true,
        };
        if keep && !line.ends_with('\\') {
            out.push('\t');
            out.push_str(&strip_userinfo(trimmed));
            out.push('\n');
        } else {
            continuing = line.ends_with('\\');
        }
    }
    out
}

/// Removes `user:password@` from every `scheme://` URL in `text`.
fn strip_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let authority_end = after
            .find(|c: char| c == '/' || c == '"' || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = after.get(..authority_end).unwrap_or_default();
        match authority.rfind('@') {
            Some(userinfo_end) => out.push_str(authority.get(userinfo_end + 1..).unwrap_or_default()),
            None => out.push_str(authority),
        }
        rest = after.get(authority_end..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// The edit step's result, which came on its stdout, into `state` as
/// [`crate::sandbox::STATE_OUTPUT`] (as the other transports leave it); nothing when the step
/// wrote nothing, or more than [`state_stdio::RESULT_LIMIT`].
fn state_result_back(output: &mut JobOutput, state: &Path) -> Result<(), SandboxError> {
    let result = std::mem::take(&mut output.stdout);
    if output.stdout_truncated {
        tracing::warn!(
            "the edit step's result is larger than {} bytes: not taken",
            state_stdio::RESULT_LIMIT
        );
        return Ok(());
    }
    if result.is_empty() {
        return Ok(());
    }
    bork_ci_core::safe_fs::write_atomic(&state.join(crate::sandbox::STATE_OUTPUT), &result).map_err(
        |source| SandboxError::Prepare {
            what: "the edit step's result on the host".to_owned(),
            source,
        },
    )
}

fn exit_code(code: Option<i64>) -> i32 {
    code.and_then(|c| i32::try_from(c).ok()).unwrap_or(-1)
}

/// Output kept from a job's two streams.
#[derive(Debug, Default)]
struct Captured {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_truncated: bool,
    stderr_truncated: bool,
}

impl Captured {
    fn into_job_output(self, outcome: Outcome, duration: Duration) -> JobOutput {
        JobOutput {
            outcome,
            stdout: self.stdout,
            stderr: self.stderr,
            stdout_truncated: self.stdout_truncated,
            stderr_truncated: self.stderr_truncated,
            duration,
        }
    }
}

fn keep(buffer: &mut Vec<u8>, truncated: &mut bool, bytes: &[u8], cap: usize) {
    let room = cap.saturating_sub(buffer.len());
    if bytes.len() > room {
        *truncated = true;
    }
    buffer.extend_from_slice(bytes.get(..bytes.len().min(room)).unwrap_or_default());
}

async fn read_capped<S>(mut stream: S, stdout_cap: usize, cap: usize, live_stderr: bool) -> Captured
where
    S: Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
{
    let mut captured = Captured::default();
    let mut relay = live_stderr.then(super::LiveRelay::default);
    while let Some(item) = stream.next().await {
        match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                keep(
                    &mut captured.stdout,
                    &mut captured.stdout_truncated,
                    &message,
                    stdout_cap,
                );
            }
            Ok(LogOutput::StdErr { message }) => {
                if let Some(relay) = &mut relay {
                    relay.push(&message);
                }
                keep(
                    &mut captured.stderr,
                    &mut captured.stderr_truncated,
                    &message,
                    cap,
                );
            }
            Ok(LogOutput::StdIn { .. }) => {}
            Err(error) => {
                tracing::debug!(%error, "output stream ended");
                break;
            }
        }
    }
    if let Some(relay) = &mut relay {
        relay.finish();
    }
    captured
}

async fn join_reader(reader: tokio::task::JoinHandle<Captured>) -> Captured {
    // The stream ends when the container stops; bound the wait in case the engine keeps it open.
    match tokio::time::timeout(Duration::from_secs(5), reader).await {
        Ok(Ok(captured)) => captured,
        Ok(Err(_)) | Err(_) => Captured {
            stdout_truncated: true,
            stderr_truncated: true,
            ..Captured::default()
        },
    }
}

/// What a job reads on its stdin ([`DockerSandbox::run_in_with_stdin`]).
pub(super) enum Stdin {
    /// The edit step's state folder ([`state_stdio::send`]).
    State(PathBuf),
    /// An archive being made on a blocking thread, sent whole once it is made.
    Archive(tokio::task::JoinHandle<std::io::Result<std::fs::File>>),
}

/// Why a job's stdin was not all sent.
enum Unsent {
    /// The archive to send could not be made.
    Making(std::io::Error),
    /// Writing to the container failed (it may have ended first).
    Sending(std::io::Error),
}

impl Stdin {
    /// Sends this to `input`, then closes it (also when something failed, so that the job sees
    /// the end of its stdin rather than waiting for more).
    async fn send(
        self,
        mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    ) -> Result<(), Unsent> {
        use tokio::io::AsyncWriteExt as _;
        let sent = match self {
            // `state_stdio::send` closes its writer itself.
            Stdin::State(dir) => state_stdio::send(&dir, &mut input).await.map_err(Unsent::Sending),
            Stdin::Archive(making) => match making.await {
                Ok(Ok(file)) => {
                    let copied =
                        state_stdio::copy_in_chunks(tokio::fs::File::from_std(file), &mut input).await;
                    match copied {
                        Ok(_) => input.shutdown().await.map_err(Unsent::Sending),
                        Err(error) => Err(Unsent::Sending(error)),
                    }
                }
                Ok(Err(error)) => Err(Unsent::Making(error)),
                Err(error) => Err(Unsent::Making(std::io::Error::other(error))),
            },
        };
        if sent.is_err() {
            let _ = input.shutdown().await;
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("1024"), Ok(1024));
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert_eq!(parse_memory("2g"), Ok(2 << 30));
        assert_eq!(parse_memory("2GiB"), Ok(2 << 30));
        assert!(parse_memory("lots").is_err());
        assert!(parse_memory("2x").is_err());
    }

    #[test]
    fn git_config_loses_every_credential() {
        let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
            \tsshCommand = ssh -i /home/u/.ssh/id\n\
            [remote \"origin\"]\n\turl = https://x-access-token:ghs_SECRET1@github.com/o/r.git\n\
            \tfetch = +refs/heads/*:refs/remotes/origin/*\n\tproxy = http://u:SECRET2@proxy\n\
            [http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic SECRET3\n\
            [http]\n\textraHeader = Authorization: bearer SECRET4\n\
            [credential]\n\thelper = store --file /x\n\tusername = SECRET5\n\
            [url \"https://user:SECRET6@github.com/\"]\n\tinsteadOf = https://github.com/\n\
            [includeIf \"gitdir:/x\"]\n\tpath = /SECRET7\n\
            [branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n\
            [lfs \"https://github.com/o/r.git/info/lfs\"]\n\taccess = SECRET8\n\
            [remote \"fork\"]\n\turl = https://SECRET9@example.com/o/r\n";
        let stripped = strip_git_credentials(config);
        assert!(!stripped.contains("SECRET"), "{stripped}");
        assert!(
            stripped.contains("url = https://github.com/o/r.git"),
            "{stripped}"
        );
        assert!(stripped.contains("url = https://example.com/o/r"), "{stripped}");
        assert!(stripped.contains("[branch \"main\"]"));
        assert!(stripped.contains("merge = refs/heads/main"));
        assert!(stripped.contains("repositoryformatversion = 0"));
    }

    #[test]
    fn continuation_lines_of_dropped_keys_go_too() {
        let config = "[http]\n\textraheader = AUTHORIZATION: \\\n  SECRET\n[core]\n\tbare = false\n";
        let stripped = strip_git_credentials(config);
        assert!(!stripped.contains("SECRET"), "{stripped}");
        assert!(stripped.contains("bare = false"));
    }

    #[test]
    fn userinfo_is_removed_from_urls_only() {
        assert_eq!(
            strip_userinfo("url = https://a:b@host/x and ssh://git@h:22/y"),
            "url = https://host/x and ssh://h:22/y"
        );
        assert_eq!(strip_userinfo("git@github.com:o/r"), "git@github.com:o/r");
    }

    #[test]
    fn capped_buffers() {
        let mut buffer = Vec::new();
        let mut truncated = false;
        keep(&mut buffer, &mut truncated, b"0123", 6);
        keep(&mut buffer, &mut truncated, b"4567", 6);
        assert_eq!(buffer, b"012345");
        assert!(truncated);
    }
}
