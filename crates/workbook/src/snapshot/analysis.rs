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

use anyhow::{Context, Result, bail};
use gpumem::history::{BlockInfo, BlockState, Frame, SegmentInfo};
use gpumem::snapshot_pickle;
use gpumem::trace::Stacks;
use gpumem::{Snapshot, TraceAction, TraceEntry};
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

/// A block live in the history: its address, size, when it was allocated and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    size: u64,
    stack: u32,
    index: u64,
    time_us: u64,
}

/// A change to the live blocks or the segments, kept after the peak so that it can be undone.
#[derive(Debug, Clone)]
enum Change {
    Allocated(u64),
    Freed(u64, Live),
    SegmentAdded(u64),
    SegmentRemoved(u64, u64),
}

/// A peak: how many bytes, and at which entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Peak {
    /// Bytes.
    pub bytes: u64,
    /// The entry after which the total was this (its index in the device's trace).
    pub event: u64,
    /// That entry's `time_us`.
    pub time_us: u64,
}

/// One live block, as printed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockRow {
    /// Its address.
    pub address: u64,
    /// Bytes asked for.
    pub size: u64,
    /// The alloc entry's index.
    pub allocated_at: u64,
    /// The alloc entry's `time_us`.
    pub time_us: u64,
    /// Its frames, innermost first, as torch prints them (`file:line:function`).
    pub frames: Vec<String>,
}

/// An allocation site: the blocks live at the peak that share one recorded stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SiteRow {
    /// The stack, innermost first (`file:line:function`; empty: no frames recorded).
    pub frames: Vec<String>,
    /// Bytes live at the peak.
    pub bytes: u64,
    /// Blocks live at the peak.
    pub blocks: u64,
}

/// Free bytes in the segments of one size class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClassRow {
    /// The class: `2 MiB` (the small pool's segments), `20 MiB` (large requests up to 10 MiB),
    /// or `other` (a segment sized to one larger request).
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
    /// Reserved minus allocated.
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
    /// Its `time_us`.
    pub time_us: u64,
    /// The bytes that could not be had (the entry's `size`).
    pub requested: u64,
    /// What the device reported free (`device_free`).
    pub device_free: u64,
    /// Allocated bytes then.
    pub allocated: u64,
    /// Reserved bytes then.
    pub reserved: u64,
    /// The largest free gap in the cached segments then.
    pub largest_free_block: u64,
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
    /// The first and last `time_us` in the range.
    pub time_us: (u64, u64),
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
    /// The out-of-memory entries in the range.
    pub ooms: Vec<OomRow>,
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
    /// One report per device with trace entries.
    pub devices: Vec<DeviceReport>,
}

/// How many rows the lists keep.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Rows of largest blocks, sites and leak candidates.
    pub top: usize,
    /// Frames shown per stack.
    pub frames: usize,
}

/// One device's history as it is read.
struct Reader {
    device: usize,
    range: Range,
    index: u64,
    allocated: i128,
    reserved: i128,
    live: HashMap<u64, Live>,
    segments: BTreeMap<u64, u64>,
    journal: Vec<Change>,
    in_range: u64,
    allocs: u64,
    frees: u64,
    segment_allocs: u64,
    segment_frees: u64,
    first_time: Option<u64>,
    last_time: u64,
    peak: Option<(i128, Peak, i128, u64)>,
    peak_reserved: Option<(i128, Peak)>,
    ooms: Vec<(OomRow, u32)>,
    /// Blocks alive when the range ended (taken at its end; `None`: still in it).
    at_end: Option<Vec<(u64, Live)>>,
    /// The segments when the range ended.
    segments_at_end: Option<BTreeMap<u64, u64>>,
}

/// Out-of-memory entries described in full (the rest are counted).
const MAX_OOMS: usize = 100;

impl Reader {
    fn new(device: usize, range: Range) -> Reader {
        Reader {
            device,
            range,
            index: 0,
            allocated: 0,
            reserved: 0,
            live: HashMap::new(),
            segments: BTreeMap::new(),
            journal: Vec::new(),
            in_range: 0,
            allocs: 0,
            frees: 0,
            segment_allocs: 0,
            segment_frees: 0,
            first_time: None,
            last_time: 0,
            peak: None,
            peak_reserved: None,
            ooms: Vec::new(),
            at_end: None,
            segments_at_end: None,
        }
    }

    fn record(&mut self, change: Change) {
        if self.peak.is_some() {
            self.journal.push(change);
        }
    }

    /// Reads one entry; returns whether it was in the range.
    fn push(&mut self, e: &TraceEntry, stack: u32) -> bool {
        let index = self.index;
        self.index += 1;
        let place = self.range.place(index, e.time_us);
        if place == std::cmp::Ordering::Greater && self.at_end.is_none() {
            self.close();
        }
        let size = i128::from(e.size);
        match e.action {
            TraceAction::Alloc => {
                self.allocated += size;
                let live = Live {
                    size: e.size,
                    stack,
                    index,
                    time_us: e.time_us,
                };
                if let Some(old) = self.live.insert(e.addr, live) {
                    self.record(Change::Freed(e.addr, old));
                }
                self.record(Change::Allocated(e.addr));
            }
            TraceAction::FreeCompleted => {
                self.allocated -= size;
                if let Some(old) = self.live.remove(&e.addr) {
                    self.record(Change::Freed(e.addr, old));
                }
            }
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                self.reserved += size;
                self.segments.insert(e.addr, e.size);
                self.record(Change::SegmentAdded(e.addr));
            }
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                self.reserved -= size;
                if let Some(old) = self.segments.remove(&e.addr) {
                    self.record(Change::SegmentRemoved(e.addr, old));
                }
            }
            TraceAction::FreeRequested
            | TraceAction::Snapshot
            | TraceAction::Oom
            | TraceAction::Annotation => {}
        }
        if place != std::cmp::Ordering::Equal {
            return false;
        }
        self.in_range += 1;
        self.first_time.get_or_insert(e.time_us);
        self.last_time = e.time_us;
        match e.action {
            TraceAction::Alloc => self.allocs += 1,
            TraceAction::FreeCompleted => self.frees += 1,
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => self.segment_allocs += 1,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => self.segment_frees += 1,
            TraceAction::Oom if self.ooms.len() < MAX_OOMS => {
                let largest = largest_gap(&self.segments, &self.live);
                self.ooms.push((
                    OomRow {
                        event: index,
                        time_us: e.time_us,
                        requested: e.size,
                        device_free: e.addr,
                        allocated: 0,
                        reserved: 0,
                        largest_free_block: largest,
                        why: String::new(),
                        frames: Vec::new(),
                    },
                    stack,
                ));
                // The totals are offset at the end; keep the running ones here.
                let row = &mut self.ooms.last_mut().expect("just pushed").0;
                row.allocated = self.allocated.max(0) as u64;
                row.reserved = self.reserved.max(0) as u64;
            }
            _ => {}
        }
        let point = Peak {
            bytes: 0,
            event: index,
            time_us: e.time_us,
        };
        if self.peak.is_none_or(|(best, ..)| self.allocated > best) {
            self.peak = Some((
                self.allocated,
                point,
                self.reserved,
                self.segments.len() as u64,
            ));
            self.journal.clear();
        }
        if self
            .peak_reserved
            .is_none_or(|(best, _)| self.reserved > best)
        {
            self.peak_reserved = Some((self.reserved, point));
        }
        true
    }

    /// The range has ended: keeps the blocks alive now and the segments.
    fn close(&mut self) {
        self.at_end = Some(self.live.iter().map(|(a, l)| (*a, *l)).collect());
        self.segments_at_end = Some(self.segments.clone());
    }

    /// The report, with the offsets that make the totals end at the snapshot's segments.
    fn finish(
        mut self,
        final_segments: &[SegmentInfo],
        stacks: &Stacks,
        limits: Limits,
    ) -> DeviceReport {
        let final_allocated: u64 = final_segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.requested_size)
            .sum();
        let final_reserved: u64 = final_segments.iter().map(|s| s.total_size).sum();
        let off_allocated = (i128::from(final_allocated) - self.allocated).max(0);
        let off_reserved = (i128::from(final_reserved) - self.reserved).max(0);
        let total = |running: i128, offset: i128| (running + offset).max(0) as u64;
        if self.at_end.is_none() {
            self.close();
        }
        let frames = |stack: u32| -> Vec<String> {
            stacks
                .frames(stack)
                .filter(|f| shown(f))
                .take(limits.frames)
                .map(frame_text)
                .collect()
        };
        let row = |address: u64, l: &Live| BlockRow {
            address,
            size: l.size,
            allocated_at: l.index,
            time_us: l.time_us,
            frames: frames(l.stack),
        };
        let (peak_running, mut peak, reserved_running, segments_at_peak) =
            self.peak.unwrap_or_default();
        peak.bytes = total(peak_running, off_allocated);
        // The state at the peak: the changes since undone, newest first.
        let mut live = std::mem::take(&mut self.live);
        let mut segments = std::mem::take(&mut self.segments);
        for change in self.journal.drain(..).rev() {
            match change {
                Change::Allocated(a) => {
                    live.remove(&a);
                }
                Change::Freed(a, l) => {
                    live.insert(a, l);
                }
                Change::SegmentAdded(a) => {
                    segments.remove(&a);
                }
                Change::SegmentRemoved(a, s) => {
                    segments.insert(a, s);
                }
            }
        }
        let mut blocks: Vec<(u64, Live)> = live.iter().map(|(a, l)| (*a, *l)).collect();
        blocks.sort_by_key(|(a, l)| (std::cmp::Reverse(l.size), *a));
        let recorded_at_peak: u64 = blocks.iter().map(|(_, l)| l.size).sum();
        let mut sites: HashMap<u32, (u64, u64)> = HashMap::new();
        for (_, l) in &blocks {
            let s = sites.entry(l.stack).or_default();
            s.0 += l.size;
            s.1 += 1;
        }
        let mut sites: Vec<(u32, (u64, u64))> = sites.into_iter().collect();
        sites.sort_by_key(|(stack, (bytes, _))| (std::cmp::Reverse(*bytes), *stack));
        let site_count = sites.len() as u64;
        let reserved_at_peak = total(reserved_running, off_reserved);
        let mut fragmentation = layout(&segments, &live);
        fragmentation.reserved_minus_allocated = reserved_at_peak.saturating_sub(peak.bytes);
        let (reserved_peak_running, mut peak_reserved) = self.peak_reserved.unwrap_or_default();
        peak_reserved.bytes = total(reserved_peak_running, off_reserved);
        let ooms = self
            .ooms
            .into_iter()
            .map(|(mut o, stack)| {
                o.allocated = total(o.allocated as i128, off_allocated);
                o.reserved = total(o.reserved as i128, off_reserved);
                o.frames = frames(stack);
                o.why = why(&o);
                o
            })
            .collect();
        let mut leaks: Vec<(u64, Live)> = self
            .at_end
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, l)| self.range.place(l.index, l.time_us) == std::cmp::Ordering::Equal)
            .collect();
        leaks.sort_by_key(|(a, l)| (std::cmp::Reverse(l.size), *a));
        DeviceReport {
            device: self.device,
            events: self.index,
            events_in_range: self.in_range,
            allocs: self.allocs,
            frees: self.frees,
            segment_allocs: self.segment_allocs,
            segment_frees: self.segment_frees,
            time_us: (self.first_time.unwrap_or(0), self.last_time),
            peak_allocated: peak,
            peak_reserved,
            reserved_at_peak,
            segments_at_peak: segments_at_peak.max(segments.len() as u64),
            unrecorded_at_peak: peak.bytes.saturating_sub(recorded_at_peak),
            largest_blocks: blocks
                .iter()
                .take(limits.top)
                .map(|(a, l)| row(*a, l))
                .collect(),
            sites: sites
                .iter()
                .take(limits.top)
                .map(|(stack, (bytes, count))| SiteRow {
                    frames: frames(*stack),
                    bytes: *bytes,
                    blocks: *count,
                })
                .collect(),
            site_count,
            fragmentation,
            ooms,
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

/// A block's size as the allocator rounds it (to 512 bytes).
fn rounded(size: u64) -> u64 {
    size.div_ceil(512) * 512
}

/// The free gaps of each segment, given the live blocks: (segment address, segment size, gaps).
fn gaps(segments: &BTreeMap<u64, u64>, live: &HashMap<u64, Live>) -> Vec<(u64, u64, Vec<u64>)> {
    let mut by_segment: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for (&addr, l) in live {
        if let Some((&start, &size)) = segments.range(..=addr).next_back()
            && addr < start + size
        {
            by_segment
                .entry(start)
                .or_default()
                .push((addr, rounded(l.size)));
        }
    }
    segments
        .iter()
        .map(|(&start, &size)| {
            let mut blocks = by_segment.remove(&start).unwrap_or_default();
            blocks.sort_unstable();
            let mut cursor = start;
            let mut free = Vec::new();
            for (addr, len) in blocks {
                if addr > cursor {
                    free.push(addr - cursor);
                }
                cursor = cursor.max(addr + len);
            }
            if cursor < start + size {
                free.push(start + size - cursor);
            }
            (start, size, free)
        })
        .collect()
}

/// The largest free gap in any segment.
fn largest_gap(segments: &BTreeMap<u64, u64>, live: &HashMap<u64, Live>) -> u64 {
    gaps(segments, live)
        .iter()
        .flat_map(|(_, _, g)| g.iter().copied())
        .max()
        .unwrap_or(0)
}

/// The size class of a segment.
fn class_of(size: u64) -> &'static str {
    const MIB: u64 = 1 << 20;
    match size {
        s if s == 2 * MIB => "2 MiB",
        s if s == 20 * MIB => "20 MiB",
        _ => "other",
    }
}

/// Free bytes by segment class, the largest gap and the viewer's measure.
fn layout(segments: &BTreeMap<u64, u64>, live: &HashMap<u64, Live>) -> Fragmentation {
    let mut classes: BTreeMap<&str, ClassRow> = BTreeMap::new();
    let mut largest = 0;
    let (mut total, mut squares) = (0f64, 0f64);
    for (_, size, free) in gaps(segments, live) {
        let class = class_of(size);
        let row = classes.entry(class).or_insert_with(|| ClassRow {
            class: class.to_string(),
            segments: 0,
            reserved: 0,
            free: 0,
        });
        row.segments += 1;
        row.reserved += size;
        row.free += free.iter().sum::<u64>();
        largest = largest.max(free.iter().copied().max().unwrap_or(0));
        total += size as f64;
        squares += free.iter().map(|&g| (g as f64) * (g as f64)).sum::<f64>();
    }
    let order = |c: &str| ["2 MiB", "20 MiB", "other"].iter().position(|x| *x == c);
    let mut by_class: Vec<ClassRow> = classes.into_values().collect();
    by_class.sort_by_key(|r| order(&r.class));
    Fragmentation {
        reserved_minus_allocated: 0,
        largest_free_block: largest,
        by_class,
        viewer_fragmentation: if total == 0.0 {
            0.0
        } else {
            squares / (total * total)
        },
    }
}

/// Why an allocation failed, from what was free when it did.
fn why(o: &OomRow) -> String {
    let size = gpumem::format_bytes;
    let cached = o.reserved.saturating_sub(o.allocated);
    if o.largest_free_block >= o.requested {
        format!(
            "{} was asked for; a free gap of {} was cached, but in a segment of another pool or \
             stream, and the device had {} free",
            size(o.requested),
            size(o.largest_free_block),
            size(o.device_free)
        )
    } else if cached >= o.requested {
        format!(
            "{} was asked for; {} was cached free, enough in all, but in pieces: the largest was {} \
             (fragmentation), and the device had {} free, too little for a new segment",
            size(o.requested),
            size(cached),
            size(o.largest_free_block),
            size(o.device_free)
        )
    } else {
        format!(
            "{} was asked for; only {} was cached free (largest piece {}) and the device had {} \
             free: the memory was in use",
            size(o.requested),
            size(cached),
            size(o.largest_free_block),
            size(o.device_free)
        )
    }
}

/// Whether torch's viewer shows a frame (`_frame_filter` in torch/cuda/_memory_viz.py, torch
/// 2.15: the unwinder's and the interpreter's own frames are left out).
fn shown(f: &Frame) -> bool {
    const FUNCTIONS: [&str; 8] = [
        "unwind::unwind",
        "CapturedTraceback::gather",
        "gather_with_cpp",
        "_start",
        "__libc_start_main",
        "PyEval_",
        "PyObject_",
        "PyFunction_",
    ];
    const FILES: [&str; 10] = [
        "core/boxing",
        "/Register",
        "/Redispatch",
        "pythonrun.c",
        "Modules/main.c",
        "Objects/call.c",
        "Objects/methodobject.c",
        "pycore_ceval.h",
        "ceval.c",
        "cpython/abstract.h",
    ];
    !FUNCTIONS.iter().any(|n| f.name.contains(n)) && !FILES.iter().any(|n| f.filename.contains(n))
}

/// A frame as torch's `_frame_fmt` prints it: `file:line:function` (the file's last part).
fn frame_text(f: &Frame) -> String {
    let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
    format!("{file}:{}:{}", f.line, f.name)
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
        return Ok(FileContents {
            segments: contents.segments,
            stacks,
            kind: "a snapshot pickle (torch.cuda.memory._dump_snapshot's schema)".into(),
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

/// Reads a snapshot file and reports what its history says in `range`.
pub fn inspect(path: &Path, range: Range, limits: Limits) -> Result<Report> {
    let mut readers: Vec<Reader> = Vec::new();
    let contents = read_entries(path, |device, e, stack| {
        while readers.len() <= device {
            let n = readers.len();
            readers.push(Reader::new(n, range));
        }
        readers[device].push(e, stack);
    })?;
    let devices: Vec<DeviceReport> = readers
        .into_iter()
        .filter(|r| r.index > 0)
        .map(|r| {
            let device = r.device;
            let own: Vec<SegmentInfo> = contents
                .segments
                .iter()
                .filter(|(d, _)| *d == device)
                .map(|(_, s)| s.clone())
                .collect();
            r.finish(&own, &contents.stacks, limits)
        })
        .collect();
    if devices.is_empty() {
        bail!(
            "{}: the snapshot has no trace entries (was torch.cuda.memory._record_memory_history() \
             called before the work?)",
            path.display()
        );
    }
    Ok(Report {
        file: path.display().to_string(),
        kind: contents.kind,
        alloc_conf: contents.alloc_conf,
        range,
        devices,
    })
}

/// The entries of the first device with entries in `range`, with running totals, and its state
/// at the range's end, as a gpumem snapshot (what `workbook viz --range` draws): only the
/// entries in the range are held.
pub fn window(path: &Path, range: Range) -> Result<Snapshot> {
    let mut device = None;
    let mut reader = Reader::new(0, range);
    let mut kept: Vec<TraceEntry> = Vec::new();
    let contents = read_entries(path, |d, e, stack| {
        if *device.get_or_insert(d) != d {
            return;
        }
        if reader.push(e, stack) {
            let mut e = e.clone();
            e.frames.clear();
            e.allocated = reader.allocated.max(0) as u64;
            e.reserved = reader.reserved.max(0) as u64;
            kept.push(e);
        }
    })?;
    let device = device.unwrap_or(0);
    if reader.at_end.is_none() {
        reader.close();
    }
    let final_segments: Vec<&SegmentInfo> = contents
        .segments
        .iter()
        .filter(|(d, _)| *d == device)
        .map(|(_, s)| s)
        .collect();
    let final_allocated: u64 = final_segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| b.requested_size)
        .sum();
    let final_reserved: u64 = final_segments.iter().map(|s| s.total_size).sum();
    let off_allocated = (i128::from(final_allocated) - reader.allocated).max(0);
    let off_reserved = (i128::from(final_reserved) - reader.reserved).max(0);
    for e in &mut kept {
        e.allocated = (i128::from(e.allocated) + off_allocated) as u64;
        e.reserved = (i128::from(e.reserved) + off_reserved) as u64;
    }
    // The segments at the range's end, with the live blocks in them and the gaps free.
    let live: HashMap<u64, Live> = reader.at_end.unwrap_or_default().into_iter().collect();
    let segments_now = reader.segments_at_end.unwrap_or_default();
    let mut drawn = Vec::new();
    for (start, size) in &segments_now {
        let mut blocks: Vec<(u64, u64)> = live
            .iter()
            .filter(|(a, _)| **a >= *start && **a < start + size)
            .map(|(a, l)| (*a, l.size))
            .collect();
        blocks.sort_unstable();
        let mut infos = Vec::new();
        let mut cursor = *start;
        for (addr, len) in blocks {
            if addr > cursor {
                infos.push(BlockInfo {
                    address: cursor,
                    size: addr - cursor,
                    requested_size: 0,
                    state: BlockState::Inactive,
                });
            }
            infos.push(BlockInfo {
                address: addr,
                size: rounded(len),
                requested_size: len,
                state: BlockState::ActiveAllocated,
            });
            cursor = addr + rounded(len);
        }
        if cursor < start + size {
            infos.push(BlockInfo {
                address: cursor,
                size: start + size - cursor,
                requested_size: 0,
                state: BlockState::Inactive,
            });
        }
        let pool = if *size == 2 << 20 {
            gpumem::stats::Pool::Small
        } else {
            gpumem::stats::Pool::Large
        };
        drawn.push(SegmentInfo::new(
            *start,
            gpumem::allocator::StreamId(0),
            pool,
            false,
            infos,
        ));
    }
    Ok(Snapshot {
        device: format!("device {device} of {}", path.display()),
        segments: drawn,
        trace: kept,
        allocator_settings: gpumem::AllocatorConfig::parse(&contents.alloc_conf)
            .unwrap_or_default(),
        host_segments: Vec::new(),
        host_traces: Vec::new(),
    })
}
