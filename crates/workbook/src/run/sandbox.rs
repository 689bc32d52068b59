//! The sandbox every graded test process runs in, in one of two tiers ([`Sandbox`], chosen by
//! `--sandbox`, see [`Tier`]): namespaces, made by bubblewrap (this module), or, where bubblewrap
//! cannot make them (a hosted grader's container), Landlock, seccomp and rlimits under a uid per
//! test ([`super::landlocked`]).
//!
//! In the namespaces tier (`bwrap`, Debian's `bubblewrap`), each test gets namespaces of its own
//! (PID, network, IPC, UTS, user where needed): it sees no other process, the grader included, and
//! has no network. Its file system is built from nothing: the shared-library folders read-only
//! (`/usr/lib`, `/lib`...), its own test executable read-only, a fresh `/dev` (read-only, with a
//! `/dev/shm` of bounded size), a scratch `/tmp` of bounded size (its working directory), and the
//! harness's log file; no `/proc`, no `/usr/bin`, no other submission, no hidden test, none of the
//! grader's files. A seccomp filter refuses the system calls that reach into another process's
//! memory or descriptors (`ptrace`, `process_vm_readv`/`writev`, `pidfd_getfd`). When the test
//! process ends, or is killed at its time limit, the kernel ends everything in its PID namespace
//! before the grader goes on.
//!
//! A test passes only when the sandbox exits with status 0 and the harness's log says the test
//! passed. That log is a file the harness opens before any of the learner's code runs, behind a
//! gate: the grader holds a lease on it, so the harness's open waits until the grader has removed
//! the file's name and let the open through. From then on the harness writes to a file that no path
//! leads to; learner code can neither open it nor create another in its folder, and safe Rust (the
//! learner's crate may not use `unsafe`) cannot reach the harness's descriptor.

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the folder of the harness's log is inside the sandbox.
pub const LOG_DIR: &str = "/run/workbook/log";
/// Where the harness's log file is inside the sandbox (until the harness has opened it).
pub const LOG_PATH: &str = "/run/workbook/log/harness.log";
/// Where the test executable is inside the sandbox.
pub const BINARY_DIR: &str = "/run/workbook/bin";
/// The scratch folder inside the sandbox: the only one the test may write (with `/dev/shm`).
pub const SCRATCH: &str = "/tmp";
/// Size of each of `/tmp` and `/dev/shm` when there is no memory limit.
const UNLIMITED_TMPFS: u64 = 256 << 20;
/// The descriptor the seccomp program is passed to bwrap on.
const SECCOMP_FD: RawFd = 10;
/// The descriptor bwrap writes what it started (its `child-pid`) on.
const INFO_FD: RawFd = 11;

pub use super::Tier;
pub use super::confinement::{LogGate, test_env};
pub use super::landlocked::{Confined, Landlocked};

/// Where every graded test process runs: one of the two tiers.
#[derive(Debug)]
pub enum Sandbox {
    /// Namespaces of its own, made by bubblewrap.
    Namespaces(Bubblewrap),
    /// Landlock, seccomp and rlimits, under a uid of its own when the grader is root.
    Landlock(Landlocked),
}

impl Sandbox {
    /// The sandbox `--sandbox auto` chooses: namespaces where bubblewrap can make them, else
    /// Landlock. The error says why neither can run.
    pub fn detect() -> Result<Sandbox> {
        Ok(Sandbox::choose(Tier::Auto)?.expect("auto always chooses a tier"))
    }

    /// The sandbox of `tier` (`None` for [`Tier::None`]), or why it cannot run here.
    pub fn choose(tier: Tier) -> Result<Option<Sandbox>> {
        Ok(Some(match tier {
            Tier::None => return Ok(None),
            Tier::Namespaces => Sandbox::Namespaces(Bubblewrap::detect()?),
            Tier::Landlock => Sandbox::Landlock(Landlocked::detect()?),
            Tier::Auto => match Bubblewrap::detect() {
                Ok(bwrap) => Sandbox::Namespaces(bwrap),
                Err(namespaces) => Sandbox::Landlock(Landlocked::detect().map_err(|landlock| {
                    anyhow::anyhow!(
                        "neither tier of the sandbox can run here: namespaces: {namespaces:#}; \
                         landlock: {landlock:#}"
                    )
                })?),
            },
        }))
    }

    /// The tier, in words (for `grade`'s report and results.json).
    pub fn describe(&self) -> String {
        match self {
            Sandbox::Namespaces(_) => "namespaces (bubblewrap)".to_string(),
            Sandbox::Landlock(landlocked) => landlocked.describe(),
        }
    }
}

/// A working bubblewrap, and this run's private folder for the harness logs.
#[derive(Debug)]
pub struct Bubblewrap {
    bwrap: PathBuf,
    /// The seccomp program, compiled, in the private folder (None on an architecture this
    /// does not know: then no filter).
    seccomp: Option<PathBuf>,
    /// The grader's private folder: the seccomp program and each test's log folder.
    dir: tempfile::TempDir,
    next: AtomicU64,
    cuda: bool,
}

/// What one sandboxed process needs from the grader's side, made by [`Bubblewrap::command`].
#[derive(Debug)]
pub struct Prepared {
    /// `bwrap` with every argument, ready to spawn.
    pub command: Command,
    /// The harness's log, behind its gate.
    pub log: LogGate,
    /// The read end of bwrap's info descriptor (it writes the PID of the namespace's first
    /// process there).
    pub info: OwnedFd,
    /// Kept open until the process has been spawned.
    keep: Vec<OwnedFd>,
}

impl Bubblewrap {
    /// Finds `bwrap` (`WORKBOOK_BWRAP`, else on `PATH`) and checks that it can build a sandbox
    /// here. The grader's private folder for the harness logs is made in `/dev/shm` (a tmpfs,
    /// where file leases work), else in the temporary folder. The error says why the sandbox
    /// cannot run.
    pub fn detect() -> Result<Bubblewrap> {
        let bwrap = match std::env::var_os("WORKBOOK_BWRAP") {
            Some(path) => PathBuf::from(path),
            None => find_on_path("bwrap").context(
                "bubblewrap (`bwrap`) is not installed (Debian/Ubuntu: apt-get install bubblewrap)",
            )?,
        };
        let dir = tempfile::Builder::new()
            .prefix("workbook-sandbox-")
            .tempdir_in("/dev/shm")
            .or_else(|_| {
                tempfile::Builder::new()
                    .prefix("workbook-sandbox-")
                    .tempdir()
            })
            .context("creating the grader's private folder")?;
        let seccomp = match seccomp_program() {
            Some(program) => {
                let path = dir.path().join("seccomp.bpf");
                std::fs::write(&path, program)
                    .with_context(|| format!("writing {}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        let cuda = std::env::var("GPUMEM_DEVICE").is_ok_and(|d| d.starts_with("cuda"));
        let sandbox = Bubblewrap {
            bwrap,
            seccomp,
            dir,
            next: AtomicU64::new(0),
            cuda,
        };
        // The probe: bwrap itself, run inside a sandbox like a test's, prints its version.
        let mut probe = sandbox.command(&sandbox.bwrap, &["--version"], None, &[])?;
        let output = probe
            .command
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", sandbox.bwrap.display()))?;
        if !output.status.success() {
            bail!(
                "{} cannot build a sandbox here ({}): {} (are unprivileged user namespaces \
                 turned off? sysctl kernel.unprivileged_userns_clone / \
                 user.max_user_namespaces; or is this a container whose seccomp rules refuse \
                 namespaces?)",
                sandbox.bwrap.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(sandbox)
    }

    /// The `bwrap` program this sandbox runs.
    pub fn bwrap(&self) -> &Path {
        &self.bwrap
    }

    /// `bwrap` with its arguments to run `binary args...` in a fresh sandbox, with `extra_env` set
    /// there (after the defaults, so it wins), a new empty
    /// harness log bound at [`LOG_PATH`], and, in the child before exec, the memory limit
    /// (`RLIMIT_AS`: every mapping counts, shared ones too; `RLIMIT_DATA` when testing on CUDA,
    /// whose driver reserves address space far beyond what it uses) and no core files.
    /// `/tmp` and `/dev/shm` are each an eighth of the limit.
    pub fn command(
        &self,
        binary: &Path,
        args: &[&str],
        memory_limit: Option<u64>,
        extra_env: &[(String, String)],
    ) -> Result<Prepared> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let log = LogGate::new(&self.dir.path().join(format!("test-{n}")), false)?;
        let name = binary
            .file_name()
            .context("a test executable has no file name")?;
        let inside = Path::new(BINARY_DIR).join(name);
        let tmpfs = memory_limit.map_or(UNLIMITED_TMPFS, |l| l / 8).to_string();

        let mut cmd = Command::new(&self.bwrap);
        cmd.args(["--unshare-all", "--die-with-parent", "--new-session"])
            // Run as root, bwrap would keep root's capabilities inside.
            .args(["--cap-drop", "ALL"])
            .args(["--hostname", "sandbox"]);
        for dir in [
            "/usr/lib",
            "/usr/lib64",
            "/usr/lib32",
            "/lib",
            "/lib64",
            "/lib32",
        ] {
            let path = Path::new(dir);
            if path.is_symlink() {
                if let Ok(target) = std::fs::read_link(path) {
                    cmd.arg("--symlink").arg(target).arg(dir);
                }
            } else if path.is_dir() {
                cmd.args(["--ro-bind", dir, dir]);
            }
        }
        cmd.args(["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"])
            .arg("--ro-bind")
            .arg(binary)
            .arg(&inside)
            .args(["--dev", "/dev"]);
        if self.cuda {
            for entry in std::fs::read_dir("/dev").into_iter().flatten().flatten() {
                let path = entry.path();
                if entry.file_name().as_bytes().starts_with(b"nvidia") {
                    cmd.arg("--dev-bind").arg(&path).arg(&path);
                }
            }
        }
        cmd.args(["--size", &tmpfs, "--tmpfs", "/dev/shm"])
            .args(["--remount-ro", "/dev"])
            .args(["--size", &tmpfs, "--tmpfs", SCRATCH])
            .arg("--bind")
            .arg(log.dir())
            .arg(LOG_DIR)
            .args(["--remount-ro", "/", "--chdir", SCRATCH, "--clearenv"]);
        let mut env = test_env(SCRATCH, self.cuda);
        env.extend(extra_env.iter().cloned());
        for (key, value) in env {
            cmd.arg("--setenv").arg(key).arg(value);
        }
        let mut keep = Vec::new();
        let mut pass = Vec::new();
        if let Some(path) = &self.seccomp {
            let file =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let fd = OwnedFd::from(file);
            pass.push((fd.as_raw_fd(), SECCOMP_FD));
            keep.push(fd);
            cmd.args(["--seccomp", &SECCOMP_FD.to_string()]);
        }
        let (info_read, info_write) = pipe().context("creating a pipe for bwrap's info")?;
        pass.push((info_write.as_raw_fd(), INFO_FD));
        keep.push(info_write);
        cmd.args(["--info-fd", &INFO_FD.to_string()])
            .arg("--")
            .arg(&inside)
            .args(args);
        let limit_kind = if self.cuda {
            libc::RLIMIT_DATA
        } else {
            libc::RLIMIT_AS
        };
        let limit = memory_limit.map(|l| libc::rlim_t::try_from(l).unwrap_or(libc::RLIM_INFINITY));
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe system calls (fcntl, dup2, setrlimit) on descriptors the child has.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                // Moved above every target first, so no target overwrites a source.
                let mut moved = [(0, 0); 2];
                for (i, &(from, to)) in pass.iter().enumerate() {
                    let high = libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 1000);
                    if high < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    moved[i] = (high, to);
                }
                for &(high, to) in &moved[..pass.len()] {
                    if libc::dup2(high, to) != to {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                let no_core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::setrlimit(libc::RLIMIT_CORE, &no_core) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(limit) = limit {
                    let rlimit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(limit_kind, &rlimit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            })
        };
        Ok(Prepared {
            command: cmd,
            log,
            info: info_read,
            keep,
        })
    }
}

impl Prepared {
    /// Drops the grader's copies of the descriptors given to bwrap (call once it is spawned, so
    /// that bwrap's info pipe ends when bwrap closes it).
    pub fn spawned(&mut self) {
        self.keep.clear();
    }
}

/// Reads bwrap's info JSON to its end and returns the `child-pid` it names: the first process of
/// the sandbox's PID namespace, as the grader sees it. Killing it ends the whole namespace.
pub fn read_child_pid(info: OwnedFd) -> Option<libc::pid_t> {
    let mut text = String::new();
    std::fs::File::from(info).read_to_string(&mut text).ok()?;
    let value: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    value["child-pid"]
        .as_i64()
        .and_then(|p| libc::pid_t::try_from(p).ok())
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The seccomp program (classic BPF, as bwrap's `--seccomp` reads it): a foreign architecture's
/// system calls kill the process; `ptrace`, `process_vm_readv`, `process_vm_writev` and
/// `pidfd_getfd` fail with `EPERM`; everything else is allowed.
fn seccomp_program() -> Option<Vec<u8>> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        const LD_W_ABS: u16 = 0x20;
        const JEQ_K: u16 = 0x15;
        const JGE_K: u16 = 0x35;
        const RET_K: u16 = 0x06;
        const KILL_PROCESS: u32 = 0x8000_0000;
        const ALLOW: u32 = 0x7fff_0000;
        const ERRNO_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
        let denied = [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_pidfd_getfd,
        ];
        // (code, jt, jf, k); a jump's jt of u8::MAX stands for "to the EPERM return".
        let mut program: Vec<(u16, u8, u8, u32)> = vec![
            (LD_W_ABS, 0, 0, 4), // the architecture
            (JEQ_K, 1, 0, ARCH),
            (RET_K, 0, 0, KILL_PROCESS),
            (LD_W_ABS, 0, 0, 0), // the system call's number
        ];
        if cfg!(target_arch = "x86_64") {
            // x32 system calls (number | 0x40000000) are refused as a whole.
            program.push((JGE_K, u8::MAX, 0, 0x4000_0000));
        }
        for nr in denied {
            program.push((JEQ_K, u8::MAX, 0, nr as u32));
        }
        program.push((RET_K, 0, 0, ALLOW));
        let eperm = program.len();
        program.push((RET_K, 0, 0, ERRNO_EPERM));
        let mut bytes = Vec::new();
        for (i, (code, jt, jf, k)) in program.into_iter().enumerate() {
            let jt = if jt == u8::MAX {
                u8::try_from(eperm - i - 1).ok()?
            } else {
                jt
            };
            bytes.extend_from_slice(&code.to_ne_bytes());
            bytes.push(jt);
            bytes.push(jf);
            bytes.extend_from_slice(&k.to_ne_bytes());
        }
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::needs_sandbox;
    use crate::run::runner::{RunOptions, TestCase, Verdict, run_test};
    use std::sync::Arc;
    use std::time::Duration;

    /// Runs a probe as the grader runs a test, and fails unless it passed, with what it printed.
    fn assert_probe_passes(case: &TestCase, options: &RunOptions) {
        let outcome = run_test(case, options).expect("the probe runs");
        assert_eq!(
            outcome.verdict,
            Verdict::Passed,
            "{}\n{}\n{}",
            outcome.message,
            outcome.stdout,
            outcome.stderr
        );
    }

    const GRADER: &str = "WORKBOOK_PROBE_GRADER";
    const PORT: &str = "WORKBOOK_PROBE_PORT";
    const OUTSIDE: &str = "WORKBOOK_PROBE_OUTSIDE";

    /// Runs [`probe`] (this very test executable) in the sandbox, as the grader runs a test.
    #[test]
    fn a_test_process_cannot_see_the_grader_write_outside_its_scratch_or_reach_the_network() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let sandbox = match Bubblewrap::detect() {
            Ok(sandbox) => Sandbox::Namespaces(sandbox),
            Err(e) => {
                needs_sandbox::unavailable(&format!("{e:#}"));
                return;
            }
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listening socket");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let case = TestCase {
            target: "workbook".into(),
            binary: std::env::current_exe().expect("this test executable"),
            name: "run::sandbox::tests::probe".into(),
        };
        let options = RunOptions {
            timeout: Duration::from_secs(60),
            env: vec![
                (GRADER.into(), std::process::id().to_string()),
                (
                    PORT.into(),
                    listener.local_addr().unwrap().port().to_string(),
                ),
                (OUTSIDE.into(), outside.display().to_string()),
            ],
            sandbox: Some(Arc::new(sandbox)),
            ..RunOptions::default()
        };
        assert_probe_passes(&case, &options);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

        // The probe can fail: PID 1 is the sandbox's own first process, which it does see.
        let mut options = options;
        options.env[0].1 = "1".into();
        let outcome = run_test(&case, &options).expect("the probe runs");
        assert_eq!(outcome.verdict, Verdict::Failed);
        assert!(
            outcome.message.contains("the grader's PID 1 is visible"),
            "{}",
            outcome.message
        );
    }

    /// What a test process finds in the sandbox; run there by the test above (and does nothing
    /// elsewhere).
    #[test]
    #[ignore = "run inside the sandbox by a_test_process_cannot_see_the_grader_..."]
    fn probe() {
        let Ok(grader) = std::env::var(GRADER) else {
            return;
        };
        let grader: libc::pid_t = grader.parse().unwrap();
        // No /proc at all, a PID namespace of its own: the grader's PID names nothing here.
        assert!(!Path::new("/proc/self").exists());
        assert_eq!(std::os::unix::process::parent_id(), 1);
        // SAFETY: signal 0 only asks whether the process exists.
        let found = unsafe { libc::kill(grader, 0) };
        assert_eq!(found, -1, "the grader's PID {grader} is visible");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ESRCH)
        );
        // Writes go to the scratch folder and nowhere else.
        std::fs::write(Path::new(SCRATCH).join("mine"), "x").expect("the scratch folder");
        let outside = std::env::var(OUTSIDE).unwrap();
        for dir in [
            "/",
            "/usr/lib",
            "/dev",
            "/run/workbook",
            BINARY_DIR,
            outside.as_str(),
        ] {
            let path = Path::new(dir).join("escaped");
            assert!(
                std::fs::write(&path, "x").is_err(),
                "wrote {}",
                path.display()
            );
        }
        assert!(
            !Path::new(&outside).exists(),
            "the grader's folder is visible"
        );
        // The harness's log has no name any more, and no other can be made beside it.
        assert!(!Path::new(LOG_PATH).exists());
        assert!(std::fs::write(LOG_PATH, "ok probe\n").is_err());
        assert!(!Path::new("/usr/bin").exists() && !Path::new("/home").exists());
        // No network: the grader's listening socket on the loopback is not this loopback, and
        // nothing outside is reachable.
        let port: u16 = std::env::var(PORT).unwrap().parse().unwrap();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        let udp = std::net::UdpSocket::bind("0.0.0.0:0").expect("a socket");
        assert!(udp.send_to(b"x", "1.1.1.1:53").is_err());
    }

    #[test]
    fn the_seccomp_program_is_whole_instructions() {
        if let Some(program) = seccomp_program() {
            assert_eq!(program.len() % 8, 0);
            assert!(program.len() / 8 >= 9);
        }
    }

    // The Landlock tier, through the same runner.

    const LANDLOCK_GRADER: &str = "GPUMEM_PROBE_GRADER";
    const LANDLOCK_OUTSIDE: &str = "GPUMEM_PROBE_OUTSIDE";

    /// Runs [`landlock_probe`] (this very test executable) confined, as the grader runs a test.
    #[test]
    fn a_confined_test_cannot_reopen_its_log_write_outside_its_scratch_or_reach_out() {
        let landlocked = match Landlocked::detect() {
            Ok(landlocked) => landlocked,
            Err(e) => {
                needs_sandbox::unavailable(&format!("{e:#}"));
                return;
            }
        };
        let dir = tempfile::tempdir().expect("a temporary folder");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "kept").unwrap();
        let case = TestCase {
            target: "workbook".into(),
            binary: std::env::current_exe().expect("this test executable"),
            name: "run::sandbox::tests::landlock_probe".into(),
        };
        let options = RunOptions {
            timeout: Duration::from_secs(60),
            env: vec![
                (LANDLOCK_GRADER.into(), std::process::id().to_string()),
                (LANDLOCK_OUTSIDE.into(), outside.display().to_string()),
            ],
            sandbox: Some(Arc::new(Sandbox::Landlock(landlocked))),
            ..RunOptions::default()
        };
        assert_probe_passes(&case, &options);
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "kept"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    /// What a confined test process can do; run there by the test above (and does nothing
    /// elsewhere).
    #[test]
    #[ignore = "run confined by a_confined_test_cannot_reopen_its_log_..."]
    fn landlock_probe() {
        let Ok(grader) = std::env::var(LANDLOCK_GRADER) else {
            return;
        };
        let name = "run::sandbox::tests::landlock_probe";
        // Every descriptor, the harness's log among them, through /proc and /dev/fd: none may be
        // opened again for writing.
        for fd in 0..64 {
            for path in [format!("/proc/self/fd/{fd}"), format!("/dev/fd/{fd}")] {
                let opened = std::fs::OpenOptions::new().append(true).open(&path);
                if let Ok(mut file) = opened {
                    use std::io::Write;
                    let _ = writeln!(file, "ok {name}");
                    // stdout and stderr are pipes the grader reads: those may be written.
                    assert!(fd <= 2, "reopened {path} for writing");
                }
            }
        }
        // /proc is not readable, the grader cannot be signalled.
        assert!(std::fs::read_to_string("/proc/self/status").is_err());
        assert!(std::fs::read_to_string(format!("/proc/{grader}/cmdline")).is_err());
        let grader: i32 = grader.parse().unwrap();
        // SAFETY: signal 0 only asks whether the process may be signalled.
        let signalled = unsafe { libc::kill(grader, 0) };
        assert_eq!(signalled, -1, "the grader can be signalled");
        // Writes go to the scratch folder and nowhere else; nothing outside can be removed.
        let scratch = std::env::var("TMPDIR").unwrap();
        std::fs::write(Path::new(&scratch).join("mine"), "x").expect("the scratch folder");
        let outside = std::env::var(LANDLOCK_OUTSIDE).unwrap();
        for dir in ["/tmp", "/dev/shm", "/", outside.as_str()] {
            let path = Path::new(dir).join("escaped");
            assert!(
                std::fs::write(&path, "x").is_err(),
                "wrote {}",
                path.display()
            );
        }
        assert!(std::fs::remove_file(Path::new(&outside).join("keep")).is_err());
        assert!(std::fs::read_dir("/").is_err());
        // No sockets, no namespaces, no new session.
        assert!(std::net::UdpSocket::bind("127.0.0.1:0").is_err());
        assert!(std::net::TcpStream::connect("127.0.0.1:9").is_err());
        // SAFETY: these only ask the kernel, and fail.
        unsafe {
            assert_eq!(libc::unshare(libc::CLONE_NEWUSER), -1);
            assert_eq!(libc::setsid(), -1);
        }
    }
}
