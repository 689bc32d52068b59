//! `workbook export gradescope`: the package is unpacked into a folder laid out like Gradescope's
//! `/autograder`, and its `run_autograder` grades a submission there (every test in the sandbox)
//! into `results/results.json`, hidden tests included; this build's `workbook` stands in for the
//! one setup.sh would build, and the scratch builds share this repository's build folder. In the
//! hosted grader's container the same runs in the Landlock tier, and then the class of six
//! (made from the student edition) is graded by chapter 1's package, after its `setup.sh` ran
//! offline (apt-get, curl, rustup and cargo's build of workbook stand-ins that write down what
//! they are asked): the same scores as `grade --class` with a roster gives here. Where the sandbox
//! or the container cannot run, the tests are skipped with a notice, or fail under `CI=true`
//! (`common/sandbox.rs`).

use crate::common;
use crate::common::gradescope::{run_autograder, share_build_folder, unpack};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use workbook::grade::report;
use workbook::grade::student::README;

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
/// says so in results.json; then the class of six made from the student edition, each student's
/// upload in `/autograder/submission`, gets from chapter 1's package (set up by its `setup.sh`)
/// the scores `grade --class` gives it. Run here, it runs itself there (one container for both).
#[test]
fn in_the_hosted_graders_container_run_autograder_grades_in_the_landlock_tier() {
    if common::in_hosted_grader() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let autograder = Path::new("/autograder");
        let results = autograde(dir.path(), autograder);
        let output = results["output"].as_str().unwrap();
        assert!(
            output.contains("\nSandbox: landlock (as root: a uid per test, Landlock ABI "),
            "{output}"
        );
        std::fs::remove_dir_all(autograder).unwrap();
        the_class_on_chapter_1s_assignment(dir.path(), autograder);
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
    let names = unpack(&zip_path, &source);
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
    share_build_folder(&source);

    let results = run_autograder(autograder, "the submission");
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

// --- A class of six, from the student edition -----------------------------------------------

const CH01: &str = "ch01-availability";
const CH02: &str = "ch02-transfers";
/// Seconds each test may run, locally and in chapter 1's package: f_loops's looping test is
/// stopped at it.
const TIMEOUT: &str = "10";

/// The class, each student's folder with the scores (ch01 out of 21, ch02 out of 28) they must
/// get wherever they are graded.
const CLASS: [(&str, u64, u64); 6] = [
    // The reference solutions copied into the edition.
    ("a_reference", 21, 28),
    // The edition as it was handed out.
    ("b_stubs", 0, 0),
    // Chapter 1's lib.rs solved (cuda_status 1 point, choose_device 10, describe 4), its
    // prediction and chapter 2 not.
    ("c_halfdone", 15, 0),
    // Both solved, but chapter 1 does not compile.
    ("d_broken", 0, 28),
    // The stubs, with chapter 1's tests emptied so that they would pass.
    ("e_tests_edited", 0, 0),
    // Both solved, but cuda_status loops forever: its one test (1 point) times out.
    ("f_loops", 20, 28),
];

/// Exports this workbook's student edition into `dir/edition` and makes the class in
/// `dir/class` from it: each student starts from the edition's chapters 1 and 2 and fills in
/// their `src/` (or edits their tests), as `CLASS` says; each folder holds `exercises/`, as the
/// student's repository does. Returns the class folder.
fn class_from_the_student_edition(dir: &Path) -> PathBuf {
    let root = repo_root();
    let edition = dir.join("edition");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(&root)
            .args(["export", "student", "--out"])
            .arg(&edition),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(!edition.join("solutions").exists());
    let class = dir.join("class");
    for (student, _, _) in CLASS {
        let exercises = class.join(student).join("exercises");
        for chapter in [CH01, CH02] {
            common::copy_dir(
                &edition.join("exercises").join(chapter),
                &exercises.join(chapter),
            );
        }
        let solve = |chapter: &str, file: &str| {
            std::fs::copy(
                root.join("solutions").join(chapter).join("src").join(file),
                exercises.join(chapter).join("src").join(file),
            )
            .expect("a solution's file");
        };
        let edit = |file: &str, find: &str, replace: &str| {
            let path = exercises.join(CH01).join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(
                text.matches(find).count(),
                1,
                "{find} in {}",
                path.display()
            );
            std::fs::write(&path, text.replacen(find, replace, 1)).unwrap();
        };
        match student {
            "a_reference" | "d_broken" | "f_loops" => {
                for file in ["lib.rs", "predict.rs"] {
                    solve(CH01, file);
                    solve(CH02, file);
                }
            }
            "c_halfdone" => solve(CH01, "lib.rs"),
            _ => {}
        }
        match student {
            "d_broken" => edit(
                "src/lib.rs",
                "format!(\"CUDA not available: {reason}\")",
                "reason.len()",
            ),
            "f_loops" => edit(
                "src/lib.rs",
                "pub fn cuda_status() -> String {\n",
                "pub fn cuda_status() -> String {\n    while std::hint::black_box(true) {\n        \
                 std::hint::spin_loop();\n    }\n",
            ),
            "e_tests_edited" => {
                let path = exercises.join(CH01).join("tests/availability.rs");
                let official = std::fs::read_to_string(&path).unwrap();
                let mut emptied = String::new();
                let mut lines = official.lines();
                while let Some(line) = lines.next() {
                    if line == "#[test]" {
                        let name = lines.next().unwrap().trim_end_matches(" {");
                        emptied.push_str(&format!("#[test]\n{name} {{}}\n\n"));
                    }
                }
                assert!(emptied.matches("#[test]").count() >= 13, "{emptied}");
                std::fs::write(&path, emptied).unwrap();
            }
            _ => {}
        }
    }
    class
}

/// The "done when", locally: the class made from the student edition, graded with
/// `grade --class` and a roster, gets exactly `CLASS`'s scores, in the grade file and in
/// Canvas's; the summary counts who passes each exercise and flags the reference solution handed
/// in. Chapter 1's package gives the same scores in the hosted grader's container (below).
#[test]
fn a_class_from_the_student_edition_gets_its_scores_with_a_roster() {
    if common::skip_without_sandbox() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    class_from_the_student_edition(dir.path());
    let mut roster = String::from("folder,id,email,name\n");
    for (i, (student, _, _)) in CLASS.iter().enumerate() {
        roster.push_str(&format!("{student},s{i},{student}@uni.edu,Student {i}\n"));
    }
    std::fs::write(dir.path().join("roster.csv"), roster).unwrap();
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .current_dir(dir.path())
            .arg("--root")
            .arg(repo_root())
            .args([
                "grade",
                "--class",
                "class",
                "--chapter",
                "1",
                "--chapter",
                "2",
            ])
            .args([
                "--timeout",
                TIMEOUT,
                "--jobs",
                "2",
                "--roster",
                "roster.csv",
            ])
            .args([
                "--csv",
                "grades.csv",
                "--feedback",
                "feedback",
                "--format",
                "canvas",
            ]),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let mut grades = format!("student,id,email,name,{CH01},{CH02},total\n(out of),,,,21,28,49\n");
    let mut canvas = format!(
        "Student,ID,SIS User ID,SIS Login ID,Section,{CH01},{CH02}\n\
         Points Possible,,,,,21,28\n"
    );
    for (i, (student, ch01, ch02)) in CLASS.iter().enumerate() {
        let total = ch01 + ch02;
        grades.push_str(&format!(
            "{student},s{i},{student}@uni.edu,Student {i},{ch01},{ch02},{total}\n"
        ));
        canvas.push_str(&format!("Student {i},,s{i},,,{ch01},{ch02}\n"));
    }
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect(name);
    assert_eq!(read("grades.csv"), grades, "{stderr}");
    assert_eq!(stdout, canvas, "{stderr}");

    // Who passes each exercise, the histogram, and the look-alikes: the reference handed in, and
    // the students who started from it (a_reference's chapter 2 is d_broken's and f_loops's).
    let summary = read("feedback/summary.md");
    for block in [
        "ch01-availability cuda_status                2/6\n\
         ch01-availability choose_device              3/6\n\
         ch01-availability describe                   3/6\n\
         ch01-availability predict_first_allocations  2/6\n\
         ch02-transfers upload                        3/6\n",
        "   0-9%    2  ########################################\n",
        "   100%    1  ####################\n",
        "ch01-availability: a_reference and the reference solution: 100% alike\n\
         ch02-transfers: a_reference and the reference solution: 100% alike\n\
         ch02-transfers: a_reference and d_broken: 100% alike\n",
        "ch01-availability: a_reference and f_loops: 92% alike\n\
         ch01-availability: f_loops and the reference solution: 92% alike\n",
        "ch01-availability: d_broken and the reference solution: 95% alike\n",
        "f_loops: 1",
    ] {
        assert!(summary.contains(block), "{block}\n{summary}");
    }
    assert!(!summary.contains("b_stubs and"), "{summary}");
    let json: serde_json::Value =
        serde_json::from_str(&read("feedback/summary.json")).expect("summary.json parses");
    assert_eq!(json["students"], 6, "{json}");
    let feedback = read("feedback/e_tests_edited.md");
    assert!(
        feedback.contains("your tests/ differs from the official one"),
        "{feedback}"
    );
}

/// Chapter 1's Gradescope assignment, as Gradescope runs it in `autograder`: the package exported
/// with `--chapter 1` and unpacked into `source/`, its `setup.sh` run (offline: see
/// [`run_setup_offline`]), then, for each student of the class made from the student edition,
/// their upload in `submission/` (their exercises/ folder, the chapter's folder alone, or a
/// .tar.gz Gradescope leaves packed) graded by `run_autograder` into `results/results.json`,
/// with `CLASS`'s chapter 1 score.
fn the_class_on_chapter_1s_assignment(dir: &Path, autograder: &Path) {
    let class = class_from_the_student_edition(dir);
    let zip_path = dir.join("ch01.zip");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo_root())
            .args([
                "export",
                "gradescope",
                "--chapter",
                "1",
                "--timeout",
                TIMEOUT,
            ])
            .args(["--jobs", "2", "--reference-solutions", "--out"])
            .arg(&zip_path),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let source = autograder.join("source");
    unpack(&zip_path, &source);
    share_build_folder(&source);
    run_setup_offline(dir, autograder);

    let submission = autograder.join("submission");
    for (student, ch01, _) in CLASS {
        let _ = std::fs::remove_dir_all(&submission);
        let _ = std::fs::remove_dir_all(autograder.join("results"));
        let theirs = class.join(student).join("exercises");
        // The student edition's README tells students to upload the chapter's folder as a zip
        // (which Gradescope unpacks) or a .tar.gz (which it leaves packed), made by its commands.
        let upload = match student {
            "b_stubs" => {
                assert!(
                    README.contains("zip -r ch01.zip ch01-availability"),
                    "{README}"
                );
                common::copy_dir(&theirs.join(CH01), &submission.join(CH01));
                "ch01.zip (unpacked by Gradescope)"
            }
            "c_halfdone" => {
                let command = "tar czf ch01.tar.gz -C exercises ch01-availability";
                assert!(README.contains(command), "{README}");
                std::fs::create_dir_all(&submission).unwrap();
                let status = std::process::Command::new("sh")
                    .args(["-c", command])
                    .current_dir(class.join(student))
                    .status()
                    .expect("tar runs");
                assert!(status.success());
                std::fs::rename(
                    class.join(student).join("ch01.tar.gz"),
                    submission.join("ch01.tar.gz"),
                )
                .unwrap();
                "ch01.tar.gz"
            }
            _ => {
                common::copy_dir(&theirs, &submission.join("exercises"));
                "exercises/"
            }
        };
        let results = run_autograder(autograder, student);
        assert_eq!(
            (results["score"].as_u64(), results["max_score"].as_u64()),
            (Some(ch01), Some(21)),
            "{student}, who uploaded {upload}: {results}"
        );
        let tests = results["tests"].as_array().expect("tests");
        assert!(
            tests.iter().all(|t| t["name"]
                .as_str()
                .unwrap()
                .starts_with("ch01-availability::")),
            "{student}: chapter 1 alone is graded: {results}"
        );
        let output = results["output"].as_str().unwrap();
        assert!(
            output.contains("\nSandbox: landlock (as root: a uid per test, Landlock ABI "),
            "{student}: {output}"
        );
        // As in grade --class's summary, those like the reference solution are flagged, in an
        // entry worth nothing that students never see.
        let look_alike = tests
            .iter()
            .find(|t| t["name"].as_str().unwrap().ends_with(report::LOOK_ALIKE));
        let like_the_reference = match student {
            "a_reference" => Some(100),
            "d_broken" => Some(95),
            "f_loops" => Some(92),
            _ => None,
        };
        match (like_the_reference, look_alike) {
            (Some(percent), Some(entry)) => {
                assert_eq!(entry["visibility"], "hidden", "{entry}");
                assert_eq!(entry["max_score"], 0, "{entry}");
                // On Gradescope, a submission is named after its folder, `submission`.
                let line =
                    format!("{CH01}: submission and the reference solution: {percent}% alike\n");
                assert!(
                    entry["output"].as_str().unwrap().starts_with(&line),
                    "{entry}"
                );
            }
            (None, None) => {}
            (expected, found) => panic!("{student}: expected {expected:?}, found {found:?}"),
        }
        if student == "e_tests_edited" {
            assert!(
                output.contains("your tests/ differs from the official one"),
                "{output}"
            );
        }
    }
}

/// Runs the package's `setup.sh` (in `autograder/source`) as Gradescope does once, but offline:
/// apt-get and curl are stand-ins that write down what they were asked, the rustup that curl's
/// installer "installs" does the same, and the cargo it "installs" copies this build's `workbook`
/// where `cargo build --release -p workbook` would put it. Everything after that is real: setup.sh
/// grades the assignment's stubs, which builds their official tests. The log must be clean (no
/// sandbox warning, no git failure), the toolchain the one the package pins.
fn run_setup_offline(dir: &Path, autograder: &Path) {
    let shims = dir.join("shims");
    let rust = dir.join("shims-rust");
    let log = dir.join("shims.log");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let write = |path: PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write(
        shims.join("apt-get"),
        "#!/bin/sh\necho \"apt-get $*\" >> \"$SHIM_LOG\"\n",
    );
    // rustup's installer, as `curl ... | sh -s -- ARGS` runs it.
    write(
        shims.join("curl"),
        "#!/bin/sh\necho \"curl $*\" >> \"$SHIM_LOG\"\ncat <<'EOF'\n\
         echo \"rustup-init $*\" >> \"$SHIM_LOG\"\n\
         mkdir -p \"$HOME/.cargo/bin\"\n\
         cp \"$SHIM_RUST/rustup\" \"$SHIM_RUST/cargo\" \"$HOME/.cargo/bin/\"\nEOF\n",
    );
    write(
        rust.join("rustup"),
        "#!/bin/sh\necho \"rustup $*\" >> \"$SHIM_LOG\"\n",
    );
    write(
        rust.join("cargo"),
        "#!/bin/sh\n\
         echo \"cargo $* (WORKBOOK_EMBED_FROM_FILES=$WORKBOOK_EMBED_FROM_FILES)\" >> \"$SHIM_LOG\"\n\
         [ \"$*\" = \"build --release --locked -p workbook\" ] || exit 1\n\
         mkdir -p target/release && cp \"$WORKBOOK_BIN\" target/release/workbook\n",
    );
    // The real toolchain's bin folder (cargo and rustc, no rustup), for the grading setup.sh does.
    let sysroot = common::run(std::process::Command::new("rustc").args(["--print", "sysroot"])).1;
    let toolchain = Path::new(sysroot.trim()).join("bin");
    assert!(toolchain.join("cargo").is_file(), "{}", toolchain.display());
    let path = format!(
        "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:{}",
        shims.display(),
        toolchain.display()
    );
    let (output, stdout, stderr) = common::run(
        std::process::Command::new("bash")
            .arg(autograder.join("source/setup.sh"))
            .env("AUTOGRADER_ROOT", autograder)
            .env("HOME", &home)
            .env("PATH", path)
            .env("CARGO", toolchain.join("cargo"))
            .env("SHIM_LOG", &log)
            .env("SHIM_RUST", &rust)
            .env("WORKBOOK_BIN", env!("CARGO_BIN_EXE_workbook"))
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("GPUMEM_DEVICE")
            .env_remove("GPUMEM_CPU_CAPACITY"),
    );
    let setup_log = format!("{stdout}{stderr}");
    assert!(output.status.success(), "{setup_log}");
    let pinned = workbook::grade::export::PINNED_TOOLCHAIN;
    assert_eq!(
        setup_log,
        format!("setup.sh: workbook and the official tests are built (toolchain {pinned}).\n"),
        "a clean log: no sandbox warning, no git failure"
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "apt-get update\n\
             apt-get install -y --no-install-recommends bubblewrap build-essential \
             ca-certificates curl\n\
             curl --proto =https --tlsv1.2 -sSf https://sh.rustup.rs\n\
             rustup-init -y --profile minimal --default-toolchain {pinned}\n\
             rustup toolchain install {pinned} --profile minimal\n\
             cargo build --release --locked -p workbook (WORKBOOK_EMBED_FROM_FILES=1)\n"
        )
    );
}
