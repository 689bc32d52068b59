//! The command line: every command of `workbook`, gathered here; each command's flags live beside
//! it (`commands::check::CheckArgs`, `grade::GradeArgs`, ...).

use crate::book::{BookArgs, i18n::I18nArgs, pictures::PicturesArgs};
use crate::commands::{
    check::CheckArgs, diff::DiffArgs, hint::HintArgs, inspect::InspectArgs, list::ListArgs,
    replay::ReplayArgs, reset::ResetArgs, solution::SolutionArgs, start::StartArgs,
    verify::VerifyArgs, viz::VizArgs, watch::WatchArgs,
};
use crate::grade::{GradeArgs, export::ExportArgs};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The GPU Memory Workbook: check this machine, verify the exercises, build the book.
#[derive(Debug, Parser)]
#[command(
    name = "workbook",
    version,
    after_help = "Exit status: 0 when all is well, 1 when the command found problems (a failing \
                  check, a malformed setting), 2 when it could not run."
)]
pub struct Cli {
    /// The workbook's root directory (default: found from the current directory upwards).
    #[arg(long, global = true, env = "WORKBOOK_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start here: check this machine, build and serve the book, show your progress.
    Start(StartArgs),
    /// Every chapter and exercise with its state, your progress, and what to do next.
    List(ListArgs),
    /// Run a chapter's tests on your code: what passes, what fails, and why.
    Check(CheckArgs),
    /// Check a chapter again every time you save a file in its src/.
    Watch(WatchArgs),
    /// The next hint for an exercise, gentle first, then more explicit.
    Hint(HintArgs),
    /// Put a chapter's original stubs back in its src/ (your files are backed up first).
    Reset(ResetArgs),
    /// The reference solution of a chapter, once its tests pass.
    Solution(SolutionArgs),
    /// Report CUDA, the devices, the GPUMEM_* settings, and smoke-test the allocator.
    Doctor,
    /// Prove that every test fails on the stubs and passes on the reference solutions.
    Verify(VerifyArgs),
    /// Build the book (book/) into book/book/ or another directory, with each translation in
    /// its own folder (book/book/ko/, book/book/zh-CN/).
    Book(BookArgs),
    /// The book's translations: refresh po/messages.pot and merge it into `po/<lang>.po`
    /// (`update`), or show how much of each page is translated (`coverage`).
    I18n(I18nArgs),
    /// Grade submissions with the official (and hidden) tests: a table, Gradescope JSON, JUnit
    /// XML, CSV, and a feedback report per student.
    Grade(GradeArgs),
    /// Package the course: the repository a class receives (`export student --out DIR`), or the
    /// grader for a hosted autograder (`export gradescope --out autograder.zip`).
    Export(ExportArgs),
    /// Draw a gpumem snapshot as SVG: memory over time, and each segment with its blocks.
    Viz(VizArgs),
    /// Make the book's pictures from each chapter's walkthrough, or check they are up to date.
    Pictures(PicturesArgs),
    /// Replay allocation traces through a fresh caching allocator: peaks, fragmentation
    /// overhead, device reservations, time per event.
    Replay(ReplayArgs),
    /// What a snapshot's history says: peaks, the blocks and allocation sites at the peak,
    /// fragmentation, out-of-memory events, leak candidates.
    Inspect(InspectArgs),
    /// Two snapshots of the same program side by side: peaks, reserved, segments, and the
    /// allocation sites whose live bytes at the peak changed.
    Diff(DiffArgs),
}
