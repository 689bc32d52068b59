//! What a snapshot's history says, read as a stream (what `workbook inspect`, `diff` and `viz
//! --range` share): the running totals, the peaks and when they came, the blocks and segments live
//! at the peak, the out-of-memory events, and the blocks still alive at the end.
//!
//! A snapshot is torch's pickle (`_dump_snapshot`, read entry by entry, so a file of gigabytes is
//! read in the memory of the blocks live at once), gpumem's snapshot (its JSON or its pickle), or a
//! gpumem trace file (replayed once through a fresh allocator on `cpu`, with the history recorded).
//!
//! torch's trace entries carry no totals. As torch's viewer (MemoryViz.js) does, `allocated` counts
//! the sizes of the alloc entries minus those of the free_completed entries, and `reserved` the
//! segment entries' sizes; both are then offset so that they end at what the snapshot's segments
//! hold (blocks allocated before recording began count there, with no frames and no address in the
//! trace). Block sizes in the trace are the sizes asked for; the layout of a segment (its free
//! gaps) takes each block as its size rounded up to 512 bytes, as the allocator rounds.

use super::frames::user_frames;
use super::model::{Layout, Live, Model, NO_STACK, Saved, SegmentState};
use anyhow::{Context, Result, bail};
use gpumem::history::{BlockInfo, BlockState, SegmentInfo};
use gpumem::snapshot_pickle;
use gpumem::trace::Stacks;
use gpumem::{Snapshot, TraceAction, TraceEntry};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A point of a history: an event's index in its device's trace, or a time in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// The index of an entry in its device's trace (from 0).
    Event(u64),
    /// `time_us` (microseconds, as the trace records it).
    Micros(u64),
}

/// `--range START..END`: the events from START up to but not including END; either end may be
/// left out. Both ends are event indices, or both are times with a `us` suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Range {
    /// The first point in the range (none: from the start).
    pub start: Option<Point>,
    /// The first point after it (none: to the end).
    pub end: Option<Point>,
}

impl Range {
    /// Parses `START..END` (`100..2000`, `..500`, `1764000000000000us..1764000000500000us`).
    pub fn parse(text: &str) -> Result<Range> {
        let Some((a, b)) = text.split_once("..") else {
            bail!(
                "--range {text:?}: expected START..END (event indices, or times with a us \
                 suffix), e.g. 100..2000"
            );
        };
        let point = |s: &str| -> Result<Option<Point>> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            let (digits, micros) = match s.strip_suffix("us") {
                Some(d) => (d.trim(), true),
                None => (s, false),
            };
            let n: u64 = digits.parse().with_context(|| {
                format!("--range {text:?}: {s:?} is not a whole number (an event index, or microseconds with a us suffix)")
            })?;
            Ok(Some(if micros {
                Point::Micros(n)
            } else {
                Point::Event(n)
            }))
        };
        let range = Range {
            start: point(a)?,
            end: point(b)?,
        };
        match (range.start, range.end) {
            (Some(Point::Event(_)), Some(Point::Micros(_)))
            | (Some(Point::Micros(_)), Some(Point::Event(_))) => {
                bail!("--range {text:?}: give both ends as event indices or both in microseconds")
            }
            (Some(Point::Event(s)), Some(Point::Event(e)))
            | (Some(Point::Micros(s)), Some(Point::Micros(e)))
                if s >= e =>
            {
                bail!("--range {text:?}: the range is empty (its start is not before its end)")
            }
            _ => Ok(range),
        }
    }

    /// Whether the entry at `index`, recorded at `time_us`, is before the range, in it, or after.
    fn place(&self, index: u64, time_us: u64) -> std::cmp::Ordering {
        let value = |p: Point| match p {
            Point::Event(_) => index,
            Point::Micros(_) => time_us,
        };
        let bound = |p: Point| match p {
            Point::Event(n) | Point::Micros(n) => n,
        };
        if self.start.is_some_and(|p| value(p) < bound(p)) {
            std::cmp::Ordering::Less
        } else if self.end.is_some_and(|p| value(p) >= bound(p)) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    }

    /// Whether the entry at `index`, recorded at `time_us`, is in the range.
    pub fn contains(&self, index: u64, time_us: u64) -> bool {
        self.place(index, time_us) == std::cmp::Ordering::Equal
    }

    /// Whether a range was given.
    pub fn is_whole(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }
}

/// A range in words.
pub fn range_text(range: &Range) -> String {
    let point = |p: Option<Point>, open: &str| match p {
        None => open.to_string(),
        Some(Point::Event(n)) => format!("event {n}"),
        Some(Point::Micros(n)) => format!("{n} us"),
    };
    if range.is_whole() {
        "the whole history".to_string()
    } else {
        format!(
            "from {} up to {}",
            point(range.start, "the start"),
            point(range.end, "the end")
        )
    }
}

/// A peak: how many bytes, and at which entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Peak {
    /// Bytes.
    pub bytes: u64,
    /// The entry after which the total was this (its index in the device's trace; `None`: the
    /// state before the first entry, what was there when recording began).
    pub event: Option<u64>,
    /// That entry's `time_us` (`None`: before the first entry, or a file without times).
    pub time_us: Option<u64>,
}

/// One live block, as printed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockRow {
    /// Its address.
    pub address: u64,
    /// Bytes asked for.
    pub size: u64,
    /// The alloc entry's index (`None`: allocated before recording began).
    pub allocated_at: Option<u64>,
    /// The alloc entry's `time_us` (`None`: before recording began, or a file without times).
    pub time_us: Option<u64>,
    /// Its frames shown ([`super::frames::user_frames`]), innermost first.
    pub frames: Vec<String>,
}

/// An allocation site: the blocks live at the peak whose shown frames are the same (by default
/// their first user frame: one line of the user's code).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SiteRow {
    /// Its frames, innermost first (`file:line:function` with the file's whole path, as
    /// MemoryViz.js prints them; empty: no frames recorded).
    pub frames: Vec<String>,
    /// Whether it is the blocks allocated before recording began (no stack in the file), kept
    /// apart from those whose stack has no frames.
    pub before_recording: bool,
    /// Bytes live at the peak.
    pub bytes: u64,
    /// Blocks live at the peak.
    pub blocks: u64,
}

/// Free bytes in the segments of one size class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClassRow {
    /// The class: `2 MiB` (the small pool's segments), `20 MiB` (large requests up to 10 MiB),
    /// `other` (a segment sized to one larger request), or `expandable` (the mapped ranges of
    /// expandable segments).
    pub class: String,
    /// Segments of the class.
    pub segments: u64,
    /// Their bytes.
    pub reserved: u64,
    /// The bytes in them no live block holds.
    pub free: u64,
}

/// Fragmentation at a point: how much of what is reserved is free, and in what pieces.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fragmentation {
    /// Reserved minus allocated (allocated: the bytes asked for, as torch counts them).
    pub reserved_minus_allocated: u64,
    /// The largest free gap in one segment (the largest request the cache could serve without a
    /// new segment).
    pub largest_free_block: u64,
    /// Free bytes by segment size class.
    pub by_class: Vec<ClassRow>,
    /// MemoryViz.js's `calculate_fragmentation`: the sum of each free gap's size squared over the
    /// reserved bytes squared (1: one free gap as large as all that is reserved; near 0: the free
    /// bytes are in many small pieces, or few).
    pub viewer_fragmentation: f64,
}

/// An out-of-memory entry and the state when it came.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OomRow {
    /// Its index.
    pub event: u64,
    /// Its `time_us` (`None`: a file without times).
    pub time_us: Option<u64>,
    /// The bytes that could not be had (the entry's `size`).
    pub requested: u64,
    /// What the device reported free (`device_free`).
    pub device_free: u64,
    /// Allocated bytes then.
    pub allocated: u64,
    /// Reserved bytes then.
    pub reserved: u64,
    /// The largest free gap in the cached segments then (inside mapped pages).
    pub largest_free_block: u64,
    /// Bytes free in the cached segments then: reserved minus what the blocks hold, never more
    /// than reserved minus allocated.
    pub free_in_segments: u64,
    /// Whether the segments were expandable (the request needed more pages mapped).
    pub expandable: bool,
    /// Why the request failed, in words.
    pub why: String,
    /// Its frames.
    pub frames: Vec<String>,
}

/// What one device's history says.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceReport {
    /// The device's index.
    pub device: usize,
    /// Entries in its trace.
    pub events: u64,
    /// Entries in the range.
    pub events_in_range: u64,
    /// alloc entries in the range.
    pub allocs: u64,
    /// free_completed entries in the range.
    pub frees: u64,
    /// segment_alloc and segment_map entries in the range.
    pub segment_allocs: u64,
    /// segment_free and segment_unmap entries in the range.
    pub segment_frees: u64,
    /// The first and last `time_us` in the range (`None`: no entry in it records a time, as in
    /// files from torch 2.1 and older).
    pub time_us: Option<(u64, u64)>,
    /// Whether a history was recorded (a state-only snapshot has segments and no entries).
    pub history: bool,
    /// Peak allocated bytes in the range.
    pub peak_allocated: Peak,
    /// Peak reserved bytes in the range.
    pub peak_reserved: Peak,
    /// Reserved bytes when allocated peaked.
    pub reserved_at_peak: u64,
    /// Segments when allocated peaked.
    pub segments_at_peak: u64,
    /// Bytes allocated before recording began, alive at the peak (not in the trace: no frames).
    pub unrecorded_at_peak: u64,
    /// The largest blocks live at the peak.
    pub largest_blocks: Vec<BlockRow>,
    /// Blocks live at the peak, by allocation site, largest first.
    pub sites: Vec<SiteRow>,
    /// How many sites there were in all.
    pub site_count: u64,
    /// Fragmentation at the peak.
    pub fragmentation: Fragmentation,
    /// The out-of-memory entries in the range (the first [`MAX_OOMS`]).
    pub ooms: Vec<OomRow>,
    /// How many out-of-memory entries the range holds.
    pub oom_count: u64,
    /// The segments at the end of the range (for a state-only snapshot, its state).
    pub segments_at_end: u64,
    /// Reserved bytes at the end of the range.
    pub reserved_at_end: u64,
    /// Allocated bytes at the end of the range.
    pub allocated_at_end: u64,
    /// Fragmentation at the end of the range.
    pub fragmentation_at_end: Fragmentation,
    /// Blocks allocated in the range and still alive at its end, largest first.
    pub leak_candidates: Vec<BlockRow>,
    /// Their bytes in all.
    pub leak_bytes: u64,
    /// Their number in all.
    pub leak_count: u64,
}

/// What a snapshot file says.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// The file.
    pub file: String,
    /// What kind of file it is.
    pub kind: String,
    /// The allocator settings recorded (`PYTORCH_CUDA_ALLOC_CONF`; empty: torch's defaults).
    pub alloc_conf: String,
    /// The range read.
    pub range: Range,
    /// Which devices are reported, and why, in words.
    pub device_choice: String,
    /// One report per device with trace entries or segments (or the one `--device` chose).
    pub devices: Vec<DeviceReport>,
}

/// How many rows the lists keep.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Rows of largest blocks, sites and leak candidates.
    pub top: usize,
    /// User frames shown per stack; sites are grouped by them.
    pub frames: usize,
}

/// Out-of-memory entries described in full (the rest are counted).
pub const MAX_OOMS: usize = 16;

/// Where the peak's state is kept.
#[derive(Debug, Clone, Copy)]
enum PeakAt {
    /// The state before the range's first entry, with the index of the entry before it.
    Start(Option<u64>),
    /// After entry N (the model keeps the changes since).
    Event(u64),
}

/// One device's history as it is read.
struct Reader {
    device: usize,
    range: Range,
    model: Model,
    in_range: u64,
    allocs: u64,
    frees: u64,
    segment_allocs: u64,
    segment_frees: u64,
    times: Option<(u64, u64)>,
    /// The first and last `time_us` in the whole trace.
    all_times: Option<(u64, u64)>,
    /// The running totals (allocated, reserved) before the range's first entry.
    start_totals: (i128, i128),
    /// The running allocated total at the peak, and where it was.
    peak: Option<(i128, PeakAt, Option<u64>)>,
    /// The running reserved total at its peak, the entry, its time.
    peak_reserved: Option<(i128, Option<u64>, Option<u64>)>,
    ooms: Vec<(OomRow, u32, Saved)>,
    oom_count: u64,
    /// The state when the range ended (`None`: still in it).
    at_end: Option<Saved>,
}

impl Reader {
    fn new(device: usize, range: Range) -> Reader {
        Reader {
            device,
            range,
            model: Model::new(),
            in_range: 0,
            allocs: 0,
            frees: 0,
            segment_allocs: 0,
            segment_frees: 0,
            times: None,
            all_times: None,
            start_totals: (0, 0),
            peak: None,
            peak_reserved: None,
            ooms: Vec::new(),
            oom_count: 0,
            at_end: None,
        }
    }

    /// Reads one entry; returns whether it was in the range.
    fn push(&mut self, e: &TraceEntry, stack: u32) -> bool {
        let index = self.model.applied();
        let place = self.range.place(index, e.time_us);
        if place == std::cmp::Ordering::Greater && self.at_end.is_none() {
            self.at_end = Some(self.model.save());
        }
        if place == std::cmp::Ordering::Equal && self.peak.is_none() {
            // The state before the range's first entry is a candidate too.
            let before = index.checked_sub(1);
            if before.is_some() {
                self.model.mark();
            }
            self.peak = Some((self.model.running_allocated(), PeakAt::Start(before), None));
            self.peak_reserved = Some((self.model.running_reserved(), before, None));
            self.start_totals = (
                self.model.running_allocated(),
                self.model.running_reserved(),
            );
        }
        if e.time_us != 0 {
            let (first, _) = self.all_times.get_or_insert((e.time_us, e.time_us));
            self.all_times = Some((*first, e.time_us));
        }
        self.model.apply(e, stack);
        if place != std::cmp::Ordering::Equal {
            return false;
        }
        self.in_range += 1;
        let time = (e.time_us != 0).then_some(e.time_us);
        if let Some(t) = time {
            let (first, _) = self.times.get_or_insert((t, t));
            self.times = Some((*first, t));
        }
        match e.action {
            TraceAction::Alloc => self.allocs += 1,
            TraceAction::FreeCompleted => self.frees += 1,
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => self.segment_allocs += 1,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => self.segment_frees += 1,
            TraceAction::Oom => {
                self.oom_count += 1;
                if self.ooms.len() < MAX_OOMS {
                    let row = OomRow {
                        event: index,
                        time_us: time,
                        requested: e.size,
                        device_free: e.addr,
                        allocated: 0,
                        reserved: 0,
                        largest_free_block: 0,
                        free_in_segments: 0,
                        expandable: false,
                        why: String::new(),
                        frames: Vec::new(),
                    };
                    self.ooms.push((row, stack, self.model.save()));
                }
            }
            _ => {}
        }
        let allocated = self.model.running_allocated();
        if self.peak.is_none_or(|(best, ..)| allocated > best) {
            self.model.mark();
            self.peak = Some((allocated, PeakAt::Event(index), time));
        }
        let reserved = self.model.running_reserved();
        if self.peak_reserved.is_none_or(|(best, ..)| reserved > best) {
            self.peak_reserved = Some((reserved, Some(index), time));
        }
        true
    }

    /// The report, once every entry is read: the final segments complete the model.
    fn finish(
        mut self,
        final_segments: &[&SegmentInfo],
        stacks: &Stacks,
        limits: Limits,
    ) -> DeviceReport {
        let history = self.model.applied() > 0;
        self.model.close(final_segments);
        let at_end = self.at_end.take().unwrap_or_else(|| self.model.save());
        let allocated_before = i128::from(self.model.allocated_before());
        let reserved_before = i128::from(self.model.reserved_before());
        let total = |running: i128, before: i128| (running + before).max(0) as u64;
        // The frames shown for each stack: its first user frames (see [`super::frames`]).
        let shown_frames: RefCell<HashMap<u32, Vec<String>>> = RefCell::default();
        let frames = |stack: u32| -> Vec<String> {
            if stack == NO_STACK {
                return Vec::new();
            }
            shown_frames
                .borrow_mut()
                .entry(stack)
                .or_insert_with(|| user_frames(stacks, stack, limits.frames))
                .clone()
        };
        let row = |address: u64, l: &Live| BlockRow {
            address,
            size: l.size,
            allocated_at: l.index,
            time_us: (l.time_us != 0).then_some(l.time_us),
            frames: frames(l.stack),
        };
        let (peak_running, peak_at, peak_time) =
            self.peak.unwrap_or((0, PeakAt::Start(None), None));
        let peak = Peak {
            bytes: total(peak_running, allocated_before),
            event: match peak_at {
                PeakAt::Start(before) => before,
                PeakAt::Event(i) => Some(i),
            },
            time_us: peak_time,
        };
        let (reserved_running, reserved_event, reserved_time) =
            self.peak_reserved.unwrap_or((0, None, None));
        let peak_reserved = Peak {
            bytes: total(reserved_running, reserved_before),
            event: reserved_event,
            time_us: reserved_time,
        };
        let ooms: Vec<OomRow> = std::mem::take(&mut self.ooms)
            .into_iter()
            .map(|(mut o, stack, saved)| {
                let layout = self.model.layout(&saved);
                o.allocated = layout.allocated();
                o.reserved = layout.reserved();
                o.largest_free_block = layout.largest_free_block();
                o.free_in_segments = layout.segments.iter().flat_map(|s| &s.free).sum();
                o.expandable = layout.segments.iter().any(|s| s.expandable);
                o.frames = frames(stack);
                o.why = why(&o);
                o
            })
            .collect();
        let end_layout = self.model.layout(&at_end);
        let mut leaks: Vec<(u64, Live)> = at_end
            .live()
            .filter(|(_, l)| {
                l.index
                    .is_some_and(|i| self.range.place(i, l.time_us) == std::cmp::Ordering::Equal)
            })
            .collect();
        leaks.sort_by_key(|(a, l)| (std::cmp::Reverse(l.size), *a));
        let peak_state = match peak_at {
            PeakAt::Start(None) => self.model.before_first(),
            PeakAt::Start(Some(i)) | PeakAt::Event(i) => self.model.rewound(Some(i)),
        };
        let layout = self.model.layout(&peak_state);
        let mut blocks: Vec<(u64, Live)> = self.model.blocks_at(&peak_state).collect();
        blocks.sort_by_key(|(a, l)| (std::cmp::Reverse(l.size), *a));
        let unrecorded_at_peak: u64 = blocks
            .iter()
            .filter(|(_, l)| l.stack == NO_STACK)
            .map(|(_, l)| l.size)
            .sum();
        // A site is the frames shown: by default the first user frame, so that the blocks of
        // one line of the user's are one site whatever torch frames lie under it, and two lines
        // are two sites.
        type Site = (bool, Vec<String>);
        let mut sites: HashMap<Site, (u64, u64)> = HashMap::new();
        for (_, l) in &blocks {
            let s = sites
                .entry((l.stack == NO_STACK, frames(l.stack)))
                .or_default();
            s.0 += l.size;
            s.1 += 1;
        }
        let mut sites: Vec<(Site, (u64, u64))> = sites.into_iter().collect();
        sites.sort_by(|(a, (x, _)), (b, (y, _))| y.cmp(x).then_with(|| a.cmp(b)));
        let reserved_at_peak = layout.reserved();
        let mut fragmentation = fragmentation_of(&layout);
        fragmentation.reserved_minus_allocated = reserved_at_peak.saturating_sub(peak.bytes);
        let mut fragmentation_at_end = fragmentation_of(&end_layout);
        fragmentation_at_end.reserved_minus_allocated =
            end_layout.reserved().saturating_sub(end_layout.allocated());
        DeviceReport {
            device: self.device,
            events: self.model.applied(),
            events_in_range: self.in_range,
            allocs: self.allocs,
            frees: self.frees,
            segment_allocs: self.segment_allocs,
            segment_frees: self.segment_frees,
            time_us: self.times,
            history,
            peak_allocated: peak,
            peak_reserved,
            reserved_at_peak,
            segments_at_peak: layout.segments.len() as u64,
            unrecorded_at_peak,
            largest_blocks: blocks
                .iter()
                .take(limits.top)
                .map(|(a, l)| row(*a, l))
                .collect(),
            site_count: sites.len() as u64,
            sites: sites
                .iter()
                .take(limits.top)
                .map(|((before_recording, frames), (bytes, count))| SiteRow {
                    frames: frames.clone(),
                    before_recording: *before_recording,
                    bytes: *bytes,
                    blocks: *count,
                })
                .collect(),
            fragmentation,
            ooms,
            oom_count: self.oom_count,
            segments_at_end: end_layout.segments.len() as u64,
            reserved_at_end: end_layout.reserved(),
            allocated_at_end: end_layout.allocated(),
            fragmentation_at_end,
            leak_bytes: leaks.iter().map(|(_, l)| l.size).sum(),
            leak_count: leaks.len() as u64,
            leak_candidates: leaks
                .iter()
                .take(limits.top)
                .map(|(a, l)| row(*a, l))
                .collect(),
        }
    }
}

/// The size class of a segment.
fn class_of(s: &SegmentState) -> &'static str {
    const MIB: u64 = 1 << 20;
    match s.size {
        _ if s.expandable => "expandable",
        s if s == 2 * MIB => "2 MiB",
        s if s == 20 * MIB => "20 MiB",
        _ => "other",
    }
}

/// Free bytes by segment class, the largest gap and the viewer's measure, at one point.
pub fn fragmentation_of(layout: &Layout) -> Fragmentation {
    let mut classes: BTreeMap<&str, ClassRow> = BTreeMap::new();
    let (mut total, mut squares) = (0f64, 0f64);
    for s in &layout.segments {
        let class = class_of(s);
        let row = classes.entry(class).or_insert_with(|| ClassRow {
            class: class.to_string(),
            segments: 0,
            reserved: 0,
            free: 0,
        });
        row.segments += 1;
        row.reserved += s.size;
        row.free += s.free.iter().sum::<u64>();
        total += s.size as f64;
        squares += s.free.iter().map(|&g| (g as f64) * (g as f64)).sum::<f64>();
    }
    let order = |c: &str| {
        ["2 MiB", "20 MiB", "other", "expandable"]
            .iter()
            .position(|x| *x == c)
    };
    let mut by_class: Vec<ClassRow> = classes.into_values().collect();
    by_class.sort_by_key(|r| order(&r.class));
    Fragmentation {
        reserved_minus_allocated: layout.reserved().saturating_sub(layout.allocated()),
        largest_free_block: layout.largest_free_block(),
        by_class,
        viewer_fragmentation: if total == 0.0 {
            0.0
        } else {
            squares / (total * total)
        },
    }
}

/// Why an allocation failed, from what was free when it did, in numbers that add up: what the
/// blocks hold plus what is free is what is reserved.
fn why(o: &OomRow) -> String {
    let size = gpumem::format_bytes;
    let held = o.reserved.saturating_sub(o.free_in_segments);
    let rounding = held.saturating_sub(o.allocated);
    let state = format!(
        "{} reserved{} = {} held by live blocks ({} asked for, {} rounding) + {} free in the \
         segments (largest piece {}); the device had {} more free",
        size(o.reserved),
        if o.expandable {
            " (mapped pages of expandable segments)"
        } else {
            ""
        },
        size(held),
        size(o.allocated),
        size(rounding),
        size(o.free_in_segments),
        size(o.largest_free_block),
        size(o.device_free)
    );
    let cause = if o.largest_free_block >= o.requested {
        "A free piece large enough was cached, but in a segment of another stream or pool (the \
         small pool serves requests of 1 MiB and less): free it there with \
         torch.cuda.empty_cache(), or allocate on one stream"
            .to_string()
    } else if o.free_in_segments >= o.requested {
        // Enough was free in the cache, in pieces: a new segment was needed, and the device (or
        // a cap on the process) refused it. torch frees only whole free segments before it gives
        // up, never the free part of one that holds live blocks.
        let refused = if o.device_free >= o.requested {
            "the driver was never short (the device had more free): a cap on this process \
             refused the new memory (torch.cuda.set_per_process_memory_fraction; torch's message \
             says how much is allowed)"
        } else {
            "the device had too little free for a new segment"
        };
        if o.expandable {
            format!(
                "Fragmentation: more than was asked was free in the mapped pages, but not in one \
                 piece (the free pages lie between live blocks), and {refused}"
            )
        } else {
            format!(
                "Fragmentation: more than was asked was free in the cached segments, but not in \
                 one piece (the holes lie between live blocks of one segment, which torch does \
                 not release), and {refused}. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
                 lets torch unmap the free pages and map them again where one piece fits"
            )
        }
    } else if o.device_free >= o.requested {
        // The allocator asks the driver for a new segment (or, expandable, for more pages) before
        // it gives up; with the device this free, only a limit of its own refuses that: the cap
        // that torch.cuda.set_per_process_memory_fraction sets (torch's message shows it as
        // "N allowed"), which a snapshot does not record. Seen on an H100 (bench/gpu-runs).
        format!(
            "That is more than was asked, so the driver was never short: a cap on \
             this process refused the new {} (torch.cuda.set_per_process_memory_fraction; \
             torch's message says how much is allowed, a snapshot does not record it). Raise \
             the cap, or hold less under it",
            if o.expandable { "pages" } else { "segment" }
        )
    } else if o.free_in_segments.saturating_add(o.device_free) >= o.requested {
        if o.expandable {
            "Enough was free in all, but not in one piece: the free pages are between live \
             blocks"
                .to_string()
        } else {
            "Enough was free in all, but not in one piece (fragmentation): \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets a segment grow into the \
             device's free memory instead"
                .to_string()
        }
    } else {
        format!(
            "The memory was in use: {} more would have had to be freed (fewer or smaller live \
             tensors: a smaller batch, activation checkpointing)",
            size(
                o.requested
                    .saturating_sub(o.free_in_segments.saturating_add(o.device_free))
            )
        )
    };
    format!("{} was asked for; {state}. {cause}", size(o.requested))
}

/// What a snapshot file holds besides its entries.
pub struct FileContents {
    /// The segments at the end, each with its device's index.
    pub segments: Vec<(usize, SegmentInfo)>,
    /// The entries' stacks.
    pub stacks: Stacks,
    /// What kind of file it is, in words.
    pub kind: String,
    /// The allocator settings recorded (`PYTORCH_CUDA_ALLOC_CONF`).
    pub alloc_conf: String,
}

/// The entries of a snapshot file, as a stream: calls `on_entry(device, entry, stack)` for each,
/// and returns the rest of what the file holds.
pub fn read_entries(
    path: &Path,
    mut on_entry: impl FnMut(usize, &TraceEntry, u32),
) -> Result<FileContents> {
    if snapshot_pickle::is_pickle(path) {
        let (contents, stacks) =
            snapshot_pickle::read_snapshot_file_stacks(path, |d, e, s| on_entry(d, &e, s))
                .with_context(|| format!("reading the snapshot {}", path.display()))?;
        let kind = if contents.devices == 0 && contents.entries.is_empty() {
            "a list of segments (what torch.cuda.memory.memory_snapshot() returns: no history)"
        } else {
            "a snapshot pickle (torch.cuda.memory._dump_snapshot's schema)"
        };
        return Ok(FileContents {
            segments: contents.segments,
            stacks,
            kind: kind.into(),
            alloc_conf: contents.alloc_conf.unwrap_or_default(),
        });
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the snapshot {}", path.display()))?;
    let (snapshot, kind) = match Snapshot::from_json(&text) {
        Ok(s) => (s, "a gpumem snapshot (JSON)".to_string()),
        Err(snapshot_error) => {
            let trace = gpumem::trace::AllocTrace::from_json(&text).map_err(|trace_error| {
                anyhow::anyhow!(
                    "{} is neither a snapshot (torch's pickle, gpumem's JSON: {snapshot_error}) \
                     nor a gpumem trace ({trace_error})",
                    path.display()
                )
            })?;
            (
                recorded_replay(&trace)?,
                "a gpumem trace, replayed once on cpu with torch's default settings".to_string(),
            )
        }
    };
    let mut stacks = Stacks::default();
    let device = snapshot
        .device
        .strip_prefix("cuda:")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    for e in &snapshot.trace {
        let stack = stacks.intern(&e.frames);
        on_entry(device, e, stack);
    }
    let alloc_conf = snapshot.allocator_settings.text.clone();
    Ok(FileContents {
        segments: snapshot.segments.into_iter().map(|s| (device, s)).collect(),
        stacks,
        kind,
        alloc_conf,
    })
}

/// A trace replayed through a fresh allocator on `cpu` with its history recorded.
fn recorded_replay(trace: &gpumem::trace::AllocTrace) -> Result<Snapshot> {
    let allocator = gpumem::CachingAllocator::new(
        gpumem::backend_cpu::CpuBackend::new(usize::MAX),
        "cpu",
        gpumem::AllocatorConfig::default(),
    );
    let (result, snapshot) = gpumem::trace::replay_recorded(&allocator, trace);
    result.context("replaying the trace")?;
    snapshot.context("the replay recorded nothing")
}

/// The devices of a file that hold anything (trace entries or segments), in words:
/// `devices 0, 1`.
fn devices_text(devices: &[usize]) -> String {
    let list: Vec<String> = devices.iter().map(usize::to_string).collect();
    match list.len() {
        0 => "no device".to_string(),
        1 => format!("device {}", list[0]),
        _ => format!("devices {}", list.join(", ")),
    }
}

/// The error for `--device N` when the file holds nothing on device N.
fn no_such_device(path: &Path, device: usize, has: &[usize]) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: the snapshot holds nothing on device {device}; it has {} (give one of those)",
        path.display(),
        devices_text(has)
    )
}

/// Reads a snapshot file and reports what its history says in `range`, for `device` (`None`:
/// every device with entries or segments).
pub fn inspect(path: &Path, range: Range, limits: Limits, device: Option<usize>) -> Result<Report> {
    let mut readers: Vec<Reader> = Vec::new();
    let contents = read_entries(path, |device, e, stack| {
        while readers.len() <= device {
            let n = readers.len();
            readers.push(Reader::new(n, range));
        }
        readers[device].push(e, stack);
    })?;
    // A device with segments and no entries (a state-only snapshot) is reported from its state.
    for (device, _) in &contents.segments {
        while readers.len() <= *device {
            let n = readers.len();
            readers.push(Reader::new(n, range));
        }
    }
    let with_state: Vec<bool> = (0..readers.len())
        .map(|d| contents.segments.iter().any(|(s, _)| *s == d))
        .collect();
    let readers: Vec<Reader> = readers
        .into_iter()
        .filter(|r| r.model.applied() > 0 || with_state[r.device])
        .collect();
    if readers.is_empty() {
        bail!(
            "{}: the snapshot has neither trace entries nor segments (was \
             torch.cuda.memory._record_memory_history() called before the work?)",
            path.display()
        );
    }
    let has: Vec<usize> = readers.iter().map(|r| r.device).collect();
    let (readers, device_choice) = match device {
        Some(d) => {
            if !has.contains(&d) {
                return Err(no_such_device(path, d, &has));
            }
            let chosen = readers.into_iter().filter(|r| r.device == d).collect();
            (
                chosen,
                format!(
                    "device {d} (--device {d}; the file has {})",
                    devices_text(&has)
                ),
            )
        }
        None if has.len() == 1 => (
            readers,
            format!("{} (the only one with anything)", devices_text(&has)),
        ),
        None => (
            readers,
            format!(
                "{}: every device with entries or segments (--device N for one)",
                devices_text(&has)
            ),
        ),
    };
    if !range.is_whole() && readers.iter().all(|r| r.in_range == 0) {
        bail!("{}", empty_range(path, &range, &readers));
    }
    let devices: Vec<DeviceReport> = readers
        .into_iter()
        .map(|r| {
            let device = r.device;
            let own: Vec<&SegmentInfo> = contents
                .segments
                .iter()
                .filter(|(d, _)| *d == device)
                .map(|(_, s)| s)
                .collect();
            r.finish(&own, &contents.stacks, limits)
        })
        .collect();
    Ok(Report {
        file: path.display().to_string(),
        kind: contents.kind,
        alloc_conf: contents.alloc_conf,
        range,
        device_choice,
        devices,
    })
}

/// The one device of a file a command draws or replays, and why, in words: `device` if given
/// (by the option `flag`; an error naming the devices the file has if it has nothing there), else
/// the device whose allocated peak is the largest.
pub fn choose_device(path: &Path, device: Option<usize>, flag: &str) -> Result<(usize, String)> {
    let limits = Limits { top: 0, frames: 1 };
    let report = inspect(path, Range::default(), limits, device)?;
    let has: Vec<usize> = report.devices.iter().map(|d| d.device).collect();
    let best = report
        .devices
        .iter()
        .max_by_key(|d| (d.peak_allocated.bytes, std::cmp::Reverse(d.device)))
        .context("a report has a device")?;
    let why = match (device, has.len()) {
        (Some(d), _) => format!("device {d} ({flag} {d})"),
        (None, 1) => format!("device {} (the only one with anything)", best.device),
        (None, _) => format!(
            "device {}: its allocated peak ({}) is the largest of {} ({flag} N for another)",
            best.device,
            gpumem::format_bytes(best.peak_allocated.bytes),
            devices_text(&has)
        ),
    };
    Ok((best.device, why))
}

/// Why `--range` selects nothing, naming what the file holds.
fn empty_range(path: &Path, range: &Range, readers: &[Reader]) -> String {
    let extent: Vec<String> = readers
        .iter()
        .map(|r| {
            let events = r.model.applied();
            let times = match r.all_times {
                Some((first, last)) => format!(", time_us {first}..={last}"),
                None => ", no timestamps in this file (torch 2.1 and older record none)".into(),
            };
            format!("device {} holds events 0..{events}{times}", r.device)
        })
        .collect();
    format!(
        "{}: --range {} holds no event: {}",
        path.display(),
        range_text(range),
        extent.join("; ")
    )
}

/// The entries of one device in `range`, with running totals, and its state at the range's end,
/// as a gpumem snapshot (what `workbook viz --range` draws), and which device it is and why, in
/// words: `device`, or else the one whose allocated peak in the range is the largest. The file is
/// read once; only the entries in the range are held.
pub fn window(path: &Path, range: Range, device: Option<usize>) -> Result<(Snapshot, String)> {
    let mut readers: Vec<(Reader, Vec<TraceEntry>)> = Vec::new();
    let contents = read_entries(path, |d, e, stack| {
        while readers.len() <= d {
            readers.push((Reader::new(readers.len(), range), Vec::new()));
        }
        let (reader, kept) = &mut readers[d];
        if reader.push(e, stack) {
            let mut e = e.clone();
            e.frames.clear();
            kept.push(e);
        }
    })?;
    let has: Vec<usize> = (0..readers.len().max(
        contents
            .segments
            .iter()
            .map(|(d, _)| d + 1)
            .max()
            .unwrap_or(0),
    ))
        .filter(|d| {
            readers.get(*d).is_some_and(|(r, _)| r.model.applied() > 0)
                || contents.segments.iter().any(|(s, _)| s == d)
        })
        .collect();
    if let Some(d) = device
        && !has.contains(&d)
    {
        return Err(no_such_device(path, d, &has));
    }
    let final_segments = |d: usize| -> Vec<&SegmentInfo> {
        contents
            .segments
            .iter()
            .filter(|(x, _)| *x == d)
            .map(|(_, s)| s)
            .collect()
    };
    // Each device's allocated peak in the range, the state from before recording included.
    let mut peaks: Vec<(usize, u64)> = Vec::new();
    for (reader, kept) in &mut readers {
        if kept.is_empty() {
            continue;
        }
        reader.model.close(&final_segments(reader.device));
        let running = reader.peak.map_or(0, |(bytes, ..)| bytes);
        let before = i128::from(reader.model.allocated_before());
        peaks.push((reader.device, (running + before).max(0) as u64));
    }
    let chosen = match device {
        Some(d) => d,
        None => peaks
            .iter()
            .max_by_key(|(d, bytes)| (*bytes, std::cmp::Reverse(*d)))
            .map_or(has.first().copied().unwrap_or(0), |(d, _)| *d),
    };
    let why = match (device, peaks.len()) {
        (Some(d), _) => format!("device {d} (--device {d})"),
        (None, 0 | 1) => format!("device {chosen} (the only one with events in the range)"),
        (None, _) => {
            let bytes = peaks.iter().find(|(d, _)| *d == chosen).map_or(0, |p| p.1);
            let with: Vec<usize> = peaks.iter().map(|(d, _)| *d).collect();
            format!(
                "device {chosen}: its allocated peak in the range ({}) is the largest of {} \
                 (--device N for another)",
                gpumem::format_bytes(bytes),
                devices_text(&with)
            )
        }
    };
    let Some(at) = readers
        .iter()
        .position(|(r, k)| r.device == chosen && !k.is_empty())
    else {
        let readers: Vec<Reader> = readers
            .into_iter()
            .map(|(r, _)| r)
            .filter(|r| r.model.applied() > 0)
            .collect();
        bail!("{}", empty_range(path, &range, &readers));
    };
    let (mut reader, mut kept) = readers.swap_remove(at);
    let at_end = reader.at_end.take().unwrap_or_else(|| reader.model.save());
    reader.model.close(&final_segments(chosen));
    // Running totals from the state before the first entry (what was there when recording began).
    let mut allocated = i128::from(reader.model.allocated_before());
    let mut reserved = i128::from(reader.model.reserved_before());
    allocated += reader.start_totals.0;
    reserved += reader.start_totals.1;
    for e in &mut kept {
        let size = i128::from(e.size);
        match e.action {
            TraceAction::Alloc => allocated += size,
            TraceAction::FreeCompleted => allocated -= size,
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved += size,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved -= size,
            _ => {}
        }
        e.allocated = allocated.max(0) as u64;
        e.reserved = reserved.max(0) as u64;
    }
    // The segments at the range's end, with the live blocks in them and the gaps free.
    let layout = reader.model.layout(&at_end);
    let drawn = layout.segments.iter().map(segment_info).collect();
    let snapshot = Snapshot {
        device: format!("device {chosen} of {}", path.display()),
        segments: drawn,
        trace: kept,
        allocator_settings: gpumem::AllocatorConfig::parse(&contents.alloc_conf)
            .unwrap_or_default(),
        host_segments: Vec::new(),
        host_traces: Vec::new(),
    };
    Ok((snapshot, why))
}

/// A segment of a [`Layout`] as gpumem's snapshot type, its gaps inactive blocks.
pub fn segment_info(s: &SegmentState) -> SegmentInfo {
    let mut infos = Vec::new();
    let mut cursor = s.address;
    for (addr, l) in &s.blocks {
        if *addr > cursor {
            infos.push(BlockInfo {
                address: cursor,
                size: addr - cursor,
                requested_size: 0,
                state: BlockState::Inactive,
            });
        }
        infos.push(BlockInfo {
            address: *addr,
            size: l.extent,
            requested_size: l.size,
            state: BlockState::ActiveAllocated,
        });
        cursor = cursor.max(addr + l.extent);
    }
    if cursor < s.address + s.size {
        infos.push(BlockInfo {
            address: cursor,
            size: s.address + s.size - cursor,
            requested_size: 0,
            state: BlockState::Inactive,
        });
    }
    let pool = if s.size == 2 << 20 && !s.expandable {
        gpumem::stats::Pool::Small
    } else {
        gpumem::stats::Pool::Large
    };
    SegmentInfo::new(
        s.address,
        gpumem::allocator::StreamId(s.stream),
        pool,
        s.expandable,
        infos,
    )
}
