//! Blocking file and process work called from async code (packing, stats, `.bork-tmp-*` sweeps,
//! reading the verifier's steps) runs through [`run`], so a slow disk, a large repository or a
//! stalled git never holds up the runtime's other tasks (the signal handler, the sandbox's
//! timeouts, the model's stream).

/// Runs `work` where blocking is allowed: on a multi-threaded runtime the current worker hands
/// its other tasks over first (`block_in_place`); elsewhere (no runtime, or a single-threaded
/// one in a test) it simply runs.
pub fn run<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}
