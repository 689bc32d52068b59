//! Replaying a PyTorch snapshot pickle, on the cpu device, beside the allocator alone:
//!
//! - `snapshot_replay/read`: streaming the pickle and turning its entries into a replayable trace
//!   (`read_snapshot` + `EntryConverter`), no allocator;
//! - `snapshot_replay/read_and_replay`: that and the replay through a fresh caching allocator —
//!   what `workbook replay SNAPSHOT.pickle` does;
//! - `snapshot_replay/allocator_alone`: the replay of the same, already converted trace (every
//!   malloc and free, nothing else).
//!
//! Throughput is in the trace's events (allocs and frees) per second for all three. The pickle is
//! gpumem's own dump of a recorded replay of a generated trace (50,000 allocs and frees, sizes from
//! 512 B to 24 MiB, three streams): the schema torch writes, without frames.
//!
//! Run: `cargo bench -p gpumem --bench snapshot_replay`. Results: the book's snapshots page.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpumem::AllocatorConfig;
use gpumem::allocator::CachingAllocator;
use gpumem::backend_cpu::CpuBackend;
use gpumem::snapshot_pickle::{read_snapshot, write_snapshot};
use gpumem::trace::{AllocTrace, EntryConverter, TraceBuilder, replay, replay_recorded};
use std::hint::black_box;

/// A trace of `n` allocs with lifetimes of 1 to 64 events, deterministic.
fn generated(n: usize) -> AllocTrace {
    let mut b = TraceBuilder::new();
    let mut live: Vec<u64> = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size =
            [512, 4096, 100_000, 1 << 20, 3 << 20, 24 << 20][(x % 6) as usize] + (x >> 40) % 4096;
        live.push(b.alloc(size, x % 3));
        if live.len() > 1 + (x >> 20) as usize % 64 {
            let i = (x >> 8) as usize % live.len();
            b.free(live.swap_remove(i));
        }
    }
    for id in live {
        b.free(id);
    }
    b.finish("generated")
}

fn fresh() -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(
        CpuBackend::new(usize::MAX),
        "cpu",
        AllocatorConfig::default(),
    )
}

fn convert(pickle: &[u8]) -> AllocTrace {
    let mut c = EntryConverter::new("bench");
    read_snapshot(pickle, |_, e| c.push(&e)).expect("a readable pickle");
    c.finish()
}

fn snapshot_replay(c: &mut Criterion) {
    let trace = generated(25_000);
    let (result, snapshot) = replay_recorded(&fresh(), &trace);
    result.expect("the generated trace replays");
    let mut pickle = Vec::new();
    write_snapshot(&snapshot.expect("a snapshot"), &mut pickle).expect("written to memory");
    let converted = convert(&pickle);
    assert_eq!(converted.events.len(), trace.events.len());

    let mut group = c.benchmark_group("snapshot_replay");
    group.throughput(Throughput::Elements(trace.events.len() as u64));
    group.sample_size(10);
    group.bench_function("read", |b| b.iter(|| black_box(convert(&pickle))));
    group.bench_function("read_and_replay", |b| {
        b.iter(|| {
            let t = convert(&pickle);
            black_box(replay(&fresh(), &t).expect("replays"))
        })
    });
    group.bench_function("allocator_alone", |b| {
        b.iter(|| black_box(replay(&fresh(), &converted).expect("replays")))
    });
    group.finish();
}

criterion_group!(benches, snapshot_replay);
criterion_main!(benches);
