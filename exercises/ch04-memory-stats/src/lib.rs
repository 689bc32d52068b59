//! Chapter 4: reading the memory statistics.
//!
//! `memory_allocated`, `max_memory_allocated`, `memory_reserved`, `memory_stats()` under torch's
//! keys, and the two classic measuring mistakes: sampling for a peak, and a list that leaks.
//! Edit the items marked `TODO`.

pub use ch04_predict::{MIB, StatsView};
use gpumem::{Buffer, Device, MemoryStats, Result};

// ANCHOR: mlp
/// One `nn.Linear` layer's parameters, in `f32`.
pub struct Linear {
    /// `out × in` weights.
    pub weight: Buffer<f32>,
    /// `out` biases.
    pub bias: Buffer<f32>,
}

/// A stack of linear layers on one device.
pub struct Mlp {
    /// The device the parameters live on.
    pub device: Device,
    /// The layers, first to last.
    pub layers: Vec<Linear>,
}

impl Mlp {
    /// Allocates zeroed parameters for layers of `(in_features, out_features)`, in order: each
    /// layer's weight, then its bias (as `nn.Sequential(...).cuda()` does).
    pub fn new(dev: &Device, shape: &[(usize, usize)]) -> Result<Mlp> {
        let mut layers = Vec::with_capacity(shape.len());
        for &(inputs, outputs) in shape {
            let weight = dev.alloc::<f32>(inputs * outputs)?;
            let bias = dev.alloc::<f32>(outputs)?;
            layers.push(Linear { weight, bias });
        }
        Ok(Mlp {
            device: dev.clone(),
            layers,
        })
    }

    /// Every parameter buffer: weight, then bias, layer by layer (`model.parameters()`).
    pub fn parameters(&self) -> impl Iterator<Item = &Buffer<f32>> {
        self.layers.iter().flat_map(|l| [&l.weight, &l.bias])
    }
}

/// The model of the prediction exercise: 1024 inputs, 1024 hidden units, 10 outputs.
pub const MLP_SHAPE: [(usize, usize); 2] = [(1024, 1024), (1024, 10)];
// ANCHOR_END: mlp

// ANCHOR: model_size
/// The model's size as the source computed it: Σ numel × element size, in bytes.
pub fn parameter_bytes(_model: &Mlp) -> u64 {
    // TODO: sum over model.parameters(); a Buffer knows its len() and its size_bytes().
    todo!("sum numel × size_of::<f32>() over the parameters")
}

/// What the allocator hands out for the model's parameters: the sum of their blocks, in bytes.
pub fn block_bytes(_model: &Mlp) -> u64 {
    // TODO: a Buffer knows the size of the block behind it.
    todo!("sum the parameters' block sizes")
}
// ANCHOR_END: model_size

// ANCHOR: stats_view
/// Picks this chapter's numbers ([`StatsView`]) out of `dev.memory_stats()`.
pub fn stats_view(_stats: &MemoryStats) -> StatsView {
    // TODO: one stats.get("...") per field, with the keys in StatsView's field docs
    // (src/predict.rs).
    todo!("read seven keys")
}
// ANCHOR_END: stats_view

// ANCHOR: fragment
/// The sizes of the page's fragmentation: four 4 MiB buffers, then a 6 MiB one.
pub const FRAGMENT_SIZES: (u64, u64) = (4 * MIB, 6 * MIB);

/// Four buffers of `each` bytes; the first and third are dropped; then a buffer of `last` bytes
/// is allocated. Returns the live buffers (the second, the fourth and the last one).
pub fn fragment(dev: &Device, each: u64, last: u64) -> Result<Vec<Buffer<f32>>> {
    let mut blocks = (0..4)
        .map(|_| dev.alloc::<f32>((each / 4) as usize))
        .collect::<Result<Vec<_>>>()?;
    let fourth = blocks.pop();
    let third = blocks.pop();
    let second = blocks.pop();
    drop((blocks, third));
    let last = dev.alloc::<f32>((last / 4) as usize)?;
    Ok(second.into_iter().chain(fourth).chain([last]).collect())
}
// ANCHOR_END: fragment

// ANCHOR: peak_report
/// What `measure_peak` saw of one piece of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeakReport {
    /// `memory_allocated()` just before the work.
    pub before: u64,
    /// The highest `memory_allocated()` reached while the work ran.
    pub peak: u64,
    /// `memory_allocated()` just after the work.
    pub after: u64,
}

impl PeakReport {
    /// The memory the work needed at its peak on top of what was already allocated.
    pub fn extra(&self) -> u64 {
        self.peak - self.before
    }
}
// ANCHOR_END: peak_report

// ANCHOR: workspace_op
/// A stand-in for an operation that needs workspace (a normalisation, a convolution): it makes
/// two temporaries the size of its input, writes a new output buffer, and frees the temporaries.
pub fn workspace_op(x: &Buffer<f32>) -> Result<Buffer<f32>> {
    let centred = x.try_clone()?;
    let squared = x.try_clone()?;
    let mut out = x.device().alloc::<f32>(x.len())?;
    out.copy_from(&centred)?;
    drop((centred, squared));
    Ok(out)
}

/// The source's way to find a peak: call `workspace_op` `steps` times and keep the largest
/// `memory_allocated()` seen between calls.
pub fn sampled_peak(x: &Buffer<f32>, steps: usize) -> Result<u64> {
    let dev = x.device();
    let mut max = 0;
    for _ in 0..steps {
        let y = workspace_op(x)?;
        max = max.max(dev.memory_allocated());
        drop(y);
    }
    Ok(max)
}

/// The source's loop, in Rust: `steps` times, upload a fresh 4 MiB tensor into the same variable
/// and sample `memory_allocated()`; returns the largest sample.
pub fn source_loop(dev: &Device, steps: usize) -> Result<u64> {
    let mut max = 0;
    let mut x_gpu: Option<Buffer<f32>> = None;
    for _ in 0..steps {
        let x = vec![1.0f32; (4 * MIB / 4) as usize];
        // As in Python, the old buffer is freed only once the new one is assigned.
        x_gpu = Some(dev.from_slice(&x)?);
        max = max.max(dev.memory_allocated());
    }
    drop(x_gpu);
    Ok(max)
}
// ANCHOR_END: workspace_op

// ANCHOR: measure_peak
/// Runs `work` and reports `memory_allocated` before and after it, and its true peak during it.
pub fn measure_peak<R>(
    _dev: &Device,
    _work: impl FnOnce() -> Result<R>,
) -> Result<(R, PeakReport)> {
    // TODO: the allocator tracks the peak for you; make it forget the peaks of earlier work.
    todo!("reset the peak, run the work, read max_memory_allocated")
}
// ANCHOR_END: measure_peak

// ANCHOR: training_step
/// A training step's stand-in: allocates a batch of activations and their gradient, computes the
/// step's loss into a one-element device buffer, frees the rest, and returns the loss.
pub fn training_step(model: &Mlp, step: usize) -> Result<Buffer<f32>> {
    let width = model.layers.last().map_or(1, |l| l.bias.len());
    let activations = model.device.alloc::<f32>(64 * width)?;
    let gradient = model.device.alloc::<f32>(64 * width)?;
    let loss = model.device.from_slice(&[1.0 / (step as f32 + 1.0)])?;
    drop((activations, gradient));
    Ok(loss)
}

/// The source's leak: every step's loss buffer is kept in a list, on the device.
pub fn train_keeping_device_losses(model: &Mlp, steps: usize) -> Result<Vec<Buffer<f32>>> {
    let mut losses = Vec::new();
    for step in 0..steps {
        losses.push(training_step(model, step)?);
    }
    Ok(losses)
}
// ANCHOR_END: training_step

// ANCHOR: train
/// Runs `steps` training steps and returns every step's loss as a host `f32` (torch:
/// `losses.append(loss.item())`), keeping nothing on the device once a step is over.
pub fn train(_model: &Mlp, _steps: usize) -> Result<Vec<f32>> {
    // TODO: call training_step for step = 0, 1, ..., steps - 1.
    todo!("keep the number, not the buffer")
}
// ANCHOR_END: train
