//! What a student reads when no test of a chapter passes (an untouched stub): the chapter says
//! that no test passes, and the tests that failed for one reason are told together, the reason
//! once and each test in a line, so the report stays short; a chapter with some tests passing
//! keeps every failed test's full output. And the hidden tests' visibility on Gradescope, which
//! `--hidden-visibility` chooses. On a fake workbook of one small chapter (its crate depends on
//! nothing, so it builds in seconds).

use crate::common;

use std::path::Path;

/// Tests of `total` beyond the first, so that a stub fails many tests for one reason.
const TOTAL_TESTS: usize = 6;

const STUB: &str = "pub fn total(xs: &[u64]) -> u64 {\n    let _ = xs;\n    todo!()\n}\n\n\
                    pub fn halve(n: u64) -> u64 {\n    let _ = n;\n    todo!(\"halve it\")\n}\n";
const SOLUTION: &str = "pub fn total(xs: &[u64]) -> u64 {\n    xs.iter().sum()\n}\n\n\
                        pub fn halve(n: u64) -> u64 {\n    n / 2\n}\n";
/// `total` solved, `halve` not.
const HALF: &str = "pub fn total(xs: &[u64]) -> u64 {\n    xs.iter().sum()\n}\n\n\
                    pub fn halve(n: u64) -> u64 {\n    n\n}\n";
const HIDDEN: &str =
    "#[test]\nfn total_of_nothing_hidden() {\n    assert_eq!(one::total(&[]), 0);\n}\n";

fn total_test(i: usize) -> String {
    format!("total_counts_{i}")
}

fn course() -> common::FakeRepo {
    let repo = common::FakeRepo::new();
    let mut tests = String::new();
    for i in 0..TOTAL_TESTS {
        tests.push_str(&format!(
            "#[test]\nfn {}() {{\n    assert_eq!(one::total(&[{i}, 1]), {});\n}}\n\n",
            total_test(i),
            i + 1
        ));
    }
    tests.push_str(
        "#[test]\nfn halve_halves() {\n    assert_eq!(one::halve(8), 4, \"halve\");\n}\n",
    );
    let names: Vec<String> = (0..TOTAL_TESTS).map(total_test).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    repo.chapter(
        "one",
        STUB,
        SOLUTION,
        &[("t", &tests)],
        Some(&common::chapter_toml(
            "One",
            &[("total", &names), ("halve", &["halve_halves"])],
        )),
    );
    repo.write("hidden/one/extra.rs", HIDDEN);
    for (student, code) in [("carol", STUB), ("alice", HALF)] {
        repo.write(&format!("class/{student}/one/src/lib.rs"), code);
    }
    repo
}

fn grade(repo: &common::FakeRepo, args: &[&str]) -> (std::process::Output, String, String) {
    common::run(
        common::workbook()
            .current_dir(repo.root())
            .arg("--root")
            .arg(repo.root())
            .args(["grade", "--hidden-tests", "hidden", "--jobs", "2"])
            .args(args),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `visibility` of each test in a results.json, by test name (`None`: not written).
fn visibilities(results: &serde_json::Value) -> Vec<(String, Option<String>)> {
    results["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().expect("a name").to_string(),
                t.get("visibility")
                    .map(|v| v.as_str().expect("a word").to_string()),
            )
        })
        .collect()
}

#[test]
fn a_stub_s_feedback_says_no_test_passes_and_each_reason_once() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    let (output, stdout, stderr) = grade(
        &repo,
        &[
            "--class",
            "class",
            "--feedback",
            "feedback",
            "--gradescope",
            "gradescope",
        ],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let carol = read(&repo.root().join("feedback/carol.md"));
    assert!(
        carol.contains("| one — One | 0 / 8 | no test passes |"),
        "{carol}"
    );
    assert!(!carol.contains("some tests fail"), "{carol}");
    // total's tests and the hidden one share their reason: told once, each test in a line.
    assert!(
        carol.contains("### ✗ 7 tests (0 / 7 points)\n\n- Why: not yet implemented\n"),
        "{carol}"
    );
    assert_eq!(
        carol.matches("- Why: not yet implemented\n").count(),
        1,
        "{carol}"
    );
    for i in 0..TOTAL_TESTS {
        let line = format!("  - `{}` (0 / 1 point) — exercise `total`\n", total_test(i));
        assert_eq!(carol.matches(&line).count(), 1, "{line}:\n{carol}");
    }
    assert!(
        carol.contains("  - `total_of_nothing_hidden` (0 / 1 point) — a hidden test\n"),
        "{carol}"
    );
    assert!(carol.contains("- Hint for `total`: gently\n"), "{carol}");
    assert!(
        carol.contains("- More hints: `workbook hint one total`\n"),
        "{carol}"
    );
    // halve's test fails for a reason of its own.
    assert!(
        carol.contains(
            "### ✗ 1 test (0 / 1 point)\n\n- Why: not yet implemented: halve it\n\
             - Hint for `halve`: gently\n- More hints: `workbook hint one halve`\n\
             - The tests:\n  - `halve_halves` (0 / 1 point) — exercise `halve`\n"
        ),
        "{carol}"
    );
    // What a test printed, once for the chapter, not once per test.
    assert_eq!(carol.matches("<details>").count(), 1, "{carol}");
    assert_eq!(carol.matches("panicked at").count(), 1, "{carol}");
    assert!(
        carol.contains(
            "<details><summary>What `total_counts_0` printed (every test's output: `workbook \
             check one`)</summary>"
        ),
        "{carol}"
    );
    // Told in full, the output of a test (about 20 lines) came once per test, 8 times.
    let lines = carol.lines().count();
    assert!(lines <= 70, "{lines} lines:\n{carol}");

    // Alice passes total's tests: her failed test keeps its full output.
    let alice = read(&repo.root().join("feedback/alice.md"));
    assert!(
        alice.contains("| one — One | 7 / 8 | some tests fail |"),
        "{alice}"
    );
    assert!(
        alice.contains("### ✗ `halve_halves` (0 / 1 point) — exercise `halve`\n\n- Why:"),
        "{alice}"
    );
    assert!(alice.contains("<details><summary>What the test printed</summary>"));

    // By default a hidden test is shown once the grades are published; the others always.
    let results: serde_json::Value =
        serde_json::from_str(&read(&repo.root().join("gradescope/carol.json"))).unwrap();
    let seen = visibilities(&results);
    assert_eq!(seen.len(), TOTAL_TESTS + 2, "{seen:?}");
    for (name, visibility) in seen {
        if name == "one::total_of_nothing_hidden" {
            assert_eq!(visibility.as_deref(), Some("after_published"));
        } else {
            assert_eq!(visibility, None, "{name}");
        }
    }
}

#[test]
fn hidden_visibility_chooses_when_gradescope_shows_the_hidden_tests() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    let (output, stdout, stderr) = grade(
        &repo,
        &[
            "class/alice",
            "--format",
            "json",
            "--hidden-visibility",
            "after_due_date",
        ],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let results: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(results["score"], 7);
    assert_eq!(results["visibility"], "visible");
    for (name, visibility) in visibilities(&results) {
        if name == "one::total_of_nothing_hidden" {
            assert_eq!(visibility.as_deref(), Some("after_due_date"));
        } else {
            assert_eq!(visibility, None, "{name}");
        }
    }
}

#[test]
fn an_unknown_hidden_visibility_is_refused_with_gradescope_s_words() {
    let repo = course();
    let (output, stdout, stderr) = grade(
        &repo,
        &["class/alice", "--hidden-visibility", "after-published"],
    );
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("invalid value 'after-published' for '--hidden-visibility <WHEN>'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("after_published, after_due_date, hidden, visible"),
        "{stderr}"
    );
}
