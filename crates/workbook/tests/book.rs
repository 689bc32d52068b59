//! `workbook book`: builds an mdBook, and a missing page or a broken include is a clear error.

use crate::common;

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

/// The workbook's own `book/quizzes/`.
fn the_books_quizzes() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/quizzes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("an entry of book/quizzes").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no quiz", dir.display());
    files
}

#[test]
fn every_quiz_of_the_book_is_in_mdbook_quizs_format_and_shows_built_in() {
    use mdbook_quiz_schema::Question;
    let mut ids = std::collections::BTreeMap::new();
    for path in the_books_quizzes() {
        let text = std::fs::read_to_string(&path).expect("a quiz file");
        // Read with mdbook-quiz's own types, as mdbook-quiz reads it.
        let theirs: mdbook_quiz_schema::Quiz = toml::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not in mdbook-quiz's format: {e}", path.display()));
        // mdbook-quiz refuses a book in which two questions share an id.
        for question in &theirs.questions {
            let id = match question {
                Question::MultipleChoice(q) => &q.0.id,
                Question::ShortAnswer(q) => &q.0.id,
                Question::Tracing(q) => &q.0.id,
            };
            if let Some(id) = id
                && let Some(first) = ids.insert(id.clone(), path.clone())
            {
                panic!(
                    "{} and {} share the id {id}",
                    first.display(),
                    path.display()
                );
            }
        }
        let chapter = path.file_stem().unwrap().to_string_lossy().into_owned();
        let ours = workbook::book::pages::Quiz::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
        let html = ours
            .render(&chapter)
            .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        assert_eq!(
            html.matches("class=\"wb-question\"").count(),
            theirs.questions.len(),
            "{}",
            path.display()
        );
    }
}

/// A book of one chapter page per quiz in `quizzes` (chapter name, quiz text), each with an
/// exercise, and `extra` appended to its `book.toml`.
fn quiz_book(quizzes: &[(String, String)], extra: &str) -> FakeRepo {
    let repo = FakeRepo::new();
    repo.write(
        "book/book.toml",
        &format!(
            "[book]\ntitle = \"T\"\nsrc = \"src\"\n\n[build]\ncreate-missing = false\n{extra}"
        ),
    );
    let mut summary = String::from("# Summary\n\n");
    for (chapter, quiz) in quizzes {
        summary.push_str(&format!("- [{chapter}]({chapter}.md)\n"));
        repo.write(
            &format!("book/src/{chapter}.md"),
            &format!("# {chapter}\n\nText.\n\n## Exercises\n\n### Exercise 1: a\n\nDo a.\n"),
        );
        repo.write(
            &format!("exercises/{chapter}/chapter.toml"),
            &common::chapter_toml(chapter, &[("a", &["t"])]),
        );
        repo.write(&format!("book/quizzes/{chapter}.toml"), quiz);
    }
    repo.write("book/src/SUMMARY.md", &summary);
    repo
}

/// `workbook book --dest out` in `repo`: its stderr, after asserting that it succeeded.
fn build_book(repo: &FakeRepo) -> String {
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .arg("book")
            .arg("--dest")
            .arg(repo.root().join("out")),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    stderr
}

/// Three multiple-choice questions.
const QUIZ: &str = "[[questions]]\ntype = \"MultipleChoice\"\nprompt.prompt = \"Which?\"\n\
                    prompt.distractors = [\"no\"]\nanswer.answer = \"yes\"\ncontext = \"So.\"\n";

#[test]
fn with_mdbook_quiz_configured_a_chapter_page_gets_its_quiz_line_instead() {
    let quizzes = [("ch01-x".to_string(), QUIZ.repeat(3))];
    // mdbook-quiz is not run (it is optional and absent): the page keeps the line it was given.
    let table = "\n[preprocessor.quiz]\ncommand = \"workbook-test-no-such-mdbook-quiz\"\n\
                 optional = true\n";
    let repo = quiz_book(&quizzes, table);
    build_book(&repo);
    let html = std::fs::read_to_string(repo.root().join("out/ch01-x.html")).expect("the page");
    assert!(html.contains("{{#quiz ../quizzes/ch01-x.toml}}"), "{html}");
    assert!(!html.contains("wb-question"), "{html}");
    assert!(html.find("{{#quiz").unwrap() < html.find("id=\"exercises\"").unwrap());
}

/// mdbook-quiz, when installed: `WORKBOOK_MDBOOK_QUIZ` (a path), or `mdbook-quiz` on `PATH`.
fn mdbook_quiz() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("WORKBOOK_MDBOOK_QUIZ") {
        return Some(path.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("mdbook-quiz"))
        .find(|path| path.is_file())
}

#[test]
fn mdbook_quiz_shows_every_quiz_of_the_book_and_the_built_in_renderer_reads_them_back() {
    let Some(bin) = mdbook_quiz() else {
        eprintln!(
            "skipped: mdbook-quiz is not installed (cargo install mdbook-quiz --locked, or set \
             WORKBOOK_MDBOOK_QUIZ to its path)"
        );
        return;
    };
    let quizzes: Vec<(String, String)> = the_books_quizzes()
        .iter()
        .map(|path| {
            let chapter = path.file_stem().unwrap().to_string_lossy().into_owned();
            (chapter, std::fs::read_to_string(path).expect("a quiz file"))
        })
        .collect();
    let table = format!(
        "\n[preprocessor.quiz]\ncommand = {:?}\n",
        bin.display().to_string()
    );
    let repo = quiz_book(&quizzes, &table);
    build_book(&repo);
    for (chapter, _) in &quizzes {
        let page = repo.root().join(format!("out/{chapter}.html"));
        let html = std::fs::read_to_string(&page).expect("a chapter page");
        assert!(
            html.contains("class=\"quiz-placeholder\"")
                && html.contains(&format!("data-quiz-name=\"&quot;{chapter}&quot;\"")),
            "mdbook-quiz did not replace the quiz line of {chapter}"
        );
        assert!(!html.contains("{{#quiz") && !html.contains("wb-question"));
        // mdbook-quiz wrote an id into every question of the copy it read.
        let quiz = repo.root().join(format!("book/quizzes/{chapter}.toml"));
        let text = std::fs::read_to_string(&quiz).expect("the quiz copy");
        let questions = text.matches("[[questions]]").count();
        assert_eq!(text.matches("\nid = ").count(), questions, "{text}");
    }
    assert!(
        repo.root().join("book/src/quiz").is_dir(),
        "mdbook-quiz's assets"
    );
    // One line back: without the table the built-in renderer shows the rewritten files.
    repo.write(
        "book/book.toml",
        "[book]\ntitle = \"T\"\nsrc = \"src\"\n\n[build]\ncreate-missing = false\n",
    );
    build_book(&repo);
    for (chapter, _) in &quizzes {
        let page = repo.root().join(format!("out/{chapter}.html"));
        let html = std::fs::read_to_string(&page).expect("a chapter page");
        assert!(html.contains("class=\"wb-question\""), "{chapter}");
        assert!(!html.contains("quiz-placeholder"), "{chapter}");
    }
}
