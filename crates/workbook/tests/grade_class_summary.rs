//! `workbook grade --class` as an instructor reads it: the summary after the table (students who
//! pass each exercise, the score histogram, the slowest submissions, the submissions that look
//! alike: a copy of the reference solution renamed and reformatted, and two students'), written
//! as `summary.md` and `summary.json` beside the feedback files (without `--feedback`, stderr
//! says where to get them); feedback files named after the students, with an `index.md`;
//! `--quiet`'s one line per student. On a fake workbook of one small chapter (its crate depends
//! on nothing, so it builds in seconds).

use crate::common;

use std::path::Path;

const TESTS: &str = "#[test]\nfn evens_count_twice() {\n    assert_eq!(one::total(&[1, 2, 3]), 8, \
                     \"total\");\n}\n\n#[test]\nfn empty_is_zero() {\n    \
                     assert_eq!(one::total(&[]), 0, \"empty\");\n}\n\n#[test]\nfn halve_halves() \
                     {\n    assert_eq!(one::halve(8), 4, \"halve\");\n}\n";
const STUB: &str = "/// Sums, evens counted twice.\npub fn total(xs: &[u64]) -> u64 {\n    \
                    let _ = xs;\n    99\n}\n\n/// Half of it.\npub fn halve(n: u64) -> u64 {\n    \
                    n\n}\n";
const SOLUTION: &str = "/// Sums, evens counted twice.\npub fn total(xs: &[u64]) -> u64 {\n    \
                        let mut sum = 0;\n    for x in xs {\n        if *x % 2 == 0 {\n            \
                        sum += *x * 2;\n        } else {\n            sum += *x;\n        }\n    \
                        }\n    sum\n}\n\n/// Half of it.\npub fn halve(n: u64) -> u64 {\n    n / \
                        2\n}\n";
/// The reference solution with its own names renamed, reformatted and commented.
const DISGUISED: &str = "// all my own work\npub fn total(xs: &[u64]) -> u64 { let mut acc = 0; \
                         for v in xs { if *v % 2 == 0 { acc += *v * 2; } else { acc += *v; } } \
                         acc }\n/* halving */\npub fn halve(n: u64) -> u64 { n / 2 }\n";
/// Another way to the same results.
const OTHER: &str = "pub fn total(xs: &[u64]) -> u64 {\n    xs.iter().map(|x| if x % 2 == 0 \
                     { 2 * x } else { *x }).sum()\n}\n\npub fn halve(n: u64) -> u64 {\n    n >> \
                     1\n}\n";
/// `total` solved, `halve` not.
const HALF: &str = "pub fn total(xs: &[u64]) -> u64 {\n    let mut out = 0;\n    let mut i = \
                    0;\n    while i < xs.len() {\n        let double = xs[i] % 2 == 0;\n        \
                    out += if double { xs[i] * 2 } else { xs[i] };\n        i += 1;\n    }\n    \
                    out\n}\n\npub fn halve(n: u64) -> u64 {\n    n\n}\n";

fn course() -> common::FakeRepo {
    let repo = common::FakeRepo::new();
    repo.chapter(
        "one",
        STUB,
        SOLUTION,
        &[("t", TESTS)],
        Some(&common::chapter_toml(
            "One",
            &[
                ("total", &["evens_count_twice", "empty_is_zero"]),
                ("halve", &["halve_halves"]),
            ],
        )),
    );
    for (student, code) in [
        ("a_reference", SOLUTION),
        ("bob", DISGUISED),
        ("carol", STUB),
        ("Émile", OTHER),
        ("alice_1", HALF),
        ("alice-1", HALF),
    ] {
        repo.write(&format!("class/{student}/one/src/lib.rs"), code);
    }
    repo
}

fn grade(repo: &common::FakeRepo, extra: &[&str]) -> (std::process::Output, String, String) {
    common::run(
        common::workbook()
            .current_dir(repo.root())
            .arg("--root")
            .arg(repo.root())
            .args(["grade", "--class", "class", "--jobs", "2"])
            .args(extra),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_class_ends_with_its_summary_and_its_look_alikes_in_every_form() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    let (output, stdout, stderr) = grade(&repo, &["--feedback", "feedback"]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grade: the class's summary written to "),
        "{stderr}"
    );
    assert!(!stderr.contains("only with --feedback"), "{stderr}");
    let summary = stdout
        .split_once("\nSummary of 6 submission(s)\n")
        .unwrap_or_else(|| panic!("no summary after the table:\n{stdout}"))
        .1;
    // total: all but carol; halve: a_reference, bob, Émile.
    assert!(summary.contains("  one total  5/6\n"), "{summary}");
    assert!(summary.contains("  one halve  3/6\n"), "{summary}");
    // Scores: carol 0 of 3, the alices 2 of 3 (66%), three full marks.
    assert!(summary.contains("     0-9%    1  "), "{summary}");
    assert!(summary.contains("   60-69%    2  "), "{summary}");
    assert!(summary.contains("     100%    3  "), "{summary}");
    for line in [
        "one: a_reference and bob: 100% alike",
        "one: a_reference and the reference solution: 100% alike",
        "one: bob and the reference solution: 100% alike",
        "one: alice-1 and alice_1: 100% alike",
    ] {
        assert!(summary.contains(line), "{line}:\n{summary}");
    }
    // Carol's stub and Émile's own way are nobody's copy.
    assert!(!summary.contains("carol and"), "{summary}");
    assert!(!summary.contains("Émile and"), "{summary}");
    assert!(summary.contains("Slowest submissions"), "{summary}");

    let feedback = repo.root().join("feedback");
    for student in ["a_reference", "bob", "carol", "Émile", "alice_1", "alice-1"] {
        let report = read(&feedback.join(format!("{student}.md")));
        assert!(
            report.starts_with(&format!("# Feedback for {student}\n")),
            "{report}"
        );
    }
    let index = read(&feedback.join("index.md"));
    assert!(
        index.contains("| Émile | 3 / 3 | 100% | [Émile.md](<Émile.md>) |"),
        "{index}"
    );
    assert!(
        index.contains("| alice\\_1 | 2 / 3 | 67% | [alice\\_1.md](<alice_1.md>) |"),
        "{index}"
    );
    let markdown = read(&feedback.join("summary.md"));
    assert!(
        markdown.starts_with("# Summary of 6 submission(s)\n"),
        "{markdown}"
    );
    assert!(markdown.contains("one: alice-1 and alice_1: 100% alike"));
    let json: serde_json::Value =
        serde_json::from_str(&read(&feedback.join("summary.json"))).expect("summary.json");
    assert_eq!(json["students"], 6);
    assert_eq!(json["max_score"], 3);
    assert_eq!(json["exercises"][0]["exercise"], "total");
    assert_eq!(json["exercises"][0]["passed"], 5);
    assert_eq!(json["histogram"][10]["students"], 3);
    assert_eq!(json["slowest"].as_array().unwrap().len(), 5);
    let similar = json["similar"].as_array().unwrap();
    assert_eq!(similar.len(), 4, "{similar:?}");
    assert!(similar.iter().any(|s| s["student"] == "bob"
        && s["other"] == "the reference solution"
        && s["reference_solution"] == true
        && s["similarity"] == 1.0));
}

#[test]
fn quiet_prints_one_line_per_student_then_the_summary() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    let (output, stdout, stderr) = grade(&repo, &["--quiet"]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let (lines, summary) = stdout
        .split_once("\nSummary of 6 submission(s)\n")
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        [
            "a_reference: 3/3 (100%)",
            "alice-1: 2/3 (67%); short of full marks: one 2",
            "alice_1: 2/3 (67%); short of full marks: one 2",
            "bob: 3/3 (100%)",
            "carol: 0/3 (0%); short of full marks: one 0",
            "Émile: 3/3 (100%)",
        ]
    );
    assert!(summary.contains("one total  5/6"), "{summary}");
    // No progress: stderr has no line per student.
    assert!(!stderr.contains("grade: carol:"), "{stderr}");
    // Without --feedback no summary file is written, and stderr says where to get one.
    assert!(
        stderr.contains(
            "grade: the class's summary is written as summary.md and summary.json only with \
             --feedback FOLDER"
        ),
        "{stderr}"
    );
    assert!(!repo.root().join("summary.md").exists());
}
