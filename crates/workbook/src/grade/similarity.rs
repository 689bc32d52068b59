//! Submissions that look alike: a chapter's sources equal or nearly equal to the reference
//! solution's or to another student's, after formatting and names are taken out. Flagged in the
//! class summary for the instructor to look at; nothing is deducted.
//!
//! A chapter's `src/` becomes a stream of tokens (comments and layout dropped); every name the
//! stub does not have (a learner's own variables and helpers) becomes `ID`, so renaming them
//! changes nothing, while the stub's names and those after `.` or `::` (methods, paths: the
//! API's) stay as written. Each run of
//! [`GRAM`] tokens is hashed, as MOSS does, and the runs the stub itself holds are left out: what
//! everyone received says nothing about who copied. Two chapters' similarity is the Jaccard index
//! of their runs (shared runs over all their runs).

use serde_json::{Value, json};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

/// Tokens in one hashed run.
pub const GRAM: usize = 8;
/// Similarity from which a pair is flagged.
pub const THRESHOLD: f64 = 0.8;
/// Runs of its own (beyond the stub's) a chapter needs before it is compared: an exercise solved
/// in a line or two is alike in everyone's hands.
pub const MIN_GRAMS: usize = 12;

/// Rust's keywords, kept as written.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while",
];

/// Who a chapter's sources belong to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Author {
    /// The reference solution.
    Reference,
    /// A student, by name.
    Student(String),
}

impl Author {
    fn name(&self) -> &str {
        match self {
            Author::Reference => "the reference solution",
            Author::Student(name) => name,
        }
    }
}

/// Two chapters that look alike.
#[derive(Debug, Clone, PartialEq)]
pub struct Similar {
    /// The chapter.
    pub chapter: String,
    /// One student.
    pub student: String,
    /// The other student, or the reference solution.
    pub other: Author,
    /// Their similarity, from 0 to 1.
    pub similarity: f64,
}

impl Similar {
    /// One line: the chapter, the pair, how alike.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} and {}: {:.0}% alike",
            self.chapter,
            self.student,
            self.other.name(),
            self.similarity * 100.0
        )
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "chapter": self.chapter,
            "student": self.student,
            "other": self.other.name(),
            "reference_solution": self.other == Author::Reference,
            "similarity": (self.similarity * 1000.0).round() / 1000.0,
        })
    }
}

/// The text of every `.rs` file under `dir`, in path order (nothing when it cannot be read).
pub fn read_sources(dir: &Path) -> String {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                walk(&path, out);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Rust source as tokens: no comments, no layout; string and character literals as written.
pub fn tokens(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(chars[start..i.min(chars.len())].iter().collect());
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string(&chars, i) {
            let start = i;
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            i += 2 + hashes;
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&close.chars().collect::<Vec<_>>()) {
                i += 1;
            }
            i = (i + close.len()).min(chars.len());
            out.push(chars[start..i].iter().collect());
        } else if c == '\'' {
            // A character literal ('a', '\n') or a lifetime ('a).
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map(|p| i + 3 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push(chars[i..end.min(chars.len())].iter().collect());
                    i = end;
                }
                None => {
                    out.push("'".to_string());
                    i += 1;
                }
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// Whether `r` at `at` starts a raw string (`r"`, `r#"`), not a name ending in `r`.
fn raw_string(chars: &[char], at: usize) -> bool {
    let before_is_name = at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_');
    let hashes = chars[at + 1..].iter().take_while(|c| **c == '#').count();
    !before_is_name && chars.get(at + 1 + hashes) == Some(&'"')
}

/// A chapter's fingerprint: the hashes of its runs of tokens that the stub does not hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    grams: HashSet<u64>,
}

/// What a chapter's submissions are compared against: the stub's names and runs.
#[derive(Debug, Clone, Default)]
pub struct Base {
    names: HashSet<String>,
    grams: HashSet<u64>,
}

impl Base {
    /// The base of a chapter whose stub is `stub` (its sources).
    pub fn new(stub: &str) -> Base {
        let tokens = tokens(stub);
        let names = tokens
            .iter()
            .filter(|t| is_name(t))
            .cloned()
            .collect::<HashSet<_>>();
        let mut base = Base {
            names,
            grams: HashSet::new(),
        };
        base.grams = base.grams_of(stub);
        base
    }

    /// The hashes of every run of tokens of `source`, its own names as `ID`.
    fn grams_of(&self, source: &str) -> HashSet<u64> {
        let tokens = tokens(source);
        let normal: Vec<&str> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                // A method's or a path's name (`.memory_reserved`, `mem::drop`) is the API's.
                let after_access = i > 0 && (tokens[i - 1] == "." || tokens[i - 1] == ":");
                let own = is_name(t)
                    && !after_access
                    && !self.names.contains(t)
                    && !KEYWORDS.contains(&t.as_str());
                if own { "ID" } else { t.as_str() }
            })
            .collect();
        normal
            .windows(GRAM)
            .map(|run| {
                let mut hasher = DefaultHasher::new();
                run.hash(&mut hasher);
                hasher.finish()
            })
            .collect()
    }

    /// The fingerprint of a submission's sources.
    pub fn fingerprint(&self, source: &str) -> Fingerprint {
        let grams = self
            .grams_of(source)
            .into_iter()
            .filter(|g| !self.grams.contains(g))
            .collect();
        Fingerprint { grams }
    }
}

/// Whether a token is a name (not a literal, a number or punctuation).
fn is_name(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

impl Fingerprint {
    /// How alike two fingerprints are, from 0 to 1; 0 when either has too little of its own.
    pub fn similarity(&self, other: &Fingerprint) -> f64 {
        if self.grams.len() < MIN_GRAMS || other.grams.len() < MIN_GRAMS {
            return 0.0;
        }
        let shared = self.grams.intersection(&other.grams).count();
        let all = self.grams.len() + other.grams.len() - shared;
        shared as f64 / all as f64
    }
}

/// A chapter's fingerprints: the reference solution's (where the repository has it), and each
/// student's by name.
pub type ChapterPrints = (Option<Fingerprint>, Vec<(String, Fingerprint)>);

/// The pairs at or above [`THRESHOLD`]: each student's chapter against the reference solution's
/// (when there is one) and against every other student's; most alike first.
pub fn find(chapters: &BTreeMap<String, ChapterPrints>) -> Vec<Similar> {
    let mut found = Vec::new();
    for (chapter, (reference, students)) in chapters {
        for (i, (student, print)) in students.iter().enumerate() {
            if let Some(reference) = reference {
                let similarity = print.similarity(reference);
                if similarity >= THRESHOLD {
                    found.push(Similar {
                        chapter: chapter.clone(),
                        student: student.clone(),
                        other: Author::Reference,
                        similarity,
                    });
                }
            }
            for (other, other_print) in &students[i + 1..] {
                let similarity = print.similarity(other_print);
                if similarity >= THRESHOLD {
                    found.push(Similar {
                        chapter: chapter.clone(),
                        student: student.clone(),
                        other: Author::Student(other.clone()),
                        similarity,
                    });
                }
            }
        }
    }
    found.sort_by(|a, b| {
        b.similarity
            .total_cmp(&a.similarity)
            .then_with(|| a.chapter.cmp(&b.chapter))
            .then_with(|| a.student.cmp(&b.student))
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const STUB: &str = "use gpumem::Device;\n\n/// Frees the model.\npub fn unload_model(dev: &Device, \
                        model: Vec<u8>) -> u64 {\n    todo!()\n}\n\n/// Sums.\npub fn total(xs: \
                        &[u64]) -> u64 {\n    todo!()\n}\n";
    const SOLUTION: &str = "use gpumem::Device;\n\n/// Frees the model.\npub fn unload_model(dev: \
                            &Device, model: Vec<u8>) -> u64 {\n    let before = \
                            dev.memory_reserved();\n    drop(model);\n    dev.empty_cache();\n    \
                            let after = dev.memory_reserved();\n    before - after\n}\n\n/// \
                            Sums.\npub fn total(xs: &[u64]) -> u64 {\n    let mut sum = 0;\n    \
                            for x in xs {\n        sum += *x;\n    }\n    sum\n}\n";
    /// The solution with its own names renamed, reformatted, and commented.
    const DISGUISED: &str = "use gpumem::Device;\n// my work!\n/// Frees the model.\npub fn \
                             unload_model(dev: &Device, model: Vec<u8>) -> u64 { let r0 = \
                             dev.memory_reserved(); /* free it */ drop(model); \
                             dev.empty_cache();\n let r1 = dev.memory_reserved(); r0 - r1 }\n\
                             /// Sums.\npub fn total(xs: &[u64]) -> u64\n{\n  let mut acc = 0;\n  \
                             for v in xs { acc += *v; }\n  acc\n}\n";
    /// Another way to the same results.
    const OTHER: &str = "use gpumem::Device;\n\n/// Frees the model.\npub fn unload_model(dev: \
                         &Device, model: Vec<u8>) -> u64 {\n    let reserved = |d: &Device| \
                         d.memory_reserved();\n    let start = reserved(dev);\n    \
                         std::mem::drop(model);\n    dev.empty_cache();\n    \
                         start.saturating_sub(reserved(dev))\n}\n\n/// Sums.\npub fn total(xs: \
                         &[u64]) -> u64 {\n    xs.iter().copied().sum::<u64>()\n}\n";

    #[test]
    fn tokens_leave_out_comments_and_layout() {
        assert_eq!(
            tokens("let a = \"x // y\"; // note\n/* a /* nested */ one */ 'c' 'a r#\"q\"#"),
            [
                "let",
                "a",
                "=",
                "\"x // y\"",
                ";",
                "'c'",
                "'",
                "a",
                "r#\"q\"#"
            ]
        );
        assert_eq!(tokens("fn  f ( )\n{}"), tokens("fn f(){}"));
    }

    #[test]
    fn a_renamed_and_reformatted_copy_is_as_alike_as_the_original() {
        let base = Base::new(STUB);
        let solution = base.fingerprint(SOLUTION);
        assert_eq!(solution.similarity(&base.fingerprint(DISGUISED)), 1.0);
        let other = base.fingerprint(OTHER).similarity(&solution);
        assert!(other < THRESHOLD, "{other}");
        // The stub itself has nothing of its own: never flagged.
        assert_eq!(
            base.fingerprint(STUB).similarity(&base.fingerprint(STUB)),
            0.0
        );
    }

    #[test]
    fn find_flags_copies_of_the_reference_and_of_each_other() {
        let base = Base::new(STUB);
        let chapters = BTreeMap::from([(
            "ch03".to_string(),
            (
                Some(base.fingerprint(SOLUTION)),
                vec![
                    ("alice".to_string(), base.fingerprint(OTHER)),
                    ("bob".to_string(), base.fingerprint(DISGUISED)),
                    ("carol".to_string(), base.fingerprint(OTHER)),
                    ("dave".to_string(), base.fingerprint(STUB)),
                ],
            ),
        )]);
        let found: Vec<String> = find(&chapters).iter().map(Similar::describe).collect();
        assert_eq!(
            found,
            [
                "ch03: alice and carol: 100% alike",
                "ch03: bob and the reference solution: 100% alike"
            ]
        );
    }
}
