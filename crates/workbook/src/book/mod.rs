//! The book: `workbook book` builds the mdBook in `book/` with mdBook as a library; [`pages`] is
//! its preprocessor (the CLI lines, the quizzes, the solution gate), [`serve`] serves it on
//! 127.0.0.1, and [`pictures`] draws its allocator pictures (`workbook pictures`) with
//! [`crate::snapshot::viz`].
//!
//! mdBook only logs a broken `{{#include}}` and renders the page anyway, and an anchor that is not
//! in the file silently includes nothing; both are errors here, naming the page and the link.

pub mod i18n;
pub mod page_outputs;
pub mod pages;
pub mod picture_labels;
pub mod pictures;
pub mod serve;

use anyhow::{Context, Result, bail};
use clap::Args;
use mdbook_driver::MDBook;
use mdbook_driver::book::BookItem;
use mdbook_driver::config::Config;
use mdbook_preprocessor::Preprocessor;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};

/// Flags of `workbook book`.
#[derive(Debug, Args)]
pub struct BookArgs {
    /// Where to write the HTML (default: book/book/).
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
    /// Serve the book on 127.0.0.1 until Ctrl-C.
    #[arg(long)]
    pub serve: bool,
    /// Open the book in the browser (a warning if no browser can be started).
    #[arg(long)]
    pub open: bool,
    /// The port to serve on (default: 3000, or the next free one).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// The language to open and serve first: en, ko or zh-CN (default: from LANG, else en).
    /// Every language is built; each page links to itself in the others.
    #[arg(long, value_name = "LANG")]
    pub lang: Option<String>,
}

/// `workbook book`: builds the book, and with `--serve` serves it on 127.0.0.1 until Ctrl-C;
/// `--open` opens it in the browser (a failure to open is only a warning).
pub fn run(root: Option<&Path>, args: &BookArgs) -> Result<std::process::ExitCode> {
    let repo = crate::course::app_state::Repo::from_option(root)?;
    let lang = i18n::chosen_language(args.lang.as_deref())?;
    let out = build(&repo.book_dir(), args.dest.as_deref())?;
    println!("book written to {}", out.display());
    if !args.serve {
        if args.open {
            let index = out.join(lang.unwrap_or("")).join("index.html");
            if let Err(e) = crate::book::serve::open_in_browser(&index.display().to_string()) {
                eprintln!(
                    "warning: could not open a browser ({e:#}); open {} yourself",
                    index.display()
                );
            }
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let server = match args.port {
        Some(port) => crate::book::serve::Server::bind(&out, port)?,
        None => {
            let (server, note) =
                crate::book::serve::Server::bind_near(&out, crate::book::serve::DEFAULT_PORT)?;
            if let Some(note) = note {
                eprintln!("{note}");
            }
            server
        }
    };
    let server = server
        .with_progress(std::sync::Arc::new(move || {
            crate::course::learner::progress_json(&repo)
        }))
        .with_language(lang);
    serve_until_interrupted(server, args.open)
}

/// Prints the URL, opens it when asked, and serves until Ctrl-C.
pub fn serve_until_interrupted(
    server: crate::book::serve::Server,
    open: bool,
) -> Result<std::process::ExitCode> {
    let url = server.url();
    let stopper = server.stopper();
    if let Err(e) = ctrlc::set_handler(move || {
        // Stop first, then say so: when the output goes through a pipe that Ctrl-C has already
        // closed (`start | tee log`), writing fails, and a panic here would leave the server
        // serving. Then exit, whatever the other threads (the first check's build) are doing.
        stopper.stop();
        let _ = writeln!(std::io::stderr(), "\nstopped serving the book");
        std::process::exit(130);
    }) {
        eprintln!("warning: Ctrl-C will stop the server abruptly ({e})");
    }
    // Said once Ctrl-C is handled, so that it is true from the moment it is read.
    println!("Serving the book at {url} (on this machine only; Ctrl-C to stop)");
    if open && let Err(e) = crate::book::serve::open_in_browser(&url) {
        eprintln!("warning: could not open a browser ({e:#}); open {url} yourself");
    }
    server.serve();
    // Only Ctrl-C stops it: 130 is a shell's code for a command ended by it.
    Ok(std::process::ExitCode::from(130))
}

/// Builds the book whose root (with `book.toml`) is `book_dir` into `dest`, or into the book's own
/// build directory (`book/book/`): the English book there, and each translation whose catalogue
/// (`po/<lang>.po`) exists into its `<lang>/` folder. Returns where the English HTML went.
pub fn build(book_dir: &Path, dest: Option<&Path>) -> Result<PathBuf> {
    let out = build_language(book_dir, dest, None)?;
    for (lang, _) in i18n::LANGUAGES {
        if i18n::po_dir(book_dir).join(format!("{lang}.po")).is_file() {
            build_language(book_dir, Some(&out.join(lang)), Some(lang))?;
        }
    }
    Ok(out)
}

/// The workbook's preprocessor for the book in `book_dir`.
pub fn pages_of(book_dir: &Path) -> pages::WorkbookPages {
    pages::WorkbookPages {
        exercises: book_dir.join("../exercises"),
        quizzes: book_dir.join("quizzes"),
        solutions: book_dir.join("../solutions"),
        catalog: None,
    }
}

/// The book in `book_dir` as mdBook loads it, with the workbook's preprocessor placed among
/// those `book.toml` names (not yet added: see [`pages_of`]).
pub fn load(book_dir: &Path) -> Result<MDBook> {
    if !book_dir.join("book.toml").is_file() {
        bail!("{} has no book.toml", book_dir.display());
    }
    let mut config = Config::from_disk(book_dir.join("book.toml"))
        .with_context(|| format!("reading {}", book_dir.display()))?;
    config.update_from_env()?;
    if config.contains_key(pages::MDBOOK_QUIZ) {
        // mdbook-quiz shows the questions: the workbook's preprocessor runs after mdBook's
        // includes and before mdbook-quiz, which replaces the `{{#quiz ...}}` lines it writes.
        // Registered under the same name, it keeps the place these keys give it.
        let table = format!("preprocessor.{}", pages_of(book_dir).name());
        config.set(format!("{table}.after"), ["links"])?;
        config.set(format!("{table}.before"), ["quiz"])?;
    }
    MDBook::load_with_config(book_dir, config).with_context(|| {
        format!(
            "loading the book in {} (SUMMARY.md and every page it lists)",
            book_dir.display()
        )
    })
}

/// Builds the book in one language (`None`: English) into `dest` or `book/book/`.
fn build_language(book_dir: &Path, dest: Option<&Path>, lang: Option<&str>) -> Result<PathBuf> {
    if !book_dir.join("book.toml").is_file() {
        bail!("{} has no book.toml", book_dir.display());
    }
    let events = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Collect(events.clone()));
    let built = tracing::subscriber::with_default(subscriber, || -> Result<PathBuf> {
        let mut pages = pages_of(book_dir);
        let catalog = match lang {
            Some(lang) => Some(Arc::new(i18n::load_catalog(book_dir, lang)?)),
            None => None,
        };
        pages.catalog = catalog.clone();
        let mut book = load(book_dir)?;
        if let Some(dest) = dest {
            book.config.build.build_dir = std::path::absolute(dest)
                .with_context(|| format!("resolving {}", dest.display()))?;
        } else if let Some(lang) = lang {
            book.config.build.build_dir = book.config.build.build_dir.join(lang);
        }
        check_includes(&book)?;
        keep_solutions_out_of_search(&mut book, &pages)?;
        book.with_preprocessor(pages);
        if let (Some(lang), Some(catalog)) = (lang, catalog.clone()) {
            book.config.book.language = Some(lang.to_string());
            let script = i18n::book_script(book_dir)?;
            book.with_preprocessor(i18n::Translate {
                book_dir: book_dir.to_path_buf(),
                lang: lang.to_string(),
                catalog,
                script_lines: i18n::script_lines(&script),
            });
        }
        book.build().with_context(|| {
            format!(
                "building the book in {} ({})",
                book_dir.display(),
                lang.unwrap_or("en")
            )
        })?;
        let out = book.root.join(&book.config.build.build_dir);
        if let Some(catalog) = &catalog {
            i18n::index_translated_words(&out)?;
            picture_labels::translate_built_pictures(&out, catalog)?;
        }
        Ok(out)
    });
    let events = std::mem::take(&mut *events.lock().unwrap_or_else(|p| p.into_inner()));
    let mut errors = Vec::new();
    for (level, text) in events {
        if level == tracing::Level::ERROR {
            errors.push(text);
        } else {
            eprintln!("warning: {text}");
        }
    }
    let out = built?;
    if !errors.is_empty() {
        bail!(
            "mdBook reported {} error(s):\n  {}",
            errors.len(),
            errors.join("\n  ")
        );
    }
    Ok(out)
}

/// Leaves every solution page (`<chapter>-solution.md`) out of the search index, so that no search
/// preview shows a solution; the pages stay in the book, behind their gate.
fn keep_solutions_out_of_search(book: &mut MDBook, pages: &pages::WorkbookPages) -> Result<()> {
    let mut solutions = Vec::new();
    for item in book.iter() {
        if let BookItem::Chapter(chapter) = item
            && let Some(path) = &chapter.path
            && matches!(pages.kind(path)?, pages::PageKind::Solution(_))
        {
            solutions.push(path.to_string_lossy().replace('\\', "/"));
        }
    }
    let mut html = book.config.html_config().unwrap_or_default();
    let search = html.search.get_or_insert_with(Default::default);
    for path in solutions {
        let mut settings = mdbook_driver::config::SearchChapterSettings::default();
        settings.enable = Some(false);
        search.chapter.insert(path, settings);
    }
    book.config
        .set("output.html", &html)
        .context("leaving the solution pages out of the search index")?;
    Ok(())
}

/// Checks every `{{#include file:anchor}}` and `{{#rustdoc_include ...}}` of every page: the file
/// exists and, for a named anchor, holds `ANCHOR: name` and `ANCHOR_END: name`.
fn check_includes(book: &MDBook) -> Result<()> {
    let src = book.source_dir();
    let mut errors = Vec::new();
    for item in book.iter() {
        let BookItem::Chapter(chapter) = item else {
            continue;
        };
        let Some(page) = &chapter.path else {
            continue;
        };
        let page_dir = src
            .join(page)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or(src.clone());
        for (file, anchor) in includes(&chapter.content) {
            let path = page_dir.join(&file);
            let Ok(text) = std::fs::read_to_string(&path) else {
                errors.push(format!(
                    "{}: includes {file}, which does not exist ({})",
                    page.display(),
                    path.display()
                ));
                continue;
            };
            if let Some(anchor) = anchor
                && !has_anchor(&text, &anchor)
            {
                errors.push(format!(
                    "{}: includes {file}:{anchor}, but that file has no `ANCHOR: {anchor}` … \
                     `ANCHOR_END: {anchor}` pair",
                    page.display()
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        bail!("broken includes in the book:\n  {}", errors.join("\n  "))
    }
}

/// The `(file, named anchor)` of each include link in a page (line ranges give no anchor).
fn includes(content: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    let mut rest = content;
    while let Some(start) = rest.find("{{#") {
        let escaped = rest[..start].ends_with('\\');
        let after = &rest[start + 3..];
        let Some(end) = after.find("}}") else {
            break;
        };
        let inner = after[..end].trim();
        rest = &after[end + 2..];
        if escaped {
            continue;
        }
        let mut words = inner.split_whitespace();
        let (Some(kind), Some(target)) = (words.next(), words.next()) else {
            continue;
        };
        if kind != "include" && kind != "rustdoc_include" {
            continue;
        }
        let (file, anchor) = match target.split_once(':') {
            Some((file, spec)) => {
                let first = spec.split(':').next().unwrap_or("");
                let is_range = first.is_empty() || first.chars().all(|c| c.is_ascii_digit());
                (file, (!is_range).then(|| first.to_string()))
            }
            None => (target, None),
        };
        found.push((file.to_string(), anchor));
    }
    found
}

fn has_anchor(text: &str, anchor: &str) -> bool {
    let marker = |prefix: &str| {
        text.lines().any(|line| {
            line.find(prefix).is_some_and(|i| {
                let name = line[i + prefix.len()..].trim_start();
                let end = name
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
                    .unwrap_or(name.len());
                &name[..end] == anchor
            })
        })
    };
    marker("ANCHOR:") && marker("ANCHOR_END:")
}

/// Keeps mdBook's warnings and errors (their messages) for `build` to report.
struct Collect(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> Layer<S> for Collect {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: LayerContext<'_, S>) {
        let level = *event.metadata().level();
        if level > tracing::Level::WARN {
            return;
        }
        let mut text = Message(String::new());
        event.record(&mut text);
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((level, text.0));
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        } else {
            self.0.push_str(&format!("{}={value:?}", field.name()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_named_anchors_and_skips_ranges_and_escapes() {
        let page = "a {{#include ../x.rs:setup}} b {{#include y.rs:3:5}} \\{{#include z.rs}} \
                    {{#rustdoc_include w.rs}} {{#title T}}";
        assert_eq!(
            includes(page),
            vec![
                ("../x.rs".to_string(), Some("setup".to_string())),
                ("y.rs".to_string(), None),
                ("w.rs".to_string(), None),
            ]
        );
    }

    #[test]
    fn an_anchor_needs_both_markers() {
        assert!(has_anchor("// ANCHOR: a\nx\n// ANCHOR_END: a\n", "a"));
        assert!(!has_anchor("// ANCHOR: a\nx\n", "a"));
        assert!(!has_anchor("// ANCHOR: ab\n// ANCHOR_END: ab\n", "a"));
    }
}
