//! The learner's commands on throwaway workbooks: `check` and `list` states and exit codes, hints
//! that get more explicit and are remembered, solutions shown only once earned (or forced),
//! `reset` with its backup and its refusal, a corrupt state file, and `start --no-serve`.

use crate::common;

use common::{FakeRepo, chapter_toml};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const STUB: &str = "pub fn double(_x: u32) -> u32 {\n    todo!()\n}\n\n\
                    pub fn triple(_x: u32) -> u32 {\n    todo!()\n}\n\n\
                    pub fn square(_x: u32) -> u32 {\n    todo!()\n}\n";
const SOLUTION: &str = "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n\n\
                        pub fn triple(x: u32) -> u32 {\n    x * 3\n}\n\n\
                        pub fn square(x: u32) -> u32 {\n    x * x\n}\n";
/// `double` solved, `triple` wrong, `square` untouched.
const HALFWAY: &str = "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n\n\
                       pub fn triple(x: u32) -> u32 {\n    x * 2\n}\n\n\
                       pub fn square(_x: u32) -> u32 {\n    todo!()\n}\n";
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
fn triples_two() {
    assert_eq!(demo::triple(2), 6, \"two times three\");
}

#[test]
fn squares_three() {
    assert_eq!(demo::square(3), 9);
}
";

/// A chapter of three exercises (double: 2 tests; triple: 1 test, 3 hints; square: 1 test).
fn demo_chapter(repo: &FakeRepo, name: &str) {
    let mut toml = chapter_toml(
        "Demo",
        &[
            ("double", &["doubles_two", "doubles_zero"]),
            ("triple", &["triples_two"]),
            ("square", &["squares_three"]),
        ],
    );
    // triple gets a third hint.
    toml = toml.replacen(
        "name = \"triple\"\ntitle = \"Do triple\"\nhints = [\"gently\", \"explicitly\"]",
        "name = \"triple\"\ntitle = \"Do triple\"\nhints = [\"gently\", \"explicitly\", \"x * 3\"]",
        1,
    );
    let tests = TESTS.replace("demo::", &format!("{}::", name.replace('-', "_")));
    repo.chapter(name, STUB, SOLUTION, &[("demo", &tests)], Some(&toml));
}

fn workbook(repo: &FakeRepo, args: &[&str]) -> (Option<i32>, String, String) {
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .args(args)
            .stdin(Stdio::null()),
    );
    // Commands are printed to be copied: no line of any output ends in a space.
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            !line.ends_with([' ', '\t']),
            "`workbook {}` printed a line ending in white space: {line:?}",
            args.join(" ")
        );
    }
    (output.status.code(), stdout, stderr)
}

/// The words of the first line of `text` containing `needle`.
fn row<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
        .split_whitespace()
        .collect()
}

#[test]
fn check_shows_each_exercise_and_list_remembers_it() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    repo.write("exercises/ch01-demo/src/lib.rs", HALFWAY);

    let (code, out, err) = workbook(&repo, &["list"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("ch01-demo — Demo  (not checked yet)"), "{out}");
    assert_eq!(
        row(&out, " double "),
        ["·", "not", "started", "double", "Do", "double"]
    );

    let (code, out, err) = workbook(&repo, &["check", "ch01"]);
    assert_eq!(code, Some(1), "a failing chapter exits 1:\n{out}\n{err}");
    assert_eq!(
        row(&out, " double "),
        ["✓", "double", "done", "(2/2", "tests", "pass)"]
    );
    assert_eq!(
        row(&out, "✗ triple"),
        ["✗", "triple", "0/1", "tests", "pass"]
    );
    for needle in [
        "    ✗ triples_two",
        "        two times three; yours: 4; expected: 6",
        "        at exercises/ch01-demo/tests/demo.rs:",
        "· square  not started (0/1 tests pass): todo!() at exercises/ch01-demo/src/lib.rs:10:5",
        "2 of 4 tests pass; 1 of 3 exercises done.",
        "hint ch01-demo triple",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    // Not cargo's wall of output.
    assert!(!out.contains("running 1 test"), "{out}");
    assert!(!out.contains("---- "), "{out}");

    let (code, out, _) = workbook(&repo, &["list"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("[######--------------] 1/3 exercises"),
        "{out}"
    );
    assert!(
        out.contains("ch01-demo — Demo  (checked just now)"),
        "{out}"
    );
    assert_eq!(
        row(&out, " double "),
        ["✓", "done", "double", "Do", "double"]
    );
    assert_eq!(
        row(&out, " triple "),
        [
            "✗", "failing", "triple", "Do", "triple", "(0/1", "tests", "pass)"
        ]
    );
    assert_eq!(
        row(&out, " square "),
        ["·", "not", "started", "square", "Do", "square"]
    );
    assert!(
        out.contains("Next: solve triple in exercises/ch01-demo/src/lib.rs"),
        "{out}"
    );
    assert!(out.contains(" check ch01-demo"), "{out}");

    // Saving without checking: list says so.
    repo.write("exercises/ch01-demo/src/lib.rs", SOLUTION);
    let (_, out, _) = workbook(&repo, &["list"]);
    assert!(out.contains("src/ changed since: check again"), "{out}");

    let (code, out, err) = workbook(&repo, &["check"]);
    assert_eq!(code, Some(0), "a passing chapter exits 0:\n{out}\n{err}");
    assert!(
        out.contains("All 4 tests pass: ch01-demo is done."),
        "{out}"
    );
    assert!(out.contains(" solution ch01-demo"), "{out}");

    let (_, out, _) = workbook(&repo, &["list"]);
    assert!(
        out.contains("[####################] 3/3 exercises"),
        "{out}"
    );
    assert!(out.contains("(checked just now; all tests pass)"), "{out}");
    assert!(out.contains("Every chapter passes."), "{out}");
}

#[test]
fn a_test_that_allocates_forever_fails_at_the_memory_limit() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    let hog = HALFWAY.replace(
        "pub fn square(_x: u32) -> u32 {\n    todo!()\n}",
        "pub fn square(_x: u32) -> u32 {\n    let mut hoard: Vec<Vec<u8>> = Vec::new();\n    \
         loop {\n        hoard.push(vec![1u8; 64 << 20]);\n        \
         std::hint::black_box(&hoard);\n    }\n}",
    );
    assert_ne!(hog, HALFWAY);
    repo.write("exercises/ch01-demo/src/lib.rs", &hog);
    let (code, out, err) = workbook(&repo, &["check", "ch01", "--memory-limit", "256MiB"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains(
            "ran out of memory: memory allocation of 67108864 bytes failed, \
             with the test's limit of 256.00 MiB reached"
        ),
        "{out}"
    );
    // The other exercises are judged as before.
    assert_eq!(
        row(&out, " double "),
        ["✓", "double", "done", "(2/2", "tests", "pass)"]
    );
}

#[test]
fn check_passes_the_test_seed_on_and_names_it_in_a_failure() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    // triples_two stands for a randomized test: it prints its seed as gpumem::testing does,
    // taking GPUMEM_TEST_SEED (these crates depend on nothing, not even gpumem).
    let seeded = TESTS.replace("demo::", "ch01_demo::").replace(
        "fn triples_two() {\n",
        "fn triples_two() {\n    let seed = std::env::var(\"GPUMEM_TEST_SEED\").expect(\"the seed is passed on\");\n    \
         println!(\"seed {seed} (rerun with GPUMEM_TEST_SEED={seed})\");\n",
    );
    assert!(seeded.contains("GPUMEM_TEST_SEED"));
    repo.write("exercises/ch01-demo/tests/demo.rs", &seeded);
    repo.write("exercises/ch01-demo/src/lib.rs", HALFWAY);
    let (output, out, err) = common::run(
        common::workbook()
            .env("GPUMEM_TEST_SEED", "7694720226940991941")
            .arg("--root")
            .arg(repo.root())
            .args(["check", "ch01"])
            .stdin(Stdio::null()),
    );
    assert_eq!(output.status.code(), Some(1), "{out}\n{err}");
    assert!(
        out.contains(
            "two times three; yours: 4; expected: 6 (seed 7694720226940991941: \
             GPUMEM_TEST_SEED=7694720226940991941 replays it)"
        ),
        "{out}"
    );
}

#[test]
fn check_defaults_to_the_first_unfinished_chapter() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    demo_chapter(&repo, "ch02-more");
    repo.write("exercises/ch01-demo/src/lib.rs", SOLUTION);
    let (code, out, _) = workbook(&repo, &["check"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("ch01-demo — Demo"), "{out}");
    assert!(
        out.contains("check ch02-more"),
        "the next chapter is named:\n{out}"
    );
    let (code, out, _) = workbook(&repo, &["check"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("ch02-more — Demo"), "{out}");
}

#[test]
fn a_compile_error_is_shown_with_its_file_and_line() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    repo.write(
        "exercises/ch01-demo/src/lib.rs",
        &SOLUTION.replace("x * 2", "\"two\""),
    );
    let (code, out, err) = workbook(&repo, &["check", "ch01-demo"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("✗ ch01-demo does not compile, so no test ran:"),
        "{out}"
    );
    assert!(out.contains("error[E0308]: mismatched types"), "{out}");
    assert!(
        out.contains("--> exercises/ch01-demo/src/lib.rs:2:5"),
        "{out}"
    );
    let (_, out, _) = workbook(&repo, &["list"]);
    assert!(
        out.contains(
            "does not compile: error[E0308]: mismatched types at exercises/ch01-demo/src/lib.rs:2:5"
        ),
        "{out}"
    );
}

#[test]
fn a_typo_keeps_the_progress_of_the_last_check_that_compiled() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    repo.write("exercises/ch01-demo/src/lib.rs", HALFWAY);
    let (code, out, err) = workbook(&repo, &["check", "ch01-demo"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("1 of 3 exercises done."), "{out}");

    // One missing brace: nothing compiles, and nothing that was done is forgotten.
    repo.write(
        "exercises/ch01-demo/src/lib.rs",
        &HALFWAY.replacen("x * 2\n}", "x * 2\n", 1),
    );
    let (code, out, err) = workbook(&repo, &["check", "ch01-demo"]);
    assert_eq!(
        code,
        Some(1),
        "a chapter that does not compile fails:\n{out}\n{err}"
    );
    assert!(out.contains("does not compile, so no test ran"), "{out}");
    assert!(
        out.contains(
            "Your progress is kept: 1 of 3 exercises of ch01-demo were done at the last check \
             that compiled (just now)."
        ),
        "{out}"
    );

    let (code, out, err) = workbook(&repo, &["list"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("1/3 exercises"), "{out}");
    assert!(
        out.contains("; exercises as at the last check that compiled, just now"),
        "{out}"
    );
    assert_eq!(
        row(&out, " double "),
        ["✓", "done", "double", "Do", "double"]
    );
    assert_eq!(
        row(&out, " triple "),
        [
            "✗", "failing", "triple", "Do", "triple", "(0/1", "tests", "pass)"
        ]
    );

    // The hint goes to the first exercise not done, and says why the chapter is not passing.
    let (code, out, err) = workbook(&repo, &["hint", "ch01-demo"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.starts_with("Note: ch01-demo did not compile at its last check"),
        "{out}"
    );
    assert!(out.contains("ch01-demo › triple — Do triple"), "{out}");
    assert!(!out.contains("› double"), "{out}");
}

#[test]
fn list_refresh_checks_every_chapter() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    demo_chapter(&repo, "ch02-more");
    repo.write("exercises/ch01-demo/src/lib.rs", SOLUTION);
    let (code, out, err) = workbook(&repo, &["list", "--refresh"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(err.contains("[2/2] checking ch02-more"), "{err}");
    assert!(
        out.contains("[##########----------] 3/6 exercises"),
        "{out}"
    );
    assert!(
        out.contains("Next: solve double in exercises/ch02-more/src/lib.rs"),
        "{out}"
    );
}

#[test]
fn hints_get_more_explicit_and_are_remembered() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    let hint = |args: &[&str]| {
        let mut all = vec!["hint"];
        all.extend_from_slice(args);
        let (code, out, err) = workbook(&repo, &all);
        assert_eq!(code, Some(0), "{out}\n{err}");
        out
    };
    let first = hint(&["ch01", "triple"]);
    assert!(first.contains("ch01-demo › triple — Do triple"), "{first}");
    assert!(first.contains("Hint 1 of 3:\n  gently"), "{first}");
    assert!(!first.contains("explicitly"), "{first}");
    let second = hint(&["ch01", "tri"]);
    assert!(second.contains("Hint 2 of 3:\n  explicitly"), "{second}");
    assert!(!second.contains("gently"), "{second}");
    let third = hint(&["ch01", "2"]);
    assert!(third.contains("Hint 3 of 3:\n  x * 3"), "{third}");
    assert!(third.contains("That was the last hint."), "{third}");
    // Past the last, the last again.
    let again = hint(&["ch01", "triple"]);
    assert!(again.contains("Hint 3 of 3:"), "{again}");
    let all = hint(&["ch01", "triple", "--all"]);
    for needle in ["Hint 1 of 3:", "Hint 2 of 3:", "Hint 3 of 3:"] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    // Each exercise counts on its own; with none named, the first one not done.
    let other = hint(&["ch01"]);
    assert!(other.contains("ch01-demo › double"), "{other}");
    assert!(other.contains("Hint 1 of 2:"), "{other}");
    let state =
        std::fs::read_to_string(repo.root().join(".workbook/state.json")).expect("the state file");
    let state: serde_json::Value = serde_json::from_str(&state).expect("JSON");
    assert_eq!(state["chapters"]["ch01-demo"]["hints_shown"]["triple"], 3);
    assert_eq!(state["chapters"]["ch01-demo"]["hints_shown"]["double"], 1);

    let (code, _, err) = workbook(&repo, &["hint", "ch01", "cube"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(
            "ch01-demo has no exercise \"cube\"; its exercises are: double, triple, square"
        ),
        "{err}"
    );
}

#[test]
fn the_solution_waits_for_passing_tests_unless_forced() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    repo.write("exercises/ch01-demo/src/lib.rs", HALFWAY);
    let (code, out, err) = workbook(&repo, &["solution", "ch01"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(!out.contains("x * 3"), "the solution leaked:\n{out}");
    assert!(
        out.contains("The solution of ch01-demo is shown once its tests pass"),
        "{out}"
    );
    assert!(out.contains("solution ch01-demo --force"), "{out}");

    // The book's include markers stay out of what the learner reads; the page is the served book's.
    repo.write(
        "solutions/ch01-demo/src/lib.rs",
        &format!("// ANCHOR: all\n{SOLUTION}    // ANCHOR_END: all\n"),
    );
    repo.write("book/src/ch01-demo-solution.md", "# Solution: Demo\n");
    let (code, out, _) = workbook(&repo, &["solution", "ch01", "--force"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("ANCHOR"), "{out}");
    assert!(
        out.contains("Why it is right: http://127.0.0.1:3000/ch01-demo-solution.html"),
        "{out}"
    );
    assert!(!out.contains("book/src"), "{out}");
    assert!(
        out.starts_with(
            "FORCED: ch01-demo has not passed (2 of 4 tests passed at its last check)."
        ),
        "{out}"
    );
    assert!(
        out.contains("==> solutions/ch01-demo/src/lib.rs <=="),
        "{out}"
    );
    assert!(out.contains("x * 3"), "{out}");

    // Solved, though not checked since: solution checks afresh, and shows it unforced.
    repo.write("exercises/ch01-demo/src/lib.rs", SOLUTION);
    let (code, out, err) = workbook(&repo, &["solution", "ch01"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(err.contains("checking it now"), "{err}");
    assert!(!out.contains("FORCED"), "{out}");
    assert!(out.contains("x * 3"), "{out}");
}

#[test]
fn a_corrupt_state_file_is_moved_aside_and_reported() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    let state = repo.write(".workbook/state.json", "{\"version\": 1, \"chapters\": [");
    let (code, out, err) = workbook(&repo, &["list"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(err.contains("could not be read"), "{err}");
    assert!(err.contains("state.json.corrupt-"), "{err}");
    assert!(out.contains("(not checked yet)"), "{out}");
    assert!(!state.exists());
    let aside: Vec<_> = std::fs::read_dir(state.parent().expect("a parent"))
        .expect("target/workbook")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("state.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(aside[0].path()).expect("kept"),
        "{\"version\": 1, \"chapters\": ["
    );
    // Hints work again and write a sound file.
    let (code, _, _) = workbook(&repo, &["hint", "ch01"]);
    assert_eq!(code, Some(0));
    let text = std::fs::read_to_string(&state).expect("a new state file");
    serde_json::from_str::<serde_json::Value>(&text).expect("valid JSON");
}

/// A fake repository holding a chapter named like one the binary carries, with the learner's
/// work in its `src/` and a test file of theirs.
fn repo_with_embedded_chapter() -> Option<(
    FakeRepo,
    &'static workbook::course::embedded::EmbeddedChapter,
)> {
    let Some(chapter) = workbook::course::embedded::chapters().first() else {
        eprintln!("this binary carries no chapters; skipping");
        return None;
    };
    let repo = FakeRepo::new();
    let name = chapter.name;
    repo.write(
        &format!("exercises/{name}/Cargo.toml"),
        &format!("[package]\nname = \"{name}\"\nedition = \"2024\"\n"),
    );
    repo.write(&format!("exercises/{name}/src/lib.rs"), "// my work\n");
    repo.write(
        &format!("exercises/{name}/src/helpers/mine.rs"),
        "// mine\n",
    );
    repo.write(&format!("exercises/{name}/tests/mine.rs"), "// my test\n");
    Some((repo, chapter))
}

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::snapshot(&[dir.to_path_buf()])
        .into_iter()
        .map(|(p, b)| {
            (
                p.strip_prefix(dir).expect("inside").display().to_string(),
                b,
            )
        })
        .collect()
}

#[test]
fn reset_refuses_without_yes_when_there_is_no_terminal() {
    let Some((repo, chapter)) = repo_with_embedded_chapter() else {
        return;
    };
    let before = repo.snapshot();
    let (code, _, err) = workbook(&repo, &["reset", chapter.name]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("without confirmation: there is no terminal to ask on"),
        "{err}"
    );
    assert!(err.contains("--yes"), "{err}");
    assert!(
        repo.snapshot() == before,
        "reset changed files it was not allowed to"
    );
    assert!(!repo.root().join(".workbook/backups").exists());
}

#[test]
fn reset_backs_up_then_restores_the_stubs_and_leaves_tests_alone() {
    let Some((repo, chapter)) = repo_with_embedded_chapter() else {
        return;
    };
    let name = chapter.name;
    let src = repo.root().join(format!("exercises/{name}/src"));
    let learner_src = tree(&src);
    let (code, out, err) = workbook(&repo, &["reset", name, "--yes"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let mut stubs: Vec<(String, Vec<u8>)> = chapter
        .files_under("src")
        .map(|(p, b)| (p.to_string(), b.to_vec()))
        .collect();
    stubs.sort();
    assert_eq!(tree(&src), stubs, "src/ holds exactly the stubs");
    assert_eq!(
        std::fs::read_to_string(repo.root().join(format!("exercises/{name}/tests/mine.rs")))
            .expect("tests/ untouched"),
        "// my test\n"
    );
    let backups = repo.root().join(".workbook/backups");
    let made: Vec<_> = std::fs::read_dir(&backups)
        .expect("a backup")
        .flatten()
        .collect();
    assert_eq!(made.len(), 1);
    let backup = made[0].path();
    let backup_name = backup
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    assert!(
        backup_name.starts_with(&format!("{name}-")),
        "{backup_name}"
    );
    assert!(
        out.contains(&format!(".workbook/backups/{backup_name}")),
        "{out}"
    );
    assert_eq!(
        tree(&backup.join("src")),
        learner_src,
        "the backup holds the learner's work"
    );

    assert!(
        out.contains(&format!("reset {name} --restore` puts them back")),
        "{out}"
    );

    // Once the stubs are back, there is nothing to do (and no second backup).
    let (code, out, _) = workbook(&repo, &["reset", name, "--yes"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to reset"), "{out}");
    assert_eq!(std::fs::read_dir(&backups).expect("backups").count(), 1);

    // `--restore` brings the learner's work back, keeping the stubs it replaces as a backup.
    let (code, out, err) = workbook(&repo, &["reset", name, "--restore", "--yes"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(tree(&src), learner_src, "the learner's work is back");
    assert_eq!(std::fs::read_dir(&backups).expect("backups").count(), 2);
    let (code, out, _) = workbook(&repo, &["reset", name, "--restore", "--yes"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to restore"), "{out}");
}

#[test]
fn reset_restore_without_a_backup_says_so_and_changes_nothing() {
    let Some((repo, chapter)) = repo_with_embedded_chapter() else {
        return;
    };
    let before = repo.snapshot();
    let (code, _, err) = workbook(&repo, &["reset", chapter.name, "--restore", "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "there is no backup of {} to restore",
            chapter.name
        )),
        "{err}"
    );
    assert!(repo.snapshot() == before, "nothing changed");
}

#[test]
fn reset_of_a_chapter_the_binary_does_not_carry_says_how_to_restore() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-not-shipped");
    let (code, _, err) = workbook(&repo, &["reset", "ch01", "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("carries no copy of ch01-not-shipped's stubs"),
        "{err}"
    );
    assert!(
        err.contains("git checkout -- exercises/ch01-not-shipped/src"),
        "{err}"
    );
}

fn add_book(repo: &FakeRepo) {
    repo.write(
        "book/book.toml",
        "[book]\ntitle = \"T\"\nsrc = \"src\"\n\n[build]\ncreate-missing = false\n",
    );
    repo.write("book/src/SUMMARY.md", "# Summary\n\n- [Page](page.md)\n");
    repo.write("book/src/page.md", "# Page\n\nHello from the book.\n");
}

#[test]
fn start_without_serving_builds_the_book_and_shows_progress() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    add_book(&repo);
    let (code, out, err) = workbook(&repo, &["start", "--no-serve"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    for needle in [
        "GPU Memory Workbook",
        "CUDA",
        "device",
        "book        built in book/book",
        "progress    [--------------------] 0/3 exercises",
        "check ch01-demo",
        "`check ch01-demo` is ready",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    assert!(repo.root().join("book/book/index.html").is_file());
    // start built the chapter's test binary where check looks for it: the repository's target/.
    let built: Vec<String> = std::fs::read_dir(repo.root().join("target/debug/deps"))
        .expect("start built into target/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("demo-") && !n.ends_with(".d"))
        .collect();
    assert_eq!(
        built.len(),
        1,
        "one test binary of tests/demo.rs: {built:?}"
    );
}

#[test]
fn book_serve_answers_on_loopback() {
    let repo = FakeRepo::new();
    add_book(&repo);
    let mut child = common::workbook()
        .arg("--root")
        .arg(repo.root())
        .args(["book", "--serve", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("workbook starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("Serving the book at ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(60));
    let response = url.as_ref().ok().map(|url| get(url, "/page.html"));
    let _ = child.kill();
    let _ = child.wait();
    let url = url.expect("the server printed its URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let response = response.expect("a response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("Hello from the book."), "{response}");
}

/// A plain HTTP/1.1 GET with a bounded wait; the whole response as text.
fn get(url: &str, path: &str) -> String {
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("the request is sent");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

#[test]
fn watch_checks_again_after_a_save() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    repo.write("exercises/ch01-demo/src/lib.rs", HALFWAY);
    let mut child = common::workbook()
        .arg("--root")
        .arg(repo.root())
        .args(["watch", "ch01", "--poll", "--poll-interval", "50"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("workbook starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Every line up to one that contains `needle`, waiting at most a minute for each.
    let until = |needle: &str| -> Result<Vec<String>, String> {
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return Ok(seen);
                    }
                }
                Err(e) => return Err(format!("{e} before {needle:?}; saw:\n{}", seen.join("\n"))),
            }
        }
    };
    let first = until("Watching exercises/ch01-demo/src by reading the files every 50 ms");
    if first.is_ok() {
        repo.write("exercises/ch01-demo/src/lib.rs", SOLUTION);
    }
    let second = first.is_ok().then(|| until("All 4 tests pass"));
    let _ = child.kill();
    let _ = child.wait();
    let first = first.expect("the first check and the watch line");
    assert!(
        first
            .iter()
            .any(|l| l == "2 of 4 tests pass; 1 of 3 exercises done."),
        "{first:?}"
    );
    second
        .expect("a second check")
        .expect("the save was checked");
}

/// `book --serve` (the server `start` runs) with stdout and stderr in one pipe, as `start 2>&1 |
/// tee log` has them: waits for the "Serving" line, then closes the pipe (as Ctrl-C ends `tee`)
/// or not, then Ctrl-C. The server must end, with 130 (Ctrl-C's code).
fn serve_then_interrupt(close_the_pipe_first: bool) {
    use std::os::unix::process::ExitStatusExt as _;
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    add_book(&repo);
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut command = common::workbook();
    command
        .arg("--root")
        .arg(repo.root())
        .args(["book", "--serve", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("a second end"))
        .stderr(writer);
    let mut child = command.spawn().expect("workbook runs");
    drop(command); // the pipe's write ends now live only in the child
    let mut out = BufReader::new(reader);
    let mut line = String::new();
    while !line.contains("Serving the book at") {
        line.clear();
        if out.read_line(&mut line).expect("reading its output") == 0 {
            panic!("workbook ended before serving");
        }
    }
    if close_the_pipe_first {
        drop(out);
    }
    // SAFETY: kill(2) with the pid of the child we spawned and a valid signal number.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "SIGINT sent");
    let (tx, rx) = std::sync::mpsc::channel();
    let id = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            // SAFETY: as above; the server did not stop, so it is killed to end the test.
            unsafe { libc::kill(id as libc::pid_t, libc::SIGKILL) };
            panic!("the server kept serving after Ctrl-C")
        })
        .expect("waited");
    assert_eq!(
        status.code(),
        Some(130),
        "{status:?} (signal {:?})",
        status.signal()
    );
}

#[test]
fn ctrl_c_stops_the_server() {
    serve_then_interrupt(false);
}

#[test]
fn ctrl_c_stops_the_server_when_its_output_pipe_is_already_closed() {
    serve_then_interrupt(true);
}

#[test]
fn a_taken_port_is_named_before_another_is_used() {
    let repo = FakeRepo::new();
    add_book(&repo);
    let (code, _, err) = workbook(&repo, &["book"]);
    assert_eq!(code, Some(0), "{err}");
    // Hold a port, then ask for the server near it.
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = held.local_addr().expect("bound").port();
    let (server, note) =
        workbook::book::serve::Server::bind_near(&repo.root().join("book/book"), port)
            .expect("served on another port");
    assert_ne!(server.addr().port(), port);
    let note = note.expect("the taken port is named");
    assert!(
        note.starts_with(&format!("Port {port} is taken (")),
        "{note}"
    );
    assert!(
        note.ends_with(&format!(
            "serving on port {} instead.",
            server.addr().port()
        )),
        "{note}"
    );
    drop(held);
}

#[test]
fn the_served_book_gets_the_progress_of_the_last_check() {
    let repo = FakeRepo::new();
    demo_chapter(&repo, "ch01-demo");
    repo.write("exercises/ch01-demo/src/lib.rs", HALFWAY);
    let (code, out, err) = workbook(&repo, &["check", "ch01"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let root = workbook::course::app_state::Repo::at(repo.root()).expect("a workbook root");
    let json = workbook::course::learner::progress_json(&root).expect("progress");
    let progress: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
    assert_eq!(
        progress,
        serde_json::json!({"chapters": [{"name": "ch01-demo", "done": false, "exercises": [
            {"name": "double", "state": "done", "passed": 2, "total": 2},
            {"name": "triple", "state": "failing", "passed": 0, "total": 1},
            {"name": "square", "state": "not-started", "passed": 0, "total": 1}
        ]}]})
    );
}
