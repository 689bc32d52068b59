//! The test runner: builds a crate's test executables, lists their tests, and runs every test in
//! a process of its own with a time limit.
//!
//! One process per test means a test that hangs, aborts or exits cannot take the others down, and
//! each test starts with a fresh runtime (gpumem's statistics are per process). `verify` and the
//! grader use the same three steps: [`build_tests`], [`list_tests`], [`run_tests`].

use crate::run::sandbox::{self, Sandbox};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The `--memory-limit` of `check`, `watch` and `grade`: bytes, or no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit(pub Option<u64>);

/// The smallest `--memory-limit`: below it a test process cannot even start.
pub const MIN_MEMORY_LIMIT: u64 = 64 << 20;

/// Reads a `--memory-limit`: a size such as 4GiB or 512MiB, or `none`.
pub fn parse_memory_limit(text: &str) -> Result<MemoryLimit, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(MemoryLimit(None));
    }
    let bytes = gpumem::format::parse_bytes(text).ok_or_else(|| {
        format!("`{text}` is not a size: write it like 4GiB, 512MiB or 1073741824, or `none`")
    })?;
    if bytes < MIN_MEMORY_LIMIT {
        return Err(format!(
            "{text} is too little for a test process to start; give 64MiB or more, or `none`"
        ));
    }
    Ok(MemoryLimit(Some(bytes)))
}

/// How long the grader waits for a test's output streams to end once the test process is gone
/// (a process it left behind, outside a sandbox, may hold them open for ever).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);
/// How long the grader waits for a killed sandbox to report that its processes are gone.
const SANDBOX_GRACE: Duration = Duration::from_secs(10);

/// How many of the compiler's errors a build failure keeps.
pub const MAX_BUILD_ERRORS: usize = 3;
/// The default time limit of one test, in seconds: the same for `check`, `watch` and `grade`, so
/// that a test that passes under `check` is never timed out by `grade` with the defaults.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// [`DEFAULT_TIMEOUT_SECS`] as a duration.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(DEFAULT_TIMEOUT_SECS);
/// The default number of bytes kept of each of a test's output streams.
pub const DEFAULT_OUTPUT_LIMIT: usize = 16 * 1024;
/// The default memory limit of one test process (`check`, `watch` and `grade`'s `--memory-limit`).
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

/// A test executable built by cargo (one per file in `tests/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    /// The test target's name (`tests/choose.rs` is `choose`).
    pub target: String,
    /// The executable.
    pub path: PathBuf,
}

/// Why a crate's tests could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildFailure {
    /// The compiler's first errors as it renders them (at most [`MAX_BUILD_ERRORS`]), or cargo's
    /// own error output when there were none.
    pub errors: Vec<String>,
}

impl BuildFailure {
    /// The first line of the first error, for tables.
    pub fn headline(&self) -> &str {
        self.errors
            .first()
            .and_then(|e| e.lines().find(|l| !l.trim().is_empty()))
            .unwrap_or("the build failed")
    }
}

/// Builds the integration tests (`tests/*.rs`) of `package` in the workspace at `workspace` with
/// `cargo test --no-run`, into `target_dir`. A compile error is `Ok(Err(..))`; only failing to run
/// cargo at all is an `Err`.
pub fn build_tests(
    workspace: &Path,
    package: &str,
    target_dir: &Path,
) -> Result<Result<Vec<TestBinary>, BuildFailure>> {
    build_tests_within(workspace, package, target_dir, None)
}

/// [`build_tests`], with cargo and the compilers it started stopped after `limit`: a build that
/// takes longer is a failed build saying so (code can make the compiler read without end, e.g.
/// `include_bytes!("/dev/zero")`).
pub fn build_tests_within(
    workspace: &Path,
    package: &str,
    target_dir: &Path,
    limit: Option<Duration>,
) -> Result<Result<Vec<TestBinary>, BuildFailure>> {
    let mut cmd = cargo();
    cmd.args(["test", "--no-run", "--quiet"]);
    built_tests(cmd, workspace, package, target_dir, limit)
}

/// [`build_tests`], with cargo's own progress on stderr as it builds (its `Compiling …` lines,
/// and its bar in a terminal): `workbook start` prepares the first check with it, so that a
/// first build of minutes does not pass in silence.
pub fn build_tests_showing_progress(
    workspace: &Path,
    package: &str,
    target_dir: &Path,
) -> Result<Result<Vec<TestBinary>, BuildFailure>> {
    let mut cmd = cargo();
    cmd.args(["test", "--no-run"]).stderr(Stdio::inherit());
    built_tests(cmd, workspace, package, target_dir, None)
}

/// Runs `cmd` (`cargo test --no-run` and its flags) for the integration tests of `package` and
/// reads what it built.
fn built_tests(
    mut cmd: Command,
    workspace: &Path,
    package: &str,
    target_dir: &Path,
    limit: Option<Duration>,
) -> Result<Result<Vec<TestBinary>, BuildFailure>> {
    cmd.args(["--message-format=json", "--package", package, "--test", "*"]);
    let Some(output) = run_cargo(cmd, workspace, target_dir, limit)? else {
        return Ok(Err(timed_out(limit)));
    };
    let mut found = parse_build(&output.stdout, &|_| Some(package.to_string()));
    let built = found.remove(package).unwrap_or_default();
    if output.status.success() && built.errors.is_empty() {
        return Ok(Ok(sorted(built.binaries)));
    }
    Ok(Err(BuildFailure {
        errors: if built.errors.is_empty() {
            vec![cargo_failure(&output)]
        } else {
            built.errors
        },
    }))
}

/// What one package of [`build_all_tests`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageBuild {
    /// Its test executables, by target name.
    Built(Vec<TestBinary>),
    /// It does not compile (or cargo failed for it).
    Failed(BuildFailure),
    /// The build was stopped at its time limit before this package was known to be done.
    Unfinished,
}

/// Builds the integration tests of several members of one workspace in one cargo run (`cargo
/// build --keep-going --test '*'`, so that one member's compile error does not stop the others),
/// stopped after `limit`. `members` pairs each member's directory name with its package name; the
/// result has one entry per package.
pub fn build_all_tests(
    workspace: &Path,
    members: &[(String, String)],
    target_dir: &Path,
    limit: Option<Duration>,
) -> Result<BTreeMap<String, PackageBuild>> {
    let mut cmd = cargo();
    cmd.args(["build", "--keep-going", "--quiet", "--message-format=json"]);
    for (_, package) in members {
        cmd.args(["--package", package]);
    }
    cmd.args(["--test", "*"]);
    let output = run_cargo(cmd, workspace, target_dir, limit)?;
    let stdout = output.as_ref().map_or(&[][..], |o| &o.stdout[..]);
    let mut found = parse_build(stdout, &|manifest| member_package(members, manifest));
    let mut results = BTreeMap::new();
    for (_, package) in members {
        let built = found.remove(package).unwrap_or_default();
        let result = match &output {
            _ if !built.errors.is_empty() => PackageBuild::Failed(BuildFailure {
                errors: built.errors,
            }),
            None => PackageBuild::Unfinished,
            Some(output) if output.status.success() || !built.binaries.is_empty() => {
                PackageBuild::Built(sorted(built.binaries))
            }
            Some(output) => PackageBuild::Failed(BuildFailure {
                errors: vec![cargo_failure(output)],
            }),
        };
        results.insert(package.clone(), result);
    }
    Ok(results)
}

/// The member package whose build cargo's message is about, from the manifest it names: the
/// member's own, or its predictions' (`<member>/predict/Cargo.toml`, a crate of its own whose
/// errors, such as a refused prediction, are the chapter's).
fn member_package(members: &[(String, String)], manifest: &Path) -> Option<String> {
    let package_in = |dir: &Path| {
        let name = dir.file_name()?.to_str()?;
        members
            .iter()
            .find(|(member, _)| member == name)
            .map(|(_, package)| package.clone())
    };
    let dir = manifest.parent()?;
    package_in(dir).or_else(|| {
        (dir.file_name()? == "predict")
            .then(|| dir.parent())
            .flatten()
            .and_then(package_in)
    })
}

/// A build failure saying that the build passed its time limit.
pub fn timed_out(limit: Option<Duration>) -> BuildFailure {
    BuildFailure {
        errors: vec![format!(
            "the build did not finish within {} s and was stopped (does the code make the \
             compiler read a huge or endless file, or loop in a const?)",
            limit.unwrap_or_default().as_secs()
        )],
    }
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs cargo in `workspace`, building into `target_dir`; `None` when `limit` passed first (cargo
/// and the compilers it started are then killed). Failing to run cargo at all is an `Err`.
fn run_cargo(
    mut cmd: Command,
    workspace: &Path,
    target_dir: &Path,
    limit: Option<Duration>,
) -> Result<Option<std::process::Output>> {
    cmd.current_dir(workspace)
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null());
    let program = Path::new(cmd.get_program()).display().to_string();
    let context = || format!("running {program} in {}", workspace.display());
    let Some(limit) = limit else {
        return Ok(Some(cmd.output().with_context(context)?));
    };
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().with_context(context)?;
    let pid = child.id() as libc::pid_t;
    let read_all = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut stream) = stream {
                let _ = stream.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read_all(child.stdout.take().map(|s| Box::new(s) as _));
    let stderr = read_all(child.stderr.take().map(|s| Box::new(s) as _));
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(limit) {
        Ok(status) => Some(status.context("waiting for cargo")?),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
        Err(mpsc::RecvTimeoutError::Disconnected) => bail!("lost track of cargo"),
    };
    // SAFETY: signals the process group cargo leads (cargo is not reaped yet when it timed out,
    // so the id is still ours): the compilers it started go too.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = waiter.join();
    // A signal is delivered, not obeyed at once: wait (a little) until no process of the group
    // is left, so that a stopped build has really let go of what its compilers held open.
    let gone = Instant::now() + Duration::from_secs(2);
    // SAFETY: kill with signal 0 only asks whether the group still exists.
    while unsafe { libc::kill(-pid, 0) } == 0 && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(status.map(|status| std::process::Output {
        status,
        stdout,
        stderr,
    }))
}

/// What cargo's JSON messages say of one package: its test executables and first errors.
#[derive(Debug, Default)]
struct Found {
    binaries: Vec<TestBinary>,
    errors: Vec<String>,
}

/// Reads cargo's JSON messages, giving each to the package `package_of` names from the message's
/// manifest path (messages of other packages are skipped).
fn parse_build(
    stdout: &[u8],
    package_of: &dyn Fn(&Path) -> Option<String>,
) -> BTreeMap<String, Found> {
    let stdout = String::from_utf8_lossy(stdout);
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(package) = msg["manifest_path"]
            .as_str()
            .and_then(|m| package_of(Path::new(m)))
        else {
            continue;
        };
        let entry = found.entry(package).or_default();
        match msg["reason"].as_str() {
            Some("compiler-artifact") => {
                let is_test = msg["profile"]["test"].as_bool() == Some(true);
                let is_test_target = msg["target"]["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k == "test"));
                if let (true, true, Some(exe), Some(name)) = (
                    is_test,
                    is_test_target,
                    msg["executable"].as_str(),
                    msg["target"]["name"].as_str(),
                ) {
                    entry.binaries.push(TestBinary {
                        target: name.to_string(),
                        path: PathBuf::from(exe),
                    });
                }
            }
            Some("compiler-message") => {
                let message = &msg["message"];
                let text = message["message"].as_str().unwrap_or("");
                let summary =
                    text.starts_with("aborting due to") || text.starts_with("could not compile");
                if message["level"] == "error" && !summary && entry.errors.len() < MAX_BUILD_ERRORS
                {
                    let rendered = message["rendered"].as_str().unwrap_or(text);
                    entry.errors.push(rendered.trim_end().to_string());
                }
            }
            _ => {}
        }
    }
    found
}

fn sorted(mut binaries: Vec<TestBinary>) -> Vec<TestBinary> {
    binaries.sort_by(|a, b| a.target.cmp(&b.target));
    binaries
}

/// Cargo's own error output (its last 20 lines), for a build that failed without a compiler error.
fn cargo_failure(output: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    if tail.is_empty() {
        format!("cargo failed ({}) without saying why", output.status)
    } else {
        tail.join("\n")
    }
}

/// One test to run: an executable and the exact name of a test in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestCase {
    /// The test target it belongs to.
    pub target: String,
    /// The executable.
    pub binary: PathBuf,
    /// The test's name as the executable lists it (`choose_device_rejects_garbage`).
    pub name: String,
}

/// The tests of every executable, in the order `<exe> --list --format terse` gives them.
pub fn list_tests(binaries: &[TestBinary]) -> Result<Vec<TestCase>> {
    list_tests_in(binaries, None)
}

/// [`list_tests`], each executable run in `sandbox` when given (grading: the executables hold the
/// learner's code).
pub fn list_tests_in(binaries: &[TestBinary], sandbox: Option<&Sandbox>) -> Result<Vec<TestCase>> {
    let mut cases = Vec::new();
    for bin in binaries {
        let args = ["--list", "--format", "terse"];
        let context = || format!("listing the tests of {}", bin.path.display());
        let output = match sandbox {
            None => Command::new(&bin.path)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .with_context(context)?,
            Some(Sandbox::Namespaces(bwrap)) => {
                // Kept alive until the listing ends: it holds what the sandbox is given.
                let mut prepared = bwrap.command(&bin.path, &args, None, &[])?;
                prepared
                    .command
                    .stdin(Stdio::null())
                    .output()
                    .with_context(context)?
            }
            Some(Sandbox::Landlock(landlocked)) => {
                let mut confined = landlocked.command(&bin.path, &args, false, None, &[])?;
                let child = confined
                    .command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .spawn()
                    .with_context(context)?;
                let pid = child.id() as libc::pid_t;
                let output = child.wait_with_output().with_context(context)?;
                confined.end(pid);
                output
            }
        };
        if !output.status.success() {
            bail!(
                "{} --list failed ({}): {}",
                bin.path.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(name) = line.strip_suffix(": test") {
                cases.push(TestCase {
                    target: bin.target.clone(),
                    binary: bin.path.clone(),
                    name: name.to_string(),
                });
            }
        }
    }
    Ok(cases)
}

/// How tests are run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// A test still running after this long is killed and counts as timed out.
    pub timeout: Duration,
    /// Bytes kept of each of stdout and stderr, half from the start and half from the end (the
    /// rest is read and dropped).
    pub output_limit: usize,
    /// The working directory of the test process (cargo uses the package's root).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables for the test process.
    pub env: Vec<(String, String)>,
    /// Bytes of memory the test process may have (`RLIMIT_DATA`: its heap and private writable
    /// mappings); past it an allocation fails. `None`: no limit. In a sandbox it is the address
    /// space instead (see [`sandbox::Bubblewrap::command`] and
    /// [`sandbox::Landlocked::command`]).
    pub memory_limit: Option<u64>,
    /// Run each test in this sandbox (grading); `None`: as a plain child process (`check`,
    /// `verify`, `grade --no-sandbox`).
    pub sandbox: Option<Arc<Sandbox>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            timeout: DEFAULT_TIMEOUT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            cwd: None,
            env: Vec::new(),
            memory_limit: None,
            sandbox: None,
        }
    }
}

impl RunOptions {
    /// Caps each test process's memory at `limit` bytes ([`RunOptions::memory_limit`]) and, unless
    /// `GPUMEM_CPU_CAPACITY` is set already, makes half of it the cpu device's capacity: the cpu
    /// device lives in the test's own memory, so runaway device allocations meet gpumem's
    /// out-of-memory error (with its numbers) before the process limit. `None`: no limit.
    pub fn with_memory_limit(mut self, limit: Option<u64>) -> RunOptions {
        self.memory_limit = limit;
        if let Some(limit) = limit
            && std::env::var_os("GPUMEM_CPU_CAPACITY").is_none()
        {
            self.env
                .push(("GPUMEM_CPU_CAPACITY".to_string(), (limit / 2).to_string()));
        }
        self
    }

    /// Options for the tests of the crate at `crate_dir`, as `cargo test` would run them there.
    pub fn for_crate(crate_dir: &Path, timeout: Duration) -> RunOptions {
        RunOptions {
            timeout,
            cwd: Some(crate_dir.to_path_buf()),
            env: vec![(
                "CARGO_MANIFEST_DIR".to_string(),
                crate_dir.to_string_lossy().into_owned(),
            )],
            ..RunOptions::default()
        }
    }
}

/// What became of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The process exited with status 0 after the harness reported one test passed.
    Passed,
    /// It panicked, exited otherwise, or was killed by a signal.
    Failed,
    /// It ran past the time limit and was killed.
    TimedOut,
}

/// The result of running one test.
#[derive(Debug, Clone)]
pub struct TestOutcome {
    /// The test.
    pub case: TestCase,
    /// Passed, failed or timed out.
    pub verdict: Verdict,
    /// One line saying why it did not pass (the panic message, ...); empty when it passed.
    pub message: String,
    /// The test process's standard output, cut at the output limit.
    pub stdout: String,
    /// The test process's standard error, cut at the output limit.
    pub stderr: String,
    /// Wall-clock time of the process.
    pub duration: Duration,
}

/// Runs one test in a process of its own: `<exe> --exact <name> --test-threads=1`.
///
/// Passing needs exit status 0 *and* the harness's own report that the test passed. That report is
/// not read from the test's output but from the harness's log (`--logfile /dev/fd/3`), written
/// into a pipe that only the test process holds, as its descriptor 3: there is no file to find.
/// Code under test that prints a fake `test result: ok` line and calls `std::process::exit(0)`
/// writes nothing there, and is judged failed. Where the harness has no `--logfile` (a future
/// toolchain) or there is no `/dev/fd`, its `test result: ok. 1 passed` line on stdout is the
/// report.
pub fn run_test(case: &TestCase, options: &RunOptions) -> Result<TestOutcome> {
    if let Some(sandbox) = &options.sandbox {
        return run_sandboxed(case, options, sandbox);
    }
    let log = if harness_has_logfile(&case.binary) {
        Some(log_pipe().context("creating a pipe for the test harness's log")?)
    } else {
        None
    };
    let mut cmd = Command::new(&case.binary);
    cmd.args([
        "--exact",
        &case.name,
        "--test-threads=1",
        "--include-ignored",
    ])
    .args(["--color", "never"])
    .env("RUST_BACKTRACE", "0")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    // A group of its own, so a timeout kills whatever the test started too.
    .process_group(0);
    if let Some(cwd) = &options.cwd {
        cmd.current_dir(cwd);
    }
    die_with_parent(&mut cmd);
    if let Some((_, write)) = &log {
        let write = write.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls on descriptors the child has.
        unsafe {
            cmd.pre_exec(move || {
                // dup2 gives descriptor 3 without close-on-exec; when the pipe already is 3,
                // clear that flag instead.
                let ok = if write == LOG_FD {
                    libc::fcntl(LOG_FD, libc::F_SETFD, 0) == 0
                } else {
                    libc::dup2(write, LOG_FD) == LOG_FD
                };
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            })
        };
        cmd.arg("--logfile").arg(format!("/dev/fd/{LOG_FD}"));
    }
    if let Some(limit) = options.memory_limit {
        let limit = libc::rlim_t::try_from(limit).unwrap_or(libc::RLIM_INFINITY);
        // SAFETY: runs in the forked child before exec; setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let rlimit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &rlimit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            })
        };
    }
    for (key, value) in &options.env {
        cmd.env(key, value);
    }
    let oom = super::cgroup::OomWatch::start();
    let start = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", case.binary.display()))?;
    // Only the test process holds the write end now.
    let log = log.map(|(read, _write)| read);
    let pid = child.id() as libc::pid_t;
    let watched = Watched::new(child, options.output_limit);
    let status = watched.wait(options.timeout, "a test process")?;
    // SAFETY: signals the process group the test leads: the test itself when it timed out (it is
    // not reaped yet, so its id is still ours), and anything it left behind in either case.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    if status.is_none() {
        let _ = watched.ended.recv();
    }
    let duration = start.elapsed();
    let (stdout, stderr) = watched.output();
    // The harness warns (without a newline) that `--logfile` is deprecated: not the test's words.
    let stderr = match stderr.strip_prefix(LOGFILE_WARNING) {
        Some(rest) if log.is_some() => rest.strip_prefix('\n').unwrap_or(rest).to_string(),
        _ => stderr,
    };
    let harness_log = log.map(read_available);
    let reported = match &harness_log {
        Some(text) => harness_log_says_ok(text, &case.name),
        None => stdout
            .lines()
            .any(|l| l.starts_with("test result: ok. 1 passed;")),
    };
    let (verdict, message) = judge(
        case,
        status,
        options,
        reported,
        oom.fired(),
        &stdout,
        &stderr,
    );
    Ok(TestOutcome {
        case: case.clone(),
        verdict,
        message,
        stdout,
        stderr,
        duration,
    })
}

/// [`run_test`] in `sandbox`: the test executable runs in a fresh bubblewrap sandbox (see
/// [`sandbox`]). It passes only when the sandbox exits with status 0, the harness's log (a file
/// bound into the sandbox, named on its command line) records it as passed, and exactly one
/// writer closed that log: the harness, which opens it before any of the learner's code runs.
/// At the time limit the first process of the sandbox's PID namespace is killed, which ends
/// every process in it; the grader goes on only once bwrap, which waits for that, has exited.
fn run_sandboxed(case: &TestCase, options: &RunOptions, sandbox: &Sandbox) -> Result<TestOutcome> {
    let bwrap = match sandbox {
        Sandbox::Namespaces(bwrap) => bwrap,
        Sandbox::Landlock(landlocked) => return run_landlocked(case, options, landlocked),
    };
    let args = [
        "--exact",
        &case.name,
        "--test-threads=1",
        "--include-ignored",
        "--color",
        "never",
        "--logfile",
        sandbox::LOG_PATH,
    ];
    // The test's environment inside; its manifest folder is the scratch folder there.
    let env: Vec<(String, String)> = options
        .env
        .iter()
        .map(|(key, value)| {
            let value = if key == "CARGO_MANIFEST_DIR" {
                sandbox::SCRATCH.to_string()
            } else {
                value.clone()
            };
            (key.clone(), value)
        })
        .collect();
    let mut prepared = bwrap.command(&case.binary, &args, options.memory_limit, &env)?;
    prepared
        .command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    die_with_parent(&mut prepared.command);
    let oom = super::cgroup::OomWatch::start();
    let start = Instant::now();
    let child = prepared
        .command
        .spawn()
        .with_context(|| format!("starting {} for {}", bwrap.bwrap().display(), case.name))?;
    prepared.spawned();
    let bwrap_pid = child.id() as libc::pid_t;
    let info = prepared.info;
    let (pid_tx, pid_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = pid_tx.send(sandbox::read_child_pid(info));
    });
    let watched = Watched::new(child, options.output_limit);
    let status = watched.wait(options.timeout, "a sandboxed test")?;
    if status.is_none() {
        // Kills the namespace's first process (and so all of them), then waits for bwrap to see
        // it gone; bwrap itself only if that does not happen.
        if let Ok(Some(pid)) = pid_rx.recv_timeout(OUTPUT_GRACE) {
            // SAFETY: sends a signal; the process is not reaped yet (bwrap has not exited).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if watched.ended.recv_timeout(SANDBOX_GRACE).is_err() {
            // SAFETY: signals the process group bwrap leads; it is not reaped yet.
            unsafe { libc::kill(-bwrap_pid, libc::SIGKILL) };
            let _ = watched.ended.recv();
        }
    }
    let duration = start.elapsed();
    let (stdout, stderr) = watched.output();
    let stderr = match stderr.strip_prefix(LOGFILE_WARNING) {
        Some(rest) => rest.strip_prefix('\n').unwrap_or(rest).to_string(),
        None => stderr,
    };
    let log = prepared.log.finish();
    if let Some(status) = status
        && log.is_none()
        && !status.success()
        && stderr.starts_with("bwrap: ")
    {
        bail!(
            "the sandbox could not start {}: {}",
            case.name,
            stderr.lines().next().unwrap_or("").trim()
        );
    }
    // bwrap exits with the test's status, or 128 + the signal that killed it.
    let status = status.map(|s| match s.code() {
        Some(code) if (129..=192).contains(&code) => ExitStatus::from_raw(code - 128),
        _ => s,
    });
    let reported = log.is_some_and(|log| harness_log_says_ok(&log, &case.name));
    let (verdict, message) = judge(
        case,
        status,
        options,
        reported,
        oom.fired(),
        &stdout,
        &stderr,
    );
    Ok(TestOutcome {
        case: case.clone(),
        verdict,
        message,
        stdout,
        stderr,
        duration,
    })
}

/// [`run_test`] in the Landlock tier ([`crate::run::landlocked`]): the test executable runs
/// confined, under a uid of its own when the grader is root. It passes only when it exits with
/// status 0 and the harness's log (behind the same gate as bubblewrap's) records it as passed.
/// When it ends or passes its time limit, its process group and every process of its uid are
/// killed before its output and log are read.
fn run_landlocked(
    case: &TestCase,
    options: &RunOptions,
    landlocked: &sandbox::Landlocked,
) -> Result<TestOutcome> {
    let args = [
        "--exact",
        &case.name,
        "--test-threads=1",
        "--include-ignored",
        "--color",
        "never",
    ];
    let mut confined = landlocked.command(
        &case.binary,
        &args,
        true,
        options.memory_limit,
        &options.env,
    )?;
    confined
        .command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let oom = super::cgroup::OomWatch::start();
    let start = Instant::now();
    let child = confined
        .command
        .spawn()
        .with_context(|| format!("starting {} confined by Landlock", case.name))?;
    let pid = child.id() as libc::pid_t;
    let watched = Watched::new(child, options.output_limit);
    let status = watched.wait(options.timeout, "a confined test")?;
    confined.end(pid);
    if status.is_none() {
        let _ = watched.ended.recv();
    }
    let duration = start.elapsed();
    let (stdout, stderr) = watched.output();
    let stderr = match stderr.strip_prefix(LOGFILE_WARNING) {
        Some(rest) => rest.strip_prefix('\n').unwrap_or(rest).to_string(),
        None => stderr,
    };
    let log = confined.log.finish();
    let reported = log.is_some_and(|log| harness_log_says_ok(&log, &case.name));
    let (verdict, message) = judge(
        case,
        status,
        options,
        reported,
        oom.fired(),
        &stdout,
        &stderr,
    );
    Ok(TestOutcome {
        case: case.clone(),
        verdict,
        message,
        stdout,
        stderr,
        duration,
    })
}

/// In a group of its own a process no longer hears the terminal's Ctrl-C: have the kernel kill it
/// when the thread that started it goes, so an interrupted run leaves nothing spinning.
fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
        // system calls.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            })
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Runs `cases` with at most `jobs` processes at once; results come back in the order of
/// `cases`, and `on_done` hears of each as it finishes (for progress).
pub fn run_tests(
    cases: &[TestCase],
    options: &RunOptions,
    jobs: usize,
    on_done: &(dyn Fn(&TestOutcome) + Sync),
) -> Result<Vec<TestOutcome>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<TestOutcome>>>> =
        Mutex::new((0..cases.len()).map(|_| None).collect());
    let workers = jobs.max(1).min(cases.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else {
                        break;
                    };
                    let outcome = run_test(case, options);
                    if let Ok(outcome) = &outcome {
                        on_done(outcome);
                    }
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(outcome);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("a test was never run"))))
        .collect()
}

/// What a reader thread has kept of a stream so far.
#[derive(Default)]
struct Captured {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

/// A started test process: its output read on threads of their own (at most `limit` bytes of
/// each stream kept), and its end awaited on another, so that the grader can stop waiting.
struct Watched {
    stdout: Option<Reader>,
    stderr: Option<Reader>,
    ended: mpsc::Receiver<std::io::Result<ExitStatus>>,
}

impl Watched {
    fn new(mut child: std::process::Child, limit: usize) -> Watched {
        let stdout = child.stdout.take().map(|s| read_capped(s, limit));
        let stderr = child.stderr.take().map(|s| read_capped(s, limit));
        let (tx, ended) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        Watched {
            stdout,
            stderr,
            ended,
        }
    }

    /// Its exit status, or `None` when `timeout` passed first (it is then still running).
    fn wait(&self, timeout: Duration, what: &str) -> Result<Option<ExitStatus>> {
        match self.ended.recv_timeout(timeout) {
            Ok(status) => Ok(Some(status.with_context(|| format!("waiting for {what}"))?)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("lost track of {what}"),
        }
    }

    /// What it wrote to stdout and to stderr (see [`finish_reader`]).
    fn output(self) -> (String, String) {
        (
            self.stdout.map(finish_reader).unwrap_or_default(),
            self.stderr.map(finish_reader).unwrap_or_default(),
        )
    }
}

/// A stream being read on a thread of its own: what it kept, and a signal once it reached its end.
struct Reader {
    captured: Arc<Mutex<Captured>>,
    done: mpsc::Receiver<()>,
}

/// Reads a stream to its end on a thread of its own, keeping its first and last `limit / 2` bytes:
/// a test's panic message comes after whatever it printed.
fn read_capped(mut stream: impl Read + Send + 'static, limit: usize) -> Reader {
    let captured = Arc::new(Mutex::new(Captured::default()));
    let (tx, done) = mpsc::channel();
    let shared = Arc::clone(&captured);
    std::thread::spawn(move || {
        let half = limit / 2;
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut c = shared.lock().unwrap_or_else(|p| p.into_inner());
                    let to_head = half.saturating_sub(c.head.len()).min(n);
                    c.head.extend_from_slice(&buf[..to_head]);
                    c.tail.extend(&buf[to_head..n]);
                    let excess = c.tail.len().saturating_sub(limit - half);
                    c.tail.drain(..excess);
                    c.dropped += excess;
                }
            }
        }
        let _ = tx.send(());
    });
    Reader { captured, done }
}

/// What a reader kept, once the stream ended or [`OUTPUT_GRACE`] passed: the grader never waits
/// for the end of a stream that something left behind still holds.
fn finish_reader(reader: Reader) -> String {
    let _ = reader.done.recv_timeout(OUTPUT_GRACE);
    let mut c = reader.captured.lock().unwrap_or_else(|p| p.into_inner());
    let mut text = String::from_utf8_lossy(&c.head).into_owned();
    if c.dropped > 0 {
        text.push_str(&format!("\n[... {} bytes not kept ...]\n", c.dropped));
    }
    text.push_str(&String::from_utf8_lossy(c.tail.make_contiguous()));
    text
}

/// The descriptor the test process writes the harness's log to.
const LOG_FD: RawFd = 3;

/// A pipe for the harness's log: (read end, write end), both closed on exec (the write end is
/// given to the test as descriptor 3 explicitly).
fn log_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`, which we then own.
    #[cfg(target_os = "linux")]
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    // SAFETY: as above; close-on-exec is set right after (another thread's fork in between
    // would only leak a descriptor into that child).
    #[cfg(not(target_os = "linux"))]
    let made = unsafe {
        let made = libc::pipe(fds.as_mut_ptr());
        if made == 0 {
            libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(fds[1], libc::F_SETFD, libc::FD_CLOEXEC);
        }
        made
    };
    if made != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What is in the pipe now, without waiting for its end: a process the test left behind (and
/// that escaped its group) may still hold the write end. At most 64 KiB.
fn read_available(read: OwnedFd) -> String {
    // SAFETY: changes the flags of a descriptor we own.
    unsafe {
        let flags = libc::fcntl(read.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let mut file = std::fs::File::from(read);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    while bytes.len() < 64 * 1024 {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What the harness says on stderr when given `--logfile`.
const LOGFILE_WARNING: &str = "warning: `--logfile` is deprecated";

/// Whether the test harness supports `--logfile` and `/dev/fd` exists (asked once per run: every
/// test executable is built by the same toolchain).
fn harness_has_logfile(binary: &Path) -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        Path::new("/dev/fd").is_dir()
            && Command::new(binary)
                .arg("--help")
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--logfile"))
    })
}

/// Whether the harness's log file records `name` as passed: the harness writes `ok <name>` there
/// once the test function has returned, and `failed <name>` when it panicked.
pub fn harness_log_says_ok(log: &str, name: &str) -> bool {
    let mut passed = false;
    for line in log.lines() {
        match line.split_once(' ') {
            Some(("ok", test)) if test == name => passed = true,
            Some((_, test)) if test == name => return false,
            _ => {}
        }
    }
    passed
}

/// The verdict of a test that ended with `status` (none: timed out); `oom_killed`: the kernel's
/// out-of-memory killer killed a process of the grader's cgroup while it ran.
fn judge(
    case: &TestCase,
    status: Option<ExitStatus>,
    options: &RunOptions,
    reported_ok: bool,
    oom_killed: bool,
    stdout: &str,
    stderr: &str,
) -> (Verdict, String) {
    let Some(status) = status else {
        return (
            Verdict::TimedOut,
            format!(
                "timed out after {} s and was killed",
                options.timeout.as_secs_f64()
            ),
        );
    };
    if status.success() {
        if reported_ok {
            return (Verdict::Passed, String::new());
        }
        return (
            Verdict::Failed,
            "the process exited with status 0 before the test harness reported a result \
             (does the code call std::process::exit? printed text cannot pass a test)"
                .to_string(),
        );
    }
    let mut why = failure_message(&case.name, stdout, stderr);
    // std's words when an allocation fails (it then aborts): say which limit was hit.
    if let (Some(limit), Some(line)) = (
        options.memory_limit,
        stderr
            .lines()
            .find(|l| l.starts_with("memory allocation of ") && l.ends_with(" failed")),
    ) {
        why = Some(format!(
            "ran out of memory: {line}, with the test's limit of {} reached",
            gpumem::format::format_bytes(limit)
        ));
    }
    let message = match (status.code(), status.signal()) {
        // The container's memory limit: the kernel's OOM killer sends SIGKILL, and only then
        // does the cgroup's count of its kills go up (a timed-out test has no status here).
        (_, Some(libc::SIGKILL)) if oom_killed => format!(
            "ran out of memory: killed by the kernel's out-of-memory killer when the \
             container's memory limit{} was reached (signal 9); a --memory-limit below the \
             container's memory divided by the jobs makes it fail with an out-of-memory error \
             instead",
            super::cgroup::memory_limit()
                .map(|l| format!(" of {}", gpumem::format::format_bytes(l)))
                .unwrap_or_default()
        ),
        (_, Some(signal)) => {
            let killed = format!("killed by signal {signal} ({})", signal_name(signal));
            match why {
                Some(why) => format!("{why} ({killed})"),
                None => killed,
            }
        }
        (code, None) => why.unwrap_or_else(|| {
            format!(
                "exited with status {} without a panic message",
                code.unwrap_or(-1)
            )
        }),
    };
    match test_seed(stdout) {
        Some(seed) => (
            Verdict::Failed,
            format!(
                "{message} (seed {seed}: {}={seed} replays it)",
                gpumem::testing::TEST_SEED
            ),
        ),
        None => (Verdict::Failed, message),
    }
}

/// The seed a randomized test ran with, as `gpumem::testing` prints it: `seed N (rerun with
/// GPUMEM_TEST_SEED=N)` when it starts, `seed N failed (rerun ...)` where a sweep stopped. The
/// failing one wins, else the first (printed before the learner's code ran).
pub fn test_seed(stdout: &str) -> Option<u64> {
    let marker = format!("(rerun with {}=", gpumem::testing::TEST_SEED);
    let seeds = stdout.lines().filter_map(|line| {
        let (head, tail) = line.trim().split_once(&marker)?;
        let seed: u64 = tail.strip_suffix(')')?.parse().ok()?;
        let failed = match head.strip_prefix("seed ")?.trim().split_once(' ') {
            None => false,
            Some((n, word)) => word == "failed" && n.parse() == Ok(seed),
        };
        Some((seed, failed))
    });
    let mut first = None;
    for (seed, failed) in seeds {
        if failed {
            return Some(seed);
        }
        first.get_or_insert(seed);
    }
    first
}

/// The most useful line of a failed test's output: the panic message (an `assert_eq!`'s values
/// named as the learner's and the expected one), else the first line of what the test printed,
/// else of stderr.
pub fn failure_message(name: &str, stdout: &str, stderr: &str) -> Option<String> {
    for text in [stdout, stderr] {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.starts_with("thread '") && line.contains("panicked at") {
                let mut parts = Vec::new();
                for next in lines.by_ref() {
                    let t = next.trim();
                    if t.is_empty() || t.starts_with("note: ") || t.starts_with("stack backtrace:")
                    {
                        break;
                    }
                    parts.push(t.to_string());
                    if parts.len() == MAX_PANIC_LINES {
                        break;
                    }
                }
                if parts.is_empty() {
                    parts.push(line.trim().to_string());
                }
                return Some(panic_summary(&parts));
            }
        }
    }
    let section = format!("---- {name} stdout ----");
    if let Some(pos) = stdout.find(&section) {
        let first = stdout[pos + section.len()..]
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("----") && !l.starts_with("failures:"));
        if let Some(first) = first {
            return Some(shorten(first, MAX_LINE));
        }
    }
    stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| shorten(l, MAX_LINE))
}

/// A panic message's lines kept (a prediction names one number a line: all of them are shown).
const MAX_PANIC_LINES: usize = 40;
/// Characters kept of one line of a message.
const MAX_LINE: usize = 240;
/// Characters kept of one value of an assertion (a long vector's elements are cut, the message
/// and the other value are not).
const MAX_VALUE: usize = 120;

/// A panic's lines as one line. `assert_eq!(yours, expected, "why")` (the official tests put the
/// learner's value first; `tests/official_tests.rs` checks that they do) reads
/// `why; yours: 1; expected: 2` instead of Rust's `left`/`right`.
fn panic_summary(lines: &[String]) -> String {
    let assertion = lines.first().and_then(|first| {
        let rest = first.strip_prefix("assertion `left ")?;
        let equal = rest.starts_with("== right`");
        let (_, message) = rest.split_once("` failed")?;
        let message = message.trim_start_matches(':').trim();
        let raw = |side: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(side))
                .map(str::trim)
        };
        let (raw_yours, raw_other) = (raw("left:")?, raw("right:")?);
        let (yours, other) = (shorten(raw_yours, MAX_VALUE), shorten(raw_other, MAX_VALUE));
        let cut = yours != raw_yours || other != raw_other;
        let values = if equal {
            match first_difference(raw_yours, raw_other).filter(|_| cut) {
                // Two long lists cut alike would look the same: say where they differ.
                Some(difference) => format!("yours: {yours}; expected: {other}; {difference}"),
                None => format!("yours: {yours}; expected: {other}"),
            }
        } else {
            format!("yours: {yours}; it must differ from: {other}")
        };
        Some(if message.is_empty() {
            format!("not as expected: {values}")
        } else {
            format!("{}; {values}", shorten(message, MAX_LINE))
        })
    });
    assertion.unwrap_or_else(|| {
        lines
            .iter()
            .map(|l| shorten(l, MAX_LINE))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// Where two lists written as `[a, b, ...]` first differ: the index, both elements there, and
/// both lengths. `None` when either is not a list.
fn first_difference(yours: &str, expected: &str) -> Option<String> {
    let (mine, theirs) = (elements(yours)?, elements(expected)?);
    let at = mine
        .iter()
        .zip(&theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(mine.len().min(theirs.len()));
    let show = |list: &[&str]| match list.get(at) {
        Some(element) => shorten(element, MAX_VALUE / 2),
        None => "nothing (the list ends)".to_string(),
    };
    Some(format!(
        "first difference at element {at}: yours {}, expected {}; lengths: yours {}, expected {}",
        show(&mine),
        show(&theirs),
        mine.len(),
        theirs.len()
    ))
}

/// The top-level elements of a value written as a list, `[a, b, c]`; nested brackets and quoted
/// text stay whole.
fn elements(value: &str) -> Option<Vec<&str>> {
    let inner = value.strip_prefix('[')?.strip_suffix(']')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    let (mut out, mut depth, mut start, mut quoted, mut escaped) =
        (Vec::new(), 0i32, 0, false, false);
    for (i, c) in inner.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '[' | '(' | '{' if !quoted => depth += 1,
            ']' | ')' | '}' if !quoted => depth -= 1,
            ',' if depth == 0 && !quoted => {
                out.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(inner[start..].trim());
    Some(out)
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_predictions_build_messages_belong_to_its_chapter() {
        let members = [(
            "ch02-transfers-g-ann".to_string(),
            "ch02-transfers".to_string(),
        )];
        let of = |manifest: &str| super::member_package(&members, Path::new(manifest));
        assert_eq!(
            of("/w/ch02-transfers-g-ann/Cargo.toml").as_deref(),
            Some("ch02-transfers")
        );
        assert_eq!(
            of("/w/ch02-transfers-g-ann/predict/Cargo.toml").as_deref(),
            Some("ch02-transfers")
        );
        assert_eq!(of("/w/predict/Cargo.toml"), None);
        assert_eq!(of("/registry/serde-1.0/Cargo.toml"), None);
    }

    use super::*;

    #[test]
    fn panic_message_folds_in_left_and_right() {
        let out = "running 1 test\ntest t ... FAILED\n\nfailures:\n\n---- t stdout ----\n\
                   thread 't' panicked at tests/a.rs:3:5:\nassertion `left == right` failed\n  \
                   left: 1\n right: 2\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            failure_message("t", out, "").as_deref(),
            Some("not as expected: yours: 1; expected: 2")
        );
    }

    #[test]
    fn an_assertions_message_comes_first_and_long_values_are_cut_alone() {
        let long = format!("[{}]", vec!["0"; 200].join(", "));
        let out = format!(
            "---- t stdout ----\nthread 't' panicked at tests/a.rs:3:5:\nassertion `left == right` \
             failed: the model's blocks are still live\n  left: {long}\n right: []\n"
        );
        let message = failure_message("t", &out, "").expect("a message");
        assert!(
            message.starts_with("the model's blocks are still live; yours: [0, 0, "),
            "{message}"
        );
        assert!(
            message.ends_with(
                "…; expected: []; first difference at element 0: yours 0, expected nothing (the \
                 list ends); lengths: yours 200, expected 0"
            ),
            "{message}"
        );
        let out = "thread 't' panicked at tests/a.rs:3:5:\nassertion `left != right` failed: \
                   a copy\n  left: 1\n right: 1\n";
        assert_eq!(
            failure_message("t", out, "").as_deref(),
            Some("a copy; yours: 1; it must differ from: 1")
        );
    }

    #[test]
    fn two_long_lists_cut_alike_are_told_apart_by_their_first_difference() {
        let list = |last: &str| {
            let mut items = vec!["\"linear\"".to_string(); 60];
            items.push(last.to_string());
            format!("[{}]", items.join(", "))
        };
        let out = format!(
            "thread 't' panicked at tests/a.rs:3:5:\nassertion `left == right` failed: the \
             graph's nodes\n  left: {}\n right: {}\n",
            list("\"gelu\""),
            list("\"relu\"")
        );
        let message = failure_message("t", &out, "").expect("a message");
        assert!(
            message.ends_with(
                "first difference at element 60: yours \"gelu\", expected \"relu\"; lengths: \
                 yours 61, expected 61"
            ),
            "{message}"
        );
        assert_eq!(
            first_difference("[1, 2]", "[1, 2, 3]").as_deref(),
            Some(
                "first difference at element 2: yours nothing (the list ends), expected 3; lengths: yours 2, expected 3"
            )
        );
        assert_eq!(
            elements("[(1, \"a, b\"), [2, 3]]"),
            Some(vec!["(1, \"a, b\")", "[2, 3]"])
        );
        assert_eq!(first_difference("1", "2"), None);
    }

    #[test]
    fn every_line_of_a_long_prediction_is_kept_whole() {
        let numbers: Vec<String> = (0..12)
            .map(|i| format!("segments_after_{i}: 1, as you predicted"))
            .collect();
        let out = format!(
            "thread 't' panicked at tests/a.rs:3:5:\nyour prediction: 1 of 13 numbers differ from \
             what the allocator measured\nreserved: you predicted 0 B, the allocator measured 512 \
             B\n{}\n\nnote: run with `RUST_BACKTRACE=1`\n",
            numbers.join("\n")
        );
        let message = failure_message("t", &out, "").expect("a message");
        assert!(
            message.ends_with("segments_after_11: 1, as you predicted"),
            "{message}"
        );
        assert!(!message.contains('…'), "{message}");
    }

    #[test]
    fn only_the_harness_log_line_for_this_test_counts_as_passed() {
        assert!(harness_log_says_ok("ok t\n", "t"));
        assert!(!harness_log_says_ok("", "t"));
        assert!(!harness_log_says_ok("ok t2\n", "t"));
        assert!(!harness_log_says_ok("ok t\nfailed t\n", "t"));
        assert!(!harness_log_says_ok("ignored t\n", "t"));
    }

    #[test]
    fn the_seed_a_randomized_test_printed_is_found_the_failing_one_first() {
        let started = "---- t stdout ----\nseed 272 (rerun with GPUMEM_TEST_SEED=272)\nseed 9 (rerun with GPUMEM_TEST_SEED=9)\n";
        assert_eq!(test_seed(started), Some(272), "the first one printed");
        let swept = "seed 1 (rerun with GPUMEM_TEST_SEED=1)\nseed 7694720226940991941 failed (rerun with GPUMEM_TEST_SEED=7694720226940991941)\n";
        assert_eq!(test_seed(swept), Some(7_694_720_226_940_991_941));
        assert_eq!(
            test_seed("seed 5 (rerun with GPUMEM_TEST_SEED=x)\nno seed here"),
            None
        );
        assert_eq!(test_seed(""), None);
    }

    #[test]
    fn a_failed_randomized_test_names_its_seed_in_the_message() {
        let case = TestCase {
            target: "t".into(),
            binary: PathBuf::from("t"),
            name: "t".into(),
        };
        let stdout = "running 1 test\ntest t ... FAILED\n\nfailures:\n\n---- t stdout ----\n\
                      seed 272 (rerun with GPUMEM_TEST_SEED=272)\n\
                      thread 't' panicked at tests/a.rs:3:5:\nf16 gradients: relative error 1e-2\n";
        let failed = Some(ExitStatus::from_raw(101 << 8));
        let (verdict, message) = judge(
            &case,
            failed,
            &RunOptions::default(),
            false,
            false,
            stdout,
            "",
        );
        assert_eq!(verdict, Verdict::Failed);
        assert_eq!(
            message,
            "f16 gradients: relative error 1e-2 (seed 272: GPUMEM_TEST_SEED=272 replays it)"
        );
        let unseeded = stdout.replace("seed 272 (rerun with GPUMEM_TEST_SEED=272)\n", "");
        let (_, message) = judge(
            &case,
            failed,
            &RunOptions::default(),
            false,
            false,
            &unseeded,
            "",
        );
        assert_eq!(message, "f16 gradients: relative error 1e-2");
    }

    #[test]
    fn a_kill_by_the_container_s_oom_killer_is_out_of_memory() {
        let case = TestCase {
            target: "t".into(),
            binary: PathBuf::from("t"),
            name: "t".into(),
        };
        let killed = Some(ExitStatus::from_raw(libc::SIGKILL));
        let options = RunOptions::default();
        let (verdict, message) = judge(&case, killed, &options, false, true, "", "");
        assert_eq!(verdict, Verdict::Failed);
        assert!(
            message.starts_with(
                "ran out of memory: killed by the kernel's out-of-memory killer when the \
                 container's memory limit"
            ),
            "{message}"
        );
        // A SIGKILL while the OOM killer did nothing is only a kill.
        let (_, message) = judge(&case, killed, &options, false, false, "", "");
        assert_eq!(message, "killed by signal 9 (SIGKILL)");
        // Another signal is never taken for the OOM killer's.
        let aborted = Some(ExitStatus::from_raw(libc::SIGABRT));
        let (_, message) = judge(&case, aborted, &options, false, true, "", "");
        assert_eq!(message, "killed by signal 6 (SIGABRT)");
    }

    #[test]
    fn a_returned_error_is_the_message_when_nothing_panicked() {
        let out = "---- t stdout ----\nError: no such device\n\nfailures:\n    t\n";
        assert_eq!(
            failure_message("t", out, "").as_deref(),
            Some("Error: no such device")
        );
    }
}
