//! `workbook viz`: draws a snapshot as SVG with [`crate::snapshot::viz`]; with `--range`, a
//! window of its history read by [`crate::snapshot::analysis::window`].

use crate::snapshot::analysis;
use crate::snapshot::viz::{View, read_snapshot, render};
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Flags of `workbook viz`.
#[derive(Debug, Args)]
#[command(
    after_help = "Write a snapshot with `dev.record_memory_history(true)` before the work and \
                  `std::fs::write(path, dev.snapshot().to_json())` after it."
)]
pub struct VizArgs {
    /// The snapshot: the JSON that `dev.snapshot().to_json()` writes, or a snapshot pickle
    /// (`dev.dump_snapshot`, PyTorch's `torch.cuda.memory._dump_snapshot`).
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: PathBuf,
    /// The SVG file to write.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// What to draw: the timeline, the segment map, or both (one above the other).
    #[arg(long, value_enum, default_value_t = View::Both)]
    pub view: View,
    /// Only the events from START up to END (event indices, or microseconds with a us suffix),
    /// and the segments as they were at END: only those entries are held, so a window of a file
    /// too large for torch's viewer can be drawn.
    #[arg(long, value_name = "START..END")]
    pub range: Option<String>,
}

/// `workbook viz`: reads the snapshot, draws it, writes the SVG.
pub fn run(args: &VizArgs) -> Result<std::process::ExitCode> {
    let snapshot = match &args.range {
        Some(text) => {
            let range = analysis::Range::parse(text)?;
            analysis::window(&args.snapshot, range)?
        }
        None => read_snapshot(&args.snapshot)?,
    };
    let svg = render(&snapshot, args.view);
    std::fs::write(&args.output, svg)
        .with_context(|| format!("writing the picture to {}", args.output.display()))?;
    println!("wrote {}", args.output.display());
    Ok(std::process::ExitCode::SUCCESS)
}
