//! `workbook start`: the learner's way in. Checks the environment in brief, builds the book,
//! shows progress and the next command, and serves the book on 127.0.0.1 (`--no-serve`: build and
//! report only).

use crate::book::serve::{self, Server};
use crate::commands::check;
use crate::commands::list;
use crate::course::app_state::Repo;
use crate::course::learner;
use crate::course::progress::StateFile;
use anyhow::Result;
use clap::Args;
use gpumem::{AllocatorConfig, Device};
use std::path::Path;
use std::process::ExitCode;

/// Flags of `workbook start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// Build the book and report, but do not serve it.
    #[arg(long)]
    pub no_serve: bool,
    /// Open the book in the browser (a warning if no browser can be started).
    #[arg(long)]
    pub open: bool,
    /// The port to serve on (default: 3000, or the next free one).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// The book's language: en, ko or zh-CN (default: from LANG, else en).
    #[arg(long, value_name = "LANG")]
    pub lang: Option<String>,
}

/// `workbook start`.
pub fn run(root: Option<&Path>, args: &StartArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let lang = crate::book::i18n::chosen_language(args.lang.as_deref())?;
    let cmd = learner::command_prefix(&repo);
    println!("GPU Memory Workbook\n");
    let (env_lines, env_ok) = environment();
    for line in env_lines {
        println!("  {line}");
    }
    if !env_ok {
        println!("  (details: {cmd} doctor)");
    }

    let book = match crate::book::build(&repo.book_dir(), None) {
        Ok(out) => {
            println!("  {:<12}built in {}", "book", learner::shown(&repo, &out));
            Some(out)
        }
        Err(e) => {
            println!("  {:<12}could not be built: {e:#}", "book");
            None
        }
    };

    let chapters = learner::load_chapters(&repo)?;
    let progress = StateFile::of(&repo).load()?;
    let (done, total) = list::totals(&chapters, &progress);
    println!("  {:<12}{}", "progress", learner::progress_bar(done, total));
    println!("  {:<12}{cmd} list", "details");
    println!();
    for line in learner::next_steps(&repo, &chapters, &progress) {
        println!("{line}");
    }
    println!();

    // The first check needs gpumem, its dependencies and the chapter's tests built: do it now,
    // while the learner reads (in the background when the book is served).
    let next = learner::first_unfinished(&chapters, &progress).cloned();
    let for_prepare = repo.clone();
    let prepare = move || {
        if let Some(chapter) = next {
            prepare_check(&for_prepare, &chapter);
        }
    };
    let Some(book) = book else {
        prepare();
        return Ok(ExitCode::FAILURE);
    };
    if args.no_serve {
        prepare();
        println!(
            "The book is in {}; open index.html there, or serve it: {cmd} book --serve",
            learner::shown(&repo, &book.join(lang.unwrap_or("")))
        );
        return Ok(ExitCode::SUCCESS);
    }
    let server = match args.port {
        Some(port) => Server::bind(&book, port)?,
        None => {
            let (server, note) = Server::bind_near(&book, serve::DEFAULT_PORT)?;
            if let Some(note) = note {
                println!("{note}");
            }
            server
        }
    };
    let for_progress = repo.clone();
    let server = server
        .with_progress(std::sync::Arc::new(move || {
            learner::progress_json(&for_progress)
        }))
        .with_language(lang);
    std::thread::spawn(prepare);
    crate::book::serve_until_interrupted(server, args.open)
}

/// Builds what the first `check` of `chapter` needs ([`check::prepare`]) and says how it went.
fn prepare_check(repo: &Repo, chapter: &crate::course::app_state::Chapter) {
    let name = &chapter.name;
    println!(
        "Preparing `check {name}` (gpumem and the tests, built once; cargo's progress follows)..."
    );
    let started = std::time::Instant::now();
    match check::prepare(repo, chapter) {
        Ok(true) => println!(
            "`check {name}` is ready: built in {:.0} s; checks now only run the tests.",
            started.elapsed().as_secs_f64()
        ),
        Ok(false) => println!(
            "Prepared `check {name}` in {:.0} s (your code does not compile yet: check shows why).",
            started.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!("warning: could not prepare `check {name}`: {e:#}"),
    }
}

/// A few lines on the device the exercises will use and whether the settings are sound; false
/// when something is broken.
fn environment() -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut ok = true;
    let cuda = match gpumem::cuda::unavailable_reason() {
        None => format!("available, {} device(s)", gpumem::cuda::device_count()),
        Some(reason) => format!("not available ({reason})"),
    };
    lines.push(format!("{:<12}{cuda}", "CUDA"));
    match Device::from_env() {
        Ok(dev) => {
            let name = dev
                .properties()
                .map(|p| format!(" ({})", p.name))
                .unwrap_or_default();
            let why = if dev.is_cuda() {
                ""
            } else {
                ": the caching allocator runs over host memory, and every number the book teaches \
                 comes out the same"
            };
            lines.push(format!("{:<12}{dev}{name}{why}", "device"));
        }
        Err(e) => {
            ok = false;
            lines.push(format!(
                "{:<12}GPUMEM_DEVICE names no usable device: {e}",
                "device"
            ));
        }
    }
    if let Err(e) = AllocatorConfig::from_env() {
        ok = false;
        lines.push(format!(
            "{:<12}GPUMEM_ALLOC_CONF is malformed: {e}",
            "settings"
        ));
    }
    if let Err(e) = gpumem::backend_cpu::cpu_capacity() {
        ok = false;
        lines.push(format!(
            "{:<12}GPUMEM_CPU_CAPACITY is malformed: {e}",
            "settings"
        ));
    }
    if ok {
        lines.push(format!("{:<12}ok", "settings"));
    }
    (lines, ok)
}
