//! Matrix products in f32, f16 and bf16 (f32 accumulation), and one training step of the tiny
//! model with and without gradient accumulation, on cpu and on cuda:0 where there is one.
//!
//! - GEMM: `C = A·B`, square, into a preallocated C of the inputs' type (cuBLAS `sgemm` /
//!   `cublasGemmEx`); 8192³ on cuda (big enough to fill an H100/H200), 256³ on cpu (its blocked loop
//!   is slow). Throughput counts floating-point operations as "elements": read `Gelem/s` as GFLOP/s.
//! - Training step: an `Mlp` with SGD, once on the whole batch and once as 4 micro-batches whose
//!   gradients accumulate before the step; the peak memory of each is printed before it is timed.
//!
//! Every timed iteration ends with `Device::synchronize`, so the GPU's work is inside the time.
//! Run: `cargo bench -p gpumem --bench gemm` (add `-- --warm-up-time 1 --measurement-time 2` for a
//! quick pass).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpumem::ops::{self, Float, MatMul, Mlp, XorShift};
use gpumem::{Buffer, Device, bf16, f16, format_bytes};

fn devices() -> Vec<Device> {
    let mut devices = vec![Device::cpu()];
    if let Ok(cuda) = Device::cuda(0) {
        devices.push(cuda);
    }
    devices
}

/// `C = A·B` for one element type, timed with C preallocated.
fn bench_gemm<T: Float>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    dev: &Device,
    a: &Buffer<f32>,
    b: &Buffer<f32>,
    n: usize,
) {
    let a = ops::cast::<f32, T>(a).expect("cast A");
    let b = ops::cast::<f32, T>(b).expect("cast B");
    let mut c = dev.alloc::<T>(n * n).expect("C");
    let shape = MatMul::new(n, n, n);
    group.bench_function(
        BenchmarkId::new(T::DTYPE.name(), format!("{n}³")),
        |bench| {
            bench.iter(|| {
                ops::gemm_into(1.0, &a, &b, shape, 0.0, &mut c).expect("gemm");
                dev.synchronize().expect("synchronize");
            })
        },
    );
}

fn gemm(c: &mut Criterion) {
    for dev in devices() {
        ops::warm_up(&dev).expect("NVRTC and cuBLAS");
        let n = if dev.is_cuda() { 8192 } else { 256 };
        let mut rng = XorShift::new(1);
        let a = dev
            .from_slice(&rng.uniform_vec(n * n, -1.0, 1.0))
            .expect("A");
        let b = dev
            .from_slice(&rng.uniform_vec(n * n, -1.0, 1.0))
            .expect("B");
        let mut group = c.benchmark_group(format!("gemm/{dev}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(MatMul::new(n, n, n).flops() as u64));
        bench_gemm::<f32>(&mut group, &dev, &a, &b, n);
        bench_gemm::<f16>(&mut group, &dev, &a, &b, n);
        bench_gemm::<bf16>(&mut group, &dev, &a, &b, n);
        group.finish();
        drop((a, b));
        dev.empty_cache();
    }
}

/// The data of one step, split into `micro_batches` device buffers of inputs and targets.
struct Batches {
    x: Vec<Buffer<f32>>,
    t: Vec<Buffer<f32>>,
    rows: usize,
}

fn batches(dev: &Device, mlp: &Mlp, batch: usize, micro_batches: usize, seed: u64) -> Batches {
    let mut rng = XorShift::new(seed);
    let rows = batch / micro_batches;
    let upload = |rng: &mut XorShift, width: usize| -> Vec<Buffer<f32>> {
        (0..micro_batches)
            .map(|_| {
                dev.from_slice(&rng.uniform_vec(rows * width, -1.0, 1.0))
                    .expect("batch")
            })
            .collect()
    };
    let x = upload(&mut rng, mlp.in_features());
    let t = upload(&mut rng, mlp.out_features());
    Batches { x, t, rows }
}

/// One optimiser step: zero the gradients, forward and backward every micro-batch (each loss
/// divided by their number), then SGD.
fn train_step(mlp: &mut Mlp, grads: &mut ops::MlpGrads, data: &Batches, lr: f32) {
    grads.zero().expect("zero_grad");
    let k = data.x.len() as f32;
    for (x, t) in data.x.iter().zip(&data.t) {
        let (y, saved) = mlp.forward(x, data.rows).expect("forward");
        let g = ops::mse_loss_backward(&y, t, 1.0 / k).expect("loss gradient");
        drop(y);
        mlp.backward(saved, &g, grads).expect("backward");
    }
    mlp.sgd_step(grads, lr).expect("sgd");
}

fn training(c: &mut Criterion) {
    for dev in devices() {
        ops::warm_up(&dev).expect("NVRTC and cuBLAS");
        let (sizes, batch): (&[usize], usize) = if dev.is_cuda() {
            (&[1024, 4096, 4096, 1024], 4096)
        } else {
            (&[256, 512, 256], 128)
        };
        let mut rng = XorShift::new(2);
        let mut mlp = Mlp::new(&dev, sizes, &mut rng).expect("model");
        let mut grads = mlp.zero_grads().expect("gradients");
        let flops = 3.0
            * sizes
                .windows(2)
                .map(|w| 2.0 * (batch * w[0] * w[1]) as f64)
                .sum::<f64>();
        let mut group = c.benchmark_group(format!("train_step/{dev}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(flops as u64));
        for micro_batches in [1, 4] {
            let data = batches(&dev, &mlp, batch, micro_batches, 3);
            let base = dev.memory_allocated();
            dev.reset_peak_memory_stats();
            train_step(&mut mlp, &mut grads, &data, 1e-3);
            dev.synchronize().expect("synchronize");
            eprintln!(
                "train_step/{dev}: {sizes:?}, batch {batch} as {micro_batches} micro-batch(es): \
                 peak {} above weights, gradients and data",
                format_bytes(dev.max_memory_allocated() - base)
            );
            let name = if micro_batches == 1 {
                "full_batch".to_string()
            } else {
                format!("accumulate_{micro_batches}")
            };
            group.bench_function(BenchmarkId::new(name, format!("batch{batch}")), |b| {
                b.iter(|| {
                    train_step(&mut mlp, &mut grads, &data, 1e-3);
                    dev.synchronize().expect("synchronize");
                })
            });
        }
        group.finish();
        drop((mlp, grads));
        dev.empty_cache();
    }
}

criterion_group!(benches, gemm, training);
criterion_main!(benches);
