//! `workbook diff A B`: two snapshots of the same program (before and after a change) side by
//! side: the peaks, what was reserved, the segments, and the allocation sites whose live bytes at
//! the peak grew or shrank. Each snapshot is read as `workbook inspect` reads it; each device both
//! files hold is compared (or the one `--device` names), and sites are matched by their shown
//! frames (by default the first user frame: one line of the user's code).

use crate::snapshot::analysis::{self, DeviceReport, Limits, Range};
use crate::snapshot::frames::FrameNames;
use anyhow::{Result, bail};
use clap::Args;
use gpumem::format_bytes;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `workbook diff`.
#[derive(Debug, Args)]
#[command(
    after_help = "Live and allocated bytes are the bytes asked for (torch's requested_size), as \
                  `workbook inspect` counts them. Frames: as `workbook inspect --help` says; a \
                  site of A and one of B are the same site when their shown frames are the same."
)]
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
    /// How many user frames of each stack to show; sites are matched by them (1: by the line
    /// of your code that allocated).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub frames: u64,
    /// Only this device of each snapshot (default: every device both hold).
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
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
    /// Whether it is the blocks allocated before recording began.
    pub before_recording: bool,
    /// Live bytes at the peak.
    pub bytes: Change,
    /// Live blocks at the peak.
    pub blocks: Change,
}

/// What differs between two snapshots, device by device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Diffs {
    /// The first file.
    pub a: String,
    /// The second file.
    pub b: String,
    /// Which devices are compared, and why, in words.
    pub compared: String,
    /// One comparison per device.
    pub devices: Vec<Diff>,
}

/// What differs between one device of two snapshots.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Diff {
    /// The device.
    pub device: usize,
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
pub fn diff(a: &DeviceReport, b: &DeviceReport) -> Diff {
    // Per site: (bytes, blocks) in A, then in B.
    type Both = ((u64, u64), (u64, u64));
    let mut sites: BTreeMap<(bool, &[String]), Both> = BTreeMap::new();
    for s in &a.sites {
        sites
            .entry((s.before_recording, s.frames.as_slice()))
            .or_default()
            .0 = (s.bytes, s.blocks);
    }
    for s in &b.sites {
        sites
            .entry((s.before_recording, s.frames.as_slice()))
            .or_default()
            .1 = (s.bytes, s.blocks);
    }
    let mut sites: Vec<SiteChange> = sites
        .into_iter()
        .filter(|(_, (x, y))| x.0 != y.0)
        .map(|((before_recording, frames), (x, y))| SiteChange {
            frames: frames.to_vec(),
            before_recording,
            bytes: Change::of(x.0, y.0),
            blocks: Change::of(x.1, y.1),
        })
        .collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.bytes.change.abs()));
    Diff {
        device: a.device,
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
        frames: usize::try_from(args.frames).unwrap_or(usize::MAX),
    };
    let a = analysis::inspect(&args.a, range, limits, args.device)?;
    let b = analysis::inspect(&args.b, range, limits, args.device)?;
    let devices: Vec<Diff> = a
        .devices
        .iter()
        .filter_map(|x| {
            let y = b.devices.iter().find(|y| y.device == x.device)?;
            Some(diff(x, y))
        })
        .collect();
    let list = |r: &analysis::Report| -> Vec<String> {
        r.devices.iter().map(|d| d.device.to_string()).collect()
    };
    if devices.is_empty() {
        bail!(
            "{} and {} share no device: A has device(s) {}, B has {} (compare one of each with \
             two runs of `workbook inspect --device N`)",
            a.file,
            b.file,
            list(&a).join(", "),
            list(&b).join(", ")
        );
    }
    let compared: Vec<String> = devices.iter().map(|d| d.device.to_string()).collect();
    let compared = match args.device {
        Some(n) => format!("device {n} (--device {n})"),
        None if list(&a) == list(&b) && compared.len() == 1 => {
            format!("device {} (the only one with anything)", compared[0])
        }
        None => format!(
            "device(s) {}: every device both files hold (A has {}, B has {}; --device N for one)",
            compared.join(", "),
            list(&a).join(", "),
            list(&b).join(", ")
        ),
    };
    let d = Diffs {
        a: a.file,
        b: b.file,
        compared,
        devices,
    };
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

/// The diffs as text.
pub fn text(d: &Diffs) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}\nB: {}\ncompared: {}", d.a, d.b, d.compared);
    let names = FrameNames::of(
        d.devices
            .iter()
            .flat_map(|x| &x.sites)
            .flat_map(|s| &s.frames),
    );
    for x in &d.devices {
        if d.devices.len() > 1 {
            let _ = writeln!(out, "\ndevice {}", x.device);
        }
        out.push('\n');
        device_text(&mut out, x, &names);
    }
    out
}

/// One device's diff as text.
fn device_text(out: &mut String, d: &Diff, names: &FrameNames) {
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
            names.site(&s.frames, s.before_recording)
        );
    }
}
