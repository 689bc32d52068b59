//! `workbook grade`'s grade file as an instructor keeps it over a course: a regrade merges into
//! it (and says which rows it updated or added), `--only-failed` regrades only what lacks full
//! marks, a roster adds id, email and name (and names who it lacks), a policy weighs chapters and
//! takes late penalties, and `--format canvas|moodle` prints the LMS's import file. A file that
//! is not a grade file of ours is refused and left as it was. On a fake workbook of two small
//! chapters (their crates depend on nothing, so they build in seconds).

use crate::common;

use std::path::Path;
use std::process::Output;

const TWO_TESTS: &str = "#[test]\nfn t1() {\n    assert_eq!(one::one(), 1, \"one\");\n}\n\n\
                         #[test]\nfn t2() {\n    assert_eq!(one::one() + 1, 2, \"two\");\n}\n";
const ONE_TEST: &str = "#[test]\nfn u1() {\n    assert_eq!(two::two(), 2, \"two\");\n}\n";
const ONE_RIGHT: &str = "pub fn one() -> u32 { 1 }\n";
const ONE_STUB: &str = "pub fn one() -> u32 { 0 }\n";
const TWO_RIGHT: &str = "pub fn two() -> u32 { 2 }\n";
const TWO_STUB: &str = "pub fn two() -> u32 { 0 }\n";

/// A workbook with chapters `one` (2 points) and `two` (1 point), and a class: alice solved
/// both, bob only `one`, carol neither.
fn course() -> common::FakeRepo {
    let repo = common::FakeRepo::new();
    repo.chapter(
        "one",
        ONE_STUB,
        ONE_RIGHT,
        &[("t", TWO_TESTS)],
        Some(&common::chapter_toml("One", &[("one", &["t1", "t2"])])),
    );
    repo.chapter(
        "two",
        TWO_STUB,
        TWO_RIGHT,
        &[("u", ONE_TEST)],
        Some(&common::chapter_toml("Two", &[("two", &["u1"])])),
    );
    for (student, one, two) in [
        ("alice", ONE_RIGHT, TWO_RIGHT),
        ("bob", ONE_RIGHT, TWO_STUB),
        ("carol", ONE_STUB, TWO_STUB),
    ] {
        repo.write(&format!("class/{student}/one/src/lib.rs"), one);
        repo.write(&format!("class/{student}/two/src/lib.rs"), two);
    }
    repo
}

/// `workbook grade ARGS` on `repo`, run in its root.
fn grade(repo: &common::FakeRepo, args: &[&str]) -> (Output, String, String) {
    common::run(
        common::workbook()
            .current_dir(repo.root())
            .arg("--root")
            .arg(repo.root())
            .arg("grade")
            .args(["--jobs", "2"])
            .args(args),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_regrade_merges_into_the_grade_file_and_only_failed_regrades_what_lacks_full_marks() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    let grades = repo.root().join("grades.csv");
    let (output, stdout, stderr) = grade(&repo, &["--class", "class", "--csv", "grades.csv"]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grade: CSV written to grades.csv"),
        "{stderr}"
    );
    assert_eq!(
        read(&grades),
        "student,one,two,total\n(out of),2,1,3\nalice,2,1,3\nbob,2,0,2\ncarol,0,0,0\n"
    );

    // bob fixes chapter two and is regraded alone: his row changes, the others stay.
    repo.write("class/bob/two/src/lib.rs", TWO_RIGHT);
    let (output, stdout, stderr) = grade(&repo, &["class/bob", "--csv", "grades.csv"]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "grade: grades merged into grades.csv: updated 1 row(s) (bob), added 0 (none), kept \
             2 other(s) as they were"
        ),
        "{stderr}"
    );
    assert_eq!(
        read(&grades),
        "student,one,two,total\n(out of),2,1,3\nalice,2,1,3\nbob,2,1,3\ncarol,0,0,0\n"
    );

    // carol solves chapter one; dave joins late with chapter two only. --only-failed regrades
    // carol and dave, in both chapters (dave has no row yet).
    repo.write("class/carol/one/src/lib.rs", ONE_RIGHT);
    repo.write("class/dave/two/src/lib.rs", TWO_RIGHT);
    let (output, stdout, stderr) = grade(
        &repo,
        &["--class", "class", "--csv", "grades.csv", "--only-failed"],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grade: --only-failed: regrading 2 of 4 submission(s) in one, two"),
        "{stderr}"
    );
    assert!(
        stderr.contains("updated 1 row(s) (carol), added 1 (dave), kept 2 other(s)"),
        "{stderr}"
    );
    assert!(!stdout.contains("alice"), "alice was regraded:\n{stdout}");
    assert_eq!(
        read(&grades),
        "student,one,two,total\n(out of),2,1,3\nalice,2,1,3\nbob,2,1,3\ncarol,2,0,2\n\
         dave,0,1,1\n"
    );

    // Within chapter two only carol lacks full marks (her two is still the stub).
    let (output, stdout, stderr) = grade(
        &repo,
        &[
            "--class",
            "class",
            "--csv",
            "grades.csv",
            "--only-failed",
            "--chapter",
            "two",
        ],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grade: --only-failed: regrading 1 of 4 submission(s) in two"),
        "{stderr}"
    );
    assert!(stderr.contains("updated 1 row(s) (carol)"), "{stderr}");

    // carol fixes two and dave sends one: both are regraded, in the chapters either lacks;
    // then, with full marks everywhere, there is nothing to regrade.
    repo.write("class/carol/two/src/lib.rs", TWO_RIGHT);
    repo.write("class/dave/one/src/lib.rs", ONE_RIGHT);
    let (output, stdout, stderr) = grade(
        &repo,
        &["--class", "class", "--csv", "grades.csv", "--only-failed"],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("regrading 2 of 4 submission(s) in one, two"),
        "{stderr}"
    );
    let (output, stdout, stderr) = grade(
        &repo,
        &["--class", "class", "--csv", "grades.csv", "--only-failed"],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("every submission has full marks in grades.csv"),
        "{stderr}"
    );
    assert_eq!(
        read(&grades),
        "student,one,two,total\n(out of),2,1,3\nalice,2,1,3\nbob,2,1,3\ncarol,2,1,3\n\
         dave,2,1,3\n"
    );
}

#[test]
fn a_roster_and_a_policy_make_the_canvas_and_moodle_files() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    repo.write(
        "roster.csv",
        "folder,id,email,name,submitted\n\
         alice,s1,alice@uni.edu,Alice Liddell,2026-12-01T10:00:00Z\n\
         bob,s2,bob@uni.edu,\"Smith, Bob\",2026-12-02T10:00:00Z\n",
    );
    repo.write(
        "policy.toml",
        "[weights]\none = 1\ntwo = 3\n\n[late]\ndue = \"2026-12-01T23:59:00Z\"\n\
         penalty_per_day = 25\n",
    );
    let args = [
        "--class",
        "class",
        "--csv",
        "grades.csv",
        "--roster",
        "roster.csv",
        "--policy",
        "policy.toml",
    ];
    let (output, stdout, stderr) = grade(&repo, &[&args[..], &["--format", "canvas"]].concat());
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "grade: warning: not in the roster roster.csv: carol (their id, email and name are \
             left empty)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("grade: warning: no submission time for carol"),
        "{stderr}"
    );
    // bob: one 2/2 (weight 1), two 0/1 (weight 3): 25%, one day late: 25% of it off.
    assert_eq!(
        read(&repo.root().join("grades.csv")),
        "student,id,email,name,one,two,total,days_late,final\n\
         (out of),,,,2,1,3,,100\n\
         alice,s1,alice@uni.edu,Alice Liddell,2,1,3,0,100.00\n\
         bob,s2,bob@uni.edu,\"Smith, Bob\",2,0,2,1,18.75\n\
         carol,,,,0,0,0,,0.00\n"
    );
    assert_eq!(
        stdout,
        "Student,ID,SIS User ID,SIS Login ID,Section,one,two,Workbook final (%)\n\
         Points Possible,,,,,2,1,100\n\
         Alice Liddell,,s1,,,2,1,100.00\n\
         \"Smith, Bob\",,s2,,,2,0,18.75\n\
         carol,,,,,0,0,0.00\n"
    );

    // Moodle's file, from the grade file as merged (a regrade of nobody new changes nothing).
    let (output, stdout, stderr) = grade(
        &repo,
        &[
            "class/alice",
            "--csv",
            "grades.csv",
            "--roster",
            "roster.csv",
            "--policy",
            "policy.toml",
            "--format",
            "moodle",
        ],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        "ID number,Email address,Full name,one,two,Workbook final (%)\n\
         s1,alice@uni.edu,Alice Liddell,2,1,100.00\n\
         s2,bob@uni.edu,\"Smith, Bob\",2,0,18.75\n\
         ,,carol,0,0,0.00\n"
    );

    // The file has final grades: regrading it without the policy would leave them wrong.
    let (output, _, stderr) = grade(&repo, &["class/alice", "--csv", "grades.csv"]);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("has the final grades of a --policy: give the policy again"),
        "{stderr}"
    );
}

#[test]
fn a_file_that_is_not_a_grade_file_or_a_bad_policy_stops_grading_before_it_starts() {
    let repo = course();
    let theirs = "name,score\nalice,90\n";
    repo.write("marks.csv", theirs);
    repo.write("bad-policy.toml", "[weights]\nthree = 1\n");
    repo.write("bad-roster.csv", "student,id\nalice,1\n");
    let cases: [(&[&str], &str); 5] = [
        (
            &["class/alice", "--csv", "marks.csv"],
            "marks.csv: it is not a grade file written by `workbook grade --csv` (its first \
             column is not `student`), so it is left as it is",
        ),
        (
            &["class/alice", "--policy", "bad-policy.toml"],
            "bad-policy.toml: [weights] three",
        ),
        (
            &["class/alice", "--policy", "missing.toml"],
            "reading the policy file missing.toml",
        ),
        (
            &["class/alice", "--roster", "bad-roster.csv"],
            "the roster bad-roster.csv has no `folder` column",
        ),
        (
            &["class/alice", "--only-failed"],
            "the following required arguments were not provided",
        ),
    ];
    for (args, needle) in cases {
        let (output, stdout, stderr) = grade(&repo, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {stdout}\n{stderr}"
        );
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    assert_eq!(read(&repo.root().join("marks.csv")), theirs);
}

#[test]
fn points_scale_each_chapter_s_tests_on_gradescope() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    // bob: chapter one (2 tests) solved, two (1 test) not; one is worth 10 and two 5.
    let (output, stdout, stderr) = grade(
        &repo,
        &["class/bob", "--points", "one=10,two=5", "--format", "json"],
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("results.json");
    assert_eq!(json["score"], 10);
    assert_eq!(json["max_score"], 15);
    let tests: Vec<(String, serde_json::Value, serde_json::Value)> = json["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["score"].clone(),
                t["max_score"].clone(),
            )
        })
        .collect();
    assert_eq!(
        tests,
        [
            ("one::t1".to_string(), 5.into(), 5.into()),
            ("one::t2".to_string(), 5.into(), 5.into()),
            ("two::u1".to_string(), 0.into(), 5.into()),
        ]
    );
    let (output, _, stderr) = grade(&repo, &["class/bob", "--points", "three=1"]);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--points three=1: there is no chapter \"three\""),
        "{stderr}"
    );
}

#[test]
fn only_failed_names_a_second_submission_of_a_name_as_the_whole_class_did() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = course();
    // Two submissions named bob: the class's, solved, and a late one with chapter two unsolved;
    // graded together they are `bob` and `bob 2`.
    repo.write("class/bob/two/src/lib.rs", TWO_RIGHT);
    repo.write("late/bob/one/src/lib.rs", ONE_RIGHT);
    repo.write("late/bob/two/src/lib.rs", TWO_STUB);
    let both = ["class/bob", "late/bob", "--csv", "grades.csv"];
    let (output, stdout, stderr) = grade(&repo, &both);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let grades = repo.root().join("grades.csv");
    assert_eq!(
        read(&grades),
        "student,one,two,total\n(out of),2,1,3\nbob,2,1,3\nbob 2,2,0,2\n"
    );
    // The late one is regraded alone, still as `bob 2`, never into the first bob's row.
    repo.write("late/bob/two/src/lib.rs", TWO_RIGHT);
    let (output, stdout, stderr) = grade(&repo, &[&both[..], &["--only-failed"]].concat());
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("regrading 1 of 2 submission(s) in two"),
        "{stderr}"
    );
    assert!(stderr.contains("updated 1 row(s) (bob 2)"), "{stderr}");
    assert_eq!(
        read(&grades),
        "student,one,two,total\n(out of),2,1,3\nbob,2,1,3\nbob 2,2,1,3\n"
    );
}
