//! chapter.toml: malformed files are errors naming the file and the problem; rule breaches are
//! listed one sentence each.

use crate::common;

use common::{FakeRepo, chapter_toml};
use workbook::course::app_state::Repo;
use workbook::course::chapter::ChapterInfo;

/// Loads chapter `ch` of a fake repository whose chapter.toml is `text`; the error's full chain.
fn load_error(text: &str) -> String {
    let repo = FakeRepo::new();
    repo.chapter("ch", "", "", &[], Some(text));
    let err = Repo::at(repo.root())
        .expect("a workbook root")
        .chapter("ch")
        .expect_err("the chapter.toml is malformed");
    format!("{err:#}")
}

#[test]
fn broken_toml_syntax_names_the_file_and_the_line() {
    let err = load_error("title = \"Unclosed\n");
    assert!(
        err.contains("exercises/ch/chapter.toml is malformed"),
        "{err}"
    );
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn a_missing_title_is_named() {
    let err = load_error("[[exercises]]\nname = \"a\"\ntitle = \"A\"\n");
    assert!(err.contains("chapter.toml is malformed"), "{err}");
    assert!(err.contains("missing field `title`"), "{err}");
}

#[test]
fn points_must_be_whole_numbers() {
    let err = load_error(
        "title = \"T\"\n[[exercises]]\nname = \"a\"\ntitle = \"A\"\n[exercises.tests]\nsome_test = \"two\"\n",
    );
    assert!(err.contains("invalid type"), "{err}");
    assert!(err.contains("some_test"), "{err}");
}

#[test]
fn unknown_keys_are_rejected_rather_than_ignored() {
    let err =
        load_error("title = \"T\"\n[[exercises]]\nname = \"a\"\ntitle = \"A\"\nhint = [\"x\"]\n");
    assert!(err.contains("unknown field `hint`"), "{err}");
}

#[test]
fn a_chapter_without_chapter_toml_is_an_error_naming_it() {
    let repo = FakeRepo::new();
    repo.chapter("ch09-later", "", "", &[], None);
    let err = Repo::at(repo.root())
        .expect("a workbook root")
        .chapter("ch09-later")
        .expect_err("no chapter.toml");
    assert!(
        format!("{err:#}").starts_with("chapter ch09-later has no chapter.toml"),
        "{err:#}"
    );
}

#[test]
fn chapters_are_the_sorted_directories_under_exercises() {
    let repo = FakeRepo::new();
    for name in ["ch02-b", "ch10-c", "ch01-a"] {
        repo.chapter(name, "", "", &[], None);
    }
    repo.write("exercises/README.md", "not a chapter");
    let repo = Repo::at(repo.root()).expect("a workbook root");
    assert_eq!(
        repo.chapter_names().unwrap(),
        ["ch01-a", "ch02-b", "ch10-c"]
    );
    assert_eq!(
        repo.select_chapters(&["ch02".to_string()]).unwrap(),
        ["ch02-b"]
    );
    let err = repo
        .select_chapters(&["ch".to_string()])
        .expect_err("ambiguous");
    assert!(err.to_string().contains("could be any of"), "{err}");
    let err = repo
        .select_chapters(&["ch07".to_string()])
        .expect_err("unknown");
    assert!(
        err.to_string().contains("there is no chapter \"ch07\""),
        "{err}"
    );
}

#[test]
fn chapters_are_found_by_number_in_any_spelling() {
    let repo = FakeRepo::new();
    for name in [
        "ch01-a",
        "ch03-drop-and-empty-cache",
        "ch10-out-of-memory",
        "ch11-optimizer-state",
    ] {
        repo.chapter(name, "", "", &[], None);
    }
    let repo = Repo::at(repo.root()).expect("a workbook root");
    for (given, expected) in [
        ("3", "ch03-drop-and-empty-cache"),
        ("03", "ch03-drop-and-empty-cache"),
        ("ch3", "ch03-drop-and-empty-cache"),
        ("CH03", "ch03-drop-and-empty-cache"),
        ("1", "ch01-a"),
        ("ch1", "ch01-a"),
        ("10", "ch10-out-of-memory"),
        ("ch11", "ch11-optimizer-state"),
        ("exercises/ch10-out-of-memory/", "ch10-out-of-memory"),
    ] {
        assert_eq!(
            repo.select_chapters(&[given.to_string()]).unwrap(),
            [expected],
            "{given:?}"
        );
    }
    let err = repo
        .select_chapters(&["12".to_string()])
        .expect_err("no chapter 12");
    assert!(
        err.to_string().contains("there is no chapter \"12\""),
        "{err}"
    );
}

#[test]
fn a_mistyped_chapter_gets_the_nearest_name_suggested() {
    let repo = FakeRepo::new();
    for name in [
        "ch01-availability",
        "ch03-drop-and-empty-cache",
        "ch10-out-of-memory",
    ] {
        repo.chapter(name, "", "", &[], None);
    }
    let repo = Repo::at(repo.root()).expect("a workbook root");
    for (typo, near) in [
        ("ch03-drop-empty-cache", "ch03-drop-and-empty-cache"),
        ("availabilty", "ch01-availability"),
        ("out-of-memroy", "ch10-out-of-memory"),
    ] {
        let err = repo
            .select_chapters(&[typo.to_string()])
            .expect_err("a typo");
        assert!(
            err.to_string().contains(&format!("did you mean {near}?")),
            "{typo}: {err}"
        );
    }
    let err = repo
        .select_chapters(&["transformers".to_string()])
        .expect_err("no such chapter");
    assert!(!err.to_string().contains("did you mean"), "{err}");
}

#[test]
fn a_valid_file_with_every_rule_kept_has_no_problems() {
    let text = chapter_toml("T", &[("a", &["t1"]), ("b", &["t2"]), ("c", &["t3", "t4"])]);
    let info = ChapterInfo::parse(&text).expect("valid");
    assert_eq!(info.problems(), Vec::<String>::new());
    assert_eq!(info.total_points(), 4);
}

#[test]
fn rule_breaches_are_each_reported() {
    let text = r#"
title = "T"
[[exercises]]
name = "a"
title = "A"
hints = ["only one"]
[exercises.tests]
shared = 1
[[exercises]]
name = "b"
title = "B"
hints = ["one", "two"]
[exercises.tests]
shared = 2
worthless = 0
"#;
    let problems = ChapterInfo::parse(text).expect("valid TOML").problems();
    assert_eq!(
        problems,
        [
            "the chapter has 2 exercise(s); it needs at least 3",
            "exercise a has 1 hint(s); it needs at least 2",
            "test shared is listed under both exercise a and exercise b",
            "test worthless (exercise b) is worth 0 points",
        ]
    );
}
