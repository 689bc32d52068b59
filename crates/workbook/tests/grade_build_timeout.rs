//! A submission can make the compiler wait for ever (here: `include_bytes!` of a FIFO nobody
//! writes to). Grading builds with a time limit: the build is stopped, cargo and the compiler with
//! it, and reported as a failed build.

mod common;

use common::FakeRepo;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use workbook::run::runner;
use workbook::run::scratch::{self, WorkspaceTemplate};

#[test]
fn a_build_that_never_ends_is_stopped_and_reported_as_failed() {
    let repo = FakeRepo::new();
    let fifo = repo.root().join("nobody-writes-here.fifo");
    let path = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let lib = format!("pub const DATA: &[u8] = include_bytes!({fifo:?});\n");
    repo.chapter(
        "hang",
        &lib,
        &lib,
        &[(
            "t",
            "#[test]\nfn t() {\n    assert!(hang::DATA.is_empty());\n}\n",
        )],
        None,
    );
    let template = WorkspaceTemplate::from_repo_root(repo.root()).expect("the template");
    let work = repo.root().join("target/workbook");
    let crate_ = scratch::prepare(
        &template,
        &work.join("scratch/hang"),
        "hang-g-student",
        &repo.root().join("exercises/hang"),
        &repo.root().join("exercises/hang/src"),
    )
    .expect("the scratch workspace");
    let failure = runner::build_tests_within(
        &crate_.workspace,
        &crate_.package,
        &work.join("target"),
        Some(Duration::from_secs(5)),
    )
    .expect("cargo runs")
    .expect_err("the build cannot finish");
    assert_eq!(failure.errors.len(), 1, "{failure:?}");
    assert!(
        failure.errors[0].starts_with("the build did not finish within 5 s and was stopped"),
        "{failure:?}"
    );
    // The compiler is gone: nobody has the FIFO open for reading any more.
    // SAFETY: open reads a NUL-terminated path; a descriptor it returns is closed at once.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK) };
    let error = std::io::Error::last_os_error();
    if fd >= 0 {
        // SAFETY: closes the descriptor just opened.
        unsafe { libc::close(fd) };
    }
    assert_eq!(fd, -1, "a compiler still reads the FIFO");
    assert_eq!(error.raw_os_error(), Some(libc::ENXIO));
}

/// A const that never finishes evaluating (the lint that would stop it is allowed, as a student
/// may): the compiler runs until it is stopped.
const ENDLESS: &str = "#![allow(long_running_const_eval)]\n\
    pub const N: u64 = { let mut i = 1u64; while i != 0 { i = i.wrapping_mul(3); } i };\n\
    pub fn answer() -> u64 { N }\n";
const FINE: &str = "pub fn answer() -> u64 { 42 }\n";

#[test]
fn a_chapter_that_never_finishes_building_costs_only_that_chapter() {
    let repo = FakeRepo::new();
    for name in ["endless", "fine"] {
        let test = format!("#[test]\nfn t() {{\n    assert_eq!({name}::answer(), 42);\n}}\n");
        let toml = common::chapter_toml(name, &[("one", &["t"])]);
        repo.chapter(name, FINE, FINE, &[("t", &test)], Some(&toml));
    }
    repo.write("student/endless/src/lib.rs", ENDLESS);
    repo.write("student/fine/src/lib.rs", FINE);
    let repo_state = workbook::course::app_state::Repo::at(repo.root()).expect("the repository");
    let options = workbook::grade::GradeOptions {
        build_timeout: Duration::from_secs(5),
        sandbox: workbook::run::Tier::None,
        progress: false,
        ..Default::default()
    };
    let report = workbook::grade::grade(&repo_state, &[repo.root().join("student")], &options)
        .expect("grading runs");
    let student = &report.students[0];
    let by_name = |name: &str| {
        student
            .chapters
            .iter()
            .find(|c| c.chapter == name)
            .unwrap_or_else(|| panic!("no result for {name}"))
    };
    assert_eq!(by_name("fine").score(), 1, "{:?}", by_name("fine"));
    let endless = by_name("endless");
    assert_eq!(endless.score(), 0);
    let workbook::grade::ChapterState::DoesNotCompile(errors) = &endless.state else {
        panic!("endless was not stopped: {endless:?}");
    };
    assert!(
        errors[0].starts_with("the build did not finish within 5 s and was stopped"),
        "{errors:?}"
    );
}
