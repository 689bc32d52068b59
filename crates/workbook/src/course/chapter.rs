//! `chapter.toml`: a chapter's title, its exercises, their hints and their graded tests.

use anyhow::{Context, Result};
use indexmap::IndexMap;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// The fewest exercises a chapter may have.
pub const MIN_EXERCISES: usize = 3;
/// The fewest hints an exercise may have.
pub const MIN_HINTS: usize = 2;

/// A chapter's metadata, as written in its `chapter.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChapterInfo {
    /// Shown by the CLI and the book.
    pub title: String,
    /// The exercises, in the order learners meet them.
    #[serde(default)]
    pub exercises: Vec<ExerciseInfo>,
}

/// One exercise of a chapter.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExerciseInfo {
    /// A snake_case id, usually the function the learner writes.
    pub name: String,
    /// One line saying what the learner does.
    pub title: String,
    /// Hints, gentle first, explicit last.
    #[serde(default)]
    pub hints: Vec<String>,
    /// The graded tests: test function name to points, in the file's order.
    #[serde(default)]
    pub tests: IndexMap<String, u32>,
}

impl ChapterInfo {
    /// Reads and parses a `chapter.toml`; errors name the file and the problem.
    pub fn load(path: &Path) -> Result<ChapterInfo> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        ChapterInfo::parse(&text).with_context(|| format!("{} is malformed", path.display()))
    }

    /// Parses the text of a `chapter.toml`.
    pub fn parse(text: &str) -> Result<ChapterInfo> {
        let info: ChapterInfo = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(info)
    }

    /// Every graded test with its exercise and points, in the file's order.
    pub fn tests(&self) -> impl Iterator<Item = (&ExerciseInfo, &str, u32)> {
        self.exercises
            .iter()
            .flat_map(|ex| ex.tests.iter().map(move |(t, &p)| (ex, t.as_str(), p)))
    }

    /// The exercise that lists `test`, if any.
    pub fn exercise_of(&self, test: &str) -> Option<&ExerciseInfo> {
        self.exercises.iter().find(|ex| ex.tests.contains_key(test))
    }

    /// The points of all tests together.
    pub fn total_points(&self) -> u32 {
        self.tests().map(|(_, _, p)| p).sum()
    }

    /// Breaches of the workbook's rules that the file alone shows (too few exercises or hints,
    /// duplicate names, tests worth no points...), one sentence each.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.title.trim().is_empty() {
            problems.push("the chapter's title is empty".to_string());
        }
        if self.exercises.len() < MIN_EXERCISES {
            problems.push(format!(
                "the chapter has {} exercise(s); it needs at least {MIN_EXERCISES}",
                self.exercises.len()
            ));
        }
        let mut exercise_names = HashMap::new();
        let mut test_owner: HashMap<&str, &str> = HashMap::new();
        for ex in &self.exercises {
            let name = ex.name.as_str();
            if name.trim().is_empty() {
                problems.push(format!("an exercise ({:?}) has an empty name", ex.title));
            }
            if exercise_names.insert(name, ()).is_some() {
                problems.push(format!("two exercises are named {name:?}"));
            }
            if ex.title.trim().is_empty() {
                problems.push(format!("exercise {name} has an empty title"));
            }
            let hints = ex.hints.iter().filter(|h| !h.trim().is_empty()).count();
            if hints < MIN_HINTS {
                problems.push(format!(
                    "exercise {name} has {hints} hint(s); it needs at least {MIN_HINTS}"
                ));
            }
            if ex.tests.is_empty() {
                problems.push(format!("exercise {name} lists no tests"));
            }
            for (test, &points) in &ex.tests {
                if points == 0 {
                    problems.push(format!("test {test} (exercise {name}) is worth 0 points"));
                }
                if let Some(other) = test_owner.insert(test, name) {
                    problems.push(format!(
                        "test {test} is listed under both exercise {other} and exercise {name}"
                    ));
                }
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
title = "Is there a GPU?"

[[exercises]]
name = "choose_device"
title = "Choose a device"
hints = ["gentle", "explicit"]
[exercises.tests]
zeta_first = 2
alpha_second = 1
"#;

    #[test]
    fn parses_the_readme_format_and_keeps_the_test_order() {
        let info = ChapterInfo::parse(GOOD).unwrap();
        assert_eq!(info.title, "Is there a GPU?");
        assert_eq!(info.exercises.len(), 1);
        let names: Vec<&str> = info.tests().map(|(_, t, _)| t).collect();
        assert_eq!(names, ["zeta_first", "alpha_second"]);
        assert_eq!(info.total_points(), 3);
        assert_eq!(
            info.exercise_of("alpha_second").map(|e| e.name.as_str()),
            Some("choose_device")
        );
    }

    #[test]
    fn one_exercise_is_too_few() {
        let info = ChapterInfo::parse(GOOD).unwrap();
        let problems = info.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("at least 3"), "{problems:?}");
    }
}
