//! The runner on a crafted crate: one process per test, verdicts by exit status and the harness's
//! report, time limits, capped output, and build failures with the compiler's errors.

mod common;

use common::FakeRepo;
use std::time::Duration;
use workbook::run::runner::{self, RunOptions, TestOutcome, Verdict};
use workbook::run::scratch::{self, WorkspaceTemplate};

const LIB: &str = "pub fn answer() -> u32 { 42 }\n";

const TESTS: &str = r#"
#[test]
fn passes() {
    assert_eq!(crafted::answer(), 42);
}

#[test]
fn fails_with_a_message() {
    assert_eq!(crafted::answer(), 41, "the answer moved");
}

#[test]
fn loops_forever() {
    loop {
        std::hint::spin_loop();
    }
}

#[test]
fn exits_zero() {
    std::process::exit(0);
}

#[test]
fn exits_one() {
    std::process::exit(1);
}

#[test]
fn aborts() {
    std::process::abort();
}

#[test]
#[ignore]
fn ignored_but_failing() {
    panic!("ignored tests run too");
}

#[test]
fn prints_a_lot_then_panics() {
    for i in 0..20_000 {
        println!("line {i} of noise that the runner must not keep in full");
    }
    panic!("the message after the noise");
}

#[test]
fn writes_to_the_raw_stdout() {
    use std::io::Write;
    // Not captured by the harness: lands in the middle of its `test ... ok` line.
    let _ = std::io::stdout().write_all(b"raw, no newline");
}

#[test]
fn leaves_a_child_behind() {
    // The child inherits the test's output pipes; the runner must not wait for it.
    std::process::Command::new("sleep").arg("30").spawn().expect("sleep starts");
}
"#;

/// Builds the crafted crate and runs all its tests with a 2 s limit.
fn run_crafted() -> Vec<TestOutcome> {
    let repo = FakeRepo::new();
    repo.chapter("crafted", LIB, LIB, &[("crafted", TESTS)], None);
    let template = WorkspaceTemplate::from_repo_root(repo.root()).expect("the template");
    let work = repo.root().join("target/workbook");
    let scratch = scratch::prepare(
        &template,
        &work.join("scratch/crafted"),
        "crafted-stub",
        &repo.root().join("exercises/crafted"),
        &repo.root().join("exercises/crafted/src"),
    )
    .expect("the scratch workspace");
    let binaries = runner::build_tests(&scratch.workspace, &scratch.package, &work.join("target"))
        .expect("cargo runs")
        .expect("the crafted crate builds");
    assert_eq!(binaries.len(), 1);
    assert_eq!(binaries[0].target, "crafted");
    let cases = runner::list_tests(&binaries).expect("the tests list");
    assert_eq!(cases.len(), 10, "{cases:?}");
    let options = RunOptions {
        timeout: Duration::from_secs(2),
        output_limit: 4096,
        ..RunOptions::for_crate(&scratch.crate_dir, Duration::from_secs(2))
    };
    runner::run_tests(&cases, &options, 4, &|_| {}).expect("the tests run")
}

fn outcome<'a>(outcomes: &'a [TestOutcome], name: &str) -> &'a TestOutcome {
    outcomes
        .iter()
        .find(|o| o.case.name == name)
        .unwrap_or_else(|| panic!("no outcome for {name}"))
}

#[test]
fn each_test_gets_the_verdict_its_process_earns() {
    let outcomes = run_crafted();
    let names: Vec<&str> = outcomes.iter().map(|o| o.case.name.as_str()).collect();
    // Results come back in the listing's order (libtest lists alphabetically).
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);

    let passes = outcome(&outcomes, "passes");
    assert_eq!(passes.verdict, Verdict::Passed);
    assert_eq!(passes.message, "");

    let fails = outcome(&outcomes, "fails_with_a_message");
    assert_eq!(fails.verdict, Verdict::Failed);
    assert_eq!(
        fails.message, "the answer moved; yours: 42; expected: 41",
        "{fails:?}"
    );

    let loops = outcome(&outcomes, "loops_forever");
    assert_eq!(loops.verdict, Verdict::TimedOut);
    assert_eq!(loops.message, "timed out after 2 s and was killed");

    // exit(0) ends the process before the harness reports `ok`: judged failed, not passed.
    let exit0 = outcome(&outcomes, "exits_zero");
    assert_eq!(exit0.verdict, Verdict::Failed);
    assert!(exit0.message.contains("std::process::exit"), "{exit0:?}");

    let exit1 = outcome(&outcomes, "exits_one");
    assert_eq!(exit1.verdict, Verdict::Failed);
    assert_eq!(
        exit1.message,
        "exited with status 1 without a panic message"
    );

    let aborts = outcome(&outcomes, "aborts");
    assert_eq!(aborts.verdict, Verdict::Failed);
    assert!(
        aborts.message.contains("killed by signal 6 (SIGABRT)"),
        "{aborts:?}"
    );

    let ignored = outcome(&outcomes, "ignored_but_failing");
    assert_eq!(ignored.verdict, Verdict::Failed);
    assert_eq!(ignored.message, "ignored tests run too");

    let raw = outcome(&outcomes, "writes_to_the_raw_stdout");
    assert_eq!(raw.verdict, Verdict::Passed, "{raw:?}");

    let child = outcome(&outcomes, "leaves_a_child_behind");
    assert_eq!(child.verdict, Verdict::Passed, "{child:?}");
    assert!(child.duration < Duration::from_secs(20), "{child:?}");
}

#[test]
fn output_is_capped_but_keeps_the_panic_message() {
    let outcomes = run_crafted();
    let noisy = outcome(&outcomes, "prints_a_lot_then_panics");
    assert_eq!(noisy.verdict, Verdict::Failed);
    assert_eq!(noisy.message, "the message after the noise");
    assert!(noisy.stdout.len() < 4096 + 100, "{}", noisy.stdout.len());
    assert!(noisy.stdout.contains("bytes not kept"));
}

#[test]
fn a_compile_error_is_reported_with_the_compilers_words() {
    let repo = FakeRepo::new();
    let broken = "pub fn answer() -> u32 { \"forty-two\" }\n";
    repo.chapter(
        "broken",
        broken,
        broken,
        &[("t", "#[test] fn t() {}\n")],
        None,
    );
    let template = WorkspaceTemplate::from_repo_root(repo.root()).expect("the template");
    let work = repo.root().join("target/workbook");
    let scratch = scratch::prepare(
        &template,
        &work.join("scratch/broken"),
        "broken-stub",
        &repo.root().join("exercises/broken"),
        &repo.root().join("exercises/broken/src"),
    )
    .expect("the scratch workspace");
    let failure = runner::build_tests(&scratch.workspace, &scratch.package, &work.join("target"))
        .expect("cargo runs")
        .expect_err("the build fails");
    assert_eq!(failure.errors.len(), 1, "{failure:?}");
    assert!(failure.errors[0].contains("error[E0308]"), "{failure:?}");
    assert!(failure.errors[0].contains("src/lib.rs"), "{failure:?}");
    assert_eq!(failure.headline(), "error[E0308]: mismatched types");
}

#[test]
fn a_scratch_crate_takes_the_overlay_src_and_drops_stale_files() {
    let repo = FakeRepo::new();
    repo.chapter(
        "lay",
        "pub fn stub() {}\n",
        "pub fn solved() {}\n",
        &[],
        None,
    );
    repo.write(
        "solutions/lay/src/extra.rs",
        "// only in the first overlay\n",
    );
    let template = WorkspaceTemplate::from_repo_root(repo.root()).expect("the template");
    let ws = repo.root().join("target/workbook/scratch/lay");
    let prepare = |overlay: &str| {
        scratch::prepare(
            &template,
            &ws,
            "lay-x",
            &repo.root().join("exercises/lay"),
            &repo.root().join(overlay),
        )
        .expect("the scratch workspace")
    };
    let before = repo.snapshot();
    let first = prepare("solutions/lay/src");
    assert_eq!(first.package, "lay");
    assert_eq!(
        std::fs::read_to_string(first.crate_dir.join("src/lib.rs")).unwrap(),
        "pub fn solved() {}\n"
    );
    assert!(first.crate_dir.join("src/extra.rs").is_file());
    drop(first);
    let second = prepare("exercises/lay/src");
    assert_eq!(
        std::fs::read_to_string(second.crate_dir.join("src/lib.rs")).unwrap(),
        "pub fn stub() {}\n"
    );
    assert!(!second.crate_dir.join("src/extra.rs").exists());
    let manifest = std::fs::read_to_string(ws.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("members = [\"lay-x\"]"), "{manifest}");
    assert!(
        repo.snapshot() == before,
        "prepare wrote outside its workspace"
    );
}

#[test]
fn prepare_refuses_a_directory_it_did_not_make() {
    let repo = FakeRepo::new();
    repo.chapter(
        "lay",
        "pub fn stub() {}\n",
        "pub fn solved() {}\n",
        &[],
        None,
    );
    let precious = repo.write("precious/notes.txt", "keep me");
    let template = WorkspaceTemplate::from_repo_root(repo.root()).expect("the template");
    let err = scratch::prepare(
        &template,
        &repo.root().join("precious"),
        "lay-x",
        &repo.root().join("exercises/lay"),
        &repo.root().join("exercises/lay/src"),
    )
    .expect_err("a foreign directory");
    assert!(
        err.to_string().contains("was not made by workbook"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(precious).unwrap(), "keep me");
}

#[test]
fn one_members_compile_error_leaves_the_others_built_in_the_same_cargo_run() {
    let repo = FakeRepo::new();
    let test =
        |krate: &str| format!("#[test]\nfn t() {{\n    assert_eq!({krate}::answer(), 42);\n}}\n");
    repo.chapter("good", LIB, LIB, &[("good_t", &test("good"))], None);
    let broken = "pub fn answer() -> u32 { \"forty-two\" }\n";
    repo.chapter(
        "broken",
        broken,
        LIB,
        &[("broken_t", &test("broken"))],
        None,
    );
    let template = WorkspaceTemplate::from_repo_root(repo.root()).expect("the template");
    let work = repo.root().join("target/workbook");
    let exercise = |name: &str| repo.root().join("exercises").join(name);
    let (good, bad) = (exercise("good"), exercise("broken"));
    let (good_src, bad_src) = (good.join("src"), bad.join("src"));
    let members = [
        scratch::Member {
            member: "good-g-student",
            crate_src: &good,
            src_overlay: &good_src,
        },
        scratch::Member {
            member: "broken-g-student",
            crate_src: &bad,
            src_overlay: &bad_src,
        },
    ];
    let ws = scratch::prepare_workspace(&template, &work.join("students/student"), &members)
        .expect("the scratch workspace");
    let pairs: Vec<(String, String)> = members
        .iter()
        .zip(&ws.crates)
        .map(|(m, (_, package))| (m.member.to_string(), package.clone()))
        .collect();
    let built = runner::build_all_tests(&ws.workspace, &pairs, &work.join("target"), None)
        .expect("cargo runs");
    assert_eq!(built.len(), 2, "{built:?}");
    let runner::PackageBuild::Built(binaries) = &built["good"] else {
        panic!("good does not build: {built:?}");
    };
    assert_eq!(binaries.len(), 1);
    assert_eq!(binaries[0].target, "good_t");
    assert!(binaries[0].path.is_file());
    let runner::PackageBuild::Failed(failure) = &built["broken"] else {
        panic!("broken builds: {built:?}");
    };
    assert!(
        failure.errors[0].contains("mismatched types"),
        "{failure:?}"
    );
    assert!(
        failure.errors[0].contains("broken-g-student/src/lib.rs"),
        "{failure:?}"
    );
}
