//! Chapter 16: big models.
//!
//! Measure what each way of loading a checkpoint holds at its peak, what a layer's weight takes in
//! float32, bfloat16, int8 and 4 bits with their scales, and keep as many layers on the device as
//! a budget allows, streaming the others through one buffer. Edit the items marked `TODO`.

pub use ch16_given::{
    Loaded, Loading, OffloadError, Offloaded, Scale, Storage, Stored, WeightBytes, block, forward,
    measure_loading, store,
};
use gpumem::Device;

// ANCHOR: offload
/// Places `layers` (host memory, all of one length, at least one) and the activations
/// (`activations` float32 values) on `dev` so that `memory_allocated()` never goes over `budget`
/// bytes (counting from what `dev` held before), now or while [`forward`] runs: as many layers
/// on the device as fit, the first ones, and, when not all fit, one layer's buffer to copy each
/// other layer into when its turn comes.
pub fn offload(
    dev: &Device,
    layers: &[Vec<f32>],
    activations: usize,
    budget: u64,
) -> std::result::Result<Offloaded, OffloadError> {
    let Some(first) = layers.first() else {
        return Err(OffloadError::Layers("there are none".into()));
    };
    if layers.iter().any(|l| l.len() != first.len()) {
        return Err(OffloadError::Layers("their lengths differ".into()));
    }
    let layer = block(4 * first.len() as u64);
    let acts = block(4 * activations as u64);
    let all = layers.len() as u64;
    // Everything fits: no buffer to stream through.
    let resident = if all * layer + acts <= budget {
        all
    } else if acts + layer > budget {
        return Err(OffloadError::TooSmall {
            budget,
            needed: acts + layer,
        });
    } else {
        (budget - acts - layer) / layer
    };
    let prefetch = if resident < all {
        Some(dev.alloc::<f32>(first.len())?)
    } else {
        None
    };
    Ok(Offloaded {
        resident: layers[..resident as usize]
            .iter()
            .map(|l| dev.from_slice(l))
            .collect::<gpumem::Result<Vec<_>>>()?,
        prefetch,
        activations: dev.alloc::<f32>(activations)?,
    })
}
// ANCHOR_END: offload
