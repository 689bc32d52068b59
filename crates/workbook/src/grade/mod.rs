//! `workbook grade`: grades submissions with the official tests (and hidden ones), on the same
//! machinery as `verify` and `check`.
//!
//! For each chapter, the official crate (`exercises/<chapter>`: its `Cargo.toml`, `tests/`, plus
//! any hidden tests) is copied once per run into a pristine crate. Each student's submitted `src/`
//! folders are laid over those in one scratch workspace per student ([`scratch::prepare_workspace`],
//! with member names per student so that executables never collide in the shared build target),
//! all built in one cargo run with a time limit ([`runner::build_all_tests`]; cargo builds one
//! target folder at a time, so one run using both cores beats a run per chapter waiting for the
//! lock), and every graded test runs in a process of its own with a
//! time limit and capped output ([`runner::run_tests`]). A test passes only when its process exits
//! with status 0 after the harness itself reported it passed (see [`runner::run_test`]). Points
//! come from `chapter.toml` (hidden tests: their `points.toml`, else 1 each).
//!
//! Nothing a submission does can stop the batch: a refused archive, a compile error, a crash or a
//! hang costs that student the points concerned, with the reason in their report.

pub mod export;
pub mod gradebook;
pub mod hidden;
pub mod policy;
pub mod report;
pub mod similarity;
pub mod student;
pub mod submission;
pub mod summary;

use crate::course::app_state::{self, Chapter, Repo};
use crate::run::Tier;
use crate::run::runner::{self, RunOptions, TestCase, Verdict};
use crate::run::sandbox::Sandbox;
use crate::run::scratch::{self, WorkspaceTemplate};
use anyhow::{Context, Result, bail};
use clap::Args;
use gradebook::Gradebook;
use hidden::HiddenChapter;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use submission::{Limits, Submission, SubmittedChapter};

/// Flags of `workbook grade`.
#[derive(Debug, Args)]
#[command(
    after_help = "A submission is a folder (a copy of the workbook, its exercises/ folder, or \
                  <chapter>/src folders) or a .zip, .tar.gz, .tgz or .tar of one. Each chapter's \
                  src/ is laid over a pristine copy of its crate: the official tests/ and \
                  Cargo.toml are used, never the submitted ones.\n\n\
                  Hidden tests: <FOLDER>/<chapter>/*.rs, each a test file like those in tests/; \
                  <FOLDER>/<chapter>/points.toml maps test names to points (a test it does not \
                  list is worth 1 point)."
)]
pub struct GradeArgs {
    /// Submissions to grade: folders or archives; each student is named after the entry.
    #[arg(value_name = "SUBMISSION")]
    pub submissions: Vec<PathBuf>,
    /// Grade every folder and archive in FOLDER, one per student (named after the entry).
    #[arg(long, value_name = "FOLDER")]
    pub class: Option<PathBuf>,
    /// Grade only this chapter (name or unique prefix; repeat for more); default: all.
    #[arg(long = "chapter", value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Add the tests in FOLDER/CHAPTER/*.rs, which the learners never saw.
    #[arg(long, value_name = "FOLDER")]
    pub hidden_tests: Option<PathBuf>,
    /// What to print on stdout: a table, Gradescope's results.json, or the class's grades as a
    /// Canvas or Moodle import file (with --csv: the whole file's, merged).
    #[arg(long, value_enum, default_value_t = GradeFormat::Table)]
    pub format: GradeFormat,
    /// Write Gradescope's results.json to FILE (several submissions: FILE is a folder of
    /// STUDENT.json).
    #[arg(long, value_name = "FILE")]
    pub gradescope: Option<PathBuf>,
    /// When Gradescope shows students the hidden tests (their `visibility` in results.json):
    /// after_published and after_due_date also hide the total score until then; hidden never
    /// shows the tests but shows the total; visible shows them at once.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = HiddenVisibility::AfterPublished)]
    pub hidden_visibility: HiddenVisibility,
    /// Write JUnit XML (a test suite per student and chapter) to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write a CSV to FILE: one row per student, one column per chapter, and the total. An
    /// existing grade file is merged into: the graded students' rows are updated, the others
    /// kept.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// A class roster (CSV with the columns folder, id, email, name, and optionally submitted):
    /// adds each student's id, email and name to the grade files.
    #[arg(long, value_name = "FILE")]
    pub roster: Option<PathBuf>,
    /// A grading policy (TOML): weights per chapter, a late penalty per day after a due date;
    /// adds each student's days late and final grade (percent) to the grade files.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Points of each chapter on Gradescope (its results.json), such as ch01=10,ch03=20: each
    /// test's points are scaled so that the chapter's add up to them. Default: the policy's
    /// `[points]`, else chapter.toml's.
    #[arg(long, value_name = "CHAPTER=POINTS,...", value_parser = parse_points)]
    pub points: Option<Points>,
    /// Regrade only the students, and the chapters, without full marks in the --csv file (and
    /// submissions it does not have yet), merging the results into it.
    #[arg(long, requires = "csv")]
    pub only_failed: bool,
    /// Write one Markdown feedback report per student into FOLDER.
    #[arg(long, value_name = "FOLDER")]
    pub feedback: Option<PathBuf>,
    /// Print one line per student (score and the chapters short of full marks) instead of the
    /// table and its details, and no progress.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Chapters graded at once, and test processes at once in each (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is killed and counts as failed (timed out).
    #[arg(long, value_name = "SECONDS", default_value_t = runner::DEFAULT_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Memory one test process may have (its heap and private mappings), such as 4GiB or 512MiB,
    /// or `none`. Half of it is the cpu device's capacity (unless GPUMEM_CPU_CAPACITY is set), so
    /// runaway allocations end in an out-of-memory error instead of taking the machine's memory.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = runner::parse_memory_limit)]
    pub memory_limit: runner::MemoryLimit,
    /// Keep the test executables of every graded chapter (about 20 MB each) under target/workbook.
    #[arg(long)]
    pub keep_builds: bool,
    /// Where each test runs: `auto` (namespaces where bubblewrap can make them, else Landlock),
    /// `namespaces` (bubblewrap), `landlock` (Landlock, seccomp and rlimits, under a uid of its
    /// own when grading as root: for a hosted grader's container), or `none`.
    #[arg(long, value_enum, value_name = "TIER", default_value_t = Tier::Auto)]
    pub sandbox: Tier,
    /// `--sandbox none`: the learners' code then runs with your permissions and can forge its
    /// results. Only for code you trust.
    #[arg(long, conflicts_with = "sandbox")]
    pub no_sandbox: bool,
}

/// `--points`: points per chapter, as written (chapters by name, prefix or number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Points(pub Vec<(String, u32)>);

/// `--points`'s text: `CHAPTER=POINTS`, comma-separated.
pub fn parse_points(text: &str) -> Result<Points, String> {
    let mut points = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((chapter, value)) = part.split_once('=') else {
            return Err(format!(
                "`{part}` is not CHAPTER=POINTS: write them like ch01=10,ch03=20"
            ));
        };
        let value: u32 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: {} is not a whole number of points", value.trim()))?;
        if value == 0 {
            return Err(format!("`{part}`: a chapter is worth 1 point or more"));
        }
        points.push((chapter.trim().to_string(), value));
    }
    if points.is_empty() {
        return Err("no points given: write them like ch01=10,ch03=20".to_string());
    }
    Ok(Points(points))
}

/// What `workbook grade` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GradeFormat {
    /// A table: one row per student, one column per chapter, then what cost points.
    Table,
    /// Gradescope's results.json (several submissions: an object of them by student).
    Json,
    /// Canvas's gradebook import CSV.
    Canvas,
    /// Moodle's CSV grade import file.
    Moodle,
}

/// When Gradescope shows students a hidden test: the test's `visibility` in results.json, in
/// Gradescope's words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum HiddenVisibility {
    /// Once the grades are published; the student's total score is hidden until then.
    #[default]
    AfterPublished,
    /// Once the due date (the late due date, where late submissions are allowed) has passed; the
    /// total score is hidden until then.
    AfterDueDate,
    /// Never; Gradescope still shows the total score, the hidden tests' points included.
    Hidden,
    /// At once, as the official tests.
    Visible,
}

impl HiddenVisibility {
    /// The word results.json holds.
    pub fn word(self) -> &'static str {
        match self {
            HiddenVisibility::AfterPublished => "after_published",
            HiddenVisibility::AfterDueDate => "after_due_date",
            HiddenVisibility::Hidden => "hidden",
            HiddenVisibility::Visible => "visible",
        }
    }
}

/// Bytes kept of each of a test's output streams (half from the start, half from the end).
pub const OUTPUT_LIMIT: usize = 6 * 1024;
/// What grading without the sandbox (`--no-sandbox`) risks, said when it is chosen or needed.
pub const NO_SANDBOX_RISK: &str = "then the learners' code runs with your permissions: it can \
    forge its tests' results, read and change the other submissions, the hidden tests and the \
    grader's outputs, use the network, and leave processes running after grading ends. Use it \
    only for code you trust, or inside a throw-away container.";

/// The default time limit of one submitted chapter's build.
pub const DEFAULT_BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// How `grade` works.
#[derive(Debug, Clone)]
pub struct GradeOptions {
    /// Chapters to grade, by name or unique prefix; empty: all.
    pub chapters: Vec<String>,
    /// The hidden tests' folder, if any.
    pub hidden_tests: Option<PathBuf>,
    /// Chapters graded at once, and test processes at once within each.
    pub jobs: usize,
    /// Time limit of one test.
    pub timeout: Duration,
    /// Time limit of one submitted chapter's build (cargo and the compiler are stopped after it).
    pub build_timeout: Duration,
    /// Memory one test process may have ([`RunOptions::memory_limit`]); half of it is the cpu
    /// device's capacity unless `GPUMEM_CPU_CAPACITY` is set. `None`: no limit.
    pub memory_limit: Option<u64>,
    /// Keep each graded chapter's test executables (otherwise removed once its tests ran).
    pub keep_builds: bool,
    /// What a submission may unpack to.
    pub limits: Limits,
    /// Show a progress bar and one line per graded student on stderr.
    pub progress: bool,
    /// Points of chapters on Gradescope, by full name (their tests' points scaled to add up to
    /// them); a chapter not listed keeps chapter.toml's.
    pub points: BTreeMap<String, u32>,
    /// When Gradescope shows students the hidden tests.
    pub hidden_visibility: HiddenVisibility,
    /// The students' names, one per submission in order; empty: each is named after its entry
    /// (`alice`, and `alice 2` for a second `alice`).
    pub names: Vec<String>,
    /// With one submission: keep its Gradescope results.json in this file up to date as
    /// grading goes (from the start, then after every graded chapter), so that a grader stopped
    /// at a time limit leaves the chapters it graded counted.
    pub results_as_it_goes: Option<PathBuf>,
    /// The sandbox every test runs in ([`crate::run::sandbox`]); grading refuses to start where
    /// the chosen tier cannot run. [`Tier::None`] is `--no-sandbox`.
    pub sandbox: Tier,
}

impl Default for GradeOptions {
    fn default() -> Self {
        GradeOptions {
            chapters: Vec::new(),
            hidden_tests: None,
            jobs: app_state::default_jobs(),
            timeout: runner::DEFAULT_TIMEOUT,
            build_timeout: DEFAULT_BUILD_TIMEOUT,
            memory_limit: Some(runner::DEFAULT_MEMORY_LIMIT),
            keep_builds: false,
            limits: Limits::default(),
            progress: true,
            points: BTreeMap::new(),
            hidden_visibility: HiddenVisibility::default(),
            names: Vec::new(),
            results_as_it_goes: None,
            sandbox: Tier::Auto,
        }
    }
}

/// One graded test of a chapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestSpec {
    /// The test function's name.
    pub name: String,
    /// What passing it is worth.
    pub points: u32,
    /// The exercise that lists it in `chapter.toml` (none for hidden tests).
    pub exercise: Option<String>,
    /// Whether it is a hidden test.
    pub hidden: bool,
    /// The test target (file stem in `tests/`) that holds it.
    pub target: Option<String>,
}

/// A chapter as graded: its `chapter.toml`, the pristine crate, and every graded test in order
/// (`chapter.toml`'s, then the hidden ones).
#[derive(Debug, Clone)]
pub struct ChapterSpec {
    /// The chapter.
    pub chapter: Chapter,
    /// The pristine crate: the official files and the hidden tests (in the run's own folder,
    /// removed when grading ends).
    pub pristine: PathBuf,
    /// The graded tests.
    pub tests: Vec<TestSpec>,
}

impl ChapterSpec {
    /// The chapter's name.
    pub fn name(&self) -> &str {
        &self.chapter.name
    }

    /// All its tests' points together.
    pub fn max_score(&self) -> u32 {
        self.tests.iter().map(|t| t.points).sum()
    }

    /// The first (gentlest) hint of an exercise.
    pub fn first_hint(&self, exercise: &str) -> Option<&str> {
        self.chapter
            .info
            .exercises
            .iter()
            .find(|e| e.name == exercise)
            .and_then(|e| e.hints.first())
            .map(String::as_str)
    }
}

/// What became of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It passed: full points.
    Passed,
    /// It failed (a panic, an abort, an exit, a missing report).
    Failed,
    /// It ran past the time limit and was killed.
    TimedOut,
    /// The chapter did not compile.
    NotCompiled,
    /// The chapter was not in the submission.
    NotSubmitted,
    /// The chapter could not be graded (a refused submission, an error of the grader).
    NotGraded,
}

impl Status {
    /// Whether it earned its points.
    pub fn passed(self) -> bool {
        self == Status::Passed
    }

    /// A word for tables and reports.
    pub fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::TimedOut => "timed out",
            Status::NotCompiled => "does not compile",
            Status::NotSubmitted => "not submitted",
            Status::NotGraded => "not graded",
        }
    }
}

/// The result of one test for one student.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// The test.
    pub test: TestSpec,
    /// What became of it.
    pub status: Status,
    /// Points earned: all or nothing.
    pub score: u32,
    /// One line saying why it did not pass; empty when it passed.
    pub message: String,
    /// What the test printed, cut (or the compiler's errors).
    pub output: String,
    /// How long its process ran.
    pub duration: Duration,
}

/// What happened to a chapter as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChapterState {
    /// It built and its tests ran.
    Graded,
    /// It did not compile: the compiler's first errors.
    DoesNotCompile(Vec<String>),
    /// It was not in the submission.
    NotSubmitted,
    /// It could not be graded, and why.
    NotGraded(String),
}

/// One student's result in one chapter.
#[derive(Debug, Clone)]
pub struct ChapterResult {
    /// The chapter's name.
    pub chapter: String,
    /// Its title.
    pub title: String,
    /// Graded, or why not.
    pub state: ChapterState,
    /// Every graded test, in the chapter's order.
    pub tests: Vec<TestResult>,
    /// Notes for the learner (ignored edits to tests/...).
    pub notes: Vec<String>,
    /// Constructs the instructor may want to look at (not scored).
    pub review: Vec<String>,
    /// Building and testing time.
    pub duration: Duration,
}

impl ChapterResult {
    /// Points earned.
    pub fn score(&self) -> u32 {
        self.tests.iter().map(|t| t.score).sum()
    }

    /// Points possible.
    pub fn max_score(&self) -> u32 {
        self.tests.iter().map(|t| t.test.points).sum()
    }

    fn without_tests(spec: &ChapterSpec, state: ChapterState, status: Status, why: &str) -> Self {
        ChapterResult {
            chapter: spec.name().to_string(),
            title: spec.chapter.info.title.clone(),
            tests: spec
                .tests
                .iter()
                .map(|t| TestResult {
                    test: t.clone(),
                    status,
                    score: 0,
                    message: why.to_string(),
                    output: String::new(),
                    duration: Duration::ZERO,
                })
                .collect(),
            state,
            notes: Vec::new(),
            review: Vec::new(),
            duration: Duration::ZERO,
        }
    }
}

/// One student's grades.
#[derive(Debug, Clone)]
pub struct StudentResult {
    /// The student's name (the submission's name), unique in the report.
    pub student: String,
    /// A lower-case ASCII, unique form of the name (build folders and cargo's package names).
    pub slug: String,
    /// The name as a file's name (the feedback report's and results.json's): the name itself,
    /// letters of every script kept, unique without regard to case.
    pub file_name: String,
    /// The submission's path.
    pub source: PathBuf,
    /// One result per graded chapter, in chapter order.
    pub chapters: Vec<ChapterResult>,
    /// Notes about the submission as a whole (links left out...).
    pub notes: Vec<String>,
    /// Why the whole submission was refused, if it was.
    pub refused: Option<String>,
}

impl StudentResult {
    /// Points earned in all chapters.
    pub fn score(&self) -> u32 {
        self.chapters.iter().map(ChapterResult::score).sum()
    }

    /// Points possible in all chapters.
    pub fn max_score(&self) -> u32 {
        self.chapters.iter().map(ChapterResult::max_score).sum()
    }
}

/// Everything one `grade` run found.
#[derive(Debug)]
pub struct GradeReport {
    /// The graded chapters, in order.
    pub chapters: Vec<ChapterSpec>,
    /// One result per submission, in the order given.
    pub students: Vec<StudentResult>,
    /// Wall-clock time of the whole run.
    pub elapsed: Duration,
    /// The sandbox's tier every test ran in, in words ([`Sandbox::describe`]; `none`).
    pub sandbox: String,
    /// Points of chapters on Gradescope, by name ([`GradeOptions::points`]).
    pub points: BTreeMap<String, u32>,
    /// When Gradescope shows students the hidden tests ([`GradeOptions::hidden_visibility`]).
    pub hidden_visibility: HiddenVisibility,
    /// Chapters that look alike: a student's and the reference solution's, or two students'
    /// ([`similarity`]; nothing is deducted).
    pub similar: Vec<similarity::Similar>,
}

/// `workbook grade`: grades, prints the table or Gradescope JSON, writes the requested files.
pub fn command(root: Option<&Path>, args: &GradeArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let mut paths = args.submissions.clone();
    if let Some(class) = &args.class {
        let (entries, skipped) = submission::class_entries(class)?;
        for path in skipped {
            eprintln!(
                "grade: skipping {}: not a folder, .zip, .tar.gz, .tgz or .tar",
                path.display()
            );
        }
        if entries.is_empty() {
            bail!("{} holds no submission", class.display());
        }
        paths.extend(entries);
    }
    if paths.is_empty() {
        bail!("nothing to grade: give submissions (folders or archives) or --class FOLDER");
    }
    if let Some(path) = paths.iter().find(|p| !p.exists()) {
        bail!("{} does not exist", path.display());
    }
    let all_chapters = repo.chapter_names()?;
    let resolve = |key: &str| -> Result<String> {
        let mut found = repo.select_chapters(&[key.to_string()])?;
        Ok(found.remove(0))
    };
    let policy = args
        .policy
        .as_deref()
        .map(|path| policy::Policy::load(path, &resolve))
        .transpose()?;
    let roster = args
        .roster
        .as_deref()
        .map(gradebook::Roster::read)
        .transpose()?;
    let chapter_points = |chapter: &str| {
        repo.chapter(chapter)
            .map(|c| c.info.total_points())
            .unwrap_or(0)
    };
    let existing = match &args.csv {
        Some(path) => Gradebook::read(path, &all_chapters, &chapter_points)?,
        None => Gradebook::default(),
    };
    if existing.policy_columns && policy.is_none() {
        bail!(
            "{} has the final grades of a --policy: give the policy again (--policy FILE) so \
             that they stay right, or give --csv another file",
            args.csv.as_deref().unwrap_or(Path::new("")).display()
        );
    }
    let mut points = policy
        .as_ref()
        .map(|p| p.points.clone())
        .unwrap_or_default();
    if let Some(Points(given)) = &args.points {
        points.clear();
        for (chapter, value) in given {
            points.insert(
                resolve(chapter).with_context(|| format!("--points {chapter}={value}"))?,
                *value,
            );
        }
    }
    let mut chapters = args.chapters.clone();
    let mut names = Vec::new();
    if args.only_failed {
        let wanted = repo.select_chapters(&args.chapters)?;
        let regrade = only_failed(&existing, &paths, &wanted);
        if regrade.paths.is_empty() {
            eprintln!(
                "grade: --only-failed: every submission has full marks in {} in the chosen \
                 chapters: nothing to regrade",
                args.csv.as_deref().unwrap_or(Path::new("")).display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!(
            "grade: --only-failed: regrading {} of {} submission(s) in {}",
            regrade.paths.len(),
            paths.len(),
            regrade.chapters.join(", ")
        );
        paths = regrade.paths;
        chapters = regrade.chapters;
        names = regrade.names;
    }
    let options = GradeOptions {
        chapters,
        hidden_tests: args.hidden_tests.clone(),
        jobs: args
            .jobs
            .map(usize::from)
            .unwrap_or_else(app_state::default_jobs),
        timeout: Duration::from_secs(args.timeout),
        memory_limit: args.memory_limit.0,
        keep_builds: args.keep_builds,
        sandbox: if args.no_sandbox {
            Tier::None
        } else {
            args.sandbox
        },
        results_as_it_goes: args.gradescope.clone().filter(|_| paths.len() == 1),
        progress: !args.quiet,
        points,
        hidden_visibility: args.hidden_visibility,
        names,
        ..GradeOptions::default()
    };
    if options.sandbox == Tier::None {
        eprintln!("grade: no sandbox: {NO_SANDBOX_RISK}");
    }
    let report = grade(&repo, &paths, &options)?;
    let had_rows = !existing.rows.is_empty();
    let mut book = existing;
    let merged = book.merge(&report, &all_chapters);
    if let Some(roster) = &roster {
        let missing = book.apply_roster(roster);
        if !missing.is_empty() {
            eprintln!(
                "grade: warning: not in the roster {}: {} (their id, email and name are left \
                 empty)",
                args.roster.as_deref().unwrap_or(Path::new("")).display(),
                missing.join(", ")
            );
        }
    }
    if let Some(policy) = &policy {
        let unknown = book.without_time(policy);
        if !unknown.is_empty() {
            eprintln!(
                "grade: warning: no submission time for {} (neither the policy's \
                 submission_times nor the roster's `submitted` gives one): counted on time",
                unknown.join(", ")
            );
        }
    }
    let summary = args
        .class
        .is_some()
        .then(|| summary::Summary::new(&report, report.similar.clone()));
    match args.format {
        GradeFormat::Table if args.quiet => print!("{}", report::quiet(&report)),
        GradeFormat::Table => print!("{}", report::table(&report)),
        GradeFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report::gradescope_all(&report))?
        ),
        GradeFormat::Canvas => print!("{}", book.canvas(policy.as_ref())),
        GradeFormat::Moodle => print!("{}", book.moodle(policy.as_ref())),
    }
    if let (Some(summary), GradeFormat::Table) = (&summary, args.format) {
        print!("\n{}", summary.text());
    }
    if let Some(path) = &args.gradescope {
        report::write_gradescope(&report, path)?;
        eprintln!("grade: Gradescope results written to {}", path.display());
    }
    if let Some(path) = &args.junit {
        write_file(path, report::junit(&report).as_bytes())?;
        eprintln!("grade: JUnit XML written to {}", path.display());
    }
    if let Some(path) = &args.csv {
        replace_file(path, book.to_csv(policy.as_ref()).as_bytes())?;
        if had_rows {
            eprintln!("grade: grades merged into {}", merged.describe(path));
        } else {
            eprintln!("grade: CSV written to {}", path.display());
        }
    }
    if let Some(dir) = &args.feedback {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for student in &report.students {
            let path = dir.join(format!("{}.md", student.file_name));
            write_file(&path, report::feedback(&report, student).as_bytes())?;
        }
        write_file(&dir.join("index.md"), report::index(&report).as_bytes())?;
        eprintln!(
            "grade: {} feedback report(s) written to {}",
            report.students.len(),
            dir.display()
        );
        if let Some(summary) = &summary {
            write_file(&dir.join("summary.md"), summary.markdown().as_bytes())?;
            let json = serde_json::to_string_pretty(&summary.json())? + "\n";
            write_file(&dir.join("summary.json"), json.as_bytes())?;
            eprintln!(
                "grade: the class's summary written to {} and summary.json",
                dir.join("summary.md").display()
            );
        }
    }
    if summary.is_some() && args.feedback.is_none() {
        eprintln!(
            "grade: the class's summary is written as summary.md and summary.json only with \
             --feedback FOLDER (there, beside the feedback reports)"
        );
    }
    let n = report.students.len();
    eprintln!(
        "grade: {n} submission(s) graded in {:.1} s ({:.1} s per submission)",
        report.elapsed.as_secs_f64(),
        report.elapsed.as_secs_f64() / n.max(1) as f64
    );
    Ok(ExitCode::SUCCESS)
}

/// The submissions `--only-failed` regrades (those without full marks in `book` in one of
/// `chapters`, or not in it), and the chapters to regrade (those any of them lacks), in order.
fn only_failed(book: &Gradebook, paths: &[PathBuf], chapters: &[String]) -> OnlyFailed {
    let mut names = HashSet::new();
    let mut regrade = OnlyFailed::default();
    let mut short = HashSet::new();
    for path in paths {
        // Named as `grade` names the whole class (`alice`, `alice 2`), which a part of it alone
        // would not be.
        let student = unique(submission::student_name(path), &mut names, " ");
        let missing = book.short_of_full_marks(&student, chapters);
        if !missing.is_empty() {
            regrade.paths.push(path.clone());
            regrade.names.push(student);
            short.extend(missing);
        }
    }
    regrade.chapters = chapters
        .iter()
        .filter(|c| short.contains(*c))
        .cloned()
        .collect();
    regrade
}

/// What `--only-failed` regrades: submissions, the names the whole class gives them, chapters.
#[derive(Debug, Default)]
struct OnlyFailed {
    paths: Vec<PathBuf>,
    names: Vec<String>,
    chapters: Vec<String>,
}

/// Writes `path` whole or not at all: written beside, then renamed over (a grader stopped while
/// writing leaves the file it had).
fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    write_file(&partial, bytes)?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// What every grading worker shares.
struct Grader<'a> {
    /// The scratch workspace template, with the chapters' crates built as grading wants them.
    template: WorkspaceTemplate,
    grade_dir: PathBuf,
    target_dir: PathBuf,
    options: &'a GradeOptions,
    /// The sandbox every test runs in (`None`: `--no-sandbox`).
    sandbox: Option<Arc<Sandbox>>,
}

/// Grades `submissions` (folders or archives) with the official tests of the chosen chapters.
/// Errors are the grader's own (no such chapter, hidden tests that do not build); anything a
/// submission does is graded and explained instead.
pub fn grade(repo: &Repo, submissions: &[PathBuf], options: &GradeOptions) -> Result<GradeReport> {
    let start = Instant::now();
    let names = repo.select_chapters(&options.chapters)?;
    let chapters = names
        .iter()
        .map(|name| repo.chapter(name))
        .collect::<Result<Vec<_>>>()
        .context("grading needs every chosen chapter's chapter.toml (choose with --chapter)")?;
    let hidden = match &options.hidden_tests {
        Some(folder) => hidden::load(folder, &chapters, &repo.chapter_names()?)?,
        None => BTreeMap::new(),
    };
    let packages = chapters
        .iter()
        .map(|chapter| scratch::package_name(&chapter.dir))
        .collect::<Result<Vec<_>>>()?;
    let template = WorkspaceTemplate::from_repo_root(&repo.root)?.for_grading(&packages);
    let grade_dir = repo.work_dir().join("grade");
    std::fs::create_dir_all(&grade_dir)
        .with_context(|| format!("creating {}", grade_dir.display()))?;
    // Before version 0.4 every chapter had a workspace of its own here: those are only a cache.
    for legacy in ["official", "submissions"] {
        let _ = std::fs::remove_dir_all(grade_dir.join(legacy));
    }
    // This run's own folder (pristine crates, submissions taken in): runs at once never share it.
    let run_dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&grade_dir)
        .context("creating a folder for this run")?;
    let sandbox = Sandbox::choose(options.sandbox)
        .map_err(|e| {
            anyhow::anyhow!(
                "grading runs every test in a sandbox, and it cannot run here: {e:#}.\n\
                 Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) on Linux with \
                 user namespaces, or use a kernel with Landlock (Linux 5.13 or later), or grade \
                 with --sandbox none: {NO_SANDBOX_RISK}"
            )
        })?
        .map(Arc::new);
    let tier = sandbox
        .as_deref()
        .map_or_else(|| "none".to_string(), Sandbox::describe);
    if options.progress {
        eprintln!("grade: every test runs in the sandbox: {tier}");
    }
    let ctx = Grader {
        template,
        grade_dir,
        target_dir: repo.work_dir().join("target"),
        options,
        sandbox,
    };
    if options.progress {
        eprintln!(
            "grade: building the official tests of {} chapter(s)",
            chapters.len()
        );
    }
    let specs = official_tests(&ctx, &chapters, &hidden, &run_dir.path().join("pristine"))?;

    // Take every submission in: copied or unpacked into a private folder, links and limits checked.
    let mut taken = Vec::new();
    let mut names_used = HashSet::new();
    let mut slugs_used = HashSet::new();
    let mut files_used = FileNames::default();
    let mut file_names = Vec::new();
    for (i, path) in submissions.iter().enumerate() {
        let name = match options.names.get(i) {
            Some(name) => name.clone(),
            None => submission::student_name(path),
        };
        let student = unique(name, &mut names_used, " ");
        let slug = unique(slug(&student), &mut slugs_used, "-");
        let file_name = files_used.add(&student);
        let private = run_dir.path().join("intake").join(&slug);
        std::fs::create_dir_all(&private)
            .with_context(|| format!("creating {}", private.display()))?;
        let sub = submission::intake(path, &student, &chapters, &private, &options.limits);
        taken.push((sub, slug));
        file_names.push(file_name);
    }
    let similar = look_alike(&chapters, &taken);

    // Every submitted chapter is a unit of work; workers take them in turn.
    let units: Vec<(usize, usize)> = taken
        .iter()
        .enumerate()
        .flat_map(|(s, (sub, _))| {
            specs
                .iter()
                .enumerate()
                .filter(|(_, spec)| sub.chapters.contains_key(spec.name()))
                .map(move |(c, _)| (s, c))
        })
        .collect();
    let total_tests: usize = units.iter().map(|&(_, c)| specs[c].tests.len()).sum();
    let bar = progress_bar(total_tests as u64, options.progress);
    let left: Vec<AtomicUsize> = taken
        .iter()
        .map(|(sub, _)| AtomicUsize::new(sub.chapters.len()))
        .collect();
    let results: Mutex<BTreeMap<(usize, usize), ChapterResult>> = Mutex::new(BTreeMap::new());
    // All of a student's chapters are built in one cargo run, by the first worker to need them
    // (the others wait for it): cargo builds one target folder at a time, so builds of their own
    // would only queue, each using one core.
    let builds: Vec<OnceLock<StudentBuild>> = taken.iter().map(|_| OnceLock::new()).collect();
    let next = AtomicUsize::new(0);
    let announce = |s: usize| {
        let (sub, slug) = &taken[s];
        let done = results.lock().unwrap_or_else(|p| p.into_inner());
        let student = assemble(sub, slug, &file_names[s], &specs, &done, s);
        if options.progress {
            bar.suspend(|| {
                eprintln!(
                    "grade: {}: {}/{}",
                    student.student,
                    student.score(),
                    student.max_score()
                )
            });
        }
    };
    // With one submission, its results.json as it stands (under the results' lock).
    let write_as_it_goes = |done: &BTreeMap<(usize, usize), ChapterResult>| -> Result<()> {
        let (Some(path), [(sub, slug)]) = (&options.results_as_it_goes, taken.as_slice()) else {
            return Ok(());
        };
        let so_far = GradeReport {
            chapters: specs.clone(),
            students: vec![assemble(sub, slug, &file_names[0], &specs, done, 0)],
            elapsed: start.elapsed(),
            sandbox: tier.clone(),
            points: options.points.clone(),
            hidden_visibility: options.hidden_visibility,
            similar: Vec::new(),
        };
        report::write_gradescope(&so_far, path)
    };
    write_as_it_goes(&BTreeMap::new())?;
    for (s, (sub, _)) in taken.iter().enumerate() {
        if sub.chapters.is_empty() {
            announce(s);
        }
    }
    let workers = options.jobs.max(1).min(units.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(s, c)) = units.get(i) else {
                        break;
                    };
                    let (sub, slug) = &taken[s];
                    let spec = &specs[c];
                    bar.set_message(format!("{} {}", sub.student, spec.name()));
                    let submitted = &sub.chapters[spec.name()];
                    let build = builds[s].get_or_init(|| build_student(&ctx, &specs, sub, slug));
                    let compiled = build.chapters.get(spec.name());
                    let result = grade_chapter(&ctx, spec, submitted, compiled, &|| bar.inc(1));
                    {
                        let mut done = results.lock().unwrap_or_else(|p| p.into_inner());
                        done.insert((s, c), result);
                        if let Err(e) = write_as_it_goes(&done) {
                            eprintln!("grade: {e:#}");
                        }
                    }
                    if left[s].fetch_sub(1, Ordering::AcqRel) == 1 {
                        build
                            .scratch
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .take();
                        announce(s);
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let done = results.into_inner().unwrap_or_else(|p| p.into_inner());
    let students = taken
        .iter()
        .enumerate()
        .map(|(s, (sub, slug))| assemble(sub, slug, &file_names[s], &specs, &done, s))
        .collect();
    Ok(GradeReport {
        chapters: specs,
        students,
        elapsed: start.elapsed(),
        sandbox: tier,
        points: options.points.clone(),
        hidden_visibility: options.hidden_visibility,
        similar,
    })
}

/// The submitted chapters that look alike ([`similarity`]): each against the reference solution
/// (where the repository has it) and against the other students'.
fn look_alike(chapters: &[Chapter], taken: &[(Submission, String)]) -> Vec<similarity::Similar> {
    let mut prints = BTreeMap::new();
    for chapter in chapters {
        let base = similarity::Base::new(&similarity::read_sources(&chapter.dir.join("src")));
        let solution = chapter.solution_dir.join("src");
        let reference = solution
            .is_dir()
            .then(|| base.fingerprint(&similarity::read_sources(&solution)));
        let students = taken
            .iter()
            .filter_map(|(sub, _)| {
                let submitted = sub.chapters.get(&chapter.name)?;
                let print = base.fingerprint(&similarity::read_sources(&submitted.src));
                Some((sub.student.clone(), print))
            })
            .collect();
        prints.insert(chapter.name.clone(), (reference, students));
    }
    similarity::find(&prints)
}

fn progress_bar(len: u64, enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} tests ({eta} left) {wide_msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A student's result from the chapters graded so far (the rest: not submitted or refused).
fn assemble(
    sub: &Submission,
    slug: &str,
    file_name: &str,
    specs: &[ChapterSpec],
    done: &BTreeMap<(usize, usize), ChapterResult>,
    s: usize,
) -> StudentResult {
    let chapters = specs
        .iter()
        .enumerate()
        .map(|(c, spec)| {
            if let Some(result) = done.get(&(s, c)) {
                return result.clone();
            }
            if sub.chapters.contains_key(spec.name()) {
                // Only while grading goes on (results.json as it goes).
                let why = "not graded yet: grading stopped before this chapter (a time limit?)";
                return ChapterResult::without_tests(
                    spec,
                    ChapterState::NotGraded(why.to_string()),
                    Status::NotGraded,
                    why,
                );
            }
            match &sub.refused {
                Some(why) => ChapterResult::without_tests(
                    spec,
                    ChapterState::NotGraded(why.clone()),
                    Status::NotGraded,
                    why,
                ),
                None => ChapterResult::without_tests(
                    spec,
                    ChapterState::NotSubmitted,
                    Status::NotSubmitted,
                    "not submitted",
                ),
            }
        })
        .collect();
    StudentResult {
        student: sub.student.clone(),
        slug: slug.to_string(),
        file_name: file_name.to_string(),
        source: sub.source.clone(),
        chapters,
        notes: sub.notes.clone(),
        refused: sub.refused.clone(),
    }
}

/// The pristine crate of every chapter (official files plus hidden tests), built once with the
/// stub (all chapters in one cargo run) to learn which tests each executable holds: the graded
/// tests do not depend on what a submission compiles to.
fn official_tests(
    ctx: &Grader<'_>,
    chapters: &[Chapter],
    hidden: &BTreeMap<String, HiddenChapter>,
    pristine_dir: &Path,
) -> Result<Vec<ChapterSpec>> {
    let mut pristines = Vec::new();
    for chapter in chapters {
        let pristine = pristine_dir.join(&chapter.name);
        let mut extra: BTreeMap<PathBuf, Vec<u8>> = hidden
            .get(&chapter.name)
            .map(|h| {
                h.files
                    .iter()
                    .map(|(name, bytes)| (Path::new("tests").join(name), bytes.clone()))
                    .collect()
            })
            .unwrap_or_default();
        // The learner's crate may not use `unsafe` (nor `global_asm!`, `no_mangle`, link
        // sections): safe code cannot reach the harness's descriptors or memory, nor run before
        // `main`.
        let manifest_path = chapter.dir.join("Cargo.toml");
        let manifest = std::fs::read_to_string(&manifest_path)
            .with_context(|| format!("reading {}", manifest_path.display()))?;
        extra.insert(
            PathBuf::from("Cargo.toml"),
            forbid_unsafe(&manifest)?.into_bytes(),
        );
        scratch::mirror_with(&chapter.dir, &pristine, &extra)?;
        pristines.push(pristine);
    }
    let names: Vec<String> = chapters
        .iter()
        .map(|c| format!("{}-official", c.name))
        .collect();
    let sources: Vec<PathBuf> = chapters.iter().map(|c| c.dir.join("src")).collect();
    let members: Vec<scratch::Member<'_>> = (0..chapters.len())
        .map(|i| scratch::Member {
            member: &names[i],
            crate_src: &pristines[i],
            src_overlay: &sources[i],
        })
        .collect();
    let workspace = ctx.grade_dir.join("official-tests");
    let scratch = scratch::prepare_workspace(&ctx.template, &workspace, &members)?;
    let pairs: Vec<(String, String)> = names
        .iter()
        .zip(&scratch.crates)
        .map(|(member, (_, package))| (member.clone(), package.clone()))
        .collect();
    let mut built = runner::build_all_tests(&scratch.workspace, &pairs, &ctx.target_dir, None)?;
    let mut specs = Vec::new();
    for ((chapter, pristine), (_, package)) in chapters.iter().zip(pristines).zip(&pairs) {
        let hidden = hidden.get(&chapter.name);
        let binaries = match built.remove(package) {
            Some(runner::PackageBuild::Built(binaries)) => binaries,
            Some(runner::PackageBuild::Failed(failure)) => bail!(
                "the official tests of {}{} do not build with the chapter's stub:\n{}",
                chapter.name,
                if hidden.is_some() {
                    " (with the hidden tests)"
                } else {
                    ""
                },
                failure.errors.join("\n")
            ),
            _ => bail!(
                "cargo said nothing of the official tests of {}",
                chapter.name
            ),
        };
        specs.push(chapter_spec(chapter, hidden, pristine, &binaries)?);
    }
    Ok(specs)
}

/// A chapter's graded tests, from its `chapter.toml`, its hidden tests and the tests its pristine
/// executables hold.
fn chapter_spec(
    chapter: &Chapter,
    hidden: Option<&HiddenChapter>,
    pristine: PathBuf,
    binaries: &[runner::TestBinary],
) -> Result<ChapterSpec> {
    let cases = runner::list_tests(binaries)?;
    let is_hidden = |case: &TestCase| hidden.is_some_and(|h| h.is_hidden_target(&case.target));
    let mut tests = Vec::new();
    for (exercise, name, points) in chapter.info.tests() {
        tests.push(TestSpec {
            name: name.to_string(),
            points,
            exercise: Some(exercise.name.clone()),
            hidden: false,
            target: cases
                .iter()
                .find(|c| c.name == name && !is_hidden(c))
                .map(|c| c.target.clone()),
        });
    }
    if let Some(hidden) = hidden {
        let mut seen = HashSet::new();
        for case in cases.iter().filter(|c| is_hidden(c)) {
            if chapter.info.exercise_of(&case.name).is_some() || !seen.insert(case.name.clone()) {
                bail!(
                    "hidden test {} of {} has the name of another graded test: rename it",
                    case.name,
                    chapter.name
                );
            }
            tests.push(TestSpec {
                name: case.name.clone(),
                points: hidden.points_of(&case.name),
                exercise: None,
                hidden: true,
                target: Some(case.target.clone()),
            });
        }
        if let Some(missing) = hidden.points.keys().find(|t| !seen.contains(*t)) {
            bail!(
                "the hidden tests' points.toml of {} gives points to {missing}, which no hidden \
                 test file defines",
                chapter.name
            );
        }
    }
    Ok(ChapterSpec {
        chapter: chapter.clone(),
        pristine,
        tests,
    })
}

/// The official manifest with `unsafe_code = "forbid"` among its lints (which the official and
/// hidden tests must then obey too).
fn forbid_unsafe(manifest: &str) -> Result<String> {
    let mut table: toml::Table = manifest
        .parse()
        .context("the chapter's Cargo.toml is not valid TOML")?;
    if table
        .get("lints")
        .and_then(|l| l.get("workspace"))
        .is_some()
    {
        bail!(
            "the chapter's Cargo.toml takes its lints from the workspace: grading needs them \
             in the chapter's own [lints.rust] table"
        );
    }
    let rust = table
        .entry("lints")
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .and_then(|lints| {
            lints
                .entry("rust")
                .or_insert_with(|| toml::Table::new().into())
                .as_table_mut()
        })
        .context("the chapter's Cargo.toml has a [lints] that is not a table")?;
    rust.insert("unsafe_code".into(), "forbid".into());
    toml::to_string(&table).context("writing the pristine Cargo.toml")
}

/// A student's chapters, built in one workspace (kept, and locked, while they are tested).
struct StudentBuild {
    /// The workspace and its lock, let go once the student's last chapter is graded (a class of
    /// thousands would otherwise hold a lock file open per student).
    scratch: Mutex<Option<scratch::ScratchWorkspace>>,
    /// What each submitted chapter's build gave, by chapter name.
    chapters: BTreeMap<String, Compiled>,
}

/// What building one submitted chapter gave.
enum Compiled {
    /// Its test executables, in the crate folder the tests run in.
    Built {
        crate_dir: PathBuf,
        binaries: Vec<runner::TestBinary>,
    },
    /// Not compiled: its code reads files while it compiles (what does it).
    Refused(Vec<String>),
    /// It does not compile (the errors name the chapter's own paths).
    Failed(runner::BuildFailure),
    /// The grader could not build it (why).
    Error(String),
}

/// Builds all of a student's submitted chapters in one cargo run, with the build time limit;
/// chapters left unfinished at the limit are built again one by one, each with the limit of its
/// own, so that one chapter that makes the compiler hang costs only that chapter.
fn build_student(
    ctx: &Grader<'_>,
    specs: &[ChapterSpec],
    sub: &Submission,
    slug: &str,
) -> StudentBuild {
    let mut chapters = BTreeMap::new();
    let mut to_build = Vec::new();
    for spec in specs {
        let Some(submitted) = sub.chapters.get(spec.name()) else {
            continue;
        };
        let reads = submission::compile_time_reads(&submitted.src);
        if reads.is_empty() {
            to_build.push((spec, submitted, format!("{}-g-{slug}", spec.name())));
        } else {
            chapters.insert(spec.name().to_string(), Compiled::Refused(reads));
        }
    }
    if to_build.is_empty() {
        return StudentBuild {
            scratch: Mutex::new(None),
            chapters,
        };
    }
    let members: Vec<scratch::Member<'_>> = to_build
        .iter()
        .map(|(spec, submitted, member)| scratch::Member {
            member,
            crate_src: &spec.pristine,
            src_overlay: &submitted.src,
        })
        .collect();
    let workspace = ctx.grade_dir.join("students").join(slug);
    let built =
        scratch::prepare_workspace(&ctx.template, &workspace, &members).and_then(|scratch| {
            let pairs: Vec<(String, String)> = to_build
                .iter()
                .zip(&scratch.crates)
                .map(|((_, _, member), (_, package))| (member.clone(), package.clone()))
                .collect();
            let limit = Some(ctx.options.build_timeout);
            let mut built =
                runner::build_all_tests(&scratch.workspace, &pairs, &ctx.target_dir, limit)?;
            for pair in &pairs {
                if built.get(&pair.1) == Some(&runner::PackageBuild::Unfinished) {
                    let again = runner::build_all_tests(
                        &scratch.workspace,
                        std::slice::from_ref(pair),
                        &ctx.target_dir,
                        limit,
                    )?;
                    built.extend(again);
                }
            }
            Ok((scratch, built))
        });
    let (scratch, mut built) = match built {
        Ok(done) => done,
        Err(e) => {
            for (spec, _, _) in &to_build {
                let why = format!("{e:#}");
                chapters.insert(spec.name().to_string(), Compiled::Error(why));
            }
            return StudentBuild {
                scratch: Mutex::new(None),
                chapters,
            };
        }
    };
    for ((spec, _, member), (crate_dir, package)) in to_build.iter().zip(&scratch.crates) {
        let compiled = match built.remove(package) {
            Some(runner::PackageBuild::Built(binaries)) => Compiled::Built {
                crate_dir: crate_dir.clone(),
                binaries,
            },
            Some(runner::PackageBuild::Failed(mut failure)) => {
                // The learner knows their files as `<chapter>/src/...`, not by the scratch member.
                for error in &mut failure.errors {
                    *error = error.replace(&format!("{member}/"), &format!("{}/", spec.name()));
                }
                Compiled::Failed(failure)
            }
            Some(runner::PackageBuild::Unfinished) => {
                Compiled::Failed(runner::timed_out(Some(ctx.options.build_timeout)))
            }
            None => Compiled::Error("cargo said nothing of this chapter's build".to_string()),
        };
        chapters.insert(spec.name().to_string(), compiled);
    }
    StudentBuild {
        scratch: Mutex::new(Some(scratch)),
        chapters,
    }
}

/// Tests one submitted chapter as built; never fails (an error of its own is reported as "not
/// graded" with the reason).
fn grade_chapter(
    ctx: &Grader<'_>,
    spec: &ChapterSpec,
    submitted: &SubmittedChapter,
    compiled: Option<&Compiled>,
    on_test: &(dyn Fn() + Sync),
) -> ChapterResult {
    let start = Instant::now();
    let not_graded = |why: String| {
        ChapterResult::without_tests(
            spec,
            ChapterState::NotGraded(why.clone()),
            Status::NotGraded,
            &why,
        )
    };
    let mut result = match compiled {
        None => not_graded("could not be graded: it was not built".to_string()),
        Some(Compiled::Error(e)) => not_graded(format!("could not be graded: {e}")),
        Some(compiled) => match test_chapter(ctx, spec, compiled, on_test) {
            Ok(result) => result,
            Err(e) => not_graded(format!("could not be graded: {e:#}")),
        },
    };
    // Ticks the tests that did not run (a compile error, an error) off the progress bar.
    let ran = result
        .tests
        .iter()
        .filter(|t| !t.duration.is_zero())
        .count();
    for _ in ran..spec.tests.len() {
        on_test();
    }
    result.notes = submitted.notes.clone();
    result.review = submitted.review.clone();
    result.duration = start.elapsed();
    result
}

fn test_chapter(
    ctx: &Grader<'_>,
    spec: &ChapterSpec,
    compiled: &Compiled,
    on_test: &(dyn Fn() + Sync),
) -> Result<ChapterResult> {
    let (crate_dir, binaries) = match compiled {
        Compiled::Built {
            crate_dir,
            binaries,
        } => (crate_dir, binaries),
        Compiled::Refused(reads) => {
            let why = format!(
                "the chapter was not compiled: {} (grading compiles no code that reads files \
                 while it compiles)",
                reads[0]
            );
            let mut result = ChapterResult::without_tests(
                spec,
                ChapterState::DoesNotCompile(reads.clone()),
                Status::NotCompiled,
                &why,
            );
            for test in &mut result.tests {
                test.output = reads.join("\n");
            }
            return Ok(result);
        }
        Compiled::Failed(failure) => {
            let why = format!("the chapter does not compile: {}", failure.headline());
            let mut result = ChapterResult::without_tests(
                spec,
                ChapterState::DoesNotCompile(failure.errors.clone()),
                Status::NotCompiled,
                &why,
            );
            let errors = failure.errors.join("\n\n");
            for test in &mut result.tests {
                test.output = errors.clone();
            }
            return Ok(result);
        }
        Compiled::Error(e) => bail!("{e}"),
    };
    let member = crate_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let outcome = run_official(ctx, spec, crate_dir, binaries, on_test).map(|mut r| {
        // Panic locations name the scratch member: show the chapter's own path instead.
        let (from, to) = (format!("{member}/"), format!("{}/", spec.name()));
        for test in &mut r.tests {
            test.message = test.message.replace(&from, &to);
            test.output = test.output.replace(&from, &to);
        }
        r
    });
    if !ctx.options.keep_builds {
        for binary in binaries {
            let _ = std::fs::remove_file(&binary.path);
        }
    }
    outcome
}

fn run_official(
    ctx: &Grader<'_>,
    spec: &ChapterSpec,
    crate_dir: &Path,
    binaries: &[runner::TestBinary],
    on_test: &(dyn Fn() + Sync),
) -> Result<ChapterResult> {
    let cases = match runner::list_tests_in(binaries, ctx.sandbox.as_deref()) {
        Ok(cases) => cases,
        Err(e) => {
            // The executables are the official tests with the learner's code linked in: code of
            // theirs that runs before main (or breaks the process) can stop the listing.
            let why = format!("the test executable failed before running any test: {e:#}");
            return Ok(ChapterResult::without_tests(
                spec,
                ChapterState::Graded,
                Status::Failed,
                &why,
            ));
        }
    };
    let mut to_run = Vec::new();
    let mut slots = Vec::new();
    for test in &spec.tests {
        let found = cases
            .iter()
            .find(|c| c.name == test.name && Some(&c.target) == test.target.as_ref());
        slots.push(found.map(|case| {
            to_run.push(case.clone());
            to_run.len() - 1
        }));
    }
    let options = RunOptions {
        output_limit: OUTPUT_LIMIT,
        sandbox: ctx.sandbox.clone(),
        ..RunOptions::for_crate(crate_dir, ctx.options.timeout)
    }
    .with_memory_limit(ctx.options.memory_limit);
    let outcomes = runner::run_tests(&to_run, &options, ctx.options.jobs, &|_| on_test())?;
    let tests = spec
        .tests
        .iter()
        .zip(slots)
        .map(|(test, slot)| {
            let Some(outcome) = slot.map(|i| &outcomes[i]) else {
                return TestResult {
                    test: test.clone(),
                    status: Status::Failed,
                    score: 0,
                    message: "the test is missing from the built test executables".to_string(),
                    output: String::new(),
                    duration: Duration::ZERO,
                };
            };
            let status = match outcome.verdict {
                Verdict::Passed => Status::Passed,
                Verdict::Failed => Status::Failed,
                Verdict::TimedOut => Status::TimedOut,
            };
            let output = if status.passed() {
                String::new()
            } else {
                let mut text = outcome.stdout.trim_end().to_string();
                if !outcome.stderr.trim().is_empty() {
                    text.push_str("\n--- stderr ---\n");
                    text.push_str(outcome.stderr.trim_end());
                }
                text
            };
            TestResult {
                test: test.clone(),
                status,
                score: if status.passed() { test.points } else { 0 },
                message: outcome.message.clone(),
                output,
                duration: outcome.duration.max(Duration::from_nanos(1)),
            }
        })
        .collect();
    Ok(ChapterResult {
        chapter: spec.name().to_string(),
        title: spec.chapter.info.title.clone(),
        state: ChapterState::Graded,
        tests,
        notes: Vec::new(),
        review: Vec::new(),
        duration: Duration::ZERO,
    })
}

/// A lower-case, file-name-safe form of a student's name.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out.trim_matches('-').chars().take(40).collect();
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "student".to_string()
    } else {
        out.to_string()
    }
}

/// Students' names as file names, none used twice (without regard to case, for the file
/// systems that ignore it), none taking the names of the files beside them (`index.md`,
/// `summary.md`, `summary.json`).
#[derive(Debug)]
struct FileNames {
    used: HashSet<String>,
}

impl Default for FileNames {
    fn default() -> Self {
        FileNames {
            used: ["index", "summary"].map(String::from).into(),
        }
    }
}

impl FileNames {
    /// A file name for `student`, unused so far: the name with the characters file systems
    /// refuse (`/ \ : * ? " < > |`, control characters) as `_`, no leading `.` nor trailing
    /// `.` or space, at most 100 characters; then ` 2`, ` 3`... when taken.
    fn add(&mut self, student: &str) -> String {
        let safe: String = student
            .chars()
            .map(|c| {
                if c.is_control() || "/\\:*?\"<>|".contains(c) {
                    '_'
                } else {
                    c
                }
            })
            .take(100)
            .collect();
        let safe = safe.trim_start_matches('.').trim_end_matches(['.', ' ']);
        let name = if safe.is_empty() { "student" } else { safe };
        let mut candidate = name.to_string();
        let mut n = 2;
        while !self.used.insert(candidate.to_lowercase()) {
            candidate = format!("{name} {n}");
            n += 1;
        }
        candidate
    }
}

/// `name`, or `name<sep>2`, `name<sep>3`... whichever is not used yet.
fn unique(name: String, used: &mut HashSet<String>, sep: &str) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while !used.insert(candidate.clone()) {
        candidate = format!("{name}{sep}{n}");
        n += 1;
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lower_case_file_names() {
        assert_eq!(slug("Alice Smith (2)"), "alice-smith-2");
        assert_eq!(slug("../.."), "student");
        assert_eq!(slug("bob_42"), "bob-42");
    }

    #[test]
    fn file_names_keep_the_name_its_letters_and_never_collide() {
        let mut names = FileNames::default();
        assert_eq!(names.add("a_reference"), "a_reference");
        assert_eq!(names.add("Émile"), "Émile");
        assert_eq!(names.add("李雷"), "李雷");
        assert_eq!(names.add("alice_1"), "alice_1");
        assert_eq!(names.add("alice-1"), "alice-1");
        assert_eq!(names.add("Alice_1"), "Alice_1 2");
        assert_eq!(names.add("../etc/passwd"), "_etc_passwd");
        assert_eq!(names.add("a:b*c?"), "a_b_c_");
        assert_eq!(names.add("..."), "student");
        assert_eq!(names.add("index"), "index 2");
        assert_eq!(names.add("Summary"), "Summary 2");
    }

    #[test]
    fn points_are_chapter_equals_points_separated_by_commas() {
        assert_eq!(
            parse_points("ch01=10, 3=20").unwrap(),
            Points(vec![("ch01".into(), 10), ("3".into(), 20)])
        );
        for (text, needle) in [
            ("ch01", "`ch01` is not CHAPTER=POINTS"),
            ("ch01=ten", "ten is not a whole number of points"),
            ("ch01=0", "a chapter is worth 1 point or more"),
            (",", "no points given"),
        ] {
            let error = parse_points(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn duplicate_names_get_a_number() {
        let mut used = HashSet::new();
        assert_eq!(unique("a".into(), &mut used, "-"), "a");
        assert_eq!(unique("a".into(), &mut used, "-"), "a-2");
        assert_eq!(unique("a".into(), &mut used, "-"), "a-3");
    }
}
