//! Host↔device copy bandwidth, pageable vs pinned host memory, 4 KiB to 1 GiB in powers of 4 (the
//! shape of the CUDA samples' `bandwidthTest`), on cpu (up to 256 MiB) and on cuda:0 where there is
//! one. Throughput is in bytes per second.
//!
//! - pageable: `Buffer::copy_from_slice` / `copy_to_slice` from an ordinary `Vec` (the driver
//!   stages the data through its own pinned buffer; the call returns when the copy is done);
//! - pinned: `PinnedBuffer::copy_to_device_async` / `copy_from_device_async` on a stream, then
//!   `Stream::synchronize` (one DMA straight from the page-locked buffer).
//!
//! Run: `cargo bench -p gpumem --bench transfers` (add `-- --warm-up-time 1 --measurement-time 2`
//! for a quick pass, or a filter such as `h2d/cuda`).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpumem::Device;
use std::hint::black_box;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// 4 KiB, 16 KiB, … up to `max` bytes.
fn sizes(max: usize) -> Vec<usize> {
    std::iter::successors(Some(4 * KIB), |s| Some(s * 4))
        .take_while(|&s| s <= max)
        .collect()
}

fn label(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{}MiB", bytes / MIB)
    } else {
        format!("{}KiB", bytes / KIB)
    }
}

fn devices() -> Vec<(Device, usize)> {
    // The cpu device copies host memory to host memory; 256 MiB keeps three buffers of the largest
    // size well inside a small machine's memory.
    let mut devices = vec![(Device::cpu(), 256 * MIB)];
    if let Ok(cuda) = Device::cuda(0) {
        devices.push((cuda, 1 << 30));
    }
    devices
}

fn copies(c: &mut Criterion) {
    for (dev, max) in devices() {
        let stream = dev.stream().expect("a stream");
        for direction in ["h2d", "d2h"] {
            let mut group = c.benchmark_group(format!("{direction}/{dev}"));
            for size in sizes(max) {
                group.throughput(Throughput::Bytes(size as u64));
                group.sample_size(if size >= 64 * MIB { 10 } else { 50 });
                let mut device = dev.alloc::<u8>(size).expect("device buffer");
                let mut pageable = vec![1u8; size];
                let mut pinned = dev.alloc_pinned::<u8>(size).expect("pinned buffer");
                pinned.as_mut_slice().fill(1);
                let id = |kind: &str| BenchmarkId::new(kind, label(size));
                if direction == "h2d" {
                    group.bench_function(id("pageable"), |b| {
                        b.iter(|| device.copy_from_slice(black_box(&pageable)).unwrap())
                    });
                    group.bench_function(id("pinned"), |b| {
                        b.iter(|| {
                            pinned.copy_to_device_async(&mut device, &stream).unwrap();
                            stream.synchronize().unwrap();
                            // Touching the buffer retires the copy's event (else they pile up).
                            black_box(pinned.as_slice().len());
                        })
                    });
                } else {
                    group.bench_function(id("pageable"), |b| {
                        b.iter(|| device.copy_to_slice(black_box(&mut pageable)).unwrap())
                    });
                    group.bench_function(id("pinned"), |b| {
                        b.iter(|| {
                            pinned.copy_from_device_async(&device, &stream).unwrap();
                            stream.synchronize().unwrap();
                            black_box(pinned.as_slice().len());
                        })
                    });
                }
                drop((device, pinned));
                dev.empty_cache();
                dev.empty_host_cache();
            }
            group.finish();
        }
    }
}

/// Copies overlapping compute: `BATCHES` batches, each uploaded from pinned memory on a copy stream
/// and then multiplied on the default stream. "serial" waits for each upload before the next step;
/// "overlapped" queues the next batch's upload before multiplying the current one, so the copy
/// engine and the multiprocessors work at once. On cpu everything is synchronous: both are equal.
fn overlap(c: &mut Criterion) {
    const BATCHES: usize = 4;
    for (dev, _) in devices() {
        // A square f32 matrix per batch: 2048² = 16 MiB on cuda, 256² on cpu (its GEMM is slow).
        let n = if dev.is_cuda() { 2048 } else { 256 };
        let shape = gpumem::ops::MatMul::new(n, n, n);
        let copy_stream = dev.stream().expect("a copy stream");
        let weights = dev.from_slice(&vec![0.5f32; n * n]).expect("weights");
        let mut out = dev.alloc::<f32>(n * n).expect("output");
        let mut staging: Vec<_> = (0..2)
            .map(|_| dev.alloc_pinned::<f32>(n * n).expect("pinned staging"))
            .collect();
        staging.iter_mut().for_each(|p| p.as_mut_slice().fill(1.0));
        let mut inputs: Vec<_> = (0..2)
            .map(|_| dev.alloc::<f32>(n * n).expect("device input"))
            .collect();
        gpumem::ops::warm_up(&dev).expect("kernels");
        let mut group = c.benchmark_group(format!("overlap/{dev}"));
        group.sample_size(20);
        group.throughput(Throughput::Bytes((BATCHES * n * n * 4) as u64));
        group.bench_function(BenchmarkId::new("serial", BATCHES), |b| {
            b.iter(|| {
                for i in 0..BATCHES {
                    let slot = i % 2;
                    staging[slot]
                        .copy_to_device_async(&mut inputs[slot], &copy_stream)
                        .unwrap();
                    copy_stream.synchronize().unwrap();
                    gpumem::ops::gemm_into(1.0, &inputs[slot], &weights, shape, 0.0, &mut out)
                        .unwrap();
                    dev.synchronize().unwrap();
                }
                black_box(staging[0].as_slice().len());
            })
        });
        group.bench_function(BenchmarkId::new("overlapped", BATCHES), |b| {
            b.iter(|| {
                staging[0]
                    .copy_to_device_async(&mut inputs[0], &copy_stream)
                    .unwrap();
                let mut ready = copy_stream.record_event().unwrap();
                for i in 0..BATCHES {
                    let slot = i % 2;
                    // The default stream waits on the device for this batch's upload ...
                    dev.default_stream().wait_event(&ready).unwrap();
                    // ... while the next batch's upload is queued on the copy stream at once.
                    if i + 1 < BATCHES {
                        let next = (i + 1) % 2;
                        staging[next]
                            .copy_to_device_async(&mut inputs[next], &copy_stream)
                            .unwrap();
                    }
                    gpumem::ops::gemm_into(1.0, &inputs[slot], &weights, shape, 0.0, &mut out)
                        .unwrap();
                    // The next upload overwrites this slot two batches later: let the copy stream
                    // wait for this multiply before then.
                    copy_stream.wait_stream(&dev.default_stream()).unwrap();
                    ready = copy_stream.record_event().unwrap();
                }
                dev.synchronize().unwrap();
                copy_stream.synchronize().unwrap();
                black_box(staging[0].as_slice().len());
            })
        });
        group.finish();
    }
}

criterion_group!(benches, copies, overlap);
criterion_main!(benches);
