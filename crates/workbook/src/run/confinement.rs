//! What either tier of the sandbox gives a graded test process, below both
//! ([`super::sandbox`], the namespaces tier and the choice between tiers, and
//! [`super::landlocked`]): the environment it starts with ([`test_env`]) and the gate on the
//! harness's log ([`LogGate`]; the module [`super::sandbox`] says why the log has a gate).

use anyhow::{Context, Result};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// How often the grader looks whether the harness is opening its log.
const GATE_POLL: std::time::Duration = std::time::Duration::from_micros(300);
/// fcntl's F_SETSIG (Linux, every architecture), which the libc crate does not name.
const F_SETSIG: libc::c_int = 10;

/// The environment a test starts with in either tier, its scratch folder (as the test sees it)
/// as home and `/tmp`: nothing of the grader's but the `GPUMEM_*` settings, and the `cpu` device
/// unless the grader runs on cuda. No kernel cache: a folder shared between submissions would let
/// one submission's process plant the machine code another's loads.
pub fn test_env(scratch: &str, cuda: bool) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("HOME".into(), scratch.into()),
        ("TMPDIR".into(), scratch.into()),
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("RUST_BACKTRACE".into(), "0".into()),
        // Fewer malloc arenas: each reserves 64 MiB of address space, which counts.
        ("MALLOC_ARENA_MAX".into(), "2".into()),
    ];
    for (key, value) in std::env::vars() {
        if key.starts_with("GPUMEM_") && key != "GPUMEM_KERNEL_CACHE" {
            env.push((key, value));
        }
    }
    env.push(("GPUMEM_KERNEL_CACHE".into(), "off".into()));
    if !cuda {
        env.push(("GPUMEM_DEVICE".into(), "cpu".into()));
    }
    env
}

/// The harness's log file and its gate (see the module's documentation): a file in a folder of
/// its own that the test may not write (mode 0500, or 0511 when `shared`: other uids may then pass
/// through to the file, which everyone may write), on which the grader holds a read lease. A
/// thread watches the lease; when the harness's open for writing breaks it, the thread moves the
/// file out of its folder (a Landlock rule that let the test write there no longer reaches it,
/// through `/proc/self/fd` either), removes its name and takes every permission away, then lets
/// the open through.
#[derive(Debug)]
pub struct LogGate {
    dir: PathBuf,
    read: std::sync::Arc<std::fs::File>,
    state: std::sync::Arc<GateState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct GateState {
    stop: std::sync::atomic::AtomicBool,
    opened: std::sync::atomic::AtomicBool,
}

/// Creates `path`, empty, and opens it for reading only. No descriptor that may write the file
/// ever exists in the grader: a child that another thread forks at that moment would hold a copy
/// of one until it execs, and the read lease would fail (EAGAIN), as it once did in CI.
fn create_for_reading(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let flags = libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    // SAFETY: a valid C string; the descriptor returned is ours alone.
    let fd = unsafe { libc::open(name.as_ptr(), flags, 0o666 as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is open and owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

impl LogGate {
    /// Makes the folder `dir` with an empty log in it, behind its gate; `shared`: for a test
    /// process of another uid.
    pub(crate) fn new(dir: &Path, shared: bool) -> Result<LogGate> {
        use std::os::unix::fs::PermissionsExt;
        let (open, closed) = if shared {
            (0o711, 0o511)
        } else {
            (0o700, 0o500)
        };
        std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("harness.log");
        let read =
            create_for_reading(&path).with_context(|| format!("creating {}", path.display()))?;
        if shared {
            read.set_permissions(std::fs::Permissions::from_mode(0o622))
                .with_context(|| format!("opening {} to the test's uid", path.display()))?;
        }
        // A broken lease signals its holder, SIGIO by default, which would end the grader: ask
        // for SIGURG instead, which does nothing unless handled. SAFETY: fcntl on a descriptor we
        // own.
        let taken = unsafe {
            libc::fcntl(read.as_raw_fd(), F_SETSIG, libc::SIGURG) == 0
                && libc::fcntl(read.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) == 0
        };
        if !taken {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("taking a lease on {} (file leases)", path.display()));
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(closed))
            .with_context(|| format!("closing {} to writes", dir.display()))?;
        let outside = dir.with_extension("closed");
        let read = std::sync::Arc::new(read);
        let state = std::sync::Arc::new(GateState::default());
        let thread = {
            let (read, state, dir) = (read.clone(), state.clone(), dir.to_path_buf());
            std::thread::spawn(move || {
                while !state.stop.load(Ordering::Acquire) {
                    // SAFETY: fcntl on a descriptor the Arc keeps open.
                    let lease = unsafe { libc::fcntl(read.as_raw_fd(), libc::F_GETLEASE) };
                    // A lease being broken reads as the type it is going to: none.
                    if lease == libc::F_UNLCK {
                        let _ =
                            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(open));
                        let removed = std::fs::rename(dir.join("harness.log"), &outside).is_ok()
                            && std::fs::remove_file(&outside).is_ok()
                            && read
                                .set_permissions(std::fs::Permissions::from_mode(0o000))
                                .is_ok();
                        let _ =
                            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(closed));
                        state.opened.store(removed, Ordering::Release);
                        // SAFETY: as above.
                        unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
                        return;
                    }
                    std::thread::sleep(GATE_POLL);
                }
            })
        };
        Ok(LogGate {
            dir: dir.to_path_buf(),
            read,
            state,
            thread: Some(thread),
        })
    }

    /// The log file's path, as the harness is to open it.
    pub fn path(&self) -> PathBuf {
        self.dir.join("harness.log")
    }

    /// The log's own folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the gate and returns what the harness wrote (at most 64 KiB), or `None` when the
    /// harness never opened the log. Call once the sandbox is gone.
    pub fn finish(mut self) -> Option<String> {
        self.state.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if !self.state.opened.load(Ordering::Acquire) {
            return None;
        }
        let mut bytes = Vec::new();
        let _ = (&*self.read).take(64 * 1024).read_to_end(&mut bytes);
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

impl Drop for LogGate {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        self.state.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_graded_test_process_gets_the_kernel_cache_off_once() {
        let env = super::test_env("/scratch", true);
        let caches: Vec<&str> = env
            .iter()
            .filter(|(key, _)| key == "GPUMEM_KERNEL_CACHE")
            .map(|(_, value)| value.as_str())
            .collect();
        assert_eq!(caches, ["off"]);
    }
}
