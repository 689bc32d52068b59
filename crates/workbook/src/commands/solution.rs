//! `workbook solution <chapter>`: the reference solution, once the chapter's tests pass (per the
//! last check, else a fresh one); `--force` shows it anyway and says so. The student edition has
//! none: it says they come from the instructor.

use crate::commands::check::{self, CheckOptions};
use crate::commands::reset::read_tree;
use crate::course::app_state::Repo;
use crate::course::learner;
use crate::course::progress::StateFile;
use anyhow::{Result, bail};
use clap::Args;
use std::path::Path;
use std::process::ExitCode;

/// Flags of `workbook solution`.
#[derive(Debug, Args)]
pub struct SolutionArgs {
    /// The chapter, by name or unique prefix (`ch01`).
    #[arg(value_name = "CHAPTER")]
    pub chapter: String,
    /// Show it even though the chapter's tests do not pass yet.
    #[arg(long)]
    pub force: bool,
    /// How the chapter's tests run, if a check is needed.
    #[command(flatten)]
    pub tests: crate::commands::check::TestRunArgs,
}

/// `workbook solution`.
pub fn run(root: Option<&Path>, args: &SolutionArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let state = StateFile::of(&repo);
    let progress = state.load()?;
    let chapter = learner::choose_chapter(&repo, Some(&args.chapter), &progress)?;
    let name = &chapter.name;
    let cmd = learner::command_prefix(&repo);
    if repo.is_student_edition() {
        println!(
            "This is the student edition of the workbook: the reference solutions are not in it. \
             They come from your instructor."
        );
        println!("  What fails and why: {cmd} check {name}");
        println!("  A hint:             {cmd} hint {name}");
        return Ok(ExitCode::FAILURE);
    }
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
                        r.tests.get(*t).is_some_and(|t| {
                            t.status == crate::course::progress::TestStatus::Passed
                        })
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
        let text = without_anchors(&String::from_utf8_lossy(bytes));
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
        println!("Why it is right: {}", page_address(name));
        println!("  (the book as `{cmd} start` or `{cmd} book --serve` serves it)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The address of a chapter's solution page in the book served on this machine.
pub fn page_address(chapter: &str) -> String {
    format!(
        "http://127.0.0.1:{}/{chapter}{}.html",
        crate::book::serve::DEFAULT_PORT,
        crate::book::pages::SOLUTION_SUFFIX
    )
}

/// `text` without the lines that only mark where the book's includes start and end
/// (`// ANCHOR: name`, `// ANCHOR_END: name`).
pub fn without_anchors(text: &str) -> String {
    text.split_inclusive('\n')
        .filter(|line| {
            let code = line.trim_start();
            let Some(comment) = code.strip_prefix("//") else {
                return true;
            };
            let comment = comment.trim_start();
            !(comment.starts_with("ANCHOR:") || comment.starts_with("ANCHOR_END:"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_lines_are_removed_and_the_rest_is_kept() {
        let text =
            "// ANCHOR: f\npub fn f() {}\n    // ANCHOR_END: f\n// an ANCHOR: in prose\nlast";
        assert_eq!(
            without_anchors(text),
            "pub fn f() {}\n// an ANCHOR: in prose\nlast"
        );
    }

    #[test]
    fn the_page_address_is_the_served_book_s() {
        assert_eq!(
            page_address("ch01-availability"),
            "http://127.0.0.1:3000/ch01-availability-solution.html"
        );
    }
}
