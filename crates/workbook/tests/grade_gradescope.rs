//! `workbook export gradescope`: the package is unpacked into a folder laid out like Gradescope's
//! `/autograder`, and its `run_autograder` grades a submission there (every test in the sandbox)
//! into `results/results.json`, hidden tests included. `setup.sh` (which installs Rust and
//! bubblewrap with apt-get and rustup) is not run: this build's `workbook` stands in for the one
//! it would build, and the scratch builds share this repository's build folder. Where the sandbox
//! cannot run, the test is skipped with a notice, or fails under `CI=true` (`common/sandbox.rs`).

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

#[test]
fn run_autograder_grades_a_submission_into_results_json() {
    if common::skip_without_sandbox() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    let results = autograde(dir.path(), &dir.path().join("autograder"));
    if std::env::var_os("WORKBOOK_BWRAP").is_none() && !common::in_hosted_grader() {
        let output = results["output"].as_str().unwrap();
        assert!(
            output.contains("\nSandbox: namespaces (bubblewrap)\n"),
            "{output}"
        );
    }
}

/// In the hosted grader's container (`scripts/hosted-grader.sh`: Docker's seccomp rules, no
/// namespaces), the package unpacked into `/autograder` itself grades in the Landlock tier and
/// says so in results.json. Run here, it runs itself there.
#[test]
fn in_the_hosted_graders_container_run_autograder_grades_in_the_landlock_tier() {
    if common::in_hosted_grader() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let results = autograde(dir.path(), Path::new("/autograder"));
        let output = results["output"].as_str().unwrap();
        assert!(
            output.contains("\nSandbox: landlock (as root: a uid per test, Landlock ABI "),
            "{output}"
        );
        return;
    }
    if common::skip_without_podman() || common::skip_without_landlock() {
        return;
    }
    let (output, stdout, stderr) = common::run(
        std::process::Command::new(repo_root().join("scripts/hosted-grader.sh"))
            .arg(std::env::current_exe().expect("this test executable"))
            .arg("--exact")
            .arg(common::test_name(
                module_path!(),
                "in_the_hosted_graders_container_run_autograder_grades_in_the_landlock_tier",
            ))
            .env("CARGO_NET_OFFLINE", "true"),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed;"), "{stdout}");
}

/// Exports the package (into `dir`), unpacks it into `autograder`/source as Gradescope does, lays
/// out a submission of chapters 1 and 2 solved, runs `run_autograder`, checks the scores, and
/// returns results.json.
fn autograde(dir: &Path, autograder: &Path) -> serde_json::Value {
    let root = repo_root();
    let hidden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/submissions/hidden");
    let zip_path = dir.join("autograder.zip");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(&root)
            .args(["export", "gradescope", "--out"])
            .arg(&zip_path)
            .arg("--hidden-tests")
            .arg(&hidden),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("hidden tests included"), "{stdout}");

    // Unpacked as Gradescope does, into /autograder/source.
    let source = autograder.join("source");
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&zip_path).unwrap()).unwrap();
    let mut names = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let name = entry.enclosed_name().expect("a relative name");
        names.push(name.display().to_string());
        let path = source.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
        if let Some(mode) = entry.unix_mode() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o777)).unwrap();
        }
    }
    for name in [
        "setup.sh",
        "run_autograder",
        "Cargo.toml",
        "Cargo.lock",
        "crates/gpumem/Cargo.toml",
        "exercises/ch02-transfers/tests/transfers.rs",
        "hidden-tests/ch02-transfers/leaks.rs",
        "hidden-tests/ch02-transfers/points.toml",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    assert!(!names.iter().any(|n| n.starts_with("solutions/")
        || n.starts_with("target/")
        || n.contains("/target/")));
    let mode = std::fs::metadata(source.join("run_autograder"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "run_autograder is executable");

    // A student's upload: chapters 1 and 2 solved, in the workbook's layout.
    let submission = autograder.join("submission");
    for chapter in ["ch01-availability", "ch02-transfers"] {
        common::copy_dir(
            &root.join("solutions").join(chapter).join("src"),
            &submission.join("exercises").join(chapter).join("src"),
        );
    }
    // The scratch builds reuse this repository's build folder (setup.sh would have filled the
    // package's own).
    let shared = root.join("target/workbook/target");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(source.join("target/workbook")).unwrap();
    std::os::unix::fs::symlink(&shared, source.join("target/workbook/target")).unwrap();

    let (output, stdout, stderr) = common::run(
        std::process::Command::new("bash")
            .arg(source.join("run_autograder"))
            .env("AUTOGRADER_ROOT", autograder)
            .env("WORKBOOK_BIN", env!("CARGO_BIN_EXE_workbook"))
            .env_remove("GPUMEM_DEVICE")
            .env_remove("GPUMEM_CPU_CAPACITY"),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(autograder.join("results/results.json")).expect("results.json"),
    )
    .expect("results.json parses");
    // ch01 21 points, ch02 28 + the hidden tests' 4; the other chapters not submitted.
    assert_eq!(results["score"].as_u64(), Some(21 + 28 + 4), "{results}");
    let tests = results["tests"].as_array().expect("tests");
    let passed = |prefix: &str| {
        tests
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with(prefix))
            .all(|t| t["status"] == "passed")
    };
    assert!(passed("ch01-availability::") && passed("ch02-transfers::"));
    assert!(
        tests
            .iter()
            .any(|t| t["name"] == "ch02-transfers::round_trip_twice_leaves_nothing_behind"),
        "the hidden tests were graded"
    );
    assert!(
        tests
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("ch03-") && t["status"] == "failed"),
        "every chapter is graded"
    );
    assert!(!autograder.join("results/results.json.partial").exists());
    results
}
