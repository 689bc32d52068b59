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
    // TODO: refuse layers of different lengths (or none); count in blocks (512 B); keep every
    // layer when all fit with the activations; else refuse a budget below the activations and
    // one layer's buffer, or keep as many as fit beside that buffer, the first ones.
    todo!(
        "offload {} layers and {activations} activations within {budget} bytes on {dev}",
        layers.len()
    )
}
// ANCHOR_END: offload
