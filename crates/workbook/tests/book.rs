//! `workbook book`: builds an mdBook, and a missing page or a broken include is a clear error.

mod common;

use common::FakeRepo;

fn book_repo(page: &str) -> FakeRepo {
    let repo = FakeRepo::new();
    repo.write(
        "book/book.toml",
        "[book]\ntitle = \"T\"\nsrc = \"src\"\n\n[build]\ncreate-missing = false\n",
    );
    repo.write("book/src/SUMMARY.md", "# Summary\n\n- [Page](page.md)\n");
    repo.write("book/src/page.md", page);
    repo.write(
        "exercises/ch01/src/lib.rs",
        "// ANCHOR: here\npub fn shown() {}\n// ANCHOR_END: here\n",
    );
    repo
}

#[test]
fn a_sound_book_builds_into_dest() {
    let repo =
        book_repo("# Page\n\n```rust\n{{#include ../../exercises/ch01/src/lib.rs:here}}\n```\n");
    let dest = repo.root().join("out");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .arg("book")
            .arg("--dest")
            .arg(&dest),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let html = std::fs::read_to_string(dest.join("page.html")).expect("page.html");
    assert!(html.contains("shown"), "the include was not expanded");
    assert!(
        !html.contains("ANCHOR"),
        "anchor lines leaked into the page"
    );
}

#[test]
fn a_missing_anchor_is_an_error_naming_page_and_anchor() {
    let repo = book_repo("{{#include ../../exercises/ch01/src/lib.rs:gone}}\n");
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .arg("book"),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("page.md: includes ../../exercises/ch01/src/lib.rs:gone, but that file has no `ANCHOR: gone`"),
        "{stderr}"
    );
}

#[test]
fn a_missing_included_file_is_an_error() {
    let repo = book_repo("{{#include ../../exercises/ch01/src/nope.rs}}\n");
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .arg("book"),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("page.md: includes ../../exercises/ch01/src/nope.rs, which does not exist"),
        "{stderr}"
    );
}

#[test]
fn a_page_missing_from_src_is_an_error_naming_it() {
    let repo = book_repo("fine\n");
    std::fs::remove_file(repo.root().join("book/src/page.md")).expect("removed");
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .arg("book"),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("page.md"), "{stderr}");
    assert!(!repo.root().join("book/book").exists());
}
