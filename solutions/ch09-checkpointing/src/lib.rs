//! Chapter 9: gradient checkpointing.
//!
//! Reference solution.

use gpumem::autograd::{self, Activation, Linear, Mlp, Tensor, checkpoint, linear, mse_loss};
use gpumem::ops::XorShift;
use gpumem::{Device, Error, Result};
use std::cell::Cell;
use std::ops::Range;
use std::rc::Rc;

// ANCHOR: model
pub use ch09_predict::{IN_FEATURES, OUT_FEATURES, ROWS, WIDTH};

/// An MLP of `depth` linear layers with ReLU between them: `IN_FEATURES → WIDTH → … → WIDTH →
/// OUT_FEATURES`.
pub fn deep_mlp(dev: &Device, depth: usize, rng: &mut XorShift) -> Result<Mlp> {
    if depth == 0 {
        return Err(Error::BadSetting {
            setting: "depth = 0".to_string(),
            reason: "a model needs at least one layer".to_string(),
        });
    }
    let mut sizes = vec![IN_FEATURES];
    sizes.extend(std::iter::repeat_n(WIDTH, depth - 1));
    sizes.push(OUT_FEATURES);
    Mlp::new(dev, &sizes, Activation::Relu, rng)
}

/// A batch on the device: inputs `[ROWS, IN_FEATURES]` and targets `[ROWS, OUT_FEATURES]`.
pub struct Batch {
    /// The inputs; they do not require grad.
    pub x: Tensor,
    /// The targets.
    pub t: Tensor,
}

impl Batch {
    /// A batch of random examples.
    pub fn random(dev: &Device, rng: &mut XorShift) -> Result<Batch> {
        Ok(Batch {
            x: Tensor::uniform(dev, &[ROWS, IN_FEATURES], -1.0, 1.0, rng)?,
            t: Tensor::uniform(dev, &[ROWS, OUT_FEATURES], -1.0, 1.0, rng)?,
        })
    }
}
// ANCHOR_END: model

// ANCHOR: segments
/// The layers of each segment when `checkpoint_sequential` splits `layers` layers into
/// `segments`, in order: every segment but the last is checkpointed.
pub fn segment_ranges(layers: usize, segments: usize) -> Result<Vec<Range<usize>>> {
    if segments == 0 || segments > layers {
        return Err(Error::BadSetting {
            setting: format!("segments = {segments}"),
            reason: format!("{layers} layers can be split into 1 to {layers} segments"),
        });
    }
    // torch: segment_size = len(functions) // segments; the last segment takes the rest.
    let size = layers / segments;
    let mut ranges: Vec<Range<usize>> = (0..segments - 1)
        .map(|s| s * size..(s + 1) * size)
        .collect();
    ranges.push((segments - 1) * size..layers);
    Ok(ranges)
}
// ANCHOR_END: segments

// ANCHOR: loss
/// The batch's loss, with the model run by `checkpoint_sequential` in `segments` segments.
pub fn checkpointed_loss(model: &Mlp, batch: &Batch, segments: usize) -> Result<Tensor> {
    let out = autograd::checkpoint_sequential(&model.as_layers(), segments, &batch.x)?;
    mse_loss(&out, &batch.t)
}
// ANCHOR_END: loss

// ANCHOR: step_cost
/// What one training step (forward, loss, backward) costs, measured on the device, in bytes of
/// blocks above what was allocated before it (the model and the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCost {
    /// Allocated after the forward pass and the loss, while the loss is held.
    pub after_forward: u64,
    /// The peak of the whole step, backward included (the gradients too).
    pub peak: u64,
    /// How many times a linear layer ran forward, recomputation included.
    pub linear_forwards: u64,
}
// ANCHOR_END: step_cost

// ANCHOR: measure
/// Runs one step with [`checkpointed_loss`] and measures it. Drops the model's gradients first,
/// so that every step allocates them afresh; leaves the new ones in `.grad`.
pub fn measure_step(model: &Mlp, batch: &Batch, segments: usize) -> Result<StepCost> {
    let dev = batch.x.device();
    model.zero_grad();
    let start = dev.memory_allocated();
    dev.reset_peak_memory_stats();
    let linears = autograd::forward_ops("linear");
    let loss = checkpointed_loss(model, batch, segments)?;
    let after_forward = dev.memory_allocated() - start;
    loss.backward()?;
    Ok(StepCost {
        after_forward,
        peak: dev.max_memory_allocated() - start,
        linear_forwards: autograd::forward_ops("linear") - linears,
    })
}
// ANCHOR_END: measure

// ANCHOR: source_model
/// The source's model: `depth` layers of `WIDTH → WIDTH`, each followed by ReLU (the last one
/// too).
pub struct SourceModel {
    /// The layers, input side first.
    pub layers: Vec<Linear>,
}

impl SourceModel {
    /// A model of `depth` layers.
    pub fn new(dev: &Device, depth: usize, rng: &mut XorShift) -> Result<SourceModel> {
        let layers = (0..depth)
            .map(|_| Linear::new(dev, WIDTH, WIDTH, rng))
            .collect::<Result<Vec<_>>>()?;
        Ok(SourceModel { layers })
    }

    /// Every parameter: weight then bias, layer by layer.
    pub fn parameters(&self) -> Vec<Tensor> {
        self.layers
            .iter()
            .flat_map(|l| [l.weight.clone(), l.bias.clone()])
            .collect()
    }

    /// The forward pass without checkpointing.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for layer in &self.layers {
            x = layer.forward(&x)?.relu()?;
        }
        Ok(x)
    }

    /// The source's checkpointed forward, as Python runs it: every closure reads the loop's one
    /// `layer` variable when it is called, not when it was made. The forward pass calls each
    /// closure at once and is right; the recomputation in backward runs after the loop, when the
    /// variable holds the last layer.
    pub fn forward_late_binding(&self, x: &Tensor) -> Result<Tensor> {
        let params: Rc<Vec<(Tensor, Tensor)>> = Rc::new(
            self.layers
                .iter()
                .map(|l| (l.weight.clone(), l.bias.clone()))
                .collect(),
        );
        // Python's closure cell for `layer`: shared by every closure, assigned by the loop.
        let layer = Rc::new(Cell::new(0));
        let mut x = x.clone();
        for i in 0..params.len() {
            layer.set(i);
            let (params, layer) = (params.clone(), layer.clone());
            x = checkpoint(
                move |inputs: &[Tensor]| {
                    let (w, b) = &params[layer.get()];
                    linear(&inputs[0], w, Some(b))?.relu()
                },
                &[x],
            )?;
        }
        Ok(x)
    }
}
// ANCHOR_END: source_model

// ANCHOR: every_layer
impl SourceModel {
    /// The source's checkpointed forward, done right: each layer in its own checkpoint, and
    /// each closure owning the layer it runs.
    pub fn forward_checkpointed(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for layer in &self.layers {
            // Clones of the parameter handles (no copy of the data), moved into the closure.
            let (w, b) = (layer.weight.clone(), layer.bias.clone());
            x = checkpoint(
                move |inputs: &[Tensor]| linear(&inputs[0], &w, Some(&b))?.relu(),
                &[x],
            )?;
        }
        Ok(x)
    }
}
// ANCHOR_END: every_layer
