//! `workbook list`: every chapter and exercise with its state (from the last checks, or fresh
//! ones with `--refresh`), a progress bar, and the exact command to run next.

use crate::commands::check::{self, CheckOptions};
use crate::course::app_state::{Chapter, Repo};
use crate::course::learner::{self, State};
use crate::course::progress::{self, Progress, StateFile};
use anyhow::Result;
use clap::Args;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// Flags of `workbook list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Check every chapter now, instead of showing the results of the last checks.
    #[arg(long)]
    pub refresh: bool,
    /// How the chapter's tests run.
    #[command(flatten)]
    pub tests: crate::commands::check::TestRunArgs,
}

/// `workbook list`.
pub fn run(root: Option<&Path>, args: &ListArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let chapters = learner::load_chapters(&repo)?;
    if args.refresh {
        let mut options = CheckOptions::from_flags(&args.tests);
        options.progress = false;
        for (i, chapter) in chapters.iter().enumerate() {
            eprintln!("[{}/{}] checking {}", i + 1, chapters.len(), chapter.name);
            if let Err(e) = check::check_chapter(&repo, chapter, &options) {
                eprintln!("warning: {} could not be checked: {e:#}", chapter.name);
            }
        }
    }
    let progress = StateFile::of(&repo).load()?;
    print!("{}", render(&repo, &chapters, &progress));
    Ok(ExitCode::SUCCESS)
}

/// The whole listing: bar, chapters with their exercises, and what to do next.
pub fn render(repo: &Repo, chapters: &[Chapter], progress: &Progress) -> String {
    let mut out = String::new();
    let (done, total) = totals(chapters, progress);
    let _ = writeln!(out, "GPU Memory Workbook: your progress");
    let _ = writeln!(out, "{}", learner::progress_bar(done, total));
    let name_width = chapters
        .iter()
        .flat_map(|c| &c.info.exercises)
        .map(|e| e.name.chars().count())
        .max()
        .unwrap_or(0);
    for chapter in chapters {
        out.push('\n');
        let _ = writeln!(
            out,
            "{} — {}  ({})",
            chapter.name,
            chapter.info.title,
            chapter_note(chapter, progress)
        );
        let record = progress.check(&chapter.name);
        for status in learner::chapter_status(chapter, record) {
            let tests = match status.state {
                State::Failing => format!("  ({}/{} tests pass)", status.passed, status.total),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  {:<13}  {:<name_width$}  {}{tests}",
                status.state.label(),
                status.exercise.name,
                status.exercise.title
            );
        }
    }
    out.push('\n');
    for line in learner::next_steps(repo, chapters, progress) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Exercises done and exercises in all, over every chapter.
pub fn totals(chapters: &[Chapter], progress: &Progress) -> (usize, usize) {
    let mut done = 0;
    let mut total = 0;
    for chapter in chapters {
        for status in learner::chapter_status(chapter, progress.check(&chapter.name)) {
            total += 1;
            if status.state == State::Done {
                done += 1;
            }
        }
    }
    (done, total)
}

/// `checked 5m ago`, `not checked yet`, `does not compile: ...`, and whether `src/` changed since.
fn chapter_note(chapter: &Chapter, progress: &Progress) -> String {
    let Some(record) = progress.check(&chapter.name) else {
        return "not checked yet".to_string();
    };
    let mut note = format!("checked {}", progress::ago(record.at));
    if let Some(error) = &record.build_error {
        let headline = error.lines().next().unwrap_or("");
        let location = error
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("--> "))
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        let _ = write!(note, "; does not compile: {headline}{location}");
        match record.compiled_at.filter(|_| !record.tests.is_empty()) {
            Some(at) => {
                let _ = write!(
                    note,
                    "; exercises as at the last check that compiled, {}",
                    progress::ago(at)
                );
            }
            None => note.push_str("; it has not compiled at any check yet"),
        }
    } else if learner::chapter_done(chapter, Some(record)) {
        note.push_str("; all tests pass");
    }
    let changed = learner::src_digest(&chapter.dir.join("src"))
        .map(|d| d != record.src_digest)
        .unwrap_or(false);
    if changed {
        note.push_str("; src/ changed since: check again");
    }
    note
}
