//! Helpers shared by the integration tests: a throwaway workbook repository and the built binary.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

pub mod gradescope;
pub mod sandbox;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use tempfile::TempDir;
use workbook::run::sandbox::{Landlocked, Sandbox};

/// A workbook repository in a temporary directory: a root `Cargo.toml` with `[workspace]`,
/// `exercises/` and `solutions/`. Its crates depend on nothing, so they build in a second.
pub struct FakeRepo {
    dir: TempDir,
}

/// A chapter.toml with `exercises` exercises of two hints each, each listing the given tests.
pub fn chapter_toml(title: &str, exercises: &[(&str, &[&str])]) -> String {
    let mut out = format!("title = {title:?}\n");
    for (name, tests) in exercises {
        out.push_str(&format!(
            "\n[[exercises]]\nname = {name:?}\ntitle = \"Do {name}\"\nhints = [\"gently\", \"explicitly\"]\n[exercises.tests]\n"
        ));
        for test in *tests {
            out.push_str(&format!("{test} = 1\n"));
        }
    }
    out
}

impl FakeRepo {
    /// An empty workbook.
    pub fn new() -> FakeRepo {
        let dir = tempfile::Builder::new()
            .prefix("workbook-test-")
            .tempdir()
            .expect("a temporary directory");
        let repo = FakeRepo { dir };
        repo.write(
            "Cargo.toml",
            "[workspace]\nresolver = \"3\"\nmembers = [\"exercises/*\"]\n\n\
             [workspace.package]\nedition = \"2024\"\nversion = \"0.1.0\"\n\n\
             [workspace.dependencies]\n\n[profile.test]\ndebug = \"line-tables-only\"\n",
        );
        std::fs::create_dir_all(repo.root().join("exercises")).expect("exercises/");
        std::fs::create_dir_all(repo.root().join("solutions")).expect("solutions/");
        repo
    }

    /// The repository's root.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `rel` under the root, creating directories.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.root().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("a directory");
        }
        std::fs::write(&path, text).expect("a file");
        path
    }

    /// A chapter crate: stub `src/lib.rs`, `tests/<file>.rs`, the solution's `src/lib.rs`, and a
    /// `chapter.toml` when given.
    pub fn chapter(
        &self,
        name: &str,
        stub: &str,
        solution: &str,
        tests: &[(&str, &str)],
        chapter_toml: Option<&str>,
    ) {
        self.write(
            &format!("exercises/{name}/Cargo.toml"),
            &format!(
                "[package]\nname = \"{name}\"\nedition.workspace = true\nversion.workspace = true\npublish = false\n"
            ),
        );
        self.write(&format!("exercises/{name}/src/lib.rs"), stub);
        self.write(&format!("solutions/{name}/src/lib.rs"), solution);
        for (file, text) in tests {
            self.write(&format!("exercises/{name}/tests/{file}.rs"), text);
        }
        if let Some(toml) = chapter_toml {
            self.write(&format!("exercises/{name}/chapter.toml"), toml);
        }
    }

    /// Every file under `exercises/` and `solutions/` with its bytes, to prove nothing changed.
    pub fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        snapshot(&[self.root().join("exercises"), self.root().join("solutions")])
    }
}

/// Every file under `dirs` with its bytes, sorted by path.
pub fn snapshot(dirs: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    let mut out = Vec::new();
    for dir in dirs {
        walk(dir, &mut out);
    }
    out.sort();
    out
}

/// Copies the folder `from` into `to`, recursively (`to` is made).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a folder");
    for entry in std::fs::read_dir(from).expect("a folder to copy").flatten() {
        let dest = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("a file copied");
        }
    }
}

/// The built `workbook` binary, with the workbook's settings cleared from its environment.
pub fn workbook() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_workbook"));
    for var in [
        "WORKBOOK_ROOT",
        "GPUMEM_DEVICE",
        "GPUMEM_ALLOC_CONF",
        "GPUMEM_CPU_CAPACITY",
        "GPUMEM_TEST_SEED",
        "GPUMEM_TEST_SEEDS",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs a command and returns its output, stdout and stderr as text.
pub fn run(cmd: &mut Command) -> (Output, String, String) {
    let output = cmd.output().expect("the workbook binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

/// True when the grader's sandbox cannot run here (the crate's probe, [`Sandbox::detect`], run
/// once per test executable), after [`sandbox::unavailable`] said so (under `CI=true` it fails
/// instead): a test that grades returns at once when this holds.
pub fn skip_without_sandbox() -> bool {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    match PROBE.get_or_init(|| Sandbox::detect().err().map(|e| format!("{e:#}"))) {
        None => false,
        Some(why) => {
            sandbox::unavailable(why);
            true
        }
    }
}

/// True when the sandbox's Landlock tier cannot run here ([`Landlocked::detect`], once per test
/// executable), after [`sandbox::unavailable`] said so (under `CI=true` it fails instead).
pub fn skip_without_landlock() -> bool {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    match PROBE.get_or_init(|| Landlocked::detect().err().map(|e| format!("{e:#}"))) {
        None => false,
        Some(why) => {
            sandbox::unavailable(why);
            true
        }
    }
}

/// True when podman cannot run the hosted grader's container here (`scripts/hosted-grader.sh`
/// needs podman and runc, as root), after saying so: under `CI=true` (where `.ci/run` installs
/// them) it fails instead; elsewhere a notice, and the test returns.
pub fn skip_without_podman() -> bool {
    let found = |program: &str| {
        std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|dir| dir.join(program).is_file())
        })
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if found("podman") && found("runc") && root {
        return false;
    }
    let why = "the hosted grader's container (scripts/hosted-grader.sh) needs podman and runc, \
               run as root (Debian/Ubuntu: apt-get install podman runc)";
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!("{why}; CI=true requires it");
    }
    eprintln!("skipping: {why}");
    true
}

/// True inside the hosted grader's container (`scripts/hosted-grader.sh` sets
/// `WORKBOOK_IN_HOSTED_GRADER`).
pub fn in_hosted_grader() -> bool {
    std::env::var_os("WORKBOOK_IN_HOSTED_GRADER").is_some()
}

/// The name the test harness gives the test `function` of the module `module_path` (pass
/// `module_path!()`): the module's path less the crate's name, then the function, as
/// `--exact` wants it (`grade_gradescope::in_the_...` in `tests/integration.rs`'s executable).
pub fn test_name(module_path: &str, function: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{function}"),
        None => function.to_string(),
    }
}
