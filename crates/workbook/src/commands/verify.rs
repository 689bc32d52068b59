//! `workbook verify`: every test fails on the stubs, passes on the solutions, and is listed in
//! `chapter.toml` under one exercise; every chapter follows the workbook's rules.

use crate::course::app_state::{Chapter, Repo};
use crate::run::runner::{self, BuildFailure, RunOptions, TestCase, TestOutcome, Verdict};
use crate::run::scratch::{self, WorkspaceTemplate};
use anyhow::Result;
use clap::Args;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Flags of `workbook verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Chapters to verify, by name or unique prefix (`ch01`); default: all.
    #[arg(value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Test processes to run at once (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is killed and counts as timed out.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
}

/// How `verify` runs the tests.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Test processes at once.
    pub jobs: usize,
    /// Time limit of one test.
    pub timeout: Duration,
}

/// Which `src/` a run lays over the exercise crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The stub's own `src/`: every test must fail.
    Stub,
    /// `solutions/<chapter>/src`: every test must pass.
    Solution,
}

impl Phase {
    /// `stub` or `solution`.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Stub => "stub",
            Phase::Solution => "solution",
        }
    }
}

/// One phase's build and test results.
#[derive(Debug)]
pub struct PhaseRun {
    /// How long the build took.
    pub build_time: Duration,
    /// How long the tests took together.
    pub test_time: Duration,
    /// The outcomes, or why the build failed.
    pub result: Result<Vec<TestOutcome>, BuildFailure>,
}

impl PhaseRun {
    fn outcome(&self, test: &str) -> Option<&TestOutcome> {
        self.result
            .as_ref()
            .ok()
            .and_then(|o| o.iter().find(|o| o.case.name == test))
    }
}

/// One breach of the rules, with the test it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The chapter.
    pub chapter: String,
    /// The test concerned, if it is about one test.
    pub test: Option<String>,
    /// What is wrong, as a sentence.
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.test {
            Some(test) => write!(f, "{}: test {test}: {}", self.chapter, self.what),
            None => write!(f, "{}: {}", self.chapter, self.what),
        }
    }
}

/// What `verify` found in one chapter.
#[derive(Debug)]
pub struct ChapterReport {
    /// The chapter's name.
    pub name: String,
    /// The loaded chapter, when its `chapter.toml` could be read.
    pub chapter: Option<Chapter>,
    /// The stub's run, when it got that far.
    pub stub: Option<PhaseRun>,
    /// The solution's run, when it got that far.
    pub solution: Option<PhaseRun>,
    /// The tests the executables hold, in their order.
    pub found: Vec<TestCase>,
    /// Everything wrong, in the order found.
    pub problems: Vec<Problem>,
}

/// Verifies the named chapters (all when empty) and prints a table per chapter on stdout and
/// progress on stderr. Returns the reports; the caller decides the exit status.
pub fn verify(
    repo: &Repo,
    wanted: &[String],
    options: &VerifyOptions,
) -> Result<Vec<ChapterReport>> {
    let names = repo.select_chapters(wanted)?;
    let template = WorkspaceTemplate::from_repo_root(&repo.root)?;
    let mut reports = Vec::new();
    for (i, name) in names.iter().enumerate() {
        eprintln!("[{}/{}] {name}", i + 1, names.len());
        let report = verify_chapter(repo, &template, name, options)?;
        print!("{}", render(&report));
        reports.push(report);
    }
    Ok(reports)
}

/// Verifies one chapter.
pub fn verify_chapter(
    repo: &Repo,
    template: &WorkspaceTemplate,
    name: &str,
    options: &VerifyOptions,
) -> Result<ChapterReport> {
    let mut report = ChapterReport {
        name: name.to_string(),
        chapter: None,
        stub: None,
        solution: None,
        found: Vec::new(),
        problems: Vec::new(),
    };
    let problem = |test: Option<&str>, what: String| Problem {
        chapter: name.to_string(),
        test: test.map(str::to_string),
        what,
    };
    let chapter = match repo.chapter(name) {
        Ok(chapter) => chapter,
        Err(e) => {
            report.problems.push(problem(None, format!("{e:#}")));
            return Ok(report);
        }
    };
    for what in chapter.info.problems() {
        report
            .problems
            .push(problem(None, format!("chapter.toml: {what}")));
    }
    match scratch::package_name(&chapter.dir) {
        Ok(package) if package == name => {}
        Ok(package) => report.problems.push(problem(
            None,
            format!("the crate is named {package:?}; it must be named after its directory"),
        )),
        Err(e) => {
            report.problems.push(problem(None, format!("{e:#}")));
            report.chapter = Some(chapter);
            return Ok(report);
        }
    }

    let work = repo.work_dir();
    let target_dir = work.join("target");
    let solution_src = chapter.solution_dir.join("src");
    for phase in [Phase::Stub, Phase::Solution] {
        let src = match phase {
            Phase::Stub => chapter.dir.join("src"),
            Phase::Solution => solution_src.clone(),
        };
        if !src.is_dir() {
            report.problems.push(problem(
                None,
                format!(
                    "there is no {} ({} is missing)",
                    phase.label(),
                    src.display()
                ),
            ));
            continue;
        }
        let workspace = work.join("scratch").join(name).join(phase.label());
        let run = run_phase(
            template,
            &chapter,
            phase,
            &src,
            &workspace,
            &target_dir,
            options,
        )?;
        match phase {
            Phase::Stub => report.stub = Some(run),
            Phase::Solution => report.solution = Some(run),
        }
    }

    // The tests the crate holds: the stub's and the solution's share `tests/`.
    let built = [&report.stub, &report.solution]
        .into_iter()
        .flatten()
        .find_map(|run| run.result.as_ref().ok());
    if let Some(outcomes) = built {
        report.found = outcomes.iter().map(|o| o.case.clone()).collect();
    }
    for (phase, run) in [
        (Phase::Stub, &report.stub),
        (Phase::Solution, &report.solution),
    ] {
        if let Some(PhaseRun {
            result: Err(failure),
            ..
        }) = run
        {
            report.problems.push(problem(
                None,
                format!(
                    "the {} does not compile: {}",
                    phase.label(),
                    failure.headline()
                ),
            ));
        }
    }
    if built.is_some() {
        check_tests(&mut report, &chapter, &problem);
    }
    report.chapter = Some(chapter);
    Ok(report)
}

fn run_phase(
    template: &WorkspaceTemplate,
    chapter: &Chapter,
    phase: Phase,
    src: &Path,
    workspace: &Path,
    target_dir: &Path,
    options: &VerifyOptions,
) -> Result<PhaseRun> {
    let label = format!("  {} {}", chapter.name, phase.label());
    eprintln!("{label}: building the tests");
    let member = format!("{}-{}", chapter.name, phase.label());
    let scratch = scratch::prepare(template, workspace, &member, &chapter.dir, src)?;
    let start = Instant::now();
    let built = runner::build_tests(&scratch.workspace, &scratch.package, target_dir)?;
    let build_time = start.elapsed();
    let binaries = match built {
        Ok(binaries) => binaries,
        Err(failure) => {
            eprintln!("{label}: the build failed");
            return Ok(PhaseRun {
                build_time,
                test_time: Duration::ZERO,
                result: Err(failure),
            });
        }
    };
    let cases = runner::list_tests(&binaries)?;
    eprintln!(
        "{label}: running {} tests, {} at a time",
        cases.len(),
        options.jobs.max(1).min(cases.len().max(1))
    );
    let run_options = RunOptions::for_crate(&scratch.crate_dir, options.timeout);
    let start = Instant::now();
    let outcomes = runner::run_tests(&cases, &run_options, options.jobs, &|o| {
        eprintln!(
            "{label}:   {:<7} {} ({:.2} s)",
            verdict_word(o.verdict),
            o.case.name,
            o.duration.as_secs_f64()
        );
    })?;
    Ok(PhaseRun {
        build_time,
        test_time: start.elapsed(),
        result: Ok(outcomes),
    })
}

fn check_tests(
    report: &mut ChapterReport,
    chapter: &Chapter,
    problem: &dyn Fn(Option<&str>, String) -> Problem,
) {
    let mut problems = Vec::new();
    if report.found.is_empty() {
        problems.push(problem(None, "no tests found in tests/".to_string()));
    }
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for case in &report.found {
        if let Some(first) = seen.insert(&case.name, &case.target) {
            problems.push(problem(
                Some(&case.name),
                format!(
                    "defined in both tests/{first}.rs and tests/{}.rs; names must be unique",
                    case.target
                ),
            ));
        }
    }
    let listed: HashSet<&str> = chapter.info.tests().map(|(_, t, _)| t).collect();
    for (exercise, test, _) in chapter.info.tests() {
        if !seen.contains_key(test) {
            problems.push(problem(
                Some(test),
                format!(
                    "listed in chapter.toml (exercise {}) but no such test exists",
                    exercise.name
                ),
            ));
        }
    }
    for case in &report.found {
        let test = case.name.as_str();
        if !listed.contains(test) {
            problems.push(problem(
                Some(test),
                "not listed in chapter.toml under any exercise".to_string(),
            ));
        }
        if let Some(o) = report.stub.as_ref().and_then(|r| r.outcome(test)) {
            match o.verdict {
                Verdict::Failed => {}
                Verdict::Passed => problems.push(problem(
                    Some(test),
                    "passes on the stub (it must fail until the exercise is solved)".to_string(),
                )),
                Verdict::TimedOut => problems.push(problem(
                    Some(test),
                    format!(
                        "on the stub: {} (a stub test must fail promptly, e.g. on todo!())",
                        o.message
                    ),
                )),
            }
        }
        if let Some(o) = report.solution.as_ref().and_then(|r| r.outcome(test))
            && o.verdict != Verdict::Passed
        {
            problems.push(problem(
                Some(test),
                format!("fails on the solution: {}", o.message),
            ));
        }
    }
    report.problems.extend(problems);
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Passed => "passed",
        Verdict::Failed => "failed",
        Verdict::TimedOut => "timeout",
    }
}

/// The chapter's table: one row per test, with its exercise, points and the two verdicts.
pub fn render(report: &ChapterReport) -> String {
    let mut out = String::new();
    let title = report
        .chapter
        .as_ref()
        .map(|c| c.info.title.as_str())
        .unwrap_or("(no usable chapter.toml)");
    let _ = write!(out, "\n{} — {title}", report.name);
    if let Some(chapter) = &report.chapter {
        let _ = write!(
            out,
            " ({} exercises, {} tests, {} points)",
            chapter.info.exercises.len(),
            chapter.info.tests().count(),
            chapter.info.total_points()
        );
    }
    out.push('\n');

    // Rows: chapter.toml's tests in its order, then tests it does not list.
    let mut rows: Vec<[String; 5]> = Vec::new();
    let mut last_exercise = String::new();
    let cell = |run: &Option<PhaseRun>, test: &str, phase: Phase| -> String {
        let Some(run) = run else {
            return "—".into();
        };
        let Ok(_) = &run.result else {
            return "no build".into();
        };
        match (run.outcome(test).map(|o| o.verdict), phase) {
            (None, _) => "—".into(),
            (Some(Verdict::Failed), Phase::Stub) => "fails".into(),
            (Some(Verdict::Passed), Phase::Solution) => "passes".into(),
            (Some(Verdict::Passed), Phase::Stub) => "PASSES ✗".into(),
            (Some(Verdict::Failed), Phase::Solution) => "FAILS ✗".into(),
            (Some(Verdict::TimedOut), _) => "TIMEOUT ✗".into(),
        }
    };
    let mut push_row = |exercise: &str, test: &str, points: String| {
        let shown = if exercise == last_exercise {
            String::new()
        } else {
            exercise.to_string()
        };
        last_exercise = exercise.to_string();
        rows.push([
            shown,
            test.to_string(),
            points,
            cell(&report.stub, test, Phase::Stub),
            cell(&report.solution, test, Phase::Solution),
        ]);
    };
    if let Some(chapter) = &report.chapter {
        for (exercise, test, points) in chapter.info.tests() {
            push_row(&exercise.name, test, points.to_string());
        }
        for case in &report.found {
            if chapter.info.exercise_of(&case.name).is_none() {
                push_row("(not in chapter.toml)", &case.name, "—".into());
            }
        }
    }
    if !rows.is_empty() {
        let header = ["exercise", "test", "pts", "stub", "solution"].map(String::from);
        let mut widths = [0usize; 5];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let _ = writeln!(
                out,
                "  {:<w0$}  {:<w1$}  {:>w2$}  {:<w3$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3],
            );
        }
    }
    let timing = |run: &Option<PhaseRun>, phase: Phase| {
        run.as_ref().map(|r| {
            format!(
                "{}: built in {:.1} s, tests ran in {:.1} s",
                phase.label(),
                r.build_time.as_secs_f64(),
                r.test_time.as_secs_f64()
            )
        })
    };
    let timings: Vec<String> = [
        timing(&report.stub, Phase::Stub),
        timing(&report.solution, Phase::Solution),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !timings.is_empty() {
        let _ = writeln!(out, "  {}", timings.join("; "));
    }
    for (phase, run) in [
        (Phase::Stub, &report.stub),
        (Phase::Solution, &report.solution),
    ] {
        if let Some(PhaseRun {
            result: Err(failure),
            ..
        }) = run
        {
            let _ = writeln!(out, "  the {} does not compile:", phase.label());
            for error in &failure.errors {
                for line in error.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
    if report.problems.is_empty() {
        let _ = writeln!(out, "  ok");
    } else {
        let _ = writeln!(out, "  {} problem(s):", report.problems.len());
        for p in &report.problems {
            let text = match &p.test {
                Some(test) => format!("{test}: {}", p.what),
                None => p.what.clone(),
            };
            let _ = writeln!(out, "    ✗ {}", indent_rest(&text, "      "));
        }
    }
    out
}

/// The closing summary: how many chapters passed, and every problem, one per line.
pub fn summary(reports: &[ChapterReport]) -> String {
    let ok = reports.iter().filter(|r| r.problems.is_empty()).count();
    let problems: Vec<&Problem> = reports.iter().flat_map(|r| &r.problems).collect();
    let mut out = String::new();
    if problems.is_empty() {
        let _ = writeln!(
            out,
            "\nverify: all {} chapter(s) ok: every test fails on the stub and passes on the solution",
            reports.len()
        );
    } else {
        let _ = writeln!(
            out,
            "\nverify: {ok} of {} chapter(s) ok; {} problem(s):",
            reports.len(),
            problems.len()
        );
        for p in problems {
            let _ = writeln!(out, "  {}", indent_rest(&p.to_string(), "    "));
        }
    }
    out
}

/// `text` with every line after the first indented by `indent` (multi-line messages in lists).
fn indent_rest(text: &str, indent: &str) -> String {
    text.trim_end().replace('\n', &format!("\n{indent}"))
}
