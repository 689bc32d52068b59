//! `workbook export student`: the repository a class receives holds no reference solution, its
//! book builds with the solution pages replaced, its README's two commands (`start`, `check`) work
//! in it, `solution` says the solutions come from the instructor, and the export never writes over
//! files or hands out stubs that are the solutions.

use crate::common;

use common::{FakeRepo, chapter_toml};
use std::path::{Path, PathBuf};
use std::process::Stdio;

const STUB: &str = "pub fn double(_x: u32) -> u32 {\n    todo!()\n}\n";
const SOLUTION: &str = "pub fn double(x: u32) -> u32 {\n    // ANCHOR: double\n    x * 2\n    // ANCHOR_END: double\n}\n";
const TESTS: &str = "#[test]\nfn doubles_two() {\n    assert_eq!(ch01_demo::double(2), 4);\n}\n";

/// A workbook of one chapter, with a book whose solution page includes the reference solution.
fn demo_workbook() -> FakeRepo {
    let repo = FakeRepo::new();
    repo.chapter(
        "ch01-demo",
        STUB,
        SOLUTION,
        &[("demo", TESTS)],
        Some(&chapter_toml("Demo", &[("double", &["doubles_two"])])),
    );
    repo.write(
        "book/book.toml",
        "[book]\ntitle = \"T\"\nsrc = \"src\"\n\n[build]\ncreate-missing = false\n",
    );
    repo.write(
        "book/src/SUMMARY.md",
        "# Summary\n\n- [Demo](ch01-demo.md)\n  - [Solution](ch01-demo-solution.md)\n",
    );
    repo.write(
        "book/src/ch01-demo.md",
        "# Demo\n\nDouble it.\n\n[The solutions, explained](ch01-demo-solution.md)\n",
    );
    repo.write(
        "book/src/ch01-demo-solution.md",
        "# Solution: Demo\n\n```rust\n{{#include ../../solutions/ch01-demo/src/lib.rs:double}}\n```\n",
    );
    repo.write(".gitignore", "/target\n/book/book\n/.workbook\n");
    // What an instructor keeps beside the course never travels.
    repo.write("hidden/ch01-demo/secret.rs", "#[test]\nfn secret() {}\n");
    repo.write("submissions/alice/ch01-demo/src/lib.rs", SOLUTION);
    repo
}

fn workbook(root: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(root)
            .args(args)
            .stdin(Stdio::null()),
    );
    (output.status.code(), stdout, stderr)
}

/// Every file under `dir`, relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    common::snapshot(&[dir.to_path_buf()])
        .into_iter()
        .map(|(path, _)| path.strip_prefix(dir).expect("under dir").to_path_buf())
        .collect()
}

#[test]
fn the_student_edition_starts_checks_and_holds_no_solution() {
    let repo = demo_workbook();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let edition = scratch.path().join("student");
    let (code, out, err) = workbook(
        repo.root(),
        &["export", "student", "--out", edition.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("1 solution pages replaced"), "{out}");
    assert!(out.contains("template repository"), "{out}");

    assert_eq!(
        files(&edition),
        [
            ".gitignore",
            "Cargo.toml",
            "README.md",
            "book/book.toml",
            "book/src/SUMMARY.md",
            "book/src/ch01-demo-solution.md",
            "book/src/ch01-demo.md",
            "exercises/ch01-demo/Cargo.toml",
            "exercises/ch01-demo/chapter.toml",
            "exercises/ch01-demo/src/lib.rs",
            "exercises/ch01-demo/tests/demo.rs",
        ]
        .map(PathBuf::from),
        "no solutions/, hidden/ or submissions/"
    );
    let page = std::fs::read_to_string(edition.join("book/src/ch01-demo-solution.md")).unwrap();
    assert!(page.starts_with("# Solution: Demo\n"), "{page}");
    assert!(page.contains("come from your instructor"), "{page}");
    assert!(!page.contains("solutions/"), "{page}");
    let readme = std::fs::read_to_string(edition.join("README.md")).unwrap();
    for command in [
        "cargo run -p workbook -- start\n",
        "cargo run -p workbook -- check\n",
    ] {
        assert!(readme.contains(command), "{readme}");
    }

    // The README's two commands, run by this build of workbook in the edition.
    let (code, out, err) = workbook(&edition, &["start", "--no-serve"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("book        built in book/book"), "{out}");
    assert!(out.contains("`check ch01-demo` is ready"), "{out}");
    let html = std::fs::read_to_string(edition.join("book/book/ch01-demo-solution.html")).unwrap();
    assert!(html.contains("come from your instructor"), "{html}");
    assert!(
        !html.contains("wb-gate-open"),
        "a page with no solution has no gate to open"
    );
    let (code, out, err) = workbook(&edition, &["check"]);
    assert_eq!(code, Some(1), "the stub fails its test:\n{out}\n{err}");
    assert!(out.contains("0 of 1 tests pass"), "{out}");

    std::fs::write(
        edition.join("exercises/ch01-demo/src/lib.rs"),
        "pub fn double(x: u32) -> u32 {\n    x + x\n}\n",
    )
    .unwrap();
    let (code, out, err) = workbook(&edition, &["check", "ch01"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("ch01-demo is done."), "{out}");
    assert!(!out.contains("solution"), "{out}");
    let (code, out, err) = workbook(&edition, &["list"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("Your instructor has the reference solutions"),
        "{out}"
    );
    for args in [&["solution", "ch01"][..], &["solution", "ch01", "--force"]] {
        let (code, out, err) = workbook(&edition, args);
        assert_eq!(code, Some(1), "{out}\n{err}");
        assert!(out.contains("They come from your instructor."), "{out}");
        assert!(!out.contains("x * 2"), "{out}");
    }
}

#[test]
fn the_export_writes_only_into_a_new_or_empty_folder_outside_the_repository() {
    let repo = demo_workbook();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let full = scratch.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("notes.txt"), "mine").unwrap();
    let (code, _, err) = workbook(
        repo.root(),
        &["export", "student", "--out", full.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(full.join("notes.txt")).unwrap(),
        "mine"
    );

    let inside = repo.root().join("student");
    let (code, _, err) = workbook(
        repo.root(),
        &["export", "student", "--out", inside.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is inside the workbook's repository"), "{err}");
    assert!(!inside.exists());
}

#[test]
fn the_export_refuses_stubs_that_are_the_reference_solution() {
    let repo = demo_workbook();
    repo.write("exercises/ch01-demo/src/lib.rs", SOLUTION);
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let out = scratch.path().join("student");
    let (code, _, err) = workbook(
        repo.root(),
        &["export", "student", "--out", out.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("exercises/ch01-demo/src/lib.rs is the reference solution"),
        "{err}"
    );
    assert!(err.contains("workbook reset ch01-demo"), "{err}");
}

/// This workbook's own student edition: not one solution file in it, and its book builds.
#[test]
fn this_workbook_s_student_edition_builds_its_book_without_a_solution() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let edition = scratch.path().join("student");
    let (code, out, err) = workbook(
        &root,
        &["export", "student", "--out", edition.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    let chapters: Vec<String> = std::fs::read_dir(root.join("exercises"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("chapter.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        out.contains(&format!("{} solution pages replaced", chapters.len())),
        "{out}"
    );
    assert!(!edition.join("solutions").exists());
    assert!(!edition.join("crates/workbook/tests").exists());

    let solutions: Vec<Vec<u8>> = common::snapshot(&[root.join("solutions")])
        .into_iter()
        .map(|(_, bytes)| bytes)
        .collect();
    assert!(!solutions.is_empty());
    for (path, bytes) in common::snapshot(std::slice::from_ref(&edition)) {
        assert!(
            !solutions.contains(&bytes),
            "{} is a reference solution's file",
            path.display()
        );
        // An include, a `#[path]`: anything that would read a solution from where it was.
        assert!(
            !String::from_utf8_lossy(&bytes).contains("../solutions/"),
            "{} still reads the reference solutions",
            path.display()
        );
    }

    let dest = scratch.path().join("html");
    let (code, out, err) = workbook(&edition, &["book", "--dest", dest.to_str().unwrap()]);
    assert_eq!(code, Some(0), "the edition's book builds:\n{out}\n{err}");
    for chapter in &chapters {
        let html = std::fs::read_to_string(dest.join(format!("{chapter}-solution.html")))
            .unwrap_or_else(|e| panic!("{chapter}'s solution page: {e}"));
        assert!(html.contains("come from your instructor"), "{chapter}");
    }
    let (code, out, _) = workbook(&edition, &["solution", "ch01"]);
    assert_eq!(code, Some(1));
    assert!(out.contains("They come from your instructor."), "{out}");
}
