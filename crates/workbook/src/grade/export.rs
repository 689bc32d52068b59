//! `workbook export gradescope`: the autograder package Gradescope runs (`export student`, the
//! learners' repository, is [`super::student`]).
//!
//! The zip holds, at its top (Gradescope unpacks it into `/autograder/source`): `setup.sh`, which
//! installs Rust and bubblewrap, builds `workbook` and builds the runtime and every chapter's
//! official tests once; `run_autograder`, which grades `/autograder/submission` into
//! `/autograder/results/results.json`; the workspace (`Cargo.toml`, `Cargo.lock`, `crates/`,
//! `exercises/`); the hidden tests, if any, in `hidden-tests/`; and, with
//! `--reference-solutions`, the assignment's reference solutions in `solutions/`, where `grade`
//! compares each submission with them. Both scripts take the
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
    /// Carry the reference solutions of the assignment's chapters, so that each submission that
    /// looks like one (as `grade --class`'s summary flags it) gets an entry in results.json that
    /// only instructors see. Learner code cannot read them, as it cannot read the hidden tests.
    #[arg(long)]
    pub reference_solutions: bool,
    /// How run_autograder grades: its chapters (one Gradescope assignment per chapter, or a few),
    /// time and memory limits, jobs.
    #[command(flatten)]
    pub assignment: Assignment,
}

/// What one Gradescope assignment grades, and with which limits: `grade`'s flags, written into
/// `run_autograder` (and `setup.sh`, which builds only these chapters' tests).
#[derive(Debug, Clone, Default, Args)]
pub struct Assignment {
    /// The chapter this assignment grades (name, unique prefix or number; repeat for more);
    /// default: every chapter.
    #[arg(long = "chapter", value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Seconds each test may run (`grade --timeout`; default: grade's).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Memory each test process may have (`grade --memory-limit`, such as 512MiB; default:
    /// grade's). Keep it below the container's memory (Gradescope's default: 768 MB) divided by
    /// the jobs, so that a memory hog fails with an out-of-memory error rather than being killed
    /// by the container.
    #[arg(long, value_name = "SIZE", value_parser = memory_limit_text)]
    pub memory_limit: Option<String>,
    /// Chapters graded at once, and test processes at once in each (default: the cores the
    /// container really has, from its CPU quota).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Points of each chapter on Gradescope, such as ch01=10,ch03=20 (`grade --points`): each
    /// test's points are scaled so that the chapter's add up to them. Default: chapter.toml's.
    #[arg(long, value_name = "CHAPTER=POINTS,...", value_parser = super::parse_points)]
    pub points: Option<super::Points>,
    /// A grading policy (`grade --policy`) whose `[points]` give each chapter's points, when
    /// --points does not.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// When Gradescope shows students the hidden tests (`grade --hidden-visibility`; default:
    /// grade's, after_published).
    #[arg(long, value_enum, value_name = "WHEN")]
    pub hidden_visibility: Option<super::HiddenVisibility>,
}

/// `--memory-limit`'s text, checked as `grade` checks it.
fn memory_limit_text(text: &str) -> Result<String, String> {
    crate::run::runner::parse_memory_limit(text).map(|_| text.trim().to_string())
}

impl Assignment {
    /// `grade`'s flags for this assignment, with the chapters by their full names, as shell
    /// words (every value is a chapter name, a number or a checked size: nothing to quote).
    pub fn grade_flags(&self, repo: &Repo) -> Result<String> {
        let mut flags = Vec::new();
        if !self.chapters.is_empty() {
            for chapter in repo.select_chapters(&self.chapters)? {
                flags.push(format!("--chapter {chapter}"));
            }
        }
        if let Some(seconds) = self.timeout {
            flags.push(format!("--timeout {seconds}"));
        }
        if let Some(size) = &self.memory_limit {
            flags.push(format!("--memory-limit {size}"));
        }
        if let Some(jobs) = self.jobs {
            flags.push(format!("--jobs {jobs}"));
        }
        let resolve = |key: &str| -> Result<String> {
            let mut found = repo.select_chapters(&[key.to_string()])?;
            Ok(found.remove(0))
        };
        let mut points = Vec::new();
        if let Some(super::Points(given)) = &self.points {
            for (chapter, value) in given {
                let chapter =
                    resolve(chapter).with_context(|| format!("--points {chapter}={value}"))?;
                points.push(format!("{chapter}={value}"));
            }
        } else if let Some(path) = &self.policy {
            let policy = super::policy::Policy::load(path, &resolve)?;
            for (chapter, value) in &policy.points {
                points.push(format!("{chapter}={value}"));
            }
        }
        if !points.is_empty() {
            flags.push(format!("--points {}", points.join(",")));
        }
        if let Some(when) = self.hidden_visibility {
            flags.push(format!("--hidden-visibility {}", when.word()));
        }
        Ok(flags.join(" "))
    }
}

/// `setup.sh`: run once by Gradescope when the autograder is built (as root, on Ubuntu;
/// `@FLAGS@` becomes the assignment's [`Assignment::grade_flags`]).
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
# The toolchain the package was tested with, pinned in rust-toolchain.toml (rustup reads it
# there too, whatever is installed already).
TOOLCHAIN="$(sed -n 's/^channel = "\(.*\)"$/\1/p' "$SOURCE/rust-toolchain.toml")"
if ! command -v rustup >/dev/null && [ ! -x "$HOME/.cargo/bin/rustup" ]; then
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y --profile minimal --default-toolchain "$TOOLCHAIN"
fi
export PATH="$HOME/.cargo/bin:$PATH"
cd "$SOURCE"
rustup toolchain install "$TOOLCHAIN" --profile minimal
# No git here: the chapters are embedded from the files as they are, which are the official ones.
WORKBOOK_EMBED_FROM_FILES=1 cargo build --release --locked -p workbook
# Builds the runtime and the assignment's official tests once, by grading the untouched stubs
# (trusted code, so without the sandbox; its notice about that is kept out of this log unless the
# build fails): grading a submission then compiles only its own code.
if ! ./target/release/workbook --root "$SOURCE" grade "$SOURCE/exercises" @FLAGS@ \
  --sandbox none --format json >/dev/null 2>"$SOURCE/setup-grade.log"; then
  cat "$SOURCE/setup-grade.log" >&2
  exit 1
fi
echo "setup.sh: workbook and the official tests are built (toolchain $TOOLCHAIN)."
"#;

/// `run_autograder`: run by Gradescope for every submission (`@SANDBOX@` becomes `none` when
/// exported with `--no-sandbox`, else `auto`; `@FLAGS@`, the assignment's [`Assignment::grade_flags`]).
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
# Without --jobs, grade runs as many jobs as the container has cores: its CPU quota, which grade
# reads, not the host's cores.
"$WORKBOOK" --root "$SOURCE" grade "$AUTOGRADER/submission" "${hidden[@]}" @FLAGS@ \
  --sandbox @SANDBOX@ --gradescope "$AUTOGRADER/results/results.json"
"#;

/// The Rust toolchain the package pins (its `rust-toolchain.toml`, which `setup.sh` installs):
/// the one the workbook's CI builds and tests with, so that a newer Rust's new warnings or
/// behaviour never reach a class mid-course.
pub const PINNED_TOOLCHAIN: &str = "1.95.0";

/// Top-level entries of the repository the package carries (the rest, the book, the solutions
/// and the benches, grading does not need; `rust-toolchain.toml` is written by the export).
const CARRIED: &[&str] = &["Cargo.toml", "Cargo.lock", "crates", "exercises"];
/// Folders never carried, wherever they are.
const SKIPPED_DIRS: &[&str] = &["target", ".workbook", ".git"];

/// Writes the Gradescope autograder zip `args.out`, with the hidden tests of `args.hidden_tests`
/// (checked as `grade --hidden-tests` checks them) and, with `args.reference_solutions`, the
/// assignment's reference solutions. Returns how many files it holds.
pub fn gradescope(repo: &Repo, args: &ExportGradescopeArgs) -> Result<usize> {
    let (out, hidden_tests, assignment) =
        (&args.out, args.hidden_tests.as_deref(), &args.assignment);
    let flags = assignment.grade_flags(repo)?;
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
    if args.reference_solutions {
        // Where `grade` looks for them: solutions/<chapter>/src, as in this repository.
        let graded = if assignment.chapters.is_empty() {
            repo.chapter_names()?
        } else {
            repo.select_chapters(&assignment.chapters)?
        };
        for name in graded {
            let src = repo.chapter(&name)?.solution_dir.join("src");
            if !src.is_dir() {
                bail!(
                    "--reference-solutions: {} is missing (the student edition has no reference \
                     solutions: export from the repository you grade from)",
                    src.display()
                );
            }
            collect(&src, &format!("solutions/{name}/src"), &mut files)?;
        }
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut zip = zip::ZipWriter::new(file);
    let plain = zip::write::SimpleFileOptions::default().unix_permissions(0o644);
    let program = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
    let (setup, run) = scripts(args.no_sandbox, &flags);
    for (name, text) in [
        ("setup.sh", setup.as_str()),
        ("run_autograder", run.as_str()),
    ] {
        zip.start_file(name, program)?;
        zip.write_all(text.as_bytes())?;
    }
    zip.start_file("rust-toolchain.toml", plain)?;
    zip.write_all(toolchain_file().as_bytes())?;
    for (name, path) in &files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        zip.start_file(name.as_str(), plain)?;
        zip.write_all(&bytes)?;
    }
    zip.finish()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(files.len() + 3)
}

/// `setup.sh` and `run_autograder` for an assignment graded with `flags`.
pub fn scripts(no_sandbox: bool, flags: &str) -> (String, String) {
    // An empty flag list leaves no double space behind.
    let fill = |text: &str| {
        if flags.is_empty() {
            text.replace(" @FLAGS@", "")
        } else {
            text.replace("@FLAGS@", flags)
        }
    };
    let run = fill(RUN_AUTOGRADER).replace("@SANDBOX@", if no_sandbox { "none" } else { "auto" });
    (fill(SETUP_SH), run)
}

/// The package's `rust-toolchain.toml`.
pub fn toolchain_file() -> String {
    format!("[toolchain]\nchannel = \"{PINNED_TOOLCHAIN}\"\nprofile = \"minimal\"\n")
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
pub fn command(root: Option<&Path>, args: &ExportGradescopeArgs) -> Result<()> {
    let repo = Repo::from_option(root)?;
    let n = gradescope(&repo, args)?;
    if args.no_sandbox {
        eprintln!("export: --no-sandbox: {}", super::NO_SANDBOX_RISK);
    }
    let mut carried = String::new();
    if args.hidden_tests.is_some() {
        carried.push_str(", hidden tests included");
    }
    if args.reference_solutions {
        carried.push_str(", reference solutions included");
    }
    println!(
        "{}: the Gradescope autograder ({n} files{carried}). Upload it as a zip file autograder \
         (Ubuntu base image); setup.sh installs Rust and bubblewrap and builds the tests once, \
         run_autograder grades each submission in the sandbox (in Gradescope's container, its \
         Landlock tier) and names the tier in results.json.",
        args.out.display(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_repo() -> Repo {
        Repo::at(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")).expect("the repository")
    }

    #[test]
    fn an_assignment_s_flags_name_its_chapters_in_full_and_its_limits() {
        let assignment = Assignment {
            chapters: vec!["3".into(), "ch10".into()],
            timeout: Some(20),
            memory_limit: Some("512MiB".into()),
            jobs: Some(1),
            points: Some(super::super::parse_points("3=10, ch10=20").unwrap()),
            policy: None,
            hidden_visibility: Some(super::super::HiddenVisibility::AfterDueDate),
        };
        assert_eq!(
            assignment.grade_flags(&this_repo()).unwrap(),
            "--chapter ch03-drop-and-empty-cache --chapter ch10-out-of-memory --timeout 20 \
             --memory-limit 512MiB --jobs 1 --points \
             ch03-drop-and-empty-cache=10,ch10-out-of-memory=20 --hidden-visibility after_due_date"
        );
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, "[points]\nch01 = 5\n").unwrap();
        let from_policy = Assignment {
            policy: Some(policy),
            ..Assignment::default()
        };
        assert_eq!(
            from_policy.grade_flags(&this_repo()).unwrap(),
            "--points ch01-availability=5"
        );
        assert_eq!(Assignment::default().grade_flags(&this_repo()).unwrap(), "");
        let unknown = Assignment {
            chapters: vec!["ch99".into()],
            ..Assignment::default()
        };
        let error = unknown.grade_flags(&this_repo()).unwrap_err();
        assert!(
            format!("{error:#}").contains("there is no chapter"),
            "{error:#}"
        );
    }

    #[test]
    fn the_scripts_carry_the_flags_count_the_container_s_cores_and_are_valid_bash() {
        let flags = "--chapter ch03-drop-and-empty-cache --timeout 20";
        for (no_sandbox, flags) in [(false, flags), (true, "")] {
            let (setup, run) = scripts(no_sandbox, flags);
            assert!(!setup.contains("@FLAGS@") && !run.contains("@FLAGS@"));
            assert!(!run.contains("@SANDBOX@"));
            assert!(
                !run.contains("nproc"),
                "nproc counts the host's cores, not the container's quota: {run}"
            );
            if !flags.is_empty() {
                assert!(setup.contains(&format!("grade \"$SOURCE/exercises\" {flags} ")));
                assert!(
                    run.contains(&format!("{flags} \\\n  --sandbox auto ")),
                    "{run}"
                );
            } else {
                assert!(
                    run.contains("\"${hidden[@]}\" \\\n  --sandbox none "),
                    "no flags, no gap: {run}"
                );
                assert!(
                    setup.contains("grade \"$SOURCE/exercises\" \\\n"),
                    "{setup}"
                );
            }
            for script in [&setup, &run] {
                let status = std::process::Command::new("bash")
                    .args(["-n", "-c", script])
                    .status()
                    .expect("bash runs");
                assert!(status.success(), "bash -n refuses:\n{script}");
            }
        }
    }

    #[test]
    fn reference_solutions_travel_only_when_asked_and_only_the_assignment_s() {
        let dir = tempfile::tempdir().unwrap();
        let names = |reference_solutions: bool| -> Vec<String> {
            let args = ExportGradescopeArgs {
                out: dir.path().join("ch01.zip"),
                hidden_tests: None,
                no_sandbox: false,
                reference_solutions,
                assignment: Assignment {
                    chapters: vec!["1".into()],
                    ..Assignment::default()
                },
            };
            gradescope(&this_repo(), &args).unwrap();
            let zip = zip::ZipArchive::new(std::fs::File::open(&args.out).unwrap()).unwrap();
            zip.file_names()
                .map(|n| n.unwrap().into_owned())
                .filter(|n| n.starts_with("solutions/"))
                .collect()
        };
        assert!(names(false).is_empty());
        let mut carried = names(true);
        carried.sort();
        assert_eq!(
            carried,
            [
                "solutions/ch01-availability/src/lib.rs",
                "solutions/ch01-availability/src/predict.rs"
            ]
        );
    }

    #[test]
    fn every_hidden_visibility_is_written_as_grade_reads_it() {
        use super::super::HiddenVisibility;
        use clap::ValueEnum;
        for when in HiddenVisibility::value_variants() {
            assert_eq!(HiddenVisibility::from_str(when.word(), false), Ok(*when));
        }
        assert_eq!(HiddenVisibility::default().word(), "after_published");
    }

    #[test]
    fn the_toolchain_is_pinned_and_setup_installs_that_one() {
        assert_eq!(
            toolchain_file(),
            format!("[toolchain]\nchannel = \"{PINNED_TOOLCHAIN}\"\nprofile = \"minimal\"\n")
        );
        let (setup, _) = scripts(false, "");
        assert!(setup.contains("--default-toolchain \"$TOOLCHAIN\""));
        assert!(setup.contains("rustup toolchain install \"$TOOLCHAIN\""));
        assert!(!setup.contains("stable"));
    }
}
