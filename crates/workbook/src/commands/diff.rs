//! `workbook diff A B`: two snapshots of the same program (before and after a change) side by
//! side: the peaks, what was reserved, the segments, and the allocation sites whose live bytes at
//! the peak grew or shrank. Each snapshot is read as `workbook inspect` reads it; the first device
//! with entries of each is compared.

use crate::commands::inspect::stack_text;
use crate::snapshot::analysis::{self, DeviceReport, Limits, Range};
use anyhow::Result;
use clap::Args;
use gpumem::format_bytes;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `workbook diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first snapshot (before).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The second snapshot (after).
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Only the events from START up to END of each (as `workbook inspect --range`).
    #[arg(long, value_name = "START..END")]
    pub range: Option<String>,
    /// How many frames of each stack to show.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub frames: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One figure in both snapshots.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// In A.
    pub a: u64,
    /// In B.
    pub b: u64,
    /// B minus A.
    pub change: i128,
}

impl Change {
    fn of(a: u64, b: u64) -> Change {
        Change {
            a,
            b,
            change: i128::from(b) - i128::from(a),
        }
    }
}

/// An allocation site whose live bytes at the peak differ.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SiteChange {
    /// Its frames (shown ones, innermost first).
    pub frames: Vec<String>,
    /// Live bytes at the peak.
    pub bytes: Change,
    /// Live blocks at the peak.
    pub blocks: Change,
}

/// What differs between two snapshots.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Diff {
    /// The first file.
    pub a: String,
    /// The second file.
    pub b: String,
    /// Peak allocated bytes.
    pub peak_allocated: Change,
    /// Peak reserved bytes.
    pub peak_reserved: Change,
    /// Reserved bytes at the allocated peak.
    pub reserved_at_peak: Change,
    /// Segments at the allocated peak.
    pub segments_at_peak: Change,
    /// Reserved minus allocated at the peak.
    pub reserved_minus_allocated: Change,
    /// The largest free block at the peak.
    pub largest_free_block: Change,
    /// Out-of-memory events.
    pub ooms: Change,
    /// Leak candidates' bytes (allocated in the range, alive at its end).
    pub leak_bytes: Change,
    /// Sites whose live bytes at the peak grew or shrank, the largest change first.
    pub sites: Vec<SiteChange>,
}

/// Compares two device reports (their sites keyed by their frames).
pub fn diff(a: &DeviceReport, b: &DeviceReport, files: (&str, &str)) -> Diff {
    // Per site: (bytes, blocks) in A, then in B.
    type Both = ((u64, u64), (u64, u64));
    let mut sites: BTreeMap<&[String], Both> = BTreeMap::new();
    for s in &a.sites {
        sites.entry(&s.frames).or_default().0 = (s.bytes, s.blocks);
    }
    for s in &b.sites {
        sites.entry(&s.frames).or_default().1 = (s.bytes, s.blocks);
    }
    let mut sites: Vec<SiteChange> = sites
        .into_iter()
        .filter(|(_, (x, y))| x.0 != y.0)
        .map(|(frames, (x, y))| SiteChange {
            frames: frames.to_vec(),
            bytes: Change::of(x.0, y.0),
            blocks: Change::of(x.1, y.1),
        })
        .collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.bytes.change.abs()));
    Diff {
        a: files.0.to_string(),
        b: files.1.to_string(),
        peak_allocated: Change::of(a.peak_allocated.bytes, b.peak_allocated.bytes),
        peak_reserved: Change::of(a.peak_reserved.bytes, b.peak_reserved.bytes),
        reserved_at_peak: Change::of(a.reserved_at_peak, b.reserved_at_peak),
        segments_at_peak: Change::of(a.segments_at_peak, b.segments_at_peak),
        reserved_minus_allocated: Change::of(
            a.fragmentation.reserved_minus_allocated,
            b.fragmentation.reserved_minus_allocated,
        ),
        largest_free_block: Change::of(
            a.fragmentation.largest_free_block,
            b.fragmentation.largest_free_block,
        ),
        ooms: Change::of(a.ooms.len() as u64, b.ooms.len() as u64),
        leak_bytes: Change::of(a.leak_bytes, b.leak_bytes),
        sites,
    }
}

/// `workbook diff`.
pub fn run(args: &DiffArgs) -> Result<ExitCode> {
    let range = match &args.range {
        Some(text) => Range::parse(text)?,
        None => Range::default(),
    };
    // Every site, so that one in A matches its twin in B.
    let limits = Limits {
        top: usize::MAX,
        frames: args.frames,
    };
    let a = analysis::inspect(&args.a, range, limits)?;
    let b = analysis::inspect(&args.b, range, limits)?;
    let d = diff(&a.devices[0], &b.devices[0], (&a.file, &b.file));
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&d).expect("a diff serialises")
        );
    } else {
        print!("{}", text(&d));
    }
    Ok(ExitCode::SUCCESS)
}

/// A signed change in bytes.
fn signed_bytes(change: i128) -> String {
    let size = format_bytes(change.unsigned_abs() as u64);
    match change.signum() {
        1 => format!("+{size}"),
        -1 => format!("-{size}"),
        _ => "0".to_string(),
    }
}

/// The diff as text.
pub fn text(d: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}\nB: {}\n", d.a, d.b);
    let _ = writeln!(out, "{:<28}  {:>12}  {:>12}  {:>12}", "", "A", "B", "B - A");
    let bytes_rows = [
        ("peak allocated", &d.peak_allocated),
        ("peak reserved", &d.peak_reserved),
        ("reserved at the peak", &d.reserved_at_peak),
        ("reserved - allocated at it", &d.reserved_minus_allocated),
        ("largest free block at it", &d.largest_free_block),
        ("leak candidates", &d.leak_bytes),
    ];
    for (name, c) in bytes_rows {
        let _ = writeln!(
            out,
            "{name:<28}  {:>12}  {:>12}  {:>12}",
            format_bytes(c.a),
            format_bytes(c.b),
            signed_bytes(c.change)
        );
    }
    for (name, c) in [
        ("segments at the peak", &d.segments_at_peak),
        ("out of memory events", &d.ooms),
    ] {
        let _ = writeln!(
            out,
            "{name:<28}  {:>12}  {:>12}  {:>+12}",
            c.a, c.b, c.change
        );
    }
    let _ = writeln!(
        out,
        "\nallocation sites whose live bytes at the peak changed ({})",
        d.sites.len()
    );
    let _ = writeln!(
        out,
        "{:>12}  {:>12}  {:>12}  {:>7}  frames",
        "B - A", "A", "B", "blocks"
    );
    for s in &d.sites {
        let _ = writeln!(
            out,
            "{:>12}  {:>12}  {:>12}  {:>7}  {}",
            signed_bytes(s.bytes.change),
            format_bytes(s.bytes.a),
            format_bytes(s.bytes.b),
            format!("{}->{}", s.blocks.a, s.blocks.b),
            stack_text(&s.frames)
        );
    }
    out
}
