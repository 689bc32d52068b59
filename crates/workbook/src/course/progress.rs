//! The learner's progress, kept between runs in `.workbook/state.json`: the last check of
//! each chapter (every test's verdict and why it failed) and which hints were shown.
//!
//! The file is replaced atomically (a temporary file renamed over it) under a lock, so a `watch`
//! and a `check` running at once never lose each other's results, and a crash never leaves half a
//! file. A file that cannot be read is moved aside, reported, and progress starts afresh.

use crate::course::app_state::Repo;
use crate::course::lock::DirLock;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The version written in the file; a file with another version is moved aside.
pub const VERSION: u32 = 1;

/// Everything remembered about the learner.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The file format's version.
    pub version: u32,
    /// Per chapter, by name.
    #[serde(default)]
    pub chapters: BTreeMap<String, ChapterProgress>,
}

/// What is remembered about one chapter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChapterProgress {
    /// The last check, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckRecord>,
    /// How many hints of each exercise were shown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hints_shown: BTreeMap<String, usize>,
}

/// The result of one `workbook check` of a chapter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// When, in seconds since 1970.
    pub at: u64,
    /// The digest of the `src/` that was checked (see [`crate::course::learner::src_digest`]).
    #[serde(default)]
    pub src_digest: String,
    /// The compiler's first error when the code did not compile (then `tests` holds the results
    /// of the last check that compiled, so no progress is lost to a typo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_error: Option<String>,
    /// When the tests in `tests` ran: this check, or the last one that compiled; `None` when no
    /// check of the chapter has compiled yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled_at: Option<u64>,
    /// Every test that ran, by name (at the last check that compiled, when this one did not).
    #[serde(default)]
    pub tests: BTreeMap<String, TestRecord>,
}

/// One test's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestRecord {
    /// Passed, failed or timed out.
    pub status: TestStatus,
    /// Why it did not pass, in one line; empty when it passed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A test's verdict, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestStatus {
    /// It passed.
    Passed,
    /// It failed (panicked, exited, was killed).
    Failed,
    /// It ran past the time limit.
    TimedOut,
}

impl Progress {
    /// The chapter's record, created empty if needed.
    pub fn chapter_mut(&mut self, name: &str) -> &mut ChapterProgress {
        self.chapters.entry(name.to_string()).or_default()
    }

    /// The chapter's last check, if any.
    pub fn check(&self, name: &str) -> Option<&CheckRecord> {
        self.chapters.get(name).and_then(|c| c.check.as_ref())
    }

    /// How many hints of `exercise` in `chapter` were shown.
    pub fn hints_shown(&self, chapter: &str, exercise: &str) -> usize {
        self.chapters
            .get(chapter)
            .and_then(|c| c.hints_shown.get(exercise))
            .copied()
            .unwrap_or(0)
    }
}

/// The state file of a workbook.
#[derive(Debug, Clone)]
pub struct StateFile {
    /// `.workbook/state.json`.
    pub path: PathBuf,
}

impl StateFile {
    /// The state file of `repo`.
    pub fn of(repo: &Repo) -> StateFile {
        StateFile {
            path: repo.learner_dir().join("state.json"),
        }
    }

    /// The progress on disk; nothing yet is empty progress. A file that cannot be read is moved
    /// aside (the warning says where) and empty progress is returned.
    pub fn load(&self) -> Result<Progress> {
        self.ensure_dir()?;
        let _lock = self.lock()?;
        self.load_locked()
    }

    /// Reads the progress, lets `change` edit it, and writes it back, all under the lock.
    pub fn update<T>(&self, change: impl FnOnce(&mut Progress) -> T) -> Result<T> {
        self.ensure_dir()?;
        let _lock = self.lock()?;
        let mut progress = self.load_locked()?;
        let out = change(&mut progress);
        self.write_locked(&progress)?;
        Ok(out)
    }

    fn ensure_dir(&self) -> Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Ok(())
    }

    fn lock(&self) -> Result<DirLock> {
        DirLock::acquire(&self.path.with_extension("json.lock"))
    }

    fn load_locked(&self) -> Result<Progress> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Progress {
                    version: VERSION,
                    ..Progress::default()
                });
            }
            Err(e) => {
                // Unreadable bytes (not UTF-8) count as corrupt; other errors are real errors.
                if e.kind() != std::io::ErrorKind::InvalidData {
                    return Err(e).with_context(|| format!("reading {}", self.path.display()));
                }
                return self.move_aside(&e.to_string());
            }
        };
        match serde_json::from_str::<Progress>(&text) {
            Ok(progress) if progress.version == VERSION => Ok(progress),
            Ok(progress) => self.move_aside(&format!(
                "it is version {} of the format; this workbook reads version {VERSION}",
                progress.version
            )),
            Err(e) => self.move_aside(&e.to_string()),
        }
    }

    fn move_aside(&self, why: &str) -> Result<Progress> {
        let aside = unique_path(
            &self
                .path
                .with_extension(format!("json.corrupt-{}", stamp())),
        );
        std::fs::rename(&self.path, &aside).with_context(|| {
            format!(
                "moving the unreadable {} aside to {}",
                self.path.display(),
                aside.display()
            )
        })?;
        eprintln!(
            "warning: your progress file {} could not be read ({why}); it was moved to {} and \
             progress starts afresh. Your code is untouched: `workbook list --refresh` checks every \
             chapter again.",
            self.path.display(),
            aside.display()
        );
        Ok(Progress {
            version: VERSION,
            ..Progress::default()
        })
    }

    fn write_locked(&self, progress: &Progress) -> Result<()> {
        let mut progress = progress.clone();
        progress.version = VERSION;
        let text = serde_json::to_string_pretty(&progress).context("writing the progress")?;
        write_atomic(&self.path, text.as_bytes())
    }
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`: readers see the
/// old file or the new one, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("replacing {}", path.display()));
    }
    Ok(())
}

/// `path`, or `path-2`, `path-3`... the first that does not exist.
pub fn unique_path(path: &Path) -> PathBuf {
    if !path.exists() {
        return path.to_path_buf();
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (2..)
        .map(|n| path.with_file_name(format!("{name}-{n}")))
        .find(|p| !p.exists())
        .expect("some numbered name is free")
}

/// Seconds since 1970 now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Now in UTC as `2026-11-20T221740Z`: sorts by time, and is a valid file name everywhere.
pub fn stamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "")
}

/// How long ago `at` (seconds since 1970) was, in words: `just now`, `5m ago`, `2h 10m ago`.
pub fn ago(at: u64) -> String {
    let secs = now().saturating_sub(at);
    if secs < 60 {
        return "just now".to_string();
    }
    let rounded = if secs < 3600 {
        secs / 60 * 60
    } else if secs < 86_400 {
        secs / 600 * 600
    } else {
        secs / 3600 * 3600
    };
    format!(
        "{} ago",
        humantime::format_duration(Duration::from_secs(rounded))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_in(dir: &Path) -> StateFile {
        StateFile {
            path: dir.join("state.json"),
        }
    }

    #[test]
    fn update_then_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path());
        state
            .update(|p| {
                p.chapter_mut("ch01").hints_shown.insert("a".into(), 2);
            })
            .unwrap();
        let loaded = state.load().unwrap();
        assert_eq!(loaded.hints_shown("ch01", "a"), 2);
        assert_eq!(loaded.version, VERSION);
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".lock"))
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_corrupt_file_is_moved_aside_and_progress_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path());
        std::fs::write(&state.path, "{ not json").unwrap();
        let loaded = state.load().unwrap();
        assert!(loaded.chapters.is_empty());
        assert!(!state.path.exists());
        let aside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("state.json.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1);
        let kept = std::fs::read_to_string(dir.path().join(&aside[0])).unwrap();
        assert_eq!(kept, "{ not json");
    }

    #[test]
    fn ago_rounds_to_minutes() {
        assert_eq!(ago(now()), "just now");
        assert_eq!(ago(now() - 150), "2m ago");
    }
}
