//! The allocator against its anchors, on cpu and (where there is one) cuda:0:
//!
//! - `alloc_free_pair/<dev>`: a cache-hit malloc+free through the caching allocator, by size, beside
//!   the raw backend's reserve+release of the segment that size would get (on cuda: `cuMemAlloc` +
//!   `cuMemFree`, what a cache miss costs);
//! - `threads/<dev>`: the same 512 B cache-hit pair from 1, 2, 4 and 8 threads at once on one
//!   device (time: one thread's pair while the others run; throughput: pairs per second, all
//!   threads together);
//! - `stream_ordered_pool/cuda:0`: the driver's own pool, `cuMemAllocAsync` + `cuMemFreeAsync` on a
//!   stream, with the default pool's release threshold set to keep everything (skipped without a GPU).
//!
//! Run: `cargo bench -p gpumem --bench allocator`. Results: bench/README.md.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpumem::Device;
use gpumem::allocator::StreamId;
use gpumem::backend::RawMemory;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const SIZES: [(usize, &str); 4] = [
    (512, "512B"),
    (64 << 10, "64KiB"),
    (4 << 20, "4MiB"),
    (64 << 20, "64MiB"),
];

/// Thread counts of the contention bench.
const THREADS: [usize; 4] = [1, 2, 4, 8];

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
            let rounded =
                gpumem::allocator::segment_size_for(size, &gpumem::AllocatorConfig::default());
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

/// `threads` threads each run `iters` cache-hit pairs of `size` bytes on `dev` at once; returns the
/// slowest thread's time (the spawning is not timed: the threads start together at a barrier).
fn pairs_on_threads(dev: &Device, threads: usize, size: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let allocator = dev.allocator();
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        let block = allocator
                            .malloc(black_box(size), StreamId(0))
                            .expect("cache hit");
                        allocator.free(black_box(block), Vec::new());
                    }
                    start.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread"))
            .max()
            .unwrap_or_default()
    })
}

fn threads_at_once(c: &mut Criterion) {
    for dev in devices() {
        let mut group = c.benchmark_group(format!("threads/{dev}"));
        // One block per thread at most: warm the cache with as many as the most threads hold.
        let warm: Vec<_> = (0..THREADS[THREADS.len() - 1])
            .map(|_| dev.allocator().malloc(512, StreamId(0)).expect("warm-up"))
            .collect();
        warm.into_iter()
            .for_each(|b| dev.allocator().free(b, Vec::new()));
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_with_input(
                BenchmarkId::new("caching_512B", format!("{threads}_threads")),
                &threads,
                |b, &threads| b.iter_custom(|iters| pairs_on_threads(&dev, threads, 512, iters)),
            );
        }
        group.finish();
        dev.empty_cache();
    }
}

/// The driver's stream-ordered pool on cuda:0: `cuMemAllocAsync` + `cuMemFreeAsync`, with the
/// default pool's release threshold at its maximum so that freed memory stays in the pool (as the
/// caching allocator keeps its cache). Skipped without a GPU.
fn stream_ordered_pool(c: &mut Criterion) {
    use cudarc::driver::{result, sys};
    let Ok(dev) = Device::cuda(0) else {
        eprintln!("stream_ordered_pool: skipped (no CUDA device)");
        return;
    };
    let ctx = dev
        .cuda_backend()
        .expect("a cuda device has a cuda backend")
        .context()
        .clone();
    ctx.bind_to_thread().expect("binding the primary context");
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: the context is bound; the call writes the handle of the device's default pool.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .expect("cuDeviceGetDefaultMemPool");
    let set_threshold = |mut bytes: u64| {
        // SAFETY: `pool` is the device's default pool; the attribute takes a cuuint64_t.
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut bytes as *mut u64).cast(),
            )
        }
        .result()
        .expect("cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
    };
    set_threshold(u64::MAX);
    let stream = ctx.new_stream().expect("a stream");
    let s = stream.cu_stream();
    let mut group = c.benchmark_group("stream_ordered_pool/cuda:0");
    for (size, label) in SIZES {
        // Warm the pool so every measured pair reuses its memory.
        // SAFETY: the block is allocated and freed on `s`, and never used.
        unsafe {
            let p = result::malloc_async(s, size).expect("cuMemAllocAsync");
            result::free_async(p, s).expect("cuMemFreeAsync");
        }
        stream.synchronize().expect("cuStreamSynchronize");
        group.bench_with_input(
            BenchmarkId::new("cuMemAllocAsync_cuMemFreeAsync", label),
            &size,
            |b, &size| {
                b.iter_custom(|iters| {
                    ctx.bind_to_thread().expect("binding the primary context");
                    let start = Instant::now();
                    for _ in 0..iters {
                        // SAFETY: as above: allocated and freed in order on `s`, never used.
                        unsafe {
                            let p =
                                result::malloc_async(s, black_box(size)).expect("cuMemAllocAsync");
                            result::free_async(black_box(p), s).expect("cuMemFreeAsync");
                        }
                    }
                    stream.synchronize().expect("cuStreamSynchronize");
                    start.elapsed()
                })
            },
        );
    }
    group.finish();
    // Back to the driver's default (release at every synchronisation), and give the memory back.
    set_threshold(0);
    // SAFETY: the pool holds no live allocation of ours.
    unsafe { sys::cuMemPoolTrimTo(pool, 0) }
        .result()
        .expect("cuMemPoolTrimTo");
}

criterion_group!(
    benches,
    alloc_free_pairs,
    threads_at_once,
    stream_ordered_pool
);
criterion_main!(benches);
