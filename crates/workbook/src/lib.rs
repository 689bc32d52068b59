//! The GPU Memory Workbook's CLI, as a library so that its tests and the grader use the
//! same pieces: the repository ([`app_state`]), `chapter.toml` ([`chapter`]), scratch workspaces
//! ([`scratch`]), the per-test-process runner ([`runner`]), and one module per command.

#![warn(missing_docs)]

pub mod app_state;
pub mod book;
pub mod chapter;
pub mod check;
pub mod cli;
pub mod doctor;
pub mod embedded;
pub mod grade;
pub mod hint;
pub mod learner;
pub mod list;
pub mod pictures;
pub mod progress;
pub mod replay;
pub mod reset;
pub mod runner;
pub mod scratch;
pub mod serve;
pub mod solution;
pub mod start;
pub mod verify;
pub mod viz;
pub mod watch;

use anyhow::Result;
use app_state::Repo;
use cli::{Cli, Command};
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
            cli::ExportTarget::Gradescope(args) => {
                grade::export::command(
                    cli.root.as_deref(),
                    &args.out,
                    args.hidden_tests.as_deref(),
                    args.no_sandbox,
                )?;
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
        Command::Viz(args) => viz::run(&args),
        Command::Pictures(args) => pictures::run(cli.root.as_deref(), &args),
        Command::Replay(args) => replay::run(&args),
    }
}
