//! `workbook check [chapter]`: runs a chapter's official tests on the learner's own `src/` and
//! shows, per exercise, what passed and the first useful line of why the rest failed.
//!
//! The learner's `exercises/<chapter>/src` is laid over a pristine copy of the chapter crate (the
//! one the binary carries, else the repository's) in a scratch workspace, exactly as grading does:
//! an edited `tests/` or `Cargo.toml` changes nothing. Each test runs in a process of its own.

use crate::course::app_state::{self, Chapter, Repo};
use crate::course::embedded;
use crate::course::learner::{self, State, TODO_MESSAGE};
use crate::course::progress::{CheckRecord, StateFile, TestRecord, TestStatus};
use crate::run::runner::{self, BuildFailure, RunOptions, TestOutcome, Verdict};
use crate::run::scratch::{self, WorkspaceTemplate};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `workbook check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The chapter, by name or unique prefix (`ch01`); default: the first one not done.
    #[arg(value_name = "CHAPTER")]
    pub chapter: Option<String>,
    /// How the chapter's tests run.
    #[command(flatten)]
    pub tests: TestRunArgs,
}

/// How `list --refresh`, `check`, `watch` and `solution` run a chapter's tests.
#[derive(Debug, Args)]
pub struct TestRunArgs {
    /// Test processes to run at once (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is stopped and counts as failed.
    #[arg(long, value_name = "SECONDS", default_value_t = runner::DEFAULT_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Memory one test process may have, such as 4GiB or 512MiB, or `none`; half of it is the cpu
    /// device's capacity (unless GPUMEM_CPU_CAPACITY is set). A loop that allocates forever then
    /// fails its test instead of taking the machine's memory.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = runner::parse_memory_limit)]
    pub memory_limit: runner::MemoryLimit,
}

/// How `check` runs the tests.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Test processes at once.
    pub jobs: usize,
    /// Time limit of one test.
    pub timeout: Duration,
    /// Memory one test process may have ([`RunOptions::with_memory_limit`]); `None`: no limit.
    pub memory_limit: Option<u64>,
    /// Print progress (building, running) on stderr.
    pub progress: bool,
}

impl CheckOptions {
    /// Options from the command line's `--jobs`, `--timeout` and `--memory-limit`.
    pub fn from_flags(flags: &TestRunArgs) -> CheckOptions {
        CheckOptions {
            jobs: flags
                .jobs
                .map(usize::from)
                .unwrap_or_else(app_state::default_jobs),
            timeout: Duration::from_secs(flags.timeout),
            memory_limit: flags.memory_limit.0,
            progress: true,
        }
    }
}

/// Where the tests that were run come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestsSource {
    /// The copy the binary carries (`embedded::source()` says which commit).
    Embedded,
    /// The repository's `exercises/<chapter>/tests` (the binary carries no copy of the chapter).
    Repository,
}

/// One check of one chapter.
#[derive(Debug)]
pub struct ChapterCheck {
    /// The chapter.
    pub chapter: Chapter,
    /// What was recorded in the state file.
    pub record: CheckRecord,
    /// Why the build failed, if it did.
    pub build_failure: Option<BuildFailure>,
    /// Every test's outcome (empty when the build failed).
    pub outcomes: Vec<TestOutcome>,
    /// Where the tests came from.
    pub tests_source: TestsSource,
    /// Whether the learner's `tests/` differ from the official ones that were run.
    pub tests_differ: bool,
}

impl ChapterCheck {
    /// Whether every test `chapter.toml` lists passed at this check (never when it did not compile).
    pub fn passed(&self) -> bool {
        learner::chapter_done(&self.chapter, Some(&self.record))
    }
}

/// `workbook check`.
pub fn run(root: Option<&Path>, args: &CheckArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let state = StateFile::of(&repo);
    let progress = state.load()?;
    let chapter = learner::choose_chapter(&repo, args.chapter.as_deref(), &progress)?;
    let options = CheckOptions::from_flags(&args.tests);
    let check = check_chapter(&repo, &chapter, &options)?;
    print!("{}", render(&repo, &check));
    let progress = state.load()?;
    let chapters = learner::load_chapters(&repo)?;
    println!();
    for line in next_after(&repo, &check, &chapters, &progress) {
        println!("{line}");
    }
    Ok(if check.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where `check` builds: the repository's own `target/` (or `CARGO_TARGET_DIR`), so that the
/// dependencies `cargo test -p <chapter>` and `workbook start` build are the ones `check` uses.
pub fn target_dir(repo: &Repo) -> std::path::PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => repo.root.join(dir),
        None => repo.root.join("target"),
    }
}

/// A chapter's crate laid out for `check` in its scratch workspace, and its tests built.
struct Built {
    scratch: scratch::ScratchCrate,
    member: String,
    tests_source: TestsSource,
    tests_differ: bool,
    built: Result<Vec<runner::TestBinary>, BuildFailure>,
}

/// Lays the learner's `src/` over the official crate and builds its tests ([`target_dir`]),
/// showing cargo's progress when `show_progress`.
fn build(repo: &Repo, chapter: &Chapter, show_progress: bool) -> Result<Built> {
    let name = &chapter.name;
    let src = chapter.dir.join("src");
    let work = repo.work_dir();
    let (crate_src, tests_source, tests_differ) = match embedded::chapter(name) {
        Some(copy) => {
            let pristine = work.join("pristine").join(name);
            copy.write_to("", &pristine)
                .with_context(|| format!("writing the official copy of {name}"))?;
            let differ = tests_differ(&chapter.dir.join("tests"), copy);
            (pristine, TestsSource::Embedded, differ)
        }
        None => (chapter.dir.clone(), TestsSource::Repository, false),
    };
    let template = WorkspaceTemplate::from_repo_root(&repo.root)?;
    let member = format!("{name}-check");
    let workspace = work.join("scratch").join(name).join("check");
    let scratch = scratch::prepare(&template, &workspace, &member, &crate_src, &src)?;
    let (workspace, package, target) = (&scratch.workspace, &scratch.package, &target_dir(repo));
    let built = if show_progress {
        runner::build_tests_showing_progress(workspace, package, target)?
    } else {
        runner::build_tests(workspace, package, target)?
    };
    Ok(Built {
        scratch,
        member,
        tests_source,
        tests_differ,
        built,
    })
}

/// Builds what `check` of `chapter` needs (gpumem, the dependencies, the tests with the
/// learner's code) without running or recording anything, so that the next check only runs the
/// tests. `workbook start` calls it, with cargo's progress shown. Returns whether the code
/// compiled.
pub fn prepare(repo: &Repo, chapter: &Chapter) -> Result<bool> {
    Ok(build(repo, chapter, true)?.built.is_ok())
}

/// Checks one chapter and records the result in the state file.
pub fn check_chapter(
    repo: &Repo,
    chapter: &Chapter,
    options: &CheckOptions,
) -> Result<ChapterCheck> {
    let name = &chapter.name;
    let src = chapter.dir.join("src");
    if !src.is_dir() {
        bail!(
            "{} is missing: there is no code to check (`workbook reset {name}` restores the \
             stubs)",
            learner::shown(repo, &src)
        );
    }
    let digest = learner::src_digest(&src)?;
    if options.progress {
        eprintln!("{name}: building the tests with your code...");
    }
    let Built {
        scratch,
        member,
        tests_source,
        tests_differ,
        built,
    } = build(repo, chapter, false)?;
    let paths = PathMap::new(repo, chapter, &scratch.crate_dir, &member);
    let previous = StateFile::of(repo).load()?.check(name).cloned();
    let now = crate::course::progress::now();
    let mut record = CheckRecord {
        at: now,
        src_digest: digest,
        build_error: None,
        compiled_at: Some(now),
        tests: Default::default(),
    };
    let (build_failure, outcomes) = match built {
        Err(mut failure) => {
            for error in &mut failure.errors {
                *error = paths.rewrite(error);
            }
            record.build_error = Some(
                failure
                    .errors
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "the build failed".to_string()),
            );
            // A typo loses no progress: the results of the last check that compiled are kept.
            record.compiled_at = previous.as_ref().and_then(|p| match p.build_error {
                None => Some(p.compiled_at.unwrap_or(p.at)),
                Some(_) => p.compiled_at,
            });
            record.tests = previous.map(|p| p.tests).unwrap_or_default();
            (Some(failure), Vec::new())
        }
        Ok(binaries) => {
            let cases = runner::list_tests(&binaries)?;
            if options.progress {
                eprintln!("{name}: running {} tests...", cases.len());
            }
            let mut run_options = RunOptions::for_crate(&scratch.crate_dir, options.timeout)
                .with_memory_limit(options.memory_limit);
            run_options.env.push((
                gpumem::testing::TRIED_VAR.to_string(),
                tried_tests(previous.as_ref()),
            ));
            let mut outcomes = runner::run_tests(&cases, &run_options, options.jobs, &|_| {})?;
            for outcome in &mut outcomes {
                outcome.message = paths.rewrite(&outcome.message);
                record.tests.insert(
                    outcome.case.name.clone(),
                    TestRecord {
                        status: match outcome.verdict {
                            Verdict::Passed => TestStatus::Passed,
                            Verdict::Failed => TestStatus::Failed,
                            Verdict::TimedOut => TestStatus::TimedOut,
                        },
                        message: outcome.message.clone(),
                    },
                );
            }
            (None, outcomes)
        }
    };
    drop(scratch);
    let saved = record.clone();
    StateFile::of(repo).update(|p| p.chapter_mut(name).check = Some(saved))?;
    // Panic locations are rewritten as the table shows them.
    let outcomes = outcomes
        .into_iter()
        .map(|mut o| {
            o.stdout = paths.rewrite(&o.stdout);
            o.stderr = paths.rewrite(&o.stderr);
            o
        })
        .collect();
    Ok(ChapterCheck {
        chapter: chapter.clone(),
        record,
        build_failure,
        outcomes,
        tests_source,
        tests_differ,
    })
}

/// Why `src/predict.rs` cannot call gpumem, said when a build error shows it tried.
pub const PREDICTION_NOTE: &str = "src/predict.rs is built on its own, without gpumem: a \
     prediction is made before measuring; the tests measure and compare. Write the allocator's \
     rules there as arithmetic.";

/// Whether a compiler error is a prediction (`src/predict.rs`) reaching for a crate it cannot use.
fn measures_in_a_prediction(error: &str) -> bool {
    error.contains("predict.rs")
        && (error.contains("a prediction cannot run programs")
            || error.contains("unresolved module or unlinked crate")
            || error.contains("unresolved import")
            || error.contains("can't find crate"))
}

/// The tests that failed at `previous`, comma-separated: `WORKBOOK_TRIED` for the next run, so
/// that a prediction shows the measured values only to a learner who has tried once already.
fn tried_tests(previous: Option<&CheckRecord>) -> String {
    previous
        .map(|p| {
            p.tests
                .iter()
                .filter(|(_, t)| t.status != TestStatus::Passed)
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Whether the files under `tests` differ from the official copy's `tests/`.
fn tests_differ(tests: &Path, copy: &embedded::EmbeddedChapter) -> bool {
    let official: Vec<(&str, &[u8])> = copy.files_under("tests").collect();
    let mut count = 0;
    for (rel, bytes) in &official {
        match std::fs::read(tests.join(rel)) {
            Ok(mine) if mine == *bytes => count += 1,
            _ => return true,
        }
    }
    let mut on_disk = 0;
    count_files(tests, &mut on_disk);
    on_disk != count
}

fn count_files(dir: &Path, n: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            count_files(&path, n);
        } else {
            *n += 1;
        }
    }
}

/// Turns the scratch crate's paths in compiler and panic messages back into the learner's.
struct PathMap {
    pairs: Vec<(String, String)>,
}

impl PathMap {
    fn new(repo: &Repo, chapter: &Chapter, crate_dir: &Path, member: &str) -> PathMap {
        let learner_dir = format!("{}/", learner::shown(repo, &chapter.dir));
        PathMap {
            pairs: vec![
                (format!("{}/", crate_dir.display()), learner_dir.clone()),
                (format!("{member}/"), learner_dir),
            ],
        }
    }

    fn rewrite(&self, text: &str) -> String {
        // The predictions' crate names its source through `predict/../src/predict.rs`.
        let mut text = text.replace("/predict/../src/", "/src/");
        for (from, to) in &self.pairs {
            text = text.replace(from.as_str(), to);
        }
        text
    }
}

/// Where a failed test panicked (`exercises/ch01/src/lib.rs:12:5`), from its output.
pub fn panic_location(outcome: &TestOutcome) -> Option<String> {
    [&outcome.stdout, &outcome.stderr]
        .into_iter()
        .find_map(|text| {
            text.lines().find_map(|line| {
                // `thread 'name' panicked at FILE:LINE:COL:`; newer toolchains put `(id)`
                // before `panicked`.
                let rest = line.strip_prefix("thread '")?;
                let at = rest.find(" panicked at ")?;
                let location = rest[at + " panicked at ".len()..].trim_end();
                Some(location.strip_suffix(':').unwrap_or(location).to_string())
            })
        })
}

/// The report of one check: per exercise what passed, what failed and why.
pub fn render(repo: &Repo, check: &ChapterCheck) -> String {
    let chapter = &check.chapter;
    let mut out = String::new();
    let _ = writeln!(out, "{} — {}", chapter.name, chapter.info.title);
    let src = learner::shown(repo, &chapter.dir.join("src"));
    let tests = match check.tests_source {
        TestsSource::Embedded => "the official tests".to_string(),
        TestsSource::Repository => format!(
            "the tests in {}",
            learner::shown(repo, &chapter.dir.join("tests"))
        ),
    };
    let _ = writeln!(out, "  your code in {src}, checked by {tests}");
    if check.tests_differ {
        let _ = writeln!(
            out,
            "  note: your {} differ from the official tests; check runs the official ones, as \
             grading does",
            learner::shown(repo, &chapter.dir.join("tests"))
        );
    }
    out.push('\n');

    if let Some(failure) = &check.build_failure {
        let _ = writeln!(out, "✗ {} does not compile, so no test ran:", chapter.name);
        out.push('\n');
        let first = failure
            .errors
            .first()
            .map(String::as_str)
            .unwrap_or("the build failed");
        const MAX_LINES: usize = 24;
        for line in first.lines().take(MAX_LINES) {
            let _ = writeln!(out, "    {line}");
        }
        if first.lines().count() > MAX_LINES {
            let _ = writeln!(out, "    ...");
        }
        if failure.errors.len() > 1 {
            let _ = writeln!(
                out,
                "\n  (the first error of several: fix it first, the others may follow from it)"
            );
        }
        if failure.errors.iter().any(|e| measures_in_a_prediction(e)) {
            let _ = writeln!(out, "\n  {PREDICTION_NOTE}");
        }
        if let Some(kept) = learner::kept_progress(chapter, &check.record) {
            let _ = writeln!(out, "\n{kept}");
        }
        return out;
    }

    let width = chapter
        .info
        .exercises
        .iter()
        .map(|e| e.name.chars().count())
        .max()
        .unwrap_or(0);
    let outcome = |test: &str| check.outcomes.iter().find(|o| o.case.name == test);
    let statuses = learner::chapter_status(chapter, Some(&check.record));
    for status in &statuses {
        let ex = status.exercise;
        match status.state {
            State::Done => {
                let _ = writeln!(
                    out,
                    "✓ {:<width$}  done ({}/{} tests pass)",
                    ex.name, status.passed, status.total
                );
            }
            State::NotStarted => {
                // Where the first todo!() is, so the learner knows where to start.
                let at = ex
                    .tests
                    .keys()
                    .filter_map(|t| outcome(t))
                    .find(|o| o.message.contains(TODO_MESSAGE))
                    .and_then(panic_location)
                    .map(|loc| format!(": todo!() at {loc}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "· {:<width$}  not started (0/{} tests pass){at}",
                    ex.name, status.total
                );
            }
            State::Failing => {
                let _ = writeln!(
                    out,
                    "✗ {:<width$}  {}/{} tests pass",
                    ex.name, status.passed, status.total
                );
                for test in ex.tests.keys() {
                    match outcome(test) {
                        Some(o) if o.verdict == Verdict::Passed => {
                            let _ = writeln!(out, "    ✓ {test}");
                        }
                        Some(o) => {
                            let _ = writeln!(out, "    ✗ {test}");
                            let _ = writeln!(out, "        {}", why(o));
                            if let Some(loc) = panic_location(o) {
                                let _ = writeln!(out, "        at {loc}");
                            }
                        }
                        None => {
                            let _ = writeln!(out, "    ✗ {test}");
                            let _ = writeln!(
                                out,
                                "        no such test in the official tests (a mistake in \
                                 chapter.toml: tell the workbook's authors)"
                            );
                        }
                    }
                }
            }
        }
    }
    let listed = chapter.info.tests().count();
    let passed = chapter
        .info
        .tests()
        .filter(|(_, t, _)| outcome(t).is_some_and(|o| o.verdict == Verdict::Passed))
        .count();
    let done = statuses.iter().filter(|s| s.state == State::Done).count();
    out.push('\n');
    if check.passed() {
        let all = if listed == 1 {
            "The one test passes".to_string()
        } else {
            format!("All {listed} tests pass")
        };
        let _ = writeln!(out, "{all}: {} is done.", chapter.name);
    } else {
        let _ = writeln!(
            out,
            "{passed} of {listed} tests pass; {done} of {} exercises done.",
            statuses.len()
        );
    }
    out
}

/// What a failed prediction's first line says (`gpumem::testing::Prediction`).
const PREDICTION_MARK: &str = "numbers differ from what the allocator measured";

/// One line saying why a test did not pass (a line per number for a prediction).
fn why(outcome: &TestOutcome) -> String {
    match outcome.verdict {
        Verdict::TimedOut => format!(
            "{} (an endless loop, or waiting for something that never comes?)",
            outcome.message
        ),
        _ if outcome.message.is_empty() => "failed without a message".to_string(),
        // A prediction (gpumem::testing::Prediction) names each number on a line of its own.
        _ if outcome.message.contains(PREDICTION_MARK) => outcome
            .message
            .split("; ")
            .collect::<Vec<_>>()
            .join("\n        "),
        // The runner has already cut long values (`run::runner::failure_message`), so that the
        // numbers of an assertion are never cut off behind its message.
        _ => outcome.message.clone(),
    }
}

/// What to do after a check: the solution and the next chapter when it passed, else how to go on.
pub fn next_after(
    repo: &Repo,
    check: &ChapterCheck,
    chapters: &[Chapter],
    progress: &crate::course::progress::Progress,
) -> Vec<String> {
    let cmd = learner::command_prefix(repo);
    let name = &check.chapter.name;
    if !check.passed() {
        let file = learner::file_to_edit(repo, &check.chapter);
        let exercise = learner::chapter_status(&check.chapter, Some(&check.record))
            .into_iter()
            .find(|s| s.state != State::Done)
            .map(|s| s.exercise.name.clone())
            .unwrap_or_default();
        let what = if check.build_failure.is_some() {
            "Fix the error".to_string()
        } else {
            format!("Next: work on {exercise}")
        };
        return vec![
            format!("{what} in {file}, then check again:"),
            format!("  {cmd} check {name}"),
            format!("  (or `{cmd} watch {name}` to check on every save)"),
            format!("Stuck? A hint: {cmd} hint {name} {exercise}"),
        ];
    }
    let mut lines = if repo.is_student_edition() {
        Vec::new()
    } else {
        vec![
            "Compare your code with the reference solution:".to_string(),
            format!("  {cmd} solution {name}"),
        ]
    };
    match learner::next_unfinished(chapters, progress, name) {
        Some((next, earlier)) => {
            let what = if earlier {
                "An earlier chapter is still unfinished"
            } else {
                "Next chapter"
            };
            lines.push(format!("{what}: \"{}\":", next.info.title));
            lines.push(format!("  {cmd} check {}", next.name));
        }
        None => lines.push("Every chapter passes. Well done!".to_string()),
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    static COPY: embedded::EmbeddedChapter = embedded::EmbeddedChapter {
        name: "ch01-x",
        files: &[
            ("src/lib.rs", b"stub"),
            ("tests/a.rs", b"official a"),
            ("tests/b.rs", b"official b"),
        ],
    };

    #[test]
    fn edited_added_or_removed_test_files_differ_from_the_official_ones() {
        let dir = tempfile::tempdir().unwrap();
        let tests = dir.path();
        std::fs::write(tests.join("a.rs"), "official a").unwrap();
        std::fs::write(tests.join("b.rs"), "official b").unwrap();
        assert!(!tests_differ(tests, &COPY));
        std::fs::write(tests.join("extra.rs"), "mine").unwrap();
        assert!(tests_differ(tests, &COPY));
        std::fs::remove_file(tests.join("extra.rs")).unwrap();
        std::fs::write(tests.join("b.rs"), "#[test] fn b() {}").unwrap();
        assert!(tests_differ(tests, &COPY));
        std::fs::remove_file(tests.join("b.rs")).unwrap();
        assert!(tests_differ(tests, &COPY));
    }

    #[test]
    fn a_prediction_that_reaches_for_gpumem_is_told_why_it_cannot() {
        assert!(measures_in_a_prediction(
            "error[E0433]: failed to resolve: use of unresolved module or unlinked crate `gpumem`\n \
             --> exercises/ch01-availability/src/predict.rs:30:5"
        ));
        assert!(!measures_in_a_prediction(
            "error[E0433]: use of unresolved module or unlinked crate `foo`\n --> src/lib.rs:3:5"
        ));
        let door = crate::run::prediction_guard::first_door("use std::process;").expect("a door");
        let error = format!(
            "error: {}\n --> exercises/ch01-availability/src/predict.rs:40:1",
            door.compile_error()
        );
        assert!(measures_in_a_prediction(&error), "{error}");
    }

    #[test]
    fn only_the_tests_that_did_not_pass_last_time_count_as_tried() {
        let record = |status| TestRecord {
            status,
            message: String::new(),
        };
        let mut previous = CheckRecord::default();
        previous
            .tests
            .insert("a".into(), record(TestStatus::Failed));
        previous
            .tests
            .insert("b".into(), record(TestStatus::Passed));
        previous
            .tests
            .insert("c".into(), record(TestStatus::TimedOut));
        assert_eq!(tried_tests(Some(&previous)), "a,c");
        assert_eq!(tried_tests(None), "");
    }

    #[test]
    fn the_panic_location_is_found_with_or_without_a_thread_id() {
        let case = runner::TestCase {
            target: "t".into(),
            binary: "t".into(),
            name: "t".into(),
        };
        let outcome = |stdout: &str| TestOutcome {
            case: case.clone(),
            verdict: Verdict::Failed,
            message: String::new(),
            stdout: stdout.to_string(),
            stderr: String::new(),
            duration: Duration::ZERO,
        };
        for line in [
            "thread 't' panicked at src/lib.rs:3:5:",
            "thread 't' (4242) panicked at src/lib.rs:3:5:",
        ] {
            let o = outcome(&format!("running 1 test\n{line}\nnot yet implemented\n"));
            assert_eq!(panic_location(&o).as_deref(), Some("src/lib.rs:3:5"));
        }
        assert_eq!(panic_location(&outcome("no panic here")), None);
    }

    #[test]
    fn a_failed_prediction_shows_each_number_on_its_own_line() {
        let o = TestOutcome {
            case: runner::TestCase {
                target: "t".into(),
                binary: "t".into(),
                name: "t".into(),
            },
            verdict: Verdict::Failed,
            message: "your prediction for X: 2 of 3 numbers differ from what the allocator \
                      measured; a: you predicted 4 B, the allocator measured 512 B; b: you \
                      predicted 1, the allocator measured 2; c: 3, as you predicted"
                .into(),
            stdout: String::new(),
            stderr: String::new(),
            duration: Duration::ZERO,
        };
        assert_eq!(
            why(&o),
            "your prediction for X: 2 of 3 numbers differ from what the allocator measured\n        \
             a: you predicted 4 B, the allocator measured 512 B\n        \
             b: you predicted 1, the allocator measured 2\n        \
             c: 3, as you predicted"
        );
    }
}
