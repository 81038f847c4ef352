//! Over `copy`, a judge's own volumes made ahead of it: while the edit step runs (it waits on the
//! model), the next judge's artifacts volume and, for a judge with a build cache of its own, its
//! empty build cache volume are made and given their folders through a container that never
//! starts. The judge then mounts them as they are: two volume creations and two archive calls
//! (which an engine runs one after the other on one container) fewer before it starts.
//!
//! A spare is as fresh as a volume made for the job: no container ever started with it. It is
//! made for the image and kind of build cache of the last judge; a judge that wants another
//! makes its own, as without spares. The run's first judge, with no edit step before it, has its
//! volumes made the same way at once, through a container each so that the two archive calls
//! run side by side, while its tree goes in and its caches are made ready. A spare no judge took
//! goes with the run's other volumes (it carries the run's labels).

use super::{ARTIFACTS_MOUNT, CACHE_MOUNT, DockerSandbox, SandboxError, archive, remove_volume, transport};

/// What a spare is made for: the judge's image, and whether it has a build cache of its own (a
/// layer: an empty volume per job) rather than the run's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SpareKind {
    pub(super) image: String,
    pub(super) own_build: bool,
}

/// A judge's volumes, made and with their folders in.
#[derive(Debug)]
pub(super) struct Spare {
    kind: SpareKind,
    pub(super) artifacts: String,
    /// The empty build cache, for a judge with one of its own.
    pub(super) build: Option<String>,
}

/// The folders of a judge's artifacts volume (`logs/` is bork-ci's: only root writes it).
pub(super) fn artifacts_skeleton() -> std::io::Result<Vec<u8>> {
    let run_dirs: Vec<(&str, u32)> = crate::sandbox::RUN_SUBDIRS
        .iter()
        .map(|name| (*name, if *name == "logs" { 0o755 } else { 0o1777 }))
        .chain(std::iter::once(("tmp", 0o1777)))
        .collect();
    archive::skeleton(0o1777, &run_dirs, None)
}

/// The folders of a build cache volume.
pub(super) fn build_skeleton() -> std::io::Result<Vec<u8>> {
    let build_dirs: Vec<(&str, u32)> = crate::sandbox::BUILD_SUBDIRS
        .iter()
        .map(|name| (*name, 0o1777))
        .collect();
    archive::skeleton(0o1777, &build_dirs, None)
}

/// `prefix-` and 16 random hex digits: a volume name no other volume has.
pub(super) fn fresh_name(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

impl DockerSandbox {
    /// Notes what the next judge will likely want (what this one wants).
    pub(super) fn want_spare(&self, kind: SpareKind) {
        if let Ok(mut wanted) = self.spare_wanted.lock() {
            *wanted = Some(kind);
        }
    }

    /// The spare made for `kind`, if there is one.
    pub(super) async fn take_spare(&self, kind: &SpareKind) -> Option<Spare> {
        let mut slot = self.spare.lock().await;
        if slot.as_ref().is_some_and(|spare| spare.kind == *kind) {
            return slot.take();
        }
        None
    }

    /// Makes a spare for the judge [`Self::want_spare`] noted, unless one is there: run beside
    /// the edit step. A failure only means the judge makes its own.
    pub(super) async fn prepare_spare(&self) {
        let Some(kind) = self.spare_wanted.lock().ok().and_then(|wanted| wanted.clone()) else {
            return;
        };
        let mut slot = self.spare.lock().await;
        if slot.as_ref().is_some_and(|spare| spare.kind == kind) {
            return;
        }
        if let Some(old) = slot.take() {
            self.discard(&old).await;
        }
        match self.make_spare(&kind, false).await {
            Ok(spare) => *slot = Some(spare),
            Err(error) => tracing::debug!("making the next judge's volumes ahead: {error}"),
        }
    }

    /// Makes a judge's volumes of `kind` and puts their folders in through containers that never
    /// start: one for both beside the edit step, or with `side_by_side` (a judge waits for them)
    /// one each, the two archive calls then running at once.
    pub(super) async fn make_spare(
        &self,
        kind: &SpareKind,
        side_by_side: bool,
    ) -> Result<Spare, SandboxError> {
        let spare = Spare {
            kind: kind.clone(),
            artifacts: fresh_name("bork-ci-artifacts"),
            build: kind.own_build.then(|| fresh_name("bork-ci-build")),
        };
        let filled = async {
            let mut folders = vec![(
                spare.artifacts.as_str(),
                ARTIFACTS_MOUNT,
                "artifacts",
                artifacts_skeleton(),
            )];
            if let Some(build) = &spare.build {
                folders.push((build.as_str(), CACHE_MOUNT, "build", build_skeleton()));
            }
            let mut staged = Vec::new();
            for (volume, path, what, archive) in folders {
                self.create_volume(volume, self.run_volume_labels(what)).await?;
                let archive = archive.map_err(|source| SandboxError::Prepare {
                    what: "a judge's folders".to_owned(),
                    source,
                })?;
                staged.push((transport::volume(volume, path, false), path, archive));
            }
            let groups = if side_by_side {
                staged.into_iter().map(|one| vec![one]).collect()
            } else {
                vec![staged]
            };
            futures_util::future::try_join_all(groups.into_iter().map(|group| self.stage(&kind.image, group)))
                .await
                .map(drop)
        }
        .await;
        match filled {
            Ok(()) => Ok(spare),
            Err(error) => {
                self.discard(&spare).await;
                Err(error)
            }
        }
    }

    /// Puts each archive of `group` into its volume through one container that mounts them all
    /// and never starts (an engine runs archive calls on one container one after the other).
    async fn stage(
        &self,
        image: &str,
        group: Vec<(bollard::models::Mount, &str, Vec<u8>)>,
    ) -> Result<(), SandboxError> {
        let mounts = group.iter().map(|(mount, ..)| mount.clone()).collect();
        let stager = self.create_idle(image, mounts, "stager").await?;
        let mut sent = Ok(());
        for (_, path, archive) in group {
            sent = self.upload(&stager.id, path, archive).await;
            if sent.is_err() {
                break;
            }
        }
        stager.remove().await;
        sent
    }

    async fn discard(&self, spare: &Spare) {
        remove_volume(&self.docker, &spare.artifacts).await;
        if let Some(build) = &spare.build {
            remove_volume(&self.docker, build).await;
        }
    }
}
