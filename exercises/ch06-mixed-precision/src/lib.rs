//! Chapter 6: mixed precision.
//!
//! Activations in f16 or bf16, master weights, gradients and optimizer state in f32; loss scaling
//! for f16, whose range is too small for small gradients; and what mixed precision really saves.
//! Edit the items marked `TODO`.

pub use ch06_predict::{MixedMemory, PREDICT_ROWS, PREDICT_SIZES};
use gpumem::ops::{Float, Mlp, MlpGrads};
use gpumem::{Buffer, Device, Result};

// ANCHOR: round_trip
/// `values` stored as `T` on the device and read back as f32 (torch:
/// `torch.tensor(values, device="cuda").to(dtype).float().cpu()`): upload them as f32, cast them to
/// `T` and back to f32 on the device, and copy the result to the host.
pub fn round_trip<T: Float>(_dev: &Device, _values: &[f32]) -> Result<Vec<f32>> {
    // TODO: upload as f32, gpumem::ops::cast to T and back to f32 on the device, copy to the host.
    todo!(
        "store the values as {} on the device and read them back",
        T::DTYPE
    )
}
// ANCHOR_END: round_trip

// ANCHOR: grad_scaler
/// `torch.amp.GradScaler("cuda")`'s first scale: 2^16.
pub const INIT_SCALE: f32 = 65536.0;
/// What the scale is multiplied by after `GROWTH_INTERVAL` clean steps in a row.
pub const GROWTH_FACTOR: f32 = 2.0;
/// What the scale is multiplied by after a step whose gradients hold inf or NaN.
pub const BACKOFF_FACTOR: f32 = 0.5;
/// Clean steps in a row before the scale grows.
pub const GROWTH_INTERVAL: u32 = 2000;

/// Dynamic loss scaling with the rules of `torch.amp.GradScaler("cuda")`.
#[derive(Debug, Clone, PartialEq)]
pub struct GradScaler {
    /// The current loss scale: the loss gradient is multiplied by it before backward.
    pub scale: f32,
    /// Multiplies the scale after `growth_interval` clean steps in a row.
    pub growth_factor: f32,
    /// Multiplies the scale after a step with inf or NaN gradients.
    pub backoff_factor: f32,
    /// Clean steps in a row before the scale grows.
    pub growth_interval: u32,
    /// Clean steps in a row since the scale last changed (torch's `_growth_tracker`).
    pub growth_tracker: u32,
    /// Whether this step's gradients held inf or NaN: `None` until `unscale` has looked.
    pub found_inf: Option<bool>,
}

impl GradScaler {
    /// A scaler with torch's defaults: scale 2^16, ×2 after 2000 clean steps, ×0.5 on overflow.
    pub fn new() -> GradScaler {
        GradScaler::with_settings(INIT_SCALE, GROWTH_FACTOR, BACKOFF_FACTOR, GROWTH_INTERVAL)
    }

    /// A scaler with other settings (torch: `GradScaler("cuda", init_scale=..., ...)`).
    pub fn with_settings(
        init_scale: f32,
        growth_factor: f32,
        backoff_factor: f32,
        growth_interval: u32,
    ) -> GradScaler {
        GradScaler {
            scale: init_scale,
            growth_factor,
            backoff_factor,
            growth_interval,
            growth_tracker: 0,
            found_inf: None,
        }
    }
}

impl Default for GradScaler {
    fn default() -> GradScaler {
        GradScaler::new()
    }
}
// ANCHOR_END: grad_scaler

// ANCHOR: scaler_methods
impl GradScaler {
    /// Divides every gradient by the scale, in place, and records whether any was inf or NaN
    /// (`scaler.unscale_(optimizer)`). Called again before `update`, it changes nothing and
    /// returns what it found the first time (torch raises an error instead).
    pub fn unscale(&mut self, _grads: &mut MlpGrads) -> Result<bool> {
        // TODO: if this step was already checked, return what was found; else unscale and
        // check every gradient, and record what you found.
        todo!("unscale the gradients and look for inf or NaN")
    }

    /// Unscales the gradients (unless `unscale` already did this step), then runs
    /// `optimizer_step` on them only if every one is finite (`scaler.step(optimizer)`).
    /// Returns whether the optimizer ran.
    pub fn step(
        &mut self,
        _grads: &mut MlpGrads,
        _optimizer_step: impl FnOnce(&MlpGrads) -> Result<()>,
    ) -> Result<bool> {
        // TODO: unscale (once), then run the optimizer only on finite gradients.
        todo!("step unless the gradients overflowed")
    }

    /// Sets the scale for the next step from what this step found, and forgets it
    /// (`scaler.update()`). Inf or NaN: multiply the scale by `backoff_factor` and restart the
    /// count of clean steps. Clean: count it; at `growth_interval` clean steps in a row, multiply
    /// the scale by `growth_factor` (unless that would make it infinite) and restart the count.
    /// Does nothing if no step was checked since the last update (torch raises an error).
    pub fn update(&mut self) {
        // TODO: back off on inf/NaN, grow after growth_interval clean steps, forget found_inf.
        todo!("adjust the scale")
    }
}
// ANCHOR_END: scaler_methods

// ANCHOR: momentum
/// SGD with momentum (`torch.optim.SGD(params, lr, momentum)`): one f32 velocity per parameter,
/// the optimizer's state. It belongs to the f32 master weights, whatever the activations' type.
pub struct Momentum {
    /// The velocities, shaped like the parameters.
    pub velocity: MlpGrads,
    /// The learning rate.
    pub lr: f32,
    /// How much of the last velocity each step keeps.
    pub momentum: f32,
}

impl Momentum {
    /// Zero velocities for `model`'s parameters.
    pub fn new(model: &Mlp, lr: f32, momentum: f32) -> Result<Momentum> {
        Ok(Momentum {
            velocity: model.zero_grads()?,
            lr,
            momentum,
        })
    }

    /// One step: `v ← momentum·v + g`, then `w ← w − lr·v`, for every parameter.
    pub fn step(&mut self, model: &mut Mlp, grads: &MlpGrads) -> Result<()> {
        self.velocity.scale(self.momentum)?;
        self.velocity.accumulate(grads, 1.0)?;
        model.sgd_step(&self.velocity, self.lr)
    }
}
// ANCHOR_END: momentum

// ANCHOR: batch
/// A batch on the device, in the activations' type `T`.
pub struct DeviceBatch<T: Float> {
    /// The inputs, `[rows × in_features]`.
    pub x: Buffer<T>,
    /// The targets, `[rows × out_features]`.
    pub t: Buffer<T>,
    /// Number of examples.
    pub rows: usize,
}

impl<T: Float> DeviceBatch<T> {
    /// Rounds f32 examples to `T` on the host (as a data loader that yields `T` would) and uploads
    /// them: one copy for the inputs, one for the targets.
    pub fn from_host(dev: &Device, x: &[f32], t: &[f32], rows: usize) -> Result<DeviceBatch<T>> {
        let to_t = |v: &[f32]| v.iter().map(|&a| T::from_f32(a)).collect::<Vec<T>>();
        Ok(DeviceBatch {
            x: dev.from_slice(&to_t(x))?,
            t: dev.from_slice(&to_t(t))?,
            rows,
        })
    }
}

/// What one training step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOutcome {
    /// The batch's loss (mean squared error), not scaled.
    pub loss: f32,
    /// Whether the optimizer stepped (false when the scaler found inf or NaN).
    pub stepped: bool,
}
// ANCHOR_END: batch

// ANCHOR: mixed_step
/// One mixed-precision training step, torch's recipe:
///
/// ```python
/// optimizer.zero_grad()
/// with torch.autocast("cuda", dtype=torch.float16):
///     loss = F.mse_loss(model(x), t)
/// scaler.scale(loss).backward()
/// scaler.step(optimizer)
/// scaler.update()
/// ```
///
/// Forward and backward run in `T` with the f32 master weights; the gradients are f32. When the
/// step ends, `grads` holds the unscaled gradients.
pub fn mixed_precision_step<T: Float>(
    _model: &mut Mlp,
    _grads: &mut MlpGrads,
    _optimizer: &mut Momentum,
    _scaler: &mut GradScaler,
    _batch: &DeviceBatch<T>,
) -> Result<StepOutcome> {
    // TODO: zero_grad; forward in T; loss; backward from the scaled loss gradient;
    // scaler.step with the optimizer; scaler.update.
    todo!("one mixed-precision step in {}", T::DTYPE)
}
// ANCHOR_END: mixed_step
