//! A submission can make the compiler wait for ever (here: `include_bytes!` of a FIFO nobody
//! writes to). Grading builds with a time limit: the build is stopped, cargo and the compiler with
//! it, and reported as a failed build.

mod common;

use common::FakeRepo;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use workbook::runner;
use workbook::scratch::{self, WorkspaceTemplate};

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
