//! `workbook hint <chapter> [exercise]`: the next hint of an exercise from `chapter.toml`, gentle
//! first and more explicit on each call; the state file remembers how many were shown.

use crate::course::app_state::{Chapter, Repo};
use crate::course::chapter::ExerciseInfo;
use crate::course::learner::{self, State};
use crate::course::progress::StateFile;
use anyhow::{Result, bail};
use clap::Args;
use std::path::Path;
use std::process::ExitCode;

/// Flags of `workbook hint`.
#[derive(Debug, Args)]
pub struct HintArgs {
    /// The chapter, by name or unique prefix (`ch01`).
    #[arg(value_name = "CHAPTER")]
    pub chapter: String,
    /// The exercise, by name, unique prefix or number; default: the first one not done.
    #[arg(value_name = "EXERCISE")]
    pub exercise: Option<String>,
    /// Show every hint given so far instead of the next one.
    #[arg(long)]
    pub all: bool,
}

/// `workbook hint`.
pub fn run(root: Option<&Path>, args: &HintArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let state = StateFile::of(&repo);
    let progress = state.load()?;
    let chapter = learner::choose_chapter(&repo, Some(&args.chapter), &progress)?;
    let cmd = learner::command_prefix(&repo);
    if let Some(record) = progress.check(&chapter.name)
        && let Some(error) = &record.build_error
    {
        println!(
            "Note: {} did not compile at its last check ({}); `{cmd} check {}` shows the error.",
            chapter.name,
            error.lines().next().unwrap_or("a build error"),
            chapter.name
        );
        if let Some(kept) = learner::kept_progress(&chapter, record) {
            println!("{kept}");
        }
        println!();
    }
    let exercise = match &args.exercise {
        Some(wanted) => find_exercise(&chapter, wanted)?,
        None => {
            let record = progress.check(&chapter.name);
            match learner::chapter_status(&chapter, record)
                .into_iter()
                .find(|s| s.state != State::Done)
            {
                Some(status) => status.exercise,
                None => {
                    println!(
                        "Every exercise of {} passes: no hint needed. To read an exercise's hints \
                         anyway: {cmd} hint {} <exercise> (one of: {})",
                        chapter.name,
                        chapter.name,
                        names(&chapter)
                    );
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
    };
    let hints: Vec<&str> = exercise
        .hints
        .iter()
        .map(|h| h.trim())
        .filter(|h| !h.is_empty())
        .collect();
    println!("{} › {} — {}", chapter.name, exercise.name, exercise.title);
    if hints.is_empty() {
        println!("This exercise has no hints.");
        return Ok(ExitCode::SUCCESS);
    }
    let shown = progress.hints_shown(&chapter.name, &exercise.name);
    let upto = if args.all {
        shown.max(1)
    } else {
        (shown + 1).min(hints.len())
    }
    .min(hints.len());
    if upto > shown {
        state.update(|p| {
            let seen = p
                .chapter_mut(&chapter.name)
                .hints_shown
                .entry(exercise.name.clone())
                .or_default();
            *seen = (*seen).max(upto);
        })?;
    }
    let first = if args.all { 0 } else { upto - 1 };
    for (i, hint) in hints.iter().enumerate().take(upto).skip(first) {
        println!();
        println!("Hint {} of {}:", i + 1, hints.len());
        for line in hint.lines() {
            println!("  {line}");
        }
    }
    println!();
    if upto < hints.len() {
        println!(
            "Still stuck? The next hint is more explicit: {cmd} hint {} {}",
            chapter.name, exercise.name
        );
    } else {
        let passes = learner::chapter_done(&chapter, progress.check(&chapter.name));
        let when = if passes {
            "Your chapter passes:".to_string()
        } else {
            format!("Once {} passes,", chapter.name)
        };
        println!(
            "That was the last hint. {when} `{cmd} solution {}` shows the reference solution.",
            chapter.name
        );
    }
    if shown > 0 && !args.all && upto > 1 {
        println!(
            "All the hints so far: {cmd} hint {} {} --all",
            chapter.name, exercise.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The exercise named `wanted`: its name, a unique prefix of it, or its number (from 1).
pub fn find_exercise<'a>(chapter: &'a Chapter, wanted: &str) -> Result<&'a ExerciseInfo> {
    let exercises = &chapter.info.exercises;
    if let Some(ex) = exercises.iter().find(|e| e.name == wanted) {
        return Ok(ex);
    }
    if let Ok(n) = wanted.parse::<usize>()
        && let Some(ex) = n.checked_sub(1).and_then(|i| exercises.get(i))
    {
        return Ok(ex);
    }
    let matches: Vec<&ExerciseInfo> = exercises
        .iter()
        .filter(|e| e.name.starts_with(wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => bail!(
            "{} has no exercise {wanted:?}; its exercises are: {}",
            chapter.name,
            names(chapter)
        ),
        many => bail!(
            "{wanted:?} could be any of {}; give more of the name",
            many.iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn names(chapter: &Chapter) -> String {
    chapter
        .info
        .exercises
        .iter()
        .map(|e| e.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
