//! `workbook solution <chapter>`: the reference solution, once the chapter's tests pass (per the
//! last check, else a fresh one); `--force` shows it anyway and says so.

use crate::app_state::Repo;
use crate::check::{self, CheckOptions};
use crate::cli::SolutionArgs;
use crate::learner;
use crate::progress::StateFile;
use crate::reset::read_tree;
use anyhow::{Result, bail};
use std::path::Path;
use std::process::ExitCode;

/// `workbook solution`.
pub fn run(root: Option<&Path>, args: &SolutionArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let state = StateFile::of(&repo);
    let progress = state.load()?;
    let chapter = learner::choose_chapter(&repo, Some(&args.chapter), &progress)?;
    let name = &chapter.name;
    let cmd = learner::command_prefix(&repo);
    let record = progress.check(name);
    let passed = learner::chapter_done(&chapter, record);
    let forced = if passed {
        false
    } else if args.force {
        true
    } else {
        eprintln!("{name} has not passed a check yet: checking it now...");
        let options = CheckOptions::from_flags(&args.tests);
        let check = check::check_chapter(&repo, &chapter, &options)?;
        if !check.passed() {
            let statuses = learner::chapter_status(&chapter, Some(&check.record));
            let done = statuses
                .iter()
                .filter(|s| s.state == learner::State::Done)
                .count();
            println!(
                "The solution of {name} is shown once its tests pass; {done} of {} exercises pass \
                 now.",
                statuses.len()
            );
            println!("  What fails and why: {cmd} check {name}");
            println!("  A hint:             {cmd} hint {name}");
            println!("  See it anyway:      {cmd} solution {name} --force");
            return Ok(ExitCode::FAILURE);
        }
        false
    };
    let src = chapter.solution_dir.join("src");
    let files = read_tree(&src)?;
    if files.is_empty() {
        bail!(
            "there is no reference solution for {name} ({} is missing or empty)",
            learner::shown(&repo, &src)
        );
    }
    if forced {
        let why = match record {
            None => "it has not been checked yet".to_string(),
            Some(r) if r.build_error.is_some() => {
                "it did not compile at its last check".to_string()
            }
            Some(r) => {
                let passed = chapter
                    .info
                    .tests()
                    .filter(|(_, t, _)| {
                        r.tests
                            .get(*t)
                            .is_some_and(|t| t.status == crate::progress::TestStatus::Passed)
                    })
                    .count();
                format!(
                    "{passed} of {} tests passed at its last check",
                    chapter.info.tests().count()
                )
            }
        };
        println!(
            "FORCED: {name} has not passed ({why}). You asked with --force, so here is the \
             reference solution anyway.\n"
        );
    } else {
        println!("{name} passes. Here is the reference solution to compare with yours.\n");
    }
    for (rel, bytes) in &files {
        println!("==> {} <==", learner::shown(&repo, &src.join(rel)));
        let text = String::from_utf8_lossy(bytes);
        print!("{text}");
        if !text.ends_with('\n') {
            println!();
        }
        println!();
    }
    let page = repo
        .book_dir()
        .join("src")
        .join(format!("{name}-solution.md"));
    if page.is_file() {
        println!(
            "Why it is right: the book's page \"{name}-solution\" ({}).",
            learner::shown(&repo, &page)
        );
    }
    Ok(ExitCode::SUCCESS)
}
