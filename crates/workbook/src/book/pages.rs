//! The workbook's own mdBook preprocessor, run by `workbook book` after mdBook's includes:
//! every exercise section of a chapter page ends with its `workbook check` and `hint` commands
//! (with plain `cargo test -p` as the alternative), and every solution page opens behind a gate.
//!
//! A chapter page also gets its self-check questions: `book/quizzes/<chapter>.toml`, written in
//! mdbook-quiz's format (`[[questions]]` of `type = "MultipleChoice"` with `prompt.prompt`,
//! `prompt.distractors`, `answer.answer` and `context`), is shown before the page's
//! "## Exercises" as buttons that answer at once and then explain (theme/workbook.js).
//!
//! A chapter page is `<chapter>.md` where `exercises/<chapter>/chapter.toml` exists; its
//! solution page is `<chapter>-solution.md`. New chapters get all of this without writing
//! anything but their quiz file.

use crate::course::chapter::ChapterInfo;
use anyhow::{Context, Result, bail};
use mdbook_preprocessor::book::{Book, BookItem};
use mdbook_preprocessor::{Preprocessor, PreprocessorContext};
use serde::Deserialize;
use std::path::{Path, PathBuf};

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

    fn run(&self, _ctx: &PreprocessorContext, mut book: Book) -> Result<Book> {
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
                    with_cli_commands(&page.content, &chapter, &exercises).and_then(|content| {
                        let file = self.quizzes.join(format!("{chapter}.toml"));
                        if !file.is_file() {
                            return Ok(content);
                        }
                        let quiz = Quiz::load(&file).map_err(|e| format!("{e:#}"))?;
                        Ok(with_quiz(&content, &quiz.render(&chapter)))
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

/// The block that ends an exercise section.
fn commands_block(chapter: &str, exercise: &str, cargo_test: &str) -> String {
    format!(
        "<div class=\"wb-commands\">\n\n\
         **Check it** with the workbook, and ask for the next hint when a test fails:\n\n\
         ```console\n\
         $ {CLI} check {chapter}\n\
         $ {CLI} hint {chapter} {exercise}\n\
         ```\n\n\
         Or with plain cargo: `{cargo_test}`\n\n\
         </div>\n"
    )
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
        let cargo_test = section
            .cargo_test
            .unwrap_or_else(|| format!("cargo test -p {chapter}"));
        out.push(String::new());
        out.push(commands_block(chapter, &section.exercise, &cargo_test));
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

/// A chapter's self-check questions, as mdbook-quiz writes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quiz {
    /// The questions, in order.
    pub questions: Vec<Question>,
}

/// One question.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// mdbook-quiz's question type; only `MultipleChoice` is rendered.
    #[serde(rename = "type")]
    pub kind: String,
    /// The question and its wrong answers.
    pub prompt: Prompt,
    /// The right answer.
    pub answer: Answer,
    /// The explanation shown once the question is answered (Markdown).
    pub context: String,
}

/// A question's prompt.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// The question (inline Markdown: `code` and plain text).
    pub prompt: String,
    /// The wrong answers.
    pub distractors: Vec<String>,
}

/// A question's answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The right answer.
    pub answer: String,
}

/// The fewest and the most questions a chapter's quiz may have.
pub const QUESTIONS: std::ops::RangeInclusive<usize> = 3..=5;

impl Quiz {
    /// Reads and checks a quiz file: 3 to 5 `MultipleChoice` questions, each with at least one
    /// wrong answer.
    pub fn load(path: &Path) -> Result<Quiz> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Quiz::parse(&text).with_context(|| format!("{} is not a usable quiz", path.display()))
    }

    /// Parses and checks the text of a quiz file.
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
        for (i, q) in quiz.questions.iter().enumerate() {
            if q.kind != "MultipleChoice" {
                bail!(
                    "question {} is of type {:?}; only \"MultipleChoice\" is supported",
                    i + 1,
                    q.kind
                );
            }
            if q.prompt.distractors.is_empty() {
                bail!(
                    "question {} has no wrong answers (prompt.distractors)",
                    i + 1
                );
            }
        }
        Ok(quiz)
    }

    /// The questions as the page shows them: a heading, then per question its prompt, its
    /// choices (the right one at a place that depends on the prompt) and its hidden explanation.
    pub fn render(&self, chapter: &str) -> String {
        let mut out = String::from(
            "## Check yourself\n\n\
             Answer before you scroll on: each question explains itself once answered.\n\n",
        );
        for (i, q) in self.questions.iter().enumerate() {
            let mut choices: Vec<(&str, bool)> = q
                .prompt
                .distractors
                .iter()
                .map(|d| (d.as_str(), false))
                .collect();
            let at = fnv1a(&q.prompt.prompt) as usize % (choices.len() + 1);
            choices.insert(at, (q.answer.answer.as_str(), true));
            out.push_str(&format!(
                "<div class=\"wb-question\" id=\"wb-question-{chapter}-{n}\">\n\
                 <p class=\"wb-prompt\"><strong>Question {n}.</strong> {prompt}</p>\n\
                 <div class=\"wb-choices\">\n",
                n = i + 1,
                prompt = inline(&q.prompt.prompt)
            ));
            for (text, right) in choices {
                out.push_str(&format!(
                    "<button type=\"button\" class=\"wb-choice\" data-right=\"{right}\">{}</button>\n",
                    inline(text)
                ));
            }
            out.push_str(&format!(
                "</div>\n<p class=\"wb-verdict\" hidden></p>\n\
                 <div class=\"wb-explanation\" hidden>\n\n\
                 **The answer: {}.** {}\n\n</div>\n</div>\n\n",
                q.answer.answer.trim_end_matches('.'),
                q.context.trim()
            ));
        }
        out
    }
}

/// `content` with `quiz` placed before its "## Exercises" heading (outside code), or at its end.
pub fn with_quiz(content: &str, quiz: &str) -> String {
    let mut fence = false;
    let mut offset = 0;
    for line in content.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = !fence;
        } else if !fence && line.trim_end() == "## Exercises" {
            return format!("{}{quiz}{}", &content[..offset], &content[offset..]);
        }
        offset += line.len();
    }
    format!("{}\n\n{quiz}", content.trim_end())
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

    #[test]
    fn a_quiz_renders_every_choice_once_and_hides_the_explanation() {
        let quiz = Quiz::parse(&ONE.repeat(3)).unwrap();
        let html = quiz.render("ch01-x");
        assert_eq!(html.matches("class=\"wb-question\"").count(), 3);
        assert_eq!(html.matches("data-right=\"true\"").count(), 3);
        assert_eq!(html.matches("data-right=\"false\"").count(), 6);
        assert!(html.contains("What is <code>x</code>?"));
        assert!(html.contains("&lt;b&gt;") && !html.contains("<b>"));
        assert!(
            html.contains(
                "<div class=\"wb-explanation\" hidden>\n\n**The answer: 2 MiB.** Because."
            )
        );
    }

    #[test]
    fn too_few_questions_or_another_type_is_an_error() {
        let err = Quiz::parse(ONE).unwrap_err();
        assert!(err.to_string().contains("1 questions"), "{err}");
        let other = ONE.replace("MultipleChoice", "ShortAnswer").repeat(3);
        let err = Quiz::parse(&other).unwrap_err();
        assert!(err.to_string().contains("ShortAnswer"), "{err}");
    }

    #[test]
    fn the_quiz_goes_before_the_exercises() {
        let page = "# T\n\n```md\n## Exercises\n```\n\ntext\n\n## Exercises\n\nE\n";
        let out = with_quiz(page, "QUIZ\n");
        assert!(out.contains("text\n\nQUIZ\n## Exercises\n\nE"), "{out}");
        assert_eq!(with_quiz("# T\n", "QUIZ\n"), "# T\n\nQUIZ\n");
    }
}
