//! The memory cgroup the grader runs in (a container's: Gradescope's, Docker's): how many
//! processes the kernel's out-of-memory killer has killed in it, so that a test killed by the
//! container's memory limit (a plain SIGKILL) is reported as out of memory.

use std::path::PathBuf;

/// The cgroup's OOM-kill count and memory limit, read before a test starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomWatch {
    kills: Option<u64>,
}

impl OomWatch {
    /// The count now (none where no memory cgroup can be read).
    pub fn start() -> OomWatch {
        OomWatch { kills: oom_kills() }
    }

    /// Whether the OOM killer killed a process of the cgroup since [`OomWatch::start`].
    pub fn fired(&self) -> bool {
        match (self.kills, oom_kills()) {
            (Some(before), Some(now)) => now > before,
            _ => false,
        }
    }
}

/// This process's cgroup folder (cgroup v2: the `0::` line of `/proc/self/cgroup`).
fn own_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(PathBuf::from("/sys/fs/cgroup").join(path.trim().trim_start_matches('/')))
}

/// The OOM killer's kills in this process's memory cgroup and those below it: cgroup v2's
/// `memory.events` (`oom_kill`), else cgroup v1's `memory.oom_control` (Linux 4.13 and later).
pub fn oom_kills() -> Option<u64> {
    let v2 = own_cgroup()
        .map(|dir| dir.join("memory.events"))
        .into_iter()
        .chain([PathBuf::from("/sys/fs/cgroup/memory.events")]);
    let v1 = [PathBuf::from("/sys/fs/cgroup/memory/memory.oom_control")];
    v2.chain(v1)
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| oom_kill_count(&text))
}

/// The memory limit of this process's cgroup, in bytes (`memory.max`; none when `max`).
pub fn memory_limit() -> Option<u64> {
    let path = own_cgroup()?.join("memory.max");
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The `oom_kill` count of a `memory.events` or `memory.oom_control` file.
fn oom_kill_count(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_kill_count_is_read_from_either_cgroup_version() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kill_count(v2), Some(2));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n";
        assert_eq!(oom_kill_count(v1), Some(7));
        assert_eq!(oom_kill_count("low 0\n"), None);
    }

    #[test]
    fn a_watch_fires_only_when_the_count_goes_up() {
        // Nothing is killed while it watches (the count, where there is one, stays).
        assert!(!OomWatch::start().fired());
        assert!(!OomWatch { kills: None }.fired());
    }
}
