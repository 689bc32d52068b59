//! The GPU Memory Workbook's CLI, as a library so that its tests and the grader use the
//! same pieces. Its folders are its parts, each importing only those below it:
//! - [`cli`]: the command line, gathered from clap's definitions;
//! - [`commands`]: one module per learner's and maintainer's command;
//! - [`grade`]: the instructor's grading, its reports and the Gradescope package;
//! - [`book`]: building and serving the book, its pages and its allocator pictures;
//! - [`snapshot`]: what a snapshot file says (its history, read by `inspect`, `diff`, `viz` and
//!   `replay`) and its drawing, shared by the commands and the book's pictures;
//! - [`run`](mod@run): running learner code: scratch workspaces, the per-test-process runner, the sandbox;
//! - [`course`]: the course and the learner's state: the repository, `chapter.toml`, progress.

#![warn(missing_docs)]

pub mod book;
pub mod cli;
pub mod commands;
pub mod course;
pub mod grade;
pub mod run;
pub mod snapshot;

use anyhow::Result;
use book::pictures;
use cli::{Cli, Command};
use commands::{
    check, diff, doctor, hint, inspect, list, replay, reset, solution, start, verify, viz, watch,
};
use course::app_state::{self, Repo};
use std::process::ExitCode;
use std::time::Duration;

/// Runs the parsed command line; `Ok` carries the exit status (failures found are not errors).
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Start(args) => start::run(cli.root.as_deref(), &args),
        Command::List(args) => list::run(cli.root.as_deref(), &args),
        Command::Check(args) => check::run(cli.root.as_deref(), &args),
        Command::Watch(args) => watch::run(cli.root.as_deref(), &args),
        Command::Hint(args) => hint::run(cli.root.as_deref(), &args),
        Command::Reset(args) => reset::run(cli.root.as_deref(), &args),
        Command::Solution(args) => solution::run(cli.root.as_deref(), &args),
        Command::Doctor => Ok(match doctor::run() {
            doctor::Health::Good => ExitCode::SUCCESS,
            doctor::Health::Broken => ExitCode::FAILURE,
        }),
        Command::Grade(args) => grade::command(cli.root.as_deref(), &args),
        Command::Export(args) => match args.target {
            grade::export::ExportTarget::Gradescope(args) => {
                grade::export::command(cli.root.as_deref(), &args)?;
                Ok(ExitCode::SUCCESS)
            }
            grade::export::ExportTarget::Student(args) => {
                grade::student::command(cli.root.as_deref(), &args.out)?;
                Ok(ExitCode::SUCCESS)
            }
        },
        Command::Verify(args) => {
            let repo = Repo::from_option(cli.root.as_deref())?;
            let options = verify::VerifyOptions {
                jobs: args
                    .jobs
                    .map(usize::from)
                    .unwrap_or_else(app_state::default_jobs),
                timeout: Duration::from_secs(args.timeout),
            };
            let reports = verify::verify(&repo, &args.chapters, &options)?;
            print!("{}", verify::summary(&reports));
            Ok(if reports.iter().all(|r| r.problems.is_empty()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Book(args) => book::run(cli.root.as_deref(), &args),
        Command::I18n(args) => book::i18n::run(cli.root.as_deref(), &args),
        Command::Viz(args) => viz::run(&args),
        Command::Pictures(args) => pictures::run(cli.root.as_deref(), &args),
        Command::Replay(args) => replay::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Diff(args) => diff::run(&args),
    }
}
