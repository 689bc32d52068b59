//! `workbook`: the GPU Memory Workbook's command line.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = workbook::cli::Cli::parse();
    match workbook::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
