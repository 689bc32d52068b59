//! The cpu device is deterministic: the same calls on a fresh device give the same segment
//! addresses (relative to the device's first segment) and so the same decisions, whatever the
//! process allocated on the host before. The allocator breaks ties between cached blocks of equal
//! size by address, so host `malloc` addresses (ASLR, earlier frees) would make it take different
//! decisions from one run to the next.

use anyhow::{Context, Result, ensure};
use gpumem::allocator::{CachingAllocator, StreamId};
use gpumem::backend::{MappedPage, RawMemory, ReserveError};
use gpumem::backend_cpu::{CpuBackend, GRANULARITY};
use gpumem::trace::{AllocTrace, ReplayStats, replay_recorded};
use gpumem::{AllocatorConfig, Snapshot, TraceAction};
use std::time::Duration;

const MIB: usize = 1 << 20;
const S0: StreamId = StreamId(0);

/// A trace whose replay depends on address tie-breaks: two replays of it on host `malloc`
/// addresses once gave 84 and 85 device reservations.
fn transformer_step() -> Result<AllocTrace> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/traces/transformer-step.json"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    AllocTrace::from_json(&text).with_context(|| path.to_string())
}

/// A block as placed: offset from the device's first segment, size, state.
type PlacedBlock = (u64, u64, String);

/// What a replay decided, with addresses relative to the first segment the device reserved and
/// without times: equal for two replays that took the same decisions.
#[derive(Debug, PartialEq)]
struct Decisions {
    stats: ReplayStats,
    /// Per segment: offset, size, and its blocks' offsets, sizes and states.
    segments: Vec<(u64, u64, Vec<PlacedBlock>)>,
    /// Per trace entry: action, offset (or what an entry without an address holds), size,
    /// allocated, reserved.
    trace: Vec<(TraceAction, u64, u64, u64, u64)>,
}

fn decisions(stats: ReplayStats, snapshot: &Snapshot) -> Result<Decisions> {
    let base = snapshot
        .trace
        .iter()
        .find(|e| {
            matches!(
                e.action,
                TraceAction::SegmentAlloc | TraceAction::SegmentMap
            )
        })
        .context("the replay reserved no segment")?
        .addr;
    let segments = snapshot
        .segments
        .iter()
        .map(|s| {
            let blocks = s
                .blocks
                .iter()
                .map(|b| {
                    (
                        b.address.wrapping_sub(base),
                        b.size,
                        format!("{:?}", b.state),
                    )
                })
                .collect();
            (s.address.wrapping_sub(base), s.total_size, blocks)
        })
        .collect();
    let trace = snapshot
        .trace
        .iter()
        .map(|e| {
            let at = match e.action {
                // No address: an OOM's free bytes, a snapshot's 0.
                TraceAction::Oom | TraceAction::Snapshot => e.addr,
                _ => e.addr.wrapping_sub(base),
            };
            (e.action, at, e.size, e.allocated, e.reserved)
        })
        .collect();
    Ok(Decisions {
        stats: ReplayStats {
            elapsed: Duration::ZERO,
            ..stats
        },
        segments,
        trace,
    })
}

fn replay_on_a_fresh_device(trace: &AllocTrace, conf: &str) -> Result<Decisions> {
    let allocator = CachingAllocator::new(
        CpuBackend::new(8 << 30),
        "cpu",
        AllocatorConfig::parse(conf)?,
    );
    allocator.record_history(true);
    let (stats, snapshot) = replay_recorded(&allocator, trace);
    let stats = stats.with_context(|| format!("replaying under {conf:?}"))?;
    decisions(stats, &snapshot.context("a snapshot")?)
}

/// Host allocations of many sizes, some kept and some freed, small and mmap-sized: they move
/// where the host allocator (and `mmap`) would put the next large allocation.
fn disturb_the_host() -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    for i in 1..40usize {
        let small = vec![i as u8; i * 4096];
        let large = vec![i as u8; (i % 7 + 1) * 3 * MIB];
        if i % 3 == 0 {
            kept.push(large);
        } else {
            kept.push(small);
        }
    }
    kept
}

#[test]
fn the_same_trace_on_fresh_cpu_devices_takes_the_same_decisions() -> Result<()> {
    let trace = transformer_step()?;
    for conf in ["", "expandable_segments:True"] {
        let first = replay_on_a_fresh_device(&trace, conf)?;
        let host = disturb_the_host();
        let second = replay_on_a_fresh_device(&trace, conf)?;
        drop(host);
        let first_difference = first
            .segments
            .iter()
            .zip(&second.segments)
            .map(|(a, b)| format!("{a:?} / {b:?}"))
            .chain(
                first
                    .trace
                    .iter()
                    .zip(&second.trace)
                    .map(|(a, b)| format!("{a:?} / {b:?}")),
            )
            .find(|pair| {
                let (a, b) = pair.split_once(" / ").expect("a pair");
                a != b
            });
        ensure!(
            first == second,
            "two replays under {conf:?} decided differently: {:?} and {:?}; first difference: {}",
            first.stats,
            second.stats,
            first_difference.unwrap_or_else(|| "in the number of entries".into())
        );
    }
    Ok(())
}

#[test]
fn segments_are_placed_first_fit_in_address_order() -> Result<()> {
    let a = CachingAllocator::new(CpuBackend::new(1 << 30), "cpu", AllocatorConfig::default());
    // From 10 MiB a request gets a segment of its own: 12 MiB here.
    let x = a.malloc(12 * MIB, S0)?;
    let y = a.malloc(12 * MIB, S0)?;
    let z = a.malloc(12 * MIB, S0)?;
    assert_eq!(x.ptr % GRANULARITY as u64, 0, "segments start on 2 MiB");
    assert_eq!(y.ptr, x.ptr + 12 * MIB as u64, "the next free address");
    assert_eq!(z.ptr, y.ptr + 12 * MIB as u64);
    a.free(x, vec![]);
    a.free(z, vec![]);
    // Two cached blocks of 12 MiB: the tie goes to the lowest address, the first segment.
    let again = a.malloc(12 * MIB, S0)?;
    assert_eq!(again.ptr, x.ptr);
    a.free(again, vec![]);
    a.free(y, vec![]);
    a.empty_cache();
    assert_eq!(a.reserved_bytes(), 0);
    // The released ranges merged: a 36 MiB segment starts where the first one did.
    let w = a.malloc(36 * MIB, S0)?;
    assert_eq!(w.ptr, x.ptr);
    a.free(w, vec![]);
    Ok(())
}

#[test]
fn a_reused_range_reads_zeros() {
    let backend = CpuBackend::new(64 * MIB);
    let ptr = backend.reserve(2 * MIB).expect("room for 2 MiB");
    // SAFETY: the 2 MiB at ptr were just reserved for us.
    unsafe { std::ptr::write_bytes(ptr as *mut u8, 0xAB, 2 * MIB) };
    // SAFETY: reserved above with this size; nothing uses it any more.
    unsafe { backend.release(ptr, 2 * MIB) };
    let again = backend.reserve(2 * MIB).expect("room for 2 MiB");
    assert_eq!(again, ptr, "first fit takes the range back");
    // SAFETY: reserved again just now.
    let bytes = unsafe { std::slice::from_raw_parts(again as *const u8, 2 * MIB) };
    assert!(bytes.iter().all(|&b| b == 0), "the reused range is zero");
    // SAFETY: as above.
    unsafe { backend.release(again, 2 * MIB) };
}

#[test]
fn the_capacity_still_bounds_what_is_reserved() {
    let backend = CpuBackend::new(4 * MIB);
    let first = backend.reserve(4 * MIB).expect("the whole capacity");
    assert!(matches!(
        backend.reserve(2 * MIB),
        Err(ReserveError::OutOfMemory)
    ));
    assert_eq!(backend.mem_get_info().unwrap(), (0, 4 * MIB));
    // SAFETY: reserved above with this size.
    unsafe { backend.release(first, 4 * MIB) };
    assert_eq!(backend.mem_get_info().unwrap(), (4 * MIB, 4 * MIB));
}

#[test]
fn expandable_address_space_comes_from_the_same_range() {
    let backend = CpuBackend::new(64 * MIB);
    let segment = backend.reserve(2 * MIB).expect("room for 2 MiB");
    let space = backend
        .reserve_address_space(100 * MIB)
        .expect("address space");
    assert_eq!(space, segment + 2 * MIB as u64, "the next free address");
    // SAFETY: the range is inside the address space just reserved and not mapped.
    let handle = unsafe { backend.map(space, 20 * MIB) }.expect("room for a page");
    // SAFETY: mapped above; nothing uses it.
    unsafe {
        backend.unmap(
            &[MappedPage {
                ptr: space,
                size: 20 * MIB,
                handle,
            }],
            None,
        )
    };
    // SAFETY: reserved above; nothing of it is mapped any more.
    unsafe { backend.release_address_space(space, 100 * MIB) };
    // SAFETY: reserved above with this size.
    unsafe { backend.release(segment, 2 * MIB) };
    assert_eq!(backend.mem_get_info().unwrap(), (64 * MIB, 64 * MIB));
}
