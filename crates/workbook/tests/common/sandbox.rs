//! What a test that needs the grader's sandbox (bubblewrap) does where it cannot run: under
//! `CI=true` (where `.ci/run` installs bubblewrap) it fails, saying what to install; elsewhere it
//! is skipped with a notice, so that a plain `cargo test` works on a fresh machine with only a
//! Rust toolchain. Shared by the integration tests (`common::skip_without_sandbox`) and the
//! sandbox's own unit tests (included there with `#[path]`), so it uses nothing but `std`.

use std::io::Write;
use std::sync::Once;

/// Says that the sandbox cannot run here (`why`, from `Sandbox::detect`): under `CI=true` it
/// panics with what to install; elsewhere it prints a one-line notice on stderr (once per test
/// executable) and returns, and the calling test returns too, skipped.
pub fn unavailable(why: &str) {
    let why = why.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!(
            "{why}\nThe tests that grade run every test in the grader's sandbox, bubblewrap, and \
             CI=true requires them: on Debian or Ubuntu, `apt-get install bubblewrap` (or set \
             WORKBOOK_BWRAP to the program), on Linux with unprivileged user namespaces."
        );
    }
    static NOTICE: Once = Once::new();
    NOTICE.call_once(|| {
        // Straight to stderr, past the test harness's capture, so that the notice is seen.
        let _ = writeln!(
            std::io::stderr(),
            "{}: skipping the tests that grade, the grader's sandbox cannot run here ({why}); \
             install bubblewrap to run them (Debian/Ubuntu: apt-get install bubblewrap); under \
             CI=true they fail instead",
            env!("CARGO_CRATE_NAME")
        );
    });
}
