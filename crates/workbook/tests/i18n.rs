//! The book in other languages: `workbook i18n update` extracts the template and merges it into
//! the catalogues (a changed English message becomes fuzzy), and `workbook book` builds each
//! language in its folder, with `<html lang>`, the translations, and a banner on a page that is
//! not wholly translated. Needs GNU gettext's `msgmerge` and `msginit` (skipped without them,
//! except under `CI=true`).

use crate::common;

use common::FakeRepo;
use polib::catalog::Catalog;
use polib::message::MessageMutView;
use std::path::Path;

fn gettext_missing() -> bool {
    let missing = std::process::Command::new("msgmerge")
        .arg("--version")
        .output()
        .is_err();
    if missing && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("msgmerge is missing: `apt-get install gettext`");
    }
    if missing {
        eprintln!("skipped: GNU gettext (msgmerge) is not installed");
    }
    missing
}

/// A book of two pages: `one.md` (to be translated whole) and `two.md` (left untranslated), a
/// code block whose comment must stay out of the template, and a script with one `t('...')` line.
fn book_repo(one: &str) -> FakeRepo {
    let repo = FakeRepo::new();
    repo.write(
        "book/book.toml",
        "[book]\ntitle = \"T\"\nsrc = \"src\"\n\n[output.html]\nadditional-js = [\"theme/workbook.js\"]\n",
    );
    repo.write(
        "book/src/SUMMARY.md",
        "# Summary\n\n- [One](one.md)\n- [Two](two.md)\n",
    );
    repo.write("book/src/one.md", one);
    repo.write(
        "book/src/two.md",
        "# Two\n\nNot translated yet.\n\n```rust\n// a comment in code\nlet x = \"a string\";\n```\n",
    );
    repo.write("book/theme/workbook.js", "say(t('Right.'));\n");
    // a picture with a label of words and numbers, one of numbers alone, and a view's history
    repo.write(
        "book/src/pictures/one-timeline.svg",
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><text x=\"1\">297 events · peak allocated 16 MiB</text><text>40 MiB</text></svg>\n",
    );
    repo.write(
        "book/src/pictures/one-history.json",
        r#"{"steps":[[0,"1. The first step"]],"trace":[]}"#,
    );
    repo
}

fn workbook(repo: &FakeRepo, args: &[&str]) -> String {
    let (output, stdout, stderr) =
        common::run(common::workbook().arg("--root").arg(repo.root()).args(args));
    assert!(
        output.status.success(),
        "workbook {args:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

fn catalog(path: &Path) -> Catalog {
    polib::po_file::parse(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Gives every message of `ko.po` named in `translations` its translation.
fn translate(path: &Path, translations: &[(&str, &str)]) {
    let mut catalog = catalog(path);
    for (id, text) in translations {
        let mut message = catalog
            .find_message_mut(None, id, None)
            .unwrap_or_else(|| panic!("{id:?} is not in {}", path.display()));
        message
            .set_msgstr(text.to_string())
            .expect("a singular message");
    }
    polib::po_file::write(&catalog, path).expect("ko.po written");
}

/// Whether the search index of the book in `dir` finds `word` in a page's text.
fn indexed(dir: &Path, word: &str) -> bool {
    let file = std::fs::read_dir(dir)
        .expect("the built book")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.to_string_lossy().contains("searchindex") && p.extension().is_some_and(|e| e == "js")
        })
        .expect("a search index");
    let text = std::fs::read_to_string(file).expect("the search index");
    let quoted = text
        .split_once("JSON.parse('")
        .and_then(|(_, rest)| rest.rsplit_once("'));"))
        .expect("mdBook's index format")
        .0;
    let json = quoted.replace("\\'", "'").replace("\\\\", "\\");
    let search: serde_json::Value = serde_json::from_str(&json).expect("the index's JSON");
    let mut node = &search["index"]["index"]["body"]["root"];
    for c in word.chars() {
        node = &node[c.to_string()];
    }
    node["docs"]
        .as_object()
        .is_some_and(|docs| !docs.is_empty())
}

fn page(dest: &Path, rel: &str) -> String {
    std::fs::read_to_string(dest.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn a_changed_english_message_becomes_fuzzy_and_its_page_shows_the_banner() {
    if gettext_missing() {
        return;
    }
    let repo = book_repo("# One\n\nHello world.\n\n![A timeline](pictures/one-timeline.svg)\n");
    workbook(&repo, &["i18n", "update"]);
    let template = catalog(&repo.root().join("po/messages.pot"));
    let ids: Vec<&str> = template.messages().map(|m| m.msgid()).collect();
    for id in [
        "One",
        "Hello world.",
        "Two",
        "Not translated yet.",
        "Right.",
        "%1 events · peak allocated %2",
        "%1. The first step",
    ] {
        assert!(ids.contains(&id), "{id:?} missing from {ids:?}");
    }
    assert!(
        !ids.iter()
            .any(|id| id.contains("comment") || id.contains("a string")),
        "code reached the template: {ids:?}"
    );
    let ko = repo.root().join("po/ko.po");
    assert!(repo.root().join("po/zh-CN.po").is_file());
    translate(
        &ko,
        &[
            ("One", "하나"),
            ("Hello world.", "안녕하세요."),
            ("Right.", "맞습니다."),
            (
                "![A timeline](pictures/one-timeline.svg)",
                "![타임라인](pictures/one-timeline.svg)",
            ),
            (
                "%1 events · peak allocated %2",
                "이벤트 %1개 · 할당 최댓값 %2",
            ),
            ("%1. The first step", "%1. 첫 스텝"),
        ],
    );

    let dest = repo.root().join("out");
    workbook(&repo, &["book", "--dest", dest.to_str().unwrap()]);
    let one = page(&dest, "ko/one.html");
    assert!(one.contains("<html lang=\"ko\""), "no lang on ko/one.html");
    assert!(one.contains("안녕하세요.") && !one.contains("Hello world."));
    assert!(
        one.contains(r#""Right.":"맞습니다.""#),
        "the script's lines are not given to the page"
    );
    assert!(
        !one.contains("wb-stale"),
        "a wholly translated page has a banner"
    );
    // the picture's words in Korean, its numbers as drawn; the English picture unchanged
    let svg = page(&dest, "ko/pictures/one-timeline.svg");
    assert!(
        svg.contains("<text x=\"1\">이벤트 297개 · 할당 최댓값 16 MiB</text><text>40 MiB</text>"),
        "{svg}"
    );
    assert!(page(&dest, "pictures/one-timeline.svg").contains("297 events"));
    let history: serde_json::Value =
        serde_json::from_str(&page(&dest, "ko/pictures/one-history.json")).unwrap();
    assert_eq!(history["steps"][0][1], "1. 첫 스텝");
    let two = page(&dest, "ko/two.html");
    assert!(two.contains("wb-stale") && two.contains("href=\"../two.html\""));
    assert!(two.contains("Not translated yet.") && two.contains("a comment in code"));
    assert!(
        !page(&dest, "one.html").contains("wb-stale"),
        "English has a banner"
    );
    assert!(
        indexed(&dest.join("ko"), "안녕하세요"),
        "the Korean word is not in the Korean book's search index"
    );
    assert!(!indexed(&dest, "안녕하세요"));

    // The English changes: the old translation is kept, marked fuzzy, and not shown.
    repo.write("book/src/one.md", "# One\n\nHello, world.\n");
    workbook(&repo, &["i18n", "update"]);
    let merged = catalog(&ko);
    let changed = merged
        .find_message(None, "Hello, world.", None)
        .expect("the new English message");
    assert!(changed.flags().is_fuzzy(), "a changed message is not fuzzy");
    assert_eq!(changed.msgstr().unwrap(), "안녕하세요.");
    let coverage = workbook(&repo, &["i18n", "coverage"]);
    let line = coverage
        .lines()
        .find(|l| l.trim_start().starts_with("one.md"))
        .unwrap_or_else(|| panic!("no line for one.md in:\n{coverage}"));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        // the title twice (page and heading) and the view's step title; the changed line fuzzy
        ["one.md", "3", "1", "0"],
        "{coverage}"
    );
    workbook(&repo, &["book", "--dest", dest.to_str().unwrap()]);
    let one = page(&dest, "ko/one.html");
    assert!(one.contains("Hello, world.") && !one.contains("안녕하세요."));
    assert!(
        one.contains("wb-stale"),
        "a page with a fuzzy message has no banner"
    );
}

#[test]
fn an_unknown_language_is_a_clear_error() {
    let repo = book_repo("# One\n\nHello world.\n\n![A timeline](pictures/one-timeline.svg)\n");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .args(["book", "--lang", "kr"]),
    );
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stderr.contains("--lang kr") && stderr.contains("ko, zh-CN"),
        "{stderr}"
    );
}

#[test]
fn a_catalogue_that_is_not_gettext_is_a_clear_error() {
    if gettext_missing() {
        return;
    }
    let repo = book_repo("# One\n\nHello world.\n\n![A timeline](pictures/one-timeline.svg)\n");
    workbook(&repo, &["i18n", "update"]);
    repo.write("po/ko.po", "msgid \"One\"\nmsgstr \"하나\n");
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .arg("book"),
    );
    assert!(!output.status.success());
    assert!(stderr.contains("ko.po"), "{stderr}");
}

/// Every `href="PAGE#ANCHOR"` of a built page, with the file it goes to (relative to `dest`;
/// `None` outside the book) and the anchor.
fn anchor_links(dest: &Path, file: &Path, html: &str) -> Vec<(Option<std::path::PathBuf>, String)> {
    let mut links = Vec::new();
    for part in html.split("href=\"").skip(1) {
        let Some((href, _)) = part.split_once('"') else {
            continue;
        };
        let Some((target, anchor)) = href.split_once('#') else {
            continue;
        };
        if anchor.is_empty() || target.contains("://") || target.starts_with("//") {
            continue;
        }
        let mut path = file.parent().unwrap_or(dest).to_path_buf();
        if target.is_empty() {
            path = file.to_path_buf();
        } else {
            for c in Path::new(target).components() {
                match c {
                    std::path::Component::ParentDir => {
                        path.pop();
                    }
                    std::path::Component::Normal(name) => path.push(name),
                    _ => {}
                }
            }
        }
        links.push((
            path.strip_prefix(dest).ok().map(Path::to_path_buf),
            anchor.to_string(),
        ));
    }
    links
}

fn html_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the built book").flatten() {
        let path = entry.path();
        if path.is_dir() {
            html_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "html") {
            out.push(path);
        }
    }
}

#[test]
fn every_link_to_an_anchor_of_the_book_finds_it_in_every_language() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let dest = scratch.path().join("book");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(&root)
            .args(["book", "--dest"])
            .arg(&dest),
    );
    assert!(
        output.status.success(),
        "workbook book failed:\n{stdout}\n{stderr}"
    );
    let mut files = Vec::new();
    html_files(&dest, &mut files);
    for lang in ["ko", "zh-CN"] {
        assert!(
            files.iter().any(|f| f.starts_with(dest.join(lang))),
            "no {lang} book in {}",
            dest.display()
        );
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        // print.html rewrites every link to its own copy of the pages.
        if file.file_name().is_some_and(|n| n == "print.html") {
            continue;
        }
        let html = std::fs::read_to_string(file).expect("a built page");
        for (target, anchor) in anchor_links(&dest, file, &html) {
            let Some(target) = target.filter(|t| t.extension().is_some_and(|e| e == "html")) else {
                continue;
            };
            checked += 1;
            let found = std::fs::read_to_string(dest.join(&target))
                .is_ok_and(|t| t.contains(&format!("id=\"{anchor}\"")));
            if !found {
                broken.push(format!(
                    "{} -> {}#{anchor}",
                    file.strip_prefix(&dest).unwrap_or(file).display(),
                    target.display()
                ));
            }
        }
    }
    assert!(checked > 100, "only {checked} links to anchors found");
    assert!(
        broken.is_empty(),
        "{} of {checked} links to an anchor find no element with that id:\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}
