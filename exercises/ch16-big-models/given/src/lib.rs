//! Chapter 16's given code: the measurements the predictions are compared with, and the forward
//! pass that runs an offloaded model. A crate of its own, outside the `src/` you edit, so the
//! tests measure with the official copy.

pub use ch16_predict::{Loaded, Loading, Scale, Storage, WeightBytes};
use gpumem::{Buffer, Device, Result};

// ANCHOR: measure_loading
/// Loads a checkpoint whose tensors are `checkpoint` (float32 values, as read from a file) into a
/// model on `dev` the way `loading` says, as torch 2.15 does (chapter 16's table), and measures
/// it from a clean start. The model it made is dropped before returning.
pub fn measure_loading(dev: &Device, loading: Loading, checkpoint: &[Vec<f32>]) -> Result<Loaded> {
    dev.synchronize()?;
    dev.reset_peak_memory_stats();
    let start = dev.memory_allocated();
    let mut file_backed = 0;
    let model: Vec<Buffer<f32>> = match loading {
        Loading::BuildThenLoad => {
            // The model's weights, initialized, then the state dict read into memory of its own.
            let mut model = checkpoint
                .iter()
                .map(|t| dev.alloc::<f32>(t.len()))
                .collect::<Result<Vec<_>>>()?;
            let state_dict = checkpoint
                .iter()
                .map(|t| dev.from_slice(t))
                .collect::<Result<Vec<_>>>()?;
            for (weight, loaded) in model.iter_mut().zip(&state_dict) {
                weight.copy_from(loaded)?;
            }
            drop(state_dict);
            model
        }
        Loading::Mmap => {
            // The state dict is the file: load_state_dict copies from it.
            let mut model = checkpoint
                .iter()
                .map(|t| dev.alloc::<f32>(t.len()))
                .collect::<Result<Vec<_>>>()?;
            for (weight, mapped) in model.iter_mut().zip(checkpoint) {
                weight.copy_from_slice(mapped)?;
            }
            model
        }
        Loading::MetaAssign => {
            // No weights to begin with; the model takes the loaded tensors.
            checkpoint
                .iter()
                .map(|t| dev.from_slice(t))
                .collect::<Result<Vec<_>>>()?
        }
        Loading::MetaMmapAssign => {
            // The model's weights are the mapped file: nothing is allocated.
            file_backed = checkpoint.iter().map(|t| 4 * t.len() as u64).sum();
            Vec::new()
        }
    };
    let peak_allocated = dev.max_memory_allocated() - start;
    drop(model);
    Ok(Loaded {
        peak_allocated,
        file_backed,
    })
}
// ANCHOR_END: measure_loading

/// A weight stored on the device: its values' bytes and its scales' bytes, as laid out in memory.
#[derive(Debug)]
pub struct Stored {
    /// The values.
    pub values: Buffer<u8>,
    /// The scales (`None` when the storage has none).
    pub scales: Option<Buffer<u8>>,
}

/// bfloat16's bits for `x`: float32's upper half, rounded to the nearest even.
fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16
}

/// The bytes of each scale, in `scale`'s type.
fn scale_bytes(scales: &[f32], scale: Scale) -> Vec<u8> {
    match scale {
        Scale::F32 => scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
        Scale::Bf16 => scales
            .iter()
            .flat_map(|s| bf16_bits(*s).to_le_bytes())
            .collect(),
    }
}

/// The largest magnitude in `values` over `limit` (1 where all are 0), the scale that maps them
/// into `-limit..=limit`.
fn absmax_scale(values: &[f32], limit: f32) -> f32 {
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if max == 0.0 { 1.0 } else { max / limit }
}

// ANCHOR: store
/// Quantizes `weight` (`rows` × `cols` float32 values, row after row) as `storage` says, with
/// symmetric scales (the largest magnitude of a row or group maps to 127 or 7), and stores the
/// values and scales on `dev`.
pub fn store(
    dev: &Device,
    weight: &[f32],
    rows: usize,
    cols: usize,
    storage: Storage,
) -> Result<Stored> {
    assert_eq!(weight.len(), rows * cols, "a weight of {rows} x {cols}");
    let (values, scales): (Vec<u8>, Option<Vec<u8>>) = match storage {
        Storage::F32 => (weight.iter().flat_map(|v| v.to_le_bytes()).collect(), None),
        Storage::Bf16 => (
            weight
                .iter()
                .flat_map(|v| bf16_bits(*v).to_le_bytes())
                .collect(),
            None,
        ),
        Storage::Int8PerRow { scale } => {
            let mut values = Vec::with_capacity(rows * cols);
            let mut scales = Vec::with_capacity(rows);
            for row in weight.chunks(cols) {
                let s = absmax_scale(row, 127.0);
                values.extend(
                    row.iter()
                        .map(|v| (v / s).round().clamp(-127.0, 127.0) as i8 as u8),
                );
                scales.push(s);
            }
            (values, Some(scale_bytes(&scales, scale)))
        }
        Storage::Int4PerGroup { group, scale } => {
            let group = group.max(1) as usize;
            let mut values = Vec::with_capacity(rows * cols.div_ceil(2));
            let mut scales = Vec::new();
            for row in weight.chunks(cols) {
                let mut nibbles = Vec::with_capacity(cols);
                for part in row.chunks(group) {
                    let s = absmax_scale(part, 7.0);
                    nibbles.extend(part.iter().map(|v| (v / s).round().clamp(-8.0, 7.0) as i8));
                    scales.push(s);
                }
                // Two values to a byte, the first in the low half; an odd row's last byte has
                // one.
                values.extend(nibbles.chunks(2).map(|pair| {
                    let low = pair[0] as u8 & 0xF;
                    let high = pair.get(1).map_or(0, |v| *v as u8 & 0xF);
                    low | high << 4
                }));
            }
            (values, Some(scale_bytes(&scales, scale)))
        }
    };
    Ok(Stored {
        values: dev.from_slice(&values)?,
        scales: scales.map(|s| dev.from_slice(&s)).transpose()?,
    })
}
// ANCHOR_END: store

impl Stored {
    /// The bytes it takes, as `untyped_storage().nbytes()` counts them (not rounded to blocks).
    pub fn bytes(&self) -> WeightBytes {
        WeightBytes {
            values: self.values.size_bytes() as u64,
            scales: self.scales.as_ref().map_or(0, |s| s.size_bytes() as u64),
        }
    }
}

// ANCHOR: offloaded
/// A model whose first layers live on the device and whose others stay in host memory, copied
/// one at a time into `prefetch` when the forward pass reaches them.
#[derive(Debug)]
pub struct Offloaded {
    /// The layers kept on the device, the model's first ones, in order.
    pub resident: Vec<Buffer<f32>>,
    /// The buffer each offloaded layer is copied into before it runs, one layer's size; `None`
    /// when every layer is resident.
    pub prefetch: Option<Buffer<f32>>,
    /// The activations, on the device.
    pub activations: Buffer<f32>,
}

/// Why a model cannot run within a budget.
#[derive(Debug)]
pub enum OffloadError {
    /// The activations and one layer's buffer alone are over the budget.
    TooSmall {
        /// The budget, in bytes.
        budget: u64,
        /// The bytes the activations and one layer's buffer take (blocks).
        needed: u64,
    },
    /// The layers do not all have the same length, or there are none.
    Layers(String),
    /// The device refused.
    Device(gpumem::Error),
}

impl std::fmt::Display for OffloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OffloadError::TooSmall { budget, needed } => write!(
                f,
                "a budget of {budget} bytes is too small: the activations and one layer's \
                 buffer take {needed} bytes"
            ),
            OffloadError::Layers(why) => write!(f, "cannot offload these layers: {why}"),
            OffloadError::Device(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OffloadError {}

impl From<gpumem::Error> for OffloadError {
    fn from(e: gpumem::Error) -> Self {
        OffloadError::Device(e)
    }
}
// ANCHOR_END: offloaded

/// The bytes of the block a buffer of `bytes` bytes takes: its size rounded up to 512.
pub fn block(bytes: u64) -> u64 {
    bytes.div_ceil(512) * 512
}

// ANCHOR: forward
/// Runs `input` through every layer, in order: each step multiplies the activations by one half
/// and adds the sum of the layer's weights. A layer not resident is copied from `layers` into
/// the prefetch buffer first. Returns the activations at the end.
pub fn forward(
    model: &mut Offloaded,
    layers: &[Vec<f32>],
    input: &[f32],
) -> std::result::Result<Vec<f32>, OffloadError> {
    model.activations.copy_from_slice(input)?;
    for (i, host) in layers.iter().enumerate() {
        let weights = match (model.resident.get(i), model.prefetch.as_mut()) {
            (Some(resident), _) => resident.to_vec()?,
            (None, Some(prefetch)) => {
                prefetch.copy_from_slice(host)?;
                prefetch.to_vec()?
            }
            (None, None) => {
                return Err(OffloadError::Layers(format!(
                    "layer {i} is neither on the device nor has a buffer to be copied into"
                )));
            }
        };
        let sum: f32 = weights.iter().sum();
        let next: Vec<f32> = model
            .activations
            .to_vec()?
            .iter()
            .map(|x| 0.5 * x + sum)
            .collect();
        model.activations.copy_from_slice(&next)?;
    }
    Ok(model.activations.to_vec()?)
}
// ANCHOR_END: forward
