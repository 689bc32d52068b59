//! Scratch workspaces: a pristine exercise crate with a chosen `src/` laid over it, in a workspace
//! of its own outside `exercises/`, so the shipped files are never touched.
//!
//! `verify` lays the stub's own `src/` or the reference solution's; grading lays a learner's. Files
//! are written only when their content differs, so cargo rebuilds only what changed.

use crate::course::lock::DirLock;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The first line of every scratch manifest: marks a directory `prepare` may rewrite.
const HEADER: &str = "# Written by `workbook`: a scratch workspace. Edits here are overwritten.\n";

/// What every scratch workspace's root manifest shares, taken from the repository's `Cargo.toml`:
/// `[workspace.package]`, `[workspace.dependencies]` (path dependencies made absolute, so `gpumem`
/// is the repository's `crates/gpumem`), `[workspace.lints]` and the `[profile.*]` tables.
#[derive(Debug, Clone)]
pub struct WorkspaceTemplate {
    base: toml::Table,
    lock: Option<Vec<u8>>,
}

impl WorkspaceTemplate {
    /// Reads the repository's root `Cargo.toml` (and `Cargo.lock`, which pins the scratch builds).
    pub fn from_repo_root(root: &Path) -> Result<WorkspaceTemplate> {
        let path = root.join("Cargo.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let manifest: toml::Table = text
            .parse()
            .with_context(|| format!("{} is not valid TOML", path.display()))?;
        let Some(ws) = manifest.get("workspace").and_then(|w| w.as_table()) else {
            bail!("{} has no [workspace] table", path.display());
        };
        let mut workspace = toml::Table::new();
        workspace.insert(
            "resolver".into(),
            ws.get("resolver").cloned().unwrap_or("3".into()),
        );
        for key in ["package", "lints"] {
            if let Some(value) = ws.get(key) {
                workspace.insert(key.into(), value.clone());
            }
        }
        if let Some(deps) = ws.get("dependencies").and_then(|d| d.as_table()) {
            let mut deps = deps.clone();
            for (name, dep) in deps.iter_mut() {
                let Some(dep) = dep.as_table_mut() else {
                    continue;
                };
                if let Some(rel) = dep.get("path").and_then(|p| p.as_str()) {
                    let abs = root.join(rel);
                    let Some(abs) = abs.to_str() else {
                        bail!("the path of dependency {name} is not UTF-8");
                    };
                    dep.insert("path".into(), abs.into());
                }
            }
            workspace.insert("dependencies".into(), deps.into());
        }
        let mut base = toml::Table::new();
        base.insert("workspace".into(), workspace.into());
        if let Some(profile) = manifest.get("profile") {
            base.insert("profile".into(), profile.clone());
        }
        let lock = match std::fs::read(root.join("Cargo.lock")) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).context("reading Cargo.lock"),
        };
        Ok(WorkspaceTemplate { base, lock })
    }

    /// The same template with the `packages` (dev and test profiles) built the way grading
    /// wants them: no incremental cache (each submission is built once, and a cache per student
    /// would only fill the disk), one codegen unit and no debug info (chapter 9's build: 0.8 s of
    /// CPU instead of 1.0 s; panic messages keep their file and line, which come from `Location`,
    /// not debug info). Other crates (gpumem) keep the settings `verify` builds them with, so
    /// their artifacts stay shared.
    pub fn for_grading(&self, packages: &[String]) -> WorkspaceTemplate {
        fn table<'a>(parent: &'a mut toml::Table, key: &str) -> Option<&'a mut toml::Table> {
            parent
                .entry(key)
                .or_insert_with(|| toml::Table::new().into())
                .as_table_mut()
        }
        let mut template = self.clone();
        for profile in ["dev", "test"] {
            let profile_packages = table(&mut template.base, "profile")
                .and_then(|t| table(t, profile))
                .and_then(|t| table(t, "package"));
            if let Some(profile_packages) = profile_packages {
                for package in packages {
                    let mut settings = toml::Table::new();
                    settings.insert("incremental".into(), false.into());
                    settings.insert("codegen-units".into(), 1.into());
                    settings.insert("debug".into(), false.into());
                    profile_packages.insert(package.clone(), settings.into());
                }
            }
        }
        template
    }

    /// The root manifest of a scratch workspace whose members are the directories `members`.
    pub fn manifest(&self, members: &[&str]) -> Result<String> {
        let mut table = self.base.clone();
        if let Some(ws) = table.get_mut("workspace").and_then(|w| w.as_table_mut()) {
            let members: Vec<toml::Value> = members.iter().map(|&m| m.into()).collect();
            ws.insert("members".into(), members.into());
        }
        let body = toml::to_string(&table).context("writing a scratch Cargo.toml")?;
        Ok(format!("{HEADER}{body}"))
    }
}

/// A scratch workspace ready to build, locked for this process until dropped.
#[derive(Debug)]
pub struct ScratchCrate {
    /// The workspace root (holds `Cargo.toml`, `Cargo.lock` and the crate).
    pub workspace: PathBuf,
    /// The crate's directory inside the workspace.
    pub crate_dir: PathBuf,
    /// The crate's package name.
    pub package: String,
    _lock: DirLock,
}

/// One crate of a scratch workspace: a copy of the crate at `crate_src`, in the workspace's
/// directory `member`, with its `src/` replaced by the contents of `src_overlay`.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The crate's directory name inside the workspace.
    pub member: &'a str,
    /// The crate copied (its `src/` excepted).
    pub crate_src: &'a Path,
    /// The `src/` laid over it (the crate's own `src/` for the stub).
    pub src_overlay: &'a Path,
}

/// A scratch workspace of several crates, ready to build in one cargo run, locked for this
/// process until dropped.
#[derive(Debug)]
pub struct ScratchWorkspace {
    /// The workspace root (holds `Cargo.toml`, `Cargo.lock` and the crates).
    pub workspace: PathBuf,
    /// Each member's directory and package name, in the order given.
    pub crates: Vec<(PathBuf, String)>,
    _lock: DirLock,
}

/// Lays out `workspace_dir` as a workspace holding, in its directory `member`, a copy of the crate
/// at `crate_src` whose `src/` is replaced by the contents of `src_overlay` (the crate's own `src/`
/// for the stub).
///
/// `member` must differ between scratch crates that share a target directory: cargo names a
/// workspace member's artifacts after its path *relative to the workspace root*, so two scratch
/// crates at the same relative path would overwrite each other's executables and could even be
/// taken for fresh. Only files inside `workspace_dir` (and a lock file beside it) are written.
pub fn prepare(
    template: &WorkspaceTemplate,
    workspace_dir: &Path,
    member: &str,
    crate_src: &Path,
    src_overlay: &Path,
) -> Result<ScratchCrate> {
    let member = Member {
        member,
        crate_src,
        src_overlay,
    };
    let mut scratch = prepare_workspace(template, workspace_dir, &[member])?;
    let (crate_dir, package) = scratch.crates.remove(0);
    Ok(ScratchCrate {
        workspace: scratch.workspace,
        crate_dir,
        package,
        _lock: scratch._lock,
    })
}

/// [`prepare`] for several crates in one workspace (grading builds all of a student's chapters
/// in one cargo run). Member names must be unique, and differ from those of other workspaces
/// that share the target directory.
pub fn prepare_workspace(
    template: &WorkspaceTemplate,
    workspace_dir: &Path,
    members: &[Member<'_>],
) -> Result<ScratchWorkspace> {
    let mut packages = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let name = m.member;
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            bail!("{name:?} cannot name a scratch crate's directory");
        }
        if members[..i].iter().any(|other| other.member == name) {
            bail!("two crates of one scratch workspace cannot both be in {name:?}");
        }
        let package = package_name(m.crate_src)?;
        if !m.src_overlay.is_dir() {
            bail!(
                "{} does not exist: there is no src/ to lay over {package}",
                m.src_overlay.display()
            );
        }
        packages.push(package);
    }
    let parent = workspace_dir
        .parent()
        .context("a scratch workspace needs a parent directory")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let lock = DirLock::acquire(&workspace_dir.with_extension("lock"))?;
    // Whatever else is in the workspace directory is removed below: never do that to a directory
    // that some earlier `prepare` did not make.
    let manifest_path = workspace_dir.join("Cargo.toml");
    let has_entries = std::fs::read_dir(workspace_dir).is_ok_and(|mut d| d.next().is_some());
    let ours = std::fs::read_to_string(&manifest_path).is_ok_and(|t| t.starts_with(HEADER));
    if has_entries && !ours {
        bail!(
            "refusing to use {} as a scratch workspace: it exists and was not made by workbook",
            workspace_dir.display()
        );
    }
    let skip = |rel: &Path| {
        rel == Path::new("src")
            || rel == Path::new("target")
            || rel == Path::new("Cargo.lock")
            || rel == Path::new(".git")
    };
    let mut crates = Vec::new();
    for (m, package) in members.iter().zip(packages) {
        let crate_dir = workspace_dir.join(m.member);
        mirror(m.crate_src, &crate_dir, Path::new(""), &skip).with_context(|| {
            format!(
                "copying {} to {}",
                m.crate_src.display(),
                crate_dir.display()
            )
        })?;
        let src = crate_dir.join("src");
        mirror(m.src_overlay, &src, Path::new(""), &|_| false)
            .with_context(|| format!("copying {} to {}", m.src_overlay.display(), src.display()))?;
        refuse_doors_in_predictions(&src.join("predict.rs"))?;
        crates.push((crate_dir, package));
    }
    // The workspace root holds only what we write: anything else is removed.
    let names: Vec<&str> = members.iter().map(|m| m.member).collect();
    write_if_changed(&manifest_path, template.manifest(&names)?.as_bytes())?;
    if let Some(lock_bytes) = &template.lock {
        write_if_changed(&workspace_dir.join("Cargo.lock"), lock_bytes)?;
    }
    for entry in std::fs::read_dir(workspace_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let is_member = name.to_str().is_some_and(|n| names.contains(&n));
        if name != "Cargo.toml" && name != "Cargo.lock" && !is_member {
            remove(&entry.path())?;
        }
    }
    Ok(ScratchWorkspace {
        workspace: workspace_dir.to_path_buf(),
        crates,
        _lock: lock,
    })
}

/// The `[package] name` of the crate at `dir`.
pub fn package_name(dir: &Path) -> Result<String> {
    let path = dir.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .with_context(|| format!("{} has no [package] name", path.display()))
}

/// Makes `to` a copy of the crate at `from` (without `target/`) with the `extra` files added
/// (paths relative to `to`, and their bytes): files are written only when they differ, so cargo
/// rebuilds only what changed, and anything else in `to` is removed. Grading uses it for the
/// pristine crate with the hidden tests.
pub fn mirror_with(
    from: &Path,
    to: &Path,
    extra: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) -> Result<()> {
    let skip = |rel: &Path| rel == Path::new("target") || extra.contains_key(rel);
    mirror(from, to, Path::new(""), &skip)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    for (rel, bytes) in extra {
        let path = to.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        write_if_changed(&path, bytes)?;
    }
    Ok(())
}

/// Appends a compile error to a scratch copy of `src/predict.rs` that reaches outside the
/// process ([`prediction_guard`](super::prediction_guard)): its build then fails, naming why.
fn refuse_doors_in_predictions(predict: &Path) -> Result<()> {
    let Ok(source) = std::fs::read_to_string(predict) else {
        return Ok(());
    };
    if let Some(door) = super::prediction_guard::first_door(&source) {
        write_if_changed(predict, (source + &door.compile_error()).as_bytes())?;
    }
    Ok(())
}

/// Makes `to` a copy of `from`: files written only when they differ, extra entries removed.
/// `skip` gets paths relative to the top of the copy.
fn mirror(from: &Path, to: &Path, rel: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<()> {
    if to.is_file() || to.is_symlink() {
        remove(to)?;
    }
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let mut kept = Vec::new();
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let rel_path = rel.join(&name);
        if skip(&rel_path) {
            continue;
        }
        let source = entry.path();
        let dest = to.join(&name);
        // Metadata follows symbolic links: a linked file is copied as a file.
        let meta =
            std::fs::metadata(&source).with_context(|| format!("reading {}", source.display()))?;
        if meta.is_dir() {
            mirror(&source, &dest, &rel_path, skip)?;
        } else {
            let bytes =
                std::fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
            if dest.is_dir() {
                remove(&dest)?;
            }
            write_if_changed(&dest, &bytes)?;
        }
        kept.push(name);
    }
    // Skipped entries are someone else's (the overlaid `src/`): they stay.
    for entry in std::fs::read_dir(to)? {
        let entry = entry?;
        let name = entry.file_name();
        if !kept.contains(&name) && !skip(&rel.join(&name)) {
            remove(&entry.path())?;
        }
    }
    Ok(())
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn remove(path: &Path) -> Result<()> {
    let result = if path.is_dir() && !path.is_symlink() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    result.with_context(|| format!("removing {}", path.display()))
}
