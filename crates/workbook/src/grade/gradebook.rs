//! The class's grade file (`grade --csv FILE`): one row per student, one column per chapter, read
//! back so that a regrade updates its students' rows and keeps the others; a roster's columns
//! (id, email, name); a policy's weighted, late-penalised final grade; and the import files of
//! Canvas and Moodle (`grade --format canvas|moodle`).
//!
//! The file: `student`, then `id,email,name` when a roster gave them, a column per chapter, `total`
//! (points), then `days_late,final` under a policy. Its second row, `(out of)`, holds each
//! chapter's points possible, so that a later run knows what full marks are (`--only-failed`, the
//! weights) for chapters it does not grade.

use super::GradeReport;
use super::policy::{self, Policy};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

/// The first cell of the row of points possible.
const OUT_OF: &str = "(out of)";
/// The roster's columns, in the grade file as in the roster.
const ROSTER_COLUMNS: [&str; 3] = ["id", "email", "name"];
/// The columns a policy adds after `total`.
const POLICY_COLUMNS: [&str; 2] = ["days_late", "final"];

/// A chapter's column: its name and its points possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The chapter's full name.
    pub chapter: String,
    /// Its points possible.
    pub max: u32,
}

/// One student's row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// The student (the submission's folder or archive name).
    pub student: String,
    /// Points per chapter graded (a chapter never graded for this student has none).
    pub scores: BTreeMap<String, u32>,
    /// The roster's id, email and name (empty when unknown).
    pub roster: [String; 3],
    /// When the student submitted, if the roster says.
    pub submitted: Option<SystemTime>,
}

impl Row {
    /// Points in all chapters.
    pub fn total(&self) -> u32 {
        self.scores.values().sum()
    }
}

/// The class's grades.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gradebook {
    /// The chapters' columns, in the workbook's order.
    pub chapters: Vec<Column>,
    /// One row per student, in the order they were first graded.
    pub rows: Vec<Row>,
    /// Whether the file has the roster's columns.
    pub roster_columns: bool,
    /// Whether the file has a policy's columns (then it must be written with a policy again).
    pub policy_columns: bool,
}

/// What merging a regrade did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// Students whose rows were updated.
    pub updated: Vec<String>,
    /// Students whose rows were added.
    pub added: Vec<String>,
    /// Rows kept as they were.
    pub kept: usize,
}

/// A class roster: `folder` (the submission's folder or archive name), `id`, `email`, `name`,
/// and optionally `submitted` (when the student submitted, for late penalties).
#[derive(Debug, Clone, Default)]
pub struct Roster {
    /// Each student's id, email and name, and submission time, by folder.
    pub entries: BTreeMap<String, ([String; 3], Option<SystemTime>)>,
}

impl Roster {
    /// Reads a roster; every error names the file and the line.
    pub fn read(path: &Path) -> Result<Roster> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the roster {}", path.display()))?;
        let mut reader = csv::Reader::from_reader(text.trim_start_matches('\u{feff}').as_bytes());
        let headers = reader
            .headers()
            .with_context(|| format!("reading the roster {}", path.display()))?
            .clone();
        let find = |name: &str| {
            headers
                .iter()
                .position(|h| h.trim().eq_ignore_ascii_case(name))
        };
        let Some(folder) = find("folder") else {
            bail!(
                "the roster {} has no `folder` column: its first line names the columns folder, \
                 id, email, name (folder: the submission's folder or archive name)",
                path.display()
            );
        };
        let columns = ROSTER_COLUMNS.map(find);
        let submitted = find("submitted");
        let mut entries = BTreeMap::new();
        for (i, record) in reader.records().enumerate() {
            let line = i + 2;
            let record = record.with_context(|| format!("{}: line {line}", path.display()))?;
            let name = record.get(folder).unwrap_or("").trim().to_string();
            if name.is_empty() {
                bail!("{}: line {line} has no folder", path.display());
            }
            let values = columns.map(|c| {
                c.and_then(|c| record.get(c))
                    .unwrap_or("")
                    .trim()
                    .to_string()
            });
            let time = match submitted.and_then(|c| record.get(c)).map(str::trim) {
                Some(text) if !text.is_empty() => Some(
                    policy::parse_time(text)
                        .with_context(|| format!("{}: line {line}", path.display()))?,
                ),
                _ => None,
            };
            if entries.insert(name.clone(), (values, time)).is_some() {
                bail!("{}: {name} is listed twice", path.display());
            }
        }
        Ok(Roster { entries })
    }
}

impl Gradebook {
    /// The grades of one run.
    pub fn from_report(report: &GradeReport) -> Gradebook {
        let mut book = Gradebook::default();
        let order: Vec<String> = report
            .chapters
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        book.merge(report, &order);
        book
    }

    /// Reads a grade file written by `grade --csv`; `chapters` are the workbook's (in order),
    /// `points` their points possible where the file has no `(out of)` row. A file that is not
    /// one of ours is an error, so that it is never overwritten.
    pub fn parse(text: &str, chapters: &[String], points: &dyn Fn(&str) -> u32) -> Result<Self> {
        let not_ours = |why: String| {
            anyhow::anyhow!(
                "it is not a grade file written by `workbook grade --csv` ({why}), so it is left \
                 as it is: give --csv a new file, or the file an earlier grade wrote"
            )
        };
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.trim_start_matches('\u{feff}').as_bytes());
        let mut records = reader.records();
        let header: Vec<String> = match records.next() {
            Some(record) => record
                .map_err(|e| not_ours(format!("not CSV: {e}")))?
                .iter()
                .map(str::to_string)
                .collect(),
            None => return Ok(Gradebook::default()),
        };
        if header.first().map(String::as_str) != Some("student") {
            return Err(not_ours("its first column is not `student`".to_string()));
        }
        let mut at = 1;
        let roster_columns = header[at..].starts_with(&ROSTER_COLUMNS.map(String::from));
        if roster_columns {
            at += ROSTER_COLUMNS.len();
        }
        let first_chapter = at;
        while at < header.len() && header[at] != "total" {
            if !chapters.contains(&header[at]) {
                return Err(not_ours(format!(
                    "its column `{}` is not a chapter of this workbook",
                    header[at]
                )));
            }
            at += 1;
        }
        if at == header.len() {
            return Err(not_ours("it has no `total` column".to_string()));
        }
        let chapter_names = &header[first_chapter..at];
        let rest = &header[at + 1..];
        let policy_columns = match rest {
            [] => false,
            r if r == POLICY_COLUMNS => true,
            _ => {
                return Err(not_ours(format!(
                    "columns after `total`: {}",
                    rest.join(", ")
                )));
            }
        };
        let mut book = Gradebook {
            chapters: chapter_names
                .iter()
                .map(|c| Column {
                    chapter: c.clone(),
                    max: points(c),
                })
                .collect(),
            rows: Vec::new(),
            roster_columns,
            policy_columns,
        };
        for (i, record) in records.enumerate() {
            let line = i + 2;
            let record = record.map_err(|e| not_ours(format!("line {line}: {e}")))?;
            let cells: Vec<&str> = record.iter().collect();
            if cells.len() != header.len() {
                return Err(not_ours(format!(
                    "line {line} has {} cells, its header {}",
                    cells.len(),
                    header.len()
                )));
            }
            let number = |cell: &str, column: &str| -> Result<Option<u32>> {
                if cell.is_empty() {
                    return Ok(None);
                }
                cell.parse().map(Some).map_err(|_| {
                    not_ours(format!(
                        "line {line}: `{cell}` in column {column} is not a number of points"
                    ))
                })
            };
            let scores = chapter_names
                .iter()
                .zip(&cells[first_chapter..at])
                .map(|(c, cell)| Ok(number(cell, c)?.map(|n| (c.clone(), n))))
                .collect::<Result<Vec<_>>>()?;
            if line == 2 && cells[0] == OUT_OF {
                for (column, score) in book.chapters.iter_mut().zip(&scores) {
                    if let Some((_, max)) = score {
                        column.max = *max;
                    }
                }
                continue;
            }
            let student = unquote(cells[0]);
            if book.rows.iter().any(|r| r.student == student) {
                return Err(not_ours(format!("{student} has two rows")));
            }
            let mut roster = <[String; 3]>::default();
            if roster_columns {
                for (value, cell) in roster.iter_mut().zip(&cells[1..]) {
                    *value = unquote(cell);
                }
            }
            book.rows.push(Row {
                student,
                scores: scores.into_iter().flatten().collect(),
                roster,
                submitted: None,
            });
        }
        Ok(book)
    }

    /// Reads the grade file at `path`: an empty book when it does not exist or is empty.
    pub fn read(path: &Path, chapters: &[String], points: &dyn Fn(&str) -> u32) -> Result<Self> {
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
                anyhow::anyhow!(
                    "{} is not a grade file written by `workbook grade --csv` (it is not UTF-8 \
                     text), so it is left as it is: give --csv a new file",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Gradebook::parse(&text, chapters, points).with_context(|| format!("{}", path.display()))
    }

    /// Takes in a run's grades: each of its students' rows updated (the chapters it graded,
    /// the others kept) or added; `order` is the workbook's chapter order.
    pub fn merge(&mut self, report: &GradeReport, order: &[String]) -> Merged {
        for spec in &report.chapters {
            let column = Column {
                chapter: spec.name().to_string(),
                max: spec.max_score(),
            };
            match self
                .chapters
                .iter_mut()
                .find(|c| c.chapter == column.chapter)
            {
                Some(existing) => *existing = column,
                None => self.chapters.push(column),
            }
        }
        let rank = |c: &Column| order.iter().position(|o| *o == c.chapter);
        self.chapters.sort_by_key(rank);
        let mut merged = Merged::default();
        let mut touched = vec![false; self.rows.len()];
        for student in &report.students {
            let scores = student
                .chapters
                .iter()
                .map(|c| (c.chapter.clone(), c.score()));
            match self.rows.iter().position(|r| r.student == student.student) {
                Some(i) => {
                    self.rows[i].scores.extend(scores);
                    touched[i] = true;
                    merged.updated.push(student.student.clone());
                }
                None => {
                    self.rows.push(Row {
                        student: student.student.clone(),
                        scores: scores.collect(),
                        ..Row::default()
                    });
                    merged.added.push(student.student.clone());
                }
            }
        }
        merged.kept = touched.iter().filter(|t| !**t).count();
        merged
    }

    /// Fills every row's id, email, name (and submission time) from the roster; returns the
    /// students it does not list (their columns are left as they were).
    pub fn apply_roster(&mut self, roster: &Roster) -> Vec<String> {
        self.roster_columns = true;
        let mut missing = Vec::new();
        for row in &mut self.rows {
            match roster.entries.get(&row.student) {
                Some((values, submitted)) => {
                    row.roster = values.clone();
                    row.submitted = *submitted;
                }
                None => missing.push(row.student.clone()),
            }
        }
        missing
    }

    /// Points possible in all chapters.
    pub fn max_total(&self) -> u32 {
        self.chapters.iter().map(|c| c.max).sum()
    }

    /// The chapters in which a student has less than full marks (all of them for a student
    /// without a row), among `chapters`.
    pub fn short_of_full_marks(&self, student: &str, chapters: &[String]) -> Vec<String> {
        let row = self.rows.iter().find(|r| r.student == student);
        chapters
            .iter()
            .filter(|chapter| {
                let max = self.chapters.iter().find(|c| &c.chapter == *chapter);
                match (row, max) {
                    (Some(row), Some(max)) => row.scores.get(*chapter).is_none_or(|s| *s < max.max),
                    _ => true,
                }
            })
            .cloned()
            .collect()
    }

    /// A row's days late under `policy` (`None`: its time is unknown, counted on time).
    pub fn days_late(row: &Row, policy: &Policy) -> Option<u32> {
        let late = policy.late.as_ref()?;
        let submitted = late.times.get(&row.student).copied().or(row.submitted)?;
        Some(policy::days_late(late.due, submitted))
    }

    /// A row's final grade in percent: each chapter's share of its points, weighted, less the
    /// late penalty (never below 0).
    pub fn final_grade(&self, row: &Row, policy: &Policy) -> f64 {
        let (mut earned, mut weights) = (0.0, 0.0);
        for column in &self.chapters {
            let weight = policy.weight(&column.chapter);
            weights += weight;
            if column.max > 0 {
                let score = row.scores.get(&column.chapter).copied().unwrap_or(0);
                earned += weight * f64::from(score) / f64::from(column.max);
            }
        }
        if weights == 0.0 {
            return 0.0;
        }
        let penalty = match (&policy.late, Self::days_late(row, policy)) {
            (Some(late), Some(days)) => (f64::from(days) * late.penalty_per_day).min(100.0),
            _ => 0.0,
        };
        100.0 * earned / weights * (1.0 - penalty / 100.0)
    }

    /// The students with no known submission time under a policy with a due date.
    pub fn without_time(&self, policy: &Policy) -> Vec<String> {
        if policy.late.is_none() {
            return Vec::new();
        }
        self.rows
            .iter()
            .filter(|r| Self::days_late(r, policy).is_none())
            .map(|r| r.student.clone())
            .collect()
    }

    /// The grade file (`--csv`).
    pub fn to_csv(&self, policy: Option<&Policy>) -> String {
        let mut header = vec!["student".to_string()];
        if self.roster_columns {
            header.extend(ROSTER_COLUMNS.map(String::from));
        }
        header.extend(self.chapters.iter().map(|c| c.chapter.clone()));
        header.push("total".to_string());
        if policy.is_some() {
            header.extend(POLICY_COLUMNS.map(String::from));
        }
        let mut lines = vec![header];
        let mut out_of = vec![OUT_OF.to_string()];
        if self.roster_columns {
            out_of.extend(ROSTER_COLUMNS.map(|_| String::new()));
        }
        out_of.extend(self.chapters.iter().map(|c| c.max.to_string()));
        out_of.push(self.max_total().to_string());
        if policy.is_some() {
            out_of.extend([String::new(), "100".to_string()]);
        }
        lines.push(out_of);
        for row in &self.rows {
            let mut line = vec![row.student.clone()];
            if self.roster_columns {
                line.extend(row.roster.iter().cloned());
            }
            line.extend(self.scores(row));
            line.push(row.total().to_string());
            if let Some(policy) = policy {
                line.push(
                    Self::days_late(row, policy)
                        .map(|d| d.to_string())
                        .unwrap_or_default(),
                );
                line.push(format!("{:.2}", self.final_grade(row, policy)));
            }
            lines.push(line);
        }
        csv_lines(&lines)
    }

    /// A row's cells of the chapters' columns (empty where never graded).
    fn scores<'a>(&'a self, row: &'a Row) -> impl Iterator<Item = String> + 'a {
        self.chapters.iter().map(|c| {
            row.scores
                .get(&c.chapter)
                .map(|s| s.to_string())
                .unwrap_or_default()
        })
    }

    /// Canvas's gradebook import file. Followed: Canvas's import takes the columns of its own
    /// gradebook export, `Student`, `ID`, `SIS User ID`, `SIS Login ID`, `Section`, then one
    /// column per assignment (a header it does not know becomes a new assignment), with a
    /// `Points Possible` row under the header (Ohio State's guide "Import a CSV file to Carmen
    /// grades", teaching.resources.osu.edu, and Canvas's "How do I import grades in the
    /// Gradebook?"). The roster's id goes to `SIS User ID`, its name to `Student`; Canvas
    /// matches students on the IDs. A policy adds `Workbook final (%)`, out of 100.
    pub fn canvas(&self, policy: Option<&Policy>) -> String {
        let mut header: Vec<String> = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
            .map(String::from)
            .to_vec();
        header.extend(self.chapters.iter().map(|c| c.chapter.clone()));
        let mut possible = vec!["Points Possible".to_string()];
        possible.extend((0..4).map(|_| String::new()));
        possible.extend(self.chapters.iter().map(|c| c.max.to_string()));
        if policy.is_some() {
            header.push("Workbook final (%)".to_string());
            possible.push("100".to_string());
        }
        let mut lines = vec![header, possible];
        for row in &self.rows {
            let [id, _, name] = &row.roster;
            let shown = if name.is_empty() { &row.student } else { name };
            let mut line = vec![
                shown.clone(),
                String::new(),
                id.clone(),
                String::new(),
                String::new(),
            ];
            line.extend(self.scores(row));
            if let Some(policy) = policy {
                line.push(format!("{:.2}", self.final_grade(row, policy)));
            }
            lines.push(line);
        }
        csv_lines(&lines)
    }

    /// Moodle's CSV grade import file. Followed: MoodleDocs "Grade import" (docs.moodle.org,
    /// 3.11): the import reads a CSV whose columns are mapped on upload; students are identified
    /// by mapping "Email address" to `useremail` or "ID number" to `useridnumber`, and each
    /// grade column to a grade item (a new one is created from its header). Columns: `ID
    /// number`, `Email address`, `Full name`, one per chapter, and with a policy `Workbook final
    /// (%)`.
    pub fn moodle(&self, policy: Option<&Policy>) -> String {
        let mut header: Vec<String> = ["ID number", "Email address", "Full name"]
            .map(String::from)
            .to_vec();
        header.extend(self.chapters.iter().map(|c| c.chapter.clone()));
        if policy.is_some() {
            header.push("Workbook final (%)".to_string());
        }
        let mut lines = vec![header];
        for row in &self.rows {
            let [id, email, name] = &row.roster;
            let shown = if name.is_empty() { &row.student } else { name };
            let mut line = vec![id.clone(), email.clone(), shown.clone()];
            line.extend(self.scores(row));
            if let Some(policy) = policy {
                line.push(format!("{:.2}", self.final_grade(row, policy)));
            }
            lines.push(line);
        }
        csv_lines(&lines)
    }
}

impl Merged {
    /// What a regrade did to the file, in one line.
    pub fn describe(&self, path: &Path) -> String {
        let list = |names: &[String]| {
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        format!(
            "{}: updated {} row(s) ({}), added {} ({}), kept {} other(s) as they were",
            path.display(),
            self.updated.len(),
            list(&self.updated),
            self.added.len(),
            list(&self.added),
            self.kept
        )
    }
}

/// Lines of CSV fields.
fn csv_lines(lines: &[Vec<String>]) -> String {
    let mut out = String::new();
    for line in lines {
        let fields: Vec<String> = line.iter().map(|f| csv_field(f)).collect();
        let _ = writeln!(out, "{}", fields.join(","));
    }
    out
}

/// One CSV field: quoted when needed; a leading `=`, `+`, `-`, `@` gets a `'` so that no
/// spreadsheet takes a student's name for a formula.
pub fn csv_field(value: &str) -> String {
    let value = if value.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{value}")
    } else {
        value.to_string()
    };
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value
    }
}

/// A field as [`csv_field`] wrote it, without the `'` it put before a formula's first character.
fn unquote(cell: &str) -> String {
    match cell.strip_prefix('\'') {
        Some(rest) if rest.starts_with(['=', '+', '-', '@', '\t', '\r']) => rest.to_string(),
        _ => cell.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAPTERS: [&str; 3] = ["ch01-availability", "ch02-transfers", "ch03-drop"];

    fn chapters() -> Vec<String> {
        CHAPTERS.map(String::from).to_vec()
    }

    fn parse(text: &str) -> Result<Gradebook> {
        Gradebook::parse(text, &chapters(), &|_| 99)
    }

    fn book() -> Gradebook {
        parse(
            "student,ch01-availability,ch02-transfers,total\n(out of),21,10,31\nalice,21,10,31\n\
             bob,20,0,20\n'=evil,21,,21\n",
        )
        .unwrap()
    }

    #[test]
    fn a_grade_file_reads_back_as_written() {
        let book = book();
        assert_eq!(
            book.chapters,
            [
                Column {
                    chapter: "ch01-availability".into(),
                    max: 21
                },
                Column {
                    chapter: "ch02-transfers".into(),
                    max: 10
                }
            ]
        );
        assert_eq!(book.rows[2].student, "=evil");
        assert_eq!(book.rows[2].scores.len(), 1);
        assert_eq!(parse(&book.to_csv(None)).unwrap(), book);
        assert_eq!(
            book.to_csv(None),
            "student,ch01-availability,ch02-transfers,total\n(out of),21,10,31\n\
             alice,21,10,31\nbob,20,0,20\n'=evil,21,,21\n"
        );
    }

    #[test]
    fn a_file_that_is_not_a_grade_file_is_refused() {
        let cases = [
            ("name,score\nalice,3\n", "its first column is not `student`"),
            (
                "student,ch01-availability\nalice,3\n",
                "it has no `total` column",
            ),
            (
                "student,homework,total\nalice,3,3\n",
                "its column `homework` is not a chapter of this workbook",
            ),
            (
                "student,ch01-availability,total\nalice,three,3\n",
                "`three` in column ch01-availability is not a number of points",
            ),
            (
                "student,ch01-availability,total,comment\nalice,3,3,good\n",
                "columns after `total`: comment",
            ),
            (
                "student,ch01-availability,total\nalice,3,3\nalice,2,2\n",
                "alice has two rows",
            ),
        ];
        for (text, needle) in cases {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(needle), "{text}: {error}");
            assert!(error.contains("it is not a grade file"), "{error}");
        }
        assert_eq!(parse("").unwrap(), Gradebook::default());
    }

    #[test]
    fn csv_fields_are_quoted_and_never_formulas() {
        assert_eq!(csv_field("alice"), "alice");
        assert_eq!(csv_field("smith, j"), "\"smith, j\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=1+1"), "'=1+1");
        assert_eq!(unquote("'=1+1"), "=1+1");
        assert_eq!(unquote("'quoted'"), "'quoted'");
    }

    #[test]
    fn without_an_out_of_row_the_points_come_from_the_workbook() {
        let book = parse("student,ch02-transfers,total\nalice,3,3\n").unwrap();
        assert_eq!(book.chapters[0].max, 99);
        assert_eq!(book.rows.len(), 1);
    }

    #[test]
    fn full_marks_are_read_per_chapter() {
        let book = book();
        let all = chapters();
        assert!(book.short_of_full_marks("alice", &all[..2]).is_empty());
        // bob: 20 of 21, and 0 of 10.
        assert_eq!(book.short_of_full_marks("bob", &all[..2]), &all[..2]);
        assert_eq!(book.short_of_full_marks("bob", &all[1..2]), &all[1..2]);
        // Never graded in a chapter, or not in the file at all: short of full marks.
        assert_eq!(
            book.short_of_full_marks("=evil", &all[..2]),
            ["ch02-transfers"]
        );
        assert_eq!(book.short_of_full_marks("carol", &all[..2]), &all[..2]);
        assert_eq!(book.short_of_full_marks("alice", &all), ["ch03-drop"]);
    }

    #[test]
    fn a_roster_fills_its_columns_and_names_who_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roster.csv");
        std::fs::write(
            &path,
            "\u{feff}folder,id,email,name,submitted\nalice,s1,a@uni.edu,\"Liddell, Alice\",\
             2026-12-02T10:00:00Z\n=evil,s3,e@uni.edu,Eve,\n",
        )
        .unwrap();
        let roster = Roster::read(&path).unwrap();
        let mut book = book();
        assert_eq!(book.apply_roster(&roster), ["bob"]);
        let text = book.to_csv(None);
        assert!(
            text.starts_with(
                "student,id,email,name,ch01-availability,ch02-transfers,total\n\
                 (out of),,,,21,10,31\nalice,s1,a@uni.edu,\"Liddell, Alice\",21,10,31\n\
                 bob,,,,20,0,20\n'=evil,s3,e@uni.edu,Eve,21,,21\n"
            ),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap().rows[0].roster[2], "Liddell, Alice");

        std::fs::write(&path, "student,id\nalice,1\n").unwrap();
        let error = format!("{:#}", Roster::read(&path).unwrap_err());
        assert!(error.contains("has no `folder` column"), "{error}");
        std::fs::write(&path, "folder,id\nalice,1\nalice,2\n").unwrap();
        let error = format!("{:#}", Roster::read(&path).unwrap_err());
        assert!(error.contains("alice is listed twice"), "{error}");
        std::fs::write(&path, "folder,submitted\nalice,yesterday\n").unwrap();
        let error = format!("{:#}", Roster::read(&path).unwrap_err());
        assert!(
            error.contains("line 2") && error.contains("is not a time"),
            "{error}"
        );
    }

    #[test]
    fn the_final_grade_weighs_chapters_and_takes_the_late_penalty() {
        let mut book = book();
        let mut policy = Policy::default();
        // ch01 weighs 3, ch02 1: bob has 20/21 and 0/10.
        policy.weights.insert("ch01-availability".into(), 3.0);
        let bob = book.rows[1].clone();
        let expected = 100.0 * (3.0 * 20.0 / 21.0) / 4.0;
        assert!((book.final_grade(&bob, &policy) - expected).abs() < 1e-9);
        policy.late = Some(policy::LatePolicy {
            due: policy::parse_time("2026-12-01T00:00:00Z").unwrap(),
            penalty_per_day: 10.0,
            times: [(
                "bob".to_string(),
                policy::parse_time("2026-12-02T06:00:00Z").unwrap(),
            )]
            .into(),
        });
        // Two days begun: 20% less.
        assert!((book.final_grade(&bob, &policy) - expected * 0.8).abs() < 1e-9);
        // alice has no time: counted on time, and named.
        assert_eq!(book.without_time(&policy), ["alice", "=evil"]);
        book.rows[0].submitted = Some(policy::parse_time("2026-12-20T00:00:00Z").unwrap());
        assert_eq!(book.final_grade(&book.rows[0], &policy), 0.0);
        let text = book.to_csv(Some(&policy));
        assert!(
            text.starts_with(
                "student,ch01-availability,ch02-transfers,total,days_late,final\n\
                 (out of),21,10,31,,100\nalice,21,10,31,19,0.00\nbob,20,0,20,2,57.14\n"
            ),
            "{text}"
        );
        let read = parse(&text).unwrap();
        assert!(read.policy_columns);
        assert_eq!(read.rows.len(), 3);
    }

    #[test]
    fn canvas_and_moodle_files_have_their_columns() {
        let mut book = book();
        let mut roster = Roster::default();
        roster.entries.insert(
            "alice".into(),
            (["s1".into(), "a@uni.edu".into(), "Alice L".into()], None),
        );
        book.apply_roster(&roster);
        assert_eq!(
            book.canvas(None),
            "Student,ID,SIS User ID,SIS Login ID,Section,ch01-availability,ch02-transfers\n\
             Points Possible,,,,,21,10\nAlice L,,s1,,,21,10\nbob,,,,,20,0\n'=evil,,,,,21,\n"
        );
        assert_eq!(
            book.moodle(Some(&Policy::default())),
            "ID number,Email address,Full name,ch01-availability,ch02-transfers,Workbook final (%)\n\
             s1,a@uni.edu,Alice L,21,10,100.00\n,,bob,20,0,47.62\n,,'=evil,21,,50.00\n"
        );
    }

    #[test]
    fn merged_describes_what_it_did() {
        let merged = Merged {
            updated: vec!["bob".into()],
            added: vec![],
            kept: 2,
        };
        assert_eq!(
            merged.describe(Path::new("grades.csv")),
            "grades.csv: updated 1 row(s) (bob), added 0 (none), kept 2 other(s) as they were"
        );
    }
}
