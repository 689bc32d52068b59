//! The book in other languages, the way Comprehensive Rust does it: English is the source, and
//! each language is a gettext catalogue, `po/<lang>.po`, made with mdbook-i18n-helpers (used
//! here as a library).
//!
//! `workbook i18n update` extracts every message a reader reads into `po/messages.pot`: the
//! pages' prose as the workbook's preprocessor leaves it (so the quizzes, the command boxes and
//! the solution gates are in it), the chapter titles, the lines the book's script writes (its
//! `t('...')` calls in `theme/workbook.js`) and the staleness banner. Code blocks stay English
//! and are left out. Then `msgmerge` merges the template into each catalogue, marking an entry
//! whose English changed as fuzzy. `workbook book` builds each language with [`Translate`],
//! which translates a page after the workbook's preprocessor and puts a banner on a page with
//! fuzzy or untranslated entries.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use mdbook_driver::book::BookItem;
use mdbook_i18n_helpers::{extract_events, extract_messages};
use mdbook_preprocessor::book::Book;
use mdbook_preprocessor::{Preprocessor, PreprocessorContext};
use polib::catalog::Catalog;
use polib::message::Message;
use polib::metadata::CatalogMetadata;
use pulldown_cmark::{Event, Tag, TagEnd};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::book::pages::{QUIZ_END, QUIZ_LINES, QUIZ_START, Quiz};

/// The book's translations: a language's code (its catalogue is `po/<code>.po`, its pages go to
/// `<code>/` beside the English ones) and its name as its readers write it.
pub const LANGUAGES: &[(&str, &str)] = &[("ko", "한국어"), ("zh-CN", "简体中文")];

/// The template every catalogue is merged from.
pub const TEMPLATE: &str = "messages.pot";

/// The banner of a page whose translation is incomplete or older than the English page.
pub const STALE: &str = "Part of this page is older than the English page, or not yet translated.";

/// The banner's link to the English page.
pub const READ_ENGLISH: &str = "Read the English page";

/// Flags of `workbook i18n`.
#[derive(Debug, Args)]
pub struct I18nArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: I18nCommand,
}

/// The subcommands of `workbook i18n`.
#[derive(Debug, Subcommand)]
pub enum I18nCommand {
    /// Extract po/messages.pot from the book and merge it into every `po/<lang>.po` (a changed
    /// English message becomes fuzzy).
    Update,
    /// Per page and language: how many messages are translated, fuzzy or untranslated.
    Coverage,
}

/// `workbook i18n`.
pub fn run(root: Option<&Path>, args: &I18nArgs) -> Result<std::process::ExitCode> {
    let repo = crate::course::app_state::Repo::from_option(root)?;
    let book_dir = repo.book_dir();
    match args.command {
        I18nCommand::Update => {
            let written = update(&book_dir)?;
            for line in written {
                println!("{line}");
            }
        }
        I18nCommand::Coverage => print!("{}", coverage_report(&book_dir)?),
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `po/`, beside `book/`.
pub fn po_dir(book_dir: &Path) -> PathBuf {
    match book_dir.parent() {
        Some(root) if book_dir.is_absolute() => root.join("po"),
        _ => book_dir.join("../po"),
    }
}

/// The catalogue of `lang`, or an error naming the file and what is wrong with it.
pub fn load_catalog(book_dir: &Path, lang: &str) -> Result<Catalog> {
    let path = po_dir(book_dir).join(format!("{lang}.po"));
    if !path.is_file() {
        bail!(
            "{} does not exist: the book has no {lang} translation (languages: {})",
            path.display(),
            LANGUAGES
                .iter()
                .map(|(code, _)| *code)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    check_strings(&text).with_context(|| {
        format!(
            "{} is not a gettext catalogue (`msgfmt --check {}` says more)",
            path.display(),
            path.display()
        )
    })?;
    polib::po_file::parse(&path)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("{} is not a readable gettext catalogue", path.display()))
}

/// Checks that every `msgid`, `msgstr` (...) line and every continuation line of a PO file holds
/// one quoted string, closed: polib, which reads the file, assumes it and panics otherwise.
fn check_strings(text: &str) -> Result<()> {
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        let quoted = if line.starts_with('"') {
            line
        } else if line.starts_with("msg") {
            match line.split_once(' ') {
                Some((_, rest)) => rest,
                None => bail!("line {}: {line:?} has no string", n + 1),
            }
        } else {
            continue;
        };
        let inner = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .filter(|inner| {
                let escapes = inner.chars().rev().take_while(|c| *c == '\\').count();
                escapes % 2 == 0
            });
        if inner.is_none() {
            bail!(
                "line {}: {line:?} is not one string in double quotes (a quote missing, or an \
                 unescaped one?)",
                n + 1
            );
        }
    }
    Ok(())
}

/// The language named by a `LANG`-like value (`ko_KR.UTF-8`, `zh_CN`, `zh-CN`), if the book has
/// it; English (`None`) otherwise.
pub fn language_from_locale(locale: &str) -> Option<&'static str> {
    let name = locale
        .split(['.', '@'])
        .next()
        .unwrap_or("")
        .replace('_', "-");
    LANGUAGES.iter().map(|(code, _)| *code).find(|code| {
        name.eq_ignore_ascii_case(code)
            || name
                .split('-')
                .next()
                .is_some_and(|first| !code.contains('-') && first.eq_ignore_ascii_case(code))
    })
}

/// The language of `--lang`, else of `LANG` (or `LC_ALL`, `LC_MESSAGES`), else English (`None`).
/// An unknown `--lang` is an error naming the languages there are.
pub fn chosen_language(flag: Option<&str>) -> Result<Option<&'static str>> {
    if let Some(flag) = flag {
        if flag == "en" {
            return Ok(None);
        }
        return match LANGUAGES.iter().find(|(code, _)| *code == flag) {
            Some((code, _)) => Ok(Some(code)),
            None => bail!(
                "--lang {flag}: the book is in en, {}",
                LANGUAGES
                    .iter()
                    .map(|(code, _)| *code)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    let locale = ["LC_ALL", "LC_MESSAGES", "LANG"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_default();
    Ok(language_from_locale(&locale))
}

/// The messages of a page a reader reads, each with its line: its prose, without its code
/// blocks (code, commands and their output stay English).
pub fn page_messages(content: &str) -> Result<Vec<(usize, String)>> {
    // A code block's events carry the line where it starts; its text runs on for as many lines
    // as it has.
    let mut code_lines = Vec::new();
    let mut summaries = Vec::new();
    let mut open: Option<(usize, usize)> = None;
    for (line, event) in extract_events(content, None) {
        if let (Event::Html(html), None) = (&event, &open) {
            summaries.extend(
                summary_texts(html)
                    .into_iter()
                    .map(|s| (line, s.to_string())),
            );
        }
        match (&event, &mut open) {
            (Event::Start(Tag::CodeBlock(_)), _) => open = Some((line, line)),
            (Event::End(TagEnd::CodeBlock), Some((start, end))) => {
                code_lines.push(*start..=*end + 1);
                open = None;
            }
            (Event::Text(text), Some((_, end))) => {
                *end = (*end).max(line + text.matches('\n').count());
            }
            _ => {}
        }
    }
    let messages =
        extract_messages(&plain_fences(content)).context("reading the page's Markdown")?;
    let mut messages: Vec<(usize, String)> = messages
        .into_iter()
        .filter(|(line, _)| !code_lines.iter().any(|code| code.contains(line)))
        .map(|(line, m)| (line, m.message))
        .chain(summaries)
        .collect();
    messages.sort_by_key(|(line, _)| *line);
    Ok(messages)
}

/// The texts of the `<summary>...</summary>` elements of a piece of HTML (the hints' and the
/// reveals' labels), which mdbook-i18n-helpers leaves out with the rest of an HTML block.
fn summary_texts(html: &str) -> Vec<&str> {
    let mut texts = Vec::new();
    let mut rest = html;
    while let Some((_, after)) = rest.split_once("<summary>") {
        let Some((text, next)) = after.split_once("</summary>") else {
            break;
        };
        if !text.trim().is_empty() {
            texts.push(text.trim());
        }
        rest = next;
    }
    texts
}

/// `html` with the text of each `<summary>` element translated by `catalog`.
fn translate_summaries(html: &str, catalog: &Catalog) -> String {
    let mut out = html.to_string();
    for text in summary_texts(html) {
        let translated = lookup(catalog, text);
        if translated != text {
            out = out.replace(
                &format!("<summary>{text}</summary>"),
                &format!("<summary>{translated}</summary>"),
            );
        }
    }
    out
}

/// How much of a page a catalogue translates.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Coverage {
    /// Messages with a translation.
    pub translated: usize,
    /// Messages whose translation is of an older English text.
    pub fuzzy: usize,
    /// Messages with no translation (or none in the catalogue).
    pub untranslated: usize,
}

impl Coverage {
    /// Whether some of the page is shown in English or from an older English text.
    pub fn is_stale(&self) -> bool {
        self.fuzzy + self.untranslated > 0
    }

    fn add(&mut self, catalog: &Catalog, msgid: &str) {
        match catalog.find_message(None, msgid, None) {
            Some(m) if m.is_translated() && m.flags().is_fuzzy() => self.fuzzy += 1,
            Some(m) if m.is_translated() => self.translated += 1,
            _ => self.untranslated += 1,
        }
    }
}

/// `msgid`'s translation in `catalog`, or `msgid` itself where it has none (or a fuzzy one).
pub fn lookup<'a>(catalog: &'a Catalog, msgid: &'a str) -> &'a str {
    catalog
        .find_message(None, msgid, None)
        .filter(|m| m.is_translated() && !m.flags().is_fuzzy())
        .and_then(|m| m.msgstr().ok())
        .filter(|s| !s.is_empty())
        .unwrap_or(msgid)
}

/// What [`plain_fences`] puts before a fenced code block's language.
const PLAIN: &str = "wbcode-";

/// `content` with every fenced code block's language hidden behind [`PLAIN`]: mdbook-i18n-helpers
/// then finds no syntax for it and does not parse the code with syntect for its comments and
/// strings (code stays English here), which made the translated books five times slower to
/// build. [`restore_fences`] undoes it.
fn plain_fences(content: &str) -> String {
    let mut out = String::with_capacity(content.len() + 64);
    for line in content.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let fence = trimmed
            .find(|c| c != '`' && c != '~')
            .filter(|&n| n >= 3 && (trimmed.starts_with("```") || trimmed.starts_with("~~~")));
        match fence {
            Some(n) if !trimmed[n..].trim().is_empty() => {
                let at = line.len() - trimmed.len() + n;
                out.push_str(&line[..at]);
                out.push_str(PLAIN);
                out.push_str(&line[at..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// Undoes [`plain_fences`].
fn restore_fences(content: &str) -> String {
    content.replace(PLAIN, "")
}

/// A page's content without its rendered quiz, whose messages come from its quiz file.
fn without_quiz(content: &str) -> String {
    match (content.find(QUIZ_START), content.find(QUIZ_END)) {
        (Some(start), Some(end)) if start < end => {
            format!("{}{}", &content[..start], &content[end + QUIZ_END.len()..])
        }
        _ => content.to_string(),
    }
}

/// The messages of the quiz shown on `page` (`book/quizzes/<page's name>.toml`), if it shows one.
fn quiz_messages(book_dir: &Path, page: &Path, content: &str) -> Result<Vec<String>> {
    let Some(stem) = page.file_stem() else {
        return Ok(Vec::new());
    };
    let file = book_dir
        .join("quizzes")
        .join(Path::new(stem).with_extension("toml"));
    if !content.contains(QUIZ_START) || !file.is_file() {
        return Ok(Vec::new());
    }
    let mut messages: Vec<String> = QUIZ_LINES.iter().map(|l| l.to_string()).collect();
    messages.extend(Quiz::load(&file)?.messages());
    Ok(messages)
}

/// Every message of a page as the reader reads it: its prose and its quiz's texts.
fn all_page_messages(book_dir: &Path, page: &Path, content: &str) -> Result<Vec<String>> {
    let mut messages: Vec<String> = page_messages(&without_quiz(content))?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    messages.extend(quiz_messages(book_dir, page, content)?);
    let src = book_dir.join("src");
    for picture in super::picture_labels::page_pictures(&src, page, content) {
        messages.extend(super::picture_labels::picture_messages(&src, &picture)?);
    }
    Ok(messages)
}

/// A page's Markdown translated by `catalog` (mdbook-i18n-helpers' own translation of a text).
fn translate_markdown(content: &str, catalog: &Catalog) -> Result<String> {
    let content = plain_fences(content);
    let mut events = extract_events(&content, None);
    keep_heading_ids(&mut events);
    for (_, event) in &mut events {
        if let Event::Html(html) = event {
            *event = Event::Html(translate_summaries(html, catalog).into());
        }
    }
    let translated = mdbook_i18n_helpers::translate_events(&events, catalog)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = write_markdown(&translated).map_err(|e| {
        anyhow::anyhow!(
            "{e}: a translation's Markdown does not match its English message's (a code span, \
             a link or emphasis left unclosed?)"
        )
    })?;
    Ok(restore_alerts(&restore_fences(&text)))
}

/// GitHub's alerts (`> [!NOTE]` on a blockquote's first line), which the extraction reads as
/// text and writes back escaped and joined to the words after it (`> \[!NOTE\] The package`):
/// the marker unescaped and on its own line again, so that mdBook draws the alert.
fn restore_alerts(text: &str) -> String {
    const KINDS: [&str; 5] = ["NOTE", "TIP", "IMPORTANT", "WARNING", "CAUTION"];
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let quote_end = line
            .char_indices()
            .take_while(|(_, c)| *c == '>' || *c == ' ')
            .last()
            .map_or(0, |(i, c)| i + c.len_utf8());
        let (quote, rest) = line.split_at(quote_end);
        let marker = KINDS
            .iter()
            .find(|k| rest.starts_with(&format!("\\[!{k}\\]")));
        match marker {
            Some(kind) if quote.contains('>') => {
                // the writer opens a blockquote with an empty quoted line: the marker must be
                // the quote's first line
                let previous = out[..out.len().saturating_sub(1)]
                    .rfind('\n')
                    .map_or(0, |i| i + 1);
                if out[previous..]
                    .trim_end_matches('\n')
                    .chars()
                    .all(|c| c == '>' || c == ' ')
                    && out[previous..].contains('>')
                {
                    out.truncate(previous);
                }
                let after = rest[kind.len() + 5..].trim_start();
                out.push_str(&format!("{quote}[!{kind}]\n"));
                if !after.trim().is_empty() {
                    out.push_str(quote);
                    out.push_str(after);
                }
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// Writes a translated page's events back as Markdown, as mdbook-i18n-helpers'
/// `reconstruct_markdown` does, but with emphasis as `*...*`: CommonMark opens and closes `_`
/// only at the edge of a word, and to it two Chinese characters are one word, so `很_重要_的`
/// stays plain text while `很*重要*的` is emphasis.
fn write_markdown(events: &[(usize, Event<'_>)]) -> Result<String, pulldown_cmark_to_cmark::Error> {
    let events = events.iter().map(|(_, event)| event);
    let options = pulldown_cmark_to_cmark::Options {
        code_block_token_count: pulldown_cmark_to_cmark::calculate_code_block_token_count(
            events.clone(),
        )
        .unwrap_or(3),
        list_token: '-',
        emphasis_token: '*',
        strong_token: "**",
        ..Default::default()
    };
    let mut text = String::new();
    pulldown_cmark_to_cmark::cmark_with_options(events, &mut text, options)?;
    Ok(text.trim_start_matches('\n').to_string())
}

/// Gives each heading without an id the id mdBook makes from its English text, so that a
/// translated heading keeps it (written back as `{ #id }`) and every link to it still finds it.
/// mdBook 0.5 lowercases the heading's text, keeps letters, digits, `_` and `-`, turns white
/// space into `-`, and adds `-1`, `-2` (...) to an id the page already made; an id the page
/// gives itself is kept and not counted.
fn keep_heading_ids(events: &mut [(usize, Event<'_>)]) {
    let mut used = std::collections::HashSet::new();
    let mut open: Option<(usize, String)> = None;
    for at in 0..events.len() {
        match &events[at].1 {
            Event::Start(Tag::Heading { id: None, .. }) => open = Some((at, String::new())),
            Event::Text(text) | Event::Code(text) => {
                if let Some((_, heading)) = &mut open {
                    heading.push_str(text);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let Some((start, heading)) = open.take() else {
                    continue;
                };
                let id = english_heading_id(&heading, &mut used);
                if let Event::Start(Tag::Heading { id: slot, .. }) = &mut events[start].1
                    && !id.is_empty()
                {
                    *slot = Some(id.into());
                }
            }
            _ => {}
        }
    }
}

/// The id mdBook 0.5 gives a heading of `text` (its `id_from_content` and `unique_id`).
fn english_heading_id(text: &str, used: &mut std::collections::HashSet<String>) -> String {
    let id: String = text
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect();
    let mut unique = id.clone();
    let mut n = 0;
    while !used.insert(unique.clone()) {
        n += 1;
        unique = format!("{id}-{n}");
    }
    unique
}

/// The preprocessor that translates the book into one language: it runs after the workbook's
/// own ([`crate::book::pages`]), translates every page and title, puts the staleness banner on
/// a page with fuzzy or untranslated messages, and gives the book's script its lines.
pub struct Translate {
    /// The book's root (`book/`), where its quizzes are.
    pub book_dir: PathBuf,
    /// The language's code.
    pub lang: String,
    /// Its catalogue.
    pub catalog: Arc<Catalog>,
    /// The lines of `theme/workbook.js`, to give it in this language.
    pub script_lines: Vec<String>,
}

impl Preprocessor for Translate {
    fn name(&self) -> &str {
        "workbook-translate"
    }

    fn run(&self, _ctx: &PreprocessorContext, mut book: Book) -> Result<Book> {
        let mut errors = Vec::new();
        let lines: serde_json::Map<String, serde_json::Value> = self
            .script_lines
            .iter()
            .filter_map(|line| {
                let text = lookup(&self.catalog, line);
                (text != line).then(|| (line.clone(), text.into()))
            })
            .collect();
        // `</` cannot end the script early: JSON allows `<\/`.
        let script = format!(
            "<script>window.wbLines = {};</script>\n\n",
            serde_json::Value::Object(lines)
                .to_string()
                .replace("</", "<\\/")
        );
        book.for_each_mut(|item| match item {
            BookItem::Chapter(page) => {
                let Some(path) = page.path.clone() else {
                    return;
                };
                page.name = lookup(&self.catalog, &page.name).to_string();
                let mut coverage = Coverage::default();
                match all_page_messages(&self.book_dir, &path, &page.content) {
                    Ok(messages) => {
                        for msgid in &messages {
                            coverage.add(&self.catalog, msgid);
                        }
                    }
                    Err(e) => errors.push(format!("{}: {e:#}", path.display())),
                }
                match translate_markdown(&page.content, &self.catalog) {
                    Ok(text) => {
                        let banner = if coverage.is_stale() {
                            self.banner(&path)
                        } else {
                            String::new()
                        };
                        page.content = format!("{script}{banner}{text}");
                    }
                    Err(e) => errors.push(format!("{}: {e:#}", path.display())),
                }
            }
            BookItem::PartTitle(title) => *title = lookup(&self.catalog, title).to_string(),
            BookItem::Separator => {}
        });
        if !errors.is_empty() {
            bail!(
                "translating the book into {}:\n  {}",
                self.lang,
                errors.join("\n  ")
            );
        }
        Ok(book)
    }
}

impl Translate {
    /// The banner of a stale page: it says so in the page's language and links to the English
    /// page, which is one folder up from the language's.
    fn banner(&self, path: &Path) -> String {
        let depth = path.components().count();
        let english = format!(
            "{}{}",
            "../".repeat(depth),
            path.with_extension("html")
                .to_string_lossy()
                .replace('\\', "/")
        );
        format!(
            "<div class=\"wb-stale\" role=\"note\"><p>{} <a href=\"{english}\" hreflang=\"en\" \
             lang=\"en\">{}</a></p></div>\n\n",
            html_text(lookup(&self.catalog, STALE)),
            html_text(lookup(&self.catalog, READ_ENGLISH)),
        )
    }
}

fn html_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The lines `theme/workbook.js` shows through its `t('...')` calls, in order, each once.
pub fn script_lines(script: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rest = script;
    while let Some(at) = rest.find("t('") {
        let before = rest[..at].chars().last();
        rest = &rest[at + 3..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let mut line = String::new();
        let mut chars = rest.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, next)) = chars.next() {
                        line.push(next);
                    }
                }
                '\'' => {
                    end = Some(i);
                    break;
                }
                _ => line.push(c),
            }
        }
        let Some(end) = end else { break };
        rest = &rest[end + 1..];
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    lines
}

/// The longest word, in characters, put in a translated book's search index.
const LONGEST_INDEXED: usize = 16;

/// Puts the Korean and Chinese words of a translated book's pages into its search index.
///
/// mdBook's index (elasticlunr's English pipeline) drops every word that is not ASCII, so a
/// translated book would find only its code and English names. Each word of the pages' text
/// that has a letter beyond ASCII goes in as it is (Korean writes spaces between words, and the
/// search matches the start of a word: `할당자` finds `할당자는`); Chinese, written without
/// spaces, goes in from each of its characters on, so that any part of a phrase is the start of
/// an indexed word. `theme/workbook.js` keeps such letters in the words searched for.
pub fn index_translated_words(out: &Path) -> Result<()> {
    let Some(file) = std::fs::read_dir(out)
        .with_context(|| format!("reading {}", out.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("searchindex") && n.ends_with(".js"))
        })
    else {
        return Ok(()); // The book has search turned off.
    };
    const START: &str = "window.search = Object.assign(window.search, JSON.parse('";
    const END: &str = "'));";
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let Some(quoted) = text
        .trim_end()
        .strip_prefix(START)
        .and_then(|t| t.strip_suffix(END))
    else {
        bail!(
            "{} is not the search index mdBook 0.5 writes: its translated words cannot be added",
            file.display()
        );
    };
    // mdBook escapes `\` and `'` to put the JSON in a single-quoted string.
    let mut json = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        json.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    let mut search: serde_json::Value = serde_json::from_str(&json)
        .with_context(|| format!("reading the search index {}", file.display()))?;
    let index = &mut search["index"];
    let docs = index["documentStore"]["docs"].clone();
    let Some(docs) = docs.as_object() else {
        return Ok(()); // An index without its documents' text (search `save` off).
    };
    for (reference, doc) in docs {
        for field in ["title", "body", "breadcrumbs"] {
            let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
            for word in translated_words(doc[field].as_str().unwrap_or_default()) {
                *counts.entry(word).or_default() += 1;
            }
            let root = &mut index["index"][field]["root"];
            for (word, count) in counts {
                let mut node = &mut *root;
                for c in word.chars() {
                    let key = c.to_string();
                    if node.get(&key).is_none() {
                        node[&key] = serde_json::json!({ "df": 0, "docs": {} });
                    }
                    node = &mut node[&key];
                }
                if node["docs"].get(reference).is_none() {
                    let df = node["df"].as_u64().unwrap_or(0);
                    node["df"] = (df + 1).into();
                }
                node["docs"][reference] = serde_json::json!({ "tf": (count as f64).sqrt() });
            }
        }
    }
    let json = search
        .to_string()
        .replace('\\', "\\\\")
        .replace('\'', "\\'");
    std::fs::write(&file, format!("{START}{json}{END}"))
        .with_context(|| format!("writing {}", file.display()))
}

/// The words of `text` that the English index leaves out (see [`index_translated_words`]),
/// lowercased: each word with a letter beyond ASCII, and each Chinese word from each of its
/// characters on.
fn translated_words(text: &str) -> Vec<String> {
    let is_han =
        |c: char| ('\u{4e00}'..='\u{9fff}').contains(&c) || ('\u{3400}'..='\u{4dbf}').contains(&c);
    let mut words = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.is_ascii() || word.is_empty() {
            continue;
        }
        let chars: Vec<char> = word.to_lowercase().chars().collect();
        for start in 0..chars.len() {
            if start > 0 && !is_han(chars[start]) {
                continue;
            }
            let end = chars.len().min(start + LONGEST_INDEXED);
            words.push(chars[start..end].iter().collect());
        }
    }
    words
}

/// The book's script, `theme/workbook.js` (empty where the book has none).
pub fn book_script(book_dir: &Path) -> Result<String> {
    let path = book_dir.join("theme/workbook.js");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The English book as a reader reads it (after mdBook's includes and the workbook's
/// preprocessor), for extraction and coverage.
fn english_pages(book_dir: &Path) -> Result<Book> {
    let mut book = crate::book::load(book_dir)?;
    let pages = crate::book::pages_of(book_dir);
    book.with_preprocessor(pages);
    let (book, _) = book
        .preprocess_book(&Html)
        .with_context(|| format!("reading the book in {}", book_dir.display()))?;
    Ok(book)
}

/// A renderer that renders nothing, named as the HTML one so that the preprocessors run as for
/// the HTML book.
struct Html;

impl mdbook_renderer::Renderer for Html {
    fn name(&self) -> &str {
        "html"
    }

    fn render(&self, _ctx: &mdbook_renderer::RenderContext) -> Result<()> {
        Ok(())
    }
}

/// The template: every message of the book, with where it comes from.
pub fn extract(book_dir: &Path) -> Result<Catalog> {
    let book = english_pages(book_dir)?;
    let mut metadata = CatalogMetadata::new();
    metadata.project_id_version = "GPU Memory Workbook".to_string();
    metadata.mime_version = "1.0".to_string();
    metadata.content_type = "text/plain; charset=UTF-8".to_string();
    metadata.content_transfer_encoding = "8bit".to_string();
    let mut catalog = Catalog::new(metadata);
    let mut add = |msgid: &str, source: String| {
        if msgid.trim().is_empty() {
            return;
        }
        let source = match catalog.find_message(None, msgid, None) {
            Some(m) if !m.source().split_whitespace().any(|s| s == source) => {
                format!("{} {source}", m.source())
            }
            Some(m) => m.source().to_string(),
            None => source,
        };
        catalog.append_or_update(
            Message::build_singular()
                .with_msgid(msgid.to_string())
                .with_source(source)
                .done(),
        );
    };
    let src = Path::new("src");
    for item in book.iter() {
        match item {
            BookItem::Chapter(page) => {
                let Some(path) = &page.path else { continue };
                let shown = src.join(path).to_string_lossy().replace('\\', "/");
                add(&page.name, "src/SUMMARY.md".to_string());
                for (line, msgid) in page_messages(&without_quiz(&page.content))
                    .with_context(|| format!("extracting the messages of {shown}"))?
                {
                    add(&msgid, format!("{shown}:{line}"));
                }
                let quiz = format!(
                    "quizzes/{}.toml",
                    path.file_stem().unwrap_or_default().to_string_lossy()
                );
                for msgid in quiz_messages(book_dir, path, &page.content)? {
                    add(&msgid, quiz.clone());
                }
                let pictures = book_dir.join("src");
                for picture in super::picture_labels::page_pictures(&pictures, path, &page.content)
                {
                    let shown = src.join(&picture).to_string_lossy().replace('\\', "/");
                    for msgid in super::picture_labels::picture_messages(&pictures, &picture)? {
                        add(&msgid, shown.clone());
                    }
                }
            }
            BookItem::PartTitle(title) => add(title, "src/SUMMARY.md".to_string()),
            BookItem::Separator => {}
        }
    }
    add(STALE, "crates/workbook/src/book/i18n.rs".to_string());
    add(READ_ENGLISH, "crates/workbook/src/book/i18n.rs".to_string());
    for line in script_lines(&book_script(book_dir)?) {
        add(&line, "theme/workbook.js".to_string());
    }
    Ok(catalog)
}

/// Writes `po/messages.pot` and merges it into every `po/<lang>.po` (created where missing).
/// Returns a line per file written.
pub fn update(book_dir: &Path) -> Result<Vec<String>> {
    let po = po_dir(book_dir);
    std::fs::create_dir_all(&po).with_context(|| format!("creating {}", po.display()))?;
    let template = po.join(TEMPLATE);
    let catalog = extract(book_dir)?;
    polib::po_file::write(&catalog, &template)
        .with_context(|| format!("writing {}", template.display()))?;
    let mut written = vec![format!(
        "{}: {} messages",
        template.display(),
        catalog.count()
    )];
    for (lang, _) in LANGUAGES {
        let file = po.join(format!("{lang}.po"));
        let mut command = Command::new("msgmerge");
        if file.is_file() {
            command
                .args(["--quiet", "--update", "--backup=none", "--no-wrap"])
                .arg(&file)
                .arg(&template);
        } else {
            command = Command::new("msginit");
            command
                .args(["--no-translator", "--no-wrap", "--locale"])
                .arg(lang.replace('-', "_"))
                .arg("--input")
                .arg(&template)
                .arg("--output-file")
                .arg(&file);
        }
        let program = command.get_program().to_string_lossy().into_owned();
        let output = command.output().with_context(|| {
            format!(
                "running {program} (GNU gettext: `apt-get install gettext` installs it) on {}",
                file.display()
            )
        })?;
        if !output.status.success() {
            bail!(
                "{program} failed on {}:\n{}",
                file.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let merged = load_catalog(book_dir, lang)?;
        let mut total = Coverage::default();
        for m in catalog.messages() {
            total.add(&merged, m.msgid());
        }
        written.push(format!(
            "{}: {} translated, {} fuzzy, {} untranslated",
            file.display(),
            total.translated,
            total.fuzzy,
            total.untranslated
        ));
    }
    Ok(written)
}

/// The coverage report: per language and page, its translated, fuzzy and untranslated messages.
pub fn coverage_report(book_dir: &Path) -> Result<String> {
    let book = english_pages(book_dir)?;
    let mut out = String::new();
    for (lang, name) in LANGUAGES {
        let catalog = load_catalog(book_dir, lang)?;
        out.push_str(&format!(
            "{lang} ({name})\n  {:<44} {:>10} {:>6} {:>12}\n",
            "page", "translated", "fuzzy", "untranslated"
        ));
        let mut total = Coverage::default();
        let mut seen = BTreeSet::new();
        for item in book.iter() {
            let BookItem::Chapter(page) = item else {
                continue;
            };
            let Some(path) = &page.path else { continue };
            let mut coverage = Coverage::default();
            coverage.add(&catalog, &page.name);
            for msgid in all_page_messages(book_dir, path, &page.content)? {
                coverage.add(&catalog, &msgid);
                if seen.insert(msgid.clone()) {
                    total.add(&catalog, &msgid);
                }
            }
            out.push_str(&format!(
                "  {:<44} {:>10} {:>6} {:>12}\n",
                path.display(),
                coverage.translated,
                coverage.fuzzy,
                coverage.untranslated
            ));
        }
        out.push_str(&format!(
            "  {:<44} {:>10} {:>6} {:>12}\n\n",
            "all pages (each message once)", total.translated, total.fuzzy, total.untranslated
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(entries: &[(&str, &str, bool)]) -> Catalog {
        let mut catalog = Catalog::new(CatalogMetadata::new());
        for (id, text, fuzzy) in entries {
            let mut flags = polib::message::MessageFlags::new();
            if *fuzzy {
                flags.add_flag("fuzzy");
            }
            catalog.append_or_update(
                Message::build_singular()
                    .with_msgid(id.to_string())
                    .with_msgstr(text.to_string())
                    .with_flags(flags)
                    .done(),
            );
        }
        catalog
    }

    #[test]
    fn an_alert_keeps_its_marker_on_its_own_line() {
        assert_eq!(
            restore_alerts("a\n\n> \\[!NOTE\\] 이 패키지는\n> 둘째 줄\n"),
            "a\n\n> [!NOTE]\n> 이 패키지는\n> 둘째 줄\n"
        );
        assert_eq!(
            restore_alerts("\\[!NOTE\\] not quoted\n"),
            "\\[!NOTE\\] not quoted\n"
        );
    }

    #[test]
    fn code_blocks_are_left_out_of_a_pages_messages() {
        let page = "# Title\n\nSome *prose*.\n\n```rust\n// a comment\nlet s = \"text\";\n```\n\n\
                    ```console\n$ cargo run\n```\n\nMore prose with `code`.\n";
        let messages: Vec<String> = page_messages(page)
            .unwrap()
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(
            messages,
            vec!["Title", "Some _prose_.", "More prose with `code`."]
        );
    }

    #[test]
    fn a_fuzzy_or_missing_translation_leaves_the_english_and_counts_as_stale() {
        let catalog = catalog(&[("One.", "하나.", false), ("Two.", "둘.", true)]);
        assert_eq!(lookup(&catalog, "One."), "하나.");
        assert_eq!(lookup(&catalog, "Two."), "Two.");
        assert_eq!(lookup(&catalog, "Three."), "Three.");
        let mut coverage = Coverage::default();
        for id in ["One.", "Two.", "Three."] {
            coverage.add(&catalog, id);
        }
        assert_eq!(
            coverage,
            Coverage {
                translated: 1,
                fuzzy: 1,
                untranslated: 1
            }
        );
        assert!(coverage.is_stale());
        let text =
            translate_markdown("One.\n\nTwo.\n\n```rust\nlet x = 1;\n```\n", &catalog).unwrap();
        assert!(
            text.starts_with("하나.\n\nTwo.") && text.contains("let x = 1;"),
            "{text}"
        );
    }

    #[test]
    fn a_translated_heading_keeps_the_id_of_its_english_text() {
        let catalog = catalog(&[
            ("Four fixes, measured", "네 가지 해결책, 측정", false),
            ("`Buffer<T>` and you", "`Buffer<T>`와 여러분", false),
            ("Mine", "내 것", false),
        ]);
        let page = "# Four fixes, measured\n\nText.\n\n## Four fixes, measured\n\n\
                    ## `Buffer<T>` and you\n\n## Mine {#own}\n\n## Four fixes, measured\n";
        let text = translate_markdown(page, &catalog).unwrap();
        let headings: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
        assert_eq!(
            headings,
            [
                "# 네 가지 해결책, 측정 { #four-fixes-measured }",
                "## 네 가지 해결책, 측정 { #four-fixes-measured-1 }",
                "## `Buffer<T>`와 여러분 { #buffert-and-you }",
                "## 내 것 { #own }",
                "## 네 가지 해결책, 측정 { #four-fixes-measured-2 }",
            ],
            "{text}"
        );
    }

    #[test]
    fn a_summarys_text_is_a_message_and_is_translated() {
        let page = "Text.\n\n<details>\n<summary>Hint 1</summary>\n\nLook.\n\n</details>\n\n\
                    <details class=\"wb-reveal\"><summary>The answer: predict first</summary>\n\n\
                    More.\n\n</details>\n";
        let messages: Vec<(usize, String)> = page_messages(page).unwrap();
        let ids: Vec<&str> = messages.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(
            ids,
            [
                "Text.",
                "Hint 1",
                "Look.",
                "The answer: predict first",
                "More."
            ]
        );
        let catalog = catalog(&[
            ("Hint 1", "힌트 1", false),
            ("The answer: predict first", "답: 먼저 예측하십시오", false),
        ]);
        let text = translate_markdown(page, &catalog).unwrap();
        assert!(
            text.contains("<summary>힌트 1</summary>")
                && text.contains("<summary>답: 먼저 예측하십시오</summary>")
                && !text.contains("Hint 1"),
            "{text}"
        );
    }

    #[test]
    fn emphasis_between_chinese_characters_is_written_with_stars() {
        let catalog = catalog(&[("It is _very_ important.", "这*非常*重要。", false)]);
        let text = translate_markdown("It is _very_ important.\n", &catalog).unwrap();
        assert_eq!(text.trim_end(), "这*非常*重要。");
        let emphasised = pulldown_cmark::Parser::new(&text)
            .any(|event| matches!(event, Event::Start(Tag::Emphasis)));
        assert!(emphasised, "mdBook would not show {text:?} as emphasis");
    }

    #[test]
    fn the_banner_links_to_the_english_page_one_folder_up() {
        let t = Translate {
            book_dir: PathBuf::from("book"),
            lang: "ko".into(),
            catalog: Arc::new(catalog(&[(
                STALE,
                "이 페이지의 일부는 영어 페이지보다 오래되었습니다.",
                false,
            )])),
            script_lines: Vec::new(),
        };
        let banner = t.banner(Path::new("conformance/allocator.md"));
        assert!(
            banner.contains("href=\"../../conformance/allocator.html\""),
            "{banner}"
        );
        assert!(banner.contains("오래되었습니다") && banner.contains(READ_ENGLISH));
    }

    #[test]
    fn an_unclosed_string_in_a_catalogue_is_an_error_naming_its_line() {
        assert!(check_strings("msgid \"One\"\nmsgstr \"\"\n\"a \\\"b\\\"\"\n").is_ok());
        let err = check_strings("msgid \"One\"\nmsgstr \"하나\n").unwrap_err();
        assert!(err.to_string().starts_with("line 2:"), "{err}");
        assert!(check_strings("msgstr \"ends in \\\"\n").is_err());
        assert!(check_strings("msgstr\n").is_err());
    }

    #[test]
    fn korean_words_go_in_whole_and_chinese_from_each_character_on() {
        assert_eq!(
            translated_words("할당자는 `memory_allocated`를 셉니다."),
            vec!["할당자는", "를", "셉니다"]
        );
        assert_eq!(
            translated_words("缓存分配器，empty_cache 释放"),
            vec![
                "缓存分配器",
                "存分配器",
                "分配器",
                "配器",
                "器",
                "释放",
                "放"
            ]
        );
    }

    #[test]
    fn fences_keep_their_language_through_a_translation() {
        let page = "Text.\n\n```rust,ignore\nlet s = \"```python\";\n```\n\n  ~~~console\n  $ x\n  ~~~\n\n```\nplain\n```\n";
        let hidden = plain_fences(page);
        assert!(
            hidden.contains("```wbcode-rust,ignore\n") && hidden.contains("  ~~~wbcode-console\n")
        );
        assert!(hidden.contains("```\nplain\n```"), "{hidden}");
        assert_eq!(restore_fences(&hidden), page);
        let catalog = catalog(&[("Text.", "글.", false)]);
        let text = translate_markdown(page, &catalog).unwrap();
        // mdbook-i18n-helpers writes every fence anew (here with four backticks); the language
        // stays.
        assert!(
            text.starts_with("글.")
                && text.contains("rust,ignore\nlet s = \"```python\";")
                && text.contains("console\n$ x")
                && !text.contains(PLAIN),
            "{text}"
        );
    }

    #[test]
    fn the_scripts_lines_are_its_t_calls() {
        let js = "say(t('Right.')); x.at('no'); say(t('It\\'s {0} of {1}', a, b)); t('Right.');";
        assert_eq!(script_lines(js), vec!["Right.", "It's {0} of {1}"]);
    }

    #[test]
    fn a_language_comes_from_the_flag_or_the_locale() {
        assert_eq!(language_from_locale("ko_KR.UTF-8"), Some("ko"));
        assert_eq!(language_from_locale("zh_CN.UTF-8"), Some("zh-CN"));
        assert_eq!(language_from_locale("zh_TW.UTF-8"), None);
        assert_eq!(language_from_locale("en_US.UTF-8"), None);
        assert_eq!(language_from_locale("C"), None);
        assert_eq!(chosen_language(Some("ko")).unwrap(), Some("ko"));
        assert_eq!(chosen_language(Some("en")).unwrap(), None);
        let err = chosen_language(Some("kr")).unwrap_err().to_string();
        assert!(
            err.contains("--lang kr") && err.contains("ko, zh-CN"),
            "{err}"
        );
    }
}
