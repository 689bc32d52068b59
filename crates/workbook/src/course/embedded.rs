//! The chapter crates carried inside the binary (written by `build.rs` from the commit the binary
//! was built from): the stubs `workbook reset` restores and the official tests `workbook check`
//! runs, whatever a learner did to their copies.

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::path::{Component, Path};

/// One chapter crate as the binary carries it.
#[derive(Debug)]
pub struct EmbeddedChapter {
    /// The chapter's name (its directory under `exercises/`).
    pub name: &'static str,
    /// Every file of the crate: its path inside the crate (`src/lib.rs`, `tests/x.rs`) and bytes.
    pub files: &'static [(&'static str, &'static [u8])],
}

mod generated {
    use super::EmbeddedChapter;
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

/// Where the copies come from: `git commit abc1234`, or the files at build time without git.
pub fn source() -> &'static str {
    generated::SOURCE
}

/// Every chapter the binary carries, by name.
pub fn chapters() -> &'static [EmbeddedChapter] {
    generated::CHAPTERS
}

/// The chapter called `name`, if the binary carries it.
pub fn chapter(name: &str) -> Option<&'static EmbeddedChapter> {
    chapters().iter().find(|c| c.name == name)
}

impl EmbeddedChapter {
    /// The files under `dir/` (`src`, `tests`), with paths relative to it.
    pub fn files_under<'a>(
        &'a self,
        dir: &'a str,
    ) -> impl Iterator<Item = (&'static str, &'static [u8])> + 'a {
        self.files.iter().filter_map(move |(path, bytes)| {
            path.strip_prefix(dir)
                .and_then(|p| p.strip_prefix('/'))
                .map(|rel| (rel, *bytes))
        })
    }

    /// Makes `dir` hold exactly the files under `sub` of this chapter (`sub` empty: the whole
    /// crate): files are written only when they differ (cargo then rebuilds only what changed),
    /// other files are removed. Returns how many files were written.
    pub fn write_to(&self, sub: &str, dir: &Path) -> Result<usize> {
        let files: Vec<(&str, &[u8])> = if sub.is_empty() {
            self.files.to_vec()
        } else {
            self.files_under(sub).collect()
        };
        write_exact(dir, &files)
    }
}

/// Makes `dir` hold exactly `files` (paths relative to `dir`); returns how many were written.
pub fn write_exact(dir: &Path, files: &[(&str, &[u8])]) -> Result<usize> {
    for (rel, _) in files {
        if Path::new(rel)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            bail!("{rel:?} is not a plain relative path");
        }
    }
    let mut keep = BTreeSet::new();
    let mut written = 0;
    for (rel, bytes) in files {
        let path = dir.join(rel);
        keep.insert(path.clone());
        if std::fs::read(&path).is_ok_and(|old| old == *bytes) {
            continue;
        }
        if path.is_dir() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing {}", path.display()))?;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        written += 1;
    }
    remove_others(dir, &keep)?;
    Ok(written)
}

/// Removes every file under `dir` not in `keep`, and directories left empty.
fn remove_others(dir: &Path, keep: &BTreeSet<std::path::PathBuf>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if meta.is_dir() {
            remove_others(&path, keep)?;
            if std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none()) {
                std::fs::remove_dir(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        } else if !keep.contains(&path) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_exact_writes_changes_and_removes_strays() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("old")).unwrap();
        std::fs::write(dir.path().join("old/stray.rs"), "x").unwrap();
        std::fs::write(dir.path().join("lib.rs"), "same").unwrap();
        let files: &[(&str, &[u8])] = &[("lib.rs", b"same"), ("a/b.rs", b"new")];
        assert_eq!(write_exact(dir.path(), files).unwrap(), 1);
        assert_eq!(std::fs::read(dir.path().join("a/b.rs")).unwrap(), b"new");
        assert!(!dir.path().join("old").exists());
        assert_eq!(write_exact(dir.path(), files).unwrap(), 0);
    }

    #[test]
    fn write_exact_refuses_paths_that_leave_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let files: &[(&str, &[u8])] = &[("../escape.rs", b"x")];
        assert!(write_exact(dir.path(), files).is_err());
    }
}
