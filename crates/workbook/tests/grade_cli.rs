//! `workbook grade` through the binary: the reference solutions score full marks and the stubs
//! score 0 in every chapter, with every output file read back; Gradescope JSON on stdout; the
//! command line's errors. Where the sandbox cannot run, the tests that grade are skipped with a
//! notice, or fail under `CI=true` (`common/sandbox.rs`).

use crate::common;

use std::path::{Path, PathBuf};
use workbook::course::app_state::Repo;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

#[test]
fn the_solutions_score_full_marks_and_the_stubs_zero_in_every_format() {
    if common::skip_without_sandbox() {
        return;
    }
    let root = repo_root();
    let repo = Repo::at(&root).expect("the repository");
    let chapters: Vec<(String, u32, usize)> = repo
        .chapter_names()
        .unwrap()
        .into_iter()
        .map(|name| {
            let info = repo.chapter(&name).expect("a chapter").info;
            (name, info.total_points(), info.tests().count())
        })
        .collect();
    let total: u32 = chapters.iter().map(|c| c.1).sum();
    let tests: usize = chapters.iter().map(|c| c.2).sum();
    let watched = [root.join("exercises"), root.join("solutions")];
    let before = common::snapshot(&watched);
    let out = tempfile::tempdir().expect("a temporary folder");
    // Every chapter's reference solution is graded; the stubs of the first two chapters only (the
    // others are "not submitted"): `verify` already shows every stub failing every test, and a
    // stub built here costs as much as a solution.
    let stubs = out.path().join("exercises");
    for (name, ..) in &chapters[..2] {
        common::copy_dir(&root.join("exercises").join(name), &stubs.join(name));
    }
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(&root)
            .arg("grade")
            .arg(root.join("solutions"))
            .arg(&stubs)
            .args(["--jobs", "2"])
            .arg("--csv")
            .arg(out.path().join("grades.csv"))
            .arg("--junit")
            .arg(out.path().join("junit.xml"))
            .arg("--gradescope")
            .arg(out.path().join("gradescope"))
            .arg("--feedback")
            .arg(out.path().join("feedback")),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        before == common::snapshot(&watched),
        "grading changed exercises/ or solutions/"
    );
    assert!(
        stdout.contains(&format!("solutions: {total}/{total}: every test passed")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("exercises: 0/{total}\n")),
        "{stdout}"
    );
    assert!(
        stderr.contains("grade: 2 submission(s) graded in"),
        "{stderr}"
    );

    // CSV: a column per chapter, each at its chapter.toml points for the solutions, 0 for stubs,
    // under the points possible.
    let csv_text = std::fs::read_to_string(out.path().join("grades.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let mut header = vec!["student".to_string()];
    header.extend(chapters.iter().map(|c| c.0.clone()));
    header.push("total".to_string());
    assert_eq!(reader.headers().unwrap().iter().collect::<Vec<_>>(), header);
    let rows: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    let mut full = vec!["solutions".to_string()];
    full.extend(chapters.iter().map(|c| c.1.to_string()));
    full.push(total.to_string());
    let mut zero = vec!["exercises".to_string()];
    // A chapter not submitted scores 0 in the CSV too (an LMS reads numbers).
    zero.extend(chapters.iter().map(|_| "0".to_string()));
    zero.push("0".to_string());
    // The second row holds each chapter's points possible.
    let mut out_of = full.clone();
    out_of[0] = "(out of)".to_string();
    assert_eq!(rows, [out_of, full, zero]);

    // Gradescope: one results.json per student in the folder.
    for (student, score, status) in [("solutions", total, "passed"), ("exercises", 0, "failed")] {
        let path = out
            .path()
            .join("gradescope")
            .join(format!("{student}.json"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(json["score"].as_u64(), Some(u64::from(score)));
        assert_eq!(json["max_score"].as_u64(), Some(u64::from(total)));
        // The entries that flag a submission like the reference solution (worth nothing, hidden
        // from students) aside: the solutions themselves are flagged, the stubs not.
        let (look_alike, all): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = json["tests"]
            .as_array()
            .unwrap()
            .iter()
            .partition(|t| t["visibility"] == "hidden");
        assert_eq!(all.len(), tests);
        assert!(all.iter().all(|t| t["status"] == status), "{student}");
        assert_eq!(
            look_alike.is_empty(),
            student == "exercises",
            "{look_alike:?}"
        );
    }

    // JUnit: no failure for the solutions, every test failed for the stubs.
    let xml = std::fs::read_to_string(out.path().join("junit.xml")).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let failures = |prefix: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("testsuite"))
            .filter(|n| n.attribute("name").unwrap().starts_with(prefix))
            .map(|n| n.attribute("failures").unwrap().parse::<usize>().unwrap())
            .sum::<usize>()
    };
    assert_eq!(failures("solutions."), 0);
    assert_eq!(failures("exercises."), tests);
    assert_eq!(
        doc.descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .count(),
        2 * tests
    );

    // Feedback: one Markdown report each.
    let solutions = std::fs::read_to_string(out.path().join("feedback/solutions.md")).unwrap();
    assert!(
        solutions.contains(&format!("Score: **{total} / {total}** (100%)")),
        "{solutions}"
    );
    let stubs = std::fs::read_to_string(out.path().join("feedback/exercises.md")).unwrap();
    assert!(
        stubs.contains(&format!("Score: **0 / {total}** (0%)")),
        "{stubs}"
    );
    assert!(stubs.contains("- Why: not yet implemented"), "{stubs}");
    // No test of the two stubs passes: each chapter says so, and names every test in a line,
    // with each reason told once, so the report stays short.
    for (name, ..) in &chapters[..2] {
        let points = repo.chapter(name).unwrap().info.total_points();
        assert!(
            stubs.contains(&format!("| 0 / {points} | no test passes |")),
            "{name}:\n{stubs}"
        );
        for (_, test, _) in repo.chapter(name).unwrap().info.tests() {
            assert!(stubs.contains(&format!("`{test}`")), "{test}:\n{stubs}");
        }
    }
    let lines = stubs.lines().count();
    assert!(lines <= 250, "{lines} lines:\n{stubs}");
}

#[test]
fn format_json_prints_one_results_json_and_a_class_skips_stray_files() {
    if common::skip_without_sandbox() {
        return;
    }
    let root = repo_root();
    let class = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(class.path().join("broken.zip"), b"this is not a zip").unwrap();
    std::fs::write(class.path().join("notes.txt"), b"not a submission").unwrap();
    let results = class.path().join("out/results.json");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(&root)
            .args(["grade", "--chapter", "ch01", "--format", "json", "--class"])
            .arg(class.path())
            // Hidden tests of chapters not graded (here ch02's) are left aside.
            .arg("--hidden-tests")
            .arg(root.join("crates/workbook/tests/submissions/hidden"))
            .arg("--gradescope")
            .arg(&results),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grade: skipping ") && stderr.contains("notes.txt"),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let max = Repo::at(&root)
        .unwrap()
        .chapter("ch01-availability")
        .unwrap()
        .info
        .total_points();
    assert_eq!(json["score"].as_u64(), Some(0));
    assert_eq!(json["max_score"].as_u64(), Some(u64::from(max)));
    assert!(
        json["output"]
            .as_str()
            .unwrap()
            .contains("refused: not a readable .zip archive"),
        "{json}"
    );
    for test in json["tests"].as_array().unwrap() {
        assert!(
            test["name"]
                .as_str()
                .unwrap()
                .starts_with("ch01-availability::")
        );
        assert_eq!(test["status"], "failed");
        assert_eq!(test["score"].as_u64(), Some(0));
    }
    // One submission: --gradescope writes the same results.json.
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(written, json);
}

#[test]
fn grading_nothing_or_a_missing_path_is_an_error() {
    let root = repo_root();
    let empty = tempfile::tempdir().expect("a temporary folder");
    let hidden = tempfile::tempdir().expect("a temporary folder");
    std::fs::create_dir_all(hidden.path().join("ch99-nothing")).unwrap();
    std::fs::write(
        hidden.path().join("ch99-nothing/extra.rs"),
        "#[test]\nfn t() {}\n",
    )
    .unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["grade".into()], "nothing to grade"),
        (
            vec!["grade".into(), "--class".into(), empty.path().into()],
            "holds no submission",
        ),
        (
            vec!["grade".into(), empty.path().join("nobody").into()],
            "does not exist",
        ),
        (
            vec![
                "grade".into(),
                empty.path().into(),
                "--hidden-tests".into(),
                hidden.path().into(),
            ],
            "there is no chapter \"ch99-nothing\" (the chapters are: ch01-availability, ",
        ),
        (
            vec![
                "grade".into(),
                empty.path().into(),
                "--memory-limit".into(),
                "lots".into(),
            ],
            "`lots` is not a size: write it like 4GiB, 512MiB or 1073741824, or `none`",
        ),
        (
            vec![
                "grade".into(),
                empty.path().into(),
                "--memory-limit".into(),
                "1MiB".into(),
            ],
            "1MiB is too little for a test process to start; give 64MiB or more, or `none`",
        ),
    ];
    for (args, needle) in cases {
        let (output, stdout, stderr) =
            common::run(common::workbook().arg("--root").arg(&root).args(&args));
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {stdout}\n{stderr}"
        );
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn without_bubblewrap_auto_falls_back_to_landlock_and_namespaces_refuses() {
    if common::skip_without_landlock() {
        return;
    }
    let root = repo_root();
    let solution = root.join("solutions");
    let grade = |extra: &[&str]| {
        let mut cmd = common::workbook();
        cmd.arg("--root")
            .arg(&root)
            .arg("grade")
            .arg(&solution)
            .args(["--chapter", "ch01"])
            .args(extra)
            .env("WORKBOOK_BWRAP", "/nonexistent/bwrap");
        common::run(&mut cmd)
    };
    let (output, stdout, stderr) = grade(&["--sandbox", "namespaces"]);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grading runs every test in a sandbox, and it cannot run here"),
        "{stderr}"
    );
    assert!(stderr.contains("apt-get install bubblewrap"), "{stderr}");
    assert!(
        stderr.contains("--sandbox none: then the learners' code runs with your permissions"),
        "{stderr}"
    );

    // No flag: the Landlock tier, named.
    let (output, stdout, stderr) = grade(&[]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grade: every test runs in the sandbox: landlock ("),
        "{stderr}"
    );
    assert!(
        stdout.contains("solutions: 21/21: every test passed"),
        "{stdout}"
    );

    for flag in [&["--no-sandbox"][..], &["--sandbox", "none"]] {
        let (output, stdout, stderr) = grade(flag);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stderr
                .contains("grade: no sandbox: then the learners' code runs with your permissions"),
            "{stderr}"
        );
        assert!(
            stdout.contains("solutions: 21/21: every test passed"),
            "{stdout}"
        );
    }
}

#[test]
fn grade_passes_the_test_seed_into_the_sandbox_and_names_it_in_the_feedback() {
    if common::skip_without_sandbox() {
        return;
    }
    let repo = common::FakeRepo::new();
    // `t` stands for a randomized test: it prints its seed as gpumem::testing does, taking
    // GPUMEM_TEST_SEED (this crate depends on nothing, not even gpumem).
    let test = "#[test]\nfn t() {\n    let seed = std::env::var(\"GPUMEM_TEST_SEED\").expect(\"the seed is passed on\");\n    \
                println!(\"seed {seed} (rerun with GPUMEM_TEST_SEED={seed})\");\n    \
                assert_eq!(seeds::answer(), 42, \"the answer\");\n}\n";
    let toml = common::chapter_toml("Seeds", &[("answer", &["t"])]);
    repo.chapter(
        "seeds",
        "pub fn answer() -> u64 { 41 }\n",
        "pub fn answer() -> u64 { 42 }\n",
        &[("t", test)],
        Some(&toml),
    );
    repo.write(
        "student/seeds/src/lib.rs",
        "pub fn answer() -> u64 { 41 }\n",
    );
    let feedback = repo.root().join("feedback");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .env("GPUMEM_TEST_SEED", "272")
            .arg("--root")
            .arg(repo.root())
            .arg("grade")
            .arg(repo.root().join("student"))
            .arg("--feedback")
            .arg(&feedback),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let report = std::fs::read_to_string(feedback.join("student.md")).unwrap();
    // No test of the chapter passes: the reason is told once for the tests it fails, and each
    // test's line names the seed it ran with.
    assert!(
        report.contains("- Why: the answer; yours: 41; expected: 42\n")
            && report.contains(
                "  - `t` (0 / 1 point) — exercise `answer` (seed 272: GPUMEM_TEST_SEED=272 \
                 replays it)"
            ),
        "{report}"
    );
}

/// `check` and `grade` give a test the same time by default: a test that passes under `check`
/// is never timed out by `grade`.
#[test]
fn check_and_grade_have_one_default_timeout() {
    let default_of = |command: &str| {
        let (output, stdout, stderr) = common::run(common::workbook().args([command, "--help"]));
        assert!(output.status.success(), "{stdout}\n{stderr}");
        let flag = stdout
            .split("--timeout <SECONDS>")
            .nth(1)
            .unwrap_or_else(|| panic!("`{command} --help` has no --timeout:\n{stdout}"));
        let default = flag
            .split("[default: ")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .unwrap_or_else(|| panic!("`{command} --help` gives --timeout no default:\n{stdout}"));
        default.to_string()
    };
    assert_eq!(default_of("check"), default_of("grade"));
}
