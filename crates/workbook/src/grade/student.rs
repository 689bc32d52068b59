//! `workbook export student`: the repository a class receives.
//!
//! It is this repository without what learners must not have: no `solutions/`, each chapter's
//! solution page (`book/src/<chapter>-solution.md`) replaced by a page saying that the solutions
//! come from the instructor, no CLI tests (they grade the reference solutions and carry the
//! grader's hidden-test fixtures), and a README for learners. Only the folders the course needs
//! are carried (its `CARRIED` list), so an instructor's `submissions/` or `hidden/` folder beside them
//! never travels. Without `solutions/`, `workbook solution` and the book know they are in the
//! student edition ([`crate::course::app_state::Repo::is_student_edition`]).

use crate::course::app_state::Repo;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};

/// `workbook export student`.
#[derive(Debug, Args)]
pub struct ExportStudentArgs {
    /// The folder to write the student edition into (new or empty, outside this repository).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Top-level entries of the repository the student edition carries (`README.md` is written anew).
const CARRIED: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    ".gitignore",
    "crates",
    "exercises",
    "book",
    // The book's translations (`workbook start --lang ko`).
    "po",
    "bench",
    "conformance",
];

/// Paths (relative to the root) never carried: the book's build output, the CLI's own tests, and
/// the conformance test that compiles chapter 6's reference solution.
const SKIPPED: &[&str] = &[
    "book/book",
    "book/src/quiz",
    "crates/workbook/tests",
    "crates/gpumem/tests/conformance_gradscaler.rs",
];

/// Folder names never carried, wherever they are.
const SKIPPED_DIRS: &[&str] = &["target", ".workbook", ".git"];

/// The README of the student edition: the two commands a learner runs.
pub const README: &str = "# GPU Memory Workbook

An interactive workbook, in Rust, that teaches how GPU memory really behaves. You read it as a
book in a browser and solve one small Rust crate per chapter; the tests check what your code does
to memory, not only what it returns. Everything runs on a machine without a GPU.

This is the student edition, from your instructor: the reference solutions are not in it, and your
instructor grades your work with the official tests.

## The two commands

Check your machine, build the book, serve it on 127.0.0.1 and show your progress (Ctrl-C stops the
server; `start --no-serve` builds and reports only):

```sh
cargo run -p workbook -- start
```

Run the tests of the chapter you are working on (the first one not done, or name it: `check ch03`),
and see, per exercise, what passes and why not:

```sh
cargo run -p workbook -- check
```

Both need only a Rust toolchain (stable, 1.88 or newer: <https://rustup.rs>).

## More commands

With `cargo run -p workbook --` in front of each: `list` (every exercise and its state), `watch`
(check on every save), `hint <chapter>` (the next hint), `reset <chapter>` (the original stubs back,
your files backed up first). Your progress is kept in `.workbook/`, which git ignores.

## What to hand in

Your `src/` files are graded, with the official tests (your copy of `tests/` is not used). Hand
them in as your instructor asks: pushed to your repository, or uploaded to Gradescope.

On Gradescope each chapter is usually an assignment of its own. For a chapter's assignment,
upload that chapter's folder, zipped: for chapter 1, make a zip of the folder
`exercises/ch01-availability` itself (the zip holds `ch01-availability/src/lib.rs`), for example
with `cd exercises && zip -r ch01.zip ch01-availability`, and upload `ch01.zip`. A `.tar.gz` of the
folder (`tar czf ch01.tar.gz -C exercises ch01-availability`), a zip of your whole `exercises/`
folder, or your GitHub repository works too: only the assignment's chapter is graded. What cannot
be graded, and scores 0: `.rs` files uploaded alone (such as `lib.rs`) and a zip of what is inside
the chapter's folder (`src/`, `Cargo.toml`, ... at the top), since neither says which chapter it
is; the autograder's output then says what to upload.
";

/// The page that replaces a chapter's solution page: its title, and where the solutions are.
pub fn solution_page(title_line: Option<&str>, chapter: &str) -> String {
    let title = title_line.unwrap_or("# Solution");
    format!(
        "{title}\n\n\
         This is the student edition of the workbook: the reference solutions are not in it. They \
         come from your instructor, when and as your course decides.\n\n\
         Until then the tests say what fails and why, and the hints get more explicit each time \
         you ask:\n\n\
         ```console\n\
         $ cargo run -p workbook -- check {chapter}\n\
         $ cargo run -p workbook -- hint {chapter}\n\
         ```\n\n\
         Back to [the chapter]({chapter}.md).\n"
    )
}

/// What `export student` wrote.
#[derive(Debug)]
pub struct Written {
    /// How many files the edition holds.
    pub files: usize,
    /// The solution pages it replaced, by chapter.
    pub replaced_pages: Vec<String>,
}

/// Writes the student edition of `repo` into `out` (new or empty, outside the repository).
pub fn export(repo: &Repo, out: &Path) -> Result<Written> {
    check_destination(repo, out)?;
    let chapters = repo.chapter_names()?;
    refuse_solved_stubs(repo, &chapters)?;
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in CARRIED {
        let path = repo.root.join(entry);
        if path.is_file() {
            files.push((entry.to_string(), path));
        } else if path.is_dir() {
            collect(&path, entry, &mut files)?;
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut replaced_pages = Vec::new();
    for (rel, path) in &files {
        let dest = out.join(rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        if let Some(chapter) = solution_page_of(rel, &chapters) {
            let original = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let title = original.lines().next().filter(|l| l.starts_with("# "));
            std::fs::write(&dest, solution_page(title, chapter))
                .with_context(|| format!("writing {}", dest.display()))?;
            replaced_pages.push(chapter.to_string());
        } else {
            std::fs::copy(path, &dest)
                .with_context(|| format!("copying {} to {}", path.display(), dest.display()))?;
        }
    }
    let readme = out.join("README.md");
    std::fs::write(&readme, README).with_context(|| format!("writing {}", readme.display()))?;
    Ok(Written {
        files: files.len() + 1,
        replaced_pages,
    })
}

/// `out` must be new or empty (nothing of anyone's is overwritten) and outside the repository
/// (the edition is a repository of its own, and must not end up inside the copy it is made from).
fn check_destination(repo: &Repo, out: &Path) -> Result<()> {
    let absolute =
        std::path::absolute(out).with_context(|| format!("resolving {}", out.display()))?;
    let resolved = match absolute.canonicalize() {
        Ok(path) => path,
        // Not there yet: its nearest existing ancestor decides where it is.
        Err(_) => {
            let existing = absolute
                .ancestors()
                .find(|a| a.exists())
                .unwrap_or(Path::new("/"));
            let rest = absolute.strip_prefix(existing).unwrap_or(Path::new(""));
            existing
                .canonicalize()
                .with_context(|| format!("resolving {}", existing.display()))?
                .join(rest)
        }
    };
    let root = repo
        .root
        .canonicalize()
        .with_context(|| format!("resolving {}", repo.root.display()))?;
    if resolved.starts_with(&root) {
        bail!(
            "{} is inside the workbook's repository ({}): the student edition is a repository of \
             its own; write it outside, e.g. --out ../gpu-memory-workbook-student",
            out.display(),
            root.display()
        );
    }
    if resolved.exists() {
        if !resolved.is_dir() {
            bail!("{} exists and is not a folder", out.display());
        }
        let mut entries =
            std::fs::read_dir(&resolved).with_context(|| format!("reading {}", out.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is not empty: the student edition is written into a new or empty folder, \
                 never over files already there",
                out.display()
            );
        }
    }
    Ok(())
}

/// Refuses when a chapter's stub files are the reference solution's (someone solved the
/// exercises in place): the edition would hand the answers out as the stubs.
fn refuse_solved_stubs(repo: &Repo, chapters: &[String]) -> Result<()> {
    for chapter in chapters {
        let solution_src = repo.solutions_dir().join(chapter).join("src");
        let stub_src = repo.exercises_dir().join(chapter).join("src");
        let Ok(entries) = std::fs::read_dir(&solution_src) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(solution) = std::fs::read(entry.path()) else {
                continue;
            };
            let stub = stub_src.join(entry.file_name());
            if std::fs::read(&stub).is_ok_and(|bytes| bytes == solution) {
                bail!(
                    "{} is the reference solution ({} holds the same): the student edition would \
                     hand it out. Put the stubs back (`workbook reset {chapter}`, or export from a \
                     fresh clone)",
                    stub.display(),
                    entry.path().display()
                );
            }
        }
    }
    Ok(())
}

/// The chapter whose solution page `rel` is (`book/src/<chapter>-solution.md`), if it is one.
fn solution_page_of<'a>(rel: &str, chapters: &'a [String]) -> Option<&'a str> {
    let page = rel.strip_prefix("book/src/")?.strip_suffix(".md")?;
    let chapter = page.strip_suffix(crate::book::pages::SOLUTION_SUFFIX)?;
    chapters
        .iter()
        .find(|c| c.as_str() == chapter)
        .map(String::as_str)
}

/// Every file under `dir`, named `prefix/<relative path>`, sorted, without the skipped paths;
/// links are refused.
fn collect(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            bail!("{} has a name that is not UTF-8", entry.path().display());
        };
        let inside = format!("{prefix}/{name}");
        if SKIPPED.contains(&inside.as_str()) {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name) {
                collect(&entry.path(), &inside, out)?;
            }
        } else if kind.is_file() {
            out.push((inside, entry.path()));
        } else {
            bail!(
                "{} is a link: the student edition carries plain files only",
                entry.path().display()
            );
        }
    }
    Ok(())
}

/// `workbook export student`: writes the edition and says what to do with it.
pub fn command(root: Option<&Path>, out: &Path) -> Result<()> {
    let repo = Repo::from_option(root)?;
    let written = export(&repo, out)?;
    println!(
        "{}: the student edition ({} files; no solutions/, {} solution pages replaced by a page \
         saying the solutions come from you, no hidden tests).",
        out.display(),
        written.files,
        written.replaced_pages.len()
    );
    println!(
        "Next: make it a repository (cd {} && git init && git add -A && git commit -m \"Student \
         edition\"), push it to GitHub, mark it a template repository, and use it as the starter \
         code of a GitHub Classroom assignment.",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_chapter_s_solution_page_is_a_solution_page() {
        let chapters = vec!["ch01-a".to_string(), "ch02-b".to_string()];
        assert_eq!(
            solution_page_of("book/src/ch01-a-solution.md", &chapters),
            Some("ch01-a")
        );
        assert_eq!(solution_page_of("book/src/ch01-a.md", &chapters), None);
        assert_eq!(
            solution_page_of("book/src/ch03-c-solution.md", &chapters),
            None
        );
        assert_eq!(
            solution_page_of("book/src/sub/ch01-a-solution.md", &chapters),
            None
        );
    }

    #[test]
    fn the_replacing_page_keeps_the_title_and_names_the_chapter_s_commands() {
        let page = solution_page(Some("# Solution: Is there a GPU?"), "ch01-availability");
        assert!(page.starts_with("# Solution: Is there a GPU?\n"), "{page}");
        assert!(page.contains("come from your instructor"), "{page}");
        assert!(
            page.contains("$ cargo run -p workbook -- check ch01-availability"),
            "{page}"
        );
        assert!(!page.contains("{{#include"), "{page}");
    }
}
