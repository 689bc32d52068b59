//! The command line: every command and flag of `workbook`.

use clap::{Args, Parser, Subcommand};
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
    /// Report CUDA, the devices, the GPUMEM_* settings, and smoke-test the allocator.
    Doctor,
    /// Prove that every test fails on the stubs and passes on the reference solutions.
    Verify(VerifyArgs),
    /// Build the book (book/) into book/book/ or another directory.
    Book(BookArgs),
}

/// Flags of `workbook verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Chapters to verify, by name or unique prefix (`ch01`); default: all.
    #[arg(value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Test processes to run at once (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is killed and counts as timed out.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
}

/// Flags of `workbook book`.
#[derive(Debug, Args)]
pub struct BookArgs {
    /// Where to write the HTML (default: book/book/).
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
}
