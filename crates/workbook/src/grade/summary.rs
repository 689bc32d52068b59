//! What the class struggles with (`grade --class`): how many students pass each exercise, a
//! histogram of the scores, the slowest submissions, and the submissions that look alike
//! ([`super::similarity`]); printed after the table and written as `summary.md` and
//! `summary.json` beside the feedback files.

use super::similarity::Similar;
use super::{ChapterState, GradeReport, StudentResult};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Duration;

/// Submissions listed as the slowest.
const SLOWEST_SHOWN: usize = 5;
/// The longest bar of the histogram, in characters.
const BAR_WIDTH: usize = 40;

/// One exercise and how many students pass it (every one of its tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExercisePassed {
    /// The chapter.
    pub chapter: String,
    /// The exercise (`hidden tests` for a chapter's hidden tests together).
    pub exercise: String,
    /// Students who pass every one of its tests.
    pub passed: usize,
}

/// The class's summary.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Students graded.
    pub students: usize,
    /// Points possible.
    pub max_score: u32,
    /// Each exercise, in the workbook's order.
    pub exercises: Vec<ExercisePassed>,
    /// Students per score band: `[0, 10)`, `[10, 20)`, ... `[90, 100)` percent, then 100%.
    pub histogram: [usize; 11],
    /// The slowest submissions, slowest first, with the time their chapters took.
    pub slowest: Vec<(String, Duration)>,
    /// Submissions that look alike (nothing is deducted for it).
    pub similar: Vec<Similar>,
}

/// The label of each histogram band.
fn band_label(band: usize) -> String {
    if band == 10 {
        "100%".to_string()
    } else {
        format!("{}-{}%", band * 10, band * 10 + 9)
    }
}

/// The band of a score: 100% only for full marks.
fn band(score: u32, max: u32) -> usize {
    if max == 0 || score >= max {
        return 10;
    }
    usize::try_from(u64::from(score) * 10 / u64::from(max)).map_or(9, |b| b.min(9))
}

/// A student's building and testing time, all chapters together.
fn time_of(student: &StudentResult) -> Duration {
    student.chapters.iter().map(|c| c.duration).sum()
}

impl Summary {
    /// The summary of a run, with the pairs that look alike.
    pub fn new(report: &GradeReport, similar: Vec<Similar>) -> Summary {
        let mut exercises = Vec::new();
        for (c, spec) in report.chapters.iter().enumerate() {
            let passes = |student: &StudentResult, exercise: Option<&str>| {
                let chapter = &student.chapters[c];
                chapter.state == ChapterState::Graded
                    && chapter
                        .tests
                        .iter()
                        .filter(|t| t.test.exercise.as_deref() == exercise)
                        .all(|t| t.status.passed())
            };
            for exercise in &spec.chapter.info.exercises {
                exercises.push(ExercisePassed {
                    chapter: spec.name().to_string(),
                    exercise: exercise.name.clone(),
                    passed: report
                        .students
                        .iter()
                        .filter(|s| passes(s, Some(exercise.name.as_str())))
                        .count(),
                });
            }
            if spec.tests.iter().any(|t| t.hidden) {
                exercises.push(ExercisePassed {
                    chapter: spec.name().to_string(),
                    exercise: "hidden tests".to_string(),
                    passed: report.students.iter().filter(|s| passes(s, None)).count(),
                });
            }
        }
        let mut histogram = [0; 11];
        for student in &report.students {
            histogram[band(student.score(), student.max_score())] += 1;
        }
        let mut slowest: Vec<(String, Duration)> = report
            .students
            .iter()
            .map(|s| (s.student.clone(), time_of(s)))
            .collect();
        slowest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        slowest.truncate(SLOWEST_SHOWN);
        Summary {
            students: report.students.len(),
            max_score: report.chapters.iter().map(|c| c.max_score()).sum(),
            exercises,
            histogram,
            slowest,
            similar,
        }
    }

    /// The summary as text (for the terminal; `markdown` has the same lines in a page).
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Summary of {} submission(s)\n", self.students);
        out.push_str(&self.body("", "  "));
        out
    }

    /// The summary as Markdown (`summary.md`).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Summary of {} submission(s)\n", self.students);
        out.push_str(&self.body("## ", ""));
        out
    }

    /// The sections, each under a `heading`-prefixed title, their lines indented by `indent`
    /// (in Markdown the tables and the histogram are code blocks, so that they keep their
    /// columns).
    fn body(&self, heading: &str, indent: &str) -> String {
        let markdown = !heading.is_empty();
        let block = |lines: &str| {
            if markdown {
                format!("```text\n{lines}```\n")
            } else {
                lines.to_string()
            }
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{heading}Students who pass each exercise (every one of its tests), of {}\n",
            self.students
        );
        let width = self
            .exercises
            .iter()
            .map(|e| e.chapter.chars().count() + 1 + e.exercise.chars().count())
            .max()
            .unwrap_or(0);
        let mut lines = String::new();
        for e in &self.exercises {
            let name = format!("{} {}", e.chapter, e.exercise);
            let _ = writeln!(
                lines,
                "{indent}{name:<width$}  {:>w$}/{}",
                e.passed,
                self.students,
                w = self.students.to_string().len()
            );
        }
        out.push_str(&block(&lines));
        let _ = writeln!(
            out,
            "\n{heading}Scores (percent of {} points)\n",
            self.max_score
        );
        let most = self.histogram.iter().copied().max().unwrap_or(0).max(1);
        let mut lines = String::new();
        for (b, count) in self.histogram.iter().enumerate() {
            let bar = "#".repeat((count * BAR_WIDTH).div_ceil(most));
            let line = format!("{indent}{:>7}  {count:>3}  {bar}", band_label(b));
            let _ = writeln!(lines, "{}", line.trim_end());
        }
        out.push_str(&block(&lines));
        let _ = writeln!(
            out,
            "\n{heading}Slowest submissions (building and testing, all chapters)\n"
        );
        let mut lines = String::new();
        for (student, time) in &self.slowest {
            let _ = writeln!(lines, "{indent}{student}: {:.1} s", time.as_secs_f64());
        }
        out.push_str(&block(&lines));
        let _ = writeln!(
            out,
            "\n{heading}Submissions that look alike (nothing was deducted; worth a look)\n"
        );
        if self.similar.is_empty() {
            let _ = writeln!(out, "{indent}none");
        } else {
            let mut lines = String::new();
            for pair in &self.similar {
                let _ = writeln!(lines, "{indent}{}", pair.describe());
            }
            out.push_str(&block(&lines));
        }
        out
    }

    /// The summary as JSON (`summary.json`).
    pub fn json(&self) -> Value {
        json!({
            "students": self.students,
            "max_score": self.max_score,
            "exercises": self.exercises.iter().map(|e| json!({
                "chapter": e.chapter,
                "exercise": e.exercise,
                "passed": e.passed,
                "of": self.students,
            })).collect::<Vec<_>>(),
            "histogram": self.histogram.iter().enumerate().map(|(b, count)| json!({
                "band": band_label(b),
                "students": count,
            })).collect::<Vec<_>>(),
            "slowest": self.slowest.iter().map(|(student, time)| json!({
                "student": student,
                "seconds": (time.as_secs_f64() * 10.0).round() / 10.0,
            })).collect::<Vec<_>>(),
            "similar": self.similar.iter().map(Similar::json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_give_100_only_to_full_marks() {
        assert_eq!(band(0, 16), 0);
        assert_eq!(band(1, 16), 0);
        assert_eq!(band(2, 16), 1);
        assert_eq!(band(15, 16), 9);
        assert_eq!(band(264, 265), 9);
        assert_eq!(band(16, 16), 10);
        assert_eq!(band(0, 0), 10);
        assert_eq!(band_label(0), "0-9%");
        assert_eq!(band_label(9), "90-99%");
        assert_eq!(band_label(10), "100%");
    }
}
