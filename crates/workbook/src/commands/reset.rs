//! `workbook reset <chapter>`: puts the original stubs back in `exercises/<chapter>/src` from the
//! copies the binary carries, after asking, and keeps a backup of every file it replaces or
//! removes under `.workbook/backups/<chapter>-<time>/`. `tests/` is never touched.
//! `workbook reset <chapter> --restore` puts the newest backup back (backing up what it replaces).

use crate::course::app_state::Repo;
use crate::course::embedded;
use crate::course::learner;
use crate::course::progress::{self, StateFile};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flags of `workbook reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The chapter, by name or unique prefix (`ch01`).
    #[arg(value_name = "CHAPTER")]
    pub chapter: String,
    /// Do not ask (needed where there is no terminal to ask on).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Undo the last reset: put the chapter's newest backup back in its `src/` (what is there now
    /// is backed up first).
    #[arg(long)]
    pub restore: bool,
}

/// `workbook reset`.
pub fn run(root: Option<&Path>, args: &ResetArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let names = repo.select_chapters(std::slice::from_ref(&args.chapter))?;
    let name = names.first().context("no chapter chosen")?;
    if args.restore {
        return restore(&repo, name, args.yes);
    }
    let copy = embedded::chapter(name).ok_or_else(|| {
        anyhow!(
            "this workbook binary carries no copy of {name}'s stubs (its copies are from {}); \
             with git, `git checkout -- exercises/{name}/src` restores them",
            embedded::source()
        )
    })?;
    let stubs: Vec<(&str, &[u8])> = copy.files_under("src").collect();
    if stubs.is_empty() {
        bail!("the binary's copy of {name} has no src/ files");
    }
    let src = repo.exercises_dir().join(name).join("src");
    let shown_src = learner::shown(&repo, &src);
    let current = read_tree(&src)?;
    let stub_map: BTreeMap<PathBuf, &[u8]> =
        stubs.iter().map(|(p, b)| (PathBuf::from(p), *b)).collect();
    let replaced: Vec<&PathBuf> = current
        .keys()
        .filter(|p| stub_map.get(*p).is_none_or(|stub| current[*p] != *stub))
        .collect();
    let missing = stub_map
        .keys()
        .filter(|p| !current.contains_key(*p))
        .count();
    if replaced.is_empty() && missing == 0 {
        println!("{shown_src} already holds the original stubs: nothing to reset.");
        return Ok(ExitCode::SUCCESS);
    }

    println!(
        "Reset {name}: {shown_src} gets the original stubs back ({}).",
        embedded::source()
    );
    if !replaced.is_empty() {
        println!("These files of yours are replaced or removed (a backup is kept):");
        for path in &replaced {
            println!("  {shown_src}/{}", path.display());
        }
    }
    if !confirmed(args.yes, &format!("reset {name}"))? {
        return Ok(ExitCode::FAILURE);
    }

    if !current.is_empty() {
        let backup = backup(&repo, name, &current)?;
        println!(
            "Your previous files are kept in {}; `{} reset {name} --restore` puts them back.",
            learner::shown(&repo, &backup),
            learner::command_prefix(&repo)
        );
    }
    let written = embedded::write_exact(&src, &stubs)?;
    StateFile::of(&repo).update(|p| p.chapter_mut(name).check = None)?;
    println!(
        "Restored {shown_src}: {written} file(s) written, {} removed. Your tests/ were not \
         touched.",
        replaced
            .iter()
            .filter(|p| !stub_map.contains_key(**p))
            .count()
    );
    Ok(ExitCode::SUCCESS)
}

/// Asks "Go ahead?" unless `yes`; false (with the reason printed) where the answer is no or there
/// is no terminal to ask on.
fn confirmed(yes: bool, what: &str) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        eprintln!(
            "refusing to {what} without confirmation: there is no terminal to ask on. \
             Run it again with --yes (your files are backed up first)."
        );
        return Ok(false);
    }
    print!("Go ahead? [y/N] ");
    std::io::stdout().flush().context("writing the question")?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        println!("Nothing was changed.");
        return Ok(false);
    }
    Ok(true)
}

/// `reset --restore`: the newest backup `reset` made back into the chapter's `src/`, after backing
/// up what is there now as `<chapter>-before-restore-<time>` (which `--restore` never picks, so a
/// second restore does not undo the first).
fn restore(repo: &Repo, name: &str, yes: bool) -> Result<ExitCode> {
    let backups = repo.learner_dir().join("backups");
    let newest = newest_backup(&backups, name)?.ok_or_else(|| {
        anyhow!(
            "there is no backup of {name} to restore (backups are kept in {} by `reset`)",
            learner::shown(repo, &backups)
        )
    })?;
    let saved = read_tree(&newest.join("src"))?;
    if saved.is_empty() {
        bail!("the backup {} holds no files", newest.display());
    }
    let src = repo.exercises_dir().join(name).join("src");
    let shown_src = learner::shown(repo, &src);
    let current = read_tree(&src)?;
    if current == saved {
        println!(
            "{shown_src} already holds the backup {}: nothing to restore.",
            learner::shown(repo, &newest)
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Restore {name}: {shown_src} gets back the files of {}.",
        learner::shown(repo, &newest)
    );
    if !confirmed(yes, &format!("restore {name}"))? {
        return Ok(ExitCode::FAILURE);
    }
    if !current.is_empty() {
        let kept = backup(repo, &format!("{name}-before-restore"), &current)?;
        println!("What was there is kept in {}", learner::shown(repo, &kept));
    }
    let files: Vec<(String, &[u8])> = saved
        .iter()
        .map(|(p, b)| (p.to_string_lossy().into_owned(), b.as_slice()))
        .collect();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), *b)).collect();
    let written = embedded::write_exact(&src, &files)?;
    StateFile::of(repo).update(|p| p.chapter_mut(name).check = None)?;
    println!("Restored {shown_src}: {written} file(s) written.");
    Ok(ExitCode::SUCCESS)
}

/// The newest `<chapter>-<time>` folder under `backups` (the time stamps sort as text; a second
/// backup within the same second gets a `-2` suffix, which sorts after its first).
fn newest_backup(backups: &Path, name: &str) -> Result<Option<PathBuf>> {
    if !backups.is_dir() {
        return Ok(None);
    }
    let prefix = format!("{name}-");
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for entry in
        std::fs::read_dir(backups).with_context(|| format!("reading {}", backups.display()))?
    {
        let entry = entry.with_context(|| format!("reading {}", backups.display()))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        // `<chapter>-<digit>`: the chapter `ch1-a` must not take `ch1-ab`'s backups.
        let is_ours = file_name
            .strip_prefix(&prefix)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
        if is_ours && entry.path().is_dir() {
            found.push((file_name, entry.path()));
        }
    }
    found.sort_by_key(|a| backup_order(&a.0));
    Ok(found.pop().map(|(_, path)| path))
}

/// Sort key of a backup folder's name: its time stamp, then its `-N` suffix as a number.
fn backup_order(file_name: &str) -> (String, u32) {
    match file_name.rsplit_once('-') {
        Some((stem, n)) if stem.ends_with('Z') => (stem.to_string(), n.parse().unwrap_or(0)),
        _ => (file_name.to_string(), 1),
    }
}

/// Every file under `dir` with its bytes, by path relative to `dir` (a link is read through; one
/// that leads nowhere is an error: it cannot be backed up).
pub fn read_tree(dir: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>> {
    fn walk(dir: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) -> Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let path = entry.path();
            let rel = rel.join(entry.file_name());
            if path.is_dir() {
                walk(&path, &rel, out)?;
            } else {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                out.insert(rel, bytes);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    if dir.is_dir() {
        walk(dir, Path::new(""), &mut out)?;
    }
    Ok(out)
}

/// Copies `files` (the chapter's current `src/`) to a new `.workbook/backups/<label>-<time>/src`
/// and reads the copy back before anything is replaced. Returns the backup's directory.
pub fn backup(repo: &Repo, label: &str, files: &BTreeMap<PathBuf, Vec<u8>>) -> Result<PathBuf> {
    let dir = progress::unique_path(
        &repo
            .learner_dir()
            .join("backups")
            .join(format!("{label}-{}", progress::stamp())),
    );
    let src = dir.join("src");
    for (rel, bytes) in files {
        let path = src.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, bytes)
            .with_context(|| format!("backing up to {}", path.display()))?;
    }
    if read_tree(&src)? != *files {
        bail!(
            "the backup in {} does not read back as written; nothing was reset",
            dir.display()
        );
    }
    Ok(dir)
}
