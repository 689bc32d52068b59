//! Graded tests for chapter 14's snapshot triage: the state of a memory snapshot at an
//! out-of-memory error, made by gpumem's caching allocator on cpu devices of a drawn capacity and
//! read from snapshots torch 2.11 wrote on an H100, to the lever it points to.

use ch14_predict::{Block, Lever, MIB, OomState, Owner, Pool, Segment, triage_snapshot};
use gpumem::allocator::{Allocation, CachingAllocator, StreamId};
use gpumem::backend::RawMemory;
use gpumem::backend_cpu::CpuBackend;
use gpumem::history::{BlockState, SegmentInfo, TraceAction, TraceEntry};
use gpumem::testing::{Draw, Prediction};
use gpumem::{AllocatorConfig, Error};
use std::collections::HashMap;
use std::sync::Arc;

/// The stream every allocation of these tests uses.
const STREAM: StreamId = StreamId(0);
/// The unit of the drawn sizes: every large block is a whole number of them, so that it is a
/// segment of its own when no cached block serves it.
const UNIT: u64 = 2 * MIB;

/// What each lever's rule says, named when a learner's lever differs.
fn rule(lever: Lever) -> &'static str {
    match lever {
        Lever::Fragmentation => {
            "fragmentation: the free blocks of the request's pool and the room (the free memory, \
             under a cap no more than allowed − reserved) hold the request"
        }
        Lever::LetGo => {
            "let go: they would with the live blocks of earlier steps than the failed one (same \
             pool) let go"
        }
        Lever::OverTheCap => "the cap: a cap is set and the device's free memory holds the request",
        Lever::AnotherProcess => {
            "another process: the free memory and what the other processes hold would hold it"
        }
        Lever::HoldLess => {
            "hold less: none of the rules before holds (blocks of the other pool never count)"
        }
    }
}

/// The state in a line: what a learner needs to check a case by hand.
fn describe(state: &OomState) -> String {
    let mib = |b: u64| format!("{:.2} MiB", b as f64 / MIB as f64);
    let segments: Vec<String> = state
        .segments
        .iter()
        .map(|s| {
            let blocks: Vec<String> = s
                .blocks
                .iter()
                .map(|b| match b.owner {
                    Owner::Free => format!("free {}", mib(b.size)),
                    Owner::Kept => format!("kept {}", mib(b.size)),
                    Owner::Step(n) => format!("step {n} {}", mib(b.size)),
                })
                .collect();
            format!("{:?} [{}]", s.pool, blocks.join(", "))
        })
        .collect();
    format!(
        "request {}, free {}, allowed {}, other processes {}, failed step {}, segments: {}",
        mib(state.request),
        mib(state.free),
        state.allowed.map_or("none".to_string(), mib),
        mib(state.other_processes),
        state.step,
        segments.join("; ")
    )
}

/// Fails, naming the rule and the state, unless `triage_snapshot` reads `lever` from `state`.
#[track_caller]
fn check(case: &str, state: &OomState, lever: Lever) {
    let yours = triage_snapshot(state);
    Prediction::new(format!("your lever for {case} ({})", describe(state)))
        .count("lever", yours, lever)
        .rule(rule(lever))
        .check();
}

/// The state of a snapshot at its last out-of-memory entry, from its segments and trace: a block
/// allocated after an annotation `step N` belongs to step N, one allocated before any (or before
/// recording began) is kept. A block freed after the error (a program that let go of its tensors
/// before dumping the snapshot) was live at it. `allowed` and `other_processes` come from the
/// message.
///
/// # Panics
/// When the trace has no out-of-memory entry, or segments were reserved, released or cut after it
/// (the state at the error could not be told from the snapshot's).
fn oom_state(
    segments: &[SegmentInfo],
    trace: &[TraceEntry],
    allowed: Option<u64>,
    other_processes: u64,
) -> OomState {
    let last_oom = trace
        .iter()
        .rposition(|e| e.action == TraceAction::Oom)
        .expect("the trace has an out-of-memory entry");
    let mut step = None;
    let mut owners: HashMap<u64, Option<u64>> = HashMap::new();
    for e in &trace[..last_oom] {
        match e.action {
            TraceAction::Annotation => {
                if let Some(n) = e.label.as_deref().and_then(|l| l.strip_prefix("step ")) {
                    step = Some(n.parse().expect("an annotation `step N`"));
                }
            }
            TraceAction::Alloc => {
                owners.insert(e.addr, step);
            }
            TraceAction::FreeRequested => {
                owners.remove(&e.addr);
            }
            _ => {}
        }
    }
    let mut freed_after = std::collections::HashSet::new();
    for e in &trace[last_oom + 1..] {
        match e.action {
            TraceAction::FreeRequested => {
                freed_after.insert(e.addr);
            }
            TraceAction::FreeCompleted | TraceAction::Snapshot | TraceAction::Annotation => {}
            other => panic!(
                "a {} entry after the out-of-memory error: the state at the error is not the \
                 snapshot's",
                other.torch_name()
            ),
        }
    }
    let oom = &trace[last_oom];
    let (request, free) = (oom.size, oom.addr);
    let segments = segments
        .iter()
        .map(|s| Segment {
            pool: if s.segment_type == "small" {
                Pool::Small
            } else {
                Pool::Large
            },
            blocks: s
                .blocks
                .iter()
                .map(|b| Block {
                    size: b.size,
                    owner: match owners.get(&b.address) {
                        _ if b.state == BlockState::Inactive
                            && !freed_after.contains(&b.address) =>
                        {
                            Owner::Free
                        }
                        Some(Some(n)) => Owner::Step(*n),
                        _ => Owner::Kept,
                    },
                })
                .collect(),
        })
        .collect();
    OomState {
        segments,
        request,
        free,
        allowed,
        other_processes,
        step: step.unwrap_or(0),
    }
}

/// A process on a cpu device: its caching allocator, recording its history, and what it holds.
struct Process {
    allocator: CachingAllocator<Arc<CpuBackend>>,
    held: Vec<Allocation>,
}

impl Process {
    /// A process on `device` (a backend others may share).
    fn on(device: &Arc<CpuBackend>) -> Process {
        let allocator =
            CachingAllocator::new(Arc::clone(device), "cpu", AllocatorConfig::default());
        allocator.record_history(true);
        Process {
            allocator,
            held: Vec::new(),
        }
    }

    /// Allocates `size` bytes and holds them; the index of the allocation in `held`.
    fn hold(&mut self, size: u64) -> usize {
        let a = self
            .allocator
            .malloc(size as usize, STREAM)
            .unwrap_or_else(|e| panic!("{} MiB should fit: {e}", size / MIB));
        self.held.push(a);
        self.held.len() - 1
    }

    /// Frees what `hold` returned `index` for (the slot keeps a 0-byte allocation).
    fn drop_held(&mut self, index: usize) {
        let a = self.allocator.malloc(0, STREAM).expect("an empty block");
        let old = std::mem::replace(&mut self.held[index], a);
        self.allocator.free(old, Vec::new());
    }

    /// Marks the start of training step `n` in the history.
    fn step(&self, n: u64) {
        self.allocator.record_annotation(&format!("step {n}"));
    }

    /// What the device has free for this process now, under no cap.
    fn room(&self) -> u64 {
        let (free, _) = self.allocator.backend().mem_get_info().expect("cpu info");
        free as u64
    }

    /// Asks for `size` bytes, which must fail for lack of memory; the state at that error.
    fn fail(&mut self, size: u64, other_processes: u64) -> OomState {
        let allowed = match self.allocator.malloc(size as usize, STREAM) {
            Ok(_) => panic!("{} MiB fitted; the case is built wrong", size / MIB),
            Err(Error::OutOfMemory { allowed, .. }) => allowed,
            Err(e) => panic!("not an out-of-memory error: {e}"),
        };
        let snapshot = self.allocator.snapshot();
        oom_state(
            &snapshot.segments,
            &snapshot.trace,
            allowed,
            other_processes,
        )
    }

    /// Allocates tensors of `size` until one fails; the state at that error.
    fn fill_until_it_fails(&mut self, size: u64) -> OomState {
        loop {
            match self.allocator.malloc(size as usize, STREAM) {
                Ok(a) => self.held.push(a),
                Err(Error::OutOfMemory { allowed, .. }) => {
                    let snapshot = self.allocator.snapshot();
                    return oom_state(&snapshot.segments, &snapshot.trace, allowed, 0);
                }
                Err(e) => panic!("not an out-of-memory error: {e}"),
            }
        }
    }
}

/// A large size of `low..=high` units, drawn.
fn units(draw: &mut Draw, low: u64, high: u64) -> u64 {
    draw.range(low, high) * UNIT
}

/// A cpu device of a drawn capacity, and a process on it holding kept tensors (the weights,
/// before the first step).
fn device_with_weights(draw: &mut Draw, low: u64, high: u64) -> (Arc<CpuBackend>, Process) {
    let device = Arc::new(CpuBackend::new(units(draw, low, high) as usize));
    let mut process = Process::on(&device);
    for _ in 0..draw.range(1, 2) {
        process.hold(units(draw, 5, 10));
    }
    (device, process)
}

/// The live tensors fill the device: nothing is cached, no cap, nobody else.
fn full_device(draw: &mut Draw) -> OomState {
    let (_device, mut process) = device_with_weights(draw, 50, 80);
    process.step(0);
    let state = process.fill_until_it_fails(units(draw, 5, 10));
    assert!(
        state
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .all(|b| b.owner != Owner::Free)
    );
    state
}

/// A large segment cached, cut into pieces, every other piece freed: enough free in all, no piece
/// large enough, and the device filled around it.
fn fragmented(draw: &mut Draw) -> OomState {
    let (_device, mut process) = device_with_weights(draw, 70, 100);
    process.step(0);
    let pieces = draw.range(4, 6);
    let piece = units(draw, 5, 7);
    let big = process.hold(pieces * piece);
    process.drop_held(big);
    let cut: Vec<usize> = (0..pieces).map(|_| process.hold(piece)).collect();
    // Fill the rest before freeing: freed pieces would serve tensors of their size.
    let fill = units(draw, 5, 10);
    while process.room() >= fill {
        process.hold(fill);
    }
    for &i in cut.iter().step_by(2) {
        process.drop_held(i);
    }
    let cached = pieces.div_ceil(2) * piece;
    let room = process.room();
    // More than a piece and than the room, no more than both together.
    let low = (piece.max(room) / UNIT + 1).max(5);
    let request = units(draw, low, (cached + room) / UNIT);
    process.fail(request, 0)
}

/// The device full, and free blocks only in the small pool's segments: a large request cannot
/// use them, though they and the room would add up to it.
fn small_pool_debris(draw: &mut Draw) -> OomState {
    let (_device, mut process) = device_with_weights(draw, 50, 80);
    process.step(0);
    // Small segments of four 512 KiB blocks, three of them freed once all are allocated (a
    // freed block would serve the next): 1.5 MiB free in each.
    let segments = draw.range(8, 12);
    let blocks: Vec<usize> = (0..4 * segments).map(|_| process.hold(MIB / 2)).collect();
    for (i, &block) in blocks.iter().enumerate() {
        if i % 4 != 0 {
            process.drop_held(block);
        }
    }
    let fill = units(draw, 5, 10);
    while process.room() >= fill {
        process.hold(fill);
    }
    let room = process.room();
    let debris = segments * 3 * MIB / 2;
    let low = (room / UNIT + 1).max(5);
    let request = units(draw, low, (room + debris) / UNIT);
    process.fail(request, 0)
}

/// The previous step's tensors still alive (a caught error's frames, a list that keeps them)
/// while the next step fills the device; `enough` chooses whether letting them go would make
/// room for the request.
fn stale_step(draw: &mut Draw, enough: bool) -> OomState {
    let (_device, mut process) = device_with_weights(draw, 60, 90);
    let failed = draw.range(1, 3);
    process.step(failed - 1);
    let stale_size = units(draw, 5, 8);
    let stale = draw.range(1, 3) * stale_size;
    for _ in 0..stale / stale_size {
        process.hold(stale_size);
    }
    process.step(failed);
    let fill = units(draw, 5, 10);
    while process.room() >= fill {
        process.hold(fill);
    }
    let room = process.room();
    let request = if enough {
        units(draw, (room / UNIT + 1).max(5), (room + stale) / UNIT)
    } else {
        let low = ((room + stale) / UNIT + 1).max(5);
        units(draw, low, low + 5)
    };
    process.fail(request, 0)
}

/// A cap well below the device's capacity, filled by live tensors.
fn capped(draw: &mut Draw) -> OomState {
    let (_device, mut process) = device_with_weights(draw, 60, 90);
    let fraction = draw.range(50, 70) as f64 / 100.0;
    process
        .allocator
        .set_memory_fraction(fraction)
        .expect("a fraction");
    process.step(0);
    process.fill_until_it_fails(units(draw, 5, 10))
}

/// Another process holds part of the device; this one fills the rest.
fn crowded(draw: &mut Draw) -> OomState {
    let (device, mut process) = device_with_weights(draw, 60, 90);
    let mut other = Process::on(&device);
    for _ in 0..draw.range(2, 4) {
        other.hold(units(draw, 5, 10));
    }
    process.step(0);
    let fill = units(draw, 5, 10);
    while process.room() >= fill {
        process.hold(fill);
    }
    process.fail(fill, other.allocator.reserved_bytes())
}

#[test]
fn triage_snapshot_reads_each_lever_at_drawn_sizes() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        check(
            "a device filled by this step's tensors",
            &full_device(&mut draw),
            Lever::HoldLess,
        );
        check(
            "a cached segment cut into pieces, every other one free",
            &fragmented(&mut draw),
            Lever::Fragmentation,
        );
        check(
            "the previous step's tensors still alive",
            &stale_step(&mut draw, true),
            Lever::LetGo,
        );
        check(
            "a cap filled by live tensors",
            &capped(&mut draw),
            Lever::OverTheCap,
        );
        check(
            "a device shared with another process",
            &crowded(&mut draw),
            Lever::AnotherProcess,
        );
    })
}

#[test]
fn triage_snapshot_counts_only_the_requests_pool_and_earlier_steps() {
    gpumem::testing::seeded(|| {
        let mut draw = Draw::from_env();
        check(
            "a full device with free blocks only in small segments",
            &small_pool_debris(&mut draw),
            Lever::HoldLess,
        );
        check(
            "the previous step's tensors alive, too few to make room",
            &stale_step(&mut draw, false),
            Lever::HoldLess,
        );
    })
}

/// A large segment of `blocks`.
fn large(blocks: &[(u64, Owner)]) -> Segment {
    Segment {
        pool: Pool::Large,
        blocks: blocks
            .iter()
            .map(|&(size, owner)| Block { size, owner })
            .collect(),
    }
}

#[test]
fn triage_snapshot_follows_the_order_of_the_rules_at_the_edges() {
    let free = Owner::Free;
    // 30 MiB free in pieces, 20 MiB of the device free: exactly a 50 MiB request.
    let exact = OomState {
        segments: vec![
            large(&[(20 * MIB, free), (40 * MIB, Owner::Kept), (10 * MIB, free)]),
            large(&[(24 * MIB, Owner::Step(2))]),
        ],
        request: 50 * MIB,
        free: 20 * MIB,
        allowed: None,
        other_processes: 0,
        step: 2,
    };
    check(
        "free blocks and room exactly the request",
        &exact,
        Lever::Fragmentation,
    );
    // 2 MiB more: short, and nothing else helps.
    let short = OomState {
        request: 52 * MIB,
        ..exact.clone()
    };
    check("free blocks and room 2 MiB short", &short, Lever::HoldLess);
    // The same 24 MiB from step 1 while step 2 fails: letting it go makes the room.
    let mut stale = short.clone();
    stale.segments[1].blocks[0].owner = Owner::Step(1);
    check("an earlier step's 24 MiB alive", &stale, Lever::LetGo);
    // From the failed step itself: not stale.
    let current = OomState {
        step: 1,
        ..stale.clone()
    };
    check("the failed step's own 24 MiB", &current, Lever::HoldLess);
    // A cap below what is reserved leaves no room under it (not a negative one): the 20 MiB
    // free no longer count, and the device's own free memory would hold the request.
    let capped = OomState {
        free: 60 * MIB,
        allowed: Some(80 * MIB),
        other_processes: 30 * MIB,
        ..short.clone()
    };
    check("a cap below what is reserved", &capped, Lever::OverTheCap);
    // An earlier step's tensors come before the cap.
    let capped_and_stale = OomState {
        free: 60 * MIB,
        allowed: Some(100 * MIB),
        ..stale.clone()
    };
    check(
        "a cap, and an earlier step's tensors",
        &capped_and_stale,
        Lever::LetGo,
    );
    // Another process holds what is missing.
    let crowded = OomState {
        other_processes: 32 * MIB,
        ..short.clone()
    };
    check(
        "another process holding 32 MiB",
        &crowded,
        Lever::AnotherProcess,
    );
    let crowded_short = OomState {
        other_processes: 31 * MIB,
        ..short.clone()
    };
    check(
        "another process holding 31 MiB",
        &crowded_short,
        Lever::HoldLess,
    );
    // A cap far above what is reserved, and the device's own free memory short of the request:
    // raising the cap would not help, so it is not the cap.
    let capped_device_full = OomState {
        allowed: Some(200 * MIB),
        ..crowded.clone()
    };
    check(
        "a cap, the device 32 MiB short, another process holding 32 MiB",
        &capped_device_full,
        Lever::AnotherProcess,
    );
    let capped_device_full_short = OomState {
        allowed: Some(200 * MIB),
        ..crowded_short.clone()
    };
    check(
        "a cap, the device 32 MiB short, another process holding 31 MiB",
        &capped_device_full_short,
        Lever::HoldLess,
    );
    // A request of 1 MiB is served by the small pool only: two free pieces of 768 KiB there and
    // no room hold it (the pieces, not the large pool's 30 MiB free block).
    let piece = |owner| Block {
        size: 3 * MIB / 4,
        owner,
    };
    let small = OomState {
        segments: vec![
            Segment {
                pool: Pool::Small,
                blocks: vec![
                    piece(free),
                    Block {
                        size: MIB / 2,
                        owner: Owner::Kept,
                    },
                    piece(free),
                ],
            },
            large(&[(30 * MIB, free), (10 * MIB, Owner::Kept)]),
        ],
        request: MIB,
        free: 0,
        allowed: None,
        other_processes: 0,
        step: 0,
    };
    check(
        "a small request beside small free pieces",
        &small,
        Lever::Fragmentation,
    );
    let mut no_small = small.clone();
    no_small.segments[0].blocks[0].owner = Owner::Step(0);
    no_small.segments[0].blocks[2].owner = Owner::Step(0);
    check(
        "a small request beside large free blocks only",
        &no_small,
        Lever::HoldLess,
    );
}

/// A snapshot torch 2.11 wrote on an H100 in the `except` block of an out-of-memory error
/// (`conformance/real-snapshots/`, recorded by `bench/record_torch_snapshot.py`).
fn real(bytes: &[u8], allowed: Option<u64>) -> OomState {
    let mut trace = Vec::new();
    let contents = gpumem::snapshot_pickle::read_snapshot(bytes, |_, e| trace.push(e))
        .expect("torch's snapshot reads");
    let segments: Vec<SegmentInfo> = contents.segments.into_iter().map(|(_, s)| s).collect();
    oom_state(&segments, &trace, allowed, 0)
}

#[test]
fn triage_snapshot_reads_real_torch_snapshots() {
    // Capped at 2 GiB on an 80 GB device, then filled with 192 MiB tensors: "Tried to allocate
    // 192.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 76.61 GiB is free. … 2.00 GiB
    // allowed; … 18.88 MiB is reserved by PyTorch but unallocated."
    let oom = real(
        include_bytes!("fixtures/h100-torch-2.11-oom.pickle"),
        Some(2 << 30),
    );
    assert_eq!(oom.request, 192 * MIB, "{}", describe(&oom));
    check(
        "torch's snapshot h100-torch-2.11-oom.pickle",
        &oom,
        Lever::OverTheCap,
    );
    // The same program with expandable_segments:True: "… 22.88 MiB is reserved by PyTorch but
    // unallocated", and still the cap.
    let expandable = real(
        include_bytes!("fixtures/h100-torch-2.11-oom-expandable.pickle"),
        Some(2 << 30),
    );
    assert_eq!(expandable.request, 192 * MIB, "{}", describe(&expandable));
    check(
        "torch's snapshot h100-torch-2.11-oom-expandable.pickle",
        &expandable,
        Lever::OverTheCap,
    );
}
