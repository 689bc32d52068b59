//! One Gradescope assignment per chapter: `export gradescope --chapter ch01 --timeout 20 --jobs 1`
//! writes a package whose `run_autograder` grades that chapter only, out of its own points, from
//! a `.tar.gz` that Gradescope leaves unpacked in `/autograder/submission`, and answers loose
//! `.rs` files with what to upload. The package is unpacked into a folder laid out like
//! Gradescope's and run there (every test in the sandbox), as `grade_gradescope.rs` does; where
//! the sandbox cannot run, the test is skipped with a notice, or fails under `CI=true`.

use crate::common;
use crate::common::gradescope::{run_autograder, share_build_folder, unpack};

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// Exports the assignment of chapter 1 into `autograder/source`, unpacked as Gradescope does.
fn unpack_assignment(dir: &Path, autograder: &Path) -> Vec<String> {
    let zip_path = dir.join("ch01.zip");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo_root())
            .args(["export", "gradescope", "--chapter", "1", "--timeout", "20"])
            .args(["--memory-limit", "1GiB", "--jobs", "1", "--out"])
            .arg(&zip_path),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let source = autograder.join("source");
    let names = unpack(&zip_path, &source);
    share_build_folder(&source);
    names
}

#[test]
fn a_chapter_s_assignment_grades_a_tar_gz_upload_and_explains_loose_files() {
    if common::skip_without_sandbox() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    let autograder = dir.path().join("autograder");
    let names = unpack_assignment(dir.path(), &autograder);
    let source = autograder.join("source");
    assert!(
        names.iter().any(|n| n == "rust-toolchain.toml"),
        "{names:?}"
    );
    let run = std::fs::read_to_string(source.join("run_autograder")).unwrap();
    assert!(
        run.contains("--chapter ch01-availability --timeout 20 --memory-limit 1GiB --jobs 1"),
        "{run}"
    );

    // Loose files, as a student drags lib.rs alone into Gradescope's upload box.
    let submission = autograder.join("submission");
    std::fs::create_dir_all(&submission).unwrap();
    std::fs::copy(
        repo_root().join("solutions/ch01-availability/src/lib.rs"),
        submission.join("lib.rs"),
    )
    .unwrap();
    let results = run_autograder(&autograder, "the upload");
    assert_eq!(results["score"].as_u64(), Some(0), "{results}");
    let output = results["output"].as_str().unwrap();
    assert!(
        output.contains("Loose .rs files cannot be graded"),
        "{output}"
    );
    assert!(
        output.contains(
            "Upload your exercises/ folder (or each chapter's folder, such as ch01-availability/"
        ),
        "{output}"
    );

    // A .tar.gz of the chapter's folder, which Gradescope does not unpack.
    std::fs::remove_file(submission.join("lib.rs")).unwrap();
    let file = std::fs::File::create(submission.join("c_halfdone.tar.gz")).unwrap();
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::default(),
    ));
    tar.append_dir_all(
        "ch01-availability/src",
        repo_root().join("solutions/ch01-availability/src"),
    )
    .unwrap();
    tar.into_inner().unwrap().finish().unwrap();
    let results = run_autograder(&autograder, "the upload");
    // Chapter 1 alone, out of its 21 points: no other chapter is graded.
    assert_eq!(results["score"].as_u64(), Some(21), "{results}");
    let tests = results["tests"].as_array().expect("tests");
    assert!(!tests.is_empty());
    for test in tests {
        assert!(
            test["name"]
                .as_str()
                .unwrap()
                .starts_with("ch01-availability::"),
            "{test}"
        );
        assert_eq!(test["status"], "passed", "{test}");
    }
    let output = results["output"].as_str().unwrap();
    assert!(
        output.contains("graded the archive c_halfdone.tar.gz (the only file uploaded)"),
        "{output}"
    );
}
