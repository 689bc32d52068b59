//! `workbook export gradescope`: the autograder package Gradescope runs (`export student`, the
//! learners' repository, is [`super::student`]).
//!
//! The zip holds, at its top (Gradescope unpacks it into `/autograder/source`): `setup.sh`, which
//! installs Rust and bubblewrap, builds `workbook` and builds the runtime and every chapter's
//! official tests once; `run_autograder`, which grades `/autograder/submission` into
//! `/autograder/results/results.json`; the workspace (`Cargo.toml`, `Cargo.lock`, `crates/`,
//! `exercises/`); and the hidden tests, if any, in `hidden-tests/`. Both scripts take the
//! `/autograder` folder from `AUTOGRADER_ROOT` when it is set, so the package can be tried in a
//! folder laid out like Gradescope's.

use super::hidden;
use crate::course::app_state::Repo;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `workbook export`: the student edition, or the grader packaged for a hosted autograder.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// What to write.
    #[command(subcommand)]
    pub target: ExportTarget,
}

/// What `workbook export` writes.
#[derive(Debug, Subcommand)]
pub enum ExportTarget {
    /// Gradescope's zip: setup.sh (Rust, bubblewrap, the tests built once), run_autograder (grades
    /// /autograder/submission into /autograder/results/results.json), the workspace.
    Gradescope(ExportGradescopeArgs),
    /// The repository a class receives: no solutions/, the solution pages replaced by a page
    /// saying the solutions come from the instructor, no hidden tests.
    Student(super::student::ExportStudentArgs),
}

/// `workbook export gradescope`.
#[derive(Debug, Args)]
pub struct ExportGradescopeArgs {
    /// Where to write the zip.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Hidden tests to grade with too: FOLDER/CHAPTER/*.rs and points.toml, as for `grade`.
    #[arg(long, value_name = "FOLDER")]
    pub hidden_tests: Option<PathBuf>,
    /// run_autograder grades with `grade --sandbox none` (where no tier of the sandbox can run):
    /// each submission is then isolated only by Gradescope's container, and can forge its
    /// results.
    #[arg(long)]
    pub no_sandbox: bool,
}

/// `setup.sh`: run once by Gradescope when the autograder is built (as root, on Ubuntu).
pub const SETUP_SH: &str = r#"#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
AUTOGRADER="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$AUTOGRADER/source"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# bubblewrap for the namespaces tier; the Landlock tier, which Gradescope's container leaves
# (Docker's seccomp rules refuse namespaces), needs only the kernel.
apt-get install -y --no-install-recommends bubblewrap build-essential ca-certificates curl
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y --profile minimal --default-toolchain stable
fi
export PATH="$HOME/.cargo/bin:$PATH"
cd "$SOURCE"
cargo build --release --locked -p workbook
# Builds the runtime and every chapter's official tests once, by grading the untouched stubs
# (trusted code, so without the sandbox): grading a submission then compiles only its own code.
./target/release/workbook --root "$SOURCE" grade "$SOURCE/exercises" --sandbox none \
  --format json >/dev/null
"#;

/// `run_autograder`: run by Gradescope for every submission (`@SANDBOX@` becomes `none` when
/// exported with `--no-sandbox`, else `auto`).
pub const RUN_AUTOGRADER: &str = r#"#!/usr/bin/env bash
# Gradescope runs this for every submission: it grades /autograder/submission with the official
# tests (and the hidden ones in hidden-tests/), every test in the sandbox (`--sandbox auto`:
# namespaces where bubblewrap can make them, else Landlock, which Gradescope's container allows),
# into /autograder/results/results.json, whose `output` names the sandbox's tier. That file is
# written from the start and after every graded chapter: a run stopped at Gradescope's time limit
# keeps the chapters it graded.
set -euo pipefail
AUTOGRADER="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$AUTOGRADER/source"
WORKBOOK="${WORKBOOK_BIN:-$SOURCE/target/release/workbook}"
export PATH="$HOME/.cargo/bin:$PATH"
mkdir -p "$AUTOGRADER/results"
hidden=()
if [ -d "$SOURCE/hidden-tests" ]; then
  hidden=(--hidden-tests "$SOURCE/hidden-tests")
fi
"$WORKBOOK" --root "$SOURCE" grade "$AUTOGRADER/submission" "${hidden[@]}" --sandbox @SANDBOX@ \
  --jobs "$(nproc)" --gradescope "$AUTOGRADER/results/results.json"
"#;

/// Top-level entries of the repository the package carries (the rest, the book, the solutions
/// and the benches, grading does not need).
const CARRIED: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    "crates",
    "exercises",
];
/// Folders never carried, wherever they are.
const SKIPPED_DIRS: &[&str] = &["target", ".workbook", ".git"];

/// Writes the Gradescope autograder zip to `out`, with the hidden tests of `hidden_tests` (checked
/// as `grade --hidden-tests` checks them); `no_sandbox`: `run_autograder` grades with
/// `--no-sandbox`. Returns how many files it holds.
pub fn gradescope(
    repo: &Repo,
    out: &Path,
    hidden_tests: Option<&Path>,
    no_sandbox: bool,
) -> Result<usize> {
    let chapters = repo
        .chapter_names()?
        .iter()
        .map(|name| repo.chapter(name))
        .collect::<Result<Vec<_>>>()?;
    if let Some(folder) = hidden_tests {
        hidden::load(folder, &chapters, &repo.chapter_names()?)?;
    }
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in CARRIED {
        let path = repo.root.join(entry);
        if path.is_file() {
            files.push((entry.to_string(), path));
        } else if path.is_dir() {
            collect(&path, entry, &mut files)?;
        }
    }
    if let Some(folder) = hidden_tests {
        collect(folder, "hidden-tests", &mut files)?;
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut zip = zip::ZipWriter::new(file);
    let plain = zip::write::SimpleFileOptions::default().unix_permissions(0o644);
    let program = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
    let run = RUN_AUTOGRADER.replace("@SANDBOX@", if no_sandbox { "none" } else { "auto" });
    for (name, text) in [("setup.sh", SETUP_SH), ("run_autograder", run.as_str())] {
        zip.start_file(name, program)?;
        zip.write_all(text.as_bytes())?;
    }
    for (name, path) in &files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        zip.start_file(name.as_str(), plain)?;
        zip.write_all(&bytes)?;
    }
    zip.finish()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(files.len() + 2)
}

/// Every file under `dir`, named `prefix/<relative path>`, sorted; links are refused.
fn collect(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            bail!("{} has a name that is not UTF-8", entry.path().display());
        };
        let kind = entry.file_type()?;
        let inside = format!("{prefix}/{name}");
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name) {
                collect(&entry.path(), &inside, out)?;
            }
        } else if kind.is_file() {
            out.push((inside, entry.path()));
        } else {
            bail!(
                "{} is a link: the package carries plain files only",
                entry.path().display()
            );
        }
    }
    Ok(())
}

/// `workbook export gradescope`: writes the package and says what to do with it.
pub fn command(
    root: Option<&Path>,
    out: &Path,
    hidden_tests: Option<&Path>,
    no_sandbox: bool,
) -> Result<()> {
    let repo = Repo::from_option(root)?;
    let n = gradescope(&repo, out, hidden_tests, no_sandbox)?;
    if no_sandbox {
        eprintln!("export: --no-sandbox: {}", super::NO_SANDBOX_RISK);
    }
    println!(
        "{}: the Gradescope autograder ({n} files{}). Upload it as a zip file autograder \
         (Ubuntu base image); setup.sh installs Rust and bubblewrap and builds the tests once, \
         run_autograder grades each submission in the sandbox (in Gradescope's container, its \
         Landlock tier) and names the tier in results.json.",
        out.display(),
        if hidden_tests.is_some() {
            ", hidden tests included"
        } else {
            ""
        }
    );
    Ok(())
}
