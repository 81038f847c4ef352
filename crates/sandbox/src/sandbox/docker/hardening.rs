//! The one constructor of every started container's host configuration: a read-only root
//! filesystem, every capability dropped, `no-new-privileges`, never privileged, an init process,
//! a private IPC namespace, no log driver (bork-ci reads the output itself), the run's memory,
//! CPU and process limits and its `nofile`/`nproc` ulimits (above the host's hard limits a
//! container does not start). A job, a setup job and the `copy` transport's helpers differ only
//! in their mounts, network and `/tmp`; `tests/it/architecture.rs` keeps the hardening fields
//! written here alone.

use bollard::models::{HostConfig, HostConfigLogConfig, Mount};

use super::DockerSettings;

/// No log driver: bork-ci reads a job's output itself, and the engine keeps no copy of it.
pub(super) fn no_logs() -> Option<HostConfigLogConfig> {
    Some(HostConfigLogConfig {
        typ: Some("none".to_owned()),
        config: None,
    })
}

/// The hardened host configuration of a container bork-ci starts, with `mounts` and `network`
/// (`none`, `host`, `bridge`).
pub(super) fn host_config(settings: &DockerSettings, mounts: Vec<Mount>, network: &str) -> HostConfig {
    let memory = settings.memory.and_then(|bytes| i64::try_from(bytes).ok());
    HostConfig {
        mounts: Some(mounts),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".to_owned()]),
        security_opt: Some(vec!["no-new-privileges".to_owned()]),
        privileged: Some(false),
        network_mode: Some(network.to_owned()),
        memory,
        memory_swap: memory,
        nano_cpus: settings.cpus.map(|cpus| (cpus * 1e9) as i64),
        pids_limit: settings.pids_limit,
        ulimits: Some(settings.ulimits.to_api()),
        init: Some(true),
        ipc_mode: Some("private".to_owned()),
        log_config: no_logs(),
        ..Default::default()
    }
}
