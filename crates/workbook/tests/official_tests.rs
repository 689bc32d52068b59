//! Rules the official tests of every chapter keep, so that what `check` shows a learner is true.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `exercises/<chapter>/tests/*.rs` file with its text.
fn official_tests() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let exercises = repo_root().join("exercises");
    for chapter in std::fs::read_dir(&exercises).expect("exercises/").flatten() {
        let tests = chapter.path().join("tests");
        let Ok(entries) = std::fs::read_dir(&tests) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a test file");
                files.push((path, text));
            }
        }
    }
    files.sort();
    files
}

/// The first argument of the macro call whose `(` is at `open`.
fn first_argument(text: &str, open: usize) -> &str {
    let mut depth = 0usize;
    for (i, c) in text[open + 1..].char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return &text[open + 1..open + 1 + i],
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => return &text[open + 1..open + 1 + i],
            _ => {}
        }
    }
    &text[open + 1..]
}

/// Whether `arg` is written out in the test (literals and constants only: `0`, `2 * MIB`,
/// `Some(3)`, `"text"`), so it is the expected value rather than what the learner's code gave
/// (any lower-case name, a variable or a call, makes it computed).
fn is_written_out(arg: &str) -> bool {
    let mut names = Vec::new();
    let mut chars = arg.trim().chars().peekable();
    let mut previous = ' ';
    while let Some(c) = chars.next() {
        if c == '"' {
            // Skip a string literal (escapes included).
            while let Some(d) = chars.next() {
                if d == '\\' {
                    chars.next();
                } else if d == '"' {
                    break;
                }
            }
            previous = '"';
            continue;
        }
        // A name starts after a non-name character; `u64` in `512_u64` belongs to the number.
        if (c.is_ascii_alphabetic() || c == '_')
            && !previous.is_ascii_alphanumeric()
            && previous != '_'
        {
            let mut name = String::from(c);
            while let Some(&d) = chars.peek() {
                if !(d.is_ascii_alphanumeric() || d == '_') {
                    break;
                }
                name.push(d);
                chars.next();
            }
            previous = name.chars().last().unwrap_or(c);
            names.push(name);
            continue;
        }
        if c.is_ascii_digit() {
            // A number, with its `_` separators and its type suffix.
            while let Some(&d) = chars.peek() {
                if !(d.is_ascii_alphanumeric() || d == '_') {
                    break;
                }
                chars.next();
            }
        }
        previous = c;
    }
    !arg.trim().is_empty()
        && names.iter().all(|name| {
            matches!(name.as_str(), "Some" | "None" | "true" | "false")
                || !name.chars().any(|c| c.is_ascii_lowercase())
        })
}

/// `check` shows an `assert_eq!`'s left value as the learner's ("yours") and the right one as
/// the expected value (`run::runner::failure_message`): the official tests must put them so.
#[test]
fn official_assertions_put_the_learners_value_first() {
    let mut reversed = Vec::new();
    for (path, text) in official_tests() {
        for macro_name in ["assert_eq!(", "assert_ne!("] {
            for (at, _) in text.match_indices(macro_name) {
                let open = at + macro_name.len() - 1;
                let first = first_argument(&text, open);
                if is_written_out(first) {
                    let line = text[..at].lines().count() + 1;
                    reversed.push(format!("{}:{line}: {}", path.display(), first.trim()));
                }
            }
        }
    }
    assert!(
        reversed.is_empty(),
        "these assertions put the expected value first (write `assert_eq!(yours, expected)`):\n{}",
        reversed.join("\n")
    );
}

#[test]
fn written_out_values_are_told_from_computed_ones() {
    for arg in [
        "0",
        "-1",
        "2 * MIB",
        "\"a text, with words\"",
        "None",
        "Some(3)",
        "BUDGET",
        "true",
        "512_u64",
        "1u64 << 20",
    ] {
        assert!(is_written_out(arg), "{arg}");
    }
    for arg in [
        "dev.memory_allocated()",
        "CASES.len()",
        "Some(x)",
        "stats.get(\"k\")",
        "64 - pool.free.len()",
    ] {
        assert!(!is_written_out(arg), "{arg}");
    }
}
