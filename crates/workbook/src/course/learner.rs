//! What the learner's commands share: the state of an exercise from the last check, the digest
//! that says whether `src/` changed since, the progress bar, what to do next, and how to spell a
//! command so that it can be pasted.

use crate::course::app_state::{Chapter, Repo};
use crate::course::chapter::ExerciseInfo;
use crate::course::progress::{CheckRecord, Progress, TestStatus};
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The message of `todo!()`: a test that fails with it meets code nobody has written yet.
pub const TODO_MESSAGE: &str = "not yet implemented";

/// Where an exercise stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Never checked, or every test still stops at a `todo!()`.
    NotStarted,
    /// Some test fails (or the chapter does not compile).
    Failing,
    /// Every test of the exercise passed at the last check.
    Done,
}

impl State {
    /// A mark and a word for tables: `✓ done`, `✗ failing`, `· not started`.
    pub fn label(self) -> &'static str {
        match self {
            State::NotStarted => "· not started",
            State::Failing => "✗ failing",
            State::Done => "✓ done",
        }
    }
}

/// An exercise with its state and test counts.
#[derive(Debug, Clone)]
pub struct ExerciseStatus<'a> {
    /// The exercise, from `chapter.toml`.
    pub exercise: &'a ExerciseInfo,
    /// Its state.
    pub state: State,
    /// Its tests that passed at the last check.
    pub passed: usize,
    /// Its tests.
    pub total: usize,
}

/// The state of `exercise` from the chapter's last check.
pub fn exercise_status<'a>(
    exercise: &'a ExerciseInfo,
    record: Option<&CheckRecord>,
) -> ExerciseStatus<'a> {
    let total = exercise.tests.len();
    let Some(record) = record else {
        return ExerciseStatus {
            exercise,
            state: State::NotStarted,
            passed: 0,
            total,
        };
    };
    let results: Vec<_> = exercise.tests.keys().map(|t| record.tests.get(t)).collect();
    let passed = results
        .iter()
        .filter(|r| r.is_some_and(|r| r.status == TestStatus::Passed))
        .count();
    let untouched = results.iter().all(|r| {
        r.is_none_or(|r| r.status != TestStatus::Passed && r.message.contains(TODO_MESSAGE))
    });
    let state = if untouched {
        State::NotStarted
    } else if passed == total && total > 0 {
        State::Done
    } else {
        State::Failing
    };
    // When the last check did not compile, `record.tests` are those of the last check that did.
    ExerciseStatus {
        exercise,
        state,
        passed,
        total,
    }
}

/// What a learner is told when the chapter's last check did not compile: the exercises keep
/// their states from the last check that compiled. `None` when the last check compiled.
pub fn kept_progress(chapter: &Chapter, record: &CheckRecord) -> Option<String> {
    record.build_error.as_ref()?;
    let Some(at) = record.compiled_at.filter(|_| !record.tests.is_empty()) else {
        return Some(format!(
            "{} has not compiled at any check yet, so no exercise is done.",
            chapter.name
        ));
    };
    let statuses = chapter_status(chapter, Some(record));
    let done = statuses.iter().filter(|s| s.state == State::Done).count();
    Some(format!(
        "Your progress is kept: {done} of {} exercises of {} were done at the last check that \
         compiled ({}). Fix the error and check again.",
        statuses.len(),
        chapter.name,
        crate::course::progress::ago(at)
    ))
}

/// Every exercise of `chapter` with its state.
pub fn chapter_status<'a>(
    chapter: &'a Chapter,
    record: Option<&CheckRecord>,
) -> Vec<ExerciseStatus<'a>> {
    chapter
        .info
        .exercises
        .iter()
        .map(|ex| exercise_status(ex, record))
        .collect()
}

/// Whether every exercise of `chapter` passed at its last check, and that check compiled.
pub fn chapter_done(chapter: &Chapter, record: Option<&CheckRecord>) -> bool {
    if record.is_none_or(|r| r.build_error.is_some()) {
        return false;
    }
    let status = chapter_status(chapter, record);
    !status.is_empty() && status.iter().all(|s| s.state == State::Done)
}

/// Every chapter that loads, in order; a chapter whose `chapter.toml` is missing or malformed is
/// reported on stderr and left out (the learner can do nothing about it).
pub fn load_chapters(repo: &Repo) -> Result<Vec<Chapter>> {
    let mut chapters = Vec::new();
    for name in repo.chapter_names()? {
        match repo.chapter(&name) {
            Ok(chapter) => chapters.push(chapter),
            Err(e) => eprintln!("warning: chapter {name} is skipped: {e:#}"),
        }
    }
    Ok(chapters)
}

/// The first chapter (in order) not done per `progress`.
pub fn first_unfinished<'a>(chapters: &'a [Chapter], progress: &Progress) -> Option<&'a Chapter> {
    chapters
        .iter()
        .find(|c| !chapter_done(c, progress.check(&c.name)))
}

/// The chapter to go on with after `current` passed: the first unfinished one after it, else the
/// first unfinished one before it (then `true`: an earlier chapter left unfinished, not the next).
pub fn next_unfinished<'a>(
    chapters: &'a [Chapter],
    progress: &Progress,
    current: &str,
) -> Option<(&'a Chapter, bool)> {
    let at = chapters.iter().position(|c| c.name == current)?;
    let unfinished = |c: &&Chapter| !chapter_done(c, progress.check(&c.name)) && c.name != current;
    chapters[at + 1..]
        .iter()
        .find(unfinished)
        .map(|c| (c, false))
        .or_else(|| chapters[..at].iter().find(unfinished).map(|c| (c, true)))
}

/// The one chapter named on the command line (exact or a unique prefix), or the first unfinished
/// one (the last chapter when all are done).
pub fn choose_chapter(repo: &Repo, wanted: Option<&str>, progress: &Progress) -> Result<Chapter> {
    if let Some(wanted) = wanted {
        let names = repo.select_chapters(&[wanted.to_string()])?;
        let name = names.first().context("no chapter chosen")?;
        return repo.chapter(name);
    }
    let chapters = load_chapters(repo)?;
    if let Some(chapter) = first_unfinished(&chapters, progress) {
        return Ok(chapter.clone());
    }
    chapters
        .last()
        .cloned()
        .context("this workbook has no chapters (exercises/ is empty)")
}

/// A digest of the `.rs` files under `dir` (paths and contents): equal digests, same code.
/// A missing directory has the digest of no files.
pub fn src_digest(dir: &Path) -> Result<String> {
    fn walk(dir: &Path, rel: &str, files: &mut Vec<(String, std::path::PathBuf)>) -> Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let rel = format!("{rel}{name}");
            if path.is_dir() {
                walk(&path, &format!("{rel}/"), files)?;
            } else if name.ends_with(".rs") {
                files.push((rel, path));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for (rel, path) in files {
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Saved away between listing and reading (an editor's rename): it is not code now.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        hasher.update(rel.as_bytes());
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// How to run `workbook` here, for commands to paste: `cargo run -p workbook --` when it runs
/// under cargo or from the workbook's own build, else `workbook`.
pub fn command_prefix(repo: &Repo) -> String {
    let under_cargo = std::env::var_os("CARGO").is_some();
    let built_here = std::env::current_exe()
        .map(|exe| exe.starts_with(repo.root.join("target")))
        .unwrap_or(false);
    if under_cargo || built_here {
        "cargo run -p workbook --".to_string()
    } else {
        "workbook".to_string()
    }
}

/// The learner's progress for the served book (`book::serve::PROGRESS_PATH`): each chapter,
/// whether it is done, and each exercise's state (`not-started`, `failing`, `done`) with its
/// tests passed at the last check, read afresh from `.workbook/`.
pub fn progress_json(repo: &Repo) -> Result<Vec<u8>> {
    let chapters = load_chapters(repo)?;
    let progress = crate::course::progress::StateFile::of(repo).load()?;
    let chapters: Vec<serde_json::Value> = chapters
        .iter()
        .map(|chapter| {
            let record = progress.check(&chapter.name);
            let exercises: Vec<serde_json::Value> = chapter_status(chapter, record)
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "name": s.exercise.name,
                        "state": match s.state {
                            State::NotStarted => "not-started",
                            State::Failing => "failing",
                            State::Done => "done",
                        },
                        "passed": s.passed,
                        "total": s.total,
                    })
                })
                .collect();
            serde_json::json!({
                "name": chapter.name,
                "done": chapter_done(chapter, record),
                "exercises": exercises,
            })
        })
        .collect();
    Ok(serde_json::to_vec(
        &serde_json::json!({ "chapters": chapters }),
    )?)
}

/// `[########------------] 8/20 exercises`.
pub fn progress_bar(done: usize, total: usize) -> String {
    const WIDTH: usize = 20;
    let filled = (done * WIDTH).checked_div(total).unwrap_or(0).min(WIDTH);
    format!(
        "[{}{}] {done}/{total} exercises",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled)
    )
}

/// `path` relative to the repository's root when it is inside it.
pub fn shown(repo: &Repo, path: &Path) -> String {
    path.strip_prefix(&repo.root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The file a learner edits for `chapter`: `src/lib.rs` when that is the only source file.
pub fn file_to_edit(repo: &Repo, chapter: &Chapter) -> String {
    let src = chapter.dir.join("src");
    let only_lib = std::fs::read_dir(&src)
        .map(|d| d.flatten().map(|e| e.file_name()).all(|n| n == "lib.rs"))
        .unwrap_or(false);
    if only_lib {
        shown(repo, &src.join("lib.rs"))
    } else {
        format!("{}/", shown(repo, &src))
    }
}

/// What to do next, as lines: the exercise to solve and the exact commands.
pub fn next_steps(repo: &Repo, chapters: &[Chapter], progress: &Progress) -> Vec<String> {
    let cmd = command_prefix(repo);
    let Some(chapter) = first_unfinished(chapters, progress) else {
        if repo.is_student_edition() {
            return vec![
                "Every chapter passes. Well done! Your instructor has the reference solutions to \
                 compare with."
                    .to_string(),
            ];
        }
        let mut lines = vec![
            "Every chapter passes. Well done! Compare your code with the reference solutions:"
                .to_string(),
        ];
        if let Some(last) = chapters.last() {
            lines.push(format!("  {cmd} solution {}", last.name));
        }
        return lines;
    };
    let record = progress.check(&chapter.name);
    let file = file_to_edit(repo, chapter);
    let name = &chapter.name;
    let mut lines = Vec::new();
    if let Some(error) = record.and_then(|r| r.build_error.as_ref()) {
        let first = error.lines().next().unwrap_or("a compile error");
        lines.push(format!(
            "Next: make {name} compile again ({first}), then check it:"
        ));
    } else if record.is_none() {
        lines.push(format!(
            "Next: read the chapter \"{}\" in the book, solve the exercises in {file}, then check \
             them:",
            chapter.info.title
        ));
    } else {
        let exercise = chapter_status(chapter, record)
            .into_iter()
            .find(|s| s.state != State::Done)
            .map(|s| s.exercise.name.clone())
            .unwrap_or_default();
        lines.push(format!("Next: solve {exercise} in {file}, then check it:"));
    }
    lines.push(format!("  {cmd} check {name}"));
    lines.push(format!(
        "  (or `{cmd} watch {name}` to check on every save; stuck? `{cmd} hint {name}`)"
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::course::progress::TestRecord;
    use indexmap::IndexMap;

    fn exercise(tests: &[&str]) -> ExerciseInfo {
        ExerciseInfo {
            name: "ex".into(),
            title: "Ex".into(),
            hints: vec![],
            tests: tests
                .iter()
                .map(|t| (t.to_string(), 1))
                .collect::<IndexMap<_, _>>(),
        }
    }

    fn record(tests: &[(&str, TestStatus, &str)]) -> CheckRecord {
        CheckRecord {
            tests: tests
                .iter()
                .map(|(t, status, message)| {
                    (
                        t.to_string(),
                        TestRecord {
                            status: *status,
                            message: message.to_string(),
                        },
                    )
                })
                .collect(),
            ..CheckRecord::default()
        }
    }

    #[test]
    fn todo_everywhere_is_not_started_one_pass_is_failing_all_pass_is_done() {
        let ex = exercise(&["a", "b"]);
        let todo = "not yet implemented";
        let r = record(&[
            ("a", TestStatus::Failed, todo),
            ("b", TestStatus::Failed, todo),
        ]);
        assert_eq!(exercise_status(&ex, Some(&r)).state, State::NotStarted);
        let r = record(&[
            ("a", TestStatus::Passed, ""),
            ("b", TestStatus::Failed, todo),
        ]);
        let s = exercise_status(&ex, Some(&r));
        assert_eq!((s.state, s.passed, s.total), (State::Failing, 1, 2));
        let r = record(&[("a", TestStatus::Passed, ""), ("b", TestStatus::Passed, "")]);
        assert_eq!(exercise_status(&ex, Some(&r)).state, State::Done);
        assert_eq!(exercise_status(&ex, None).state, State::NotStarted);
    }

    #[test]
    fn after_the_last_chapter_the_next_is_an_earlier_unfinished_one_said_as_such() {
        let chapter = |name: &str| Chapter {
            name: name.into(),
            dir: format!("exercises/{name}").into(),
            solution_dir: format!("solutions/{name}").into(),
            info: crate::course::chapter::ChapterInfo {
                title: name.into(),
                exercises: vec![exercise(&["a"])],
            },
        };
        let chapters = [chapter("ch01"), chapter("ch02"), chapter("ch03")];
        let mut progress = Progress::default();
        let done = record(&[("a", TestStatus::Passed, "")]);
        progress.chapter_mut("ch02").check = Some(done.clone());
        let next = |progress: &Progress, current| {
            next_unfinished(&chapters, progress, current)
                .map(|(c, earlier)| (c.name.clone(), earlier))
        };
        assert_eq!(next(&progress, "ch02"), Some(("ch03".to_string(), false)));
        assert_eq!(next(&progress, "ch03"), Some(("ch01".to_string(), true)));
        progress.chapter_mut("ch01").check = Some(done.clone());
        progress.chapter_mut("ch03").check = Some(done);
        assert_eq!(next(&progress, "ch03"), None);
    }

    #[test]
    fn a_build_error_keeps_each_exercise_but_the_chapter_is_not_done() {
        let chapter = Chapter {
            name: "ch01-x".into(),
            dir: "exercises/ch01-x".into(),
            solution_dir: "solutions/ch01-x".into(),
            info: crate::course::chapter::ChapterInfo {
                title: "X".into(),
                exercises: vec![exercise(&["a"])],
            },
        };
        let mut r = record(&[("a", TestStatus::Passed, "")]);
        assert!(chapter_done(&chapter, Some(&r)));
        assert_eq!(kept_progress(&chapter, &r), None);
        r.build_error = Some("error[E0308]".into());
        r.compiled_at = Some(crate::course::progress::now());
        let s = exercise_status(&chapter.info.exercises[0], Some(&r));
        assert_eq!((s.state, s.passed), (State::Done, 1));
        assert!(!chapter_done(&chapter, Some(&r)));
        let kept = kept_progress(&chapter, &r).expect("a note");
        assert!(
            kept.starts_with("Your progress is kept: 1 of 1 exercises of ch01-x were done"),
            "{kept}"
        );
        r.tests.clear();
        r.compiled_at = None;
        assert!(
            kept_progress(&chapter, &r)
                .unwrap()
                .contains("has not compiled")
        );
    }

    #[test]
    fn the_bar_fills_in_proportion() {
        assert_eq!(progress_bar(5, 10), "[##########----------] 5/10 exercises");
        assert_eq!(progress_bar(0, 0), "[--------------------] 0/0 exercises");
    }

    #[test]
    fn the_digest_follows_rs_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let empty = src_digest(dir.path()).unwrap();
        std::fs::write(dir.path().join("lib.rs"), "fn a() {}").unwrap();
        let one = src_digest(dir.path()).unwrap();
        assert_ne!(empty, one);
        std::fs::write(dir.path().join(".lib.rs.swp"), "editor").unwrap();
        assert_eq!(src_digest(dir.path()).unwrap(), one);
        std::fs::write(dir.path().join("lib.rs"), "fn b() {}").unwrap();
        assert_ne!(src_digest(dir.path()).unwrap(), one);
    }
}
