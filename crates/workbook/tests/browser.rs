//! The book in a real browser. Builds it with `workbook book`, serves it on 127.0.0.1, and opens every page in headless Chromium through chromedriver
//! (WebDriver): no JavaScript errors and no failed loads in the browser's log, every image loaded,
//! every internal link and `#anchor` resolving, code blocks highlighted, the sidebar listing every
//! page of SUMMARY.md, and the search finding the chapters that teach `empty_cache`. Layouts fit:
//! at 1280 px nothing in a page scrolls sideways; at 390 px no table does, and the pictures'
//! smallest label is drawn at 10 px or more. Solutions are gated: every solution page opens on
//! its warning with the solution hidden until its button is pressed, every link to a solution
//! page (the chapter's "next" arrow included) lands on that gate, and the search shows no
//! solution page. Every chapter with a quiz file shows 3 to 5 questions, and a question answered
//! says whether it was right and shows its explanation; chapter 4's "pick all that apply"
//! question, answered by keyboard with one right box only and then by mouse with every right box,
//! says "Not quite." and then "Right.", in the light and navy themes at 1280 and 390 px. Chapter 3's interactive view of its
//! pictures steps through the allocator's events (next button, right arrow key) and shows a
//! block's size, requested size and stream on hover and tap, in the light and navy themes at
//! 1280 and 390 px. Chapter 7 shows its pictures of pinned memory and streams (their labels 10 px
//! or more at 390 px), and its activity view steps through the copies and kernels and says what a
//! copy span is (stream, bytes, pinned block) on hover and tap. Chapter 13's block view shows
//! the pool and the block tables of its first step, steps to the next, and says what a block holds
//! on hover and tap, at 1280 and 390 px. At 390 px, in the light and navy themes, no chapter with
//! pictures scrolls sideways, its answers' reveals open; an answer's reveal opens by itself when
//! the served progress says its exercise passes, and stays closed while it fails.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`apt-get install chromium chromium-driver`),
//! or the programs named by `WORKBOOK_CHROMIUM` and `WORKBOOK_CHROMEDRIVER`. Without them the test
//! fails under CI (`CI=true`, where `.ci/run` installs them) and is skipped with a notice elsewhere,
//! so that a learner's plain `cargo test` works on a fresh machine; `WORKBOOK_SKIP_BROWSER=1` skips
//! it always. With `WORKBOOK_SCREENSHOTS=<dir>` it also saves
//! screenshots of the introduction and chapter 3 in the light and navy themes there (chapter 3's
//! interactive view at 1280 and 390 px among them); with
//! `WORKBOOK_CHROMEDRIVER_LOG=<file>`, chromedriver's verbose log goes to that file.

use crate::common;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The word the search must find, and the chapter whose subject it is.
const SEARCH_WORD: &str = "empty_cache";

/// Chromium's flags: headless, and nothing that reaches the network or the desktop.
const CHROMIUM_ARGS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
];

#[test]
fn every_page_of_the_book_works_in_headless_chromium() {
    if std::env::var_os("WORKBOOK_SKIP_BROWSER").is_some_and(|v| v == "1") {
        eprintln!("browser test skipped: WORKBOOK_SKIP_BROWSER=1");
        return;
    }
    let started = Instant::now();
    let tools = match Tools::find() {
        Ok(tools) => tools,
        Err(e) if std::env::var_os("CI").is_none_or(|v| v.is_empty() || v == "false") => {
            eprintln!(
                "browser test skipped: {e}\n(it runs under CI=true; install chromium and \
                 chromium-driver to run it here)"
            );
            return;
        }
        Err(e) => panic!(
            "{e}\nThe browser test needs headless Chromium and chromedriver: on Debian or Ubuntu, \
             `apt-get install chromium chromium-driver` (or set WORKBOOK_CHROMIUM and \
             WORKBOOK_CHROMEDRIVER to the programs). To skip it, set WORKBOOK_SKIP_BROWSER=1."
        ),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let dest = scratch.path().join("book");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(&root)
            .arg("book")
            .arg("--dest")
            .arg(&dest),
    );
    assert!(
        output.status.success(),
        "workbook book failed:\n{stdout}\n{stderr}"
    );
    let summary = std::fs::read_to_string(root.join("book/src/SUMMARY.md")).expect("SUMMARY.md");
    let chapter_sources = chapter_pages_mentioning(&root.join("book/src"), &summary, SEARCH_WORD);

    let server = serve_book(&dest);
    let base = server.url().to_string();
    let driver =
        Driver::start(&tools.chromedriver, scratch.path()).unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let check = BookCheck {
        base,
        dest: dest.clone(),
        chromium: tools.chromium.clone(),
        profile: scratch.path().join("profile"),
        sidebar_pages: summary_pages(&summary),
        search_must_find: chapter_sources,
        quizzes: root.join("book/quizzes"),
        screenshots: std::env::var_os("WORKBOOK_SCREENSHOTS").map(PathBuf::from),
    };
    // Two sessions at once, each with its own profile: the pages in one, the views in the
    // other (the served progress is read-only, so neither sees the other's clicks).
    let (pages, views) = runtime.block_on(futures_util::future::join(
        check.run(&driver.url, Part::Pages),
        check.run(&driver.url, Part::Views),
    ));
    drop(driver);
    let mut report = pages.unwrap_or_else(|e| panic!("the browser could not be driven: {e}"));
    let views = views.unwrap_or_else(|e| panic!("the browser could not be driven: {e}"));
    report.problems.extend(views.problems);
    eprintln!(
        "browser test: {} pages, {} internal links, {} images, {} code blocks, search for {:?} \
         finding {} pages, checked in {:.1} s",
        report.pages,
        report.links,
        report.images,
        report.code_blocks,
        SEARCH_WORD,
        report.search_results,
        started.elapsed().as_secs_f64()
    );
    assert!(
        report.problems.is_empty(),
        "{} problem(s) in the book as Chromium shows it:\n  {}",
        report.problems.len(),
        report.problems.join("\n  ")
    );
}

/// Prints how long each phase of a session took (to stderr, shown when the test fails or runs
/// with `--nocapture`), so that a slow phase can be found without a profiler.
struct Lap {
    part: &'static str,
    last: Instant,
}

impl Lap {
    fn new(part: &'static str) -> Lap {
        Lap {
            part,
            last: Instant::now(),
        }
    }

    fn mark(&mut self, what: &str) {
        eprintln!(
            "browser test, {}: {what} in {:.1} s",
            self.part,
            self.last.elapsed().as_secs_f64()
        );
        self.last = Instant::now();
    }
}

/// Serves `root` with the workbook's own server (`workbook book --serve`) on a free port of
/// 127.0.0.1 until the returned handle is dropped, with [`PROGRESS`] as the learner's progress.
fn serve_book(root: &Path) -> workbook::book::serve::Running {
    workbook::book::serve::Server::bind(root, 0)
        .expect("the book server binds a free port")
        .with_progress(std::sync::Arc::new(|| Ok(PROGRESS.as_bytes().to_vec())))
        .spawn()
}

/// The progress the test's server reports (`workbook start` reads it from `.workbook/`): chapter
/// 1's `choose_device` failing with 1 of 7 tests passing, chapter 3 done (its prediction
/// passes), chapter 10's prediction failing.
const PROGRESS: &str = r#"{"chapters": [
  {"name": "ch01-availability", "done": false, "exercises": [
    {"name": "cuda_status", "state": "done", "passed": 1, "total": 1},
    {"name": "choose_device", "state": "failing", "passed": 1, "total": 7}]},
  {"name": "ch03-drop-and-empty-cache", "done": true, "exercises": [
    {"name": "predict", "state": "done", "passed": 6, "total": 6}]},
  {"name": "ch10-out-of-memory", "done": false, "exercises": [
    {"name": "predict", "state": "failing", "passed": 2, "total": 5}]}
]}"#;

/// Forgets the answers to chapter 4's questions kept by the browser, so that the page asks again.
const FORGET_SEVERAL: &str = "Object.keys(localStorage)\
  .filter(k => k.startsWith('workbook.answer.wb-question-' + arguments[0] + '-'))\
  .forEach(k => localStorage.removeItem(k));";

/// The programs the test drives.
struct Tools {
    chromium: PathBuf,
    chromedriver: PathBuf,
}

impl Tools {
    /// `WORKBOOK_CHROMIUM` / `WORKBOOK_CHROMEDRIVER`, else Debian's paths, else the `PATH`.
    fn find() -> Result<Tools, String> {
        let find = |var: &str, names: &[&str]| -> Result<PathBuf, String> {
            if let Some(path) = std::env::var_os(var) {
                let path = PathBuf::from(path);
                return if path.is_file() {
                    Ok(path)
                } else {
                    Err(format!("{var}={} is not a file", path.display()))
                };
            }
            let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default();
            for name in names {
                for dir in std::iter::once(PathBuf::from("/usr/bin")).chain(path_dirs.clone()) {
                    let candidate = dir.join(name);
                    if candidate.is_file() {
                        return Ok(candidate);
                    }
                }
            }
            Err(format!(
                "none of {} was found in /usr/bin or on the PATH (and {var} is not set)",
                names.join(", ")
            ))
        };
        Ok(Tools {
            chromium: find(
                "WORKBOOK_CHROMIUM",
                &["chromium", "chromium-browser", "google-chrome"],
            )?,
            chromedriver: find("WORKBOOK_CHROMEDRIVER", &["chromedriver"])?,
        })
    }
}

/// chromedriver on a free port of 127.0.0.1, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start(program: &Path, scratch: &Path) -> Result<Driver, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        // WORKBOOK_CHROMEDRIVER_LOG=<file> keeps chromedriver's verbose log, to see why a page hung.
        let (log, verbose) = match std::env::var_os("WORKBOOK_CHROMEDRIVER_LOG") {
            Some(file) => (PathBuf::from(file), Some("--verbose")),
            None => (scratch.join("chromedriver.log"), None),
        };
        let child = Command::new(program)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .args(verbose)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", program.display()))?;
        let driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not listen on port {port} within 30 s",
                    program.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(driver)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the test looks at, and where.
struct BookCheck {
    base: String,
    dest: PathBuf,
    chromium: PathBuf,
    profile: PathBuf,
    /// Every page SUMMARY.md lists, as `.html`.
    sidebar_pages: Vec<String>,
    /// Chapter pages whose source mentions [`SEARCH_WORD`].
    search_must_find: Vec<String>,
    /// `book/quizzes/`: a chapter's questions are `<chapter>.toml` there.
    quizzes: PathBuf,
    screenshots: Option<PathBuf>,
}

/// What was checked, and what was wrong.
#[derive(Default)]
struct Report {
    pages: usize,
    links: usize,
    images: usize,
    code_blocks: usize,
    search_results: usize,
    problems: Vec<String>,
}

/// What one page holds, as the browser sees it once loaded.
struct Page {
    ids: BTreeSet<String>,
    /// Opens on the solution's gate, with the solution hidden.
    gated: bool,
    links: Vec<Link>,
}

/// A link, resolved by the browser.
struct Link {
    from: String,
    text: String,
    origin: String,
    /// The page or file, relative to the book's root (`index.html` for `/`).
    path: String,
    /// The decoded fragment (empty when none).
    anchor: String,
}

/// The chapter page whose interactive view of its pictures the test steps through.
const HISTORY_PAGE: &str = "ch03-drop-and-empty-cache";

/// The chapter page whose pictures of pinned memory and streams, and their view, are checked.
const ACTIVITY_PAGE: &str = "ch07-pinned-memory";

/// The chapter page whose block view (the KV cache's pool and block tables) is stepped through.
const BLOCKS_PAGE: &str = "ch13-kv-cache";

/// The chapter page whose "pick all that apply" question is answered wrongly and then rightly.
const SEVERAL_PAGE: &str = "ch04-memory-stats";

/// The first "pick all that apply" question of the page (the one with a check button), or null:
/// what it says, how many choices and checkboxes it has, whether its button and its open
/// explanation show, the verdict and its aria-live, how many boxes are ticked, whether every box
/// is disabled, whether exactly the right choices are marked right, how many are marked wrong,
/// and a choice's background colour. Runs in the page.
const SEVERAL_STATE: &str = r#"
const button = document.querySelector('.content .wb-submit');
if (button === null) { return null; }
const q = button.closest('.wb-question');
const e = q.querySelector('.wb-explanation');
const v = q.querySelector('.wb-verdict');
const labels = Array.from(q.querySelectorAll('.wb-choice'));
const box = (l) => l.querySelector('input[type="checkbox"]');
const pick = q.querySelector('.wb-pick');
return {
    pick: pick === null ? '' : pick.textContent,
    choices: labels.length,
    boxes: labels.filter((l) => l.tagName === 'LABEL' && box(l) !== null).length,
    button: button.offsetHeight > 0,
    explanation: e !== null && e.offsetHeight > 0 && e.open,
    text: e === null ? '' : e.textContent,
    verdict: v.textContent,
    live: v.getAttribute('aria-live'),
    ticked: labels.filter((l) => box(l) !== null && box(l).checked).length,
    disabled: labels.every((l) => box(l) !== null && box(l).disabled),
    marked: labels.every((l) =>
        l.classList.contains('wb-right') === (l.getAttribute('data-right') === 'true')),
    wrong: labels.filter((l) => l.classList.contains('wb-wrong')).length,
    background: getComputedStyle(labels[0]).backgroundColor,
};
"#;

/// The phone's window width, and the smallest a picture's label may be drawn on it, in CSS px.
const PHONE_WIDTH: u32 = 390;
const MIN_LABEL_PX: f64 = 10.0;

/// Every element of the page's text that scrolls sideways (its content is wider than its box and
/// its `overflow-x` lets it scroll), and the page itself when wider than the window. `arguments[0]`
/// is true on a phone, where code blocks (whose columns of output must stay aligned) and the
/// pictures' own paragraphs may scroll, and tables may not. Runs in the page.
const OVERFLOW: &str = r#"
const phone = arguments[0];
const out = [];
const main = document.querySelector('#mdbook-content main') || document.querySelector('main');
if (main === null) { return out; }
const describe = (e) => {
  const t = (e.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 50);
  return e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ')[0] : '')
    + ' "' + t + '"';
};
for (const e of [main, ...main.querySelectorAll('*')]) {
  if (e.scrollWidth <= e.clientWidth + 1) { continue; }
  const style = getComputedStyle(e);
  const scrolls = e === main || style.overflowX === 'auto' || style.overflowX === 'scroll';
  if (!scrolls || e.clientWidth === 0) { continue; }
  if (phone && (e.closest('pre') !== null
                || e.querySelector('img[src^="pictures/"]') !== null)) { continue; }
  out.push(describe(e) + ' is ' + e.scrollWidth + ' px wide in ' + e.clientWidth + ' px');
}
if (document.documentElement.scrollWidth > window.innerWidth + 1) {
  out.push('the page is ' + document.documentElement.scrollWidth + ' px wide in a '
    + window.innerWidth + ' px window');
}
return out;
"#;

/// The pictures of a page: their `src` and the width they are drawn at. Runs in the page.
const PICTURES: &str = r#"
// mdBook draws each picture twice: in the page, and in its hidden zoomed view (.img-wrapper).
return Array.from(document.querySelectorAll('main img[src^="pictures/"]'))
  .filter(i => i.closest('.img-wrapper') === null).map(i => ({
  src: i.getAttribute('src'), width: i.getBoundingClientRect().width }));
"#;

/// Collects what a loaded page holds. Runs in the page.
const INSPECT: &str = r#"
const url = (href) => { try { return new URL(href, document.baseURI); } catch (e) { return null; } };
const decode = (s) => { try { return decodeURIComponent(s); } catch (e) { return s; } };
const links = Array.from(document.querySelectorAll('a[href]'))
  .filter(a => !a.getAttribute('href').startsWith('javascript:'))
  .map(a => {
    const u = url(a.getAttribute('href'));
    return u === null
      ? { bad: a.getAttribute('href') }
      : { text: (a.textContent || '').trim().slice(0, 60), origin: u.origin,
          protocol: u.protocol, path: decode(u.pathname), anchor: decode(u.hash.slice(1)) };
  });
const images = Array.from(document.images).map(i => ({
  src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0 }));
const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id)
  .concat(Array.from(document.querySelectorAll('a[name]')).map(a => a.name));
const code = Array.from(document.querySelectorAll('pre > code')).map(c => ({
  classes: c.className, text: c.textContent.slice(0, 60),
  spans: c.querySelectorAll('span[class^="hljs-"]').length }));
const sidebar = Array.from(document.querySelectorAll('#mdbook-sidebar a[href]'))
  .map(a => url(a.getAttribute('href'))).filter(u => u !== null).map(u => decode(u.pathname));
const gate = document.querySelector('.content .wb-gate');
const solution = document.querySelector('.content .wb-gated');
const gated = gate !== null && gate.offsetHeight > 0 && solution !== null
  && solution.offsetHeight === 0;
const questions = document.querySelectorAll('.content .wb-question').length;
return { origin: window.location.origin, links, images, ids, code, sidebar, gated, questions,
         title: document.title };
"#;

/// True once the page and its images have finished loading.
const LOADED: &str = r#"
return document.readyState === 'complete'
  && Array.from(document.images).every(i => i.complete);
"#;

/// What one browser session checks: every page (loads, links, images, code, quizzes, gates,
/// progress, search), or the views (every page on a phone, the pictured chapters, the reveals and
/// the interactive pictures).
#[derive(Debug, Clone, Copy)]
enum Part {
    Pages,
    Views,
}

impl BookCheck {
    async fn run(&self, driver: &str, part: Part) -> Result<Report, String> {
        let profile = self.profile.join(format!("{part:?}"));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": self.chromium,
                "args": CHROMIUM_ARGS.iter().map(|a| a.to_string())
                    .chain([format!("--user-data-dir={}", profile.display())])
                    .collect::<Vec<_>>(),
            }),
        );
        caps.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(driver)
            .await
            .map_err(|e| format!("starting a Chromium session through chromedriver: {e}"))?;
        let timeouts = fantoccini::wd::TimeoutConfiguration::new(
            Some(Duration::from_secs(30)),
            Some(Duration::from_secs(30)),
            Some(Duration::ZERO),
        );
        let result = match client.update_timeouts(timeouts).await {
            Ok(()) => match part {
                Part::Pages => self.check(&client).await,
                Part::Views => self.check_views(&client).await,
            },
            Err(e) => Err(format!("setting the session's timeouts: {e}")),
        };
        let _ = client.close().await;
        result
    }

    async fn check(&self, client: &Client) -> Result<Report, String> {
        let mut report = Report::default();
        let mut pages = BTreeMap::new();
        let mut origin = String::new();
        let files = html_files(&self.dest);
        if files.is_empty() {
            return Err(format!("{} holds no HTML page", self.dest.display()));
        }
        let _ = browser_log(client).await?; // Start from an empty log.
        let mut lap = Lap::new("pages");
        let mut slowest = Vec::new();
        for file in &files {
            let opened = Instant::now();
            let info = self.open(client, file).await?;
            slowest.push((opened.elapsed(), file.clone()));
            report.pages += 1;
            for entry in browser_log(client).await? {
                report
                    .problems
                    .push(format!("{file}: browser log: {entry}"));
            }
            origin = info["origin"].as_str().unwrap_or_default().to_string();
            for problem in self.overflow(client, file, false).await? {
                report.problems.push(format!("at 1280 px, {problem}"));
            }
            for image in info["images"].as_array().into_iter().flatten() {
                report.images += 1;
                if image["ok"] != json!(true) {
                    report
                        .problems
                        .push(format!("{file}: the image {} did not load", image["src"]));
                }
            }
            for code in info["code"].as_array().into_iter().flatten() {
                report.code_blocks += 1;
                let classes = code["classes"].as_str().unwrap_or_default();
                let highlighted = classes.split(' ').any(|c| c == "hljs");
                let rust_without_colour =
                    classes.contains("language-rust") && code["spans"] == json!(0);
                if !highlighted || rust_without_colour {
                    report.problems.push(format!(
                        "{file}: a code block is not highlighted (class {classes:?}): {}",
                        code["text"]
                    ));
                }
            }
            if file == "index.html" {
                let listed: BTreeSet<String> = info["sidebar"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.as_str())
                    .map(page_path)
                    .collect();
                for page in &self.sidebar_pages {
                    if !listed.contains(page) {
                        report
                            .problems
                            .push(format!("the sidebar does not list {page}"));
                    }
                }
            }
            let mut links = Vec::new();
            for link in info["links"].as_array().into_iter().flatten() {
                if let Some(bad) = link.get("bad") {
                    report
                        .problems
                        .push(format!("{file}: a link the browser cannot parse: {bad}"));
                    continue;
                }
                let text = |k: &str| link[k].as_str().unwrap_or_default().to_string();
                if !matches!(text("protocol").as_str(), "http:" | "https:") {
                    continue; // mailto: and the like
                }
                links.push(Link {
                    from: file.clone(),
                    text: text("text"),
                    origin: text("origin"),
                    path: page_path(&text("path")),
                    anchor: text("anchor"),
                });
            }
            let ids = info["ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i.as_str().map(String::from))
                .collect();
            let stem = file.trim_end_matches(".html");
            if self.quizzes.join(format!("{stem}.toml")).is_file() {
                let questions = info["questions"].as_u64().unwrap_or(0);
                if !(3..=5).contains(&questions) {
                    report.problems.push(format!(
                        "{file} shows {questions} self-check questions (3 to 5 wanted)"
                    ));
                }
            }
            let gated = info["gated"] == json!(true);
            if is_solution_page(file) && !gated {
                report.problems.push(format!(
                    "{file} does not open on its gate with the solution hidden"
                ));
            }
            pages.insert(file.clone(), Page { ids, gated, links });
        }
        slowest.sort();
        let slowest: Vec<String> = slowest
            .iter()
            .rev()
            .take(5)
            .map(|(t, f)| format!("{f} {:.1} s", t.as_secs_f64()))
            .collect();
        lap.mark(&format!(
            "every page at 1280 px (slowest to open: {})",
            slowest.join(", ")
        ));

        for page in pages.values() {
            for link in &page.links {
                if link.origin != origin {
                    continue; // Outside the book: not followed (the test has no network).
                }
                report.links += 1;
                let what = format!("{}: the link {:?}", link.from, link.text);
                match pages.get(&link.path) {
                    Some(target) if is_solution_page(&link.path) && !target.gated => {
                        report.problems.push(format!(
                            "{what} goes to the solution {} without its gate",
                            link.path
                        ));
                    }
                    Some(target) => {
                        if !link.anchor.is_empty() && !target.ids.contains(&link.anchor) {
                            report.problems.push(format!(
                                "{what} goes to {}#{}, which has no such anchor",
                                link.path, link.anchor
                            ));
                        }
                    }
                    None if self.dest.join(&link.path).is_file() => {}
                    None => report.problems.push(format!(
                        "{what} goes to {}, which does not exist",
                        link.path
                    )),
                }
            }
        }

        report
            .problems
            .extend(self.answer_a_question(client).await?);
        report
            .problems
            .extend(self.answer_a_several_answer_question(client).await?);
        for file in files.iter().filter(|f| is_solution_page(f)) {
            report
                .problems
                .extend(self.open_the_gate(client, file).await?);
        }
        report
            .problems
            .extend(self.answers_kept_and_progress_shown(client).await?);

        lap.mark("questions, gates and progress");
        let (found, problems) = self.search(client).await?;
        report.search_results = found;
        report.problems.extend(problems);
        for entry in browser_log(client).await? {
            report
                .problems
                .push(format!("search: browser log: {entry}"));
        }
        if let Some(dir) = &self.screenshots {
            self.screenshots(client, dir).await?;
        }
        Ok(report)
    }

    /// Chapter 1 in each translation, at 1280 px and on a phone: the page is in its language
    /// (`<html lang>`), does not scroll sideways, shows its quiz with its choices, and its
    /// language picker opens the same page in English and back.
    async fn translated_chapters(&self, client: &Client) -> Result<Vec<String>, String> {
        const PAGE: &str = "ch01-availability.html";
        let mut problems = Vec::new();
        for lang in TRANSLATIONS {
            let file = format!("{lang}/{PAGE}");
            for (width, phone) in [(1280, false), (PHONE_WIDTH, true)] {
                client
                    .set_window_size(width, 900)
                    .await
                    .map_err(|e| format!("resizing the window: {e}"))?;
                self.open(client, &file).await?;
                for problem in self.overflow(client, &file, phone).await? {
                    problems.push(format!("at {width} px, {problem}"));
                }
                let seen = client
                    .execute(
                        "return { lang: document.documentElement.lang, \
                         options: Array.from(document.querySelectorAll('select.wb-language option')) \
                           .map(o => [o.lang, o.selected]), \
                         choices: document.querySelectorAll('.wb-question .wb-choice').length, \
                         picker: (() => { const r = document.querySelector('select.wb-language'); \
                           if (!r) return false; const b = r.getBoundingClientRect(); \
                           return b.width > 0 && b.right <= window.innerWidth; })() };",
                        vec![],
                    )
                    .await
                    .map_err(|e| format!("inspecting {file}: {e}"))?;
                if seen["lang"] != json!(lang) {
                    problems.push(format!("{file}: <html lang> is {}", seen["lang"]));
                }
                let options = seen["options"].as_array().cloned().unwrap_or_default();
                if options.len() != 1 + TRANSLATIONS.len()
                    || !options.contains(&json!([lang, true]))
                {
                    problems.push(format!(
                        "at {width} px, {file}: the language picker offers {options:?}"
                    ));
                }
                if seen["picker"] != json!(true) {
                    problems.push(format!(
                        "at {width} px, {file}: the language picker is not in the window"
                    ));
                }
                if seen["choices"].as_u64().unwrap_or(0) < 3 {
                    problems.push(format!(
                        "at {width} px, {file}: the quiz shows {} choices",
                        seen["choices"]
                    ));
                }
            }
            // The picker keeps the reader on the page: to English and back.
            for (to, expected) in [("en", PAGE.to_string()), (lang, file.clone())] {
                client
                    .execute(
                        "const s = document.querySelector('select.wb-language'); \
                         s.value = Array.from(s.options).find(o => o.lang === arguments[0]).value; \
                         s.dispatchEvent(new Event('change'));",
                        vec![json!(to)],
                    )
                    .await
                    .map_err(|e| format!("{file}: choosing {to} in the picker: {e}"))?;
                let wanted = format!("{}{expected}", self.base);
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut at = String::new();
                while Instant::now() < deadline {
                    at = client
                        .current_url()
                        .await
                        .map_err(|e| e.to_string())?
                        .to_string();
                    if at == wanted {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if at != wanted {
                    problems.push(format!(
                        "{file}: the picker's {to} led to {at}, not {wanted}"
                    ));
                }
            }
        }
        client
            .set_window_size(1280, 900)
            .await
            .map_err(|e| format!("resizing the window back: {e}"))?;
        Ok(problems)
    }

    /// The views: every page on a phone, the pictured chapters in both themes, the answers'
    /// reveals, the interactive pictures of chapters 3, 7 and 13, and chapter 1 in each
    /// translation.
    async fn check_views(&self, client: &Client) -> Result<Report, String> {
        let files = html_files(&self.dest);
        let mut lap = Lap::new("views");
        let mut problems = self.on_a_phone(client, &files).await?;
        lap.mark("every page on a phone");
        problems.extend(self.pictured_chapters_fit_a_phone(client, &files).await?);
        lap.mark("pictured chapters on a phone");
        problems.extend(self.answers_open_when_their_exercise_passes(client).await?);
        lap.mark("answers open");
        problems.extend(self.step_through_the_history(client).await?);
        lap.mark("history view");
        problems.extend(self.pinned_memory_and_streams(client).await?);
        lap.mark("pinned memory view");
        problems.extend(self.step_through_the_block_pool(client).await?);
        lap.mark("block pool view");
        problems.extend(self.translated_chapters(client).await?);
        lap.mark("translated chapters");
        for entry in browser_log(client).await? {
            problems.push(format!("views: browser log: {entry}"));
        }
        Ok(Report {
            problems,
            ..Report::default()
        })
    }

    /// Answers chapter 3's first question wrongly: the page says so, marks the right choice and
    /// shows the explanation.
    async fn answer_a_question(&self, client: &Client) -> Result<Vec<String>, String> {
        let file = "ch03-drop-and-empty-cache.html";
        self.open(client, file).await?;
        let seen = client
            .execute(
                "const q = document.querySelector('.content .wb-question'); \
                 if (q === null) return 'no question'; \
                 const e = q.querySelector('.wb-explanation'); \
                 if (e === null || e.offsetHeight !== 0) return 'the explanation shows before'; \
                 const wrong = q.querySelector('.wb-choice[data-right=\"false\"]'); \
                 wrong.scrollIntoView(); wrong.click(); \
                 const verdict = q.querySelector('.wb-verdict').textContent; \
                 const right = q.querySelector('.wb-choice.wb-right'); \
                 return [verdict, e.offsetHeight > 0 && e.open, right !== null \
                   && right.getAttribute('data-right') === 'true', e.textContent.trim()];",
                vec![],
            )
            .await
            .map_err(|e| format!("answering a question on {file}: {e}"))?;
        let mut problems = Vec::new();
        match seen.as_array().map(Vec::as_slice) {
            Some([verdict, shown, marked, text]) => {
                if verdict != &json!("Not quite.") {
                    problems.push(format!("{file}: a wrong answer's verdict is {verdict}"));
                }
                if shown != &json!(true)
                    || !text.as_str().is_some_and(|t| t.contains("The answer:"))
                {
                    problems.push(format!("{file}: the explanation did not show ({text})"));
                }
                if marked != &json!(true) {
                    problems.push(format!("{file}: the right choice is not marked"));
                }
            }
            _ => problems.push(format!("{file}: answering the first question: {seen}")),
        }
        if let Some(dir) = &self.screenshots {
            self.screenshot(client, dir, "ch03-question-answered")
                .await?;
        }
        Ok(problems)
    }

    /// Chapter 4's "pick all that apply" question ([`SEVERAL_PAGE`]), in the light and navy
    /// themes at 1280 and 390 px: it says so and shows a checkbox per choice and a check button;
    /// checking with no box ticked asks for one and answers nothing; one right box only, ticked
    /// with the space key and checked with the Enter key, is "Not quite." and marks every right
    /// choice; every right box, clicked, is "Right.". Each answer opens the explanation, leaves
    /// the boxes disabled and makes nothing scroll sideways; the two themes colour it differently.
    async fn answer_a_several_answer_question(
        &self,
        client: &Client,
    ) -> Result<Vec<String>, String> {
        use fantoccini::Locator::Css;
        let file = format!("{SEVERAL_PAGE}.html");
        let mut problems = Vec::new();
        let mut backgrounds = BTreeMap::new();
        for theme in ["light", "navy"] {
            for width in [1280, PHONE_WIDTH] {
                let at = format!("{file} ({theme}, {width} px)");
                client
                    .set_window_size(width, 900)
                    .await
                    .map_err(|e| format!("resizing the window: {e}"))?;
                self.open(client, &file).await?;
                choose_theme(client, theme).await?;
                client
                    .execute(FORGET_SEVERAL, vec![json!(SEVERAL_PAGE)])
                    .await
                    .map_err(|e| format!("forgetting the answers: {e}"))?;
                let state = || async {
                    client
                        .execute(SEVERAL_STATE, vec![])
                        .await
                        .map_err(|e| format!("{at}: reading the question: {e}"))
                };
                // One right box only, by keyboard.
                self.open(client, &file).await?;
                let before = state().await?;
                if before.is_null() {
                    problems.push(format!("{at}: no \"pick all that apply\" question"));
                    continue;
                }
                let choices = before["choices"].as_u64().unwrap_or(0);
                if before["pick"] != json!("Pick all that apply.")
                    || before["boxes"] != json!(choices)
                    || choices < 3
                    || before["button"] != json!(true)
                    || before["explanation"] != json!(false)
                    || before["live"] != json!("polite")
                {
                    problems.push(format!("{at}: before answering, the question is {before}"));
                }
                let submit = client
                    .find(Css(".content .wb-submit"))
                    .await
                    .map_err(|e| format!("{at}: the check button: {e}"))?;
                point_at(client, &submit, true)
                    .await
                    .map_err(|e| format!("{at}: the check button with no box ticked: {e}"))?;
                let empty = state().await?;
                if empty["verdict"] != json!("Tick at least one box first.")
                    || empty["explanation"] != json!(false)
                    || empty["disabled"] != json!(false)
                {
                    problems.push(format!("{at}: checked with no box ticked, it is {empty}"));
                }
                client
                    .find(Css(".content label.wb-choice[data-right=\"true\"] input"))
                    .await
                    .map_err(|e| format!("{at}: a right box: {e}"))?
                    .send_keys(" ")
                    .await
                    .map_err(|e| format!("{at}: ticking a right box with the space key: {e}"))?;
                submit
                    .send_keys("\u{E007}")
                    .await
                    .map_err(|e| format!("{at}: pressing Enter on the check button: {e}"))?;
                let wrong = state().await?;
                if wrong["ticked"] != json!(1)
                    || wrong["verdict"] != json!("Not quite.")
                    || wrong["wrong"] != json!(0)
                {
                    problems.push(format!("{at}: one right box only gives {wrong}"));
                }
                for problem in self.overflow(client, &file, width == PHONE_WIDTH).await? {
                    problems.push(format!("{at}, answered: {problem}"));
                }
                // Every right box, by mouse (a tap on a phone), on the page asked afresh.
                client
                    .execute(FORGET_SEVERAL, vec![json!(SEVERAL_PAGE)])
                    .await
                    .map_err(|e| format!("forgetting the answers: {e}"))?;
                self.open(client, &file).await?;
                let boxes = client
                    .find_all(Css(".content label.wb-choice[data-right=\"true\"] input"))
                    .await
                    .map_err(|e| format!("{at}: the right boxes: {e}"))?;
                for right in &boxes {
                    point_at(client, right, true)
                        .await
                        .map_err(|e| format!("{at}: ticking a right box: {e}"))?;
                }
                let submit = client
                    .find(Css(".content .wb-submit"))
                    .await
                    .map_err(|e| format!("{at}: the check button: {e}"))?;
                point_at(client, &submit, true)
                    .await
                    .map_err(|e| format!("{at}: the check button: {e}"))?;
                let right = state().await?;
                if boxes.len() < 2
                    || right["ticked"] != json!(boxes.len())
                    || right["verdict"] != json!("Right.")
                {
                    problems.push(format!("{at}: every right box gives {right}"));
                }
                for (what, seen) in [("one right box only", &wrong), ("every right box", &right)] {
                    if seen["explanation"] != json!(true)
                        || !seen["text"]
                            .as_str()
                            .is_some_and(|t| t.contains("The right answers:"))
                        || seen["disabled"] != json!(true)
                        || seen["marked"] != json!(true)
                    {
                        problems.push(format!(
                            "{at}: after {what}, the explanation, the disabled boxes or the \
                             marks are missing: {seen}"
                        ));
                    }
                }
                backgrounds.insert(theme, right["background"].clone());
                if let Some(dir) = &self.screenshots {
                    self.screenshot(client, dir, &format!("{SEVERAL_PAGE}-quiz-{theme}-{width}"))
                        .await?;
                }
            }
        }
        if backgrounds.get("light") == backgrounds.get("navy") {
            problems.push(format!(
                "{file}: the question's choices are {:?} in the light and navy themes alike",
                backgrounds.get("light")
            ));
        }
        light_at_1280(client).await?;
        Ok(problems)
    }

    /// After chapter 3's first question was answered wrongly ([`Self::answer_a_question`]): the
    /// page shows it answered when opened again, the review page lists it with its right answer
    /// and forgets it on request; and the progress the server reports shows in chapter 1's
    /// exercise boxes and as a tick by chapter 3 in the sidebar.
    async fn answers_kept_and_progress_shown(
        &self,
        client: &Client,
    ) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        let file = "ch03-drop-and-empty-cache.html";
        self.open(client, file).await?;
        let kept = client
            .execute(
                "const q = document.querySelector('.content .wb-question'); \
                 return q !== null && q.classList.contains('wb-answered') \
                   && q.querySelector('.wb-verdict').textContent;",
                vec![],
            )
            .await
            .map_err(|e| format!("{file}: reading the question: {e}"))?;
        if kept != json!("Not quite.") {
            problems.push(format!(
                "{file}: opened again, the answered question shows {kept}"
            ));
        }
        let done = client
            .execute(
                "return Array.from(document.querySelectorAll('#mdbook-sidebar a.wb-done')) \
                   .map(a => a.getAttribute('href'));",
                vec![],
            )
            .await
            .map_err(|e| format!("{file}: reading the sidebar: {e}"))?;
        if !done
            .as_array()
            .is_some_and(|d| d.len() == 1 && d[0].as_str().is_some_and(|h| h.contains("ch03")))
        {
            problems.push(format!(
                "{file}: the sidebar ticks {done}, not chapter 3 alone"
            ));
        }
        let file = "review.html";
        self.open(client, file).await?;
        let review = client
            .execute(
                "const s = document.querySelector('#wb-review \
                   [data-chapter=\"ch03-drop-and-empty-cache\"]'); \
                 if (s === null) return 'no chapter 3'; \
                 const q = s.querySelectorAll('.wb-review-question'); \
                 const before = [q.length, s.textContent.includes('Right: ')]; \
                 s.querySelector('.wb-review-reset').click(); \
                 const gone = document.querySelector('#wb-review \
                   [data-chapter=\"ch03-drop-and-empty-cache\"]') === null; \
                 return before.concat([gone]);",
                vec![],
            )
            .await
            .map_err(|e| format!("{file}: reading the review: {e}"))?;
        if review != json!([1, true, true]) {
            problems.push(format!(
                "{file}: expected one wrong answer of chapter 3 with its right answer, forgotten \
                 on request; got {review}"
            ));
        }
        let file = "ch01-availability.html";
        self.open(client, file).await?;
        let marks = client
            .execute(
                "return Array.from(document.querySelectorAll('.content .wb-commands')) \
                   .map(b => { const p = b.querySelector('.wb-progress'); \
                     return [b.getAttribute('data-exercise'), p === null ? null : p.textContent]; });",
                vec![],
            )
            .await
            .map_err(|e| format!("{file}: reading the exercise boxes: {e}"))?;
        let expected = json!([
            ["cuda_status", "✓ Done: all 1 tests pass."],
            ["choose_device", "✗ Failing: 1 of 7 tests pass."],
            ["describe", null],
            ["predict_first_allocations", null]
        ]);
        if marks != expected {
            problems.push(format!(
                "{file}: the exercise boxes show {marks}, not {expected}"
            ));
        }
        if let Some(dir) = &self.screenshots {
            self.screenshot(client, dir, "ch01-progress").await?;
        }
        Ok(problems)
    }

    /// Presses a solution page's button: the solution shows, the gate goes, and stays gone when
    /// the page is opened again.
    async fn open_the_gate(&self, client: &Client, file: &str) -> Result<Vec<String>, String> {
        self.open(client, file).await?;
        let shown = client
            .execute(
                "const b = document.querySelector('.content .wb-gate-open'); \
                 if (b === null) return 'no button'; b.click(); \
                 const s = document.querySelector('.content .wb-gated'); \
                 const g = document.querySelector('.content .wb-gate'); \
                 return s !== null && s.offsetHeight > 0 && g.offsetHeight === 0 \
                   ? 'shown' : 'still hidden';",
                vec![],
            )
            .await
            .map_err(|e| format!("pressing the gate's button on {file}: {e}"))?;
        if shown == json!("shown") {
            if let Some(dir) = &self.screenshots
                && file.starts_with("ch03")
            {
                self.screenshot(client, dir, "ch03-solution-opened").await?;
            }
            // Once shown, the solution stays shown when the page is opened again.
            self.open(client, file).await?;
            let again = client
                .execute(
                    "const s = document.querySelector('.content .wb-gated'); \
                     const g = document.querySelector('.content .wb-gate'); \
                     return s !== null && s.offsetHeight > 0 && g.offsetHeight === 0;",
                    vec![],
                )
                .await
                .map_err(|e| format!("opening {file} again: {e}"))?;
            if again == json!(true) {
                Ok(Vec::new())
            } else {
                Ok(vec![format!(
                    "{file}: the solution, once shown, is behind its gate again after a reload"
                )])
            }
        } else {
            Ok(vec![format!(
                "{file}: pressing the gate's button left the solution {shown}"
            )])
        }
    }

    /// What scrolls sideways in the page now open ([`OVERFLOW`]), each named with `file`.
    async fn overflow(
        &self,
        client: &Client,
        file: &str,
        phone: bool,
    ) -> Result<Vec<String>, String> {
        let found = client
            .execute(OVERFLOW, vec![json!(phone)])
            .await
            .map_err(|e| format!("measuring {file}: {e}"))?;
        Ok(found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str())
            .map(|p| format!("{file}: {p}"))
            .collect())
    }

    /// Every page again in a phone's window ([`PHONE_WIDTH`]): no table or code scrolls sideways
    /// (the pictures may, in their own paragraph), and every picture is drawn wide enough for its
    /// smallest label to be [`MIN_LABEL_PX`] or more; a chapter with pictures, its reveals opened
    /// last, does not scroll sideways in the light theme ([`Self::reveals_open_fit`]). Puts the window back to 1280 px after.
    async fn on_a_phone(&self, client: &Client, files: &[String]) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        client
            .set_window_size(PHONE_WIDTH, 844)
            .await
            .map_err(|e| format!("resizing the window: {e}"))?;
        let inner = client
            .execute("return window.innerWidth;", vec![])
            .await
            .map_err(|e| format!("reading the window's width: {e}"))?;
        if inner.as_u64() != Some(u64::from(PHONE_WIDTH)) {
            problems.push(format!(
                "the window could not be made {PHONE_WIDTH} px wide (innerWidth {inner})"
            ));
        }
        let mut pictures = 0;
        let pictured = self.pictured(files);
        for file in files {
            self.open(client, file).await?;
            for problem in self.overflow(client, file, true).await? {
                problems.push(format!("at {PHONE_WIDTH} px, {problem}"));
            }
            let drawn = client
                .execute(PICTURES, vec![])
                .await
                .map_err(|e| format!("measuring the pictures of {file}: {e}"))?;
            for picture in drawn.as_array().into_iter().flatten() {
                pictures += 1;
                let src = picture["src"].as_str().unwrap_or_default();
                let width = picture["width"].as_f64().unwrap_or(0.0);
                let svg = std::fs::read_to_string(self.dest.join(src))
                    .map_err(|e| format!("{file}: reading the picture {src}: {e}"))?;
                let Some((natural, smallest)) = svg_width_and_smallest_font(&svg) else {
                    problems.push(format!("{file}: {src} has no width or no font-size"));
                    continue;
                };
                let label = smallest * width / natural;
                if label < MIN_LABEL_PX {
                    problems.push(format!(
                        "at {PHONE_WIDTH} px, {file}: {src} is drawn {width:.0} px wide of \
                         {natural:.0}, so its {smallest} px labels are {label:.1} px \
                         (at least {MIN_LABEL_PX} px wanted)"
                    ));
                }
            }
            if pictured.contains(&file) {
                // Last, as it opens the reveals: the page in the light theme, answers shown.
                problems.extend(self.reveals_open_fit(client, file, "light").await?);
            }
        }
        if pictures == 0 {
            problems.push(format!("at {PHONE_WIDTH} px no picture was measured"));
        }
        if let Some(dir) = &self.screenshots {
            for page in ["ch07-pinned-memory.html", "ch03-drop-and-empty-cache.html"] {
                self.open(client, page).await?;
                self.screenshot(
                    client,
                    dir,
                    &format!("{}-phone", page.trim_end_matches(".html")),
                )
                .await?;
            }
        }
        client
            .set_window_size(1280, 900)
            .await
            .map_err(|e| format!("resizing the window back: {e}"))?;
        Ok(problems)
    }

    /// Every chapter with pictures at [`PHONE_WIDTH`] in the navy theme, with its answers'
    /// reveals open: the page does not scroll sideways (the pictures shrink to the column; long
    /// lines scroll or wrap in their own box). The light theme's pass is `on_a_phone`'s, on the
    /// page it has open. Puts the browser back after.
    async fn pictured_chapters_fit_a_phone(
        &self,
        client: &Client,
        files: &[String],
    ) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        let pictured = self.pictured(files);
        if pictured.len() < 10 {
            problems.push(format!(
                "only {} chapters have pictures ({pictured:?})",
                pictured.len()
            ));
        }
        client
            .set_window_size(PHONE_WIDTH, 844)
            .await
            .map_err(|e| format!("resizing the window: {e}"))?;
        // The light theme was measured page by page in `on_a_phone`; here the dark one. The
        // theme is the reader's choice kept in localStorage, so it is chosen once, on the first
        // page, and every page after opens in it.
        let theme = "navy";
        if let Some(first) = pictured.first() {
            self.open(client, first).await?;
            choose_theme(client, theme).await?;
        }
        for file in &pictured {
            self.open(client, file).await?;
            problems.extend(self.reveals_open_fit(client, file, theme).await?);
        }
        light_at_1280(client).await?;
        Ok(problems)
    }

    /// The chapters with pictures (a timeline of their own in `pictures/`), solutions left out.
    fn pictured<'a>(&self, files: &'a [String]) -> Vec<&'a String> {
        files
            .iter()
            .filter(|f| {
                let stem = f.trim_end_matches(".html");
                !is_solution_page(f)
                    && self
                        .dest
                        .join("pictures")
                        .join(format!("{stem}-timeline.svg"))
                        .is_file()
            })
            .collect()
    }

    /// On the page open at [`PHONE_WIDTH`] in `theme`: with every answer's reveal open, the page
    /// does not scroll sideways (the pictures shrink to the column; long lines scroll or wrap in
    /// their own box), and the theme applied. Takes chapter 10's screenshots when asked.
    async fn reveals_open_fit(
        &self,
        client: &Client,
        file: &str,
        theme: &str,
    ) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        let wide = client
            .execute(
                "document.querySelectorAll('.content details').forEach(d => d.open = true); \
                 const e = document.scrollingElement; \
                 return [e.scrollWidth, window.innerWidth, \
                         document.documentElement.className];",
                vec![],
            )
            .await
            .map_err(|e| format!("measuring {file}: {e}"))?;
        let (scroll, inner) = (wide[0].as_f64(), wide[1].as_f64());
        if !wide[2].as_str().is_some_and(|c| c.contains(theme)) {
            problems.push(format!("{file}: the {theme} theme did not apply ({wide})"));
        }
        if scroll.zip(inner).is_none_or(|(s, i)| s > i) {
            problems.push(format!(
                "at {PHONE_WIDTH} px in the {theme} theme, {file} scrolls sideways: \
                 scrollWidth {} in a window of {}",
                wide[0], wide[1]
            ));
        }
        if let Some(dir) = &self.screenshots
            && file.starts_with("ch10")
        {
            for (what, css) in [
                ("message", ".content pre"),
                ("timeline", ".content img[src$='-timeline.svg']"),
                ("view", ".content .wb-memview"),
                ("answer", ".content details.wb-answer"),
            ] {
                client
                    .execute(
                        "const e = document.querySelector(arguments[0]); \
                         if (e !== null) e.scrollIntoView({block: 'start'});",
                        vec![json!(css)],
                    )
                    .await
                    .map_err(|e| format!("scrolling to {css}: {e}"))?;
                self.screenshot(client, dir, &format!("ch10-phone-{theme}-{what}"))
                    .await?;
            }
        }
        Ok(problems)
    }

    /// An answer's reveal (`<details class="wb-answer">`) opens by itself when the progress the
    /// server reports says its exercise passes (chapter 3's prediction), and stays closed while
    /// it fails (chapter 10's).
    async fn answers_open_when_their_exercise_passes(
        &self,
        client: &Client,
    ) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        for (file, want_open) in [
            ("ch03-drop-and-empty-cache.html", true),
            ("ch10-out-of-memory.html", false),
        ] {
            self.open(client, file).await?;
            // The progress arrives after the page: wait for the exercise box's mark.
            let deadline = Instant::now() + Duration::from_secs(10);
            let reveals = loop {
                let state = client
                    .execute(
                        "const marked = document.querySelector('.content .wb-progress') !== null; \
                         const r = Array.from(document.querySelectorAll('.content details.wb-answer')); \
                         return [marked, r.map(d => d.open), \
                                 r.map(d => d.querySelector('summary').textContent)];",
                        vec![],
                    )
                    .await
                    .map_err(|e| format!("reading the reveals of {file}: {e}"))?;
                if state[0] == json!(true) || Instant::now() > deadline {
                    break state;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let open = reveals[1].as_array().cloned().unwrap_or_default();
            if open.is_empty() || open.iter().any(|o| *o != json!(want_open)) {
                problems.push(format!(
                    "{file}: the answers' reveals are open: {} ({} wanted, the exercise {})",
                    reveals[1],
                    want_open,
                    if want_open { "passes" } else { "fails" }
                ));
            }
            let summaries = reveals[2].as_array().cloned().unwrap_or_default();
            if !summaries
                .iter()
                .all(|t| t.as_str().is_some_and(|t| t.contains("predict first")))
            {
                problems.push(format!(
                    "{file}: a reveal does not say to predict first: {}",
                    reveals[2]
                ));
            }
            if let Some(dir) = &self.screenshots
                && want_open
            {
                self.screenshot(client, dir, "ch03-answers-opened").await?;
            }
        }
        Ok(problems)
    }

    /// Chapter 3's interactive view of its pictures ([`HISTORY_PAGE`]), in the light and navy
    /// themes at 1280 px and on a phone: it appears beside the static pictures, describes the
    /// first event, "next" and the right arrow key each advance one event and "previous" goes
    /// back one, with the totals described changing as the history file says; hovering a block (1280 px) or tapping one
    /// (390 px) shows its size, requested size and stream; its text is 12 px or more; nothing
    /// scrolls sideways; the browser logs no error; the two themes colour it differently.
    async fn step_through_the_history(&self, client: &Client) -> Result<Vec<String>, String> {
        let file = format!("{HISTORY_PAGE}.html");
        let data = std::fs::read_to_string(
            self.dest
                .join(format!("pictures/{HISTORY_PAGE}-history.json")),
        )
        .map_err(|e| format!("reading {HISTORY_PAGE}'s history: {e}"))?;
        let history: Value =
            serde_json::from_str(&data).map_err(|e| format!("{HISTORY_PAGE}'s history: {e}"))?;
        let rows = history["trace"].as_array().cloned().unwrap_or_default();
        let size = |v: &Value| workbook::snapshot::viz::size(v.as_u64().unwrap_or(0));
        let totals = |i: usize| {
            rows.get(i).map_or_else(String::new, |r| {
                format!("→ allocated {}, reserved {}", size(&r[6]), size(&r[7]))
            })
        };
        let block = |i: usize| {
            rows.get(i).map_or_else(String::new, |r| {
                format!(
                    "block of {} ({} requested) on stream {}",
                    size(&r[3]),
                    size(&r[4]),
                    r[5]
                )
            })
        };
        let mut problems = Vec::new();
        if rows.len() < 4 || rows[1][0] != json!("alloc") || rows[2][0] != json!("alloc") {
            return Ok(vec![format!(
                "{HISTORY_PAGE}'s history does not begin with a segment and two allocs: the \
                 test of its interactive view needs another page"
            )]);
        }
        if totals(0) == totals(1) || totals(1) == totals(2) {
            problems.push(format!(
                "{HISTORY_PAGE}: events 1 to 3 leave the same totals: stepping cannot be seen"
            ));
        }
        let mut bars = BTreeMap::new();
        for theme in ["light", "navy"] {
            for width in [1280, PHONE_WIDTH] {
                let at = format!("{file} ({theme}, {width} px)");
                client
                    .set_window_size(width, 900)
                    .await
                    .map_err(|e| format!("resizing the window: {e}"))?;
                self.open(client, &file).await?;
                choose_theme(client, theme).await?;
                client
                    .execute(FORGET_SEVERAL, vec![json!(SEVERAL_PAGE)])
                    .await
                    .map_err(|e| format!("forgetting the answers: {e}"))?;
                self.open(client, &file).await?;
                let view = match client
                    .wait()
                    .at_most(Duration::from_secs(20))
                    .for_element(fantoccini::Locator::Css(".content .wb-memview"))
                    .await
                {
                    Ok(view) => view,
                    Err(e) => {
                        problems.push(format!("{at}: no interactive view appeared: {e}"));
                        continue;
                    }
                };
                let seen = |script: &'static str| async move {
                    client
                        .execute(script, vec![])
                        .await
                        .map_err(|e| format!("reading the view: {e}"))
                };
                let described = || async {
                    let v = seen(
                        "const v = document.querySelector('.content .wb-memview'); \
                         return [Number(v.getAttribute('data-event')), \
                                 v.querySelector('.wb-mv-event').textContent];",
                    )
                    .await?;
                    Ok::<(i64, String), String>((
                        v[0].as_i64().unwrap_or(-1),
                        v[1].as_str().unwrap_or_default().to_string(),
                    ))
                };
                let expect = |what: &str, (event, text): (i64, String), want: usize| {
                    (event != want as i64 || !text.contains(&totals(want))).then(|| {
                        format!(
                            "{at}: {what}, the view shows event {event} described as {text:?} \
                             (event {want}, {:?}, wanted)",
                            totals(want)
                        )
                    })
                };
                problems.extend(expect("opened", described().await?, 0));
                view.find(fantoccini::Locator::Css(".wb-mv-next"))
                    .await
                    .map_err(|e| format!("{at}: the next button: {e}"))?
                    .click()
                    .await
                    .map_err(|e| format!("{at}: pressing next: {e}"))?;
                problems.extend(expect("after next", described().await?, 1));
                // The right arrow key steps too, and does not turn mdBook's page.
                view.find(fantoccini::Locator::Css(".wb-mv-next"))
                    .await
                    .map_err(|e| format!("{at}: the next button: {e}"))?
                    .send_keys("\u{E014}")
                    .await
                    .map_err(|e| format!("{at}: pressing the right arrow: {e}"))?;
                let url = client.current_url().await.map_err(|e| e.to_string())?;
                if !url.path().ends_with(&file) {
                    problems.push(format!("{at}: the right arrow key left the page for {url}"));
                }
                problems.extend(expect("after the right arrow key", described().await?, 2));
                // Hover over the first block (a mouse) or tap the second (a phone).
                let (nth, want) = if width == PHONE_WIDTH { (2, 2) } else { (1, 1) };
                let target = view
                    .find(fantoccini::Locator::Css(&format!(
                        ".wb-mv-segment:first-child .wb-mv-block:nth-child({nth})"
                    )))
                    .await
                    .map_err(|e| format!("{at}: block {nth} of the segment map: {e}"))?;
                point_at(client, &target, width == PHONE_WIDTH)
                    .await
                    .map_err(|e| format!("{at}: a block of the segment map: {e}"))?;
                let info = seen(
                    "return document.querySelector('.content .wb-mv-block-info').textContent;",
                )
                .await?;
                let info = info.as_str().unwrap_or_default();
                if !info.to_lowercase().contains(&block(want).to_lowercase()) {
                    problems.push(format!(
                        "{at}: {} block {nth} shows {info:?} ({:?} wanted)",
                        if width == PHONE_WIDTH {
                            "tapping"
                        } else {
                            "hovering over"
                        },
                        block(want)
                    ));
                }
                let previous = view
                    .find(fantoccini::Locator::Css(".wb-mv-previous"))
                    .await
                    .map_err(|e| format!("{at}: the previous button: {e}"))?;
                // Centred, so that mdBook's menu bar at the top of the window is not over it.
                client
                    .execute(
                        "arguments[0].scrollIntoView({block: 'center'});",
                        vec![serde_json::to_value(&previous).map_err(|e| e.to_string())?],
                    )
                    .await
                    .map_err(|e| format!("{at}: scrolling to the previous button: {e}"))?;
                previous
                    .click()
                    .await
                    .map_err(|e| format!("{at}: pressing previous: {e}"))?;
                problems.extend(expect("after previous", described().await?, 1));
                // The block shown before may be gone at the new event: its words go too.
                let after = seen(
                    "return document.querySelector('.content .wb-mv-block-info').textContent;",
                )
                .await?;
                if after.as_str().is_none_or(|t| t.starts_with("Block of")) {
                    problems.push(format!("{at}: after a step the view still shows {after}"));
                }
                problems.extend(self.step_labels(client, &view, &at, &history).await?);
                let smallest = seen(
                    "let least = 1000; \
                     for (const e of document.querySelectorAll('.content .wb-memview, \
                         .content .wb-memview *')) { \
                       const own = Array.from(e.childNodes).some(n => n.nodeType === 3 \
                         && n.textContent.trim() !== ''); \
                       if (own) { least = Math.min(least, \
                         parseFloat(getComputedStyle(e).fontSize)); } } \
                     return least;",
                )
                .await?;
                if smallest.as_f64().unwrap_or(0.0) < 12.0 {
                    problems.push(format!(
                        "{at}: the view has text of {smallest} px (12 wanted)"
                    ));
                }
                for problem in self.overflow(client, &file, width == PHONE_WIDTH).await? {
                    problems.push(format!("({theme}, {width} px) {problem}"));
                }
                let bar = seen(
                    "return getComputedStyle(document.querySelector('.content .wb-mv-bar'))\
                     .backgroundColor;",
                )
                .await?;
                bars.insert(theme, bar);
                for entry in browser_log(client).await? {
                    problems.push(format!("{at}: browser log: {entry}"));
                }
                if let Some(dir) = &self.screenshots {
                    client
                        .execute(
                            "document.querySelector('.content .wb-memview').scrollIntoView(); \
                             window.scrollBy(0, -60);",
                            vec![],
                        )
                        .await
                        .map_err(|e| format!("{at}: scrolling to the view: {e}"))?;
                    self.screenshot(client, dir, &format!("{HISTORY_PAGE}-view-{theme}-{width}"))
                        .await?;
                }
            }
        }
        if bars.get("light") == bars.get("navy") {
            problems.push(format!(
                "{file}: the view's segment bars are {:?} in the light and navy themes alike",
                bars.get("light")
            ));
        }
        light_at_1280(client).await?;
        Ok(problems)
    }
    /// Chapter 13's block view, at 1280 px and on a phone: it replaces its placeholder, shows
    /// the first step's pool (one cell per block, those held by a request marked with it) and
    /// block tables as the data file says, steps to the next step, says what a block holds on
    /// hover (1280 px) or tap (390 px), and nothing scrolls sideways.
    async fn step_through_the_block_pool(&self, client: &Client) -> Result<Vec<String>, String> {
        let file = format!("{BLOCKS_PAGE}.html");
        let data = std::fs::read_to_string(
            self.dest
                .join(format!("pictures/{BLOCKS_PAGE}-blocks.json")),
        )
        .map_err(|e| format!("reading {BLOCKS_PAGE}'s block steps: {e}"))?;
        let blocks: Value =
            serde_json::from_str(&data).map_err(|e| format!("{BLOCKS_PAGE}'s blocks: {e}"))?;
        let (Some(num_blocks), Some(block_size)) =
            (blocks["num_blocks"].as_u64(), blocks["block_size"].as_u64())
        else {
            return Ok(vec![format!(
                "{BLOCKS_PAGE}'s block steps have no pool size: {data}"
            )]);
        };
        // The first step's first request and its first block: [request, tokens, total, [blocks]].
        let first = &blocks["steps"][0]["running"][0];
        let (request, tokens, block) = (
            first[0].as_u64().unwrap_or(u64::MAX),
            first[1].as_u64().unwrap_or(0),
            first[3][0].as_u64().unwrap_or(u64::MAX),
        );
        let block_words = format!(
            "Block {block}: request {request}, {} of {block_size} tokens",
            tokens.min(block_size)
        );
        let mut problems = Vec::new();
        for width in [1280, PHONE_WIDTH] {
            let at = format!("{file} ({width} px)");
            client
                .set_window_size(width, 900)
                .await
                .map_err(|e| format!("resizing the window: {e}"))?;
            self.open(client, &file).await?;
            let view = match client
                .wait()
                .at_most(Duration::from_secs(20))
                .for_element(fantoccini::Locator::Css(".content .wb-kvview"))
                .await
            {
                Ok(view) => view,
                Err(e) => {
                    problems.push(format!("{at}: no block view appeared: {e}"));
                    continue;
                }
            };
            let state = || async {
                client
                    .execute(
                        "const v = document.querySelector('.content .wb-kvview'); \
                         return [Number(v.getAttribute('data-step')), \
                                 v.querySelector('.wb-mv-event').textContent, \
                                 v.querySelectorAll('.wb-kv-pool .wb-kv-block').length, \
                                 v.querySelectorAll('.wb-kv-pool .wb-kv-free').length, \
                                 Array.from(v.querySelectorAll('.wb-kv-table')) \
                                   .map((t) => Number(t.getAttribute('data-request'))), \
                                 document.querySelectorAll('.content .wb-blocks > p').length];",
                        vec![],
                    )
                    .await
                    .map_err(|e| format!("{at}: reading the block view: {e}"))
            };
            let opened = state().await?;
            let step0 = &blocks["steps"][0];
            let held: u64 = step0["running"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r[3].as_array().map_or(0, |b| b.len() as u64))
                .sum();
            let tables: Vec<Value> = step0["running"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r[0].clone())
                .collect();
            let wanted = json!([
                0,
                format!(
                    "Step 0: {} running, {held} of {num_blocks} blocks held, {} waiting",
                    tables.len(),
                    step0["waiting"].as_array().map_or(0, Vec::len)
                ),
                num_blocks,
                num_blocks - held,
                tables,
                0
            ]);
            if opened != wanted {
                problems.push(format!(
                    "{at}: the block view opened on {opened} ({wanted} wanted)"
                ));
            }
            let next = view
                .find(fantoccini::Locator::Css(".wb-mv-next"))
                .await
                .map_err(|e| format!("{at}: the next button: {e}"))?;
            client
                .execute(
                    "arguments[0].scrollIntoView({block: 'center'});",
                    vec![serde_json::to_value(&next).map_err(|e| e.to_string())?],
                )
                .await
                .map_err(|e| format!("{at}: scrolling to next: {e}"))?;
            next.click()
                .await
                .map_err(|e| format!("{at}: pressing next: {e}"))?;
            let second = state().await?;
            if second[0] != json!(1)
                || !second[1].as_str().is_some_and(|t| {
                    t.starts_with(&format!("Step {}: ", blocks["steps"][1]["step"]))
                })
            {
                problems.push(format!("{at}: after next the block view shows {second}"));
            }
            let cell = view
                .find(fantoccini::Locator::Css(&format!(
                    ".wb-kv-pool .wb-kv-block[data-block=\"{block}\"]"
                )))
                .await
                .map_err(|e| format!("{at}: block {block} in the pool: {e}"))?;
            point_at(client, &cell, width == PHONE_WIDTH)
                .await
                .map_err(|e| format!("{at}: block {block}: {e}"))?;
            let info = client
                .execute(
                    "return document.querySelector('.content .wb-kvview .wb-mv-block-info')\
                     .textContent;",
                    vec![],
                )
                .await
                .map_err(|e| format!("{at}: reading the block's words: {e}"))?;
            // After one step the request holds one more token, in the same first block.
            let after_one = format!(
                "Block {block}: request {request}, {} of {block_size} tokens",
                (tokens + 1).min(block_size)
            );
            if !info
                .as_str()
                .is_some_and(|t| t == after_one || t == block_words)
            {
                problems.push(format!(
                    "{at}: block {block} says {info} ({after_one:?} wanted)"
                ));
            }
            for problem in self.overflow(client, &file, width == PHONE_WIDTH).await? {
                problems.push(format!("({width} px) {problem}"));
            }
            for entry in browser_log(client).await? {
                problems.push(format!("{at}: browser log: {entry}"));
            }
            if let Some(dir) = &self.screenshots {
                client
                    .execute(
                        "document.querySelector('.content .wb-kvview').scrollIntoView();",
                        vec![],
                    )
                    .await
                    .map_err(|e| format!("{at}: scrolling to the view: {e}"))?;
                self.screenshot(client, dir, &format!("{BLOCKS_PAGE}-blocks-{width}"))
                    .await?;
            }
        }
        light_at_1280(client).await?;
        Ok(problems)
    }

    /// Chapter 7 ([`ACTIVITY_PAGE`]) shows its pinned-memory and stream pictures, loaded, and at
    /// 390 px drawn wide enough for their smallest label to be [`MIN_LABEL_PX`] or more; its
    /// activity view describes the first call, steps to the next one, and says what a copy span
    /// is (stream, bytes, pinned block) on hover (1280 px) or tap (390 px), with the cpu note;
    /// nothing scrolls sideways.
    async fn pinned_memory_and_streams(&self, client: &Client) -> Result<Vec<String>, String> {
        let file = format!("{ACTIVITY_PAGE}.html");
        let data = std::fs::read_to_string(
            self.dest
                .join(format!("pictures/{ACTIVITY_PAGE}-history.json")),
        )
        .map_err(|e| format!("reading {ACTIVITY_PAGE}'s history: {e}"))?;
        let history: Value =
            serde_json::from_str(&data).map_err(|e| format!("{ACTIVITY_PAGE}'s history: {e}"))?;
        let work = history["activity"]["work"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(upload) = work.iter().position(|w| w[2] == json!("host_to_device")) else {
            return Ok(vec![format!(
                "{ACTIVITY_PAGE}'s history records no host-to-device copy: its pictures of pinned \
                 memory and streams are missing"
            )]);
        };
        let copy_words = format!(
            "copy host→device {} on stream {} from pinned block {}",
            workbook::snapshot::viz::size(work[upload][5].as_u64().unwrap_or(0)),
            work[upload][4],
            work[upload][6]
        );
        let mut problems = Vec::new();
        for width in [1280, PHONE_WIDTH] {
            let at = format!("{file} ({width} px)");
            client
                .set_window_size(width, 900)
                .await
                .map_err(|e| format!("resizing the window: {e}"))?;
            self.open(client, &file).await?;
            let drawn = client
                .execute(PICTURES, vec![])
                .await
                .map_err(|e| format!("{at}: measuring the pictures: {e}"))?;
            for kind in ["streams", "pinned"] {
                let src = format!("pictures/{ACTIVITY_PAGE}-{kind}.svg");
                let Some(picture) = drawn
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["src"] == json!(src))
                else {
                    problems.push(format!("{at}: the page does not show {src}"));
                    continue;
                };
                let svg = std::fs::read_to_string(self.dest.join(&src))
                    .map_err(|e| format!("reading {src}: {e}"))?;
                let (natural, smallest) = svg_width_and_smallest_font(&svg)
                    .ok_or_else(|| format!("{src} has no width or no font-size"))?;
                let label = smallest * picture["width"].as_f64().unwrap_or(0.0) / natural;
                if label < MIN_LABEL_PX {
                    problems.push(format!(
                        "{at}: {src}'s smallest labels are drawn at {label:.1} px"
                    ));
                }
            }
            let view = match client
                .wait()
                .at_most(Duration::from_secs(20))
                .for_element(fantoccini::Locator::Css(".content .wb-actview"))
                .await
            {
                Ok(view) => view,
                Err(e) => {
                    problems.push(format!("{at}: no activity view appeared: {e}"));
                    continue;
                }
            };
            let said = || async {
                client
                    .execute(
                        "const v = document.querySelector('.content .wb-actview'); \
                         return [Number(v.getAttribute('data-call')), \
                                 v.querySelector('.wb-mv-event').textContent, \
                                 v.querySelector('.wb-av-note').textContent];",
                        vec![],
                    )
                    .await
                    .map_err(|e| format!("{at}: reading the activity view: {e}"))
            };
            let first = said().await?;
            if first[0] != json!(0) || !first[1].as_str().is_some_and(|t| t.starts_with("Call 1: "))
            {
                problems.push(format!("{at}: the activity view opened on {first}"));
            }
            if !first[2].as_str().is_some_and(|t| {
                t.contains("each copy and kernel runs when issued: nothing overlaps")
            }) {
                problems.push(format!("{at}: the activity view's note is {}", first[2]));
            }
            let next = view
                .find(fantoccini::Locator::Css(".wb-mv-next"))
                .await
                .map_err(|e| format!("{at}: the next button: {e}"))?;
            client
                .execute(
                    "arguments[0].scrollIntoView({block: 'center'});",
                    vec![serde_json::to_value(&next).map_err(|e| e.to_string())?],
                )
                .await
                .map_err(|e| format!("{at}: scrolling to next: {e}"))?;
            next.click()
                .await
                .map_err(|e| format!("{at}: pressing next: {e}"))?;
            let second = said().await?;
            if second[0] != json!(1)
                || !second[1]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Call 2: "))
            {
                problems.push(format!("{at}: after next the activity view shows {second}"));
            }
            let span = view
                .find(fantoccini::Locator::Css(&format!(
                    ".wb-av-span[data-call=\"{upload}\"]"
                )))
                .await
                .map_err(|e| format!("{at}: the first upload's span: {e}"))?;
            point_at(client, &span, width == PHONE_WIDTH)
                .await
                .map_err(|e| format!("{at}: the first upload's span: {e}"))?;
            let info = client
                .execute(
                    "return document.querySelector('.content .wb-actview .wb-mv-block-info')\
                     .textContent;",
                    vec![],
                )
                .await
                .map_err(|e| format!("{at}: reading the span's words: {e}"))?;
            if !info.as_str().is_some_and(|t| t.contains(&copy_words)) {
                problems.push(format!(
                    "{at}: the upload's span says {info} ({copy_words:?} wanted)"
                ));
            }
            for problem in self.overflow(client, &file, width == PHONE_WIDTH).await? {
                problems.push(format!("({width} px) {problem}"));
            }
            for entry in browser_log(client).await? {
                problems.push(format!("{at}: browser log: {entry}"));
            }
            if let Some(dir) = &self.screenshots {
                client
                    .execute(
                        "document.querySelector('.content .wb-actview').scrollIntoView(); \
                         window.scrollBy(0, -420);",
                        vec![],
                    )
                    .await
                    .map_err(|e| format!("{at}: scrolling to the view: {e}"))?;
                self.screenshot(client, dir, &format!("{ACTIVITY_PAGE}-activity-{width}"))
                    .await?;
            }
        }
        client
            .set_window_size(1280, 900)
            .await
            .map_err(|e| format!("resizing the window back: {e}"))?;
        Ok(problems)
    }

    /// The walkthrough's steps in the view: listed with their labels and ticked on the
    /// timeline; going to a step's first event shows that step, and stepping back from it
    /// shows the step before.
    async fn step_labels(
        &self,
        client: &Client,
        view: &fantoccini::elements::Element,
        at: &str,
        history: &Value,
    ) -> Result<Vec<String>, String> {
        let steps: Vec<(u64, String)> = history["steps"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|p| {
                        (
                            p[0].as_u64().unwrap_or(0),
                            p[1].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let Some(k) = steps.iter().position(|(i, _)| *i > 0).filter(|k| *k > 0) else {
            return Ok(vec![format!(
                "{at}: {HISTORY_PAGE}'s history has no second step after its first event \
                 ({steps:?}): the walkthrough's annotations are missing"
            )]);
        };
        let mut problems = Vec::new();
        let shown = client
            .execute(
                "const v = document.querySelector('.content .wb-memview'); \
                 return [Array.from(v.querySelectorAll('.wb-mv-step')).map(e => e.textContent), \
                         v.querySelectorAll('.wb-mv-step-tick').length];",
                vec![],
            )
            .await
            .map_err(|e| format!("{at}: reading the steps: {e}"))?;
        let labels: Vec<String> = steps.iter().map(|(_, l)| l.clone()).collect();
        if shown[0] != json!(labels) || shown[1] != json!(steps.len()) {
            problems.push(format!(
                "{at}: the view lists the steps {} with {} ticks ({labels:?} wanted)",
                shown[0], shown[1]
            ));
        }
        let state = || async {
            let v = client
                .execute(
                    "const v = document.querySelector('.content .wb-memview'); \
                     return [Number(v.getAttribute('data-event')), \
                             Number(v.getAttribute('data-step')), \
                             v.querySelector('.wb-mv-event').textContent, \
                             v.querySelector('.wb-mv-step.wb-mv-current').textContent];",
                    vec![],
                )
                .await
                .map_err(|e| format!("{at}: reading the view: {e}"))?;
            Ok::<Value, String>(v)
        };
        let expect = |what: &str, v: Value, event: u64, step: usize| {
            let label = &steps[step].1;
            let text = v[2].as_str().unwrap_or_default();
            (v[0] != json!(event)
                || v[1] != json!(step + 1)
                || !text.starts_with(&format!("Step {label}"))
                || v[3] != json!(label))
            .then(|| {
                format!("{at}: {what}, the view shows {v} (event {event} in step {label:?} wanted)")
            })
        };
        let button = view
            .find(fantoccini::Locator::Css(&format!(
                ".wb-mv-step:nth-child({}) .wb-mv-step-go",
                k + 1
            )))
            .await
            .map_err(|e| format!("{at}: step {}'s button: {e}", k + 1))?;
        client
            .execute(
                "arguments[0].scrollIntoView({block: 'center'});",
                vec![serde_json::to_value(&button).map_err(|e| e.to_string())?],
            )
            .await
            .map_err(|e| format!("{at}: scrolling to a step: {e}"))?;
        button
            .click()
            .await
            .map_err(|e| format!("{at}: choosing a step: {e}"))?;
        let first = steps[k].0;
        problems.extend(expect("after choosing a step", state().await?, first, k));
        let press = |class: &'static str| async move {
            let b = view
                .find(fantoccini::Locator::Css(class))
                .await
                .map_err(|e| format!("{at}: {class}: {e}"))?;
            client
                .execute(
                    "arguments[0].scrollIntoView({block: 'center'});",
                    vec![serde_json::to_value(&b).map_err(|e| e.to_string())?],
                )
                .await
                .map_err(|e| format!("{at}: scrolling to {class}: {e}"))?;
            b.click()
                .await
                .map_err(|e| format!("{at}: pressing {class}: {e}"))
        };
        press(".wb-mv-previous").await?;
        let before = steps.iter().rposition(|(i, _)| *i < first).unwrap_or(0);
        problems.extend(expect(
            "stepping back out of it",
            state().await?,
            first - 1,
            before,
        ));
        press(".wb-mv-next").await?;
        problems.extend(expect("stepping into it again", state().await?, first, k));
        Ok(problems)
    }

    /// Saves a screenshot of the window as `<dir>/<name>.png`.
    async fn screenshot(&self, client: &Client, dir: &Path, name: &str) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let png = client
            .screenshot()
            .await
            .map_err(|e| format!("screenshot {name}: {e}"))?;
        std::fs::write(dir.join(format!("{name}.png")), png)
            .map_err(|e| format!("writing {name}.png: {e}"))
    }

    /// Opens a page and waits until it and its images have loaded; returns what it holds.
    async fn open(&self, client: &Client, file: &str) -> Result<Value, String> {
        let url = format!("{}{file}", self.base);
        client
            .goto(&url)
            .await
            .map_err(|e| format!("opening {url}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let loaded = client
                .execute(LOADED, vec![])
                .await
                .map_err(|e| format!("{file}: {e}"))?;
            if loaded == json!(true) {
                break;
            }
            if Instant::now() > deadline {
                break; // The images that did not load are reported below.
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
            .execute(INSPECT, vec![])
            .await
            .map_err(|e| format!("inspecting {file}: {e}"))
    }

    /// Searches for [`SEARCH_WORD`] with the book's search box and checks the chapters found.
    async fn search(&self, client: &Client) -> Result<(usize, Vec<String>), String> {
        let url = format!("{}index.html?search={SEARCH_WORD}", self.base);
        client
            .goto(&url)
            .await
            .map_err(|e| format!("opening {url}: {e}"))?;
        let found_script = r#"
            const outer = document.getElementById('mdbook-searchresults-outer');
            const links = Array.from(document.querySelectorAll('#mdbook-searchresults a[href]'));
            if (outer === null || outer.classList.contains('hidden') || links.length === 0) {
                return null;
            }
            return links.map(a => decodeURIComponent(new URL(a.getAttribute('href'),
                                                             document.baseURI).pathname));
        "#;
        let deadline = Instant::now() + Duration::from_secs(20);
        let found = loop {
            let found = client
                .execute(found_script, vec![])
                .await
                .map_err(|e| format!("reading the search results: {e}"))?;
            if let Some(list) = found.as_array() {
                break list
                    .iter()
                    .filter_map(|p| p.as_str())
                    .map(page_path)
                    .collect::<BTreeSet<_>>();
            }
            if Instant::now() > deadline {
                return Ok((
                    0,
                    vec![format!(
                        "searching for {SEARCH_WORD:?} showed no results within 20 s"
                    )],
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut problems = Vec::new();
        for page in found.iter().filter(|p| is_solution_page(p)) {
            problems.push(format!(
                "searching for {SEARCH_WORD:?} shows the solution page {page}"
            ));
        }
        for page in &self.search_must_find {
            if !found.contains(page) {
                problems.push(format!(
                    "searching for {SEARCH_WORD:?} does not find {page} (found: {found:?})"
                ));
            }
        }
        Ok((found.len(), problems))
    }

    /// Saves the introduction and chapter 3 in the light and navy themes.
    async fn screenshots(&self, client: &Client, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        for theme in ["light", "navy"] {
            for page in [
                "introduction.html",
                "ch03-drop-and-empty-cache.html",
                "ch03-drop-and-empty-cache-solution.html",
            ] {
                self.open(client, page).await?;
                choose_theme(client, theme).await?;
                client
                    .execute(FORGET_SEVERAL, vec![json!(SEVERAL_PAGE)])
                    .await
                    .map_err(|e| format!("forgetting the answers: {e}"))?;
                self.open(client, page).await?;
                for (part, scroll) in [("top", 0), ("pictures", 1)] {
                    if scroll == 1 {
                        let moved = client
                            .execute(
                                "const i = document.querySelector('main img'); \
                                 if (i === null) return false; \
                                 i.scrollIntoView(); return true;",
                                vec![],
                            )
                            .await
                            .map_err(|e| format!("scrolling {page}: {e}"))?;
                        if moved != json!(true) {
                            continue;
                        }
                    }
                    let png = client
                        .screenshot()
                        .await
                        .map_err(|e| format!("screenshot of {page}: {e}"))?;
                    let name = format!("{}-{theme}-{part}.png", page.trim_end_matches(".html"));
                    std::fs::write(dir.join(&name), png)
                        .map_err(|e| format!("writing {name}: {e}"))?;
                }
            }
        }
        Ok(())
    }
}

/// Puts the browser back as the other checks expect it: the light theme, 1280 px wide.
/// Chooses mdBook's `theme` as a reader does (kept in localStorage): the pages opened after it
/// show it.
async fn choose_theme(client: &Client, theme: &str) -> Result<(), String> {
    client
        .execute(
            "localStorage.setItem('mdbook-theme', arguments[0]);",
            vec![json!(theme)],
        )
        .await
        .map_err(|e| format!("choosing the {theme} theme: {e}"))?;
    Ok(())
}

async fn light_at_1280(client: &Client) -> Result<(), String> {
    choose_theme(client, "light").await?;
    client
        .set_window_size(1280, 900)
        .await
        .map_err(|e| format!("resizing the window back: {e}"))?;
    Ok(())
}

/// Brings `element` into view and points at it as a learner would: a tap on a phone, the mouse
/// over it on a computer.
async fn point_at(
    client: &Client,
    element: &fantoccini::elements::Element,
    phone: bool,
) -> Result<(), String> {
    use fantoccini::actions::{InputSource, MouseActions, PointerAction};
    client
        .execute(
            "arguments[0].scrollIntoView({block: 'center'});",
            vec![serde_json::to_value(element).map_err(|e| e.to_string())?],
        )
        .await
        .map_err(|e| format!("scrolling to it: {e}"))?;
    if phone {
        return element
            .click()
            .await
            .map_err(|e| format!("tapping it: {e}"));
    }
    let hover = MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
        element: element.clone(),
        duration: None,
        x: 0.0,
        y: 0.0,
    });
    client
        .perform_actions(hover)
        .await
        .map_err(|e| format!("hovering over it: {e}"))
}

/// chromedriver's browser log since the last call: the entries at level SEVERE (uncaught errors,
/// `console.error`, resources that failed to load).
async fn browser_log(client: &Client) -> Result<Vec<String>, String> {
    let log = client
        .issue_cmd(BrowserLog)
        .await
        .map_err(|e| format!("reading the browser's log: {e}"))?;
    Ok(log
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["level"] == json!("SEVERE"))
        // toc.html (the sidebar for readers without JavaScript, shown in a frame) declares no
        // icon, so a browser opening it alone asks for /favicon.ico: not a fault of the book.
        .filter(|e| {
            !e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("/favicon.ico ")
        })
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect())
}

/// chromedriver's `POST /session/{id}/se/log` for the browser's log.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({ "type": "browser" }).to_string()),
        )
    }
}

/// A chapter's solution page (`<chapter>-solution.html`), which must open on its gate.
fn is_solution_page(path: &str) -> bool {
    path.ends_with("-solution.html")
}

/// An SVG's `width` and the smallest `font-size` of its text, in its own px.
fn svg_width_and_smallest_font(svg: &str) -> Option<(f64, f64)> {
    let attribute = |text: &str, name: &str| -> Vec<f64> {
        let key = format!(" {name}=\"");
        text.match_indices(&key)
            .filter_map(|(i, _)| {
                let rest = &text[i + key.len()..];
                rest[..rest.find('"')?].parse().ok()
            })
            .collect()
    };
    let tag = &svg[svg.find("<svg")?..];
    let width = *attribute(&tag[..tag.find('>')?], "width").first()?;
    let smallest = attribute(svg, "font-size")
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    smallest.is_finite().then_some((width, smallest))
}

/// The translations' folders in the built book (`workbook book` builds each one there).
const TRANSLATIONS: [&str; 2] = ["ko", "zh-CN"];

/// Every `.html` file of the built English book, relative to its root, sorted (the
/// translations are checked by [`BookCheck::translated_chapters`]).
fn html_files(dest: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir()
                && dir == root
                && TRANSLATIONS
                    .iter()
                    .any(|l| path.file_name() == Some(l.as_ref()))
            {
                continue;
            }
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "html")
                && let Ok(rel) = path.strip_prefix(root)
            {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dest, dest, &mut out);
    out.sort();
    out
}

/// A URL's path as a file of the book: no leading `/`, `index.html` for a directory.
fn page_path(path: &str) -> String {
    let path = path.trim_start_matches('/');
    if path.is_empty() || path.ends_with('/') {
        format!("{path}index.html")
    } else {
        path.to_string()
    }
}

/// The `.html` of every page SUMMARY.md links to, in its order.
fn summary_pages(summary: &str) -> Vec<String> {
    let mut pages = Vec::new();
    let mut rest = summary;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        if let Some(stem) = target.strip_suffix(".md") {
            pages.push(format!("{stem}.html"));
        }
        rest = &after[end..];
    }
    pages
}

/// The chapter pages (`chNN-*.md`, not solutions) listed in SUMMARY.md whose text mentions
/// `word`, as `.html`.
fn chapter_pages_mentioning(src: &Path, summary: &str, word: &str) -> Vec<String> {
    summary_pages(summary)
        .into_iter()
        .filter(|page| page.starts_with("ch") && !page.ends_with("-solution.html"))
        .filter(|page| {
            let md = src.join(page.replace(".html", ".md"));
            std::fs::read_to_string(md).is_ok_and(|text| text.contains(word))
        })
        .collect()
}

#[test]
fn an_svg_gives_its_width_and_smallest_label() {
    let svg = r#"<svg xmlns="x" width="750" height="400"><text font-size="13">a</text>
        <text x="1" font-size="11.5">b</text></svg>"#;
    assert_eq!(svg_width_and_smallest_font(svg), Some((750.0, 11.5)));
    assert_eq!(
        svg_width_and_smallest_font("<svg width=\"10\"></svg>"),
        None
    );
}

#[test]
fn summary_pages_are_read_in_order() {
    let summary = "# Summary\n\n[Intro](introduction.md)\n\n- [1. A](ch01-a.md)\n  - [Solution](ch01-a-solution.md)\n- [Draft]()\n";
    assert_eq!(
        summary_pages(summary),
        ["introduction.html", "ch01-a.html", "ch01-a-solution.html"]
    );
    assert_eq!(page_path("/"), "index.html");
    assert_eq!(page_path("/ch01-a.html"), "ch01-a.html");
}
