//! How one job's container is prepared: its environment, mounts and tmpfs, branched once per
//! job kind (a judge, over `copy` or `bind`; the edit step), with what is uploaded before it
//! starts and copied back after. The hardening every container gets is `hardening`'s.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountTmpfsOptions, MountType};

use super::*;

/// Which judge a judge's caches over `copy` are for: the setup job, and the run's first judge
/// (whose tree goes in during its preparation).
#[derive(Debug, Clone, Copy)]
struct CachesFor {
    setup: bool,
    first: bool,
}

/// The error of a step of a job's preparation that failed: what was being prepared, and why.
pub(super) fn prepare_error(what: &str) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = what.to_owned();
    move |source| SandboxError::Prepare { what, source }
}

impl DockerSandbox {
    pub(super) async fn prepare_into(
        &self,
        repo: &Path,
        job: &Job,
        cmd: Vec<String>,
        image: String,
        transport: Transport,
        prepared: &mut Prepared,
    ) -> Result<(), SandboxError> {
        let copy = transport == Transport::Copy;
        prepared.over_bind = !copy;
        let mut env: Vec<(String, String)> = Vec::new();
        let mut mounts = Vec::new();
        let mut tmpfs = HashMap::from([(
            "/tmp".to_owned(),
            format!("rw,nosuid,nodev,noexec,size={}", self.settings.tmpfs_bytes),
        )]);
        let (user, network) = match job.kind {
            JobKind::Checker | JobKind::Verify | JobKind::Setup => {
                let setup = job.kind == JobKind::Setup;
                let host = if copy {
                    crate::sandbox::BuildHost::Engine
                } else {
                    crate::sandbox::BuildHost::Container
                };
                let (dirs, build) = self.shared.for_job(job, host);
                prepared.build = build;
                dirs.prepare()
                    .map_err(prepare_error("the artifact directories"))?;
                // A fresh, empty home and temporary folder per job: nothing a judge leaves
                // there reaches a later one. The job's `TMPDIR` is its own folder under the
                // run's `runs/<run id>/tmp/`: over `bind` that folder mounted at `/tmp`; over
                // `copy` the `tmp/` of its artifacts volume (`/artifacts/tmp`, a volume's root
                // belonging to root), copied back there, with a tmpfs at `/tmp` as before.
                let tmp_dir = if copy { COPY_TMP } else { JUDGE_TMP };
                tmpfs.insert(
                    "/tmp".to_owned(),
                    format!(
                        "rw,nosuid,nodev,exec,mode=1777,size={}",
                        self.settings.tmpfs_bytes
                    ),
                );
                if !copy {
                    tmpfs.remove(JUDGE_TMP);
                }
                tmpfs.insert(
                    JUDGE_HOME.to_owned(),
                    format!(
                        "rw,nosuid,nodev,exec,mode=1777,size={}",
                        self.settings.tmpfs_bytes
                    ),
                );
                let ca = if setup {
                    self.settings
                        .setup_egress
                        .ca_file
                        .as_deref()
                        .and_then(|path| bork_ci_core::safe_fs::read_regular(path, 16 << 20).ok())
                } else {
                    None
                };
                // The judges' bork-ci is found or made (the first job of a run) side by side
                // with the tree and caches.
                let tree = async {
                    if copy {
                        self.judge_tree_over_copy(
                            repo,
                            job,
                            &image,
                            setup,
                            &dirs,
                            ca.as_deref(),
                            prepared,
                            &mut mounts,
                        )
                        .await
                    } else {
                        self.judge_tree_over_bind(repo, setup, &dirs, ca.as_deref(), prepared, &mut mounts)
                    }
                };
                let (tree, tool) = tokio::join!(tree, self.tool_mounts(&image, copy));
                tree?;
                env.extend(crate::sandbox::artifact_env(&crate::sandbox::JudgePaths {
                    run: ARTIFACTS_MOUNT,
                    build: CACHE_MOUNT,
                    deps: DEPS_MOUNT,
                    home: JUDGE_HOME,
                    tmp: tmp_dir,
                }));
                // bork-ci itself, read-only and first on PATH: `bork-ci check` in a checker.
                if let Some(tool) = tool {
                    mounts.extend(tool);
                    let path = self.image_path(&image).await;
                    env.push(("PATH".to_owned(), format!("{}:{path}", runner_image::TOOL_BIN)));
                    env.push((
                        "BORK_CI".to_owned(),
                        format!("{}/bork-ci", runner_image::TOOL_BIN),
                    ));
                }
                if setup {
                    if ca.is_some() {
                        env.extend(crate::sandbox::ca_env(SETUP_CA));
                    }
                    env.extend(self.settings.setup_egress.proxy_env.iter().cloned());
                    (self.settings.user.clone(), self.settings.setup_network.clone())
                } else {
                    (self.settings.user.clone(), self.settings.network.clone())
                }
            }
            JobKind::EditStep => {
                self.edit_step_mounts(repo, job, copy, prepared, &mut env, &mut mounts, &mut tmpfs)
                    .await?
            }
        };
        for (name, value) in &job.env {
            if job.secret_env.iter().any(|secret| secret == name) || name.contains('=') {
                continue;
            }
            env.retain(|(existing, _)| existing != name);
            env.push((name.clone(), value.clone()));
        }
        let host_config = HostConfig {
            tmpfs: Some(tmpfs),
            ..hardening::host_config(&self.settings, mounts, &network)
        };
        prepared.body = ContainerCreateBody {
            image: Some(image),
            cmd: Some(cmd),
            entrypoint: Some(Vec::new()),
            env: Some(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()),
            user: Some(user),
            working_dir: Some(REPO_MOUNT.to_owned()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(prepared.state_stdio.is_some()),
            open_stdin: Some(prepared.state_stdio.is_some()),
            // The step's stdin closes when bork-ci has sent the state.
            stdin_once: Some(prepared.state_stdio.is_some()),
            tty: Some(false),
            network_disabled: None,
            labels: Some(self.labels(job.kind)),
            host_config: Some(host_config),
            ..Default::default()
        };
        Ok(())
    }

    /// The edit step's mounts: over `copy` no working tree at all (its state in a volume of its
    /// own, the plan handed back as data), over `bind` the checkout read-write without `.git`,
    /// as the repository owner; the host's network either way (it talks to the model).
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one job's preparation, each borrowed once"
    )]
    async fn edit_step_mounts(
        &self,
        repo: &Path,
        job: &Job,
        copy: bool,
        prepared: &mut Prepared,
        env: &mut Vec<(String, String)>,
        mounts: &mut Vec<Mount>,
        tmpfs: &mut HashMap<String, String>,
    ) -> Result<(String, String), SandboxError> {
        env.push(("HOME".to_owned(), "/tmp".to_owned()));
        // The state over the step's stdio: no state mount whatever the transport.
        let state_dir = match &job.state_dir {
            Some(state) if job.state_over_stdio => {
                prepared.state_stdio = Some(state.clone());
                None
            }
            other => other.as_ref(),
        };
        if copy {
            // No working tree at all: the step returns its plan as data.
            if let Some(state) = state_dir {
                let state_volume = format!(
                    "bork-ci-state-{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..16]
                );
                self.create_volume(&state_volume, self.run_volume_labels("state"))
                    .await?;
                prepared.volumes.push(state_volume.clone());
                mounts.push(transport::volume(&state_volume, STATE_MOUNT, false));
                let (uid, gid) = numeric_user(&self.settings.user);
                prepared.uploads.push((
                    STATE_MOUNT.to_owned(),
                    archive::state(state, "step", uid, gid)
                        .map_err(prepare_error("the edit step's state"))?,
                ));
                prepared.state_back = Some(state.clone());
            }
            Ok((self.settings.user.clone(), "host".to_owned()))
        } else {
            mounts.push(bind(&path_str(repo)?, REPO_MOUNT, false));
            mask_git(repo, mounts, tmpfs, self.podman);
            if let Some(state) = state_dir {
                let state = std::fs::canonicalize(state).map_err(prepare_error("the state directory"))?;
                mounts.push(bind(&path_str(&state)?, STATE_MOUNT, false));
                prepared.bind_proof = Some((state, STATE_MOUNT.to_owned()));
            }
            // Files the step writes keep the repository owner's ids.
            let owner = std::fs::metadata(repo).map_err(prepare_error("the repository owner"))?;
            Ok((format!("{}:{}", owner.uid(), owner.gid()), "host".to_owned()))
        }
    }

    /// A judge's tree and caches over `copy`: the run's tree volume (read-only, brought up to date
    /// first and held still while the job runs), the job's artifacts volume, the dependency cache
    /// (writable by the setup job only) and a build cache volume, each with its skeleton uploaded.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one job's preparation, each borrowed once"
    )]
    async fn judge_tree_over_copy(
        &self,
        repo: &Path,
        job: &Job,
        image: &str,
        setup: bool,
        dirs: &crate::sandbox::ArtifactDirs,
        ca: Option<&[u8]>,
        prepared: &mut Prepared,
        mounts: &mut Vec<Mount>,
    ) -> Result<(), SandboxError> {
        let image = image.to_owned();
        // The run's first judge: its tree goes in now (see `judge_tree_volume`).
        let first = !self.tree_filled().await;
        let caches_for = CachesFor { setup, first };
        // The tree volume (on a run's first job, the claim on the repository's kept one) beside
        // the caches' volumes.
        let (tree, caches) = tokio::join!(
            self.judge_tree_volume(repo, &image, first),
            self.judge_caches_over_copy(repo, job, &image, caches_for, dirs, ca, prepared, mounts)
        );
        let (repo_volume, pending, guard) = tree?;
        caches?;
        if pending.is_some() {
            prepared.tree_pending = pending;
        }
        if guard.is_some() {
            prepared.tree_guard = guard;
        }
        mounts.insert(0, transport::volume(&repo_volume, REPO_MOUNT, true));
        Ok(())
    }

    /// The run's tree volume for a judge: brought up to date while its container is made (the
    /// pending update returned), or, for the run's `first` judge or when the sandbox held another
    /// repository's, filled or replaced now and held still (the guard returned) while the job runs.
    async fn judge_tree_volume(
        &self,
        repo: &Path,
        image: &str,
        first: bool,
    ) -> Result<
        (
            String,
            Option<TreePending>,
            Option<tokio::sync::OwnedRwLockReadGuard<()>>,
        ),
        SandboxError,
    > {
        let volume = self.tree_volume_of(repo, image).await?;
        Ok(match volume {
            // Brought up to date while the container is made (`create_staged`); filled, the first
            // time, now, beside the first judge's volumes (which take longer than its container).
            Some(name) if !first => {
                let pending = TreePending {
                    repo: repo.to_owned(),
                    image: image.to_owned(),
                    name: name.clone(),
                };
                (name, Some(pending), None)
            }
            _ => {
                let writing = Arc::clone(&self.tree_lock).write_owned().await;
                let name = Box::pin(self.sync_tree(repo, image)).await?;
                // No update while this job runs: what it sees stays what was sent.
                (name, None, Some(writing.downgrade()))
            }
        })
    }

    /// A judge's volumes over `copy` other than the tree's (see [`Self::judge_tree_over_copy`]).
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one job's preparation, each borrowed once"
    )]
    async fn judge_caches_over_copy(
        &self,
        repo: &Path,
        job: &Job,
        image: &str,
        CachesFor { setup, first }: CachesFor,
        dirs: &crate::sandbox::ArtifactDirs,
        ca: Option<&[u8]>,
        prepared: &mut Prepared,
        mounts: &mut Vec<Mount>,
    ) -> Result<(), SandboxError> {
        let image = image.to_owned();
        let run_wide = job.build == crate::sandbox::BuildCache::Run;
        // A judge's own volumes made ahead, while the edit step ran (`spare`).
        let spare = async {
            if setup {
                return None;
            }
            let kind = spare::SpareKind {
                image: image.clone(),
                own_build: !run_wide,
            };
            let spare = match self.take_spare(&kind).await {
                Some(spare) => Some(spare),
                // None made ahead for the run's first judge: made now the same way, their
                // folders put in side by side, while its tree goes in and its caches are found.
                // (A later judge's folders go in through its own container, beside the update
                // of its tree, which then waits for that container: one container fewer.)
                None if first => self
                    .make_spare(&kind, true)
                    .await
                    .inspect_err(|error| tracing::debug!("making a judge's volumes: {error}"))
                    .ok(),
                None => None,
            };
            self.want_spare(kind);
            spare
        };
        // The dependency cache beside them.
        let deps = transport::deps_volume(&self.shared.deps_key());
        let deps_ready = async {
            self.create_volume(&deps, self.cache_volume_labels(repo)).await?;
            self.anchor_cache(&deps, &image).await;
            if setup {
                self.open_deps_volume(&deps, &image).await;
            }
            Ok::<(), SandboxError>(())
        };
        let (spare, deps_ready) = tokio::join!(spare, deps_ready);
        let artifacts = match &spare {
            Some(spare) => spare.artifacts.clone(),
            None => {
                let artifacts = transport::artifacts_volume(&dirs.run);
                self.create_volume(&artifacts, self.run_volume_labels("artifacts"))
                    .await?;
                prepared.uploads.push((
                    ARTIFACTS_MOUNT.to_owned(),
                    spare::artifacts_skeleton().map_err(prepare_error("the artifact skeleton"))?,
                ));
                artifacts
            }
        };
        prepared.volumes.push(artifacts.clone());
        mounts.push(transport::volume(&artifacts, ARTIFACTS_MOUNT, false));
        deps_ready?;
        mounts.push(transport::volume(&deps, DEPS_MOUNT, !setup));
        if !setup {
            // Over `copy` the warm cache is not kept: a judge with a cache of its
            // own (a layer, an empty one, the preflight's) gets an empty volume,
            // removed with the job.
            if let Some(own) = spare.and_then(|spare| spare.build) {
                prepared.volumes.push(own.clone());
                mounts.push(transport::volume(&own, CACHE_MOUNT, false));
            } else {
                let build = if run_wide {
                    transport::build_volume(&self.run_id)
                } else {
                    let own = transport::build_volume(&dirs.tmp.to_string_lossy());
                    prepared.volumes.push(own.clone());
                    own
                };
                let created = self
                    .create_or_find_volume(&build, self.run_volume_labels("build"))
                    .await?;
                mounts.push(transport::volume(&build, CACHE_MOUNT, false));
                // The run's warm cache gets its skeleton once (one archive call less per job);
                // made again under its name, it is another volume and gets it again.
                if !(run_wide && self.skeleton_in(&build, &created)) {
                    prepared.uploads.push((
                        CACHE_MOUNT.to_owned(),
                        spare::build_skeleton().map_err(prepare_error("the build cache skeleton"))?,
                    ));
                    if run_wide {
                        prepared.skeleton_sent = Some((build, created));
                    }
                }
            }
        } else {
            let deps_dirs: Vec<(&str, u32)> = crate::sandbox::DEPS_SUBDIRS
                .iter()
                .map(|name| (*name, 0o1777))
                .chain(std::iter::once((".bork-ci", 0o755)))
                .collect();
            prepared.uploads.push((
                DEPS_MOUNT.to_owned(),
                archive::skeleton_with_file(
                    0o1777,
                    &deps_dirs,
                    ca.map(|bytes| (".bork-ci/ca-certificates.crt", bytes)),
                )
                .map_err(prepare_error("the dependency cache skeleton"))?,
            ));
        }
        prepared.artifacts_back = Some((dirs.run.clone(), dirs.tmp.clone()));
        Ok(())
    }

    /// A judge's tree and caches over `bind`: the checkout read-only (a credential-free
    /// `.git/config`, what git ignores covered), and the host's artifact, temporary, dependency
    /// and build cache folders.
    fn judge_tree_over_bind(
        &self,
        repo: &Path,
        setup: bool,
        dirs: &crate::sandbox::ArtifactDirs,
        ca: Option<&[u8]>,
        prepared: &mut Prepared,
        mounts: &mut Vec<Mount>,
    ) -> Result<(), SandboxError> {
        check_readable(repo, &self.settings.user)?;
        let scratch = tempfile::Builder::new()
            .prefix("bork-ci-job-")
            .tempdir()
            .map_err(prepare_error("a scratch directory"))?;
        mounts.push(bind(&path_str(repo)?, REPO_MOUNT, true));
        if let Some(config) =
            stripped_git_config(repo, scratch.path()).map_err(prepare_error("the stripped .git/config"))?
        {
            mounts.push(bind(
                &path_str(&config)?,
                &format!("{REPO_MOUNT}/.git/config"),
                true,
            ));
        }
        mounts.extend(
            ignored_masks(repo, scratch.path()).map_err(prepare_error("the masks over ignored paths"))?,
        );
        mounts.push(bind(&path_str(&dirs.run)?, ARTIFACTS_MOUNT, false));
        mounts.push(bind(&path_str(&dirs.tmp)?, JUDGE_TMP, false));
        prepared.bind_proof = Some((dirs.tmp.clone(), JUDGE_TMP.to_owned()));
        mounts.push(bind(&path_str(&dirs.deps)?, DEPS_MOUNT, !setup));
        if !setup {
            mounts.push(bind(&path_str(&dirs.build)?, CACHE_MOUNT, false));
        }
        if let Some(bytes) = &ca {
            let folder = dirs.deps.join(".bork-ci");
            std::fs::create_dir_all(&folder)
                .map_err(prepare_error("the CA bundle's folder for the setup commands"))?;
            let file = folder.join("ca-certificates.crt");
            bork_ci_core::safe_fs::write_atomic(&file, bytes)
                .map_err(prepare_error("the CA bundle for the setup commands"))?;
            // Read by the setup job's user; certificates are public.
            std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                .map_err(prepare_error("the CA bundle for the setup commands"))?;
        }
        prepared._scratch = Some(scratch);
        Ok(())
    }
}

/// A container description, the host files that must outlive the container, and over `copy`
/// what goes in before it starts, what comes back after, and the volumes made for it alone.
pub(super) struct Prepared {
    pub(super) body: ContainerCreateBody,
    pub(super) _scratch: Option<tempfile::TempDir>,
    /// What the job holds of its build cache (bind): a folder of its own, removed with the
    /// job, or the warm cache's lock.
    pub(super) build: crate::sandbox::JobBuild,
    /// `(path in the container, tar)`, extracted before the container starts.
    pub(super) uploads: Vec<(String, Vec<u8>)>,
    /// The host run directory `/artifacts` is copied back into, and the folder a judge's
    /// `TMPDIR` (`/artifacts/tmp`) is copied back into.
    pub(super) artifacts_back: Option<(PathBuf, PathBuf)>,
    /// The host state directory the edit step's `output.json` is copied back into.
    pub(super) state_back: Option<PathBuf>,
    /// Edit step over stdio: the host's state folder, sent on the step's stdin, where its
    /// stdout is written back as [`crate::sandbox::STATE_OUTPUT`].
    pub(super) state_stdio: Option<PathBuf>,
    /// Volumes removed after the job.
    pub(super) volumes: Vec<String>,
    /// Over `copy`: holds off updates of the tree volume while the job runs.
    pub(super) tree_guard: Option<tokio::sync::OwnedRwLockReadGuard<()>>,
    /// The job mounts host paths (`bind`).
    pub(super) over_bind: bool,
    /// Over `bind`: a folder of bork-ci's the job mounts (the host path, and where the job
    /// sees it), where a remembered `bind` is proven before the job starts.
    pub(super) bind_proof: Option<(PathBuf, String)>,
    /// Over `copy`: the tree volume the container mounts, still to be brought up to date.
    pub(super) tree_pending: Option<TreePending>,
    /// Over `copy`: the run-wide volume (and when it was created) whose skeleton the uploads
    /// carry, recorded once they are in.
    pub(super) skeleton_sent: Option<(String, String)>,
}

/// A job's tree volume over `copy` that `create_staged` brings up to date: `name` is the volume
/// the container mounts, the one the run filled for `repo` before.
pub(super) struct TreePending {
    pub(super) repo: PathBuf,
    pub(super) image: String,
    pub(super) name: String,
}

/// The numeric `uid:gid` of a `sandbox.user` value; a name counts as 65534 (nobody) for the
/// owner of the edit step's state.
fn numeric_user(user: &str) -> (u64, u64) {
    let mut parts = user.split(':');
    let uid = parts.next().and_then(|u| u.parse().ok()).unwrap_or(65534);
    let gid = parts.next().and_then(|g| g.parse().ok()).unwrap_or(uid);
    (uid, gid)
}

/// Hides `.git` from the edit step: an empty read-only tmpfs over a directory, `/dev/null` over a
/// file (a worktree's `gitdir:` pointer). On Podman the tmpfs is a `HostConfig.Tmpfs` entry with
/// `notmpcopyup` (see [`Podman`]).
fn mask_git(repo: &Path, mounts: &mut Vec<Mount>, tmpfs: &mut HashMap<String, String>, podman: bool) {
    let target = format!("{REPO_MOUNT}/.git");
    match std::fs::symlink_metadata(repo.join(".git")) {
        Ok(meta) if meta.is_dir() && podman => {
            tmpfs.insert(
                target,
                "ro,nosuid,nodev,noexec,size=4096,mode=0555,notmpcopyup".to_owned(),
            );
        }
        Ok(meta) if meta.is_dir() => mounts.push(Mount {
            target: Some(target),
            typ: Some(MountType::TMPFS),
            read_only: Some(true),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(4096),
                mode: Some(0o555),
                ..Default::default()
            }),
            ..Default::default()
        }),
        Ok(_) => mounts.push(bind("/dev/null", &target, true)),
        Err(_) => {}
    }
}

/// The most ignored entries a judge over `bind` masks; more is an error that names the way out.
const MAX_IGNORED_MASKS: usize = 2048;

/// Hides from a judge over `bind` what git ignores, so that it judges what it would over `copy`
/// (tracked files, and untracked ones git does not ignore: what a pull request can carry): an
/// empty read-only folder over each ignored folder, an empty read-only file over each ignored
/// file. The names stay, empty; their contents (a local `.env`, a `node_modules/` an earlier
/// step installed, build output) never reach a judge. An ignored symlink is left (a mount on it
/// would land where it points). git lists a wholly ignored folder once (`--directory`), so a
/// `target/` is one mount. Outside a git repository nothing is ignored, over either transport.
fn ignored_masks(repo: &Path, scratch: &Path) -> std::io::Result<Vec<Mount>> {
    let entries = transport::ignored_paths(repo);
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    if entries.len() > MAX_IGNORED_MASKS {
        return Err(std::io::Error::other(format!(
            "{} ignored files and folders in the checkout (at most {MAX_IGNORED_MASKS} are hidden from a \
             judge over `bind`): clean the checkout (`git clean -ndX` lists them) or use \
             `sandbox.transport: copy`",
            entries.len()
        )));
    }
    let empty_dir = scratch.join("ignored-folder");
    std::fs::create_dir(&empty_dir)?;
    std::fs::set_permissions(&empty_dir, std::os::unix::fs::PermissionsExt::from_mode(0o555))?;
    let empty_file = scratch.join("ignored-file");
    bork_ci_core::safe_fs::write_atomic(&empty_file, b"")?;
    std::fs::set_permissions(&empty_file, std::os::unix::fs::PermissionsExt::from_mode(0o444))?;
    let utf8 = |path: &Path| {
        path.to_str()
            .map(str::to_owned)
            .ok_or_else(|| std::io::Error::other("the scratch folder's path is not UTF-8"))
    };
    let (dir_source, file_source) = (utf8(&empty_dir)?, utf8(&empty_file)?);
    let mut masks = Vec::new();
    for entry in entries {
        let Ok(meta) = std::fs::symlink_metadata(repo.join(&entry)) else {
            continue;
        };
        let target = format!("{REPO_MOUNT}/{entry}");
        if meta.is_dir() {
            masks.push(bind(&dir_source, &target, true));
        } else if meta.is_file() {
            masks.push(bind(&file_source, &target, true));
        }
    }
    Ok(masks)
}

/// Writes a credential-stripped copy of `repo/.git/config` into `scratch` and returns its path;
/// `None` when `.git` is not a directory (nothing of it is mounted then but the pointer file).
#[expect(
    clippy::disallowed_methods,
    reason = "the sandbox: reads the repository's .git/config to write a credential-stripped copy"
)]
fn stripped_git_config(repo: &Path, scratch: &Path) -> std::io::Result<Option<PathBuf>> {
    let git = repo.join(".git");
    match std::fs::symlink_metadata(&git) {
        Ok(meta) if meta.is_dir() => {}
        _ => return Ok(None),
    }
    let config = git.join("config");
    let original = match std::fs::symlink_metadata(&config) {
        Ok(meta) if meta.is_file() => std::fs::read(&config)?,
        Ok(_) => Vec::new(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let stripped = strip_git_credentials(&String::from_utf8_lossy(&original));
    let copy = scratch.join("git-config");
    std::fs::write(&copy, stripped)?;
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    Ok(Some(copy))
}
