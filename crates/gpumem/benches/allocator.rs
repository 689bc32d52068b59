//! Cache-hit alloc+free pairs through the caching allocator, beside the raw backend's reserve+release
//! of the same size, on cpu and (where there is one) cuda:0. Run: `cargo bench -p gpumem --bench allocator`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpumem::Device;
use gpumem::allocator::StreamId;
use gpumem::backend::RawMemory;
use std::hint::black_box;

const SIZES: [(usize, &str); 4] = [
    (512, "512B"),
    (64 << 10, "64KiB"),
    (4 << 20, "4MiB"),
    (64 << 20, "64MiB"),
];

fn devices() -> Vec<Device> {
    let mut devices = vec![Device::cpu()];
    if let Ok(cuda) = Device::cuda(0) {
        devices.push(cuda);
    }
    devices
}

fn alloc_free_pairs(c: &mut Criterion) {
    for dev in devices() {
        let mut group = c.benchmark_group(format!("alloc_free_pair/{dev}"));
        for (size, label) in SIZES {
            let allocator = dev.allocator();
            // Warm the cache so every measured pair is a cache hit.
            let warm = allocator
                .malloc(size, StreamId(0))
                .expect("warm-up allocation");
            allocator.free(warm, Vec::new());
            group.bench_with_input(BenchmarkId::new("caching", label), &size, |b, &size| {
                b.iter(|| {
                    let block = allocator
                        .malloc(black_box(size), StreamId(0))
                        .expect("cache hit");
                    allocator.free(black_box(block), Vec::new());
                })
            });
            let rounded = gpumem::allocator::segment_size_for(size);
            group.bench_with_input(
                BenchmarkId::new("raw_reserve_release", label),
                &rounded,
                |b, &n| {
                    let raw = allocator.backend();
                    b.iter(|| {
                        let ptr = raw.reserve(black_box(n)).expect("raw reservation");
                        // SAFETY: ptr was just reserved with size n and is not used.
                        unsafe { raw.release(ptr, n) };
                    })
                },
            );
        }
        group.finish();
        dev.empty_cache();
    }
}

fn threads_at_once(c: &mut Criterion) {
    let dev = Device::cpu();
    let mut group = c.benchmark_group("alloc_free_pair_4_threads/cpu");
    group.bench_function("caching/512B", |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for _ in 0..4 {
                    let dev = dev.clone();
                    s.spawn(move || {
                        for _ in 0..iters {
                            let block = dev.allocator().malloc(512, StreamId(0)).expect("alloc");
                            dev.allocator().free(block, Vec::new());
                        }
                    });
                }
            });
            start.elapsed() / 4
        })
    });
    group.finish();
}

criterion_group!(benches, alloc_free_pairs, threads_at_once);
criterion_main!(benches);
