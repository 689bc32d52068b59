//! `workbook watch [chapter]`: checks the chapter again each time a file under its `src/` is saved.
//!
//! File-system events come from `notify` (inotify, FSEvents, ...). Some file systems send none
//! (network shares, some VM and container mounts): `--poll` compares the files' contents at an
//! interval instead, and watch polls by itself when the event watcher cannot start. A burst of
//! events (an editor's save is often several) is one change, and a check runs only when the
//! `.rs` files' contents differ from the last check's.

use crate::commands::check::{self, CheckOptions};
use crate::course::app_state::Repo;
use crate::course::learner;
use crate::course::progress::StateFile;
use anyhow::{Context, Result};
use clap::Args;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// Flags of `workbook watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The chapter, by name or unique prefix (`ch01`); default: the first one not done.
    #[arg(value_name = "CHAPTER")]
    pub chapter: Option<String>,
    /// Read the files at an interval instead of waiting for file-system events (for file systems
    /// that send none: network shares, some VM and container mounts).
    #[arg(long)]
    pub poll: bool,
    /// Milliseconds between two reads with --poll (and when events are not available).
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..))]
    pub poll_interval: u64,
    /// How the chapter's tests run.
    #[command(flatten)]
    pub tests: crate::commands::check::TestRunArgs,
}

/// How long the files must stay quiet after an event before the check runs.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// What the loop hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Something under the watched directory changed.
    Changed,
    /// The watcher reported an error (it keeps running).
    Error(String),
    /// Stop watching (Ctrl-C).
    Quit,
}

/// How the files are watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The platform's file-system events.
    Events,
    /// Reading the files every so often.
    Poll(Duration),
}

/// A running watcher; dropping it stops it.
pub struct ActiveWatcher {
    _watcher: Box<dyn Watcher + Send>,
    /// How it watches (a poller when events were asked for but could not start).
    pub mode: Mode,
}

/// Watches `dir` recursively, sending [`Signal`]s to `tx`. With [`Mode::Events`], a watcher that
/// cannot start gives way to a poller (`fallback_interval`), with a warning.
pub fn start(
    dir: &Path,
    mode: Mode,
    fallback_interval: Duration,
    tx: Sender<Signal>,
) -> Result<ActiveWatcher> {
    let events = || -> notify::Result<Box<dyn Watcher + Send>> {
        let mut w =
            notify::RecommendedWatcher::new(handler(tx.clone()), notify::Config::default())?;
        w.watch(dir, RecursiveMode::Recursive)?;
        Ok(Box::new(w))
    };
    let poll = |interval: Duration| -> notify::Result<Box<dyn Watcher + Send>> {
        let config = notify::Config::default()
            .with_poll_interval(interval)
            .with_compare_contents(true);
        let mut w = notify::PollWatcher::new(handler(tx.clone()), config)?;
        w.watch(dir, RecursiveMode::Recursive)?;
        Ok(Box::new(w))
    };
    match mode {
        Mode::Poll(interval) => Ok(ActiveWatcher {
            _watcher: poll(interval).with_context(|| format!("polling {}", dir.display()))?,
            mode,
        }),
        Mode::Events => with_fallback(events, || poll(fallback_interval), fallback_interval),
    }
}

/// The event watcher `events` makes, or when it fails, the poller `poll` makes (with a warning).
pub fn with_fallback(
    events: impl FnOnce() -> notify::Result<Box<dyn Watcher + Send>>,
    poll: impl FnOnce() -> notify::Result<Box<dyn Watcher + Send>>,
    interval: Duration,
) -> Result<ActiveWatcher> {
    match events() {
        Ok(watcher) => Ok(ActiveWatcher {
            _watcher: watcher,
            mode: Mode::Events,
        }),
        Err(e) => {
            eprintln!(
                "warning: file-system events are not available here ({e}); reading the files \
                 every {} ms instead",
                interval.as_millis()
            );
            Ok(ActiveWatcher {
                _watcher: poll().context("starting the polling watcher")?,
                mode: Mode::Poll(interval),
            })
        }
    }
}

fn handler(tx: Sender<Signal>) -> impl FnMut(notify::Result<notify::Event>) + Send + 'static {
    move |event| {
        let signal = match event {
            Ok(event) if is_change(&event.kind) => Signal::Changed,
            Ok(_) => return,
            Err(e) => Signal::Error(e.to_string()),
        };
        let _ = tx.send(signal);
    }
}

/// Whether an event can mean new contents: reads and opens (the check's own) cannot.
pub fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Decides whether a directory's code changed since the last look, from its `.rs` files'
/// contents: a save that changes nothing, or a file merely touched, runs no check.
#[derive(Debug, Default)]
pub struct ChangeDetector {
    last: Option<String>,
}

impl ChangeDetector {
    /// A detector that has seen nothing (the first look is a change).
    pub fn new() -> ChangeDetector {
        ChangeDetector::default()
    }

    /// Whether `dir`'s code differs from the last look; remembers this look.
    pub fn changed(&mut self, dir: &Path) -> Result<bool> {
        let digest = learner::src_digest(dir)?;
        let changed = self.last.as_ref() != Some(&digest);
        self.last = Some(digest);
        Ok(changed)
    }
}

/// The loop: waits for a change, lets a burst settle for `debounce`, and calls `on_change` when
/// `dir`'s code differs from the last look. Returns on [`Signal::Quit`] or when every sender is
/// gone.
pub fn run_loop(
    rx: &Receiver<Signal>,
    debounce: Duration,
    dir: &Path,
    detector: &mut ChangeDetector,
    on_change: &mut dyn FnMut(),
) -> Result<()> {
    loop {
        match rx.recv() {
            Err(_) | Ok(Signal::Quit) => return Ok(()),
            Ok(Signal::Error(e)) => {
                eprintln!("warning: the file watcher reported: {e}");
                continue;
            }
            Ok(Signal::Changed) => {}
        }
        loop {
            match rx.recv_timeout(debounce) {
                Ok(Signal::Changed) => continue,
                Ok(Signal::Error(e)) => eprintln!("warning: the file watcher reported: {e}"),
                Ok(Signal::Quit) => return Ok(()),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        if detector.changed(dir)? {
            on_change();
        }
    }
}

/// `workbook watch`.
pub fn run(root: Option<&Path>, args: &WatchArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let progress = StateFile::of(&repo).load()?;
    let chapter = learner::choose_chapter(&repo, args.chapter.as_deref(), &progress)?;
    let options = CheckOptions::from_flags(&args.tests);
    let src = chapter.dir.join("src");
    let shown = learner::shown(&repo, &src);
    let interval = Duration::from_millis(args.poll_interval);
    let mode = if args.poll {
        Mode::Poll(interval)
    } else {
        Mode::Events
    };

    let (tx, rx) = std::sync::mpsc::channel();
    let checking = Arc::new(AtomicBool::new(false));
    {
        let tx = tx.clone();
        let checking = checking.clone();
        if let Err(e) = ctrlc::set_handler(move || {
            if checking.load(Ordering::SeqCst) {
                // A check in progress: its tests die with this process; the state file is only
                // ever replaced whole, so stopping here loses nothing.
                eprintln!("\nwatch: stopped during a check");
                std::process::exit(130);
            }
            let _ = tx.send(Signal::Quit);
        }) {
            eprintln!("warning: Ctrl-C will stop watch abruptly ({e})");
        }
    }
    let watcher = start(&src, mode, interval, tx)?;
    let how = match watcher.mode {
        Mode::Events => {
            "on file-system events (if saving does not start a check, use --poll)".to_string()
        }
        Mode::Poll(every) => format!("by reading the files every {} ms", every.as_millis()),
    };
    let clear = std::io::stdout().is_terminal();
    let cmd = learner::command_prefix(&repo);
    let mut check_now = || {
        checking.store(true, Ordering::SeqCst);
        if clear {
            // Clear the screen and go home: each check replaces the last.
            print!("\x1b[2J\x1b[H");
        }
        match check::check_chapter(&repo, &chapter, &options) {
            Ok(check) => {
                print!("{}", check::render(&repo, &check));
                if check.passed() {
                    println!(
                        "\nCompare with the reference solution: {cmd} solution {}",
                        chapter.name
                    );
                    if let Ok(progress) = StateFile::of(&repo).load()
                        && let Ok(chapters) = learner::load_chapters(&repo)
                        && let Some((next, earlier)) =
                            learner::next_unfinished(&chapters, &progress, &chapter.name)
                    {
                        let what = if earlier {
                            "An earlier chapter is still unfinished"
                        } else {
                            "Next chapter"
                        };
                        println!("{what}: {cmd} watch {}", next.name);
                    }
                } else {
                    println!("\nStuck? {cmd} hint {}", chapter.name);
                }
            }
            Err(e) => eprintln!("error: {e:#}"),
        }
        println!("\nWatching {shown} {how}. Save to check again; Ctrl-C to stop.");
        checking.store(false, Ordering::SeqCst);
    };
    let mut detector = ChangeDetector::new();
    detector.changed(&src)?;
    check_now();
    run_loop(&rx, DEBOUNCE, &src, &mut detector, &mut check_now)?;
    drop(watcher);
    println!("watch: stopped.");
    Ok(ExitCode::SUCCESS)
}
