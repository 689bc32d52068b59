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

criterion_group!(benches, copies);
criterion_main!(benches);
