//! `workbook verify` on throwaway workbooks: a sound chapter passes, every kind of breach is
//! reported with the test it concerns, and the shipped files are never touched.

use crate::common;

use common::{FakeRepo, chapter_toml};

const STUB: &str = "pub fn double(_x: u32) -> u32 {\n    todo!()\n}\n";
const SOLUTION: &str = "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n";
const TESTS: &str = "
#[test]
fn doubles_two() {
    assert_eq!(demo::double(2), 4);
}

#[test]
fn doubles_zero() {
    assert_eq!(demo::double(0), 0);
}

#[test]
fn doubles_large() {
    assert_eq!(demo::double(1 << 20), 1 << 21);
}
";

fn sound_chapter(repo: &FakeRepo, name: &str) {
    let toml = chapter_toml(
        "Demo",
        &[
            ("two", &["doubles_two"]),
            ("zero", &["doubles_zero"]),
            ("large", &["doubles_large"]),
        ],
    );
    let tests = TESTS.replace("demo::", &format!("{}::", name.replace('-', "_")));
    repo.chapter(name, STUB, SOLUTION, &[("demo", &tests)], Some(&toml));
}

#[test]
fn a_sound_chapter_verifies_and_nothing_shipped_changes() {
    let repo = FakeRepo::new();
    sound_chapter(&repo, "ch01-demo");
    let before = repo.snapshot();
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("verify")
            .current_dir(repo.root().join("exercises/ch01-demo/src")),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("ch01-demo — Demo (3 exercises, 3 tests, 3 points)"),
        "{stdout}"
    );
    let row: Vec<&str> = stdout
        .lines()
        .find(|l| l.contains("doubles_two"))
        .expect("a row for doubles_two")
        .split_whitespace()
        .collect();
    assert_eq!(row, ["two", "doubles_two", "1", "fails", "passes"]);
    assert!(stdout.contains("verify: all 1 chapter(s) ok"), "{stdout}");
    assert!(
        stderr.contains("ch01-demo stub: running 3 tests"),
        "{stderr}"
    );
    assert!(
        repo.snapshot() == before,
        "verify changed exercises/ or solutions/"
    );
}

#[test]
fn every_breach_is_listed_and_verify_fails() {
    let repo = FakeRepo::new();
    sound_chapter(&repo, "ch01-demo");
    // ch02: a test missing from chapter.toml, one listed but absent, a stub that passes, a
    // solution that fails, too few exercises and hints.
    let toml = "title = \"Broken\"\n\n[[exercises]]\nname = \"only\"\ntitle = \"Only\"\nhints = [\"one\"]\n\
                [exercises.tests]\npasses_on_stub = 1\nfails_on_solution = 1\nghost = 2\n";
    let tests = "
#[test]
fn passes_on_stub() {}

#[test]
fn fails_on_solution() {
    assert_eq!(ch02_broken::double(2), 5, \"five\");
}

#[test]
fn unlisted() {
    ch02_broken::double(1);
}
";
    repo.chapter("ch02-broken", STUB, SOLUTION, &[("t", tests)], Some(toml));
    // ch03: no chapter.toml yet.
    repo.chapter("ch03-later", STUB, SOLUTION, &[], None);

    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .args(["verify", "--jobs", "2"]),
    );
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    for needle in [
        "verify: 1 of 3 chapter(s) ok; 7 problem(s):",
        "ch02-broken: chapter.toml: the chapter has 1 exercise(s); it needs at least 3",
        "ch02-broken: chapter.toml: exercise only has 1 hint(s); it needs at least 2",
        "ch02-broken: test ghost: listed in chapter.toml (exercise only) but no such test exists",
        "ch02-broken: test passes_on_stub: passes on the stub (it must fail until the exercise is solved)",
        "ch02-broken: test fails_on_solution: fails on the solution: five; yours: 4; expected: 5",
        "ch02-broken: test unlisted: not listed in chapter.toml under any exercise",
        "ch03-later: chapter ch03-later has no chapter.toml",
        "(not in chapter.toml)  unlisted",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
}

#[test]
fn a_stub_that_does_not_compile_is_reported_with_the_error() {
    let repo = FakeRepo::new();
    sound_chapter(&repo, "ch01-demo");
    repo.write(
        "exercises/ch01-demo/src/lib.rs",
        "pub fn double(x: u32) -> u32 {\n    \"two\"\n}\n",
    );
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .args(["verify", "ch01"]),
    );
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("ch01-demo: the stub does not compile: error[E0308]: mismatched types"),
        "{stdout}"
    );
    assert!(stdout.contains("src/lib.rs:2:5"), "{stdout}");
}

#[test]
fn outside_a_workbook_verify_says_where_it_looked() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (output, _, stderr) = common::run(common::workbook().arg("verify").current_dir(dir.path()));
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: not inside the GPU Memory Workbook: no directory from"),
        "{stderr}"
    );
    assert!(stderr.contains("--root"), "{stderr}");
}

#[test]
fn an_unknown_chapter_is_an_error_listing_the_chapters() {
    let repo = FakeRepo::new();
    sound_chapter(&repo, "ch01-demo");
    let (output, _, stderr) = common::run(
        common::workbook()
            .args(["verify", "ch09"])
            .env("WORKBOOK_ROOT", repo.root()),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("there is no chapter \"ch09\"; the chapters are: ch01-demo"),
        "{stderr}"
    );
}
