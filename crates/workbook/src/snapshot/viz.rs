//! A `gpumem` snapshot drawn as SVG (what `workbook viz` and `workbook pictures` write): the active memory timeline (allocated and
//! reserved bytes after each event of the trace, as PyTorch's memory_viz draws it) and the segment
//! map (each reserved segment with its live, pending, free and split blocks).
//!
//! The drawing is plain SVG written by hand: no script, no fonts to fetch, and the same snapshot
//! always gives the same bytes. Host addresses differ from run to run, so none is printed: blocks
//! are placed by their offset in their segment, and segments are shown in the order they were
//! reserved.

pub mod activity;

use anyhow::{Context, Result};
use gpumem::history::{BlockState, SegmentInfo};
use gpumem::{Snapshot, TraceAction, TraceEntry};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::Path;

/// Which pictures to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum View {
    /// The timeline above the segment map, in one SVG.
    Both,
    /// Allocated and reserved bytes over the trace.
    Timeline,
    /// Each segment with its blocks.
    Segments,
}

/// Reads a snapshot written by `Snapshot::to_json`, or a snapshot pickle (gpumem's
/// `dump_snapshot` or PyTorch's `_dump_snapshot`, read as a stream: the drawn device's entries are
/// held, 56 bytes each), with errors that name the file.
pub fn read_snapshot(path: &Path) -> Result<Snapshot> {
    read_device_snapshot(path, None)
}

/// [`read_snapshot`] of one device of a snapshot pickle (`None`: the first with entries); a
/// gpumem snapshot holds one device.
pub fn read_device_snapshot(path: &Path, device: Option<usize>) -> Result<Snapshot> {
    if gpumem::snapshot_pickle::is_pickle(path) {
        return gpumem::snapshot_pickle::load_device_snapshot(path, device)
            .with_context(|| format!("reading the snapshot {}", path.display()));
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the snapshot {}", path.display()))?;
    Snapshot::from_json(&text).with_context(|| {
        format!(
            "{} is not a gpumem snapshot (the JSON that `dev.snapshot().to_json()` writes)",
            path.display()
        )
    })
}

/// The entries the pictures draw: every entry of the trace but the walkthrough's annotations
/// (they mark steps and change nothing), so that the timeline counts the events the interactive
/// view steps through (`pictures::history_json`). A free is two events, as torch records it:
/// `free_requested` (allocated drops) and `free_completed` (the block is back in the cache).
fn drawn(snapshot: &Snapshot) -> Cow<'_, Snapshot> {
    let skipped = |e: &TraceEntry| e.action == TraceAction::Annotation;
    if !snapshot.trace.iter().any(skipped) {
        return Cow::Borrowed(snapshot);
    }
    Cow::Owned(Snapshot {
        device: snapshot.device.clone(),
        segments: snapshot.segments.clone(),
        trace: snapshot
            .trace
            .iter()
            .filter(|e| !skipped(e))
            .cloned()
            .collect(),
        allocator_settings: snapshot.allocator_settings.clone(),
        host_segments: Vec::new(),
        host_traces: Vec::new(),
    })
}

/// The SVG of `view` for `snapshot`.
pub fn render(snapshot: &Snapshot, view: View) -> String {
    let snapshot = &*drawn(snapshot);
    let figures = match view {
        View::Both => vec![timeline(snapshot), segment_map(snapshot)],
        View::Timeline => vec![timeline(snapshot)],
        View::Segments => vec![segment_map(snapshot)],
    };
    document(&figures, WIDTH)
}

/// The active memory timeline alone.
pub fn timeline_svg(snapshot: &Snapshot) -> String {
    render(snapshot, View::Timeline)
}

/// The segment map alone.
pub fn segments_svg(snapshot: &Snapshot) -> String {
    render(snapshot, View::Segments)
}

/// The width of the timeline and the segment map, in pixels. The book shows them 1:1 where the
/// column is wider and scaled down on a phone: the 319 px a reveal leaves of a 390 px window's
/// column still draws their smallest text, [`SMALL`] px, at 10 px or more.
const WIDTH: f64 = 400.0;
/// The smallest text of the timeline and the segment map.
const SMALL: f64 = 13.0;
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, \
                    sans-serif";
const INK: &str = "#1f2328";
const MUTED: &str = "#57606a";
const GRID: &str = "#d8dee4";
const RESERVED_LINE: &str = "#b35c00";
const RESERVED_FILL: &str = "#fbe3c4";
const ALLOCATED_LINE: &str = "#0b5ea8";
const ALLOCATED_FILL: &str = "#8cc0ea";
const OOM: &str = "#c62828";
const LIVE: &str = "#0b5ea8";
const PENDING: &str = "#e69f00";
const FREE: &str = "#e3e6ea";
const SPLIT_LINES: &str = "#8c959f";

/// One drawing: its height and its SVG elements, drawn from y = 0.
struct Figure {
    height: f64,
    body: String,
    title: String,
}

/// The figures one below the other in one SVG document.
fn document(figures: &[Figure], width: f64) -> String {
    let height: f64 = figures.iter().map(|f| f.height).sum();
    let title = figures
        .iter()
        .map(|f| f.title.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" role="img">"#,
        w = num(width),
        h = num(height),
    );
    let _ = writeln!(out, "<title>{}</title>", esc(&title));
    let _ = writeln!(
        out,
        r#"<defs><pattern id="split" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="{FREE}"/><line x1="0" y1="0" x2="0" y2="6" stroke="{SPLIT_LINES}" stroke-width="2"/></pattern></defs>"#
    );
    let _ = writeln!(
        out,
        r#"<rect x="0.5" y="0.5" width="{}" height="{}" rx="6" fill="white" stroke="{GRID}"/>"#,
        num(width - 1.0),
        num(height - 1.0)
    );
    let mut y = 0.0;
    for figure in figures {
        let _ = writeln!(out, r#"<g transform="translate(0,{})">"#, num(y));
        out.push_str(&figure.body);
        out.push_str("</g>\n");
        y += figure.height;
    }
    out.push_str("</svg>\n");
    out
}

/// The running totals: before the first event, then after each one.
fn totals(snapshot: &Snapshot) -> Vec<(u64, u64)> {
    let Some(first) = snapshot.trace.first() else {
        return Vec::new();
    };
    // The trace holds the totals after each event; the state before the first one is that event
    // undone where the trace says exactly how: a segment event carries the segment's size, but an
    // alloc or free carries the size asked for, not the block's, so its totals are kept.
    let before = match first.action {
        TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
            (first.allocated, first.reserved.saturating_sub(first.size))
        }
        TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
            (first.allocated, first.reserved + first.size)
        }
        TraceAction::Alloc
        | TraceAction::FreeRequested
        | TraceAction::FreeCompleted
        | TraceAction::Snapshot
        | TraceAction::Oom
        | TraceAction::Annotation => (first.allocated, first.reserved),
    };
    std::iter::once(before)
        .chain(snapshot.trace.iter().map(|e| (e.allocated, e.reserved)))
        .collect()
}

/// The active memory timeline: allocated and reserved bytes after each event of the trace. Events
/// are numbered from 1, as the interactive view numbers them; event k's change is drawn where
/// its span begins, at x = k - 1, and so is its out-of-memory line.
fn timeline(snapshot: &Snapshot) -> Figure {
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = WIDTH - 18.0;
    let events = snapshot.trace.len();
    let totals = totals(snapshot);
    let peak_allocated = totals.iter().map(|t| t.0).max().unwrap_or(0);
    let peak_reserved = totals.iter().map(|t| t.1).max().unwrap_or(0);
    let ooms = snapshot
        .trace
        .iter()
        .filter(|e| e.action == TraceAction::Oom)
        .count();
    let title = format!("Active memory timeline · {}", snapshot.device);
    let mut b = String::new();
    let mut summary = vec![
        format!("{events} event{}", plural(events)),
        format!("peak allocated {}", size(peak_allocated)),
        format!("peak reserved {}", size(peak_reserved)),
    ];
    if ooms > 0 {
        summary.push(format!("{ooms} out of memory"));
    }
    let mut legend = vec![
        (
            RESERVED_FILL,
            RESERVED_LINE,
            "reserved: segments (memory_reserved)",
        ),
        (
            ALLOCATED_FILL,
            ALLOCATED_LINE,
            "allocated: live blocks (memory_allocated)",
        ),
    ];
    if ooms > 0 {
        legend.push(("#ffffff", OOM, "out of memory"));
    }
    let top_of_plot = header(&mut b, WIDTH, &title, &summary, &legend) + 24.0;
    let (top_y, bottom_y) = (top_of_plot, top_of_plot + 200.0);

    let (step, top) = byte_ticks(peak_reserved.max(peak_allocated));
    let domain = events.max(1) as f64;
    let px = |i: f64| LEFT + (RIGHT - LEFT) * i / domain;
    let py = |v: u64| bottom_y - (bottom_y - top_y) * v as f64 / top as f64;
    let label_unit = unit_for(top);
    let mut tick = 0;
    while tick <= top {
        let y = py(tick);
        let _ = writeln!(
            b,
            r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{GRID}" stroke-width="1"/>"#,
            num(LEFT),
            num(RIGHT),
            y = num(y)
        );
        text(
            &mut b,
            LEFT - 6.0,
            y + 4.5,
            SMALL,
            MUTED,
            "end",
            false,
            &in_unit(tick, label_unit),
        );
        tick += step;
    }
    // Event numbers under the axis: the first, then every `x_step`-th, each where its span
    // begins; one too close to the number before is left out.
    let x_step = count_step(events);
    let mut numbered = f64::NEG_INFINITY;
    let multiples = (1..).map(|m| m * x_step).skip_while(|&k| k == 1);
    for k in std::iter::once(1)
        .chain(multiples)
        .take_while(|&k| k <= events)
    {
        let x = px((k - 1) as f64);
        let label = k.to_string();
        if x - numbered < text_width(&label, SMALL) + 10.0 {
            continue;
        }
        numbered = x;
        let _ = writeln!(
            b,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{MUTED}" stroke-width="1"/>"#,
            num(bottom_y),
            num(bottom_y + 5.0),
            x = num(x)
        );
        text(
            &mut b,
            x,
            bottom_y + 19.0,
            SMALL,
            MUTED,
            "middle",
            false,
            &label,
        );
    }
    let caption = wrap(
        "event: each alloc, free (requested, then completed), segment reserved or released, \
         and out of memory",
        SMALL,
        RIGHT - 20.0,
    );
    for (n, line) in caption.iter().enumerate() {
        text(
            &mut b,
            20.0,
            bottom_y + 40.0 + 17.0 * n as f64,
            SMALL,
            MUTED,
            "start",
            false,
            line,
        );
    }

    if events == 0 {
        for (n, line) in wrap(
            "No events recorded: call dev.record_memory_history(true) before the work.",
            14.0,
            RIGHT - LEFT - 20.0,
        )
        .iter()
        .enumerate()
        {
            text(
                &mut b,
                (LEFT + RIGHT) / 2.0,
                (top_y + bottom_y) / 2.0 + 18.0 * n as f64,
                14.0,
                MUTED,
                "middle",
                false,
                line,
            );
        }
    } else {
        for (series, fill, line) in [
            (1, RESERVED_FILL, RESERVED_LINE),
            (0, ALLOCATED_FILL, ALLOCATED_LINE),
        ] {
            let value = |t: &(u64, u64)| if series == 0 { t.0 } else { t.1 };
            let steps = step_path(&totals, value, &px, &py);
            let _ = writeln!(
                b,
                r#"<path d="{steps} V {} H {} Z" fill="{fill}" fill-opacity="0.85" stroke="none"/>"#,
                num(bottom_y),
                num(LEFT)
            );
            let _ = writeln!(
                b,
                r#"<path d="{steps}" fill="none" stroke="{line}" stroke-width="2" stroke-linejoin="round"/>"#
            );
        }
        for (i, e) in snapshot.trace.iter().enumerate() {
            if e.action == TraceAction::Oom {
                let x = num(px(i as f64));
                let _ = writeln!(
                    b,
                    r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{OOM}" stroke-width="2" stroke-dasharray="4 3"><title>event {} of {events}: out of memory, a segment of {} could not be reserved</title></line>"#,
                    num(top_y),
                    num(bottom_y),
                    i + 1,
                    size(e.size)
                );
            }
        }
    }
    let _ = writeln!(
        b,
        r#"<line x1="{l}" y1="{t}" x2="{l}" y2="{bo}" stroke="{MUTED}"/><line x1="{l}" y1="{bo}" x2="{r}" y2="{bo}" stroke="{MUTED}"/>"#,
        l = num(LEFT),
        r = num(RIGHT),
        t = num(top_y),
        bo = num(bottom_y)
    );
    Figure {
        height: bottom_y + 34.0 + 17.0 * caption.len() as f64 + 8.0,
        body: b,
        title: format!("{title}: {}", summary.join(" · ")),
    }
}

/// The step line of one series: the value after event `i` holds from x = i to x = i + 1.
fn step_path(
    totals: &[(u64, u64)],
    value: impl Fn(&(u64, u64)) -> u64,
    px: &impl Fn(f64) -> f64,
    py: &impl Fn(u64) -> f64,
) -> String {
    let mut path = format!("M {} {}", num(px(0.0)), num(py(value(&totals[0]))));
    let mut last = value(&totals[0]);
    for (i, t) in totals.iter().enumerate().skip(1) {
        let v = value(t);
        if v != last {
            let _ = write!(path, " H {} V {}", num(px((i - 1) as f64)), num(py(v)));
            last = v;
        }
    }
    let _ = write!(path, " H {}", num(px((totals.len() - 1) as f64)));
    path
}

/// How a block is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Live,
    Pending,
    Free,
    FreeSplit,
}

impl Kind {
    fn of(state: BlockState, blocks_in_segment: usize) -> Kind {
        match state {
            BlockState::ActiveAllocated => Kind::Live,
            BlockState::ActivePendingFree => Kind::Pending,
            BlockState::Inactive if blocks_in_segment > 1 => Kind::FreeSplit,
            BlockState::Inactive => Kind::Free,
        }
    }

    fn fill(self) -> &'static str {
        match self {
            Kind::Live => LIVE,
            Kind::Pending => PENDING,
            Kind::Free => FREE,
            Kind::FreeSplit => "url(#split)",
        }
    }

    fn ink(self) -> &'static str {
        match self {
            Kind::Live => "#ffffff",
            _ => INK,
        }
    }

    fn short_name(self) -> &'static str {
        match self {
            Kind::Live => "live",
            Kind::Pending => "pending free",
            Kind::Free => "free",
            Kind::FreeSplit => "free split",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Live => "live",
            Kind::Pending => "pending free",
            Kind::Free => "free (cached)",
            Kind::FreeSplit => "free split (inactive_split)",
        }
    }
}

/// A segment as the trace is replayed: where it starts, its size, and whether it is still
/// reserved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrackedSegment {
    /// Its first address.
    pub address: u64,
    /// Its size now (an expandable segment grows and shrinks).
    pub size: u64,
    /// False once released.
    pub reserved: bool,
}

/// The book's one rule for numbering segments, shared by the pictures and the interactive view:
/// the segments reserved before recording began first (by stream, pool, size), then each one the
/// trace reserves, in the order it does; a released segment keeps its number, and a new one at
/// its address gets the next. Shown counting from 1.
pub(crate) struct SegmentNumbers {
    /// Every segment so far, its index its number.
    pub segments: Vec<TrackedSegment>,
    /// How many were reserved before recording began.
    pub initial: usize,
}

impl SegmentNumbers {
    /// The segments of `snapshot` reserved before its trace began; the trace not yet replayed.
    pub fn new(snapshot: &Snapshot) -> SegmentNumbers {
        let reserved_in_trace = |address: u64| {
            snapshot.trace.iter().any(|e| {
                matches!(
                    e.action,
                    TraceAction::SegmentAlloc | TraceAction::SegmentMap
                ) && address >= e.addr
                    && address < e.addr + e.size
            })
        };
        let mut before: Vec<&SegmentInfo> = snapshot
            .segments
            .iter()
            .filter(|s| !reserved_in_trace(s.address))
            .collect();
        before.sort_by(|s, t| {
            s.stream
                .cmp(&t.stream)
                .then(s.segment_type.cmp(&t.segment_type))
                .then(s.total_size.cmp(&t.total_size))
                .then(s.address.cmp(&t.address))
        });
        SegmentNumbers {
            initial: before.len(),
            segments: before
                .into_iter()
                .map(|s| TrackedSegment {
                    address: s.address,
                    size: s.total_size,
                    reserved: true,
                })
                .collect(),
        }
    }

    /// Replays `e`: the segment it lies in (its number) and its offset there.
    pub fn apply(&mut self, e: &TraceEntry) -> (Option<usize>, u64) {
        match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                // A mapped range that continues a reserved one grows it (an expandable segment).
                let grown = (e.action == TraceAction::SegmentMap)
                    .then(|| {
                        self.segments
                            .iter()
                            .position(|s| s.reserved && s.address + s.size == e.addr)
                    })
                    .flatten();
                match grown {
                    Some(k) => {
                        let offset = self.segments[k].size;
                        self.segments[k].size += e.size;
                        (Some(k), offset)
                    }
                    None => {
                        self.segments.push(TrackedSegment {
                            address: e.addr,
                            size: e.size,
                            reserved: true,
                        });
                        (Some(self.segments.len() - 1), 0)
                    }
                }
            }
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                match self.containing(e.addr) {
                    Some(k) => {
                        let offset = e.addr - self.segments[k].address;
                        let s = &mut self.segments[k];
                        if offset == 0 && e.size >= s.size {
                            s.reserved = false;
                        } else if offset == 0 {
                            s.address += e.size;
                            s.size -= e.size;
                        } else {
                            // Unmapped from the end (or the middle: what follows is not tracked).
                            s.size = offset;
                        }
                        (Some(k), offset)
                    }
                    None => (None, 0),
                }
            }
            TraceAction::Alloc | TraceAction::FreeRequested | TraceAction::FreeCompleted => {
                match self.containing(e.addr) {
                    Some(k) => (Some(k), e.addr - self.segments[k].address),
                    None => (None, 0),
                }
            }
            TraceAction::Oom | TraceAction::Snapshot | TraceAction::Annotation => (None, 0),
        }
    }

    /// The reserved segment that holds `address`.
    pub fn containing(&self, address: u64) -> Option<usize> {
        self.segments
            .iter()
            .rposition(|s| s.reserved && s.address <= address && address < s.address + s.size)
    }

    /// The segments of `snapshot` with their numbers (counted from 0), in that order: the trace
    /// replayed to its end.
    pub fn of_snapshot(snapshot: &Snapshot) -> Vec<(usize, &SegmentInfo)> {
        let mut numbers = SegmentNumbers::new(snapshot);
        for e in &snapshot.trace {
            numbers.apply(e);
        }
        let mut next = numbers.segments.len();
        let mut out: Vec<(usize, &SegmentInfo)> = snapshot
            .segments
            .iter()
            .map(|s| {
                // A segment the trace cannot place (a window of it) is numbered after the rest.
                let k = numbers.containing(s.address).unwrap_or_else(|| {
                    next += 1;
                    next - 1
                });
                (k, s)
            })
            .collect();
        out.sort_by_key(|(k, s)| (*k, s.address));
        out
    }
}

/// The segment map: one bar per segment, as long as its size, with its blocks by state.
fn segment_map(snapshot: &Snapshot) -> Figure {
    const BAR_LEFT: f64 = 20.0;
    const BAR_MAX: f64 = WIDTH - 20.0 - BAR_LEFT;
    const BAR_TOP: f64 = 22.0;
    let numbered = SegmentNumbers::of_snapshot(snapshot);
    let segments: Vec<&SegmentInfo> = numbered.iter().map(|(_, s)| *s).collect();
    let reserved: u64 = segments.iter().map(|s| s.total_size).sum();
    // Live (and pending) bytes are the bytes asked for, as torch's viewer and `workbook inspect`
    // count them; what the allocator's rounding adds to those blocks is counted apart.
    let mut by_kind = [0u64; 4];
    let mut rounding = 0u64;
    for s in &segments {
        for block in &s.blocks {
            let kind = Kind::of(block.state, s.blocks.len());
            let counted = match kind {
                // A file that records no size asked for (torch 2.0) counts the block's, as
                // MemoryViz.js does.
                Kind::Live | Kind::Pending if block.requested_size == 0 => block.size,
                Kind::Live | Kind::Pending => block.requested_size.min(block.size),
                Kind::Free | Kind::FreeSplit => block.size,
            };
            by_kind[kind as usize] += counted;
            rounding += block.size - counted;
        }
    }
    let title = format!("Segments · {}", snapshot.device);
    let mut summary = vec![
        format!(
            "{} segment{} reserved ({})",
            segments.len(),
            plural(segments.len()),
            size(reserved)
        ),
        format!("live {}", size(by_kind[Kind::Live as usize])),
    ];
    if rounding > 0 {
        summary.push(format!("rounding {}", size(rounding)));
    }
    if by_kind[Kind::Pending as usize] > 0 {
        summary.push(format!(
            "pending free {}",
            size(by_kind[Kind::Pending as usize])
        ));
    }
    summary.push(format!(
        "free {} (of which split {})",
        size(by_kind[Kind::Free as usize] + by_kind[Kind::FreeSplit as usize]),
        size(by_kind[Kind::FreeSplit as usize]),
    ));
    let legend: Vec<(&str, &str, &str)> = [Kind::Live, Kind::Pending, Kind::Free, Kind::FreeSplit]
        .into_iter()
        .map(|k| (k.fill(), MUTED, k.name()))
        .collect();
    let mut b = String::new();
    let first_row = header(&mut b, WIDTH, &title, &summary, &legend) + 24.0;

    if segments.is_empty() {
        text(
            &mut b,
            WIDTH / 2.0,
            first_row + 20.0,
            14.0,
            MUTED,
            "middle",
            false,
            "No segments reserved when the snapshot was taken.",
        );
        return Figure {
            height: first_row + 50.0,
            body: b,
            title: format!("{title}: {}", summary.join(" · ")),
        };
    }
    let largest = segments
        .iter()
        .map(|s| s.total_size)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut row_top = first_row;
    for (number, s) in &numbered {
        // The segment's name above its bar, the kinds of its blocks under it.
        let name = format!(
            "segment {} · {} · {} pool · stream {}",
            number + 1,
            size(s.total_size),
            s.segment_type,
            s.stream
        );
        for line in wrap(&name, SMALL, BAR_MAX) {
            text(
                &mut b,
                BAR_LEFT,
                row_top + 13.0,
                SMALL,
                INK,
                "start",
                true,
                &line,
            );
            row_top += 17.0;
        }
        let top = row_top + BAR_TOP - 17.0;
        let scale = BAR_MAX / largest as f64;
        let bar_width = (s.total_size as f64 * scale).max(3.0);
        let mut placed = Vec::with_capacity(s.blocks.len());
        let mut offset = 0u64;
        for block in &s.blocks {
            placed.push((offset, block, Kind::of(block.state, s.blocks.len())));
            offset += block.size;
        }
        // Free blocks first, so that a live block too small to see at this scale is drawn over
        // its free neighbour at a width that shows; the labels last, over every block.
        let in_use = |kind: Kind| matches!(kind, Kind::Live | Kind::Pending);
        let mut labels = String::new();
        for pass_in_use in [false, true] {
            for &(offset, block, kind) in placed.iter().filter(|p| in_use(p.2) == pass_in_use) {
                let x = BAR_LEFT + offset as f64 * scale;
                let exact_w = block.size as f64 * scale;
                let w = exact_w.max(if in_use(kind) { 3.0 } else { 1.0 });
                let mut tip = format!(
                    "offset {} · {} · {}",
                    size(offset),
                    size(block.size),
                    kind.name()
                );
                if block.state != BlockState::Inactive {
                    let _ = write!(tip, " · requested {} B", block.requested_size);
                }
                // A thin white edge parts neighbouring blocks, where there is room for it.
                let edge = if exact_w >= 4.0 {
                    r#" stroke="white" stroke-width="1""#
                } else {
                    ""
                };
                let _ = writeln!(
                    b,
                    r#"<rect x="{}" y="{}" width="{}" height="28" fill="{}"{edge}><title>{}</title></rect>"#,
                    num(x),
                    num(top),
                    num(w),
                    kind.fill(),
                    esc(&tip)
                );
                let label = size(block.size);
                if text_width(&label, SMALL) + 8.0 <= w {
                    if kind == Kind::FreeSplit {
                        // A light plate keeps the label readable over the hatching.
                        let pw = text_width(&label, SMALL) + 6.0;
                        let _ = writeln!(
                            labels,
                            r#"<rect x="{}" y="{}" width="{}" height="16" rx="2" fill="{FREE}"/>"#,
                            num(x + w / 2.0 - pw / 2.0),
                            num(top + 6.0),
                            num(pw)
                        );
                    }
                    text(
                        &mut labels,
                        x + w / 2.0,
                        top + 18.5,
                        SMALL,
                        kind.ink(),
                        "middle",
                        false,
                        &label,
                    );
                }
            }
        }
        b.push_str(&labels);
        let _ = writeln!(
            b,
            r#"<rect x="{}" y="{}" width="{}" height="28" fill="none" stroke="{MUTED}" stroke-width="1"/>"#,
            num(BAR_LEFT),
            num(top),
            num(bar_width)
        );
        let count = |k: Kind| {
            s.blocks
                .iter()
                .filter(|blk| Kind::of(blk.state, s.blocks.len()) == k)
                .fold((0usize, 0u64), |(n, bytes), blk| (n + 1, bytes + blk.size))
        };
        let mut parts = Vec::new();
        for kind in [Kind::Live, Kind::Pending, Kind::Free, Kind::FreeSplit] {
            let (n, bytes) = count(kind);
            if n > 0 {
                parts.push(format!(
                    "{} {} ({n} block{})",
                    kind.short_name(),
                    size(bytes),
                    plural(n)
                ));
            }
        }
        let mut y = top + 28.0 + 18.0;
        for line in wrap(&parts.join(" · "), SMALL, BAR_MAX) {
            text(&mut b, BAR_LEFT, y, SMALL, MUTED, "start", false, &line);
            y += 17.0;
        }
        row_top = y + 6.0;
    }
    Figure {
        height: row_top + 4.0,
        body: b,
        title: format!("{title}: {}", summary.join(" · ")),
    }
}

/// A figure's title, its summary (the parts joined by " · ", wrapped to the width) and its legend
/// (wrapped too); returns the y just below them.
fn header(
    out: &mut String,
    width: f64,
    title: &str,
    summary: &[String],
    legend: &[(&str, &str, &str)],
) -> f64 {
    const SUMMARY_FONT: f64 = 13.5;
    const LEGEND_FONT: f64 = 13.0;
    const TITLE_FONT: f64 = 18.0;
    let room = width - 40.0;
    let mut y = 30.0;
    for line in wrap(title, TITLE_FONT, room) {
        text(out, 20.0, y, TITLE_FONT, INK, "start", true, &line);
        y += 24.0;
    }
    let mut line = String::new();
    for part in summary {
        let joined = if line.is_empty() {
            part.clone()
        } else {
            format!("{line} · {part}")
        };
        if !line.is_empty() && text_width(&joined, SUMMARY_FONT) > room {
            text(out, 20.0, y, SUMMARY_FONT, MUTED, "start", false, &line);
            y += 19.0;
            line = part.clone();
        } else {
            line = joined;
        }
    }
    text(out, 20.0, y, SUMMARY_FONT, MUTED, "start", false, &line);
    let mut row_top = y + 12.0;
    let mut x = 20.0;
    for (fill, stroke, label) in legend {
        let w = 20.0 + text_width(label, LEGEND_FONT);
        if x > 20.0 && x + w > width - 20.0 {
            x = 20.0;
            row_top += 22.0;
        }
        swatch(out, x, row_top, fill, stroke);
        text(
            out,
            x + 20.0,
            row_top + 12.0,
            LEGEND_FONT,
            INK,
            "start",
            false,
            label,
        );
        x += w + 18.0;
    }
    row_top + 14.0
}

/// `s` in lines no wider than `room`: broken after a space or a `/` where one falls in the line,
/// else inside a word (a long path has no space to break at).
fn wrap(s: &str, font_size: f64, room: f64) -> Vec<String> {
    let per_line = ((room / (font_size * 0.53)) as usize).max(8);
    let mut lines = Vec::new();
    let mut rest: Vec<char> = s.chars().collect();
    while rest.len() > per_line {
        let cut = rest[..per_line]
            .iter()
            .rposition(|&c| c == ' ' || c == '/')
            .filter(|&i| i > per_line / 2)
            .map_or(per_line, |i| i + 1);
        lines.push(
            rest[..cut]
                .iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        rest.drain(..cut);
    }
    lines.push(rest.into_iter().collect());
    lines
}

/// A legend's colour square.
fn swatch(out: &mut String, x: f64, y: f64, fill: &str, stroke: &str) {
    let _ = writeln!(
        out,
        r#"<rect x="{}" y="{}" width="14" height="14" rx="2" fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>"#,
        num(x),
        num(y)
    );
}

/// A line of text.
#[allow(clippy::too_many_arguments)] // Each is one SVG attribute; a struct would only rename them.
fn text(
    out: &mut String,
    x: f64,
    y: f64,
    font_size: f64,
    fill: &str,
    anchor: &str,
    bold: bool,
    content: &str,
) {
    let weight = if bold { r#" font-weight="600""# } else { "" };
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="{}" fill="{fill}" text-anchor="{anchor}"{weight}>{}</text>"#,
        num(x),
        num(y),
        num(font_size),
        esc(content)
    );
}

/// About how wide `s` is in a sans-serif font of `font_size` pixels (to decide what fits).
fn text_width(s: &str, font_size: f64) -> f64 {
    s.chars().count() as f64 * font_size * 0.53
}

/// A coordinate with at most one decimal, without a trailing `.0`.
fn num(v: f64) -> String {
    let rounded = (v * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{}", rounded as i64)
    } else {
        format!("{rounded:.1}")
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Text for SVG: `&`, `<`, `>` and `"` escaped.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const UNITS: [(u64, &str); 5] = [
    (1 << 40, "TiB"),
    (1 << 30, "GiB"),
    (1 << 20, "MiB"),
    (1 << 10, "KiB"),
    (1, "B"),
];

/// A size in the largest binary unit it reaches: exact when it can be (`20 MiB`, `512 B`), else
/// with two decimals (`1.14 MiB`).
pub fn size(bytes: u64) -> String {
    let (unit, name) = unit_for(bytes);
    let whole = (bytes + unit / 2) / unit * unit;
    // Two decimals would round 2 MiB - 512 B to "2 MiB": say exactly how far it is instead.
    if unit > 1 && whole != bytes && ratio(bytes, unit) == (whole / unit).to_string() {
        return if whole > bytes {
            format!("{} {name} − {}", whole / unit, size(whole - bytes))
        } else {
            format!("{} {name} + {}", whole / unit, size(bytes - whole))
        };
    }
    format!("{} {name}", ratio(bytes, unit))
}

/// The largest unit that `bytes` reaches (bytes for 0).
fn unit_for(bytes: u64) -> (u64, &'static str) {
    UNITS
        .into_iter()
        .find(|(unit, _)| bytes >= *unit)
        .unwrap_or((1, "B"))
}

/// `value / unit` with at most two decimals and no trailing zeros.
fn ratio(value: u64, unit: u64) -> String {
    if value.is_multiple_of(unit) {
        return (value / unit).to_string();
    }
    let text = format!("{:.2}", value as f64 / unit as f64);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A tick label in the axis's unit.
fn in_unit(bytes: u64, (unit, name): (u64, &str)) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    format!("{} {name}", ratio(bytes, unit))
}

/// A tick step for a byte axis up to `max`: a power of two (whole binary units) giving at most six
/// intervals; and the axis's top, a multiple of the step.
fn byte_ticks(max: u64) -> (u64, u64) {
    let max = max.max(1);
    let mut step = 1u64;
    while max.div_ceil(step) > 6 {
        step *= 2;
    }
    (step, max.div_ceil(step) * step)
}

/// A tick step for a count axis up to `n`: 1, 2 or 5 times a power of ten, at most ten intervals.
fn count_step(n: usize) -> usize {
    let mut base = 1usize;
    loop {
        for m in [1, 2, 5] {
            if n.div_ceil(base * m) <= 10 {
                return base * m;
            }
        }
        base *= 10;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gpumem::history::{BlockInfo, TraceEntry};

    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;

    /// A trace entry on stream 0 at time 0, without a frame or label (the pictures' tests use
    /// it too).
    pub(crate) fn entry(
        action: TraceAction,
        addr: u64,
        size: u64,
        allocated: u64,
        reserved: u64,
    ) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            allocated,
            reserved,
            time_us: 0,
            frames: Vec::new(),
            label: None,
        }
    }

    fn block(address: u64, size: u64, state: BlockState) -> BlockInfo {
        BlockInfo {
            address,
            size,
            requested_size: if state == BlockState::Inactive {
                0
            } else {
                size
            },
            state,
        }
    }

    fn segment(address: u64, segment_type: &str, blocks: Vec<BlockInfo>) -> SegmentInfo {
        let sum = |f: fn(&BlockInfo) -> bool| blocks.iter().filter(|b| f(b)).map(|b| b.size).sum();
        SegmentInfo {
            address,
            total_size: blocks.iter().map(|b| b.size).sum(),
            stream: 0,
            segment_type: segment_type.to_string(),
            allocated_size: sum(|b| b.state == BlockState::ActiveAllocated),
            active_size: sum(|b| b.state != BlockState::Inactive),
            is_expandable: false,
            blocks,
        }
    }

    /// Four 4 MiB blocks in a 20 MiB segment, the 1st and 3rd freed, then 6 MiB in a new segment
    /// (chapter 4's fragmentation), with the large segment at the higher address.
    fn fragmented() -> Snapshot {
        let a = 0x7f00_0000_0000u64;
        let b = 0x7e00_0000_0000u64;
        use BlockState::*;
        use TraceAction::{Alloc, FreeRequested, Oom, SegmentAlloc};
        Snapshot {
            device: "cpu".to_string(),
            segments: vec![
                segment(
                    b,
                    "large",
                    vec![
                        block(b, 6 * MIB, ActiveAllocated),
                        block(b + 6 * MIB, 14 * MIB, Inactive),
                    ],
                ),
                segment(
                    a,
                    "large",
                    vec![
                        block(a, 4 * MIB, Inactive),
                        block(a + 4 * MIB, 4 * MIB, ActiveAllocated),
                        block(a + 8 * MIB, 4 * MIB, Inactive),
                        block(a + 12 * MIB, 4 * MIB, ActivePendingFree),
                        block(a + 16 * MIB, 4 * MIB, Inactive),
                    ],
                ),
                segment(
                    a + (1 << 32),
                    "small",
                    vec![block(a + (1 << 32), 2 * MIB, Inactive)],
                ),
            ],
            trace: vec![
                entry(SegmentAlloc, a, 20 * MIB, 0, 20 * MIB),
                entry(Alloc, a, 4 * MIB, 4 * MIB, 20 * MIB),
                entry(Alloc, a + 4 * MIB, 4 * MIB, 8 * MIB, 20 * MIB),
                entry(Alloc, a + 8 * MIB, 4 * MIB, 12 * MIB, 20 * MIB),
                entry(Alloc, a + 12 * MIB, 4 * MIB, 16 * MIB, 20 * MIB),
                entry(FreeRequested, a, 4 * MIB, 12 * MIB, 20 * MIB),
                entry(FreeRequested, a + 8 * MIB, 4 * MIB, 8 * MIB, 20 * MIB),
                entry(Oom, 0, 20 * MIB, 8 * MIB, 20 * MIB),
                entry(SegmentAlloc, b, 20 * MIB, 8 * MIB, 40 * MIB),
                entry(Alloc, b, 6 * MIB, 14 * MIB, 40 * MIB),
                entry(SegmentAlloc, a + (1 << 32), 2 * MIB, 14 * MIB, 42 * MIB),
            ],
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        }
    }

    #[test]
    fn a_long_title_wraps_inside_the_picture() {
        let mut snapshot = fragmented();
        snapshot.device = format!(
            "device 0 of /{}/snapshot.pickle",
            "long-folder-name".repeat(8)
        );
        let svg = timeline_svg(&snapshot);
        let titles: Vec<&str> = svg
            .lines()
            .filter(|l| l.contains(r#"font-size="18""#))
            .collect();
        assert!(titles.len() >= 3, "{titles:#?}");
        for line in &titles {
            let content = line.split('>').nth(1).unwrap().trim_end_matches("</text");
            assert!(
                text_width(content, 18.0) <= WIDTH - 40.0,
                "{content:?} is wider than the picture"
            );
        }
        assert!(
            titles[0].contains(">Active memory timeline · device 0 of"),
            "{}",
            titles[0]
        );
        let last = titles.last().unwrap();
        assert!(last.contains("/snapshot.pickle<"), "{last}");
    }

    #[test]
    fn sizes_use_the_largest_binary_unit_exactly_when_they_can() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(2 * MIB), "2 MiB");
        assert_eq!(size(1_200_128), "1.14 MiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 30), "3 GiB");
        assert_eq!(size(2 * MIB - 512), "2 MiB − 512 B");
        assert_eq!(size(11 * MIB + 400), "11 MiB + 400 B");
        assert_eq!(size(1023), "1023 B");
    }

    #[test]
    fn byte_axis_steps_are_powers_of_two_with_at_most_six_intervals() {
        assert_eq!(byte_ticks(20 * MIB), (4 * MIB, 20 * MIB));
        assert_eq!(byte_ticks(22 * MIB), (4 * MIB, 24 * MIB));
        assert_eq!(byte_ticks(1_200_128), (256 << 10, 1280 << 10));
        assert_eq!(byte_ticks(0), (1, 1));
        assert_eq!(in_unit(1280 << 10, unit_for(1280 << 10)), "1.25 MiB");
    }

    #[test]
    fn count_axis_steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(count_step(0), 1);
        assert_eq!(count_step(7), 1);
        assert_eq!(count_step(11), 2);
        assert_eq!(count_step(140), 20);
        assert_eq!(count_step(100_000), 10_000);
    }

    #[test]
    fn the_state_before_a_first_segment_event_is_that_event_undone() {
        let mut s = fragmented();
        assert_eq!(totals(&s)[0], (0, 0));
        assert_eq!(totals(&s).len(), s.trace.len() + 1);
        // An alloc's size is the size asked for, not the block's: its totals are kept.
        s.trace.remove(0);
        assert_eq!(totals(&s)[0], (4 * MIB, 20 * MIB));
        s.trace.drain(..7);
        assert_eq!(s.trace[0].action, TraceAction::SegmentAlloc);
        assert_eq!(totals(&s)[0], (8 * MIB, 20 * MIB));
    }

    #[test]
    fn timeline_steps_follow_the_totals_and_mark_the_oom() {
        let svg = timeline_svg(&fragmented());
        assert!(svg.contains("Active memory timeline · cpu"));
        assert!(svg.contains("11 events · peak allocated 16 MiB"));
        assert!(svg.contains("1 out of memory"));
        // Events count from 1, as the interactive view counts them: the out of memory is the
        // eighth of eleven.
        assert!(
            svg.contains("event 8 of 11: out of memory, a segment of 20 MiB could not be reserved")
        );
        assert!(svg.contains(">1</text>") && svg.contains(">10</text>"));
        // Event 1's number where its span begins, at the axis's left end.
        assert!(svg.contains(r#"<text x="64" y="#));
        assert!(svg.contains("reserved: segments (memory_reserved)"));
        // The axis of 42 MiB goes to 48 MiB in steps of 8 MiB.
        for tick in [
            "0", "8 MiB", "16 MiB", "24 MiB", "32 MiB", "40 MiB", "48 MiB",
        ] {
            assert!(svg.contains(&format!(">{tick}</text>")), "tick {tick}");
        }
        // Two series, each an area and a line.
        assert_eq!(svg.matches("<path ").count(), 4);
        assert!(!svg.contains("<script"));
    }

    #[test]
    fn live_bytes_in_the_segment_map_are_the_bytes_asked_for() {
        // Two live blocks of 2.5 MiB and 1.5 MiB that asked for 1 000 000 B less in all; the
        // rounding is said apart, so that live + rounding + free is what is reserved.
        let a = 0x7f00_0000_0000u64;
        let mut blocks = vec![
            block(a, 2 * MIB + 512 * KIB, BlockState::ActiveAllocated),
            block(
                a + 2 * MIB + 512 * KIB,
                MIB + 512 * KIB,
                BlockState::ActiveAllocated,
            ),
            block(a + 4 * MIB, 16 * MIB, BlockState::Inactive),
        ];
        blocks[0].requested_size = 2 * MIB + 512 * KIB - 600_000;
        blocks[1].requested_size = MIB + 512 * KIB - 400_000;
        let s = Snapshot {
            device: "cpu".to_string(),
            segments: vec![segment(a, "large", blocks)],
            trace: Vec::new(),
            allocator_settings: gpumem::AllocatorConfig::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        };
        let svg = segments_svg(&s);
        let live = size(4 * MIB - 1_000_000);
        let rounding = size(1_000_000);
        assert!(
            svg.contains(&format!("live {live} · rounding {rounding} · free 16 MiB")),
            "{}",
            svg.lines().find(|l| l.contains("live")).unwrap_or_default()
        );
    }

    #[test]
    fn segment_map_draws_each_block_with_its_state_and_no_addresses() {
        let s = fragmented();
        let svg = segments_svg(&s);
        assert!(svg.contains("3 segments reserved (42 MiB)"));
        assert!(
            svg.contains("live 10 MiB · pending free 4 MiB · free 28 MiB (of which split 26 MiB)")
        );
        // Eight blocks, each a rectangle with a tooltip.
        assert_eq!(svg.matches("<title>offset ").count(), 8);
        assert_eq!(
            svg.matches(r##"fill="url(#split)""##).count(),
            4 + 1,
            "4 split blocks + legend"
        );
        assert!(svg.contains("offset 12 MiB · 4 MiB · pending free · requested 4194304 B"));
        assert!(svg.contains("free 2 MiB (1 block)"));
        for seg in &s.segments {
            for addr in std::iter::once(seg.address).chain(seg.blocks.iter().map(|b| b.address)) {
                assert!(!svg.contains(&addr.to_string()), "address {addr} printed");
                assert!(
                    !svg.contains(&format!("{addr:x}")),
                    "address {addr:x} printed"
                );
            }
        }
    }

    #[test]
    fn segments_are_shown_in_the_order_they_were_reserved() {
        let s = fragmented();
        let order: Vec<u64> = SegmentNumbers::of_snapshot(&s)
            .iter()
            .map(|(_, s)| s.address)
            .collect();
        assert_eq!(
            order,
            vec![
                s.segments[1].address,
                s.segments[0].address,
                s.segments[2].address
            ]
        );
        let svg = segments_svg(&s);
        let first = svg.find("segment 1 · 20 MiB").unwrap();
        let third = svg.find("segment 3 · 2 MiB").unwrap();
        assert!(!svg.contains("segment 0"));
        assert!(first < third);
    }

    #[test]
    fn annotations_are_not_drawn_and_every_other_entry_is_an_event() {
        let plain = fragmented();
        let mut with_more = fragmented();
        let completed = |e: &TraceEntry| TraceEntry {
            action: TraceAction::FreeCompleted,
            ..e.clone()
        };
        let at = with_more.trace.len() - 4;
        let extra = completed(&with_more.trace[5]);
        with_more.trace.insert(at, extra);
        let last = with_more.trace.last().cloned().unwrap();
        with_more.trace.push(TraceEntry {
            action: TraceAction::Snapshot,
            ..last.clone()
        });
        with_more.trace.insert(
            2,
            TraceEntry {
                action: TraceAction::Annotation,
                label: Some("a step".to_string()),
                ..last
            },
        );
        let svg = render(&with_more, View::Both);
        assert!(
            svg.contains("13 events · "),
            "a free_completed and a snapshot are events"
        );
        let mut annotated = plain.clone();
        annotated.trace.insert(
            2,
            TraceEntry {
                action: TraceAction::Annotation,
                label: Some("a step".to_string()),
                ..plain.trace[1].clone()
            },
        );
        assert_eq!(render(&annotated, View::Both), render(&plain, View::Both));
    }

    #[test]
    fn the_same_snapshot_gives_the_same_bytes_whatever_the_addresses() {
        let s = fragmented();
        let mut moved = s.clone();
        let shift = |a: &mut u64| *a = a.wrapping_add(0x1000_0000);
        for seg in &mut moved.segments {
            shift(&mut seg.address);
            for b in &mut seg.blocks {
                shift(&mut b.address);
            }
        }
        for e in &mut moved.trace {
            if e.addr != 0 {
                shift(&mut e.addr);
            }
        }
        moved.segments.reverse();
        assert_eq!(render(&s, View::Both), render(&s, View::Both));
        assert_eq!(render(&s, View::Both), render(&moved, View::Both));
    }

    #[test]
    fn an_empty_snapshot_says_what_is_missing() {
        let s = Snapshot {
            device: "cuda:0 <&>".to_string(),
            segments: Vec::new(),
            trace: Vec::new(),
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        };
        let svg = render(&s, View::Both);
        assert!(svg.contains("No events recorded: call"));
        assert!(svg.contains("dev.record_memory_history(true)"));
        assert!(svg.contains("No segments reserved when the snapshot was taken."));
        assert!(svg.contains("cuda:0 &lt;&amp;&gt;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn read_snapshot_names_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let err = format!("{:#}", read_snapshot(&missing).unwrap_err());
        assert!(
            err.contains("cannot read the snapshot") && err.contains("missing.json"),
            "{err}"
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"device\": \"cpu\", \"segments\": [").unwrap();
        let err = format!("{:#}", read_snapshot(&bad).unwrap_err());
        assert!(err.contains("bad.json is not a gpumem snapshot"), "{err}");
        assert!(err.contains("line 1"), "{err}");
        let good = dir.path().join("good.json");
        std::fs::write(&good, fragmented().to_json()).unwrap();
        assert_eq!(read_snapshot(&good).unwrap(), fragmented());
    }
}
