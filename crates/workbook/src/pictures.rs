//! `workbook pictures`: the book's pictures of memory, made from the allocator's own history.
//!
//! A chapter has pictures when its `examples/walkthrough.rs` reads [`SNAPSHOT_VAR`]: run with it
//! set, the walkthrough records the allocator's history from the start and writes its snapshot to
//! that file. This command runs each such walkthrough on the `cpu` device (the same numbers on
//! every machine), draws the snapshot with [`crate::viz`], and writes
//! `book/src/pictures/<chapter>-timeline.svg` and `<chapter>-segments.svg`. With `--check` it
//! writes nothing and fails when a committed picture differs from what the code makes now.

use crate::app_state::Repo;
use crate::viz;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The variable a walkthrough reads (through `gpumem::SnapshotRequest`) for the file to write its
/// snapshot to.
pub use gpumem::history::SNAPSHOT_VAR;

/// Where the pictures go, from the repository's root.
pub const PICTURES_DIR: &str = "book/src/pictures";

/// The pictures drawn from each chapter's snapshot: the file name's suffix and the view.
const KINDS: [(&str, viz::View); 2] = [
    ("timeline", viz::View::Timeline),
    ("segments", viz::View::Segments),
];

/// One picture: its file name under [`PICTURES_DIR`] and its SVG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    /// `<chapter>-timeline.svg` or `<chapter>-segments.svg`.
    pub file: String,
    /// The SVG document.
    pub svg: String,
}

/// `workbook pictures`: makes (or with `--check`, checks) the pictures of the chapters asked for.
pub fn run(root: Option<&Path>, args: &crate::cli::PicturesArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let with_pictures = chapters_with_pictures(&repo)?;
    let chapters = if args.chapters.is_empty() {
        with_pictures.clone()
    } else {
        let chosen = repo.select_chapters(&args.chapters)?;
        for chapter in &chosen {
            if !with_pictures.contains(chapter) {
                bail!(
                    "{chapter} has no pictures: its examples/walkthrough.rs does not read \
                     {SNAPSHOT_VAR} (see `workbook pictures --help`)"
                );
            }
        }
        chosen
    };
    if chapters.is_empty() {
        bail!("no chapter's walkthrough reads {SNAPSHOT_VAR}: there are no pictures to make");
    }
    let dir = repo.root.join(PICTURES_DIR);
    let scratch = tempfile::Builder::new()
        .prefix("workbook-pictures-")
        .tempdir()
        .context("making a temporary directory for the snapshots")?;
    let mut problems = Vec::new();
    let mut made = Vec::new();
    for chapter in &chapters {
        eprintln!("{chapter}: running its walkthrough on cpu");
        let snapshot = snapshot_of(&repo, chapter, scratch.path())?;
        made.extend(pictures_of(chapter, &snapshot));
    }
    if args.check {
        problems.extend(differences(&dir, &made));
        if args.chapters.is_empty() {
            problems.extend(
                orphans(&dir, &with_pictures)?
                    .into_iter()
                    .map(|f| format!("{PICTURES_DIR}/{f}: no chapter's walkthrough makes it")),
            );
        }
        if problems.is_empty() {
            println!(
                "{} pictures of {} chapters are up to date",
                made.len(),
                chapters.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!("the book's pictures are not what the code makes now:");
        for problem in &problems {
            println!("  {problem}");
        }
        println!(
            "run `cargo run -p workbook -- pictures` and commit {PICTURES_DIR}/ (delete pictures no \
             chapter makes)"
        );
        return Ok(ExitCode::FAILURE);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for picture in &made {
        let path = dir.join(&picture.file);
        let state = match std::fs::read_to_string(&path) {
            Ok(old) if old == picture.svg => "unchanged",
            Ok(_) => "updated",
            Err(_) => "new",
        };
        std::fs::write(&path, &picture.svg)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{PICTURES_DIR}/{} ({state})", picture.file);
    }
    Ok(ExitCode::SUCCESS)
}

/// The chapters whose `examples/walkthrough.rs` reads [`SNAPSHOT_VAR`], in order.
pub fn chapters_with_pictures(repo: &Repo) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for chapter in repo.chapter_names()? {
        let walkthrough = repo
            .exercises_dir()
            .join(&chapter)
            .join("examples")
            .join("walkthrough.rs");
        match std::fs::read_to_string(&walkthrough) {
            Ok(text) if text.contains(SNAPSHOT_VAR) || text.contains("SnapshotRequest") => {
                found.push(chapter)
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("reading {}", walkthrough.display()));
            }
        }
    }
    Ok(found)
}

/// Runs `chapter`'s walkthrough on the `cpu` device with [`SNAPSHOT_VAR`] set, and reads the
/// snapshot it wrote into `scratch`.
pub fn snapshot_of(repo: &Repo, chapter: &str, scratch: &Path) -> Result<gpumem::Snapshot> {
    let file = scratch.join(format!("{chapter}.json"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args(["run", "--quiet", "-p", chapter, "--example", "walkthrough"])
        .current_dir(&repo.root)
        .env("GPUMEM_DEVICE", "cpu")
        .env(SNAPSHOT_VAR, &file)
        // The pictures show the allocator's default rules and a cpu device of the default size.
        .env_remove("GPUMEM_ALLOC_CONF")
        .env_remove("GPUMEM_CPU_CAPACITY")
        .output()
        .with_context(|| format!("running {cargo:?} for {chapter}'s walkthrough"))?;
    if !output.status.success() {
        bail!(
            "{chapter}'s walkthrough failed ({}):\n{}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 30)
        );
    }
    if !file.is_file() {
        bail!(
            "{chapter}'s walkthrough ran but wrote no snapshot to {}: it must write \
             `dev.snapshot().to_json()` to the file {SNAPSHOT_VAR} names",
            file.display()
        );
    }
    viz::read_snapshot(&file)
}

/// The pictures of one chapter's snapshot.
pub fn pictures_of(chapter: &str, snapshot: &gpumem::Snapshot) -> Vec<Picture> {
    KINDS
        .iter()
        .map(|(suffix, view)| Picture {
            file: format!("{chapter}-{suffix}.svg"),
            svg: viz::render(snapshot, *view),
        })
        .collect()
}

/// What differs between the pictures `made` and the files in `dir`: one line per picture.
pub fn differences(dir: &Path, made: &[Picture]) -> Vec<String> {
    let mut out = Vec::new();
    for picture in made {
        let path: PathBuf = dir.join(&picture.file);
        match std::fs::read_to_string(&path) {
            Ok(old) if old == picture.svg => {}
            Ok(_) => out.push(format!("{PICTURES_DIR}/{}: out of date", picture.file)),
            Err(_) => out.push(format!("{PICTURES_DIR}/{}: missing", picture.file)),
        }
    }
    out
}

/// Pictures in `dir` named like a chapter's (`*-timeline.svg`, `*-segments.svg`) that none of
/// `chapters` makes.
pub fn orphans(dir: &Path, chapters: &[String]) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let name = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        let chapter = KINDS
            .iter()
            .find_map(|(suffix, _)| name.strip_suffix(&format!("-{suffix}.svg")));
        if let Some(chapter) = chapter
            && !chapters.iter().any(|c| c == chapter)
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture(file: &str, svg: &str) -> Picture {
        Picture {
            file: file.to_string(),
            svg: svg.to_string(),
        }
    }

    #[test]
    fn differences_name_missing_and_changed_pictures() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a-timeline.svg"), "<svg>old</svg>").unwrap();
        std::fs::write(dir.path().join("a-segments.svg"), "<svg>same</svg>").unwrap();
        let made = [
            picture("a-timeline.svg", "<svg>new</svg>"),
            picture("a-segments.svg", "<svg>same</svg>"),
            picture("b-timeline.svg", "<svg/>"),
        ];
        assert_eq!(
            differences(dir.path(), &made),
            vec![
                "book/src/pictures/a-timeline.svg: out of date",
                "book/src/pictures/b-timeline.svg: missing",
            ]
        );
    }

    #[test]
    fn orphans_are_chapter_pictures_no_chapter_makes() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["a-timeline.svg", "gone-segments.svg", "diagram.svg"] {
            std::fs::write(dir.path().join(f), "<svg/>").unwrap();
        }
        assert_eq!(
            orphans(dir.path(), &["a".to_string()]).unwrap(),
            vec!["gone-segments.svg"]
        );
        assert!(orphans(&dir.path().join("none"), &[]).unwrap().is_empty());
    }

    #[test]
    fn each_snapshot_gives_a_timeline_and_a_segment_map() {
        let snapshot = gpumem::Snapshot {
            device: "cpu".to_string(),
            segments: Vec::new(),
            trace: Vec::new(),
            allocator_settings: Default::default(),
        };
        let made = pictures_of("ch09-x", &snapshot);
        let files: Vec<&str> = made.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(files, ["ch09-x-timeline.svg", "ch09-x-segments.svg"]);
        assert!(made[0].svg.contains("Active memory timeline"));
        assert!(made[1].svg.contains("Segments · cpu"));
    }
}
