//! Where the workbook lives: its root, its chapters, and the scratch area of the commands.

use crate::course::chapter::ChapterInfo;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The workbook repository: the directory whose `Cargo.toml` has `[workspace]` and which holds
/// `exercises/`.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The repository root (absolute).
    pub root: PathBuf,
}

/// One chapter: its crate, its reference solution and its `chapter.toml`.
#[derive(Debug, Clone)]
pub struct Chapter {
    /// The chapter's name: its directory under `exercises/` and its crate's name.
    pub name: String,
    /// `exercises/<name>`: the stub crate learners edit.
    pub dir: PathBuf,
    /// `solutions/<name>`: the reference solution (holds `src/`).
    pub solution_dir: PathBuf,
    /// The parsed `chapter.toml`.
    pub info: ChapterInfo,
}

impl Repo {
    /// Finds the repository from `start` upwards.
    pub fn locate(start: &Path) -> Result<Repo> {
        let start = absolute(start)?;
        for dir in start.ancestors() {
            if is_workbook_root(dir) {
                return Ok(Repo {
                    root: dir.to_path_buf(),
                });
            }
        }
        bail!(
            "not inside the GPU Memory Workbook: no directory from {} upwards has a Cargo.toml with \
             [workspace] and an exercises/ folder (run from the repository, or pass --root DIR or set \
             WORKBOOK_ROOT)",
            start.display()
        )
    }

    /// The repository at exactly `root` (from `--root`), checked like [`Repo::locate`] checks.
    pub fn at(root: &Path) -> Result<Repo> {
        let root = absolute(root)?;
        if !is_workbook_root(&root) {
            bail!(
                "{} is not the GPU Memory Workbook's root: it needs a Cargo.toml with [workspace] and \
                 an exercises/ folder",
                root.display()
            );
        }
        Ok(Repo { root })
    }

    /// `--root` when given, else found from the current directory upwards.
    pub fn from_option(root: Option<&Path>) -> Result<Repo> {
        match root {
            Some(root) => Repo::at(root),
            None => {
                let cwd = std::env::current_dir().context("reading the current directory")?;
                Repo::locate(&cwd)
            }
        }
    }

    /// `exercises/`.
    pub fn exercises_dir(&self) -> PathBuf {
        self.root.join("exercises")
    }

    /// `solutions/`.
    pub fn solutions_dir(&self) -> PathBuf {
        self.root.join("solutions")
    }

    /// Whether this is the student edition (`workbook export student`): a copy without
    /// `solutions/`, whose solutions come from the instructor.
    pub fn is_student_edition(&self) -> bool {
        !self.solutions_dir().exists()
    }

    /// `book/`, the mdBook's root.
    pub fn book_dir(&self) -> PathBuf {
        self.root.join("book")
    }

    /// `target/workbook/`, where the commands keep scratch workspaces and their build output.
    pub fn work_dir(&self) -> PathBuf {
        self.root.join("target").join("workbook")
    }

    /// `.workbook/` in the root: the learner's own data (progress, backups), which `cargo clean`
    /// must not delete. Git ignores it.
    pub fn learner_dir(&self) -> PathBuf {
        self.root.join(".workbook")
    }

    /// The chapter names: the sorted directory names under `exercises/`.
    pub fn chapter_names(&self) -> Result<Vec<String>> {
        let dir = self.exercises_dir();
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                bail!(
                    "{}: a chapter directory's name must be UTF-8",
                    entry.path().display()
                );
            };
            if !name.starts_with('.') {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Turns the names given on the command line into chapter names: exact, a unique prefix
    /// (`ch01` for `ch01-availability`), or a chapter number (`3`, `ch3`, `03`, `10`); a name that
    /// is none of these is an error that suggests the nearest chapter. No names: every chapter.
    pub fn select_chapters(&self, wanted: &[String]) -> Result<Vec<String>> {
        let all = self.chapter_names()?;
        if wanted.is_empty() {
            return Ok(all);
        }
        let mut chosen = Vec::new();
        for want in wanted {
            let found = find_chapter(&all, want)?;
            if !chosen.contains(&found) {
                chosen.push(found);
            }
        }
        Ok(chosen)
    }

    /// Loads one chapter and its `chapter.toml`; a missing or malformed file is an error naming it.
    pub fn chapter(&self, name: &str) -> Result<Chapter> {
        let dir = self.exercises_dir().join(name);
        if !dir.is_dir() {
            bail!(
                "there is no chapter {name:?} (no directory {})",
                dir.display()
            );
        }
        let toml_path = dir.join("chapter.toml");
        if !toml_path.is_file() {
            bail!(
                "chapter {name} has no chapter.toml (expected {})",
                toml_path.display()
            );
        }
        let info = ChapterInfo::load(&toml_path)?;
        Ok(Chapter {
            name: name.to_string(),
            solution_dir: self.solutions_dir().join(name),
            dir,
            info,
        })
    }
}

/// One chapter named on the command line, looked up in `all` (see [`Repo::select_chapters`]).
fn find_chapter(all: &[String], want: &str) -> Result<String> {
    let want = want.trim().trim_end_matches('/');
    let want = want.rsplit('/').next().unwrap_or(want);
    let lower = want.to_ascii_lowercase();
    if let Some(exact) = all.iter().find(|c| **c == lower) {
        return Ok(exact.clone());
    }
    if let Some(number) = chapter_number(&lower) {
        let by_number: Vec<&String> = all
            .iter()
            .filter(|c| chapter_number_of(c) == Some(number))
            .collect();
        if let [one] = by_number.as_slice() {
            return Ok(one.to_string());
        }
    }
    let matches: Vec<&String> = all.iter().filter(|c| c.starts_with(&lower)).collect();
    match matches.as_slice() {
        [one] => Ok(one.to_string()),
        [] => {
            let list = all.join(", ");
            match nearest_chapter(all, &lower) {
                Some(near) => bail!(
                    "there is no chapter {want:?}; did you mean {near}? (the chapters are: {list})"
                ),
                None => bail!("there is no chapter {want:?}; the chapters are: {list}"),
            }
        }
        many => bail!(
            "{want:?} could be any of {}; give more of the name",
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `3`, `03`, `ch3` and `ch03` name chapter 3.
fn chapter_number(text: &str) -> Option<u32> {
    let digits = text.strip_prefix("ch").unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The number in a chapter's name: 3 for `ch03-drop-and-empty-cache`.
fn chapter_number_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ch")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The chapter whose name (or name without its `chNN-` part) is closest to `want` in edit
/// distance, if it is close enough to be a typo rather than another word.
fn nearest_chapter<'a>(all: &'a [String], want: &str) -> Option<&'a str> {
    let topic = |name: &'a str| name.split_once('-').map_or(name, |(_, rest)| rest);
    all.iter()
        .map(|name| {
            let distance =
                strsim::levenshtein(name, want).min(strsim::levenshtein(topic(name), want));
            (distance, name.as_str())
        })
        .filter(|(distance, _)| *distance <= (want.chars().count() / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// Whether `dir` has a `Cargo.toml` with a `[workspace]` table and an `exercises/` folder.
fn is_workbook_root(dir: &Path) -> bool {
    if !dir.join("exercises").is_dir() {
        return false;
    }
    let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
        return false;
    };
    text.parse::<toml::Table>()
        .map(|t| t.contains_key("workspace"))
        .unwrap_or(false)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// The number of test processes to run at once by default: the machine's cores.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
