//! `workbook inspect SNAPSHOT`: what a snapshot's history says about a job's memory (the reading
//! is [`crate::snapshot::analysis`]): the devices and settings, the peaks and when they came, at the
//! peak the largest live blocks and the allocation sites by recorded frames, the fragmentation,
//! the out-of-memory events and the leak candidates.

use crate::snapshot::analysis::{
    self, DeviceReport, Fragmentation, Limits, Range, Report, range_text,
};
use crate::snapshot::frames::FrameNames;
use anyhow::Result;
use clap::Args;
use gpumem::format_bytes;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `workbook inspect`.
#[derive(Debug, Args)]
#[command(
    after_help = "Record a snapshot in PyTorch with torch.cuda.memory._record_memory_history() \
                  before the work and torch.cuda.memory._dump_snapshot(\"snap.pickle\") after it. \
                  A state-only snapshot (no history) and the list torch.cuda.memory_snapshot() \
                  returns are read too.\n\nAllocated and live bytes are the bytes asked for \
                  (torch's requested_size, what torch's viewer counts), not the blocks' sizes \
                  rounded by the allocator; the rounding is in reserved - allocated.\n\nFrames: \
                  torch's own (its C++ allocator, its Python modules under torch/) and Python's \
                  library are left out, after the frames torch's viewer leaves out; a stack \
                  shows its first --frames user frames, innermost first, and blocks whose shown \
                  frames are the same are one allocation site (by default: one line of your \
                  code). A frame prints with its file's last part, or its whole path where two \
                  files share a name."
)]
pub struct InspectArgs {
    /// The snapshot: torch's pickle (`_dump_snapshot`), gpumem's snapshot (JSON or pickle), or a
    /// gpumem trace (replayed once on cpu).
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: PathBuf,
    /// Only the events from START up to END: event indices (`100..2000`) or times in
    /// microseconds as the trace records them (`1764000000000000us..1764000001000000us`); either
    /// end may be left out.
    #[arg(long, value_name = "START..END")]
    pub range: Option<String>,
    /// How many blocks, sites and leak candidates to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// How many user frames of each stack to show; sites are grouped by them (1: by the line
    /// of your code that allocated).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub frames: u64,
    /// Only this device of the snapshot (default: every device with entries or segments).
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `workbook inspect`.
pub fn run(args: &InspectArgs) -> Result<ExitCode> {
    let range = match &args.range {
        Some(text) => Range::parse(text)?,
        None => Range::default(),
    };
    let limits = Limits {
        top: args.top,
        frames: usize::try_from(args.frames).unwrap_or(usize::MAX),
    };
    let report = analysis::inspect(&args.snapshot, range, limits, args.device)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("a report serialises")
        );
    } else {
        print!("{}", text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The report as text.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}", report.file, report.kind);
    let conf = if report.alloc_conf.is_empty() {
        "(torch's defaults)".to_string()
    } else {
        report.alloc_conf.clone()
    };
    let _ = writeln!(out, "allocator settings: {conf}");
    let _ = writeln!(out, "range: {}", range_text(&report.range));
    let _ = writeln!(out, "reported: {}", report.device_choice);
    let names = FrameNames::of(report.devices.iter().flat_map(|d| {
        let blocks = d.largest_blocks.iter().chain(&d.leak_candidates);
        blocks
            .flat_map(|b| &b.frames)
            .chain(d.sites.iter().flat_map(|s| &s.frames))
            .chain(d.ooms.iter().flat_map(|o| &o.frames))
    }));
    for d in &report.devices {
        out.push('\n');
        device_text(&mut out, d, &names);
    }
    out
}

/// When a peak came, in words: the entry after which, and its time.
pub fn point_text(event: Option<u64>, time_us: Option<u64>) -> String {
    match (event, time_us) {
        (None, _) => "before the first event (when recording began)".to_string(),
        (Some(e), Some(t)) => format!("at event {e} (time_us {t})"),
        (Some(e), None) => format!("at event {e}"),
    }
}

/// An entry's index, or `-` for a block from before recording began.
fn event_text(event: Option<u64>) -> String {
    event.map_or_else(|| "-".to_string(), |e| e.to_string())
}

fn fragmentation_text(out: &mut String, f: &Fragmentation) {
    let _ = writeln!(
        out,
        "    reserved - allocated      {}",
        format_bytes(f.reserved_minus_allocated)
    );
    let _ = writeln!(
        out,
        "    largest free block        {}",
        format_bytes(f.largest_free_block)
    );
    for c in &f.by_class {
        let _ = writeln!(
            out,
            "    free in {:<6} segments   {} of {} in {} segment{}",
            c.class,
            format_bytes(c.free),
            format_bytes(c.reserved),
            c.segments,
            if c.segments == 1 { "" } else { "s" }
        );
    }
    let _ = writeln!(
        out,
        "    torch viewer's calculate_fragmentation (sum of free gaps squared / reserved squared): {:.6}",
        f.viewer_fragmentation
    );
}

fn device_text(out: &mut String, d: &DeviceReport, names: &FrameNames) {
    if !d.history {
        let _ = writeln!(
            out,
            "device {}: no history was recorded (this snapshot holds the state only). To record \
             one, call torch.cuda.memory._record_memory_history() before the work and \
             torch.cuda.memory._dump_snapshot(\"snapshot.pickle\") after it.",
            d.device
        );
        let _ = writeln!(
            out,
            "  state: {} reserved in {} segment{}, {} allocated",
            format_bytes(d.reserved_at_end),
            d.segments_at_end,
            if d.segments_at_end == 1 { "" } else { "s" },
            format_bytes(d.allocated_at_end)
        );
        let _ = writeln!(out, "\n  fragmentation");
        fragmentation_text(out, &d.fragmentation_at_end);
        return;
    }
    let _ = writeln!(
        out,
        "device {}: {} events in the range of {} ({} allocs, {} frees, {} segment allocs, {} \
         segment frees, {} out of memory)",
        d.device,
        d.events_in_range,
        d.events,
        d.allocs,
        d.frees,
        d.segment_allocs,
        d.segment_frees,
        d.oom_count
    );
    if d.time_us.is_none() {
        let _ = writeln!(
            out,
            "  no timestamps in this file (torch 2.1 and older record no time_us)"
        );
    }
    let _ = writeln!(
        out,
        "  peak allocated  {} {}",
        format_bytes(d.peak_allocated.bytes),
        point_text(d.peak_allocated.event, d.peak_allocated.time_us)
    );
    let _ = writeln!(
        out,
        "  peak reserved   {} {}",
        format_bytes(d.peak_reserved.bytes),
        point_text(d.peak_reserved.event, d.peak_reserved.time_us)
    );
    let _ = writeln!(
        out,
        "  at the allocated peak: {} reserved in {} segment{}; {} allocated before recording \
         began (no frames)",
        format_bytes(d.reserved_at_peak),
        d.segments_at_peak,
        if d.segments_at_peak == 1 { "" } else { "s" },
        format_bytes(d.unrecorded_at_peak)
    );
    let _ = writeln!(out, "\n  largest blocks live at the peak");
    let _ = writeln!(out, "  {:>12}  {:>8}  frames", "size", "event");
    for b in &d.largest_blocks {
        let _ = writeln!(
            out,
            "  {:>12}  {:>8}  {}",
            format_bytes(b.size),
            event_text(b.allocated_at),
            names.site(&b.frames, b.allocated_at.is_none())
        );
    }
    let _ = writeln!(
        out,
        "\n  allocation sites live at the peak, by bytes ({} sites in all)",
        d.site_count
    );
    let _ = writeln!(out, "  {:>12}  {:>8}  frames", "bytes", "blocks");
    for s in &d.sites {
        let _ = writeln!(
            out,
            "  {:>12}  {:>8}  {}",
            format_bytes(s.bytes),
            s.blocks,
            names.site(&s.frames, s.before_recording)
        );
    }
    let _ = writeln!(out, "\n  fragmentation at the peak");
    fragmentation_text(out, &d.fragmentation);
    if !d.ooms.is_empty() {
        let _ = writeln!(out, "\n  out of memory");
        for o in &d.ooms {
            let _ = writeln!(
                out,
                "    event {}{}: {} allocated, {} reserved\n      {}\n      at {}",
                o.event,
                o.time_us
                    .map(|t| format!(" (time_us {t})"))
                    .unwrap_or_default(),
                format_bytes(o.allocated),
                format_bytes(o.reserved),
                o.why,
                names.stack(&o.frames)
            );
        }
        let more = d.oom_count.saturating_sub(d.ooms.len() as u64);
        if more > 0 {
            let _ = writeln!(
                out,
                "    and {more} more (the first {} are shown)",
                d.ooms.len()
            );
        }
    }
    let _ = writeln!(
        out,
        "\n  at the end of the range: {} reserved in {} segment{}, {} allocated",
        format_bytes(d.reserved_at_end),
        d.segments_at_end,
        if d.segments_at_end == 1 { "" } else { "s" },
        format_bytes(d.allocated_at_end)
    );
    let _ = writeln!(
        out,
        "\n  leak candidates: {} block{} ({}) allocated in the range and alive at its end",
        d.leak_count,
        if d.leak_count == 1 { "" } else { "s" },
        format_bytes(d.leak_bytes)
    );
    for b in &d.leak_candidates {
        let _ = writeln!(
            out,
            "  {:>12}  {:>8}  {}",
            format_bytes(b.size),
            event_text(b.allocated_at),
            names.site(&b.frames, b.allocated_at.is_none())
        );
    }
}
