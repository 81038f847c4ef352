//! What proves a run dead: the labels a run puts on its containers and volumes so that `gc`
//! (and the start of every Docker run) can remove what a killed run left at once, instead of
//! waiting for its lease.
//!
//! A run labels its objects with the boot it runs in (`/proc/sys/kernel/random/boot_id`), its
//! PID namespace (`/proc/self/ns/pid`), its pid and that process's start time (field 22 of
//! `/proc/<pid>/stat`). A reaper in the same boot and the same PID namespace sees the same
//! process table: when that pid is gone (`kill(pid, 0)` fails with `ESRCH`) or is another
//! process (another start time), the run is provably dead. Anything else (another host or
//! boot, another namespace, labels missing or unreadable, a process table it may not read)
//! proves nothing, and the lease (`bork-ci.lease-until`) decides as before.

use std::collections::HashMap;
use std::path::Path;

/// Label keys of the proof.
pub mod keys {
    /// The boot id of the host the run runs on.
    pub const BOOT: &str = "bork-ci.boot";
    /// The PID namespace the run's process lives in (`pid:[inode]`).
    pub const PID_NS: &str = "bork-ci.pid-ns";
    /// The run's pid in that namespace (also shown to people).
    pub const PID: &str = super::super::labels::PID;
    /// The start time of that process, in clock ticks after boot.
    pub const PID_START: &str = "bork-ci.pid-start";
}

/// Where a process runs: its boot and its PID namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub boot: String,
    pub pid_ns: String,
}

impl Place {
    /// This process's place, when `/proc` tells it.
    pub fn current() -> Option<Place> {
        let boot =
            bork_ci_core::safe_fs::read_regular(Path::new("/proc/sys/kernel/random/boot_id"), 256).ok()?;
        let boot = String::from_utf8_lossy(&boot).trim().to_owned();
        let pid_ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let pid_ns = pid_ns.to_string_lossy().trim().to_owned();
        (!boot.is_empty() && !pid_ns.is_empty()).then_some(Place { boot, pid_ns })
    }
}

/// The labels that let a later reaper prove this process dead (empty when `/proc` does not
/// tell where it runs).
pub fn labels_of_this_process() -> Vec<(String, String)> {
    let pid = std::process::id();
    let (Some(place), Some(start)) = (Place::current(), start_time(pid)) else {
        return Vec::new();
    };
    vec![
        (keys::BOOT.to_owned(), place.boot),
        (keys::PID_NS.to_owned(), place.pid_ns),
        (keys::PID_START.to_owned(), start.to_string()),
    ]
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), when readable.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = bork_ci_core::safe_fs::read_regular(Path::new(&format!("/proc/{pid}/stat")), 4096).ok()?;
    parse_start_time(&String::from_utf8_lossy(&stat))
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields 3 onwards: starttime is the 20th of them.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// What a reaper can tell of a pid in its own namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pid {
    /// No such process.
    Gone,
    /// A process, with its start time when readable.
    Running(Option<u64>),
}

/// Whether `pid` exists in this namespace, and since when.
pub fn look_up(pid: u32) -> Pid {
    let Some(raw) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return Pid::Running(None);
    };
    match rustix::process::test_kill_process(raw) {
        Err(rustix::io::Errno::SRCH) => Pid::Gone,
        // Alive, or another user's (EPERM): alive as far as anyone can prove.
        _ => Pid::Running(start_time(pid)),
    }
}

/// Whether the object labelled `labels` belongs to a run proven dead from `here` (the
/// reaper's place), with `look_up` telling about pids. Pure given `look_up`.
pub fn provably_dead(
    labels: &HashMap<String, String>,
    here: Option<&Place>,
    look_up: impl Fn(u32) -> Pid,
) -> bool {
    let Some(here) = here else {
        return false;
    };
    let label = |key: &str| labels.get(key).map(|value| value.trim());
    if label(keys::BOOT) != Some(here.boot.as_str()) || label(keys::PID_NS) != Some(here.pid_ns.as_str()) {
        return false;
    }
    let (Some(pid), Some(start)) = (
        label(keys::PID).and_then(|pid| pid.parse::<u32>().ok()),
        label(keys::PID_START).and_then(|start| start.parse::<u64>().ok()),
    ) else {
        return false;
    };
    match look_up(pid) {
        Pid::Gone => true,
        Pid::Running(Some(now)) => now != start,
        Pid::Running(None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn start_time_is_field_22_even_with_odd_command_names() {
        let line =
            "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(line), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
        assert_eq!(parse_start_time("garbage"), None);
        let own = start_time(std::process::id()).expect("this process's start time");
        assert_eq!(look_up(std::process::id()), Pid::Running(Some(own)));
    }

    #[test]
    fn only_the_same_boot_and_namespace_with_the_pid_gone_or_reused_is_dead() {
        let here = Place {
            boot: "b1".into(),
            pid_ns: "pid:[1]".into(),
        };
        let run = labels(&[
            (keys::BOOT, "b1"),
            (keys::PID_NS, "pid:[1]"),
            (keys::PID, "77"),
            (keys::PID_START, "500"),
        ]);
        let gone = |_| Pid::Gone;
        let same = |_| Pid::Running(Some(500));
        let reused = |_| Pid::Running(Some(900));
        let hidden = |_| Pid::Running(None);
        assert!(provably_dead(&run, Some(&here), gone));
        assert!(provably_dead(&run, Some(&here), reused));
        assert!(!provably_dead(&run, Some(&here), same));
        assert!(!provably_dead(&run, Some(&here), hidden));
        assert!(!provably_dead(&run, None, gone));
        let other_ns = Place {
            pid_ns: "pid:[2]".into(),
            ..here.clone()
        };
        assert!(!provably_dead(&run, Some(&other_ns), gone));
        let other_boot = Place {
            boot: "b2".into(),
            ..here.clone()
        };
        assert!(!provably_dead(&run, Some(&other_boot), gone));
        for missing in [keys::BOOT, keys::PID_NS, keys::PID, keys::PID_START] {
            let mut partial = run.clone();
            partial.remove(missing);
            assert!(!provably_dead(&partial, Some(&here), gone), "{missing}");
        }
        let mut bad = run.clone();
        bad.insert(keys::PID.into(), "-1".into());
        assert!(!provably_dead(&bad, Some(&here), gone));
    }

    #[test]
    fn this_process_labels_itself() {
        let labels: HashMap<String, String> = labels_of_this_process().into_iter().collect();
        assert!(labels.contains_key(keys::BOOT), "{labels:?}");
        let mut with_pid = labels.clone();
        with_pid.insert(keys::PID.into(), std::process::id().to_string());
        assert!(!provably_dead(&with_pid, Place::current().as_ref(), look_up));
    }
}
