//! Taking in a submission: a folder (a copy of the workbook, its `exercises/` folder, or
//! `<chapter>/src` folders) or a `.zip` / `.tar.gz` / `.tgz` / `.tar` of one.
//!
//! Whatever the learner sent is copied or unpacked into a private folder first, so grading never
//! reads their files twice and never follows a link out of the submission:
//!
//! - an archive entry with an absolute path or a `..` component refuses the whole submission;
//! - a symbolic or hard link pointing outside the submission refuses it; links pointing inside are
//!   not recreated (a note says so); other special files are skipped;
//! - unpacking stops, and the submission is refused, past [`Limits`] (a zip bomb says so plainly);
//! - `target/` and `.git/` folders are not unpacked (a workbook copy may hold gigabytes of build).
//!
//! A refused submission scores 0 with the reason in its report; it never stops the batch.

use crate::course::app_state::Chapter;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// How much a submission may unpack to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of files written, all together.
    pub max_bytes: u64,
    /// Files and folders written.
    pub max_files: usize,
    /// Bytes a compressed stream may inflate to, skipped entries included.
    pub max_stream_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 64 << 20,
            max_files: 20_000,
            max_stream_bytes: 1 << 30,
        }
    }
}

/// One chapter found in a submission.
#[derive(Debug, Clone)]
pub struct SubmittedChapter {
    /// The submitted `src/`, in the private copy.
    pub src: PathBuf,
    /// What the learner should know (edited tests that were ignored...).
    pub notes: Vec<String>,
    /// Constructs in the code that an instructor may want to look at (not scored).
    pub review: Vec<String>,
}

/// A submission, taken in.
#[derive(Debug)]
pub struct Submission {
    /// The student's name: the folder's or archive's name without its extension.
    pub student: String,
    /// What was given on the command line.
    pub source: PathBuf,
    /// The chapters found, by chapter name.
    pub chapters: BTreeMap<String, SubmittedChapter>,
    /// Notes about the submission as a whole.
    pub notes: Vec<String>,
    /// Why the whole submission was refused, when it was.
    pub refused: Option<String>,
}

/// The student's name for a submission path: its file name without `.zip`, `.tar.gz`, `.tgz` or
/// `.tar`.
pub fn student_name(path: &Path) -> String {
    let name = std::path::absolute(path)
        .ok()
        .and_then(|p| {
            // `.` and `..` name the folder they lead to.
            let mut clean = PathBuf::new();
            for c in p.components() {
                match c {
                    Component::ParentDir => {
                        clean.pop();
                    }
                    Component::CurDir => {}
                    other => clean.push(other),
                }
            }
            clean.file_name().map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| path.to_string_lossy().into_owned());
    match archive_kind(Path::new(&name)) {
        Some(kind) => name[..name.len() - kind.extension().len()].to_string(),
        None => name,
    }
}

/// The entries of a class folder, one per student: sub-folders and archives, sorted by name.
/// Hidden entries and `__MACOSX/` (macOS's zip metadata, no student) are skipped; other files are
/// reported in the second list.
pub fn class_entries(folder: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    let read =
        std::fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?;
    for entry in read {
        let entry = entry.with_context(|| format!("reading {}", folder.display()))?;
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || name == "__MACOSX" {
            continue;
        }
        if path.is_dir() || archive_kind(&path).is_some() {
            entries.push(path);
        } else {
            skipped.push(path);
        }
    }
    entries.sort();
    skipped.sort();
    Ok((entries, skipped))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArchiveKind {
    Zip,
    TarGz,
    Tgz,
    Tar,
}

impl ArchiveKind {
    fn extension(self) -> &'static str {
        match self {
            ArchiveKind::Zip => ".zip",
            ArchiveKind::TarGz => ".tar.gz",
            ArchiveKind::Tgz => ".tgz",
            ArchiveKind::Tar => ".tar",
        }
    }
}

fn archive_kind(path: &Path) -> Option<ArchiveKind> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    [
        ArchiveKind::Zip,
        ArchiveKind::TarGz,
        ArchiveKind::Tgz,
        ArchiveKind::Tar,
    ]
    .into_iter()
    .find(|k| name.ends_with(k.extension()) && name.len() > k.extension().len())
}

/// Takes in the submission at `path` for `student`, copying or unpacking it into `private` (an
/// empty folder the caller owns). Never fails: a problem refuses the submission, with the reason.
pub fn intake(
    path: &Path,
    student: &str,
    chapters: &[Chapter],
    private: &Path,
    limits: &Limits,
) -> Submission {
    let mut submission = Submission {
        student: student.to_string(),
        source: path.to_path_buf(),
        chapters: BTreeMap::new(),
        notes: Vec::new(),
        refused: None,
    };
    if let Err(e) = take_in(path, chapters, private, limits, &mut submission) {
        submission.chapters.clear();
        submission.refused = Some(format!("{e:#}"));
    }
    submission
}

fn take_in(
    path: &Path,
    chapters: &[Chapter],
    private: &Path,
    limits: &Limits,
    submission: &mut Submission,
) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mut budget = Budget::new(limits);
    let root = if meta.is_dir() {
        let source =
            std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
        let Some(found) = locate(&source, chapters) else {
            // Gradescope unpacks a .zip upload but leaves a .tar.gz (or a zip inside a zip) as
            // it is: a folder holding only one archive is graded as that archive.
            if let Some(archive) = lone_archive(&source) {
                submission.notes.push(format!(
                    "graded the archive {} (the only file uploaded)",
                    archive.file_name().unwrap_or_default().to_string_lossy()
                ));
                return take_in(&archive, chapters, private, limits, submission);
            }
            submission.notes.push(nothing_found(&source, chapters));
            return Ok(());
        };
        // Copy only what grading reads: each chapter's src/, tests/ and Cargo.toml.
        for chapter in chapters {
            let from = found.join(&chapter.name);
            if !is_real_dir(&from) {
                continue;
            }
            for part in ["src", "tests", "Cargo.toml"] {
                let from_part = from.join(part);
                if std::fs::symlink_metadata(&from_part).is_ok() {
                    copy_tree(
                        &source,
                        &from_part,
                        &private.join(&chapter.name).join(part),
                        &mut budget,
                    )?;
                }
            }
        }
        private.to_path_buf()
    } else {
        let kind = archive_kind(path).with_context(|| {
            format!(
                "{} is neither a folder nor a .zip, .tar.gz, .tgz or .tar archive",
                path.display()
            )
        })?;
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        match kind {
            ArchiveKind::Zip => unpack_zip(file, private, &mut budget)?,
            ArchiveKind::TarGz | ArchiveKind::Tgz => unpack_tar(
                CappedReader::new(flate2::read::GzDecoder::new(file), limits.max_stream_bytes),
                private,
                &mut budget,
            )?,
            ArchiveKind::Tar => unpack_tar(
                CappedReader::new(file, limits.max_stream_bytes),
                private,
                &mut budget,
            )?,
        }
        match locate(private, chapters) {
            Some(found) => found,
            None => {
                submission.notes.push(nothing_found(private, chapters));
                return Ok(());
            }
        }
    };
    submission.notes.append(&mut budget.notes);
    for chapter in chapters {
        let dir = root.join(&chapter.name);
        if !is_real_dir(&dir) {
            continue;
        }
        let src = dir.join("src");
        if !is_real_dir(&src) {
            submission.notes.push(format!(
                "{}/ has no src/ folder: the chapter counts as not submitted",
                chapter.name
            ));
            continue;
        }
        let notes = ignored_edits(&dir, &chapter.dir);
        let review = review_notes(&src);
        submission.chapters.insert(
            chapter.name.clone(),
            SubmittedChapter { src, notes, review },
        );
    }
    Ok(())
}

fn nothing_found(dir: &Path, chapters: &[Chapter]) -> String {
    let example = chapters
        .first()
        .map(|c| c.name.as_str())
        .unwrap_or("ch01-...");
    let mut seen: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    seen.sort();
    let seen = if seen.is_empty() {
        "nothing".to_string()
    } else {
        seen.join(", ")
    };
    let loose = if seen.split(", ").any(|name| name.ends_with(".rs")) {
        format!(
            ". Loose .rs files cannot be graded: they do not say which chapter they belong to. \
             Upload your exercises/ folder (or each chapter's folder, such as {example}/ with its \
             src/ inside), as folders or as one .zip or .tar.gz of them"
        )
    } else if dir.join("src").is_dir() {
        // A zip of what is inside a chapter's folder: the folder's name, the chapter, is lost.
        format!(
            ". This is what is inside a chapter's folder, without the folder: upload the folder \
             itself (such as {example}/ with its src/ inside), or a .zip or .tar.gz of it"
        )
    } else {
        String::new()
    };
    format!(
        "no chapter folder found (expected exercises/{example}/src/ or {example}/src/; found {seen}): \
         every chapter counts as not submitted{loose}"
    )
}

/// The one archive `dir` holds, when it holds nothing else (hidden entries and `__MACOSX/` aside).
fn lone_archive(dir: &Path) -> Option<PathBuf> {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name != "__MACOSX"
        })
        .map(|e| e.path())
        .collect();
    match entries.as_slice() {
        [only]
            if std::fs::symlink_metadata(only).is_ok_and(|m| m.is_file())
                && archive_kind(only).is_some() =>
        {
            Some(only.clone())
        }
        _ => None,
    }
}

/// Where the chapter folders are: `dir/exercises`, `dir` itself, or the same inside a lone
/// wrapping folder (an archive of `alice/...`), a few levels deep. Links are never followed.
fn locate(dir: &Path, chapters: &[Chapter]) -> Option<PathBuf> {
    let has_chapters = |d: &Path| chapters.iter().any(|c| is_real_dir(&d.join(&c.name)));
    let mut dir = dir.to_path_buf();
    for _ in 0..4 {
        if is_real_dir(&dir.join("exercises")) && has_chapters(&dir.join("exercises")) {
            return Some(dir.join("exercises"));
        }
        if has_chapters(&dir) {
            return Some(dir);
        }
        let subdirs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                !name.starts_with('.') && name != "__MACOSX"
            })
            .map(|e| e.path())
            .filter(|p| is_real_dir(p))
            .collect();
        match subdirs.as_slice() {
            [only] => dir = only.clone(),
            _ => return None,
        }
    }
    None
}

fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Notes on the learner's copies of what grading replaces with the official ones.
fn ignored_edits(submitted: &Path, official: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    let tests = submitted.join("tests");
    if tests.is_dir() {
        let theirs = files_under(&tests);
        let ours = files_under(&official.join("tests"));
        let mut changes = Vec::new();
        for (rel, bytes) in &ours {
            match theirs.get(rel) {
                None => changes.push(format!("tests/{} deleted", rel.display())),
                Some(b) if b != bytes => changes.push(format!("tests/{} edited", rel.display())),
                Some(_) => {}
            }
        }
        for rel in theirs.keys().filter(|r| !ours.contains_key(*r)) {
            changes.push(format!("tests/{} added", rel.display()));
        }
        if !changes.is_empty() {
            notes.push(format!(
                "your tests/ differs from the official one ({}): it was ignored, the official \
                 tests graded this chapter",
                changes.join(", ")
            ));
        }
    }
    let manifest = submitted.join("Cargo.toml");
    if manifest.is_file()
        && std::fs::read(&manifest).ok() != std::fs::read(official.join("Cargo.toml")).ok()
    {
        notes.push(
            "your Cargo.toml differs from the official one: it was ignored, the official one \
             was used"
                .to_string(),
        );
    }
    notes
}

fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if is_real_dir(&path) {
                walk(base, &path, out);
            } else if let (Ok(bytes), Ok(rel)) = (std::fs::read(&path), path.strip_prefix(base)) {
                out.insert(rel.to_path_buf(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Where the learner's code would read files while it compiles (`include_str!`,
/// `include_bytes!`, `include!`, a module's `#[path]`): the compiler runs outside the sandbox, on
/// a machine that holds the hidden tests and the other submissions, so grading refuses such a
/// chapter. One line per place, `src/<file>:<line>: <what>`.
pub fn compile_time_reads(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, bytes) in files_under(src) {
        let text = String::from_utf8_lossy(&bytes);
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            let mut words = words;
            let macro_name =
                words.find(|w| matches!(*w, "include" | "include_str" | "include_bytes"));
            let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
            let path_attr = ["#[path", "#![path", ",path=", "(path="]
                .iter()
                .any(|p| squeezed.contains(p));
            let what = match (macro_name, path_attr) {
                (Some(name), _) => format!("`{name}` reads a file while compiling"),
                (None, true) => "`#[path]` loads a module from another file".to_string(),
                (None, false) => continue,
            };
            found.push(format!("src/{}:{}: {what}", rel.display(), number + 1));
        }
    }
    found
}

/// Constructs an instructor may want to look at: they can read files, end the process, or reach
/// the test harness from inside the learner's code. They change no score.
const REVIEW_PATTERNS: &[(&str, &str)] = &[
    ("include!", "includes another file's code"),
    ("include_str!", "reads a file at compile time"),
    ("include_bytes!", "reads a file at compile time"),
    ("#[path", "loads a module from another path"),
    ("process::exit", "ends the process from inside the code"),
    ("process::abort", "aborts the process from inside the code"),
    ("env::args", "reads the command line (the test harness's)"),
    ("/proc/", "reads process files (its own, or the grader's)"),
    (
        "/dev/fd",
        "opens descriptors by path (the harness's log is one)",
    ),
    ("from_raw_fd", "writes to a descriptor it did not open"),
    (
        "link_section",
        "places code in a linker section (code that runs before main?)",
    ),
    ("logfile", "mentions the test harness's log file"),
];

fn review_notes(src: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    for (rel, bytes) in files_under(src) {
        let text = String::from_utf8_lossy(&bytes);
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (pattern, why) in REVIEW_PATTERNS {
                if code.contains(pattern) {
                    notes.push(format!(
                        "src/{}:{} uses `{pattern}`: {why}",
                        rel.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    notes
}

/// Counts what unpacking writes against the limits, and gathers notes on what it skipped.
struct Budget {
    limits: Limits,
    bytes: u64,
    files: usize,
    notes: Vec<String>,
    skipped_build: bool,
}

impl Budget {
    fn new(limits: &Limits) -> Budget {
        Budget {
            limits: *limits,
            bytes: 0,
            files: 0,
            notes: Vec::new(),
            skipped_build: false,
        }
    }

    fn count_file(&mut self) -> Result<()> {
        self.files += 1;
        if self.files > self.limits.max_files {
            bail!(
                "refused: the submission holds more than {} files (the limit); send only the \
                 exercises",
                self.limits.max_files
            );
        }
        Ok(())
    }

    /// Copies `from` into a new file at `to`, within the byte limit.
    fn write(&mut self, from: &mut dyn Read, to: &Path) -> Result<()> {
        self.count_file()?;
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let mut out = File::create(to).with_context(|| format!("writing {}", to.display()))?;
        let left = self.limits.max_bytes - self.bytes;
        let copied = std::io::copy(&mut from.take(left + 1), &mut out).map_err(|e| {
            if e.kind() == std::io::ErrorKind::FileTooLarge {
                anyhow::anyhow!("{e}")
            } else {
                anyhow::Error::from(e).context(format!("unpacking {}", to.display()))
            }
        })?;
        out.flush()?;
        if copied > left {
            bail!(
                "refused: the submission unpacks to more than {} MiB (the limit) — a zip bomb? \
                 Send only the exercises, without target/",
                self.limits.max_bytes >> 20
            );
        }
        self.bytes += copied;
        Ok(())
    }

    fn note_link(&mut self, name: &str, target: &str) {
        self.notes.push(format!(
            "{name} is a link (to {target}): links are not followed, it was left out"
        ));
    }
}

/// A path inside an archive, checked: `Ok(None)` for the archive's root itself, an error for an
/// absolute path or one that climbs out with `..`.
fn safe_relative(name: &str) -> Result<Option<PathBuf>> {
    let name = name.replace('\\', "/");
    let bytes = name.as_bytes();
    let has_drive = bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic();
    if name.starts_with('/') || has_drive {
        bail!("refused: the archive holds an absolute path ({name:?}); nothing was graded");
    }
    let mut out = PathBuf::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => bail!(
                "refused: the archive holds a path that climbs out of it with `..` ({name:?}); \
                 nothing was graded"
            ),
            part => out.push(part),
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Whether a link at `link` (a path inside the submission) to `target` stays inside it.
fn link_stays_inside(link: &Path, target: &str) -> bool {
    let target = target.replace('\\', "/");
    if target.starts_with('/') || target.as_bytes().get(1) == Some(&b':') {
        return false;
    }
    let mut depth: Vec<&str> = link
        .parent()
        .map(|p| {
            p.components()
                .filter_map(|c| c.as_os_str().to_str())
                .collect()
        })
        .unwrap_or_default();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            part => depth.push(part),
        }
    }
    true
}

/// Whether an archive path is build output or version control, not unpacked: a `target` or
/// `.git` folder outside any `src/`.
fn is_build_or_vcs(rel: &Path) -> bool {
    for part in rel.components() {
        match part.as_os_str().to_str() {
            Some("src") => return false,
            Some("target" | ".git" | "__MACOSX") => return true,
            _ => {}
        }
    }
    false
}

fn refuse_outside_link(name: &str, target: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "refused: {name} is a link to {target:?}, outside the submission; nothing was graded"
    )
}

fn unpack_zip(file: File, dest: &Path, budget: &mut Budget) -> Result<()> {
    let mut archive = zip::ZipArchive::new(file).context("refused: not a readable .zip archive")?;
    if archive.len() > budget.limits.max_files {
        bail!(
            "refused: the archive holds {} entries, more than the limit of {}",
            archive.len(),
            budget.limits.max_files
        );
    }
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .with_context(|| format!("refused: entry {i} of the .zip cannot be read"))?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let Some(rel) = safe_relative(&name)? else {
            continue;
        };
        if entry.is_symlink() {
            let mut target = String::new();
            (&mut entry)
                .take(4096)
                .read_to_string(&mut target)
                .context("refused: a link in the .zip cannot be read")?;
            if !link_stays_inside(&rel, &target) {
                return Err(refuse_outside_link(&name, &target));
            }
            budget.note_link(&name, &target);
            continue;
        }
        if is_build_or_vcs(&rel) {
            budget.skipped_build = true;
            continue;
        }
        if entry.is_dir() {
            budget.count_file()?;
            std::fs::create_dir_all(dest.join(&rel))
                .with_context(|| format!("creating {}", rel.display()))?;
            continue;
        }
        budget.write(&mut entry, &dest.join(&rel))?;
    }
    if budget.skipped_build {
        budget
            .notes
            .push("target/ and .git/ folders in the archive were not unpacked".to_string());
    }
    Ok(())
}

fn unpack_tar(reader: impl Read, dest: &Path, budget: &mut Budget) -> Result<()> {
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .context("refused: not a readable tar archive")?;
    for entry in entries {
        let mut entry = entry.map_err(stream_error)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(rel) = safe_relative(&name)? else {
            continue;
        };
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name_bytes()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            // A hard link names a path from the archive's root, a symbolic one from its folder.
            let inside = if kind.is_hard_link() {
                safe_relative(&target).is_ok()
            } else {
                link_stays_inside(&rel, &target)
            };
            if !inside {
                return Err(refuse_outside_link(&name, &target));
            }
            budget.note_link(&name, &target);
            continue;
        }
        if is_build_or_vcs(&rel) {
            budget.skipped_build = true;
            continue;
        }
        if kind.is_dir() {
            budget.count_file()?;
            std::fs::create_dir_all(dest.join(&rel))
                .with_context(|| format!("creating {}", rel.display()))?;
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            budget.write(&mut entry, &dest.join(&rel))?;
        } else if !kind.is_pax_global_extensions()
            && !kind.is_pax_local_extensions()
            && !kind.is_gnu_longname()
            && !kind.is_gnu_longlink()
        {
            budget
                .notes
                .push(format!("{name} is not a regular file or folder: left out"));
        }
    }
    if budget.skipped_build {
        budget
            .notes
            .push("target/ and .git/ folders in the archive were not unpacked".to_string());
    }
    Ok(())
}

fn stream_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::FileTooLarge {
        anyhow::anyhow!("{e}")
    } else {
        anyhow::Error::from(e).context("refused: the archive is damaged")
    }
}

/// A reader that fails, saying why, once it has given `limit` bytes: a compressed stream that
/// inflates without end (a gzip bomb) stops there.
struct CappedReader<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> CappedReader<R> {
    fn new(inner: R, limit: u64) -> CappedReader<R> {
        CappedReader {
            inner,
            left: limit,
            limit,
        }
    }
}

impl<R: Read> Read for CappedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // One byte more than allowed means the stream goes on: refuse it.
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "refused: the archive inflates to more than {} MiB (the limit) — a zip bomb?",
                    self.limit >> 20
                ),
            ));
        }
        let n = buf.len().min(self.left.try_into().unwrap_or(usize::MAX));
        let read = self.inner.read(&mut buf[..n])?;
        self.left -= read as u64;
        Ok(read)
    }
}

/// Copies `from` (a file or folder of the submission rooted at `root`) to `to`, never following
/// a link: one pointing outside `root` refuses the submission, one pointing inside is left out.
fn copy_tree(root: &Path, from: &Path, to: &Path, budget: &mut Budget) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(from).with_context(|| format!("reading {}", from.display()))?;
    let shown = from
        .strip_prefix(root)
        .unwrap_or(from)
        .display()
        .to_string();
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from)
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        let inside = std::fs::canonicalize(from).is_ok_and(|real| real.starts_with(root));
        if !inside {
            return Err(refuse_outside_link(&shown, &target));
        }
        budget.note_link(&shown, &target);
        return Ok(());
    }
    if meta.is_dir() {
        budget.count_file()?;
        std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
        let mut entries: Vec<_> = std::fs::read_dir(from)
            .with_context(|| format!("reading {}", from.display()))?
            .collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            copy_tree(root, &entry.path(), &to.join(entry.file_name()), budget)?;
        }
        return Ok(());
    }
    if meta.is_file() {
        let mut file = File::open(from).with_context(|| format!("opening {}", from.display()))?;
        return budget.write(&mut file, to);
    }
    budget
        .notes
        .push(format!("{shown} is not a regular file or folder: left out"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_of_reading_a_file_while_compiling_is_found_and_comments_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("lib.rs"),
            "// include_str! in a comment is fine\n\
             const A: &str = std::include_str!(\"x\");\n\
             use std::include_bytes as b;\n\
             #[cfg_attr(all(), path = \"/etc/x.rs\")]\n\
             # [ path = \"y.rs\" ] mod y;\n\
             include!(\"z.rs\");\n\
             fn path(path: &str) -> &str { path }\n",
        )
        .unwrap();
        assert_eq!(
            compile_time_reads(dir.path()),
            [
                "src/lib.rs:2: `include_str` reads a file while compiling",
                "src/lib.rs:3: `include_bytes` reads a file while compiling",
                "src/lib.rs:4: `#[path]` loads a module from another file",
                "src/lib.rs:5: `#[path]` loads a module from another file",
                "src/lib.rs:6: `include` reads a file while compiling",
            ]
        );
    }

    #[test]
    fn archive_paths_that_leave_the_archive_are_refused() {
        assert_eq!(
            safe_relative("a/./b/c.rs").unwrap(),
            Some(PathBuf::from("a/b/c.rs"))
        );
        assert_eq!(safe_relative("./").unwrap(), None);
        assert!(safe_relative("a/../../etc/passwd").is_err());
        assert!(safe_relative("a/../b").is_err());
        assert!(safe_relative("/etc/passwd").is_err());
        assert!(safe_relative("C:\\Windows\\x").is_err());
        assert!(safe_relative("..\\x").is_err());
    }

    #[test]
    fn links_are_inside_only_when_they_stay_under_the_root() {
        let link = Path::new("alice/ch01/src/lib.rs");
        assert!(link_stays_inside(link, "../../ch02/src/lib.rs"));
        assert!(link_stays_inside(link, "other.rs"));
        assert!(!link_stays_inside(link, "../../../../secret"));
        assert!(!link_stays_inside(link, "/etc/passwd"));
    }

    /// A chapter `ch01-x` (one exercise, one test) in `root`.
    fn one_chapter(root: &Path) -> Vec<Chapter> {
        let info = crate::course::chapter::ChapterInfo::parse(
            "title = \"X\"\n[[exercises]]\nname = \"f\"\ntitle = \"F\"\nhints = [\"a\", \"b\"]\n\
             [exercises.tests]\nf_works = 1\n",
        )
        .unwrap();
        vec![Chapter {
            name: "ch01-x".into(),
            dir: root.join("exercises/ch01-x"),
            solution_dir: root.join("solutions/ch01-x"),
            info,
        }]
    }

    #[test]
    fn a_folder_holding_only_a_tar_gz_is_graded_as_that_archive() {
        let dir = tempfile::tempdir().unwrap();
        let chapters = one_chapter(dir.path());
        let upload = dir.path().join("submission");
        std::fs::create_dir_all(upload.join("__MACOSX")).unwrap();
        let file = File::create(upload.join("c_halfdone.tar.gz")).unwrap();
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::default(),
        ));
        let body = b"pub fn f() {}\n";
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        tar.append_data(&mut header, "exercises/ch01-x/src/lib.rs", &body[..])
            .unwrap();
        tar.into_inner().unwrap().finish().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();

        let got = intake(&upload, "c", &chapters, &private, &Limits::default());
        assert_eq!(got.refused, None);
        assert_eq!(got.chapters.keys().collect::<Vec<_>>(), ["ch01-x"]);
        assert_eq!(
            got.notes,
            ["graded the archive c_halfdone.tar.gz (the only file uploaded)"]
        );
        assert_eq!(
            std::fs::read(got.chapters["ch01-x"].src.join("lib.rs")).unwrap(),
            body
        );
    }

    #[test]
    fn loose_rust_files_are_not_graded_and_the_note_says_what_to_upload() {
        let dir = tempfile::tempdir().unwrap();
        let chapters = one_chapter(dir.path());
        let upload = dir.path().join("submission");
        std::fs::create_dir(&upload).unwrap();
        std::fs::write(upload.join("lib.rs"), "pub fn f() {}\n").unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();

        let got = intake(&upload, "d", &chapters, &private, &Limits::default());
        assert!(got.chapters.is_empty());
        let [note] = got.notes.as_slice() else {
            panic!("one note: {:?}", got.notes);
        };
        assert!(note.contains("found lib.rs"), "{note}");
        assert!(note.contains("Loose .rs files cannot be graded"), "{note}");
        assert!(
            note.contains(
                "Upload your exercises/ folder (or each chapter's folder, such as ch01-x/"
            ),
            "{note}"
        );
    }

    #[test]
    fn a_chapter_folder_s_insides_without_the_folder_are_not_graded_and_the_note_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let chapters = one_chapter(dir.path());
        let upload = dir.path().join("submission");
        std::fs::create_dir_all(upload.join("src")).unwrap();
        std::fs::write(upload.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
        std::fs::write(upload.join("Cargo.toml"), "[package]\n").unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();

        let got = intake(&upload, "d", &chapters, &private, &Limits::default());
        assert!(got.chapters.is_empty());
        let [note] = got.notes.as_slice() else {
            panic!("one note: {:?}", got.notes);
        };
        assert!(note.contains("found Cargo.toml, src"), "{note}");
        assert!(
            note.contains(
                "This is what is inside a chapter's folder, without the folder: upload the \
                 folder itself (such as ch01-x/ with its src/ inside), or a .zip or .tar.gz of it"
            ),
            "{note}"
        );
    }

    #[test]
    fn a_class_folder_s_macos_metadata_and_hidden_entries_are_no_students() {
        let dir = tempfile::tempdir().unwrap();
        for folder in ["alice", "__MACOSX", ".git"] {
            std::fs::create_dir(dir.path().join(folder)).unwrap();
        }
        std::fs::write(dir.path().join("bob.zip"), b"").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
        let (entries, skipped) = class_entries(dir.path()).unwrap();
        assert_eq!(
            entries,
            [dir.path().join("alice"), dir.path().join("bob.zip")]
        );
        assert_eq!(skipped, [dir.path().join("notes.txt")]);
    }

    #[test]
    fn student_names_drop_the_archive_extension() {
        assert_eq!(student_name(Path::new("class/alice.zip")), "alice");
        assert_eq!(student_name(Path::new("class/bob.tar.gz")), "bob");
        assert_eq!(student_name(Path::new("class/carol.TGZ")), "carol");
        assert_eq!(student_name(Path::new("class/dave")), "dave");
        assert_eq!(student_name(Path::new("/x/solutions/.")), "solutions");
    }

    #[test]
    fn a_stream_that_inflates_past_its_limit_is_refused() {
        let mut exact = Vec::new();
        CappedReader::new(&[7u8; 10][..], 10)
            .read_to_end(&mut exact)
            .expect("exactly the limit is fine");
        assert_eq!(exact.len(), 10);
        let err = CappedReader::new(&[7u8; 11][..], 10)
            .read_to_end(&mut Vec::new())
            .expect_err("one byte more is refused");
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(err.to_string().contains("a zip bomb?"), "{err}");
    }

    #[test]
    fn a_tarball_skips_target_but_its_bytes_count_against_the_stream_limit() {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, size) in [
            ("wb/target/debug/big", 4096usize),
            ("wb/ch01/src/lib.rs", 10),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(size as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, path, &vec![b'x'; size][..])
                .unwrap();
        }
        let bytes = tar.into_inner().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let limits = Limits::default();
        let mut budget = Budget::new(&limits);
        unpack_tar(
            CappedReader::new(&bytes[..], limits.max_stream_bytes),
            dest.path(),
            &mut budget,
        )
        .expect("unpacks");
        assert!(dest.path().join("wb/ch01/src/lib.rs").is_file());
        assert!(!dest.path().join("wb/target").exists());
        assert_eq!(
            budget.notes,
            ["target/ and .git/ folders in the archive were not unpacked"]
        );
        let small = Limits {
            max_stream_bytes: 2048,
            ..Limits::default()
        };
        let err = unpack_tar(
            CappedReader::new(&bytes[..], small.max_stream_bytes),
            tempfile::tempdir().unwrap().path(),
            &mut Budget::new(&small),
        )
        .expect_err("the stream is longer than its limit");
        assert!(err.to_string().contains("inflates to more than"), "{err}");
    }

    #[test]
    fn build_output_outside_src_is_skipped() {
        assert!(is_build_or_vcs(Path::new("wb/target/debug/x")));
        assert!(is_build_or_vcs(Path::new(".git/config")));
        assert!(!is_build_or_vcs(Path::new("ch01/src/target/mod.rs")));
        assert!(!is_build_or_vcs(Path::new("ch01/src/lib.rs")));
    }
}
