//! What `grade` writes: the terminal table, Gradescope's `results.json`, JUnit XML, and a
//! Markdown feedback report per student (the CSV is [`super::gradebook`]'s).

use super::similarity::{Author, Similar};
use super::{ChapterResult, ChapterState, GradeReport, Status, StudentResult, TestResult};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Characters kept of one test's output in Gradescope JSON, JUnit and feedback.
pub const MAX_OUTPUT_CHARS: usize = 6000;
/// Failed tests listed per chapter in the terminal table (the rest are counted).
const TABLE_FAILURES_SHOWN: usize = 5;
/// Characters of a failure's reason shown in the terminal table.
const TABLE_MESSAGE_CHARS: usize = 160;

/// Short column names for the chapters: `ch01` for `ch01-availability` when that is unique.
fn short_names(report: &GradeReport) -> Vec<String> {
    let prefixes: Vec<String> = report
        .chapters
        .iter()
        .map(|c| c.name().split('-').next().unwrap_or(c.name()).to_string())
        .collect();
    report
        .chapters
        .iter()
        .zip(&prefixes)
        .map(|(c, p)| {
            if prefixes.iter().filter(|q| *q == p).count() == 1 {
                p.clone()
            } else {
                c.name().to_string()
            }
        })
        .collect()
}

/// `score` of `max` as a percentage, rounded to a whole number, except that it never says 100%
/// for a score short of full marks nor 0% for a score above nothing (264 of 265: 99.6%).
fn percent(score: u32, max: u32) -> String {
    if max == 0 {
        return "—".to_string();
    }
    let exact = f64::from(score) * 100.0 / f64::from(max);
    let whole = exact.round();
    if whole == 100.0 && score < max {
        format!("{:.1}%", (exact * 10.0).floor() / 10.0)
    } else if whole == 0.0 && score > 0 {
        format!("{:.1}%", (exact * 10.0).ceil() / 10.0)
    } else {
        format!("{whole}%")
    }
}

/// The cell of a chapter in the table: its score, marked when it did not run.
fn cell(result: &ChapterResult) -> String {
    match &result.state {
        ChapterState::Graded => result.score().to_string(),
        ChapterState::DoesNotCompile(_) => "0 C".to_string(),
        ChapterState::NotSubmitted => "-".to_string(),
        ChapterState::NotGraded(_) => "0 !".to_string(),
    }
}

/// The terminal table: one row per student, one column per chapter, the total; then, per
/// student, what cost points and why.
pub fn table(report: &GradeReport) -> String {
    let short = short_names(report);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["student".to_string()];
    header.extend(short.iter().cloned());
    header.extend(["total".to_string(), String::new()]);
    rows.push(header);
    let mut max_row = vec!["(out of)".to_string()];
    max_row.extend(report.chapters.iter().map(|c| c.max_score().to_string()));
    let max_total: u32 = report.chapters.iter().map(|c| c.max_score()).sum();
    max_row.extend([max_total.to_string(), String::new()]);
    rows.push(max_row);
    for student in &report.students {
        let mut row = vec![student.student.clone()];
        row.extend(student.chapters.iter().map(cell));
        row.push(student.score().to_string());
        row.push(percent(student.score(), student.max_score()));
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Graded {} submission(s) with the official tests of {} chapter(s), in {:.1} s.\n",
        report.students.len(),
        report.chapters.len(),
        report.elapsed.as_secs_f64()
    );
    for row in &rows {
        let mut line = String::new();
        for (i, value) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(line, "{value:<w$}", w = widths[0]);
            } else {
                let _ = write!(line, "  {value:>w$}", w = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.push('\n');
    for (s, c) in short.iter().zip(&report.chapters) {
        if s != c.name() {
            let _ = writeln!(out, "{s} = {} ({})", c.name(), c.chapter.info.title);
        }
    }
    let _ = writeln!(
        out,
        "C: does not compile; -: not submitted; !: not graded (why below)"
    );
    for student in &report.students {
        out.push('\n');
        out.push_str(&student_details(student));
    }
    out
}

/// `--quiet`: one line per student: the score, and the chapters short of full marks.
pub fn quiet(report: &GradeReport) -> String {
    let short = short_names(report);
    let mut out = String::new();
    for student in &report.students {
        let (score, max) = (student.score(), student.max_score());
        let _ = write!(
            out,
            "{}: {score}/{max} ({})",
            student.student,
            percent(score, max)
        );
        if student.refused.is_some() {
            out.push_str(": not graded (see --feedback)");
        } else {
            let lacking: Vec<String> = student
                .chapters
                .iter()
                .zip(&short)
                .filter(|(c, _)| c.score() < c.max_score())
                .map(|(c, name)| format!("{name} {}", cell(c)))
                .collect();
            if !lacking.is_empty() {
                let _ = write!(out, "; short of full marks: {}", lacking.join(", "));
            }
        }
        out.push('\n');
    }
    out
}

/// The lines under the table for one student.
fn student_details(student: &StudentResult) -> String {
    let mut out = String::new();
    let (score, max) = (student.score(), student.max_score());
    if let Some(why) = &student.refused {
        let _ = writeln!(out, "{}: 0/{max}: {why}", student.student);
        return out;
    }
    if score == max {
        let _ = writeln!(out, "{}: {score}/{max}: every test passed", student.student);
    } else {
        let _ = writeln!(out, "{}: {score}/{max}", student.student);
    }
    for note in &student.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    for chapter in &student.chapters {
        let head = format!(
            "  {} {}/{}",
            chapter.chapter,
            chapter.score(),
            chapter.max_score()
        );
        match &chapter.state {
            ChapterState::NotSubmitted => {
                let _ = writeln!(out, "{head}: not submitted");
            }
            ChapterState::NotGraded(why) => {
                let _ = writeln!(out, "{head}: not graded: {why}");
            }
            ChapterState::DoesNotCompile(errors) => {
                let first = errors
                    .first()
                    .map(|e| first_lines(e, 2))
                    .unwrap_or_default();
                let _ = writeln!(out, "{head}: does not compile: {first}");
            }
            ChapterState::Graded => {
                let failed: Vec<&TestResult> = chapter
                    .tests
                    .iter()
                    .filter(|t| !t.status.passed())
                    .collect();
                if !failed.is_empty() {
                    let _ = writeln!(
                        out,
                        "{head}: {} of {} test(s) failed",
                        failed.len(),
                        chapter.tests.len()
                    );
                    for test in failed.iter().take(TABLE_FAILURES_SHOWN) {
                        let _ = writeln!(
                            out,
                            "    ✗ {}{} ({} pt{}): {}",
                            test.test.name,
                            if test.test.hidden { " [hidden]" } else { "" },
                            test.test.points,
                            if test.test.points == 1 { "" } else { "s" },
                            shorten(reason(test), TABLE_MESSAGE_CHARS)
                        );
                    }
                    if failed.len() > TABLE_FAILURES_SHOWN {
                        let _ = writeln!(
                            out,
                            "    ... and {} more (see --feedback)",
                            failed.len() - TABLE_FAILURES_SHOWN
                        );
                    }
                }
            }
        }
        for note in &chapter.notes {
            let _ = writeln!(out, "    note: {note}");
        }
        for review in &chapter.review {
            let _ = writeln!(out, "    review: {review}");
        }
    }
    out
}

/// Why a test did not pass, in one line: its message, or the status when there is none.
fn reason(test: &TestResult) -> &str {
    if test.message.is_empty() {
        test.status.word()
    } else {
        &test.message
    }
}

/// `text` cut to `max` characters, with an ellipsis.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The first `n` non-empty lines of `text`, joined with " / ".
fn first_lines(text: &str, n: usize) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(n)
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `text` cut to `max` characters, keeping its start and its end.
fn cut(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(count - max / 2).collect();
    format!(
        "{head}\n[... {} characters cut ...]\n{tail}",
        count - 2 * (max / 2)
    )
}

/// What a learner reads about one test: why it failed, the hint, what it printed.
fn test_output(chapter: &str, result: &TestResult, report: &GradeReport) -> String {
    if result.status.passed() {
        return String::new();
    }
    let mut text = reason(result).to_string();
    if let Some(hint) = hint_for(chapter, result, report) {
        let _ = write!(text, "\nHint: {hint}");
    }
    if !result.output.trim().is_empty() {
        let _ = write!(text, "\n\n{}", cut(&result.output, MAX_OUTPUT_CHARS));
    }
    text
}

/// The first hint of the exercise a test belongs to, from its chapter's `chapter.toml`.
fn hint_for<'a>(chapter: &str, result: &TestResult, report: &'a GradeReport) -> Option<&'a str> {
    let exercise = result.test.exercise.as_deref()?;
    report
        .chapters
        .iter()
        .find(|c| c.name() == chapter)
        .and_then(|c| c.first_hint(exercise))
}

/// One submission's Gradescope `results.json`: `score`, `max_score`, `output`, and `tests`, each
/// with `name` (`<chapter>::<test>`), `status` (`passed` / `failed`), `score`, `max_score` and
/// `output`. Hidden tests carry the report's [`super::HiddenVisibility`] (by default shown to
/// students, with their total score, only once grades are published).
pub fn gradescope(report: &GradeReport, student: &StudentResult) -> Value {
    let mut tests = Vec::new();
    let (mut score, mut max_score) = (0.0, 0.0);
    for chapter in &student.chapters {
        let factor = scale(report, chapter);
        score += f64::from(chapter.score()) * factor;
        max_score += f64::from(chapter.max_score()) * factor;
        for test in &chapter.tests {
            let mut entry = json!({
                "name": format!("{}::{}", chapter.chapter, test.test.name),
                "status": if test.status.passed() { "passed" } else { "failed" },
                "score": points(f64::from(test.score) * factor),
                "max_score": points(f64::from(test.test.points) * factor),
                "output": test_output(&chapter.chapter, test, report),
            });
            if test.test.hidden {
                entry["visibility"] = json!(report.hidden_visibility.word());
            }
            tests.push(entry);
        }
    }
    tests.extend(look_alike_entries(&report.similar, &student.student));
    let mut summary = format!(
        "{}: {}/{}",
        student.student,
        student.score(),
        student.max_score()
    );
    let _ = write!(summary, "\nSandbox: {}", report.sandbox);
    if let Some(why) = &student.refused {
        let _ = write!(summary, "\n{why}");
    }
    for note in &student.notes {
        let _ = write!(summary, "\nNote: {note}");
    }
    for chapter in &student.chapters {
        let _ = write!(
            summary,
            "\n{} ({}): {}/{}",
            chapter.chapter,
            chapter.title,
            chapter.score(),
            chapter.max_score()
        );
        match &chapter.state {
            ChapterState::Graded => {}
            ChapterState::NotSubmitted => summary.push_str(" — not submitted"),
            ChapterState::NotGraded(_) => summary.push_str(" — not graded"),
            ChapterState::DoesNotCompile(errors) => {
                summary.push_str(" — does not compile:\n");
                summary.push_str(&cut(&errors.join("\n\n"), MAX_OUTPUT_CHARS));
            }
        }
        for note in &chapter.notes {
            let _ = write!(summary, "\n  Note: {note}");
        }
    }
    let seconds: f64 = student
        .chapters
        .iter()
        .map(|c| c.duration.as_secs_f64())
        .sum();
    json!({
        "score": points(score),
        "max_score": points(max_score),
        "output": summary,
        "execution_time": (seconds * 10.0).round() / 10.0,
        "visibility": "visible",
        "tests": tests,
    })
}

/// The name of a chapter's look-alike entry in results.json (`<chapter>::` and this).
pub const LOOK_ALIKE: &str = "submissions that look alike (instructors only)";

/// `student`'s pairs of `similar` as results.json entries, one per chapter that has any: worth
/// nothing, and `hidden`, which Gradescope never shows students (and which, unlike the other
/// visibilities, leaves their total score shown). The flags `grade --class` puts in its summary,
/// on Gradescope for each submission; there, one submission at a time, the pairs are with the
/// reference solution, when the package carries it (`export gradescope --reference-solutions`).
pub fn look_alike_entries(similar: &[Similar], student: &str) -> Vec<Value> {
    let mut by_chapter: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for pair in similar {
        if pair.student == student || pair.other == Author::Student(student.to_string()) {
            by_chapter
                .entry(&pair.chapter)
                .or_default()
                .push(pair.describe());
        }
    }
    by_chapter
        .into_iter()
        .map(|(chapter, lines)| {
            json!({
                "name": format!("{chapter}::{LOOK_ALIKE}"),
                "status": "passed",
                "score": 0,
                "max_score": 0,
                "output": format!(
                    "{}\nNothing was deducted: a flagged pair is for you to read. Students never \
                     see this entry.",
                    lines.join("\n")
                ),
                "visibility": "hidden",
            })
        })
        .collect()
}

/// What a chapter's points are multiplied by on Gradescope: its `--points` over its own
/// points (1 when it has no `--points`).
fn scale(report: &GradeReport, chapter: &ChapterResult) -> f64 {
    match report.points.get(&chapter.chapter) {
        Some(points) if chapter.max_score() > 0 => {
            f64::from(*points) / f64::from(chapter.max_score())
        }
        _ => 1.0,
    }
}

/// Points as JSON: a whole number as an integer, else rounded to 4 decimals.
fn points(value: f64) -> Value {
    let rounded = (value * 10_000.0).round() / 10_000.0;
    if rounded.fract() == 0.0 && (0.0..9.0e15).contains(&rounded) {
        json!(rounded as u64)
    } else {
        json!(rounded)
    }
}

/// `--format json`: one submission's `results.json`; for several, an object mapping each
/// student's name to theirs.
pub fn gradescope_all(report: &GradeReport) -> Value {
    match report.students.as_slice() {
        [one] => gradescope(report, one),
        many => Value::Object(
            many.iter()
                .map(|s| (s.student.clone(), gradescope(report, s)))
                .collect(),
        ),
    }
}

/// `--gradescope PATH`: one submission's `results.json` at `PATH`; for several, `PATH` is a
/// folder with one `<student>.json` each.
pub fn write_gradescope(report: &GradeReport, path: &Path) -> Result<()> {
    let write = |path: &Path, value: &Value| -> Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let text = serde_json::to_string_pretty(value)?;
        // Written beside, then renamed over: a grader stopped while writing leaves the last
        // whole file.
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        std::fs::write(&partial, text + "\n")
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
    };
    match report.students.as_slice() {
        [one] => write(path, &gradescope(report, one)),
        many => {
            for student in many {
                write(
                    &path.join(format!("{}.json", student.file_name)),
                    &gradescope(report, student),
                )?;
            }
            Ok(())
        }
    }
}

/// Text made safe for XML 1.0: escaped, and without the control characters XML cannot hold.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: a `<testsuite>` per student and chapter (`<student>.<chapter>`), a `<testcase>`
/// per test; failures carry the reason and output, a chapter that could not be graded is an
/// `<error>`. Scores are `<property>`s of each suite.
pub fn junit(report: &GradeReport) -> String {
    let mut suites = String::new();
    let (mut all_tests, mut all_failures, mut all_errors) = (0, 0, 0);
    for student in &report.students {
        for chapter in &student.chapters {
            let suite = format!("{}.{}", student.student, chapter.chapter);
            let tests = chapter.tests.len();
            let errors = chapter
                .tests
                .iter()
                .filter(|t| t.status == Status::NotGraded)
                .count();
            let failures = chapter
                .tests
                .iter()
                .filter(|t| !t.status.passed() && t.status != Status::NotGraded)
                .count();
            all_tests += tests;
            all_failures += failures;
            all_errors += errors;
            let _ = writeln!(
                suites,
                "  <testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" \
                 skipped=\"0\" time=\"{:.3}\">",
                xml(&suite),
                chapter.duration.as_secs_f64()
            );
            suites.push_str("    <properties>\n");
            for (name, value) in [
                ("student", student.student.clone()),
                ("chapter", chapter.chapter.clone()),
                ("score", chapter.score().to_string()),
                ("max_score", chapter.max_score().to_string()),
            ] {
                let _ = writeln!(
                    suites,
                    "      <property name=\"{name}\" value=\"{}\"/>",
                    xml(&value)
                );
            }
            suites.push_str("    </properties>\n");
            for test in &chapter.tests {
                let _ = write!(
                    suites,
                    "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
                    xml(&test.test.name),
                    xml(&suite),
                    test.duration.as_secs_f64()
                );
                if test.status.passed() {
                    suites.push_str("/>\n");
                    continue;
                }
                let (element, kind) = match test.status {
                    Status::NotGraded => ("error", "not-graded"),
                    Status::TimedOut => ("failure", "timeout"),
                    Status::NotCompiled => ("failure", "compile-error"),
                    Status::NotSubmitted => ("failure", "not-submitted"),
                    _ => ("failure", "failed"),
                };
                let _ = writeln!(
                    suites,
                    ">\n      <{element} message=\"{}\" type=\"{kind}\">{}</{element}>\n    </testcase>",
                    xml(&test.message),
                    xml(&cut(&test.output, MAX_OUTPUT_CHARS))
                );
            }
            suites.push_str("  </testsuite>\n");
        }
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"workbook grade\" \
         tests=\"{all_tests}\" failures=\"{all_failures}\" errors=\"{all_errors}\" time=\"{:.3}\">\n\
         {suites}</testsuites>\n",
        report.elapsed.as_secs_f64()
    )
}

/// A Markdown code block holding `text`, fenced with more backticks than it contains.
fn code_block(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}text\n{}\n{fence}\n", text.trim_end())
}

/// Text for a Markdown table's cell or a link's text: `|`, `[`, `]`, `\`, `*`, `_`, `` ` ``,
/// `<` and `>` escaped, lines joined.
fn markdown_text(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '|' | '[' | ']' | '\\' | '*' | '_' | '`' | '<' | '>' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `index.md` beside the feedback reports: every student with their score and a link to their
/// report, in the order graded.
pub fn index(report: &GradeReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Feedback
"
    );
    let max: u32 = report.chapters.iter().map(|c| c.max_score()).sum();
    let _ = writeln!(
        out,
        "{} student(s), graded out of {max} point(s) in {}.
",
        report.students.len(),
        report
            .chapters
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str("| Student | Score | | Feedback |\n|---|---:|---:|---|\n");
    for student in &report.students {
        let (score, max) = (student.score(), student.max_score());
        // A link destination in `<...>` may hold spaces and any letter (CommonMark).
        let _ = writeln!(
            out,
            "| {} | {score} / {max} | {} | [{}.md](<{}.md>) |",
            markdown_text(&student.student),
            percent(score, max),
            markdown_text(&student.file_name),
            student.file_name
        );
    }
    out
}

/// A student's feedback in Markdown: their score per chapter, and for every test that cost
/// points, why, the hint to read, and what it printed.
pub fn feedback(report: &GradeReport, student: &StudentResult) -> String {
    let mut out = String::new();
    let (score, max) = (student.score(), student.max_score());
    let _ = writeln!(out, "# Feedback for {}\n", student.student);
    let _ = writeln!(
        out,
        "Score: **{score} / {max}** ({}), graded with the official tests: changes to `tests/` or \
         `Cargo.toml` are not used.\n",
        percent(score, max)
    );
    if let Some(why) = &student.refused {
        let _ = writeln!(out, "**Your submission was not graded.** {why}\n");
    }
    for note in &student.notes {
        let _ = writeln!(out, "- Note: {note}");
    }
    if !student.notes.is_empty() {
        out.push('\n');
    }
    out.push_str("| Chapter | Score | |\n|---|---:|---|\n");
    for chapter in &student.chapters {
        let state = match &chapter.state {
            ChapterState::Graded if chapter.score() == chapter.max_score() => "all tests pass",
            ChapterState::Graded if chapter.tests.iter().any(|t| t.status.passed()) => {
                "some tests fail"
            }
            ChapterState::Graded => "no test passes",
            ChapterState::DoesNotCompile(_) => "does not compile",
            ChapterState::NotSubmitted => "not submitted",
            ChapterState::NotGraded(_) => "not graded",
        };
        let _ = writeln!(
            out,
            "| {} — {} | {} / {} | {state} |",
            chapter.chapter,
            chapter.title,
            chapter.score(),
            chapter.max_score()
        );
    }
    for chapter in &student.chapters {
        let _ = writeln!(
            out,
            "\n## {} — {} ({} / {})\n",
            chapter.chapter,
            chapter.title,
            chapter.score(),
            chapter.max_score()
        );
        for note in &chapter.notes {
            let _ = writeln!(out, "- Note: {note}");
        }
        if !chapter.notes.is_empty() {
            out.push('\n');
        }
        match &chapter.state {
            ChapterState::NotSubmitted => {
                let _ = writeln!(
                    out,
                    "Not submitted: no `{}/src/` folder was found in your submission.",
                    chapter.chapter
                );
                continue;
            }
            ChapterState::NotGraded(why) => {
                let _ = writeln!(out, "Not graded: {why}");
                continue;
            }
            ChapterState::DoesNotCompile(errors) => {
                let _ = writeln!(
                    out,
                    "This chapter does not compile, so none of its tests could run. The \
                     compiler's first errors:\n"
                );
                out.push_str(&code_block(&cut(&errors.join("\n\n"), MAX_OUTPUT_CHARS)));
                let _ = writeln!(
                    out,
                    "\nRun `cargo test -p {}` to see them all.",
                    chapter.chapter
                );
                continue;
            }
            ChapterState::Graded => {}
        }
        let passed = chapter.tests.iter().filter(|t| t.status.passed()).count();
        let _ = writeln!(out, "{passed} of {} test(s) passed.", chapter.tests.len());
        if passed == 0 {
            out.push_str(&none_passed(report, chapter));
        } else {
            for test in chapter.tests.iter().filter(|t| !t.status.passed()) {
                out.push_str(&failed_test(report, &chapter.chapter, test));
            }
        }
    }
    out
}

/// "2 points", "1 point".
fn points_word(points: u32) -> String {
    format!("{points} point{}", if points == 1 { "" } else { "s" })
}

/// What a test is, after its name: its exercise, or that it is hidden.
fn test_kind(test: &TestResult) -> String {
    match (&test.test.exercise, test.test.hidden) {
        (_, true) => " — a hidden test".to_string(),
        (Some(exercise), _) => format!(" — exercise `{exercise}`"),
        (None, false) => String::new(),
    }
}

/// What the test printed, folded, when it printed anything.
fn printed(summary: &str, test: &TestResult) -> String {
    if test.output.trim().is_empty() {
        return String::new();
    }
    format!(
        "\n<details><summary>{summary}</summary>\n\n{}\n</details>\n",
        code_block(&cut(&test.output, MAX_OUTPUT_CHARS))
    )
}

/// One failed test in a feedback report: why, the hint to read, what it printed.
fn failed_test(report: &GradeReport, chapter: &str, test: &TestResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### ✗ `{}` (0 / {}){}\n",
        test.test.name,
        points_word(test.test.points),
        test_kind(test)
    );
    let _ = writeln!(out, "- Why: {}", reason(test));
    if let Some(hint) = hint_for(chapter, test, report) {
        let _ = writeln!(out, "- Hint: {hint}");
        if let Some(exercise) = &test.test.exercise {
            let _ = writeln!(out, "- More hints: `workbook hint {chapter} {exercise}`");
        }
    }
    out.push_str(&printed("What the test printed", test));
    out
}

/// A reason without the note of the seed a randomized test ran with (` (seed N: ... replays
/// it)`, which differs from test to test), and that note.
fn without_seed(reason: &str) -> (&str, Option<&str>) {
    match reason.rfind(" (seed ") {
        Some(at) if reason.ends_with(" replays it)") => {
            (&reason[..at], Some(&reason[at + 2..reason.len() - 1]))
        }
        _ => (reason, None),
    }
}

/// A chapter where no test passed (an untouched stub), in few lines: the tests that failed for
/// the same reason together, the reason once, the hint of each exercise once and each test in a
/// line; then what the first test printed, and where to see the others' output.
fn none_passed(report: &GradeReport, chapter: &ChapterResult) -> String {
    let mut groups: Vec<(&str, Vec<&TestResult>)> = Vec::new();
    for test in &chapter.tests {
        let (why, _) = without_seed(reason(test));
        match groups.iter_mut().find(|(other, _)| *other == why) {
            Some((_, tests)) => tests.push(test),
            None => groups.push((why, vec![test])),
        }
    }
    let mut out = String::new();
    for (why, tests) in &groups {
        let points: u32 = tests.iter().map(|t| t.test.points).sum();
        let _ = writeln!(
            out,
            "\n### ✗ {} test{} (0 / {})\n",
            tests.len(),
            if tests.len() == 1 { "" } else { "s" },
            points_word(points)
        );
        let _ = writeln!(out, "- Why: {why}");
        let mut exercises: Vec<&str> = Vec::new();
        for test in tests {
            if let Some(exercise) = test.test.exercise.as_deref()
                && !exercises.contains(&exercise)
            {
                exercises.push(exercise);
            }
        }
        for exercise in exercises {
            let Some(test) = tests
                .iter()
                .find(|t| t.test.exercise.as_deref() == Some(exercise))
            else {
                continue;
            };
            if let Some(hint) = hint_for(&chapter.chapter, test, report) {
                let _ = writeln!(out, "- Hint for `{exercise}`: {hint}");
                let _ = writeln!(
                    out,
                    "- More hints: `workbook hint {} {exercise}`",
                    chapter.chapter
                );
            }
        }
        out.push_str("- The tests:\n");
        for test in tests {
            let _ = write!(
                out,
                "  - `{}` (0 / {}){}",
                test.test.name,
                points_word(test.test.points),
                test_kind(test)
            );
            match without_seed(reason(test)) {
                (_, Some(seed)) => {
                    let _ = writeln!(out, " ({seed})");
                }
                (_, None) => out.push('\n'),
            }
        }
    }
    if let Some(first) = chapter.tests.iter().find(|t| !t.output.trim().is_empty()) {
        out.push_str(&printed(
            &format!(
                "What `{}` printed (every test's output: `workbook check {}`)",
                first.test.name, chapter.chapter
            ),
            first,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_markup_and_drops_control_characters() {
        assert_eq!(
            xml("a<b>&\"c'\n\u{1b}[0m"),
            "a&lt;b&gt;&amp;&quot;c&apos;&#10;\\u{1b}[0m"
        );
    }

    #[test]
    fn a_percentage_is_100_only_for_full_marks_and_0_only_for_nothing() {
        assert_eq!(percent(264, 265), "99.6%");
        assert_eq!(percent(265, 265), "100%");
        assert_eq!(percent(24, 53), "45%");
        assert_eq!(percent(1, 2000), "0.1%");
        assert_eq!(percent(0, 265), "0%");
        assert_eq!(percent(0, 0), "—");
    }

    #[test]
    fn a_student_s_look_alikes_are_one_hidden_entry_per_chapter_worth_nothing() {
        let pair = |chapter: &str, student: &str, other: Author, similarity: f64| Similar {
            chapter: chapter.to_string(),
            student: student.to_string(),
            other,
            similarity,
        };
        let similar = [
            pair("ch01-x", "alice", Author::Reference, 1.0),
            pair("ch01-x", "alice", Author::Student("bob".into()), 0.92),
            pair("ch02-y", "bob", Author::Student("carol".into()), 0.85),
        ];
        let alice = look_alike_entries(&similar, "alice");
        assert_eq!(
            alice,
            [json!({
                "name": "ch01-x::submissions that look alike (instructors only)",
                "status": "passed",
                "score": 0,
                "max_score": 0,
                "output": "ch01-x: alice and the reference solution: 100% alike\n\
                           ch01-x: alice and bob: 92% alike\n\
                           Nothing was deducted: a flagged pair is for you to read. Students \
                           never see this entry.",
                "visibility": "hidden",
            })]
        );
        // bob is the other of alice's pair in ch01-x, and one of ch02-y's.
        let bob = look_alike_entries(&similar, "bob");
        assert_eq!(bob.len(), 2);
        assert_eq!(bob[1]["output"].as_str().unwrap().lines().count(), 2);
        assert!(look_alike_entries(&similar, "dave").is_empty());
    }

    #[test]
    fn points_are_integers_when_whole() {
        assert_eq!(points(16.0), json!(16));
        assert_eq!(points(10.0 * 2.0 / 3.0), json!(6.6667));
        assert_eq!(points(0.0), json!(0));
    }

    #[test]
    fn markdown_text_cannot_break_a_table_or_a_link() {
        assert_eq!(markdown_text("a|b [c](d) <e>"), "a\\|b \\[c\\](d) \\<e\\>");
        assert_eq!(markdown_text("a_reference"), "a\\_reference");
    }

    #[test]
    fn code_blocks_outgrow_the_backticks_inside() {
        assert_eq!(code_block("a ``` b"), "````text\na ``` b\n````\n");
        assert_eq!(code_block("plain"), "```text\nplain\n```\n");
    }

    #[test]
    fn a_reason_is_told_apart_from_its_seed() {
        assert_eq!(
            without_seed("not yet implemented: x (seed 13: GPUMEM_TEST_SEED=13 replays it)"),
            (
                "not yet implemented: x",
                Some("seed 13: GPUMEM_TEST_SEED=13 replays it")
            )
        );
        assert_eq!(
            without_seed("a (seed of doubt)"),
            ("a (seed of doubt)", None)
        );
        assert_eq!(
            without_seed("not yet implemented"),
            ("not yet implemented", None)
        );
    }

    #[test]
    fn long_output_keeps_its_start_and_end() {
        let text = "a".repeat(50) + &"b".repeat(50);
        let kept = cut(&text, 20);
        assert!(kept.starts_with("aaaaaaaaaa\n[... 80 characters cut ...]\n"));
        assert!(kept.ends_with("bbbbbbbbbb"));
    }
}
