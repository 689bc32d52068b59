//! Chapter 3: `drop` versus `empty_cache`.
//!
//! Dropping a buffer (Rust's `del`) gives its block back to the allocator's cache;
//! `empty_cache` gives whole, unused segments back to the device. Reference solution.

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

// ANCHOR: unload_model
/// Frees `model` and hands the memory it used back to the device, for other processes to use.
pub fn unload_model(dev: &Device, model: TinyLinear) {
    // First the blocks go back to the cache; only then is the segment free to release.
    drop(model);
    dev.empty_cache();
}
// ANCHOR_END: unload_model

// ANCHOR: memory_view
/// Three views of one device's memory, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryView {
    /// Bytes in live blocks (`memory_allocated`).
    pub allocated: u64,
    /// Bytes the allocator holds from the device, live or cached (`memory_reserved`).
    pub reserved: u64,
    /// Bytes in use on the whole device as the driver (and nvidia-smi) sees it: total − free.
    pub driver_used: u64,
    /// The device's total memory, as the driver reports it.
    pub driver_total: u64,
}

impl MemoryView {
    /// Reads the allocator's counters and the driver's `(free, total)` from `dev`.
    pub fn capture(dev: &Device) -> Result<MemoryView> {
        let allocated = dev.memory_allocated();
        let reserved = dev.memory_reserved();
        let (free, total) = dev.mem_get_info()?;
        Ok(MemoryView {
            allocated,
            reserved,
            driver_used: total - free,
            driver_total: total,
        })
    }

    /// Reserved but not allocated: memory the allocator holds in its cache.
    pub fn cached(&self) -> u64 {
        self.reserved - self.allocated
    }

    /// Memory the driver counts as used that this allocator does not hold (0 on `cpu`).
    pub fn outside_allocator(&self) -> u64 {
        // On cuda another process may free memory between the two readings: never go below 0.
        self.driver_used.saturating_sub(self.reserved)
    }
}
// ANCHOR_END: memory_view

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
