//! Chapter 3's given code: the tiny model and the measurement your prediction is compared with.
//! A crate of its own, outside your `src/`, so that `check` and `grade` run and measure with
//! this official copy; your crate re-exports it.

pub use ch03_predict::{MIB, Outcome, Scenario};
use gpumem::{Buffer, Device, Result};

// ANCHOR: tiny_linear
/// A `torch.nn.Linear(in, out)` reduced to its memory: an `f32` weight and bias on a device.
pub struct TinyLinear {
    /// `out × in` weights.
    pub weight: Buffer<f32>,
    /// `out` biases.
    pub bias: Buffer<f32>,
}

impl TinyLinear {
    /// Allocates zeroed parameters on `dev`, the weight first and then the bias.
    pub fn new(dev: &Device, in_features: usize, out_features: usize) -> Result<TinyLinear> {
        let weight = dev.alloc::<f32>(in_features * out_features)?;
        let bias = dev.alloc::<f32>(out_features)?;
        Ok(TinyLinear { weight, bias })
    }

    /// Number of parameters, as `sum(p.numel() for p in m.parameters())`.
    pub fn numel(&self) -> usize {
        self.weight.len() + self.bias.len()
    }

    /// Bytes of parameter data (`numel × 4`): what the source called the model's size.
    pub fn parameter_bytes(&self) -> usize {
        self.weight.size_bytes() + self.bias.size_bytes()
    }
}
// ANCHOR_END: tiny_linear

/// Runs `scenario` on `dev` (which should hold nothing yet) and reads the allocator: what the
/// tests compare your prediction with.
pub fn measure(scenario: Scenario, dev: &Device) -> Result<Outcome> {
    // The scenarios' sizes are bytes; the buffers hold f32.
    let f32s = |bytes: u64| (bytes / 4) as usize;
    // Buffers that must stay alive until the last reading.
    let mut alive: Vec<Buffer<f32>> = Vec::new();
    let mut model = None;
    match scenario {
        Scenario::TinyModelLoaded { inputs, outputs } => {
            model = Some(TinyLinear::new(dev, inputs as usize, outputs as usize)?)
        }
        Scenario::TinyModelDropped { inputs, outputs } => {
            drop(TinyLinear::new(dev, inputs as usize, outputs as usize)?)
        }
        Scenario::EmptyCacheBeforeDrop { bytes } => {
            let buf = dev.alloc::<f32>(f32s(bytes))?;
            dev.empty_cache();
            drop(buf);
        }
        Scenario::SmallBufferPinsSegment { live, freed }
        | Scenario::LiveBlockPinsLargeSegment { live, freed } => {
            alive.push(dev.alloc::<f32>(f32s(live))?);
            drop(dev.alloc::<f32>(f32s(freed))?);
        }
        Scenario::HostCopyDropped { bytes } => {
            let host = vec![1.0f32; f32s(bytes)];
            alive.push(dev.from_slice(&host)?);
            drop(host);
        }
    }
    let allocated = dev.memory_allocated();
    let reserved = dev.memory_reserved();
    dev.empty_cache();
    let reserved_after_empty_cache = dev.memory_reserved();
    drop((alive, model));
    Ok(Outcome {
        allocated,
        reserved,
        reserved_after_empty_cache,
    })
}
