//! `workbook grade` over a corpus of crafted submissions: each case of `tests/submissions/corpus.toml`
//! (built from the reference solutions by small edits) and hostile archives and folders built here,
//! graded in one run of chapters 1 and 2 with the hidden tests of `tests/submissions/hidden/`.
//! Every case's score and every test's status are asserted exactly, and every output format is
//! read back with a real parser. Where the sandbox cannot run, these tests are skipped with a
//! notice, or fail under `CI=true` (`common/sandbox.rs`).

mod common;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;
use workbook::course::app_state::Repo;
use workbook::grade::{
    self, ChapterResult, ChapterState, GradeOptions, GradeReport, Status, StudentResult,
    gradebook::Gradebook, report, submission,
};

const CH01: &str = "ch01-availability";
const CH02: &str = "ch02-transfers";
/// ch01's points (chapter.toml).
const CH01_MAX: u32 = 21;
/// ch02's points: 28 from chapter.toml, and the hidden tests' 3 + 1.
const CH02_MAX: u32 = 32;
/// The limit on what a submission may unpack to, in this run.
const MAX_BYTES: u64 = 8 << 20;
/// The memory one test process may have, in this run (so the cpu device's capacity is 128 MiB).
const MEMORY_LIMIT: u64 = 256 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Corpus {
    submission: Vec<Crafted>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Crafted {
    name: String,
    chapters: Vec<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default, rename = "crate")]
    with_crate: bool,
    #[serde(default)]
    layout: Option<String>,
    #[serde(default)]
    archive: Option<String>,
    #[serde(default)]
    edit: Vec<Edit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Edit {
    chapter: String,
    path: String,
    #[serde(default)]
    find: Option<String>,
    #[serde(default)]
    replace: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    delete: bool,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// Lays out one crafted submission in `folder` (its contents, as a learner would send them).
fn lay_out(root: &Path, crafted: &Crafted, folder: &Path) {
    let chapter_dir = |chapter: &str| match crafted.layout.as_deref().unwrap_or("workbook") {
        "workbook" => folder.join("exercises").join(chapter),
        "chapters" => folder.join(chapter),
        "wrapped" => folder
            .join(format!("{}-work", crafted.name))
            .join("exercises")
            .join(chapter),
        other => panic!("unknown layout {other}"),
    };
    let base = crafted.base.as_deref().unwrap_or("solutions");
    for chapter in &crafted.chapters {
        let dir = chapter_dir(chapter);
        common::copy_dir(&root.join(base).join(chapter).join("src"), &dir.join("src"));
        if crafted.with_crate {
            let official = root.join("exercises").join(chapter);
            common::copy_dir(&official.join("tests"), &dir.join("tests"));
            std::fs::copy(official.join("Cargo.toml"), dir.join("Cargo.toml")).expect("copy");
        }
    }
    for edit in &crafted.edit {
        let path = chapter_dir(&edit.chapter).join(&edit.path);
        if edit.delete {
            std::fs::remove_file(&path).expect("a file to delete");
        } else if let Some(content) = &edit.content {
            std::fs::write(&path, content).expect("a file");
        } else {
            let (find, replace) = (
                edit.find.as_deref().expect("find"),
                edit.replace.as_deref().expect("replace"),
            );
            let text = std::fs::read_to_string(&path).expect("a file to edit");
            assert_eq!(
                text.matches(find).count(),
                1,
                "{}: {:?} must occur exactly once in {}",
                crafted.name,
                find,
                path.display()
            );
            std::fs::write(&path, text.replacen(find, replace, 1)).expect("the edited file");
        }
    }
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a folder").flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else {
                out.push(entry.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn zip_folder(folder: &Path, archive: &Path) {
    let mut zip = zip::ZipWriter::new(File::create(archive).expect("a zip"));
    let options = zip::write::SimpleFileOptions::default();
    for rel in files(folder) {
        zip.start_file(rel.to_string_lossy(), options)
            .expect("a zip entry");
        zip.write_all(&std::fs::read(folder.join(&rel)).unwrap())
            .expect("zip data");
    }
    zip.finish().expect("a finished zip");
}

fn tar_gz_folder(folder: &Path, archive: &Path) {
    let gz = flate2::write::GzEncoder::new(
        File::create(archive).expect("a tar.gz"),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    tar.append_dir_all(".", folder).expect("tar entries");
    tar.into_inner()
        .expect("a tar")
        .finish()
        .expect("a gzip stream");
}

/// A tar header with a raw name (no checks, as a hostile tool would write it).
fn raw_header(name: &str, kind: tar::EntryType, size: u64, link: &str) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    let gnu = header.as_gnu_mut().unwrap();
    gnu.name[..name.len()].copy_from_slice(name.as_bytes());
    gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    header
}

/// Archives and folders no honest tool makes: each must be refused, never unpacked outside.
fn hostile(root: &Path, class: &Path) {
    let lib = std::fs::read(root.join("solutions").join(CH01).join("src/lib.rs")).unwrap();
    let options = zip::write::SimpleFileOptions::default();

    // An entry that climbs out of the archive.
    let mut zip = zip::ZipWriter::new(File::create(class.join("zip-slip.zip")).unwrap());
    zip.start_file(format!("exercises/{CH01}/src/lib.rs"), options)
        .unwrap();
    zip.write_all(&lib).unwrap();
    zip.start_file("../../escaped-by-zip-slip.rs", options)
        .unwrap();
    zip.write_all(b"// outside\n").unwrap();
    zip.finish().unwrap();

    // Sixteen MiB of zeros in a few kilobytes, over this run's 8 MiB limit.
    let mut zip = zip::ZipWriter::new(File::create(class.join("zip-bomb.zip")).unwrap());
    zip.start_file(format!("exercises/{CH01}/src/lib.rs"), options)
        .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..16 {
        zip.write_all(&zeros).unwrap();
    }
    zip.finish().unwrap();

    // An absolute path, a symbolic link and a hard link pointing outside.
    for (name, header_name, kind, link) in [
        (
            "absolute-path.tar.gz",
            "/tmp/workbook-absolute-escape.rs",
            tar::EntryType::Regular,
            "",
        ),
        (
            "link-out.tar.gz",
            "exercises/ch01-availability/src/lib.rs",
            tar::EntryType::Symlink,
            "../../../../../../etc/passwd",
        ),
        (
            "hardlink-out.tar.gz",
            "exercises/ch01-availability/src/lib.rs",
            tar::EntryType::Link,
            "../outside.rs",
        ),
    ] {
        let gz = flate2::write::GzEncoder::new(
            File::create(class.join(name)).unwrap(),
            flate2::Compression::fast(),
        );
        let mut tar = tar::Builder::new(gz);
        let data: &[u8] = if kind == tar::EntryType::Regular {
            b"// outside\n"
        } else {
            b""
        };
        let header = raw_header(header_name, kind, data.len() as u64, link);
        tar.append(&header, data).unwrap();
        tar.into_inner().unwrap().finish().unwrap();
    }

    // A folder whose lib.rs is a link to the reference solution.
    let src = class.join("linked-solution").join(CH01).join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::os::unix::fs::symlink(
        root.join("solutions").join(CH01).join("src/lib.rs"),
        src.join("lib.rs"),
    )
    .unwrap();

    // A link that stays inside is left out, with a note; the rest is graded.
    let src = class.join("inside-link").join(CH01).join("src");
    common::copy_dir(&root.join("solutions").join(CH01).join("src"), &src);
    std::os::unix::fs::symlink("lib.rs", src.join("alias.rs")).unwrap();

    // Nothing to grade.
    std::fs::create_dir_all(class.join("empty")).unwrap();
    std::fs::write(class.join("empty").join("README.txt"), "my homework").unwrap();
}

struct Run {
    report: GradeReport,
    class: PathBuf,
    /// Listening on 127.0.0.1:GPUMEM_CORPUS_PORT while the corpus was graded, when that is set
    /// (in the hosted grader's container: the vandal submission tries to connect).
    listener: Option<std::net::TcpListener>,
    _dir: tempfile::TempDir,
}

/// The port the vandal submission tries to reach, inside the hosted grader's container (a
/// network namespace of its own, where it is free).
const VANDAL_PORT: u16 = 47011;

static RUN: LazyLock<Run> = LazyLock::new(|| {
    let root = repo_root();
    // A static is never dropped, so the folder outlives the run: keep it under cargo's scratch
    // folder for integration tests (target/tmp), not in the system's /tmp.
    let dir = tempfile::Builder::new()
        .prefix("grade-corpus-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary folder");
    let class = dir.path().join("class");
    let staging = dir.path().join("staging");
    std::fs::create_dir_all(&class).unwrap();
    let corpus: Corpus = toml::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/submissions/corpus.toml"),
        )
        .expect("corpus.toml"),
    )
    .expect("corpus.toml parses");
    for crafted in &corpus.submission {
        match crafted.archive.as_deref() {
            None => lay_out(&root, crafted, &class.join(&crafted.name)),
            Some(kind) => {
                let folder = staging.join(&crafted.name);
                lay_out(&root, crafted, &folder);
                match kind {
                    "zip" => zip_folder(&folder, &class.join(format!("{}.zip", crafted.name))),
                    "tar.gz" => {
                        tar_gz_folder(&folder, &class.join(format!("{}.tar.gz", crafted.name)))
                    }
                    other => panic!("unknown archive kind {other}"),
                }
            }
        }
    }
    hostile(&root, &class);
    let (paths, skipped) = submission::class_entries(&class).expect("the class");
    assert!(skipped.is_empty(), "{skipped:?}");
    let options = GradeOptions {
        chapters: vec!["ch01".into(), "ch02".into()],
        hidden_tests: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/submissions/hidden")),
        jobs: 2,
        timeout: Duration::from_secs(5),
        memory_limit: Some(MEMORY_LIMIT),
        progress: false,
        limits: submission::Limits {
            max_bytes: MAX_BYTES,
            ..submission::Limits::default()
        },
        ..GradeOptions::default()
    };
    let listener = std::env::var("GPUMEM_CORPUS_PORT").ok().map(|port| {
        let listener = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).expect("a port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        listener
    });
    let repo = Repo::at(&root).expect("the repository");
    let report = grade::grade(&repo, &paths, &options).expect("grading runs");
    Run {
        report,
        class,
        listener,
        _dir: dir,
    }
});

fn student(name: &str) -> &'static StudentResult {
    RUN.report
        .students
        .iter()
        .find(|s| s.student == name)
        .unwrap_or_else(|| panic!("no student {name}"))
}

fn chapter<'a>(student: &'a StudentResult, name: &str) -> &'a ChapterResult {
    student
        .chapters
        .iter()
        .find(|c| c.chapter == name)
        .unwrap_or_else(|| panic!("{} has no {name}", student.student))
}

/// The tests of a chapter that did not pass, with their status, sorted by name.
fn failures(student: &str, chapter_name: &str) -> BTreeMap<String, Status> {
    chapter(self::student(student), chapter_name)
        .tests
        .iter()
        .filter(|t| !t.status.passed())
        .map(|t| (t.test.name.clone(), t.status))
        .collect()
}

fn expect(pairs: &[(&str, Status)]) -> BTreeMap<String, Status> {
    pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

fn message<'a>(student: &'a StudentResult, chapter_name: &str, test: &str) -> &'a str {
    &chapter(student, chapter_name)
        .tests
        .iter()
        .find(|t| t.test.name == test)
        .unwrap_or_else(|| panic!("no test {test}"))
        .message
}

#[test]
fn every_submission_gets_exactly_its_score() {
    if common::skip_without_sandbox() {
        return;
    }
    let expected: &[(&str, u32, u32)] = &[
        ("abort", 0, 28),
        ("absolute-path", 0, 0),
        ("compile-error", 0, 0),
        ("compile-time-include", 0, 0),
        ("deadlock", 0, 27),
        ("deleted-tests", 0, CH02_MAX),
        ("device-memory-hog", 0, 28),
        ("edited-tests", 0, 0),
        ("empty", 0, 0),
        ("exit-zero", 0, 27),
        ("fake-result", 0, 24),
        ("forge-in-predictions", 0, 0),
        ("forge-pass-records", 0, 0),
        ("forge-when-graded", 0, 0),
        ("hardlink-out", 0, 0),
        ("host-memory-hog", 0, 27),
        ("huge-output", 0, 27),
        ("infinite-loop", 0, 28),
        ("inside-link", CH01_MAX, 0),
        ("kill-grader", 0, CH02_MAX),
        ("link-out", 0, 0),
        ("linked-solution", 0, 0),
        ("memory-leak", 0, 26),
        ("only-ch01", CH01_MAX, 0),
        ("outlive-grader", 0, CH02_MAX),
        ("panics", 0, 24),
        ("perfect", CH01_MAX, CH02_MAX),
        ("read-hidden-tests", 0, CH02_MAX),
        ("shared-memory-hog", 0, 27),
        ("stack-overflow", 0, 27),
        ("tamper-official-tests", 0, CH02_MAX),
        ("tarball", 0, CH02_MAX),
        ("untouched-stubs", 0, 0),
        ("vandal", 0, CH02_MAX),
        ("zip-bomb", 0, 0),
        ("zip-slip", 0, 0),
    ];
    let got: Vec<(&str, u32, u32)> = RUN
        .report
        .students
        .iter()
        .map(|s| {
            (
                s.student.as_str(),
                chapter(s, CH01).score(),
                chapter(s, CH02).score(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    for s in &RUN.report.students {
        assert_eq!(s.max_score(), CH01_MAX + CH02_MAX, "{}", s.student);
        assert_eq!(
            s.score(),
            chapter(s, CH01).score() + chapter(s, CH02).score()
        );
    }
}

#[test]
fn the_reference_solution_passes_every_official_and_hidden_test() {
    if common::skip_without_sandbox() {
        return;
    }
    let perfect = student("perfect");
    assert!(perfect.refused.is_none());
    assert!(perfect.notes.is_empty(), "{:?}", perfect.notes);
    for c in &perfect.chapters {
        assert_eq!(c.state, ChapterState::Graded);
        assert!(c.tests.iter().all(|t| t.status == Status::Passed), "{c:?}");
        assert!(c.notes.is_empty() && c.review.is_empty(), "{c:?}");
    }
    let hidden: Vec<(&str, u32)> = chapter(perfect, CH02)
        .tests
        .iter()
        .filter(|t| t.test.hidden)
        .map(|t| (t.test.name.as_str(), t.test.points))
        .collect();
    // points.toml gives 3 to the first; the second, not listed there, is worth 1.
    assert_eq!(
        hidden,
        [
            ("batched_upload_leaves_nothing_behind_once_dropped", 3),
            ("round_trip_twice_leaves_nothing_behind", 1)
        ]
    );
}

#[test]
fn a_compile_error_scores_the_chapter_zero_with_the_compilers_words() {
    if common::skip_without_sandbox() {
        return;
    }
    let s = student("compile-error");
    let c = chapter(s, CH02);
    let ChapterState::DoesNotCompile(errors) = &c.state else {
        panic!("{:?}", c.state);
    };
    assert!(
        errors[0].contains("error[E0308]: mismatched types"),
        "{errors:?}"
    );
    assert!(
        errors[0].contains("--> ch02-transfers/src/lib.rs:15:5"),
        "{errors:?}"
    );
    assert!(c.tests.iter().all(|t| t.status == Status::NotCompiled));
    assert_eq!(
        message(s, CH02, "upload_makes_exactly_one_host_to_device_copy"),
        "the chapter does not compile: error[E0308]: mismatched types"
    );
    // The other chapter was not in the submission.
    assert_eq!(chapter(s, CH01).state, ChapterState::NotSubmitted);
    assert!(
        chapter(s, CH01)
            .tests
            .iter()
            .all(|t| t.status == Status::NotSubmitted && t.message == "not submitted")
    );
}

#[test]
fn a_panic_fails_the_tests_that_reach_it_with_its_message() {
    if common::skip_without_sandbox() {
        return;
    }
    assert_eq!(
        failures("panics", CH02),
        expect(&[
            ("batched_upload_keeps_row_order", Status::Failed),
            (
                "batched_upload_leaves_nothing_behind_once_dropped",
                Status::Failed
            ),
            (
                "batched_upload_makes_one_copy_for_many_rows",
                Status::Failed
            ),
            (
                "batched_upload_moves_the_same_bytes_as_row_by_row",
                Status::Failed
            ),
            ("batched_upload_of_no_rows_copies_nothing", Status::Failed),
        ])
    );
    assert_eq!(
        message(student("panics"), CH02, "batched_upload_keeps_row_order"),
        "batched_upload broke on 4 rows"
    );
}

#[test]
fn infinite_loops_and_deadlocks_time_out_and_the_rest_still_counts() {
    if common::skip_without_sandbox() {
        return;
    }
    assert_eq!(
        failures("infinite-loop", CH02),
        expect(&[
            (
                "zeros_on_device_costs_the_memory_of_from_slice_without_the_copy",
                Status::TimedOut
            ),
            ("zeros_on_device_holds_zeros", Status::TimedOut),
            ("zeros_on_device_makes_no_copy", Status::TimedOut),
        ])
    );
    assert_eq!(
        failures("deadlock", CH02),
        expect(&[
            ("independent_copy_does_not_share_memory", Status::TimedOut),
            (
                "independent_copy_makes_one_device_to_device_copy_and_one_new_block",
                Status::TimedOut
            ),
            (
                "independent_copy_survives_overwriting_the_original",
                Status::TimedOut
            ),
        ])
    );
    assert_eq!(
        message(
            student("deadlock"),
            CH02,
            "independent_copy_does_not_share_memory"
        ),
        "timed out after 5 s and was killed"
    );
}

#[test]
fn stack_overflow_and_abort_fail_with_the_signal_named() {
    if common::skip_without_sandbox() {
        return;
    }
    let independent = [
        "independent_copy_does_not_share_memory",
        "independent_copy_makes_one_device_to_device_copy_and_one_new_block",
        "independent_copy_survives_overwriting_the_original",
    ];
    assert_eq!(
        failures("stack-overflow", CH02),
        expect(&independent.map(|t| (t, Status::Failed)))
    );
    let overflow = message(student("stack-overflow"), CH02, independent[0]);
    assert!(overflow.contains("has overflowed its stack"), "{overflow}");
    assert!(
        overflow.contains("killed by signal 6 (SIGABRT)"),
        "{overflow}"
    );

    assert_eq!(
        failures("abort", CH02),
        expect(&[
            (
                "zeros_on_device_costs_the_memory_of_from_slice_without_the_copy",
                Status::Failed
            ),
            ("zeros_on_device_holds_zeros", Status::Failed),
            ("zeros_on_device_makes_no_copy", Status::Failed),
        ])
    );
    assert_eq!(
        message(student("abort"), CH02, "zeros_on_device_holds_zeros"),
        "killed by signal 6 (SIGABRT)"
    );
}

#[test]
fn memory_hogs_fail_their_tests_at_the_memory_limit_and_say_so() {
    if common::skip_without_sandbox() {
        return;
    }
    let independent = [
        "independent_copy_does_not_share_memory",
        "independent_copy_makes_one_device_to_device_copy_and_one_new_block",
        "independent_copy_survives_overwriting_the_original",
    ];
    assert_eq!(
        failures("host-memory-hog", CH02),
        expect(&independent.map(|t| (t, Status::Failed)))
    );
    let host = message(student("host-memory-hog"), CH02, independent[0]);
    assert!(
        host.starts_with("ran out of memory: memory allocation of 67108864 bytes failed"),
        "{host}"
    );
    assert!(host.contains("limit of 256.00 MiB"), "{host}");
    assert!(host.contains("killed by signal 6 (SIGABRT)"), "{host}");

    // Device allocations meet the cpu device's capacity (half the limit) and gpumem's own error.
    assert_eq!(
        failures("device-memory-hog", CH02),
        expect(&[
            (
                "zeros_on_device_costs_the_memory_of_from_slice_without_the_copy",
                Status::Failed
            ),
            ("zeros_on_device_holds_zeros", Status::Failed),
            ("zeros_on_device_makes_no_copy", Status::Failed),
        ])
    );
    let device = message(
        student("device-memory-hog"),
        CH02,
        "zeros_on_device_holds_zeros",
    );
    // The test's `expect` prints gpumem's message: 64 MiB asked, the 128 MiB device full.
    assert!(
        device.contains(
            "Out of memory on the cpu device. Tried to allocate 64.00 MiB. \
             The cpu device has a total capacity of 128.00 MiB of which 0 bytes is free"
        ),
        "{device}"
    );
}

#[test]
fn exit_zero_inside_the_learners_code_is_not_a_pass() {
    if common::skip_without_sandbox() {
        return;
    }
    assert_eq!(
        failures("exit-zero", CH02),
        expect(&[
            (
                "download_makes_exactly_one_device_to_host_copy",
                Status::Failed
            ),
            ("round_trip_leaves_nothing_allocated", Status::Failed),
            (
                "round_trip_returns_the_data_with_one_copy_each_way",
                Status::Failed
            ),
            ("round_trip_twice_leaves_nothing_behind", Status::Failed),
        ])
    );
    let why = message(
        student("exit-zero"),
        CH02,
        "download_makes_exactly_one_device_to_host_copy",
    );
    assert!(why.contains("std::process::exit"), "{why}");
    let review = &chapter(student("exit-zero"), CH02).review;
    assert!(
        review
            .iter()
            .any(|r| r.starts_with("src/lib.rs:") && r.contains("`process::exit`")),
        "{review:?}"
    );
}

#[test]
fn printed_fake_libtest_results_cannot_pass_a_test() {
    if common::skip_without_sandbox() {
        return;
    }
    let fake = student("fake-result");
    assert_eq!(
        failures("fake-result", CH02),
        expect(&[
            ("round_trip_leaves_nothing_allocated", Status::Failed),
            (
                "round_trip_returns_the_data_with_one_copy_each_way",
                Status::Failed
            ),
            ("round_trip_twice_leaves_nothing_behind", Status::Failed),
            (
                "upload_allocates_one_block_rounded_to_512_bytes",
                Status::Failed
            ),
            (
                "upload_makes_exactly_one_host_to_device_copy",
                Status::Failed
            ),
            ("upload_of_nothing_copies_nothing", Status::Failed),
        ])
    );
    // The fake line reached stdout, exactly as the harness would print it, with exit status 0.
    let test = chapter(fake, CH02)
        .tests
        .iter()
        .find(|t| t.test.name == "upload_makes_exactly_one_host_to_device_copy")
        .unwrap();
    assert!(
        test.output
            .lines()
            .any(|l| l.starts_with("test result: ok. 1 passed;")),
        "{}",
        test.output
    );
    assert!(test.message.contains("before the test harness reported"));
}

#[test]
fn edited_or_deleted_tests_gain_nothing_and_are_noted() {
    if common::skip_without_sandbox() {
        return;
    }
    let edited = student("edited-tests");
    let c = chapter(edited, CH02);
    assert_eq!(c.state, ChapterState::Graded);
    assert_eq!(c.score(), 0);
    assert_eq!(
        c.tests.len(),
        21,
        "the official tests and the hidden ones ran"
    );
    assert!(c.tests.iter().all(|t| t.status == Status::Failed));
    assert_eq!(
        message(edited, CH02, "upload_makes_exactly_one_host_to_device_copy"),
        "not yet implemented: upload"
    );
    assert_eq!(
        c.notes,
        [
            "your tests/ differs from the official one (tests/transfers.rs edited): it was \
             ignored, the official tests graded this chapter",
            "your Cargo.toml differs from the official one: it was ignored, the official one was \
             used",
        ]
    );
    let deleted = chapter(student("deleted-tests"), CH02);
    assert_eq!(deleted.score(), CH02_MAX);
    assert_eq!(
        deleted.notes,
        [
            "your tests/ differs from the official one (tests/transfers.rs deleted): it was \
          ignored, the official tests graded this chapter"
        ]
    );
}

#[test]
fn huge_output_is_cut_but_the_panic_message_is_kept() {
    if common::skip_without_sandbox() {
        return;
    }
    let s = student("huge-output");
    let test = chapter(s, CH02)
        .tests
        .iter()
        .find(|t| t.test.name == "download_makes_exactly_one_device_to_host_copy")
        .unwrap();
    assert_eq!(test.status, Status::Failed);
    assert_eq!(test.message, "download gave up after the noise");
    assert!(test.output.contains("bytes not kept"), "{}", test.output);
    assert!(
        test.output.len() < 3 * grade::OUTPUT_LIMIT,
        "{}",
        test.output.len()
    );
    let json = report::gradescope(&RUN.report, s).to_string();
    assert!(json.len() < 200_000, "{}", json.len());
}

#[test]
fn a_device_memory_leak_fails_the_test_that_requires_memory_allocated_unchanged() {
    if common::skip_without_sandbox() {
        return;
    }
    assert_eq!(
        failures("memory-leak", CH02),
        expect(&[
            (
                "batched_upload_leaves_nothing_behind_once_dropped",
                Status::Failed
            ),
            (
                "batched_upload_makes_one_copy_for_many_rows",
                Status::Failed
            ),
            (
                "batched_upload_moves_the_same_bytes_as_row_by_row",
                Status::Failed
            ),
        ])
    );
    let why = message(
        student("memory-leak"),
        CH02,
        "batched_upload_leaves_nothing_behind_once_dropped",
    );
    assert_eq!(
        why,
        "batched_upload left device memory allocated; yours: 1536; expected: 0"
    );
}

#[test]
fn archives_in_every_layout_are_unpacked_and_graded() {
    if common::skip_without_sandbox() {
        return;
    }
    let zipped = student("only-ch01");
    assert_eq!(zipped.source, RUN.class.join("only-ch01.zip"));
    assert_eq!(chapter(zipped, CH01).score(), CH01_MAX);
    assert_eq!(chapter(zipped, CH02).state, ChapterState::NotSubmitted);
    let tarball = student("tarball");
    assert_eq!(chapter(tarball, CH02).score(), CH02_MAX);
    assert_eq!(chapter(tarball, CH01).state, ChapterState::NotSubmitted);
}

#[test]
fn hostile_archives_and_links_out_are_refused_and_nothing_escapes() {
    if common::skip_without_sandbox() {
        return;
    }
    let cases = [
        ("zip-slip", "climbs out of it with `..`"),
        ("absolute-path", "absolute path"),
        ("link-out", "outside the submission"),
        ("hardlink-out", "outside the submission"),
        ("linked-solution", "outside the submission"),
        ("zip-bomb", "more than 8 MiB (the limit) — a zip bomb?"),
    ];
    for (name, why) in cases {
        let s = student(name);
        let refused = s
            .refused
            .as_deref()
            .unwrap_or_else(|| panic!("{name} was graded"));
        assert!(refused.contains(why), "{name}: {refused}");
        assert_eq!(s.score(), 0);
        for c in &s.chapters {
            assert_eq!(c.state, ChapterState::NotGraded(refused.to_string()));
            assert!(c.tests.iter().all(|t| t.status == Status::NotGraded));
        }
    }
    assert!(!Path::new("/tmp/workbook-absolute-escape.rs").exists());
    let class_parent = RUN.class.parent().unwrap();
    for dir in [class_parent, class_parent.parent().unwrap()] {
        assert!(!dir.join("escaped-by-zip-slip.rs").exists());
    }
    let inside = student("inside-link");
    assert_eq!(inside.score(), CH01_MAX);
    assert_eq!(
        inside.notes,
        [
            "ch01-availability/src/alias.rs is a link (to lib.rs): links are not followed, it was \
          left out"
        ]
    );
    let empty = student("empty");
    assert!(empty.refused.is_none());
    assert!(
        empty.notes[0].starts_with("no chapter folder found (expected exercises/ch01-availability/src/ or ch01-availability/src/; found README.txt)"),
        "{:?}",
        empty.notes
    );
}

#[test]
fn gradescope_results_have_the_fields_and_types_gradescope_reads() {
    if common::skip_without_sandbox() {
        return;
    }
    for s in &RUN.report.students {
        let json = report::gradescope(&RUN.report, s);
        let top = json.as_object().expect("an object");
        assert_eq!(top["score"].as_u64(), Some(u64::from(s.score())));
        assert_eq!(top["max_score"].as_u64(), Some(u64::from(s.max_score())));
        assert!(top["output"].is_string());
        assert!(top["execution_time"].is_number());
        // The look-alike entries (hidden, worth nothing) aside.
        let (look_alike, tests): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = top["tests"]
            .as_array()
            .expect("tests")
            .iter()
            .partition(|t| t["visibility"] == "hidden");
        for entry in &look_alike {
            assert!(
                entry["name"]
                    .as_str()
                    .unwrap()
                    .ends_with(report::LOOK_ALIKE),
                "{entry}"
            );
            assert_eq!(
                (entry["score"].as_u64(), entry["max_score"].as_u64()),
                (Some(0), Some(0))
            );
        }
        assert_eq!(tests.len(), 14 + 21);
        let mut sum = 0;
        for t in tests {
            let name = t["name"].as_str().expect("name");
            let (chapter, test) = name.split_once("::").expect("<chapter>::<test>");
            assert!(chapter == CH01 || chapter == CH02, "{name}");
            assert!(!test.is_empty());
            let status = t["status"].as_str().expect("status");
            assert!(status == "passed" || status == "failed", "{status}");
            let score = t["score"].as_u64().expect("score");
            let max = t["max_score"].as_u64().expect("max_score");
            assert!(score == 0 || score == max);
            assert_eq!(status == "passed", score == max, "{name}");
            assert!(t["output"].is_string());
            if test.starts_with("batched_upload_leaves") || test.starts_with("round_trip_twice") {
                assert_eq!(t["visibility"], "after_published");
            } else {
                assert!(t.get("visibility").is_none());
            }
            sum += score;
        }
        assert_eq!(sum, u64::from(s.score()), "{}", s.student);
    }
    // The reference solution handed in is flagged, in an entry students never see.
    let perfect = report::gradescope(&RUN.report, student("perfect"));
    let entry = perfect["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == format!("{CH02}::{}", report::LOOK_ALIKE))
        .expect("perfect's look-alike entry");
    assert_eq!(entry["visibility"], "hidden");
    assert!(
        entry["output"].as_str().unwrap().contains(&format!(
            "{CH02}: perfect and the reference solution: 100% alike"
        )),
        "{entry}"
    );
    // A failed test's output says why and gives chapter.toml's first hint of its exercise.
    let json = report::gradescope(&RUN.report, student("panics"));
    let test = json["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ch02-transfers::batched_upload_keeps_row_order")
        .unwrap();
    let hint = &RUN.report.chapters[1].chapter.info.exercises[2].hints[0];
    assert!(
        test["output"]
            .as_str()
            .unwrap()
            .starts_with(&format!("batched_upload broke on 4 rows\nHint: {hint}")),
        "{test}"
    );
    // Several submissions: an object of results by student.
    let all = report::gradescope_all(&RUN.report);
    assert_eq!(all.as_object().unwrap().len(), RUN.report.students.len());
}

#[test]
fn junit_xml_parses_back_with_a_suite_per_student_and_chapter() {
    if common::skip_without_sandbox() {
        return;
    }
    let xml = report::junit(&RUN.report);
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suites: Vec<_> = root.children().filter(|n| n.is_element()).collect();
    assert_eq!(suites.len(), RUN.report.students.len() * 2);
    let total: usize = suites
        .iter()
        .map(|s| s.attribute("tests").unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(
        root.attribute("tests").unwrap().parse::<usize>().unwrap(),
        total
    );
    for suite in &suites {
        let cases: Vec<_> = suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        let count = |tag: &str| {
            cases
                .iter()
                .filter(|c| c.children().any(|k| k.has_tag_name(tag)))
                .count()
        };
        assert_eq!(suite.attribute("tests").unwrap(), cases.len().to_string());
        assert_eq!(
            suite.attribute("failures").unwrap(),
            count("failure").to_string()
        );
        assert_eq!(
            suite.attribute("errors").unwrap(),
            count("error").to_string()
        );
    }
    let suite = |name: &str| {
        *suites
            .iter()
            .find(|s| s.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("no suite {name}"))
    };
    let perfect = suite("perfect.ch02-transfers");
    assert_eq!(perfect.attribute("failures"), Some("0"));
    let property = |suite: roxmltree::Node, name: &str| {
        suite
            .descendants()
            .find(|n| n.has_tag_name("property") && n.attribute("name") == Some(name))
            .and_then(|n| n.attribute("value"))
            .map(str::to_string)
    };
    assert_eq!(property(perfect, "score").as_deref(), Some("32"));
    let deadlock = suite("deadlock.ch02-transfers");
    let timed_out = deadlock
        .descendants()
        .filter(|n| n.has_tag_name("failure") && n.attribute("type") == Some("timeout"))
        .count();
    assert_eq!(timed_out, 3);
    let refused = suite("zip-slip.ch01-availability");
    assert_eq!(refused.attribute("errors"), Some("14"));
    // The huge output, control characters and all, is still well-formed text.
    let noisy = suite("huge-output.ch02-transfers");
    let failure = noisy
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    assert!(failure.text().unwrap_or("").contains("noise line"));
}

#[test]
fn csv_parses_back_with_a_row_per_student_and_a_column_per_chapter() {
    if common::skip_without_sandbox() {
        return;
    }
    let text = Gradebook::from_report(&RUN.report).to_csv(None);
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(headers, ["student", CH01, CH02, "total"]);
    let rows: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    // The points possible, then a row per student.
    let max = |c: &str| {
        RUN.report
            .chapters
            .iter()
            .find(|s| s.name() == c)
            .unwrap()
            .max_score()
    };
    assert_eq!(
        rows[0],
        [
            "(out of)".to_string(),
            max(CH01).to_string(),
            max(CH02).to_string(),
            (max(CH01) + max(CH02)).to_string()
        ]
    );
    assert_eq!(rows.len(), RUN.report.students.len() + 1);
    for (row, s) in rows[1..].iter().zip(&RUN.report.students) {
        assert_eq!(
            row,
            &[
                s.student.clone(),
                chapter(s, CH01).score().to_string(),
                chapter(s, CH02).score().to_string(),
                s.score().to_string()
            ]
        );
    }
}

#[test]
fn feedback_says_what_failed_why_and_which_hint_to_read() {
    if common::skip_without_sandbox() {
        return;
    }
    let panics = report::feedback(&RUN.report, student("panics"));
    assert!(
        panics.starts_with("# Feedback for panics\n\nScore: **24 / 53** (45%)"),
        "{panics}"
    );
    assert!(panics.contains("| ch01-availability — Is there a GPU? | 0 / 21 | not submitted |"));
    assert!(panics.contains(
        "### ✗ `batched_upload_keeps_row_order` (0 / 1 point) — exercise `batched_upload`"
    ));
    assert!(panics.contains("- Why: batched_upload broke on 4 rows"));
    let hint = &RUN.report.chapters[1].chapter.info.exercises[2].hints[0];
    assert!(panics.contains(&format!("- Hint: {hint}")));
    assert!(panics.contains("- More hints: `workbook hint ch02-transfers batched_upload`"));
    assert!(panics.contains(
        "### ✗ `batched_upload_leaves_nothing_behind_once_dropped` (0 / 3 points) — a hidden test"
    ));

    let broken = report::feedback(&RUN.report, student("compile-error"));
    assert!(broken.contains("This chapter does not compile"), "{broken}");
    assert!(broken.contains("error[E0308]: mismatched types"));

    let refused = report::feedback(&RUN.report, student("zip-slip"));
    assert!(
        refused.contains(
            "**Your submission was not graded.** refused: the archive holds a path that climbs out"
        ),
        "{refused}"
    );

    let table = report::table(&RUN.report);
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("compile-error "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["compile-error", "-", "0", "C", "0", "0%"]);
}

/// Every test of ch02, failed.
/// Fails, listing every test that did not fail, unless all 21 of `name`'s ch02 tests failed.
fn assert_all_of_ch02_failed(name: &str) {
    let c = chapter(student(name), CH02);
    let not_failed: Vec<String> = c
        .tests
        .iter()
        .filter(|t| t.status != Status::Failed)
        .map(|t| format!("{}: {:?}: {}", t.test.name, t.status, t.message))
        .collect();
    assert!(
        c.tests.len() == 21 && not_failed.is_empty(),
        "{name}: {} ch02 test(s), these not failed:\n{}",
        c.tests.len(),
        not_failed.join("\n")
    );
}

#[test]
fn forged_pass_records_score_nothing() {
    if common::skip_without_sandbox() {
        return;
    }
    // The harness's log has no name once the harness opened it, and there is no /proc: nothing is
    // written, and the exit with status 0 is a failure.
    assert_all_of_ch02_failed("forge-pass-records");
    let why = message(
        student("forge-pass-records"),
        CH02,
        "upload_makes_exactly_one_host_to_device_copy",
    );
    assert!(
        why.contains("exited with status 0 before the test harness reported"),
        "{why}"
    );
    // Through a child process and /proc: there is neither a shell nor /proc in the sandbox.
    assert_all_of_ch02_failed("forge-when-graded");
    assert_eq!(
        message(
            student("forge-when-graded"),
            CH02,
            "upload_makes_exactly_one_host_to_device_copy"
        ),
        "not yet implemented: upload"
    );
    assert_all_of_ch02_failed("untouched-stubs");
    // Written in the prediction, a crate of its own, the forgery does not build: the prediction
    // guard names the line and the door.
    let predicted = chapter(student("forge-in-predictions"), CH02);
    assert!(
        predicted
            .tests
            .iter()
            .all(|t| t.status == Status::NotCompiled),
        "{:?}",
        predicted.tests.iter().map(|t| t.status).collect::<Vec<_>>()
    );
    let why = &predicted.tests[0].output;
    assert!(
        why.contains("src/predict.rs:") && why.contains("a prediction cannot run programs"),
        "{why}"
    );
}

/// Processes whose environment holds `marker` (every process this user may read).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(env) = std::fs::read(entry.path().join("environ"))
            && String::from_utf8_lossy(&env).contains(marker)
        {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

#[test]
fn no_process_of_a_submission_outlives_the_run() {
    if common::skip_without_sandbox() {
        return;
    }
    // outlive-grader started copies of its test process, each in a process group of its own,
    // looping for ever and holding stdout: the run neither stalled nor left them behind.
    let _ = &RUN.report;
    assert_eq!(
        processes_with("WORKBOOK_CORPUS_LINGER=workbook-corpus-linger"),
        Vec::<String>::new()
    );
    // Had the grader waited for the end of stdout, the tests would have timed out.
    assert_eq!(chapter(student("outlive-grader"), CH02).score(), CH02_MAX);
}

#[test]
fn shared_memory_counts_against_the_memory_limit() {
    if common::skip_without_sandbox() {
        return;
    }
    let independent = [
        "independent_copy_does_not_share_memory",
        "independent_copy_makes_one_device_to_device_copy_and_one_new_block",
        "independent_copy_survives_overwriting_the_original",
    ];
    assert_eq!(
        failures("shared-memory-hog", CH02),
        expect(&independent.map(|t| (t, Status::Failed)))
    );
    let why = message(student("shared-memory-hog"), CH02, independent[0]);
    if landlocked() {
        // Landlock gives no /dev/shm at all.
        assert!(
            why.contains("a file in /dev/shm") && why.contains("Permission denied"),
            "{why}"
        );
    } else {
        assert!(
            why.contains("shared memory beyond the limit")
                && why.contains("No space left on device"),
            "{why}"
        );
    }
}

#[test]
fn no_report_holds_the_hidden_tests_sources() {
    if common::skip_without_sandbox() {
        return;
    }
    // A line of tests/submissions/hidden/ch02-transfers/leaks.rs that no test prints.
    let hidden = "used by `tests/grade_corpus.rs`";
    let mut texts = vec![
        report::gradescope_all(&RUN.report).to_string(),
        report::junit(&RUN.report),
    ];
    for s in &RUN.report.students {
        texts.push(report::feedback(&RUN.report, s));
    }
    for text in texts {
        assert!(!text.contains(hidden));
    }
    assert_eq!(
        chapter(student("read-hidden-tests"), CH02).score(),
        CH02_MAX
    );
}

/// Whether the corpus was graded in the Landlock tier (in the hosted grader's container).
fn landlocked() -> bool {
    RUN.report.sandbox.starts_with("landlock")
}

#[test]
fn the_tier_is_namespaces_here_and_landlock_in_the_hosted_graders_container() {
    if common::skip_without_sandbox() {
        return;
    }
    if common::in_hosted_grader() {
        assert!(
            RUN.report
                .sandbox
                .starts_with("landlock (as root: a uid per test"),
            "{}",
            RUN.report.sandbox
        );
    } else if std::env::var_os("WORKBOOK_BWRAP").is_none() {
        assert_eq!(RUN.report.sandbox, "namespaces (bubblewrap)");
    }
}

#[test]
fn nothing_outside_a_tests_scratch_changes_and_the_network_is_not_reached() {
    if common::skip_without_sandbox() {
        return;
    }
    assert_eq!(chapter(student("vandal"), CH02).score(), CH02_MAX);
    let deps = Repo::at(&repo_root())
        .expect("the repository")
        .work_dir()
        .join("target/debug/deps");
    let mut dirs: Vec<PathBuf> = deps.ancestors().map(Path::to_path_buf).collect();
    dirs.extend(["/tmp", "/dev/shm", "/", "/root"].map(PathBuf::from));
    dirs.push(std::env::temp_dir());
    for dir in dirs {
        assert!(
            !dir.join("vandal-was-here").exists(),
            "the vandal wrote into {}",
            dir.display()
        );
    }
    if let Some(sentinel) = std::env::var_os("GPUMEM_CORPUS_SENTINEL") {
        assert_eq!(
            std::fs::read_to_string(&sentinel).expect("the sentinel"),
            "sentinel"
        );
    }
    if let Some(feedback) = std::env::var_os("GPUMEM_CORPUS_FEEDBACK") {
        let written: Vec<_> = std::fs::read_dir(&feedback)
            .expect("the feedback folder")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(written.is_empty(), "{written:?}");
    }
    if let Some(listener) = &RUN.listener {
        let accepted = listener.accept();
        assert!(
            accepted
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the vandal reached the network: {accepted:?}"
        );
    }
}

/// Runs this very test executable in the hosted grader's container (`scripts/hosted-grader.sh`:
/// Docker's seccomp rules, no namespaces, so no bubblewrap), once the corpus was graded here:
/// there, with no sandbox flag, the grader takes the Landlock tier, and every test above must
/// pass as it does here (the scores alike), with the vandal's targets (a sentinel file, a
/// feedback folder, a port) given.
#[test]
fn the_hosted_graders_container_grades_the_corpus_alike() {
    if common::in_hosted_grader() || common::skip_without_podman() {
        return;
    }
    if common::skip_without_sandbox() {
        return;
    }
    // One grading at a time: the time limits are for a machine that grades nothing else.
    let _ = &RUN.report;
    let dir = tempfile::Builder::new()
        .prefix("workbook-hosted-")
        .tempdir_in("/tmp")
        .expect("a folder in /tmp, which the container shares");
    let sentinel = dir.path().join("sentinel");
    std::fs::write(&sentinel, "sentinel").unwrap();
    let feedback = dir.path().join("feedback");
    std::fs::create_dir(&feedback).unwrap();
    let script = repo_root().join("scripts/hosted-grader.sh");
    let (output, stdout, stderr) = common::run(
        std::process::Command::new(&script)
            .arg(std::env::current_exe().expect("this test executable"))
            .args(["--test-threads", "2"])
            .env("GPUMEM_CORPUS_SENTINEL", &sentinel)
            .env("GPUMEM_CORPUS_FEEDBACK", &feedback)
            .env("GPUMEM_CORPUS_PORT", VANDAL_PORT.to_string())
            .env("CARGO_NET_OFFLINE", "true"),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(" 0 failed;"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&sentinel).unwrap(), "sentinel");
    assert_eq!(std::fs::read_dir(&feedback).unwrap().count(), 0);
}
