//! Chapter 16's predictions: built as a crate of their own, with no dependencies (not even
//! gpumem), so they are predictions made before measuring. The tests measure and compare, at the
//! page's sizes and at sizes drawn on every run: write the rules, not the numbers.

// ANCHOR: loading
/// How a checkpoint is loaded into a model (torch 2.15's four ways, chapter 16's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loading {
    /// Build the model (its weights allocated), `torch.load` the checkpoint (every tensor read
    /// into memory of its own), `load_state_dict(sd)` copies them in, then `del sd`.
    BuildThenLoad,
    /// Build the model, `torch.load(path, mmap=True)` (every tensor a view of the mapped file),
    /// `load_state_dict(sd)` copies from the file into the model's weights.
    Mmap,
    /// Build the model on `torch.device("meta")` (no memory), `torch.load`, then
    /// `load_state_dict(sd, assign=True)`: the model takes the loaded tensors as its weights.
    MetaAssign,
    /// The meta device, `mmap=True` and `assign=True`: the model's weights are views of the
    /// mapped file.
    MetaMmapAssign,
}

/// What loading held, as the allocator counts it from a clean start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// `max_memory_allocated()` from the start of loading to its end, in bytes.
    pub peak_allocated: u64,
    /// Bytes of the model's weights that are still views of the mapped file once loaded (read
    /// from the file when first used, never allocated).
    pub file_backed: u64,
}
// ANCHOR_END: loading

// ANCHOR: storage
/// The type of a quantized weight's scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// 4 bytes each.
    F32,
    /// 2 bytes each.
    Bf16,
}

/// How a weight of `rows` × `cols` is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// float32.
    F32,
    /// bfloat16.
    Bf16,
    /// int8 values, one scale per row (per output channel).
    Int8PerRow {
        /// The scales' type.
        scale: Scale,
    },
    /// 4-bit values, two packed into each byte along a row, one scale per `group` values of a
    /// row (the last group of a row may be shorter).
    Int4PerGroup {
        /// Values per scale (at least 1).
        group: u64,
        /// The scales' type.
        scale: Scale,
    },
}

/// The bytes a stored weight takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightBytes {
    /// The values' bytes.
    pub values: u64,
    /// The scales' bytes (0 when there are none).
    pub scales: u64,
}
// ANCHOR_END: storage

// ANCHOR: predict_loading
/// Your prediction of what loading a checkpoint of tensors of `tensor_bytes` bytes each (every
/// one at least 1) holds, loaded the way `loading` says.
pub fn predict_loading(loading: Loading, tensor_bytes: &[u64]) -> Loaded {
    // TODO: what does the allocator hold for one tensor (a block is a multiple of 512 B)?
    // Which copies of the weights are alive at once while each way loads, and which weights are
    // still the file once loaded?
    todo!("predict loading {tensor_bytes:?} as {loading:?}")
}
// ANCHOR_END: predict_loading

// ANCHOR: predict_weight_bytes
/// Your prediction of the bytes of a weight of `rows` × `cols` (both at least 1) stored as
/// `storage`.
pub fn predict_weight_bytes(rows: u64, cols: u64, storage: Storage) -> WeightBytes {
    // TODO: the bytes of one value in each storage (4-bit: two values to a byte along a row),
    // how many scales (one per row, or one per group of a row), and the bytes of one scale.
    todo!("predict the bytes of {rows} x {cols} as {storage:?}")
}
// ANCHOR_END: predict_weight_bytes
