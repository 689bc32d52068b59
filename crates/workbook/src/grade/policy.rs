//! `grade --policy FILE`: a course's grading policy in TOML: a weight per chapter, and a late
//! penalty per day after a due date, with each submission's time from a file or the roster.
//!
//! ```toml
//! [weights]            # a chapter not listed weighs 1
//! ch01 = 1
//! ch03-drop-and-empty-cache = 2
//!
//! [late]
//! due = "2026-12-01T23:59:00Z"       # UTC
//! penalty_per_day = 10               # percent of the grade, per day or part of a day late
//! submission_times = "times.csv"     # columns folder, submitted (else the roster's `submitted`)
//! ```

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A course's grading policy, its chapters resolved to their full names.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Each chapter's weight in the final grade (a chapter not listed weighs 1).
    pub weights: BTreeMap<String, f64>,
    /// The late penalty, if the policy has one.
    pub late: Option<LatePolicy>,
    /// Points of each chapter on Gradescope (`export gradescope`), by chapter.
    pub points: BTreeMap<String, u32>,
}

/// The late penalty.
#[derive(Debug, Clone)]
pub struct LatePolicy {
    /// The due date.
    pub due: SystemTime,
    /// Percent of the grade taken per day (or part of a day) late.
    pub penalty_per_day: f64,
    /// Each submission's time by student (the submission's folder or archive name), from the
    /// policy's `submission_times` file.
    pub times: BTreeMap<String, SystemTime>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    weights: BTreeMap<String, f64>,
    late: Option<LateFile>,
    #[serde(default)]
    points: BTreeMap<String, u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LateFile {
    due: String,
    penalty_per_day: f64,
    submission_times: Option<PathBuf>,
}

impl Policy {
    /// Reads a policy file; `resolve` turns a chapter's name, prefix or number into its full
    /// name (or says why it cannot).
    pub fn load(path: &Path, resolve: &dyn Fn(&str) -> Result<String>) -> Result<Policy> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the policy file {}", path.display()))?;
        let file: PolicyFile = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "the policy file {} is not valid: {}",
                path.display(),
                e.to_string().trim_end()
            )
        })?;
        let mut weights = BTreeMap::new();
        for (key, weight) in file.weights {
            let chapter =
                resolve(&key).with_context(|| format!("{}: [weights] {key}", path.display()))?;
            if !weight.is_finite() || weight < 0.0 {
                bail!(
                    "{}: [weights] {key} = {weight}: a weight is a number of 0 or more",
                    path.display()
                );
            }
            weights.insert(chapter, weight);
        }
        let mut points = BTreeMap::new();
        for (key, value) in file.points {
            let chapter =
                resolve(&key).with_context(|| format!("{}: [points] {key}", path.display()))?;
            if value == 0 {
                bail!(
                    "{}: [points] {key} = 0: a chapter is worth 1 point or more",
                    path.display()
                );
            }
            points.insert(chapter, value);
        }
        let late = match file.late {
            None => None,
            Some(late) => {
                let due = parse_time(&late.due)
                    .with_context(|| format!("{}: [late] due", path.display()))?;
                if !(0.0..=100.0).contains(&late.penalty_per_day) {
                    bail!(
                        "{}: [late] penalty_per_day = {}: a percentage from 0 to 100",
                        path.display(),
                        late.penalty_per_day
                    );
                }
                let times = match &late.submission_times {
                    None => BTreeMap::new(),
                    Some(file) => {
                        let file = path.parent().unwrap_or(Path::new("")).join(file);
                        read_times(&file)?
                    }
                };
                Some(LatePolicy {
                    due,
                    penalty_per_day: late.penalty_per_day,
                    times,
                })
            }
        };
        Ok(Policy {
            weights,
            late,
            points,
        })
    }

    /// A chapter's weight.
    pub fn weight(&self, chapter: &str) -> f64 {
        self.weights.get(chapter).copied().unwrap_or(1.0)
    }
}

/// A time written as RFC 3339 in UTC (`2026-12-01T23:59:00Z`; the `Z` and the seconds' fraction
/// may be left out).
pub fn parse_time(text: &str) -> Result<SystemTime> {
    humantime::parse_rfc3339_weak(text.trim()).map_err(|_| {
        anyhow::anyhow!(
            "`{text}` is not a time: write it in UTC like 2026-12-01T23:59:00Z (RFC 3339)"
        )
    })
}

/// Days late, each day begun counting whole: 0 when on time.
pub fn days_late(due: SystemTime, submitted: SystemTime) -> u32 {
    match submitted.duration_since(due) {
        Ok(late) if !late.is_zero() => {
            let days = late.as_secs().div_ceil(86_400).max(1);
            u32::try_from(days).unwrap_or(u32::MAX)
        }
        _ => 0,
    }
}

/// A submission-times file: columns `folder` and `submitted`.
fn read_times(path: &Path) -> Result<BTreeMap<String, SystemTime>> {
    let mut reader = csv::Reader::from_path(path)
        .with_context(|| format!("reading the submission times {}", path.display()))?;
    let headers = reader
        .headers()
        .with_context(|| format!("reading {}", path.display()))?
        .clone();
    let column =
        |name: &str| {
            headers.iter().position(|h| h.trim() == name).with_context(|| {
            format!(
                "{} has no `{name}` column: a submission-times file has the columns folder and \
                 submitted",
                path.display()
            )
        })
        };
    let (folder, submitted) = (column("folder")?, column("submitted")?);
    let mut times = BTreeMap::new();
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        let record = record.with_context(|| format!("{}: line {line}", path.display()))?;
        let name = record.get(folder).unwrap_or("").trim();
        if name.is_empty() {
            bail!("{}: line {line} has no folder", path.display());
        }
        let time = parse_time(record.get(submitted).unwrap_or(""))
            .with_context(|| format!("{}: line {line}", path.display()))?;
        if times.insert(name.to_string(), time).is_some() {
            bail!("{}: {name} is listed twice", path.display());
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(key: &str) -> Result<String> {
        match key {
            "ch01" | "ch01-availability" => Ok("ch01-availability".into()),
            "ch02" => Ok("ch02-transfers".into()),
            other => bail!("there is no chapter {other:?}"),
        }
    }

    fn load(text: &str) -> Result<Policy> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, text).unwrap();
        std::fs::write(
            dir.path().join("times.csv"),
            "folder,submitted\nalice,2026-12-01T12:00:00Z\nbob,2026-12-03T00:00:00Z\n",
        )
        .unwrap();
        Policy::load(&path, &resolve)
    }

    #[test]
    fn a_policy_resolves_chapters_and_reads_its_times() {
        let policy = load(
            "[weights]\nch01 = 2\n\n[late]\ndue = \"2026-12-01T23:59:00Z\"\npenalty_per_day = \
             10\nsubmission_times = \"times.csv\"\n",
        )
        .unwrap();
        assert_eq!(policy.weight("ch01-availability"), 2.0);
        assert_eq!(policy.weight("ch02-transfers"), 1.0);
        let late = policy.late.unwrap();
        assert_eq!(late.penalty_per_day, 10.0);
        assert_eq!(days_late(late.due, late.times["alice"]), 0);
        // 24 h 1 min late: two days begun.
        assert_eq!(days_late(late.due, late.times["bob"]), 2);
    }

    #[test]
    fn a_malformed_policy_is_an_error_naming_the_problem() {
        let cases = [
            ("[weights]\nch99 = 1\n", "there is no chapter \"ch99\""),
            (
                "[weights]\nch01 = -1\n",
                "a weight is a number of 0 or more",
            ),
            ("[weight]\nch01 = 1\n", "unknown field `weight`"),
            ("[weights\n", "is not valid"),
            (
                "[late]\ndue = \"next friday\"\npenalty_per_day = 10\n",
                "`next friday` is not a time: write it in UTC like 2026-12-01T23:59:00Z",
            ),
            (
                "[late]\ndue = \"2026-12-01T23:59:00Z\"\npenalty_per_day = 150\n",
                "a percentage from 0 to 100",
            ),
            (
                "[late]\ndue = \"2026-12-01T23:59:00Z\"\npenalty_per_day = 5\nsubmission_times \
                 = \"missing.csv\"\n",
                "reading the submission times",
            ),
            ("[points]\nch01 = 0\n", "a chapter is worth 1 point or more"),
        ];
        for (text, needle) in cases {
            let error = format!("{:#}", load(text).unwrap_err());
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn days_late_count_each_day_begun() {
        let due = parse_time("2026-12-01T00:00:00Z").unwrap();
        let at = |t: &str| parse_time(t).unwrap();
        assert_eq!(days_late(due, at("2026-11-30T10:00:00Z")), 0);
        assert_eq!(days_late(due, due), 0);
        assert_eq!(days_late(due, at("2026-12-01T00:00:01Z")), 1);
        assert_eq!(days_late(due, at("2026-12-02T00:00:00Z")), 1);
        assert_eq!(days_late(due, at("2026-12-02T00:00:01Z")), 2);
    }
}
