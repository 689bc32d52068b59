//! `workbook viz`: draws a snapshot as SVG with [`crate::snapshot::viz`]; with `--range`, a
//! window of its history read by [`crate::snapshot::analysis::window`].

use crate::snapshot::analysis;
use crate::snapshot::viz::{View, read_device_snapshot, render};
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Flags of `workbook viz`.
#[derive(Debug, Args)]
#[command(
    after_help = "Write a snapshot with `dev.record_memory_history(true)` before the work and \
                  `std::fs::write(path, dev.snapshot().to_json())` after it.\n\nLive bytes are \
                  the bytes asked for (torch's requested_size, what torch's viewer and `workbook \
                  inspect` count); what the allocator's rounding adds is shown apart. The \
                  timeline draws the totals the file's trace gives: for a PyTorch snapshot the \
                  bytes asked for, for gpumem's own snapshot memory_allocated (the blocks' \
                  rounded sizes, as torch.cuda.memory_allocated())."
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
    /// The device of the snapshot to draw (default: the one whose allocated peak is the
    /// largest).
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
}

/// `workbook viz`: reads the snapshot, draws it, writes the SVG.
pub fn run(args: &VizArgs) -> Result<std::process::ExitCode> {
    let range = args
        .range
        .as_deref()
        .map(analysis::Range::parse)
        .transpose()?;
    if !gpumem::snapshot_pickle::is_pickle(&args.snapshot) {
        // A JSON file that is no gpumem snapshot is named as viz names it, before anything.
        read_device_snapshot(&args.snapshot, None)?;
    }
    let (snapshot, why) = match range {
        // One pass over the file: a window of a file too large for torch's viewer.
        Some(range) => analysis::window(&args.snapshot, range, args.device)?,
        None => {
            let (device, why) = analysis::choose_device(&args.snapshot, args.device, "--device")?;
            (read_device_snapshot(&args.snapshot, Some(device))?, why)
        }
    };
    let svg = render(&snapshot, args.view);
    std::fs::write(&args.output, svg)
        .with_context(|| format!("writing the picture to {}", args.output.display()))?;
    println!("drew {why}");
    println!("wrote {}", args.output.display());
    Ok(std::process::ExitCode::SUCCESS)
}
