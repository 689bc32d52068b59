//! The workbook's own mdBook preprocessor, run by `workbook book` after mdBook's includes:
//! every exercise section of a chapter page ends with its `workbook check` and `hint` commands
//! (with plain `cargo test -p` as the alternative), and every solution page opens behind a gate.
//!
//! A chapter page also gets its self-check questions: `book/quizzes/<chapter>.toml`, written in
//! mdbook-quiz 0.5.0's format (`[[questions]]` of `type = "MultipleChoice"` with `prompt.prompt`,
//! `prompt.distractors`, `answer.answer` and `context`), is shown before the page's
//! "## Exercises" as buttons that answer at once, or for several right answers as checkboxes
//! and a button that checks them, and then explain (theme/workbook.js). When
//! `book.toml` has a `[preprocessor.quiz]` table, mdbook-quiz shows them instead: the page gets
//! its `{{#quiz ...}}` line there, and `workbook book` runs this preprocessor before mdbook-quiz.
//!
//! A chapter page is `<chapter>.md` where `exercises/<chapter>/chapter.toml` exists; its
//! solution page is `<chapter>-solution.md`. New chapters get all of this without writing
//! anything but their quiz file.

use crate::course::chapter::ChapterInfo;
use anyhow::{Context, Result, bail};
use mdbook_preprocessor::book::{Book, BookItem};
use mdbook_preprocessor::{Preprocessor, PreprocessorContext};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// How a learner's command starts in the book, as the README writes it.
pub const CLI: &str = "cargo run -p workbook --";

/// The suffix of a solution page's name: `<chapter>-solution.md`.
pub const SOLUTION_SUFFIX: &str = "-solution";

/// The preprocessor.
pub struct WorkbookPages {
    /// Where each chapter's `chapter.toml` is: `exercises/<chapter>/chapter.toml`.
    pub exercises: PathBuf,
    /// Where each chapter's questions are, if it has some: `book/quizzes/<chapter>.toml`.
    pub quizzes: PathBuf,
    /// Where each chapter's reference solution is: `solutions/<chapter>`. A solution page whose
    /// chapter has none (the student edition's) shows no solution, so it is an ordinary page.
    pub solutions: PathBuf,
    /// The catalogue the quizzes are shown in (see [`crate::book::i18n`]); `None`: English.
    pub catalog: Option<std::sync::Arc<polib::catalog::Catalog>>,
}

/// What a page of the book is to the workbook.
#[derive(Debug, PartialEq)]
pub enum PageKind {
    /// A chapter's page, with its exercise names in order.
    Chapter(String, Vec<String>),
    /// A chapter's solution page.
    Solution(String),
    /// Anything else (introduction, appendices).
    Other,
}

impl WorkbookPages {
    /// What the page at `path` (relative to `book/src`) is.
    pub fn kind(&self, path: &Path) -> Result<PageKind> {
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            return Ok(PageKind::Other);
        };
        if let Some(chapter) = stem.strip_suffix(SOLUTION_SUFFIX)
            && self.exercises.join(chapter).join("chapter.toml").is_file()
        {
            if !self.solutions.join(chapter).is_dir() {
                return Ok(PageKind::Other);
            }
            return Ok(PageKind::Solution(chapter.to_string()));
        }
        let toml = self.exercises.join(stem).join("chapter.toml");
        if !toml.is_file() {
            return Ok(PageKind::Other);
        }
        let info = ChapterInfo::load(&toml)?;
        Ok(PageKind::Chapter(
            stem.to_string(),
            info.exercises.into_iter().map(|e| e.name).collect(),
        ))
    }
}

impl Preprocessor for WorkbookPages {
    fn name(&self) -> &str {
        "workbook-pages"
    }

    fn run(&self, ctx: &PreprocessorContext, mut book: Book) -> Result<Book> {
        let by_mdbook_quiz = ctx.config.contains_key(MDBOOK_QUIZ);
        let src = ctx.root.join(&ctx.config.book.src);
        let mut errors = Vec::new();
        book.for_each_mut(|item| {
            let BookItem::Chapter(page) = item else {
                return;
            };
            let Some(path) = page.path.clone() else {
                return;
            };
            let done = match self.kind(&path) {
                Ok(PageKind::Chapter(chapter, exercises)) => {
                    check_answers(&page.content, &chapter, &exercises)
                        .and_then(|()| with_cli_commands(&page.content, &chapter, &exercises))
                        .and_then(|content| {
                            let file = self.quizzes.join(format!("{chapter}.toml"));
                            if !file.is_file() {
                                return Ok(content);
                            }
                            let quiz = Quiz::load(&file).map_err(|e| format!("{e:#}"))?;
                            let shown = if by_mdbook_quiz {
                                let page_dir = src.join(&path);
                                let page_dir = page_dir.parent().unwrap_or(&src);
                                format!("{{{{#quiz {}}}}}\n\n", relative(page_dir, &file))
                            } else {
                                let tr = |text: &str| match &self.catalog {
                                    Some(catalog) => {
                                        crate::book::i18n::lookup(catalog, text).to_string()
                                    }
                                    None => text.to_string(),
                                };
                                quiz.render_in(&chapter, &tr)
                                    .map_err(|e| format!("{}: {e:#}", file.display()))?
                            };
                            Ok(with_quiz(&content, &shown))
                        })
                }
                Ok(PageKind::Solution(chapter)) => Ok(behind_the_gate(&page.content, &chapter)),
                Ok(PageKind::Other) => return,
                Err(e) => Err(format!("{e:#}")),
            };
            match done {
                Ok(content) => page.content = content,
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        });
        if !errors.is_empty() {
            bail!("{}", errors.join("\n  "));
        }
        Ok(book)
    }
}

/// The key of mdbook-quiz's table in `book.toml`: when it is there, mdbook-quiz shows the
/// questions.
pub const MDBOOK_QUIZ: &str = "preprocessor.quiz";

/// The path from the directory `from` to `to`, with `/` between its parts, found from their
/// parts alone (both are under the book's directory).
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let up = std::iter::repeat_n("..".to_string(), from.len() - common);
    let down = to[common..]
        .iter()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    up.chain(down).collect::<Vec<_>>().join("/")
}

/// A heading line outside code: its level and its text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    let text = line[level..].strip_prefix(' ')?;
    (1..=6).contains(&level).then_some((level, text.trim()))
}

/// The number N of a heading "Exercise N" or "Exercise N: ...".
fn exercise_number(text: &str) -> Option<usize> {
    let rest = text.strip_prefix("Exercise ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[digits.len()..];
    if !(after.is_empty() || after.starts_with(':')) {
        return None;
    }
    digits.parse().ok()
}

/// The `cargo test` command of a line "Check it with: `cargo test -p ...`".
fn cargo_test_command(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix("Check it with:")?.trim();
    let command = rest.strip_prefix('`')?.strip_suffix('`')?;
    command.starts_with("cargo test").then_some(command)
}

/// Whether `line` is only a link to a solutions page (`[The solutions, explained](ch03-…-solution.md)`).
fn is_solutions_link(line: &str) -> bool {
    let line = line.trim();
    line.starts_with('[')
        && line.ends_with("-solution.md)")
        && line
            .find("](")
            .is_some_and(|at| !line[at + 2..].contains(' '))
}

/// The block that ends an exercise section.
fn commands_block(chapter: &str, exercise: &str, cargo_test: &str) -> String {
    format!(
        "<div class=\"wb-commands\" data-chapter=\"{chapter}\" data-exercise=\"{exercise}\">\n\n\
         **Check it** with the workbook, and ask for the next hint when a test fails:\n\n\
         ```console\n\
         $ {CLI} check {chapter}\n\
         $ {CLI} hint {chapter} {exercise}\n\
         ```\n\n\
         Or with plain cargo: `{cargo_test}`\n\n\
         </div>\n"
    )
}

/// The value of the attribute `name` in an HTML tag's text (`name="value"`).
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// Checks every answer reveal of a chapter page (`<details class="wb-answer" data-chapter=…
/// data-exercise=…>`, opened by the served book once that exercise passes): it names this
/// chapter and one of its exercises.
pub fn check_answers(
    content: &str,
    chapter: &str,
    exercises: &[String],
) -> std::result::Result<(), String> {
    for (n, line) in content.lines().enumerate() {
        let line = line.trim();
        if !(line.starts_with("<details") && line.contains("wb-answer")) {
            continue;
        }
        let named = attribute(line, "data-chapter");
        let exercise = attribute(line, "data-exercise");
        if named != Some(chapter) || !exercise.is_some_and(|e| exercises.iter().any(|x| x == e)) {
            return Err(format!(
                "line {}: an answer reveal needs data-chapter=\"{chapter}\" and a data-exercise \
                 of exercises/{chapter}/chapter.toml ({}); it has {line}",
                n + 1,
                exercises.join(", ")
            ));
        }
    }
    Ok(())
}

/// `content` with every "Exercise N" section ending in its commands, and the page's own
/// "Check it with: `cargo test ...`" lines folded into them. Errors name an exercise heading that
/// `chapter.toml` does not have.
pub fn with_cli_commands(
    content: &str,
    chapter: &str,
    exercises: &[String],
) -> std::result::Result<String, String> {
    struct Section {
        exercise: String,
        cargo_test: Option<String>,
    }
    let mut out: Vec<String> = Vec::new();
    let mut fence: Option<String> = None;
    let mut open: Option<Section> = None;
    let close = |out: &mut Vec<String>, section: Section| {
        let mut trailing = 0;
        while out.last().is_some_and(|l| l.trim().is_empty()) {
            out.pop();
            trailing += 1;
        }
        // The page's last line, a link to the solutions, stays below the last exercise's box.
        let solutions_link = out
            .last()
            .filter(|l| is_solutions_link(l))
            .cloned()
            .inspect(|_| {
                out.pop();
                while out.last().is_some_and(|l| l.trim().is_empty()) {
                    out.pop();
                }
            });
        let cargo_test = section
            .cargo_test
            .unwrap_or_else(|| format!("cargo test -p {chapter}"));
        out.push(String::new());
        out.push(commands_block(chapter, &section.exercise, &cargo_test));
        if let Some(link) = solutions_link {
            out.push(String::new());
            out.push(link);
        }
        out.extend(std::iter::repeat_n(String::new(), trailing.max(1)));
    };
    for line in content.lines() {
        let trimmed = line.trim_start();
        if let Some(marker) = &fence {
            if trimmed.starts_with(marker.as_str()) {
                fence = None;
            }
            out.push(line.to_string());
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(trimmed[..3].to_string());
            out.push(line.to_string());
            continue;
        }
        if let Some((level, text)) = heading(line)
            && level <= 3
        {
            if let Some(section) = open.take() {
                close(&mut out, section);
            }
            if level == 3
                && let Some(n) = exercise_number(text)
            {
                let Some(exercise) = n.checked_sub(1).and_then(|i| exercises.get(i)) else {
                    return Err(format!(
                        "the heading \"{text}\" has no exercise {n} in \
                         exercises/{chapter}/chapter.toml, which lists {} ({})",
                        exercises.len(),
                        exercises.join(", ")
                    ));
                };
                open = Some(Section {
                    exercise: exercise.clone(),
                    cargo_test: None,
                });
            }
            out.push(line.to_string());
            continue;
        }
        if let Some(section) = &mut open
            && let Some(command) = cargo_test_command(line)
        {
            section.cargo_test = Some(command.to_string());
            continue;
        }
        out.push(line.to_string());
    }
    if let Some(section) = open.take() {
        close(&mut out, section);
    }
    let mut text = out.join("\n");
    text.push('\n');
    Ok(text)
}

/// A solution page behind its gate: the page's title, a warning with the chapter's commands and
/// a button, then the solution in a block the book's script shows only after the button.
pub fn behind_the_gate(content: &str, chapter: &str) -> String {
    let (title, body) = match content.split_once('\n') {
        Some((first, rest)) if heading(first).is_some_and(|(level, _)| level == 1) => (first, rest),
        _ => ("", content),
    };
    format!(
        "{title}\n\n\
         <div class=\"wb-gate\" data-chapter=\"{chapter}\">\n\n\
         **This page shows the answers.** Solve the exercises of [the chapter]({chapter}.md) \
         first: a failing test teaches more than a finished solution. To see how far you are and \
         what fails:\n\n\
         ```console\n\
         $ {CLI} check {chapter}\n\
         $ {CLI} hint {chapter}\n\
         ```\n\n\
         Once every test passes, `{CLI} solution {chapter}` shows the reference code in your \
         terminal, and this page explains why it is right.\n\n\
         <button type=\"button\" class=\"wb-gate-open\">I have tried: show the solution</button>\n\n\
         </div>\n\n\
         <div class=\"wb-gated\">\n\n\
         {body}\n\n\
         </div>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reveal_names_its_chapter_and_one_of_its_exercises() {
        let exercises = names(&["budget", "predict"]);
        let good =
            "<details class=\"wb-answer\" data-chapter=\"ch10-x\" data-exercise=\"predict\">";
        assert_eq!(check_answers(good, "ch10-x", &exercises), Ok(()));
        let wrong = good.replace("predict\"", "predcit\"");
        let err = check_answers(&format!("text\n{wrong}"), "ch10-x", &exercises).unwrap_err();
        assert!(
            err.starts_with("line 2: an answer reveal needs data-chapter=\"ch10-x\""),
            "{err}"
        );
        assert!(err.contains("(budget, predict)"), "{err}");
        let other = good.replace("ch10-x", "ch09-y");
        assert!(check_answers(&other, "ch10-x", &exercises).is_err());
        assert_eq!(
            check_answers("<details>\n<summary>Hint 1</summary>", "ch10-x", &exercises),
            Ok(())
        );
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_exercise_section_ends_with_its_check_and_hint_commands() {
        let page = "# 1. Ch\n\nIntro.\n\n## Exercises\n\n### Exercise 1: a\n\nDo a.\n\n\
                    Check it with: `cargo test -p ch01-x a_`\n\n### Exercise 2: b\n\n\
                    ```python\n# not a heading\n```\n\nDo b.\n\n## After\n\nEnd.\n";
        let out = with_cli_commands(page, "ch01-x", &names(&["alpha", "beta"])).unwrap();
        let a = out.find("hint ch01-x alpha").expect("exercise 1's hint");
        let b = out.find("hint ch01-x beta").expect("exercise 2's hint");
        assert!(a < out.find("### Exercise 2").unwrap() && b < out.find("## After").unwrap());
        assert!(out.contains("Or with plain cargo: `cargo test -p ch01-x a_`"));
        assert!(out.contains("Or with plain cargo: `cargo test -p ch01-x`"));
        assert!(!out.contains("Check it with:"));
        assert!(out.contains("# not a heading"));
        assert_eq!(out.matches("check ch01-x").count(), 2);
    }

    #[test]
    fn the_last_exercises_box_sits_above_the_link_to_the_solutions() {
        let page = "### Exercise 1: a\n\nDo a.\n\nCheck it with: `cargo test -p ch01-x a_`\n\n\
                    [The solutions, explained](ch01-x-solution.md)\n";
        let out = with_cli_commands(page, "ch01-x", &names(&["alpha"])).unwrap();
        let hint = out.find("hint ch01-x alpha").expect("the box");
        let link = out.find("[The solutions, explained]").expect("the link");
        assert!(hint < link, "{out}");
        assert!(out.trim_end().ends_with("(ch01-x-solution.md)"), "{out}");
        assert!(!is_solutions_link(
            "See [the solutions](ch01-x-solution.md) for more."
        ));
    }

    #[test]
    fn an_exercise_heading_without_a_chapter_toml_entry_is_an_error() {
        let page = "### Exercise 3: c\n\ntext\n";
        let err = with_cli_commands(page, "ch01-x", &names(&["a", "b"])).unwrap_err();
        assert!(
            err.contains("Exercise 3") && err.contains("lists 2"),
            "{err}"
        );
    }

    #[test]
    fn a_solution_page_keeps_its_title_and_hides_the_rest_behind_the_gate() {
        let out = behind_the_gate("# Solution: X\n\nsecret code\n", "ch01-x");
        let gate = out.find("wb-gate\"").unwrap();
        assert!(out.starts_with("# Solution: X\n"));
        assert!(out.find("wb-gated").unwrap() > gate);
        assert!(out.find("secret code").unwrap() > out.find("wb-gated").unwrap());
        assert!(out.contains("cargo run -p workbook -- check ch01-x"));
    }
}

/// A chapter's self-check questions in mdbook-quiz 0.5.0's format (its crate
/// `mdbook-quiz-schema`): every field that format has is read, and a field it does not have is an
/// error (a misspelt key is not silently dropped).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quiz {
    /// The questions, in order.
    pub questions: Vec<Question>,
    /// The shared text of each multipart group, by key (not shown by the built-in renderer).
    pub multipart: Option<BTreeMap<String, String>>,
}

/// One question: its `type`, with that type's prompt and answer.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum Question {
    /// The reader picks the right answer among wrong ones.
    MultipleChoice(Fields<ChoicePrompt, ChoiceAnswer>),
    /// The reader types the answer (mdbook-quiz only).
    ShortAnswer(Fields<ShortAnswerPrompt, ShortAnswerAnswer>),
    /// The reader says whether a Rust program compiles and what it prints (mdbook-quiz only).
    Tracing(Fields<TracingPrompt, TracingAnswer>),
}

/// The fields every type of question has.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Fields<P, A> {
    /// mdbook-quiz's id of the question (it writes one into every question it reads); unused here.
    pub id: Option<String>,
    /// The question's multipart group: a key of [`Quiz::multipart`].
    pub multipart: Option<String>,
    /// The question.
    pub prompt: P,
    /// The right answer.
    pub answer: A,
    /// The explanation shown once the question is answered (Markdown); the workbook requires it.
    pub context: Option<String>,
    /// Whether mdbook-quiz asks the reader to justify the answer in writing.
    pub prompt_explanation: Option<bool>,
}

/// A multiple-choice question's prompt.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChoicePrompt {
    /// The question (inline Markdown: `code` and plain text).
    pub prompt: String,
    /// The wrong answers.
    pub distractors: Vec<String>,
    /// Where the right answer goes among the choices (0 = first), instead of a place of our choosing.
    pub answer_index: Option<usize>,
    /// Whether the choices are shown sorted by their text.
    pub sort_answers: Option<bool>,
}

/// A multiple-choice question's answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoiceAnswer {
    /// The right answer, or a list of right answers.
    pub answer: Answers,
}

/// One right answer, or a list of them ("pick all that apply").
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Answers {
    /// The right answer.
    One(String),
    /// Every right answer.
    All(Vec<String>),
}

/// A short-answer question's prompt.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShortAnswerPrompt {
    /// The question.
    pub prompt: String,
    /// How the answer is typed.
    pub response: Option<ResponseFormat>,
}

/// How a short answer is typed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseFormat {
    /// One line.
    Short,
    /// Several lines.
    Long,
    /// Code, in an editor.
    Code,
}

/// A short-answer question's answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShortAnswerAnswer {
    /// The right answer.
    pub answer: String,
    /// Other right answers.
    pub alternatives: Option<Vec<String>>,
}

/// A tracing question's prompt.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingPrompt {
    /// The Rust program to trace.
    pub program: String,
}

/// A tracing question's answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TracingAnswer {
    /// Whether the program compiles.
    pub does_compile: bool,
    /// What it prints, when it compiles.
    pub stdout: Option<String>,
    /// The line of the error, when it does not.
    pub line_number: Option<usize>,
}

/// The fewest and the most questions a chapter's quiz may have.
pub const QUESTIONS: std::ops::RangeInclusive<usize> = 3..=5;

impl Question {
    /// The fields every type has.
    fn common(&self) -> (&Option<String>, &Option<String>, &Option<String>) {
        match self {
            Question::MultipleChoice(q) => (&q.id, &q.multipart, &q.context),
            Question::ShortAnswer(q) => (&q.id, &q.multipart, &q.context),
            Question::Tracing(q) => (&q.id, &q.multipart, &q.context),
        }
    }
}

impl Quiz {
    /// Reads and checks a quiz file (see [`Quiz::parse`]); errors name the file.
    pub fn load(path: &Path) -> Result<Quiz> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Quiz::parse(&text).with_context(|| format!("{} is not a usable quiz", path.display()))
    }

    /// Parses and checks the text of a quiz file: 3 to 5 questions, each with a `context`, no two
    /// with one id, and what mdbook-quiz itself checks of a multiple-choice question (wrong
    /// answers, a right one, `prompt.answerIndex` among the choices and not with
    /// `prompt.sortAnswers`) and of a multipart key. Errors name the question by its number.
    pub fn parse(text: &str) -> Result<Quiz> {
        let quiz: Quiz = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        if !QUESTIONS.contains(&quiz.questions.len()) {
            bail!(
                "it has {} questions; a chapter asks {} to {}",
                quiz.questions.len(),
                QUESTIONS.start(),
                QUESTIONS.end()
            );
        }
        let mut ids = BTreeMap::new();
        for (i, q) in quiz.questions.iter().enumerate() {
            let n = i + 1;
            let (id, multipart, context) = q.common();
            if context.as_deref().is_none_or(|c| c.trim().is_empty()) {
                bail!("question {n} has no context: every question explains its answer");
            }
            if let Some(id) = id
                && let Some(first) = ids.insert(id.as_str(), n)
            {
                bail!("questions {first} and {n} have the same id {id:?}");
            }
            if let Some(key) = multipart
                && !quiz.multipart.as_ref().is_some_and(|m| m.contains_key(key))
            {
                bail!("question {n} is in multipart group {key:?}, which [multipart] lacks");
            }
            let Question::MultipleChoice(q) = q else {
                continue;
            };
            if q.prompt.distractors.is_empty() {
                bail!("question {n} has no wrong answers (prompt.distractors)");
            }
            if matches!(&q.answer.answer, Answers::All(all) if all.is_empty()) {
                bail!("question {n} has an empty list of right answers (answer.answer)");
            }
            if let Some(at) = q.prompt.answer_index {
                if at > q.prompt.distractors.len() {
                    bail!(
                        "question {n}: prompt.answerIndex = {at}, but there are only {} choices",
                        q.prompt.distractors.len() + 1
                    );
                }
                if q.prompt.sort_answers.is_some() {
                    bail!("question {n} has both prompt.answerIndex and prompt.sortAnswers");
                }
            }
        }
        Ok(quiz)
    }

    /// The questions as the built-in renderer shows them: a heading, then per question its
    /// prompt, its choices and its explanation in a closed `<details>` (theme/workbook.js hides
    /// it until the question is answered; without scripting it opens on a click). A question
    /// with one right answer shows its choices as buttons; one with several ("pick all that
    /// apply") as checkboxes and a button that checks them, hidden until the script shows it.
    /// The right answers go at `prompt.answerIndex` (together, as mdbook-quiz puts them), or
    /// with `prompt.sortAnswers` the choices are sorted, or else each goes at a place that
    /// depends on the prompt. Errors name a question of a kind it cannot show (mdbook-quiz can:
    /// see the instructors' guide).
    pub fn render(&self, chapter: &str) -> Result<String> {
        self.render_in(chapter, &|text: &str| text.to_string())
    }

    /// Every text of the quiz a reader reads, for the catalogue: each question's prompt, its
    /// choices, its right answers and its explanation (the renderer's own lines are
    /// [`QUIZ_LINES`]).
    pub fn messages(&self) -> Vec<String> {
        let mut out = Vec::new();
        for q in &self.questions {
            let Question::MultipleChoice(q) = q else {
                continue;
            };
            out.push(q.prompt.prompt.clone());
            out.extend(q.prompt.distractors.iter().cloned());
            match &q.answer.answer {
                Answers::One(answer) => out.push(answer.clone()),
                Answers::All(all) => out.extend(all.iter().cloned()),
            }
            out.extend(q.context.as_deref().map(|c| c.trim().to_string()));
        }
        out
    }

    /// [`Quiz::render`] with every text a reader reads passed through `tr` (its translation;
    /// `{0}` in a line of [`QUIZ_LINES`] stands for a number or an answer).
    pub fn render_in(&self, chapter: &str, tr: &dyn Fn(&str) -> String) -> Result<String> {
        const ONLY: &str = "the built-in renderer cannot show it \
                            (mdbook-quiz can: see \"Self-check questions\" in \
                            book/src/instructors.md)";
        let mut out = format!(
            "{QUIZ_START}\n\n## {}\n\n{}\n\n",
            tr(QUIZ_LINES[0]),
            tr(QUIZ_LINES[1])
        );
        for (i, q) in self.questions.iter().enumerate() {
            let n = i + 1;
            let q = match q {
                Question::MultipleChoice(q) => q,
                Question::ShortAnswer(_) => {
                    bail!("question {n} is a ShortAnswer (a typed answer); {ONLY}")
                }
                Question::Tracing(_) => {
                    bail!("question {n} is a Tracing question (a program to trace); {ONLY}")
                }
            };
            let answers: Vec<&str> = match &q.answer.answer {
                Answers::One(answer) => vec![answer.as_str()],
                Answers::All(all) => all.iter().map(String::as_str).collect(),
            };
            if let Some(key) = &q.multipart {
                bail!("question {n} is in multipart group {key:?}; {ONLY}");
            }
            if q.prompt_explanation == Some(true) {
                bail!("question {n} asks for a written justification (promptExplanation); {ONLY}");
            }
            let several = answers.len() > 1;
            let id = format!("wb-question-{chapter}-{n}");
            out.push_str(&format!(
                "<div class=\"wb-question\" id=\"{id}\">\n\
                 <p class=\"wb-prompt\" id=\"{id}-prompt\"><strong>{}</strong> {}</p>\n",
                inline(&tr(QUIZ_LINES[2])).replace("{0}", &n.to_string()),
                inline(&tr(&q.prompt.prompt))
            ));
            if several {
                out.push_str(&format!(
                    "<p class=\"wb-pick\">{}</p>\n\
                     <div class=\"wb-choices\" role=\"group\" aria-labelledby=\"{id}-prompt\">\n",
                    inline(&tr(QUIZ_LINES[3]))
                ));
            } else {
                out.push_str("<div class=\"wb-choices\">\n");
            }
            for (text, right) in choices(&q.prompt, &answers) {
                if several {
                    out.push_str(&format!(
                        "<label class=\"wb-choice\" data-right=\"{right}\">\
                         <input type=\"checkbox\"> <span>{}</span></label>\n",
                        inline(&tr(text))
                    ));
                } else {
                    out.push_str(&format!(
                        "<button type=\"button\" class=\"wb-choice\" data-right=\"{right}\">{}</button>\n",
                        inline(&tr(text))
                    ));
                }
            }
            out.push_str("</div>\n");
            if several {
                out.push_str(&format!(
                    "<button type=\"button\" class=\"wb-submit\" hidden>{}</button>\n",
                    inline(&tr(QUIZ_LINES[4]))
                ));
            }
            let answer = if several {
                let items: Vec<String> = answers.iter().map(|a| format!("- {}\n", tr(a))).collect();
                format!("**{}**\n\n{}\n", tr(QUIZ_LINES[5]), items.concat())
            } else {
                let answer = tr(answers[0]);
                let answer = answer.trim_end_matches(['.', '。']);
                format!("**{}** ", tr(QUIZ_LINES[6]).replace("{0}", answer))
            };
            out.push_str(&format!(
                "<p class=\"wb-verdict\" aria-live=\"polite\"></p>\n\
                 <details class=\"wb-explanation\">\n\
                 <summary>{}</summary>\n\n\
                 {answer}{}\n\n</details>\n</div>\n\n",
                inline(&tr(QUIZ_LINES[7])),
                tr(q.context.as_deref().unwrap_or_default().trim())
            ));
        }
        out.push_str(QUIZ_END);
        out.push_str("\n\n");
        Ok(out)
    }
}

/// The lines the built-in quiz renderer writes around a quiz's own texts, in the order
/// [`Quiz::render_in`] uses them (`{0}`: the question's number, or the right answer).
pub const QUIZ_LINES: [&str; 8] = [
    "Check yourself",
    "Answer before you scroll on: each question explains itself once answered.",
    "Question {0}.",
    "Pick all that apply.",
    "Check my answer",
    "The right answers:",
    "The answer: {0}.",
    "The answer and why",
];

/// The comment a rendered quiz starts with: the translation counts the quiz's messages from its
/// file, not from the page.
pub const QUIZ_START: &str = "<!-- wb-quiz -->";

/// The comment a rendered quiz ends with.
pub const QUIZ_END: &str = "<!-- /wb-quiz -->";

/// A question's choices in the order shown, each with whether it is right: its wrong answers
/// with its right `answers` placed among them (see [`Quiz::render`]).
fn choices<'a>(prompt: &'a ChoicePrompt, answers: &[&'a str]) -> Vec<(&'a str, bool)> {
    let mut choices: Vec<(&str, bool)> = prompt
        .distractors
        .iter()
        .map(|d| (d.as_str(), false))
        .collect();
    match prompt.answer_index {
        Some(at) => {
            let right = answers.iter().map(|a| (*a, true));
            choices.splice(at..at, right);
        }
        None => {
            for answer in answers {
                // One right answer keeps the place it has always had (from the prompt alone).
                let key = if answers.len() == 1 {
                    prompt.prompt.clone()
                } else {
                    format!("{}{answer}", prompt.prompt)
                };
                let at = fnv1a(&key) as usize % (choices.len() + 1);
                choices.insert(at, (answer, true));
            }
        }
    }
    if prompt.sort_answers == Some(true) {
        choices.sort();
    }
    choices
}

/// The line a page puts where its "Check yourself" questions go, when they must come before the
/// text that answers them rather than just before the exercises.
pub const QUIZ_MARKER: &str = "<!-- check yourself -->";

/// `content` with `quiz` in place of its [`QUIZ_MARKER`] line, else before its "## Exercises"
/// heading (outside code either way), else at its end.
pub fn with_quiz(content: &str, quiz: &str) -> String {
    let mut at_exercises = None;
    let mut fence = false;
    let mut offset = 0;
    for line in content.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = !fence;
        } else if !fence && line.trim_end() == QUIZ_MARKER {
            let after = &content[offset + line.len()..];
            return format!("{}{quiz}{after}", &content[..offset]);
        } else if !fence && line.trim_end() == "## Exercises" && at_exercises.is_none() {
            at_exercises = Some(offset);
        }
        offset += line.len();
    }
    match at_exercises {
        Some(at) => format!("{}{quiz}{}", &content[..at], &content[at..]),
        None => format!("{}\n\n{quiz}", content.trim_end()),
    }
}

/// Inline text for HTML: escaped, with `code` spans kept as code.
fn inline(text: &str) -> String {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    let mut out = String::new();
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str(&format!("<code>{part}</code>"));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// FNV-1a: a small stable hash, so a question's choices keep their order from build to build.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod quiz_tests {
    use super::*;

    const ONE: &str = "[[questions]]\ntype = \"MultipleChoice\"\n\
                       prompt.prompt = \"What is `x`?\"\nanswer.answer = \"2 MiB\"\n\
                       prompt.distractors = [\"<b>\", \"20 MiB\"]\ncontext = \"Because.\"\n";

    /// Three questions: `ONE` with `line` added to the second (a key of its table), twice.
    fn with_second(line: &str) -> String {
        format!("{ONE}{ONE}{line}\n{ONE}")
    }

    fn parse_error(text: &str) -> String {
        format!("{:#}", Quiz::parse(text).unwrap_err())
    }

    fn render_error(text: &str) -> String {
        let quiz = Quiz::parse(text).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        format!("{:#}", quiz.render("ch01-x").unwrap_err())
    }

    /// The choices of question `n` (from 1) in rendered HTML (buttons, or checkboxes in labels),
    /// with whether each is right.
    fn choices(html: &str, n: usize) -> Vec<(String, bool)> {
        let question = html.split("class=\"wb-question\"").nth(n).unwrap();
        question
            .split(" class=\"wb-choice\" data-right=\"")
            .skip(1)
            .map(|b| {
                let (right, rest) = b.split_once("\">").unwrap();
                let rest = rest
                    .strip_prefix("<input type=\"checkbox\"> <span>")
                    .unwrap_or(rest);
                let text = rest.split_once("</").unwrap().0;
                (text.to_string(), right == "true")
            })
            .collect()
    }

    #[test]
    fn a_quiz_renders_every_choice_once_and_hides_the_explanation() {
        let quiz = Quiz::parse(&ONE.repeat(3)).unwrap();
        let html = quiz.render("ch01-x").unwrap();
        assert_eq!(html.matches("class=\"wb-question\"").count(), 3);
        assert_eq!(html.matches("data-right=\"true\"").count(), 3);
        assert_eq!(html.matches("data-right=\"false\"").count(), 6);
        assert!(html.contains("What is <code>x</code>?"));
        assert!(html.contains("&lt;b&gt;") && !html.contains("<b>"));
        assert!(
            html.contains(
                "<p class=\"wb-verdict\" aria-live=\"polite\"></p>\n\
                 <details class=\"wb-explanation\">\n<summary>The answer and why</summary>\n\n\
                 **The answer: 2 MiB.** Because.\n\n</details>"
            ),
            "{html}"
        );
        assert!(!html.contains("checkbox") && !html.contains("Pick all"));
    }

    #[test]
    fn too_few_questions_or_an_unknown_type_is_an_error() {
        assert!(parse_error(ONE).contains("1 questions"));
        let other = ONE.replace("MultipleChoice", "Essay").repeat(3);
        let err = parse_error(&other);
        assert!(err.contains("unknown variant `Essay`"), "{err}");
    }

    #[test]
    fn the_ids_mdbook_quiz_writes_are_read_and_must_differ() {
        let id = "id = \"b230bed3-d6ba-4048-8b06-aa655d837b04\"";
        let quiz = Quiz::parse(&with_second(id)).unwrap();
        let html = quiz.render("ch01-x").unwrap();
        assert!(!html.contains("b230bed3"), "the id is not shown");
        let twice = format!("{ONE}{id}\n{ONE}{id}\n{ONE}");
        assert!(parse_error(&twice).contains("questions 1 and 2 have the same id"));
    }

    #[test]
    fn a_key_outside_mdbook_quizs_format_is_an_error_naming_it() {
        let err = parse_error(&with_second("prompt.distractor = [\"x\"]"));
        assert!(err.contains("unknown field `distractor`"), "{err}");
    }

    #[test]
    fn a_question_without_context_or_wrong_answers_is_an_error() {
        let bare = ONE.replace("context = \"Because.\"\n", "");
        let err = parse_error(&format!("{ONE}{bare}{ONE}"));
        assert!(err.contains("question 2 has no context"), "{err}");
        let none = ONE.replace("[\"<b>\", \"20 MiB\"]", "[]");
        let err = parse_error(&format!("{ONE}{ONE}{none}"));
        assert!(err.contains("question 3 has no wrong answers"), "{err}");
    }

    #[test]
    fn answer_index_places_the_answer_and_sort_answers_sorts() {
        let quiz = Quiz::parse(&with_second("prompt.answerIndex = 2")).unwrap();
        let html = quiz.render("ch01-x").unwrap();
        let at: Vec<bool> = choices(&html, 2).into_iter().map(|c| c.1).collect();
        assert_eq!(at, [false, false, true]);
        let quiz = Quiz::parse(&with_second("prompt.sortAnswers = true")).unwrap();
        let texts: Vec<String> = choices(&quiz.render("ch01-x").unwrap(), 2)
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(texts, ["2 MiB", "20 MiB", "&lt;b&gt;"]);
        let err = parse_error(&with_second("prompt.answerIndex = 3"));
        assert!(err.contains("question 2: prompt.answerIndex = 3"), "{err}");
        let both = with_second("prompt.answerIndex = 0\nprompt.sortAnswers = true");
        assert!(parse_error(&both).contains("both prompt.answerIndex and prompt.sortAnswers"));
    }

    /// `ONE` with three right answers, the last one ending in a full stop.
    const SEVERAL: &str = "[[questions]]\ntype = \"MultipleChoice\"\n\
                           prompt.prompt = \"Which are `x`?\"\n\
                           answer.answer = [\"2 MiB\", \"2048 KiB\", \"2097152 B.\"]\n\
                           prompt.distractors = [\"<b>\", \"20 MiB\"]\ncontext = \"Because.\"\n";

    #[test]
    fn a_list_of_one_right_answer_renders_as_one_answer() {
        let one = ONE.replace("\"2 MiB\"\n", "[\"2 MiB\"]\n");
        let html = Quiz::parse(&one.repeat(3))
            .unwrap()
            .render("ch01-x")
            .unwrap();
        assert_eq!(
            html,
            Quiz::parse(&ONE.repeat(3))
                .unwrap()
                .render("ch01-x")
                .unwrap()
        );
        let none = ONE.replace("\"2 MiB\"\n", "[]\n");
        let err = parse_error(&format!("{none}{ONE}{ONE}"));
        assert!(err.contains("question 1 has an empty list"), "{err}");
    }

    #[test]
    fn several_right_answers_render_as_labelled_checkboxes_and_a_hidden_check_button() {
        let html = Quiz::parse(&format!("{ONE}{SEVERAL}{ONE}"))
            .unwrap()
            .render("ch01-x")
            .unwrap();
        let question = html.split("class=\"wb-question\"").nth(2).unwrap();
        assert!(
            question.starts_with(
                " id=\"wb-question-ch01-x-2\">\n\
                 <p class=\"wb-prompt\" id=\"wb-question-ch01-x-2-prompt\">\
                 <strong>Question 2.</strong> Which are <code>x</code>?</p>\n\
                 <p class=\"wb-pick\">Pick all that apply.</p>\n\
                 <div class=\"wb-choices\" role=\"group\" \
                 aria-labelledby=\"wb-question-ch01-x-2-prompt\">\n"
            ),
            "{question}"
        );
        // Every choice once, a checkbox inside its label; the right ones marked as a one-answer
        // question marks its right button (data-right), and nowhere else before the explanation.
        let mut shown = choices(&html, 2);
        assert_eq!(question.matches("<label class=\"wb-choice\"").count(), 5);
        assert_eq!(question.matches("<input type=\"checkbox\">").count(), 5);
        assert!(!question.contains("<button type=\"button\" class=\"wb-choice\""));
        shown.sort();
        assert_eq!(
            shown,
            [
                ("&lt;b&gt;".to_string(), false),
                ("2 MiB".to_string(), true),
                ("20 MiB".to_string(), false),
                ("2048 KiB".to_string(), true),
                ("2097152 B.".to_string(), true),
            ]
        );
        let (choices_part, explanation) = question.split_once("<details").unwrap();
        assert_eq!(choices_part.matches("data-right=\"true\"").count(), 3);
        assert_eq!(choices_part.matches("2048 KiB").count(), 1);
        assert!(
            choices_part.ends_with(
                "</div>\n<button type=\"button\" class=\"wb-submit\" hidden>Check my answer</button>\n\
                 <p class=\"wb-verdict\" aria-live=\"polite\"></p>\n"
            ),
            "{choices_part}"
        );
        assert!(
            explanation.starts_with(
                " class=\"wb-explanation\">\n<summary>The answer and why</summary>\n\n\
                 **The right answers:**\n\n- 2 MiB\n- 2048 KiB\n- 2097152 B.\n\nBecause.\n\n</details>"
            ),
            "{explanation}"
        );
        // The other questions stay one-answer buttons.
        assert_eq!(html.matches("Pick all that apply.").count(), 1);
        assert_eq!(html.matches("wb-submit").count(), 1);
        assert_eq!(choices(&html, 1).len(), 3);
    }

    #[test]
    fn answer_index_puts_several_right_answers_together_there() {
        let at = SEVERAL.replace("context", "prompt.answerIndex = 1\ncontext");
        let html = Quiz::parse(&format!("{ONE}{ONE}{at}"))
            .unwrap()
            .render("ch01-x")
            .unwrap();
        let order: Vec<bool> = choices(&html, 3).into_iter().map(|c| c.1).collect();
        assert_eq!(order, [false, true, true, true, false]);
        let sorted = SEVERAL.replace("context", "prompt.sortAnswers = true\ncontext");
        let html = Quiz::parse(&format!("{ONE}{ONE}{sorted}"))
            .unwrap()
            .render("ch01-x")
            .unwrap();
        let texts: Vec<String> = choices(&html, 3).into_iter().map(|c| c.0).collect();
        assert_eq!(
            texts,
            ["2 MiB", "20 MiB", "2048 KiB", "2097152 B.", "&lt;b&gt;"]
        );
    }

    #[test]
    fn short_answer_and_tracing_questions_are_read_but_not_rendered() {
        let short = "[[questions]]\ntype = \"ShortAnswer\"\nid = \"s\"\n\
                     prompt.prompt = \"Bytes in a small segment?\"\nprompt.response = \"short\"\n\
                     answer.answer = \"2097152\"\nanswer.alternatives = [\"2 MiB\"]\n\
                     context = \"2 MiB.\"\n";
        let err = render_error(&format!("{ONE}{short}{ONE}"));
        assert!(
            err.contains("question 2 is a ShortAnswer") && err.contains("instructors.md"),
            "{err}"
        );
        let tracing = "[[questions]]\ntype = \"Tracing\"\n\
                       prompt.program = \"fn main() { println!(\\\"1\\\"); }\"\n\
                       answer.doesCompile = true\nanswer.stdout = \"1\"\n\
                       answer.lineNumber = 1\ncontext = \"It prints 1.\"\n";
        let err = render_error(&format!("{ONE}{ONE}{tracing}"));
        assert!(err.contains("question 3 is a Tracing question"), "{err}");
    }

    #[test]
    fn multipart_and_prompt_explanation_are_read_but_not_rendered() {
        let grouped = format!(
            "[multipart]\nsetup = \"A fresh device.\"\n\n{}",
            with_second("multipart = \"setup\"")
        );
        let err = render_error(&grouped);
        assert!(
            err.contains("question 2 is in multipart group \"setup\""),
            "{err}"
        );
        let err = parse_error(&with_second("multipart = \"setup\""));
        assert!(err.contains("which [multipart] lacks"), "{err}");
        let err = render_error(&with_second("promptExplanation = true"));
        assert!(
            err.contains("question 2 asks for a written justification"),
            "{err}"
        );
        assert!(Quiz::parse(&with_second("promptExplanation = false")).is_ok());
    }

    #[test]
    fn the_quiz_goes_before_the_exercises() {
        let page = "# T\n\n```md\n## Exercises\n```\n\ntext\n\n## Exercises\n\nE\n";
        let out = with_quiz(page, "QUIZ\n");
        assert!(out.contains("text\n\nQUIZ\n## Exercises\n\nE"), "{out}");
        assert_eq!(with_quiz("# T\n", "QUIZ\n"), "# T\n\nQUIZ\n");
    }

    #[test]
    fn the_quiz_goes_at_the_marker_before_the_text_that_answers_it() {
        let page = "# T\n\nIntro.\n\n```md\n<!-- check yourself -->\n```\n\n\
                    <!-- check yourself -->\n\n## The answer\n\n## Exercises\n\nE\n";
        let out = with_quiz(page, "QUIZ\n");
        assert!(
            out.contains("```\n\nQUIZ\n\n## The answer\n\n## Exercises\n\nE"),
            "{out}"
        );
        assert_eq!(out.matches("QUIZ").count(), 1, "{out}");
        assert!(out.contains("```md\n<!-- check yourself -->\n```"), "{out}");
    }

    #[test]
    fn the_quiz_path_is_relative_to_the_page() {
        let quiz = Path::new("/r/book/quizzes/ch01.toml");
        assert_eq!(
            relative(Path::new("/r/book/src"), quiz),
            "../quizzes/ch01.toml"
        );
        assert_eq!(
            relative(Path::new("/r/book/src/part"), quiz),
            "../../quizzes/ch01.toml"
        );
    }
}
