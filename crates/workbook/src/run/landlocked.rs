//! The sandbox's second tier, for where bubblewrap cannot make namespaces: a hosted grader's
//! container (Docker's default seccomp rules refuse `unshare`, `setns`, `mount` and namespace
//! flags to `clone` without `CAP_SYS_ADMIN`), or a machine with user namespaces turned off.
//! Landlock (Linux ≥ 5.13) and seccomp work there, unprivileged.
//!
//! Each test process, between `fork` and `exec`:
//! - as root, switches to a uid and gid of its own, from [`UID_RANGE`] (no supplementary
//!   groups): it can signal, trace or read no other process, and writes no file that is not
//!   open to everyone;
//! - sets `PR_SET_NO_NEW_PRIVS` and its rlimits: address space (the memory limit), file size,
//!   open files, no core files, and processes (`RLIMIT_NPROC`, counted per uid: a fork bomb
//!   stops);
//! - restricts itself with a Landlock ruleset: it may read and run its own test executable (run
//!   through a descriptor the grader opened, so the folders above it need not be open to its
//!   uid), read the shared libraries, read `/dev/null`, `/dev/zero` and `/dev/urandom`, write
//!   `/dev/null`, write its harness log, and read and write a fresh scratch folder (its working
//!   folder, `HOME`, `TMPDIR` and `CARGO_MANIFEST_DIR`); nothing else, `/proc` included. TCP
//!   connections and binds, abstract UNIX sockets and signals to processes outside are refused
//!   where the kernel's Landlock knows them (ABI 4 and 6);
//! - installs a seccomp filter (built by `seccompiler`): no sockets at all, no `ptrace`,
//!   `process_vm_readv`/`writev` or `pidfd_getfd`, no namespaces (`unshare`, `setns`, `mount`,
//!   namespace flags to `clone`; `clone3`, whose flags a filter cannot read, says it does not
//!   exist so that the C library uses `clone`), no `io_uring`, no new session or process group.
//!
//! When the test process ends or is killed at its time limit, its process group is killed (it
//! cannot leave it), and, as root, every process of its uid (`kill(-1, SIGKILL)` run as that uid)
//! before the grader reads its output and log.
//!
//! The harness's log is the same gate as bubblewrap's ([`super::confinement::LogGate`]): a file the
//! harness opens before any of the learner's code runs, whose name the grader then moves out of
//! the folder that the Landlock rules let the test write, and removes.

use super::confinement::{LogGate, test_env};
use anyhow::{Context, Result, bail};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::sys::resource::Resource;
use nix::unistd::{Gid, Uid};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::ffi::{CString, c_char};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The uids (and gids, the same numbers) a test process runs as when the grader is root. A uid
/// that names an account (`getpwuid`) is skipped; `WORKBOOK_SANDBOX_UIDS=FIRST-LAST` sets another
/// range.
pub const UID_RANGE: (u32, u32) = (60_000, 60_999);
/// The Landlock ABI the ruleset is written for: rights of a newer ABI than the kernel's are
/// dropped (best effort); ABI 1 (Linux 5.13) is required.
const WRITTEN_FOR: ABI = ABI::V6;
/// Open files a test process may have.
const MAX_OPEN_FILES: u64 = 256;
/// Processes (threads included) a test's uid may have, as root.
const MAX_PROCESSES: u64 = 256;
/// The largest file a test may write when there is no memory limit.
const UNLIMITED_FILE_SIZE: u64 = 256 << 20;

/// The second tier: Landlock, seccomp and rlimits, under a uid per test when run as root.
#[derive(Debug)]
pub struct Landlocked {
    /// Root: each test runs under a uid of its own (else under the grader's).
    as_root: bool,
    /// The kernel's Landlock ABI, for [`Landlocked::describe`].
    abi: i64,
    /// The harness logs' private folder (in `/dev/shm`, where file leases work).
    logs: tempfile::TempDir,
    /// The tests' scratch folders.
    scratch: tempfile::TempDir,
    /// The seccomp programs (one refuses with `EPERM`, one says `clone3` does not exist).
    filters: Vec<BpfProgram>,
    /// The folder of the uid locks (root only).
    uid_locks: PathBuf,
    uids: (u32, u32),
    /// Processes the grader's uid may have (not root: the grader's own count plus
    /// [`MAX_PROCESSES`]).
    nproc: u64,
    next: AtomicU64,
    cuda: bool,
}

/// One confined test process, ready to spawn, made by [`Landlocked::command`]; its scratch folder
/// is removed when it is dropped.
#[derive(Debug)]
pub struct Confined {
    /// The test executable, run through a descriptor, with everything set up before exec.
    pub command: Command,
    /// The harness's log, behind its gate.
    pub log: LogGate,
    scratch: Scratch,
    uid: Option<UidLease>,
}

/// A test's scratch folder, removed when dropped.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A uid from the range, held (a lock file) while one test runs under it.
#[derive(Debug)]
struct UidLease {
    uid: Uid,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// The arguments and environment of `fexecve`, made before `fork` (the child must not allocate).
struct ExecArgs {
    _strings: Vec<CString>,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
}

// SAFETY: the pointers point into `_strings`, which the struct owns and never changes.
unsafe impl Send for ExecArgs {}
// SAFETY: as above; nothing is ever written through the pointers.
unsafe impl Sync for ExecArgs {}

impl ExecArgs {
    /// Runs the program open on `fd` with these arguments and environment; returns only on an
    /// error.
    fn fexecve(&self, fd: std::os::fd::RawFd) -> std::io::Error {
        // SAFETY: both lists are arrays of valid C strings ended by a null pointer.
        unsafe { libc::fexecve(fd, self.argv.as_ptr(), self.envp.as_ptr()) };
        std::io::Error::last_os_error()
    }

    fn new(args: &[CString], env: &[CString]) -> ExecArgs {
        let mut strings = Vec::with_capacity(args.len() + env.len());
        strings.extend(args.iter().cloned());
        strings.extend(env.iter().cloned());
        let pointers = |from: usize, to: usize| {
            let mut list: Vec<*const c_char> =
                strings[from..to].iter().map(|s| s.as_ptr()).collect();
            list.push(std::ptr::null());
            list
        };
        let argv = pointers(0, args.len());
        let envp = pointers(args.len(), strings.len());
        ExecArgs {
            _strings: strings,
            argv,
            envp,
        }
    }
}

impl Landlocked {
    /// Checks that Landlock is enabled and builds the seccomp programs; makes the private folders.
    /// The error says what is missing.
    pub fn detect() -> Result<Landlocked> {
        // The ruleset every test gets is made the same way; here only whether the kernel takes one.
        base_ruleset().and_then(Ruleset::create).context(
            "Landlock is not available (it needs Linux 5.13 or later, with `landlock` among \
                 the kernel's lsm= modules)",
        )?;
        let filters = seccomp_filters()?;
        let as_root = Uid::effective().is_root();
        let logs = tempfile::Builder::new()
            .prefix("workbook-sandbox-")
            .tempdir_in("/dev/shm")
            .or_else(|_| {
                tempfile::Builder::new()
                    .prefix("workbook-sandbox-")
                    .tempdir()
            })
            .context("creating the grader's private folder")?;
        let scratch = tempfile::Builder::new()
            .prefix("workbook-scratch-")
            .tempdir()
            .context("creating the tests' scratch folder")?;
        // Other uids may pass through (to the files meant for them), not list or write.
        for dir in [logs.path(), scratch.path()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
                .with_context(|| format!("opening {} to the tests' uids", dir.display()))?;
        }
        let uids = match std::env::var("WORKBOOK_SANDBOX_UIDS") {
            Ok(text) => parse_range(&text).with_context(|| {
                format!("WORKBOOK_SANDBOX_UIDS={text}: write it as FIRST-LAST, such as 60000-60999")
            })?,
            Err(_) => UID_RANGE,
        };
        let uid_locks = std::env::temp_dir().join("workbook-sandbox-uids");
        if as_root {
            std::fs::create_dir_all(&uid_locks)
                .with_context(|| format!("creating {}", uid_locks.display()))?;
            std::fs::set_permissions(&uid_locks, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("closing {}", uid_locks.display()))?;
        }
        let nproc = if as_root {
            MAX_PROCESSES
        } else {
            tasks_of(Uid::current()) + MAX_PROCESSES
        };
        // SAFETY: LANDLOCK_CREATE_RULESET_VERSION (1) with no attributes only returns the ABI.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        Ok(Landlocked {
            as_root,
            abi,
            logs,
            scratch,
            filters,
            uid_locks,
            uids,
            nproc,
            next: AtomicU64::new(0),
            cuda: std::env::var("GPUMEM_DEVICE").is_ok_and(|d| d.starts_with("cuda")),
        })
    }

    /// Whether each test runs under a uid of its own (the grader is root).
    pub fn as_root(&self) -> bool {
        self.as_root
    }

    /// The tier in words, as `grade` and results.json name it.
    pub fn describe(&self) -> String {
        format!(
            "landlock ({}, Landlock ABI {})",
            if self.as_root {
                "as root: a uid per test"
            } else {
                "not root: under the grader's uid"
            },
            self.abi
        )
    }

    /// The test executable `binary` with `args` (and, when `log`, `--logfile` naming the harness
    /// log), confined as the module says, with `extra_env` set after the defaults (a
    /// `CARGO_MANIFEST_DIR` there names the scratch folder instead), `memory_limit` its address
    /// space (its data segment when testing on CUDA). Spawn the command in a process group of its
    /// own, then call [`Confined::end`] with its id.
    pub fn command(
        &self,
        binary: &Path,
        args: &[&str],
        log: bool,
        memory_limit: Option<u64>,
        extra_env: &[(String, String)],
    ) -> Result<Confined> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let uid = if self.as_root {
            Some(self.lease_uid()?)
        } else {
            None
        };
        let scratch = self.scratch.path().join(format!("test-{n}"));
        std::fs::create_dir(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        let scratch = Scratch(scratch);
        if let Some(lease) = &uid {
            let id = lease.uid.as_raw();
            nix::unistd::chown(&scratch.0, Some(lease.uid), Some(Gid::from_raw(id)))
                .with_context(|| format!("giving {} to uid {id}", scratch.0.display()))?;
        }
        std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("closing {}", scratch.0.display()))?;
        let gate = LogGate::new(&self.logs.path().join(format!("test-{n}")), true)?;
        let log_path = gate.path();

        let ruleset = self.ruleset(binary, &scratch.0, gate.dir())?;
        let executable =
            std::fs::File::open(binary).with_context(|| format!("opening {}", binary.display()))?;
        let c = |text: &std::ffi::OsStr| {
            CString::new(text.as_bytes()).context("an argument or variable holds a NUL byte")
        };
        let mut argv = vec![c(binary.as_os_str())?];
        for arg in args {
            argv.push(c(arg.as_ref())?);
        }
        if log {
            argv.push(c("--logfile".as_ref())?);
            argv.push(c(log_path.as_os_str())?);
        }
        let scratch_text = scratch.0.to_string_lossy().into_owned();
        let mut env = test_env(&scratch_text, self.cuda);
        for (key, value) in extra_env {
            let value = if key == "CARGO_MANIFEST_DIR" {
                scratch_text.clone()
            } else {
                value.clone()
            };
            env.push((key.clone(), value));
        }
        // The last value of a name wins, as with `Command::env`.
        let mut seen = std::collections::HashSet::new();
        let mut envp = Vec::new();
        for (key, value) in env.iter().rev() {
            if seen.insert(key.clone()) {
                envp.push(c(format!("{key}={value}").as_ref())?);
            }
        }
        let exec = ExecArgs::new(&argv, &envp);

        let file_size = memory_limit.map_or(UNLIMITED_FILE_SIZE, |l| l / 8);
        let memory_kind = if self.cuda {
            Resource::RLIMIT_DATA
        } else {
            Resource::RLIMIT_AS
        };
        let mut limits = vec![
            (Resource::RLIMIT_CORE, 0),
            (Resource::RLIMIT_FSIZE, file_size),
            (Resource::RLIMIT_NOFILE, MAX_OPEN_FILES),
            (Resource::RLIMIT_NPROC, self.nproc),
        ];
        if let Some(limit) = memory_limit {
            limits.push((memory_kind, limit));
        }
        let ids = uid.as_ref().map(|l| (l.uid, Gid::from_raw(l.uid.as_raw())));
        let filters = self.filters.clone();
        let parent = nix::unistd::Pid::this();
        let mut ruleset = Some(ruleset);
        let fd = OwnedFd::from(executable);

        let mut cmd = Command::new(binary);
        cmd.current_dir(&scratch.0).env_clear();
        // SAFETY: the closure runs in the forked child before exec, and makes only
        // async-signal-safe system calls on what was made before the fork; it ends in exec.
        unsafe {
            cmd.pre_exec(move || {
                let os = |e: nix::errno::Errno| std::io::Error::from_raw_os_error(e as i32);
                if let Some((uid, gid)) = ids {
                    nix::unistd::setgroups(&[]).map_err(os)?;
                    nix::unistd::setresgid(gid, gid, gid).map_err(os)?;
                    nix::unistd::setresuid(uid, uid, uid).map_err(os)?;
                }
                // After the uid changed (a change clears it), and checked against a parent
                // that ended before.
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(os)?;
                if nix::unistd::getppid() != parent {
                    libc::_exit(1);
                }
                nix::sys::prctl::set_no_new_privs().map_err(os)?;
                for &(resource, value) in &limits {
                    nix::sys::resource::setrlimit(resource, value, value).map_err(os)?;
                }
                let refused = || std::io::Error::from_raw_os_error(libc::EPERM);
                let status = ruleset
                    .take()
                    .ok_or_else(refused)?
                    .restrict_self()
                    .map_err(|_| refused())?;
                if status.ruleset == RulesetStatus::NotEnforced {
                    return Err(refused());
                }
                // Nothing the grader's own process inherited (a jobserver's pipe...) goes with it:
                // a pipe could be opened again through /proc/self/fd, which Landlock allows.
                let keep = fd.as_raw_fd() as libc::c_uint;
                for (first, last) in [(3, keep.saturating_sub(1)), (keep + 1, libc::c_uint::MAX)] {
                    if first <= last {
                        libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint);
                    }
                }
                for filter in &filters {
                    seccompiler::apply_filter(filter).map_err(|_| refused())?;
                }
                Err(exec.fexecve(fd.as_raw_fd()))
            })
        };
        Ok(Confined {
            command: cmd,
            log: gate,
            scratch,
            uid,
        })
    }

    /// The Landlock ruleset of one test (see the module's documentation).
    fn ruleset(&self, binary: &Path, scratch: &Path, log_dir: &Path) -> Result<RulesetCreated> {
        let read_dir = AccessFs::from_read(WRITTEN_FOR);
        let read_file = AccessFs::ReadFile | AccessFs::Execute;
        let read_write_file = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
        let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = vec![
            (binary.to_path_buf(), read_file),
            (scratch.to_path_buf(), AccessFs::from_all(WRITTEN_FOR)),
            (
                log_dir.to_path_buf(),
                AccessFs::WriteFile | AccessFs::Truncate,
            ),
            ("/dev/null".into(), read_write_file),
        ];
        for dir in [
            "/usr/lib",
            "/usr/lib64",
            "/usr/lib32",
            "/lib",
            "/lib64",
            "/lib32",
        ] {
            if Path::new(dir).is_dir() {
                rules.push((dir.into(), read_dir));
            }
        }
        for file in [
            "/etc/ld.so.cache",
            "/dev/zero",
            "/dev/urandom",
            "/dev/random",
        ] {
            if Path::new(file).exists() {
                rules.push((file.into(), AccessFs::ReadFile.into()));
            }
        }
        if self.cuda {
            for entry in std::fs::read_dir("/dev").into_iter().flatten().flatten() {
                if entry.file_name().as_bytes().starts_with(b"nvidia") {
                    rules.push((entry.path(), read_write_file | AccessFs::IoctlDev));
                }
            }
        }
        let mut created = base_ruleset()
            .and_then(Ruleset::create)
            .context("creating a Landlock ruleset")?;
        for (path, access) in rules {
            let fd = PathFd::new(&path).with_context(|| format!("opening {}", path.display()))?;
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .with_context(|| format!("a Landlock rule for {}", path.display()))?;
        }
        Ok(created)
    }

    /// A free uid of the range: one that names no account and that no other test (of this grader
    /// or another) holds. Whatever a crashed grader left running under it is killed first.
    fn lease_uid(&self) -> Result<UidLease> {
        let (first, last) = self.uids;
        let count = u64::from(last - first) + 1;
        let start = self.next.load(Ordering::Relaxed) % count;
        for i in 0..count {
            let id = first + ((start + i) % count) as u32;
            let uid = Uid::from_raw(id);
            if nix::unistd::User::from_uid(uid).ok().flatten().is_some() {
                continue;
            }
            let path = self.uid_locks.join(id.to_string());
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            if let Ok(lock) =
                nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            {
                kill_all_of(uid);
                return Ok(UidLease { uid, _lock: lock });
            }
        }
        bail!(
            "every uid of {first}-{last} is in use by a test (set WORKBOOK_SANDBOX_UIDS to a \
             larger range)"
        )
    }
}

impl Confined {
    /// Ends everything the test left running: its process group (`pid`'s, which it cannot
    /// leave) and, as root, every process of its uid. Call once the test process has ended or
    /// passed its time limit, before reading its output and log.
    pub fn end(&self, pid: libc::pid_t) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        if let Some(lease) = &self.uid {
            kill_all_of(lease.uid);
        }
    }

    /// The test's scratch folder.
    pub fn scratch(&self) -> &Path {
        &self.scratch.0
    }
}

/// The rights every ruleset handles (so refuses unless a rule grants them): every file-system
/// right of ABI 1, required; those of later ABIs, TCP and the scopes where the kernel has them.
fn base_ruleset() -> Result<Ruleset, landlock::RulesetError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(WRITTEN_FOR))?
        .handle_access(AccessNet::from_all(WRITTEN_FOR))?
        .scope(Scope::from_all(WRITTEN_FOR))
}

/// Sends SIGKILL to every process of `uid`, from a child process that takes that uid (so that
/// `kill(-1)` reaches exactly those).
fn kill_all_of(uid: Uid) {
    // SAFETY: the child makes only async-signal-safe system calls, then `_exit`s.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            if nix::unistd::setresuid(uid, uid, uid).is_ok() {
                let all = nix::unistd::Pid::from_raw(-1);
                // Twice: a process that was forking at the first may have made a child.
                for _ in 0..2 {
                    let _ = nix::sys::signal::kill(all, nix::sys::signal::Signal::SIGKILL);
                }
            }
            // SAFETY: ends the child without running anything of the parent's.
            unsafe { libc::_exit(0) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let _ = nix::sys::wait::waitpid(child, None);
        }
        Err(_) => {}
    }
}

/// The seccomp programs (see the module's documentation), compiled by `seccompiler`.
fn seccomp_filters() -> Result<Vec<BpfProgram>> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| {
        anyhow::anyhow!(
            "seccomp filters are not built for {}: {e}",
            std::env::consts::ARCH
        )
    })?;
    let refused = [
        libc::SYS_socket,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_io_uring_setup,
        libc::SYS_setsid,
        libc::SYS_setpgid,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        refused.into_iter().map(|nr| (nr, Vec::new())).collect();
    let namespace_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWCGROUP,
    ];
    let mut clone = Vec::new();
    for flag in namespace_flags {
        let flag = flag as u64;
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )?;
        clone.push(SeccompRule::new(vec![condition])?);
    }
    rules.insert(libc::SYS_clone, clone);
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    let enosys = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?;
    Ok(vec![eperm.try_into()?, enosys.try_into()?])
}

/// `FIRST-LAST`, with FIRST ≤ LAST and FIRST > 0.
fn parse_range(text: &str) -> Option<(u32, u32)> {
    let (first, last) = text.trim().split_once('-')?;
    let (first, last) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (0 < first && first <= last).then_some((first, last))
}

/// How many tasks (threads) processes of `uid` have now, as `RLIMIT_NPROC` counts them.
fn tasks_of(uid: Uid) -> u64 {
    let mut count = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid.as_raw())) {
            count += field("Threads:").unwrap_or(1);
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_ranges_are_read_or_refused() {
        assert_eq!(parse_range("60000-60999"), Some((60_000, 60_999)));
        assert_eq!(parse_range(" 5 - 5 "), Some((5, 5)));
        assert_eq!(parse_range("0-10"), None);
        assert_eq!(parse_range("10-5"), None);
        assert_eq!(parse_range("10"), None);
    }

    #[test]
    fn the_seccomp_programs_compile_for_this_machine() {
        let filters = seccomp_filters().expect("filters");
        assert_eq!(filters.len(), 2);
        assert!(filters.iter().all(|f| !f.is_empty()));
    }
}
