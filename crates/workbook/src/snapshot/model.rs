//! One device's memory as a snapshot's history leaves it: every segment and block at every
//! event, those older than the trace included.
//!
//! torch's viewer (MemoryViz.js) starts from the final `segments` and walks the trace back, undoing
//! each entry, to find what existed before recording began. Walking back needs every entry in
//! memory; this model reads the entries forward, once, and learns the same things as they show:
//! a block freed, or a segment freed or unmapped, that the trace never created existed before the
//! first entry (and lived until that event); a block or mapped range in the final `segments` that
//! the trace never created lived through the whole trace ([`Model::close`]). For a file whose
//! trace and segments agree, the state at every event is the one the walk back gives.
//!
//! Expandable segments are kept as torch keeps them: `segment_map` maps pages into a reserved
//! virtual range and `segment_unmap` unmaps any part of it, so mapped ranges are pieces that grow
//! and shrink; torch reports each contiguous mapped range of one stream as one segment, and so does
//! [`Model::layout`]. Free space is only inside mapped pages.

use gpumem::history::{BlockState, SegmentInfo};
use gpumem::{TraceAction, TraceEntry};
use std::collections::{BTreeMap, HashMap};

/// A block allocated, as the model keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// Bytes asked for (torch's `requested_size`, the trace's `size`): what "live" counts.
    pub size: u64,
    /// Bytes it holds in its segment (its size rounded up to 512 bytes, as the allocator rounds;
    /// exact for a block in the final `segments`).
    pub extent: u64,
    /// Its stack's id ([`NO_STACK`]: allocated before recording began).
    pub stack: u32,
    /// The alloc entry's index (`None`: before recording began).
    pub index: Option<u64>,
    /// The alloc entry's `time_us`.
    pub time_us: u64,
}

/// The stack id of a block allocated before recording began (no frames).
pub const NO_STACK: u32 = u32::MAX;

/// A mapped range of device memory: a whole segment (`cudaMalloc`), or a piece of an expandable
/// segment's mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Bytes.
    pub size: u64,
    /// The stream it serves.
    pub stream: u64,
    /// Whether it is pages of an expandable segment.
    pub expandable: bool,
}

/// A change to the tracked blocks or mappings, kept so that it can be undone.
#[derive(Debug, Clone)]
enum Change {
    Allocated(u64),
    Freed(u64, Live),
    Mapped(u64),
    Unmapped(u64, Mapping),
}

/// What undoes the changes since [`Model::mark`]: each address changed since, with what it held
/// at the mark (`None`: nothing). Only an address's first change is kept, so the journal grows
/// with the addresses touched, not with the entries: the caching allocator hands the same
/// addresses out again and again, and a window in the middle of a 14-million-entry file kept
/// 7 million changes (270 MiB) when each was kept.
#[derive(Debug, Default)]
struct Journal {
    live: HashMap<u64, Option<Live>>,
    mapped: HashMap<u64, Option<Mapping>>,
}

impl Journal {
    fn record(&mut self, change: Change) {
        match change {
            Change::Allocated(a) => {
                self.live.entry(a).or_insert(None);
            }
            Change::Freed(a, l) => {
                self.live.entry(a).or_insert(Some(l));
            }
            Change::Mapped(a) => {
                self.mapped.entry(a).or_insert(None);
            }
            Change::Unmapped(a, m) => {
                self.mapped.entry(a).or_insert(Some(m));
            }
        }
    }
}

/// The state at one point: tracked blocks and mappings as they were then (a copy).
#[derive(Debug, Clone, Default)]
pub struct Saved {
    live: Vec<(u64, Live)>,
    mapped: Vec<(u64, Mapping)>,
    /// The index of the last entry applied (`None`: before the first).
    at: Option<u64>,
}

impl Saved {
    /// The blocks allocated in the trace and live at this point.
    pub fn live(&self) -> impl Iterator<Item = (u64, Live)> + '_ {
        self.live.iter().copied()
    }
}

/// One segment at a point, as torch's `snapshot()` reports it (an expandable segment: one
/// contiguous mapped range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentState {
    /// Start address.
    pub address: u64,
    /// Bytes mapped.
    pub size: u64,
    /// The stream it serves.
    pub stream: u64,
    /// Whether it is (a mapped range of) an expandable segment.
    pub expandable: bool,
    /// Its live blocks, by address.
    pub blocks: Vec<(u64, Live)>,
    /// Its free gaps (bytes no block holds), in address order.
    pub free: Vec<u64>,
}

/// The segments and blocks at one point.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// The segments, by address.
    pub segments: Vec<SegmentState>,
}

impl Layout {
    /// Bytes reserved (the segments' sizes).
    pub fn reserved(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Bytes live (asked for), torch's `allocated`.
    pub fn allocated(&self) -> u64 {
        self.segments
            .iter()
            .flat_map(|s| &s.blocks)
            .map(|(_, l)| l.size)
            .sum()
    }

    /// The largest free gap in one segment: the largest request the cache could serve without
    /// reserving more.
    pub fn largest_free_block(&self) -> u64 {
        self.segments
            .iter()
            .flat_map(|s| s.free.iter().copied())
            .max()
            .unwrap_or(0)
    }
}

/// One device's memory through its history.
#[derive(Debug, Default)]
pub struct Model {
    /// Blocks allocated in the trace and live now, by address.
    live: HashMap<u64, Live>,
    /// Mapped ranges created in the trace and mapped now, by start.
    mapped: BTreeMap<u64, Mapping>,
    /// Blocks that existed before the first entry, with the entry that freed them (`None`: alive
    /// at the end).
    before_blocks: Vec<(u64, Live, Option<u64>)>,
    /// Mapped ranges that existed before the first entry, with the entry that freed or unmapped
    /// them (`None`: mapped at the end).
    before_mapped: Vec<(u64, Mapping, Option<u64>)>,
    /// What undoes the changes since [`Model::mark`] (`None`: not journaling).
    journal: Option<Journal>,
    /// Entries applied.
    applied: u64,
    /// Bytes allocated minus bytes freed by the entries so far.
    running_allocated: i128,
    /// Bytes mapped minus bytes unmapped by the entries so far.
    running_reserved: i128,
    closed: bool,
}

impl Model {
    /// An empty model, before the first entry.
    pub fn new() -> Model {
        Model::default()
    }

    /// Entries applied so far.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Allocated bytes now, counted from the first entry (add [`Model::allocated_before`]).
    pub fn running_allocated(&self) -> i128 {
        self.running_allocated
    }

    /// Reserved bytes now, counted from the first entry (add [`Model::reserved_before`]).
    pub fn running_reserved(&self) -> i128 {
        self.running_reserved
    }

    /// Bytes allocated before the first entry (complete after [`Model::close`]).
    pub fn allocated_before(&self) -> u64 {
        self.before_blocks.iter().map(|(_, l, _)| l.size).sum()
    }

    /// Bytes reserved before the first entry (complete after [`Model::close`]).
    pub fn reserved_before(&self) -> u64 {
        self.before_mapped.iter().map(|(_, m, _)| m.size).sum()
    }

    /// Starts keeping the changes from now, dropping those kept so far: the state now can be
    /// had back with [`Model::rewound`].
    pub fn mark(&mut self) {
        self.journal = Some(Journal::default());
    }

    fn record(&mut self, change: Change) {
        if let Some(j) = &mut self.journal {
            j.record(change);
        }
    }

    /// Applies one entry (`stack`: its stack id).
    pub fn apply(&mut self, e: &TraceEntry, stack: u32) {
        let index = self.applied;
        self.applied += 1;
        let size = i128::from(e.size);
        match e.action {
            TraceAction::Alloc => {
                self.running_allocated += size;
                let live = Live {
                    size: e.size,
                    extent: rounded(e.size),
                    stack,
                    index: Some(index),
                    time_us: e.time_us,
                };
                if let Some(old) = self.live.insert(e.addr, live) {
                    self.record(Change::Freed(e.addr, old));
                }
                self.record(Change::Allocated(e.addr));
            }
            TraceAction::FreeCompleted => {
                self.running_allocated -= size;
                match self.live.remove(&e.addr) {
                    Some(old) => self.record(Change::Freed(e.addr, old)),
                    None => self.before_blocks.push((
                        e.addr,
                        Live {
                            size: e.size,
                            extent: rounded(e.size),
                            stack: NO_STACK,
                            index: None,
                            time_us: 0,
                        },
                        Some(index),
                    )),
                }
            }
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                self.running_reserved += size;
                let mapping = Mapping {
                    size: e.size,
                    stream: e.stream,
                    expandable: e.action == TraceAction::SegmentMap,
                };
                if let Some(old) = self.mapped.insert(e.addr, mapping) {
                    self.record(Change::Unmapped(e.addr, old));
                }
                self.record(Change::Mapped(e.addr));
            }
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                self.running_reserved -= size;
                self.unmap(e, index);
            }
            TraceAction::FreeRequested
            | TraceAction::Snapshot
            | TraceAction::Oom
            | TraceAction::Annotation => {}
        }
    }

    /// Removes `[addr, addr + size)` from the mapped pieces, splitting those it cuts; the parts
    /// no tracked piece covers were mapped before the first entry.
    fn unmap(&mut self, e: &TraceEntry, index: u64) {
        let (start, end) = (e.addr, e.addr.saturating_add(e.size));
        let first = self
            .mapped
            .range(..=start)
            .next_back()
            .map_or(start, |(&a, _)| a);
        let cut: Vec<(u64, Mapping)> = self
            .mapped
            .range(first..end)
            .filter(|(a, m)| a.saturating_add(m.size) > start)
            .map(|(a, m)| (*a, *m))
            .collect();
        let mut cursor = start;
        for (a, m) in cut {
            self.mapped.remove(&a);
            self.record(Change::Unmapped(a, m));
            let piece_end = a + m.size;
            if a > cursor {
                self.before_piece(cursor, a - cursor, e, index);
            }
            if a < start {
                self.insert_piece(a, start - a, m);
            }
            if piece_end > end {
                self.insert_piece(end, piece_end - end, m);
            }
            cursor = cursor.max(piece_end);
        }
        if cursor < end {
            self.before_piece(cursor, end - cursor, e, index);
        }
    }

    fn insert_piece(&mut self, at: u64, size: u64, like: Mapping) {
        self.mapped.insert(at, Mapping { size, ..like });
        self.record(Change::Mapped(at));
    }

    fn before_piece(&mut self, at: u64, size: u64, e: &TraceEntry, index: u64) {
        self.before_mapped.push((
            at,
            Mapping {
                size,
                stream: e.stream,
                expandable: e.action == TraceAction::SegmentUnmap,
            },
            Some(index),
        ));
    }

    /// The end of the trace: what the final `segments` hold that the trace never created lived
    /// through it all.
    pub fn close(&mut self, final_segments: &[&SegmentInfo]) {
        if self.closed {
            return;
        }
        self.closed = true;
        for s in final_segments {
            for b in &s.blocks {
                if b.state == BlockState::Inactive {
                    continue;
                }
                match self.live.get_mut(&b.address) {
                    Some(l) => l.extent = b.size,
                    None => self.before_blocks.push((
                        b.address,
                        Live {
                            size: b.requested_size,
                            extent: b.size,
                            stack: NO_STACK,
                            index: None,
                            time_us: 0,
                        },
                        None,
                    )),
                }
            }
            // The segment's range less the tracked pieces in it.
            let (start, end) = (s.address, s.address.saturating_add(s.total_size));
            let first = self
                .mapped
                .range(..=start)
                .next_back()
                .map_or(start, |(&a, _)| a);
            let mut cursor = start;
            let pieces: Vec<(u64, u64)> = self
                .mapped
                .range(first..end)
                .filter(|(a, m)| a.saturating_add(m.size) > start)
                .map(|(a, m)| (*a, a + m.size))
                .collect();
            let mapping = |size| Mapping {
                size,
                stream: s.stream,
                expandable: s.is_expandable,
            };
            for (a, piece_end) in pieces {
                if a > cursor {
                    self.before_mapped.push((cursor, mapping(a - cursor), None));
                }
                cursor = cursor.max(piece_end);
            }
            if cursor < end {
                self.before_mapped
                    .push((cursor, mapping(end - cursor), None));
            }
        }
    }

    /// A copy of the tracked state now.
    pub fn save(&self) -> Saved {
        Saved {
            live: self.live.iter().map(|(a, l)| (*a, *l)).collect(),
            mapped: self.mapped.iter().map(|(a, m)| (*a, *m)).collect(),
            at: self.applied.checked_sub(1),
        }
    }

    /// The tracked state as it was at [`Model::mark`] (the changes since undone), and the model
    /// with no journal. Consumes the tracked state: call it once, after [`Model::close`].
    pub fn rewound(&mut self, at: Option<u64>) -> Saved {
        let mut live = std::mem::take(&mut self.live);
        let mut mapped = std::mem::take(&mut self.mapped);
        let journal = self.journal.take().unwrap_or_default();
        for (a, then) in journal.live {
            match then {
                Some(l) => live.insert(a, l),
                None => live.remove(&a),
            };
        }
        for (a, then) in journal.mapped {
            match then {
                Some(m) => mapped.insert(a, m),
                None => mapped.remove(&a),
            };
        }
        Saved {
            live: live.into_iter().collect(),
            mapped: mapped.into_iter().collect(),
            at,
        }
    }

    /// The state before the first entry: all that existed before recording began.
    pub fn before_first(&self) -> Saved {
        Saved {
            at: None,
            ..Saved::default()
        }
    }

    /// The blocks live at a saved point, the ones from before recording included.
    pub fn blocks_at<'a>(&'a self, saved: &'a Saved) -> impl Iterator<Item = (u64, Live)> + 'a {
        let alive = move |freed: &Option<u64>| match (freed, saved.at) {
            (None, _) | (Some(_), None) => true,
            (Some(f), Some(at)) => *f > at,
        };
        saved.live.iter().copied().chain(
            self.before_blocks
                .iter()
                .filter(move |(_, _, f)| alive(f))
                .map(|(a, l, _)| (*a, *l)),
        )
    }

    /// The segments and blocks at a saved point (after [`Model::close`]).
    pub fn layout(&self, saved: &Saved) -> Layout {
        let alive = |freed: &Option<u64>| match (freed, saved.at) {
            (None, _) | (Some(_), None) => true,
            (Some(f), Some(at)) => *f > at,
        };
        let mut pieces: Vec<(u64, Mapping)> = saved
            .mapped
            .iter()
            .copied()
            .chain(
                self.before_mapped
                    .iter()
                    .filter(|(_, _, f)| alive(f))
                    .map(|(a, m, _)| (*a, *m)),
            )
            .collect();
        pieces.sort_unstable_by_key(|(a, _)| *a);
        // Contiguous pieces of one stream's expandable mapping are one segment, as torch reports.
        let mut segments: Vec<SegmentState> = Vec::new();
        for (a, m) in pieces {
            if let Some(last) = segments.last_mut()
                && m.expandable
                && last.expandable
                && last.stream == m.stream
                && last.address + last.size == a
            {
                last.size += m.size;
                continue;
            }
            segments.push(SegmentState {
                address: a,
                size: m.size,
                stream: m.stream,
                expandable: m.expandable,
                blocks: Vec::new(),
                free: Vec::new(),
            });
        }
        let starts: Vec<u64> = segments.iter().map(|s| s.address).collect();
        for (addr, l) in self.blocks_at(saved) {
            let i = starts.partition_point(|&s| s <= addr);
            if i > 0 && addr < segments[i - 1].address + segments[i - 1].size {
                segments[i - 1].blocks.push((addr, l));
            }
        }
        for s in &mut segments {
            s.blocks.sort_unstable_by_key(|(a, _)| *a);
            let mut cursor = s.address;
            for (a, l) in &s.blocks {
                if *a > cursor {
                    s.free.push(a - cursor);
                }
                cursor = cursor.max(a + l.extent);
            }
            if cursor < s.address + s.size {
                s.free.push(s.address + s.size - cursor);
            }
        }
        Layout { segments }
    }
}

/// A block's size as the allocator rounds it (to 512 bytes).
pub fn rounded(size: u64) -> u64 {
    size.div_ceil(512).saturating_mul(512)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem::history::BlockInfo;

    const MIB: u64 = 1 << 20;

    fn entry(action: TraceAction, addr: u64, size: u64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            allocated: 0,
            reserved: 0,
            time_us: 0,
            frames: Vec::new(),
            label: None,
        }
    }

    fn segment(address: u64, expandable: bool, blocks: &[(u64, u64, bool)]) -> SegmentInfo {
        SegmentInfo::new(
            address,
            gpumem::allocator::StreamId(0),
            gpumem::stats::Pool::Large,
            expandable,
            blocks
                .iter()
                .map(|&(a, size, live)| BlockInfo {
                    address: a,
                    size,
                    requested_size: if live { size } else { 0 },
                    state: if live {
                        BlockState::ActiveAllocated
                    } else {
                        BlockState::Inactive
                    },
                })
                .collect(),
        )
    }

    #[test]
    fn a_segment_reserved_before_recording_is_in_every_state() {
        // A 20 MiB segment from before recording; the trace allocates 4 MiB in it and frees it.
        let a = 0x1000_0000;
        let mut m = Model::new();
        m.apply(&entry(TraceAction::Alloc, a, 4 * MIB), 0);
        let saved = m.save();
        m.apply(&entry(TraceAction::FreeCompleted, a, 4 * MIB), 0);
        let fin = segment(a, false, &[(a, 20 * MIB, false)]);
        m.close(&[&fin]);
        let at_alloc = m.layout(&saved);
        assert_eq!(at_alloc.segments.len(), 1);
        assert_eq!(at_alloc.reserved(), 20 * MIB);
        assert_eq!(at_alloc.largest_free_block(), 16 * MIB);
        assert_eq!(m.layout(&m.before_first()).largest_free_block(), 20 * MIB);
    }

    #[test]
    fn a_block_freed_without_an_alloc_lived_from_before_recording_until_its_free() {
        let a = 0x1000_0000;
        let mut m = Model::new();
        let before = m.before_first();
        m.apply(&entry(TraceAction::FreeCompleted, a, 6 * MIB), 0);
        let after = m.save();
        let fin = segment(a, false, &[(a, 20 * MIB, false)]);
        m.close(&[&fin]);
        assert_eq!(m.allocated_before(), 6 * MIB);
        assert_eq!(m.layout(&before).allocated(), 6 * MIB);
        assert_eq!(m.layout(&after).allocated(), 0);
    }

    #[test]
    fn expandable_maps_grow_one_segment_and_unmaps_shrink_it_from_any_address() {
        let a = 0x7000_0000_0000;
        let mut m = Model::new();
        let map = |addr, size| {
            let mut e = entry(TraceAction::SegmentMap, addr, size);
            e.stream = 7;
            e
        };
        m.apply(&map(a, 20 * MIB), 0);
        m.apply(&map(a + 20 * MIB, 20 * MIB), 0);
        m.apply(&map(a + 40 * MIB, 2 * MIB), 0);
        let grown = m.save();
        // Unmap the middle 20 MiB: two mapped ranges are left, torch reports two segments.
        let mut unmap = entry(TraceAction::SegmentUnmap, a + 10 * MIB, 20 * MIB);
        unmap.stream = 7;
        m.apply(&unmap, 0);
        let shrunk = m.save();
        m.close(&[]);
        let g = m.layout(&grown);
        assert_eq!(g.segments.len(), 1);
        assert_eq!(g.reserved(), 42 * MIB);
        let s = m.layout(&shrunk);
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.reserved(), 22 * MIB);
        assert_eq!(s.largest_free_block(), 12 * MIB);
    }

    #[test]
    fn an_unmap_of_pages_mapped_before_recording_adds_them_before_the_first_entry() {
        let a = 0x7000_0000_0000;
        let mut m = Model::new();
        m.apply(&entry(TraceAction::SegmentUnmap, a + 20 * MIB, 20 * MIB), 0);
        let fin = segment(a, true, &[(a, 20 * MIB, false)]);
        m.close(&[&fin]);
        let before = m.layout(&m.before_first());
        assert_eq!(before.segments.len(), 1, "{before:?}");
        assert_eq!(before.reserved(), 40 * MIB);
        assert_eq!(m.reserved_before(), 40 * MIB);
    }

    #[test]
    fn rewinding_undoes_the_changes_since_the_mark() {
        let a = 0x1000_0000;
        let mut m = Model::new();
        m.apply(&entry(TraceAction::SegmentAlloc, a, 20 * MIB), 0);
        m.apply(&entry(TraceAction::Alloc, a, 8 * MIB), 0);
        m.mark();
        m.apply(&entry(TraceAction::FreeCompleted, a, 8 * MIB), 0);
        m.apply(&entry(TraceAction::SegmentFree, a, 20 * MIB), 0);
        m.close(&[]);
        let at = m.rewound(Some(1));
        let l = m.layout(&at);
        assert_eq!((l.reserved(), l.allocated()), (20 * MIB, 8 * MIB));
    }

    #[test]
    fn rewinding_restores_addresses_reused_many_times_since_the_mark() {
        let (a, b) = (0x1000_0000, 0x2000_0000);
        let mut m = Model::new();
        m.apply(&entry(TraceAction::SegmentAlloc, a, 20 * MIB), 0);
        m.apply(&entry(TraceAction::Alloc, a, 8 * MIB), 0);
        m.apply(&entry(TraceAction::Alloc, a + 8 * MIB, 2 * MIB), 0);
        m.mark();
        let at_mark = m.save();
        let expected = m.layout(&at_mark);
        // The block at `a` freed and its address handed out again with other sizes; a second
        // segment mapped, used and freed; the segment at `a` freed and reserved again.
        m.apply(&entry(TraceAction::FreeCompleted, a, 8 * MIB), 0);
        for size in [MIB, 3 * MIB, 5 * MIB] {
            m.apply(&entry(TraceAction::Alloc, a, size), 0);
            m.apply(&entry(TraceAction::FreeCompleted, a, size), 0);
        }
        m.apply(&entry(TraceAction::SegmentAlloc, b, 2 * MIB), 0);
        m.apply(&entry(TraceAction::Alloc, b, MIB), 0);
        m.apply(&entry(TraceAction::FreeCompleted, a + 8 * MIB, 2 * MIB), 0);
        m.apply(&entry(TraceAction::SegmentFree, a, 20 * MIB), 0);
        m.apply(&entry(TraceAction::SegmentAlloc, a, 4 * MIB), 0);
        m.apply(&entry(TraceAction::Alloc, a, 4 * MIB), 0);
        m.close(&[]);
        let rewound = m.rewound(at_mark.at);
        assert_eq!(m.layout(&rewound), expected);
        assert_eq!((expected.reserved(), expected.allocated()), (20 * MIB, 10 * MIB));
    }
}
