//! `--hidden-tests <FOLDER>`: tests the learners never saw, added to the official ones.
//!
//! Layout: `<FOLDER>/<chapter>/*.rs`, each file an integration-test file like those in the
//! chapter's `tests/` (it may use the chapter's crate, `gpumem` and the chapter's
//! dev-dependencies). They are copied into the pristine crate as `tests/hidden_<file>.rs`.
//! Points: `<FOLDER>/<chapter>/points.toml` maps test function names to points
//! (`leaves_memory_allocated_unchanged = 3`); a hidden test it does not list is worth 1 point.

use crate::course::app_state::Chapter;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// The prefix of a hidden test file's name in the pristine crate (and of its test target).
pub const TARGET_PREFIX: &str = "hidden_";

/// A hidden test that `points.toml` does not list is worth this much.
pub const DEFAULT_POINTS: u32 = 1;

/// One chapter's hidden tests.
#[derive(Debug, Clone, Default)]
pub struct HiddenChapter {
    /// Test files: their name in the pristine crate's `tests/` (`hidden_leaks.rs`) and bytes.
    pub files: BTreeMap<String, Vec<u8>>,
    /// `points.toml`: test name to points.
    pub points: BTreeMap<String, u32>,
}

impl HiddenChapter {
    /// Whether a test target (a file stem in `tests/`) is one of these hidden files.
    pub fn is_hidden_target(&self, target: &str) -> bool {
        self.files.contains_key(&format!("{target}.rs"))
    }

    /// The points of a hidden test.
    pub fn points_of(&self, test: &str) -> u32 {
        self.points.get(test).copied().unwrap_or(DEFAULT_POINTS)
    }
}

/// Reads the hidden tests for `chapters` from `folder`; those of other chapters of the workbook
/// (`all`, the names of every chapter) are skipped. A sub-folder that names no chapter, a file
/// name that cannot be a test target, or a malformed `points.toml` is an error.
pub fn load(
    folder: &Path,
    chapters: &[Chapter],
    all: &[String],
) -> Result<BTreeMap<String, HiddenChapter>> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(folder)
        .with_context(|| format!("reading the hidden tests in {}", folder.display()))?;
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if !entry.path().is_dir() {
            bail!(
                "{}: hidden tests go in one folder per chapter (<FOLDER>/<chapter>/*.rs)",
                entry.path().display()
            );
        }
        dirs.push((name, entry.path()));
    }
    dirs.sort();
    for (name, dir) in dirs {
        let Some(chapter) = chapters.iter().find(|c| c.name == name) else {
            if all.contains(&name) {
                continue;
            }
            bail!(
                "{}: there is no chapter {name:?} (the chapters are: {})",
                dir.display(),
                all.join(", ")
            );
        };
        let mut hidden = HiddenChapter::default();
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            let file = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if file == "points.toml" {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let points: BTreeMap<String, u32> = toml::from_str(&text).with_context(|| {
                    format!(
                        "{} must map test names to points (`my_test = 2`)",
                        path.display()
                    )
                })?;
                if let Some((test, _)) = points.iter().find(|(_, p)| **p == 0) {
                    bail!("{}: test {test} is worth 0 points", path.display());
                }
                hidden.points = points;
                continue;
            }
            let Some(stem) = file.strip_suffix(".rs") else {
                continue;
            };
            if stem.is_empty() || !stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!(
                    "{}: a hidden test file's name must be letters, digits and _",
                    path.display()
                );
            }
            let target = format!("{TARGET_PREFIX}{stem}.rs");
            if chapter.dir.join("tests").join(&target).exists() {
                bail!(
                    "{}: the official tests already have a file {target}",
                    path.display()
                );
            }
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            hidden.files.insert(target, bytes);
        }
        if hidden.files.is_empty() {
            bail!("{}: no hidden test files (*.rs) in it", dir.display());
        }
        out.insert(chapter.name.clone(), hidden);
    }
    Ok(out)
}
