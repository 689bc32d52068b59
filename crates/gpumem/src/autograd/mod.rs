//! A small reverse-mode autograd over device buffers: what PyTorch's autograd keeps in memory.
//!
//! A [`Tensor`] is a [`Buffer`] with a shape, and, when it was made by an op while grad mode was on
//! and some input required grad, a node of the graph (`grad_fn`). Each node keeps exactly the
//! tensors PyTorch's backward formula for that op keeps (PyTorch 2.x,
//! `tools/autograd/derivatives.yaml`), as ordinary allocator blocks, so `memory_allocated` shows
//! what autograd costs:
//!
//! | op | torch's node | saved for backward |
//! |----|--------------|--------------------|
//! | [`linear`] | `AddmmBackward0` | the input (if the weight requires grad) and the weight (if the input does) |
//! | [`Tensor::matmul`] | `MmBackward0` | each operand, if the other requires grad |
//! | [`Tensor::add`] | `AddBackward0` | nothing |
//! | [`Tensor::mul`] | `MulBackward0` | each operand, if the other requires grad |
//! | [`Tensor::mul_scalar`] | `MulBackward0` | the scalar only (no device memory) |
//! | [`Tensor::relu`] | `ReluBackward0` | its result |
//! | [`Tensor::gelu`] | `GeluBackward0` | its input |
//! | [`Tensor::sum`], [`Tensor::mean`] | `SumBackward0`, `MeanBackward0` | the shape only |
//! | [`mse_loss`] | `MseLossBackward0` | the prediction and the target |
//! | [`log_softmax`] | `LogSoftmaxBackward0` | its result |
//! | [`nll_loss`] | `NllLossBackward0` | the log-probabilities, the targets and a one-element `total_weight` |
//! | [`cross_entropy`] | the two above | as the two above |
//!
//! A transformer layer's ops (3-D tensors, [`Tensor::bmm`], [`Tensor::softmax`],
//! [`Tensor::dropout`], [`Tensor::layer_norm`], [`sdpa`], ...) have their own table in the
//! `transformer` part of this module: see [`sdpa`] and [`AttentionBackend`].
//!
//! A saved tensor is a second handle on the same block, not a copy: saving costs memory only when
//! the block would otherwise have been freed (a hidden activation that the next layer overwrote).
//! The graph stays alive as long as any tensor that references it (the loss, an output, a running
//! total built with [`Tensor::add`]) is alive; [`Tensor::detach`] and [`Tensor::item`] give values
//! without it. [`Tensor::backward`] frees each node's saved tensors right after the node has run
//! (PyTorch's `retain_graph=False`); a second backward through those nodes is an error with
//! torch's message. [`no_grad`] and [`inference_mode`] are RAII guards over a thread-local mode, as
//! torch's are. There is no `eval()` here because `eval()` is not an autograd switch: in torch it
//! changes what dropout and batch norm do, and the graph is recorded all the same.
//!
//! [`checkpoint`] runs a function without keeping what its ops would save, keeps only its inputs,
//! and runs the function again in backward; [`checkpoint_sequential`] does it for the segments of a
//! list of layers. Both behave like torch's `use_reentrant=False`: gradients reach the parameters a
//! function uses even when none of its inputs requires grad. [`forward_ops`] counts the forward
//! runs of each op on this thread, recomputation included.
//!
//! Differences from torch, each visible in the code: tensors have at most 4 dimensions, are
//! contiguous and do not broadcast; in-place ops take the handle and return it with its new
//! history (other clones keep the old one); a saved tensor's version counter lives in its memory;
//! `sum`'s backward materialises the gradient that torch keeps as an expanded view; the engine runs
//! on the calling thread, latest node first, as torch's does on one device.
//!
//! Chapters 5–7 keep [`crate::ops::Mlp`], whose forward returns its saved activations explicitly
//! and whose backward is written out by hand: their exercises and pictures are about gradient
//! buffers, micro-batches, casts and copies that the learner manages, and that model shows each of
//! them. This module is the graph that chapters 8 and 9 are about; both models compute the same
//! numbers on the same weights (a test checks it).

use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;
use crate::ops::{self, DType, Float, MatMul, XorShift};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::marker::PhantomData;
use std::rc::Rc;

mod transformer;
pub use transformer::{
    Attention, AttentionBackend, GptLayer, LAYER_NORM_EPS, LayerNormStats, LayerPlan, lse_len, sdpa,
};

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static INFERENCE_MODE: Cell<bool> = const { Cell::new(false) };
    /// Inside [`checkpoint`]'s first forward: nodes are recorded, nothing is saved.
    static DISCARD_SAVED: Cell<bool> = const { Cell::new(false) };
    static NEXT_SEQUENCE: Cell<u64> = const { Cell::new(0) };
    static FORWARD_OPS: RefCell<HashMap<&'static str, u64>> = RefCell::new(HashMap::new());
}

/// torch 2.15's message for an inference tensor that backward would keep.
fn inference_saved_error() -> Error {
    autograd_error(
        "Inference tensors cannot be saved for backward. Please do not use Tensors created in \
         inference mode in computation tracked by autograd. To work around this, you can make a \
         clone to get a normal tensor and use it in autograd, or use `torch.no_grad()` instead of \
         `torch.inference_mode()`.",
    )
}

fn autograd_error(message: impl Into<String>) -> Error {
    Error::Autograd {
        message: message.into(),
    }
}

fn invalid(op: &'static str, dev: &Device, message: String) -> Error {
    Error::InvalidArgument {
        op,
        device: dev.to_string(),
        message,
    }
}

/// Whether ops record a graph on this thread now (`torch.is_grad_enabled()`).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Whether inference mode is on on this thread (`torch.is_inference_mode_enabled()`).
pub fn is_inference_mode_enabled() -> bool {
    INFERENCE_MODE.with(Cell::get)
}

/// Restores the previous grad mode when dropped (`torch.no_grad()` / `torch.enable_grad()`).
#[must_use = "grad mode is restored when the guard is dropped: bind it to a variable"]
pub struct GradModeGuard {
    previous: bool,
    _not_send: PhantomData<*const ()>,
}

impl GradModeGuard {
    fn set(enabled: bool) -> GradModeGuard {
        let previous = GRAD_ENABLED.with(|g| g.replace(enabled));
        GradModeGuard {
            previous,
            _not_send: PhantomData,
        }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

/// Turns grad mode off on this thread until the guard is dropped (`with torch.no_grad():`): ops
/// record no graph and save nothing.
pub fn no_grad() -> GradModeGuard {
    GradModeGuard::set(false)
}

/// Turns grad mode on on this thread until the guard is dropped (`with torch.enable_grad():`).
pub fn enable_grad() -> GradModeGuard {
    GradModeGuard::set(true)
}

/// Restores grad mode and inference mode when dropped (`torch.inference_mode()`).
#[must_use = "inference mode ends when the guard is dropped: bind it to a variable"]
pub struct InferenceModeGuard {
    previous_grad: bool,
    previous_inference: bool,
    _not_send: PhantomData<*const ()>,
}

/// Turns inference mode on on this thread until the guard is dropped: no graph, like
/// [`no_grad`], and the tensors made meanwhile are inference tensors, which a later op that records
/// a graph refuses to save (torch's rule).
pub fn inference_mode() -> InferenceModeGuard {
    InferenceModeGuard {
        previous_grad: GRAD_ENABLED.with(|g| g.replace(false)),
        previous_inference: INFERENCE_MODE.with(|g| g.replace(true)),
        _not_send: PhantomData,
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous_grad));
        INFERENCE_MODE.with(|g| g.set(self.previous_inference));
    }
}

/// Sets "discard saved" for checkpoint's first forward; restores the old value when dropped.
struct DiscardSavedGuard(bool);

impl DiscardSavedGuard {
    fn new() -> DiscardSavedGuard {
        DiscardSavedGuard(DISCARD_SAVED.with(|d| d.replace(true)))
    }
}

impl Drop for DiscardSavedGuard {
    fn drop(&mut self) {
        DISCARD_SAVED.with(|d| d.set(self.0));
    }
}

/// How many times op `name` (`"linear"`, `"relu"`, `"matmul"`, ...: the function's name) ran
/// forward on this thread, with or without grad, recomputation in backward included.
pub fn forward_ops(name: &str) -> u64 {
    FORWARD_OPS.with(|m| m.borrow().get(name).copied().unwrap_or(0))
}

/// How many forward runs of any op happened on this thread.
pub fn forward_ops_total() -> u64 {
    FORWARD_OPS.with(|m| m.borrow().values().sum())
}

fn count_forward(name: &'static str) {
    FORWARD_OPS.with(|m| *m.borrow_mut().entry(name).or_insert(0) += 1);
}

/// A tensor a node keeps for backward.
enum Saved<T: Float> {
    /// Values of the graph's type.
    Value(Buffer<T>),
    /// Class indices (the targets of [`nll_loss`]).
    Index(Buffer<i64>),
    /// A 1-byte mask (dropout's, as CUDA's `native_dropout` keeps it).
    Mask(Buffer<u8>),
    /// f32 statistics of a half-precision op (LayerNorm's mean and rstd, attention's logsumexp).
    Stats(Buffer<f32>),
}

impl<T: Float> Clone for Saved<T> {
    /// Another handle on the same block.
    fn clone(&self) -> Self {
        match self {
            Saved::Value(b) => Saved::Value(share(b)),
            Saved::Index(b) => Saved::Index(share(b)),
            Saved::Mask(b) => Saved::Mask(share(b)),
            Saved::Stats(b) => Saved::Stats(share(b)),
        }
    }
}

impl<T: Float> Saved<T> {
    fn value(&self) -> Result<&Buffer<T>> {
        match self {
            Saved::Value(b) => Ok(b),
            _ => Err(autograd_error(
                "internal: a saved value is not a value buffer",
            )),
        }
    }

    fn index(&self) -> Result<&Buffer<i64>> {
        match self {
            Saved::Index(b) => Ok(b),
            _ => Err(autograd_error(
                "internal: saved targets are not an index buffer",
            )),
        }
    }

    /// The memory's version counter now, and torch's type name for the version error.
    fn version(&self) -> (u64, String) {
        match self {
            Saved::Value(b) => (b.version(), torch_type_name(T::DTYPE, b)),
            Saved::Index(b) => (
                b.version(),
                torch_type_name(DType::F32, b).replace("Float", "Long"),
            ),
            Saved::Mask(b) => (
                b.version(),
                torch_type_name(DType::F32, b).replace("Float", "Bool"),
            ),
            Saved::Stats(b) => (b.version(), torch_type_name(DType::F32, b)),
        }
    }

    fn ptr(&self) -> u64 {
        match self {
            Saved::Value(b) => b.ptr(),
            Saved::Index(b) => b.ptr(),
            Saved::Mask(b) => b.ptr(),
            Saved::Stats(b) => b.ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Saved::Value(b) => b.len(),
            Saved::Index(b) => b.len(),
            Saved::Mask(b) => b.len(),
            Saved::Stats(b) => b.len(),
        }
    }

    /// (address, block bytes) of the memory.
    fn block(&self) -> (u64, usize) {
        match self {
            Saved::Value(b) => (b.ptr(), b.block_bytes()),
            Saved::Index(b) => (b.ptr(), b.block_bytes()),
            Saved::Mask(b) => (b.ptr(), b.block_bytes()),
            Saved::Stats(b) => (b.ptr(), b.block_bytes()),
        }
    }

    /// What [`Tensor::graph_saved`] reports.
    fn described(&self) -> SavedTensor {
        match self {
            Saved::Value(b) => SavedTensor {
                ptr: b.ptr(),
                bytes: b.len() * T::DTYPE.size(),
                dtype: T::DTYPE.torch_name(),
            },
            Saved::Index(b) => SavedTensor {
                ptr: b.ptr(),
                bytes: b.len() * std::mem::size_of::<i64>(),
                dtype: "torch.int64",
            },
            // CUDA's native_dropout keeps its mask as torch.bool, one byte per element.
            Saved::Mask(b) => SavedTensor {
                ptr: b.ptr(),
                bytes: b.len(),
                dtype: "torch.bool",
            },
            Saved::Stats(b) => SavedTensor {
                ptr: b.ptr(),
                bytes: b.len() * std::mem::size_of::<f32>(),
                dtype: "torch.float32",
            },
        }
    }
}

enum SavedState<T: Float> {
    Live(Vec<Saved<T>>),
    /// Freed by a backward without `retain_graph`.
    Freed,
    /// Never kept: recorded inside [`checkpoint`]'s first forward.
    Discarded,
}

type BackwardFn<T> = Box<dyn Fn(&[Saved<T>], &Buffer<T>) -> Result<Vec<Option<Buffer<T>>>>>;

/// One recorded op: where the gradients of its inputs go, what it saved, how to differentiate.
struct Node<T: Float> {
    name: &'static str,
    /// Creation order; backward runs the latest node first, as torch's engine does.
    sequence: u64,
    /// One entry per input: `None` when that input does not require grad.
    next: Vec<Option<Edge<T>>>,
    saved: RefCell<SavedState<T>>,
    /// The version of each saved tensor when it was saved (checked when backward unpacks it).
    saved_versions: Vec<u64>,
    /// What torch's message says of each saved tensor: its shape and, for an op's result or an
    /// input made by an op, that op's name (`Relu` for `ReluBackward0`).
    saved_descriptions: Vec<SavedDescription>,
    /// The input that reaches this node through a transposed view (a linear's weight: torch's
    /// `TBackward0` between `AddmmBackward0` and the weight's `AccumulateGrad`).
    transposed_input: Cell<Option<usize>>,
    /// For [`checkpoint`]'s node: the nodes torch keeps inside the region (`use_reentrant=False`
    /// keeps them, with placeholders for what they save), and the leaves they reach.
    region: RefCell<Option<Region<T>>>,
    backward: BackwardFn<T>,
}

/// The inner graph of a checkpointed region, as [`Tensor::graph_nodes`] shows it.
struct Region<T: Float> {
    names: Vec<&'static str>,
    leaves: Vec<Rc<Inner<T>>>,
}

/// The nodes reachable from `roots` but not through `stop`, latest first, each followed by the
/// `TBackward0` of a transposed input, then (in `leaves`) every leaf they reach, without repeats,
/// each standing for one `AccumulateGrad` (torch makes one per leaf).
fn region_below<T: Float>(roots: Vec<Rc<Node<T>>>, stop: &HashSet<*const Node<T>>) -> Region<T> {
    let mut seen: HashSet<*const Node<T>> = HashSet::new();
    let mut stack = roots;
    let mut ordered = Vec::new();
    while let Some(node) = stack.pop() {
        let key = Rc::as_ptr(&node);
        if stop.contains(&key) || !seen.insert(key) {
            continue;
        }
        let mut names = Vec::new();
        let mut leaves = Vec::new();
        match &*node.region.borrow() {
            Some(region) => {
                names.extend(&region.names);
                leaves.extend(region.leaves.iter().cloned());
            }
            None => names.push(node.name),
        }
        for (i, edge) in node.next.iter().enumerate() {
            if node.transposed_input.get() == Some(i) && edge.is_some() {
                names.push("TBackward0");
            }
            match edge {
                Some(Edge::Leaf(leaf)) => leaves.push(leaf.clone()),
                Some(Edge::Node(child)) => stack.push(child.clone()),
                None => {}
            }
        }
        ordered.push((node.sequence, names, leaves));
    }
    ordered.sort_by_key(|(sequence, _, _)| std::cmp::Reverse(*sequence));
    let mut seen_leaves = HashSet::new();
    let mut region = Region {
        names: Vec::new(),
        leaves: Vec::new(),
    };
    for (_, names, leaves) in ordered {
        region.names.extend(names);
        for leaf in leaves {
            if seen_leaves.insert(Rc::as_ptr(&leaf)) {
                region.leaves.push(leaf);
            }
        }
    }
    region
}

/// How torch's version error names a saved tensor.
#[derive(Clone)]
struct SavedDescription {
    shape: Vec<usize>,
    made_by: Option<&'static str>,
}

/// What a node keeps for backward, as [`Tensor::graph_saved`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedTensor {
    /// The address of the memory (one entry per distinct memory).
    pub ptr: u64,
    /// Bytes of the tensor's elements (not of the allocator block holding them).
    pub bytes: usize,
    /// torch's name for the element type, such as `"torch.float32"` or `"torch.int64"`.
    pub dtype: &'static str,
}

enum Edge<T: Float> {
    Node(Rc<Node<T>>),
    /// A leaf that requires grad: its gradient is accumulated into `.grad` (`AccumulateGrad`).
    Leaf(Rc<Inner<T>>),
}

struct Inner<T: Float> {
    data: Buffer<T>,
    shape: Vec<usize>,
    requires_grad: bool,
    grad_fn: Option<Rc<Node<T>>>,
    /// The accumulated gradient of a leaf.
    grad: RefCell<Option<Buffer<T>>>,
    inference: bool,
}

/// A device buffer with a shape that may require grad (`torch.Tensor`). Cloning is cheap and
/// shares the data and the graph.
pub struct Tensor<T: Float = f32> {
    inner: Rc<Inner<T>>,
}

impl<T: Float> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        Tensor {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Float> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor<{}>(shape {:?}, {}, requires_grad {}, grad_fn {:?})",
            T::DTYPE,
            self.inner.shape,
            self.device(),
            self.inner.requires_grad,
            self.grad_fn_name()
        )
    }
}

/// A second handle on the same memory (no copy, no allocation).
fn share<T: crate::memory::buffer::Element>(b: &Buffer<T>) -> Buffer<T> {
    // `to` on the buffer's own device returns the same storage and cannot fail.
    b.to(b.device())
        .unwrap_or_else(|_| unreachable!("to() on the same device shares the memory"))
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl<T: Float> Tensor<T> {
    fn leaf(data: Buffer<T>, shape: Vec<usize>, requires_grad: bool) -> Tensor<T> {
        Tensor {
            inner: Rc::new(Inner {
                data,
                shape,
                requires_grad,
                grad_fn: None,
                grad: RefCell::new(None),
                inference: is_inference_mode_enabled(),
            }),
        }
    }

    /// A tensor over `data` with `shape` (`[]` is a scalar, `[n]` a vector, `[rows, cols]` a matrix);
    /// a leaf that does not require grad.
    pub fn from_buffer(data: Buffer<T>, shape: &[usize]) -> Result<Tensor<T>> {
        if shape.len() > 4 {
            return Err(invalid(
                "Tensor::from_buffer",
                data.device(),
                format!("shape {shape:?}: tensors here have at most 4 dimensions"),
            ));
        }
        let n = numel(shape).ok_or_else(|| {
            invalid(
                "Tensor::from_buffer",
                data.device(),
                format!("shape {shape:?} overflows"),
            )
        })?;
        if n != data.len() {
            return Err(invalid(
                "Tensor::from_buffer",
                data.device(),
                format!(
                    "shape {shape:?} needs {n} elements, the buffer holds {}",
                    data.len()
                ),
            ));
        }
        Ok(Tensor::leaf(data, shape.to_vec(), false))
    }

    /// A tensor holding a copy of `data` (one host-to-device copy, `torch.tensor(data)`).
    pub fn from_slice(dev: &Device, data: &[T], shape: &[usize]) -> Result<Tensor<T>> {
        Tensor::from_buffer(dev.from_slice(data)?, shape)
    }

    /// A tensor of `T` from f32 values, rounded to `T` on the host (one host-to-device copy).
    pub fn from_f32(dev: &Device, data: &[f32], shape: &[usize]) -> Result<Tensor<T>> {
        let values: Vec<T> = data.iter().map(|&v| T::from_f32(v)).collect();
        Tensor::from_slice(dev, &values, shape)
    }

    /// Zeros of `shape` (`torch.zeros`).
    pub fn zeros(dev: &Device, shape: &[usize]) -> Result<Tensor<T>> {
        let n = numel(shape)
            .ok_or_else(|| invalid("Tensor::zeros", dev, format!("shape {shape:?} overflows")))?;
        Tensor::from_buffer(dev.alloc(n)?, shape)
    }

    /// Values uniform in `[low, high)` from `rng` (host-generated, one copy).
    pub fn uniform(
        dev: &Device,
        shape: &[usize],
        low: f32,
        high: f32,
        rng: &mut XorShift,
    ) -> Result<Tensor<T>> {
        let n = numel(shape)
            .ok_or_else(|| invalid("Tensor::uniform", dev, format!("shape {shape:?} overflows")))?;
        Tensor::from_f32(dev, &rng.uniform_vec(n, low, high), shape)
    }

    /// The same leaf with `requires_grad` set (`tensor.requires_grad_()`). A tensor made by an op
    /// already requires grad: `true` returns it unchanged and `false` is an error, as in torch
    /// (use [`detach`](Self::detach) instead).
    pub fn requires_grad_(self, requires_grad: bool) -> Result<Tensor<T>> {
        if self.inner.grad_fn.is_some() {
            if requires_grad {
                return Ok(self);
            }
            return Err(autograd_error(
                "you can only change requires_grad flags of leaf variables. If you want to use a \
                 computed variable in a subgraph that doesn't require differentiation use \
                 var_no_grad = var.detach().",
            ));
        }
        Ok(Tensor::leaf(
            share(&self.inner.data),
            self.inner.shape.clone(),
            requires_grad,
        ))
    }

    /// The data.
    pub fn data(&self) -> &Buffer<T> {
        &self.inner.data
    }

    /// The shape (`[]` for a scalar).
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.inner.data.len()
    }

    /// The device the data lives on.
    pub fn device(&self) -> &Device {
        self.inner.data.device()
    }

    /// Whether gradients flow to this tensor (`tensor.requires_grad`).
    pub fn requires_grad(&self) -> bool {
        self.inner.requires_grad
    }

    /// Whether this is a leaf: made by the user, not by an op that recorded a graph.
    pub fn is_leaf(&self) -> bool {
        self.inner.grad_fn.is_none()
    }

    /// Whether the tensor was made in [`inference_mode`].
    pub fn is_inference(&self) -> bool {
        self.inner.inference
    }

    /// The name of the node that made this tensor (`tensor.grad_fn`), such as `"ReluBackward0"`;
    /// for a [`checkpoint`]'s output, the last node inside it, as in torch's `use_reentrant=False`.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.inner
            .grad_fn
            .as_ref()
            .map(|n| match &*n.region.borrow() {
                Some(region) => region.names.first().copied().unwrap_or(n.name),
                None => n.name,
            })
    }

    /// The accumulated gradient of a leaf (`tensor.grad`): the same memory, not a copy.
    pub fn grad(&self) -> Option<Tensor<T>> {
        let grad = self.inner.grad.borrow();
        grad.as_ref()
            .map(|g| Tensor::leaf(share(g), self.inner.shape.clone(), false))
    }

    /// Drops the accumulated gradient (`tensor.grad = None`, what `zero_grad()` does by default).
    pub fn clear_grad(&self) {
        self.inner.grad.borrow_mut().take();
    }

    /// The same data without the graph (`tensor.detach()`): shares memory, requires no grad.
    pub fn detach(&self) -> Tensor<T> {
        Tensor::leaf(share(&self.inner.data), self.inner.shape.clone(), false)
    }

    /// The single value on the host as f32 (`tensor.item()`: one device-to-host copy); the graph
    /// is not kept by the number.
    pub fn item(&self) -> Result<f32> {
        if self.numel() != 1 {
            return Err(autograd_error(format!(
                "a Tensor with {} elements cannot be converted to Scalar",
                self.numel()
            )));
        }
        let mut out = [T::default()];
        self.inner.data.copy_to_slice(&mut out)?;
        Ok(out[0].to_f32())
    }

    /// The values copied to the host (one device-to-host copy).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.inner.data.to_vec()
    }

    /// The values copied to the host as f32.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(self.to_vec()?.into_iter().map(Float::to_f32).collect())
    }

    /// Bytes of the distinct blocks saved for backward by every node reachable from this tensor
    /// (what `torch.autograd.graph.saved_tensors_hooks` would see). Blocks that are also alive for
    /// other reasons (the input batch, the weights) count here too; the memory autograd adds is
    /// the `memory_allocated` difference against the same forward under [`no_grad`].
    pub fn graph_saved_bytes(&self) -> usize {
        let mut blocks: HashMap<u64, usize> = HashMap::new();
        self.visit_nodes(|node| {
            if let SavedState::Live(saved) = &*node.saved.borrow() {
                for s in saved {
                    let (ptr, bytes) = s.block();
                    blocks.insert(ptr, bytes);
                }
            }
        });
        blocks.values().sum()
    }

    /// Every distinct memory saved for backward by the nodes reachable from this tensor, in the
    /// order it was first saved (what `torch.autograd.graph.saved_tensors_hooks` packs, one entry
    /// per storage).
    pub fn graph_saved(&self) -> Vec<SavedTensor> {
        let mut nodes = Vec::new();
        self.visit_nodes(|node| {
            if let SavedState::Live(saved) = &*node.saved.borrow() {
                nodes.push((node.sequence, saved.iter().map(Saved::described).collect()));
            }
        });
        nodes.sort_by_key(|(sequence, _): &(u64, Vec<SavedTensor>)| *sequence);
        let mut seen = HashSet::new();
        nodes
            .into_iter()
            .flat_map(|(_, saved)| saved)
            .filter(|s| seen.insert(s.ptr))
            .collect()
    }

    /// The names of the nodes of the graph reachable from this tensor, as torch's
    /// `grad_fn.next_functions` walk finds them: the op nodes latest first, each followed by the
    /// `TBackward0` of a linear's weight and the `AccumulateGrad` of each leaf that requires grad
    /// it reaches first. A [`checkpoint`] region shows the nodes torch keeps inside it
    /// (`use_reentrant=False`), not a node of its own.
    pub fn graph_nodes(&self) -> Vec<&'static str> {
        let region = region_below(
            self.inner.grad_fn.iter().cloned().collect(),
            &HashSet::new(),
        );
        let mut names = region.names;
        // Leaves reached by the root itself when it is a leaf do not count: it has no node.
        names.extend(region.leaves.iter().map(|_| "AccumulateGrad"));
        names
    }

    fn visit_nodes(&self, mut visit: impl FnMut(&Node<T>)) {
        let mut seen: HashSet<*const Node<T>> = HashSet::new();
        let mut stack: Vec<Rc<Node<T>>> = self.inner.grad_fn.iter().cloned().collect();
        while let Some(node) = stack.pop() {
            if !seen.insert(Rc::as_ptr(&node)) {
                continue;
            }
            visit(&node);
            for edge in node.next.iter().flatten() {
                if let Edge::Node(child) = edge {
                    stack.push(child.clone());
                }
            }
        }
    }

    /// Backpropagates from this scalar (`loss.backward()`): adds gradients into the leaves'
    /// `.grad` and frees every node's saved tensors as it goes.
    pub fn backward(&self) -> Result<()> {
        self.backward_with(false)
    }

    /// As [`backward`](Self::backward); with `retain_graph` the saved tensors are kept, so that a
    /// second backward through the same graph works (`loss.backward(retain_graph=True)`).
    pub fn backward_with(&self, retain_graph: bool) -> Result<()> {
        if self.numel() != 1 {
            return Err(autograd_error(
                "grad can be implicitly created only for scalar outputs",
            ));
        }
        let mut seed = self.device().alloc::<T>(1)?;
        ops::fill(&mut seed, 1.0)?;
        self.backward_from(seed, retain_graph)
    }

    /// Backpropagates `grad` (the gradient of some scalar with respect to this tensor, of its
    /// length): `tensor.backward(gradient=grad)`.
    pub fn backward_from(&self, grad: Buffer<T>, retain_graph: bool) -> Result<()> {
        if !self.requires_grad() {
            return Err(autograd_error(
                "element 0 of tensors does not require grad and does not have a grad_fn",
            ));
        }
        if grad.len() != self.numel() {
            return Err(invalid(
                "backward",
                self.device(),
                format!(
                    "the gradient holds {} elements, the tensor {}",
                    grad.len(),
                    self.numel()
                ),
            ));
        }
        match &self.inner.grad_fn {
            None => accumulate_into_leaf(&self.inner, grad),
            Some(root) => run_engine(root.clone(), grad, retain_graph),
        }
    }

    /// Records an op's result: a plain tensor when no graph is recorded, else a tensor with a node
    /// that saves what `save` returns.
    fn record(
        name: &'static str,
        data: Buffer<T>,
        shape: Vec<usize>,
        inputs: &[&Tensor<T>],
        save: impl FnOnce(&[bool], &Buffer<T>) -> Vec<Saved<T>>,
        backward: BackwardFn<T>,
    ) -> Result<Tensor<T>> {
        let needs: Vec<bool> = inputs.iter().map(|t| t.requires_grad()).collect();
        if !is_grad_enabled() || !needs.iter().any(|&n| n) {
            return Ok(Tensor::leaf(data, shape, false));
        }
        let saved = save(&needs, &data);
        // torch refuses an inference tensor only where backward would keep it.
        let inference: HashSet<u64> = inputs
            .iter()
            .filter(|t| t.is_inference())
            .map(|t| t.data().ptr())
            .collect();
        if saved.iter().any(|s| inference.contains(&s.ptr())) {
            return Err(inference_saved_error());
        }
        Ok(Tensor::with_node(
            name, data, shape, inputs, saved, backward,
        ))
    }

    /// A tensor that requires grad, made by a new node with edges to `inputs` (those that require
    /// grad) that keeps `saved`, unless inside checkpoint's first forward.
    fn with_node(
        name: &'static str,
        data: Buffer<T>,
        shape: Vec<usize>,
        inputs: &[&Tensor<T>],
        saved: Vec<Saved<T>>,
        backward: BackwardFn<T>,
    ) -> Tensor<T> {
        let saved_versions = saved.iter().map(|s| s.version().0).collect();
        let saved_descriptions = saved
            .iter()
            .map(|s| {
                if s.ptr() == data.ptr() {
                    SavedDescription {
                        shape: shape.clone(),
                        made_by: Some(name),
                    }
                } else if let Some(t) = inputs.iter().find(|t| t.data().ptr() == s.ptr()) {
                    SavedDescription {
                        shape: t.shape().to_vec(),
                        made_by: t.grad_fn_name(),
                    }
                } else {
                    SavedDescription {
                        shape: vec![s.len()],
                        made_by: None,
                    }
                }
            })
            .collect();
        let saved = if DISCARD_SAVED.with(Cell::get) {
            SavedState::Discarded
        } else {
            SavedState::Live(saved)
        };
        let next = inputs
            .iter()
            .map(|t| {
                if !t.requires_grad() {
                    None
                } else if let Some(node) = &t.inner.grad_fn {
                    Some(Edge::Node(node.clone()))
                } else {
                    Some(Edge::Leaf(t.inner.clone()))
                }
            })
            .collect();
        let node = Rc::new(Node {
            name,
            sequence: NEXT_SEQUENCE.with(|s| s.replace(s.get() + 1)),
            next,
            saved: RefCell::new(saved),
            saved_versions,
            saved_descriptions,
            transposed_input: Cell::new(None),
            region: RefCell::new(None),
            backward,
        });
        Tensor {
            inner: Rc::new(Inner {
                data,
                shape,
                requires_grad: true,
                grad_fn: Some(node),
                grad: RefCell::new(None),
                inference: false,
            }),
        }
    }

    fn same_shape(&self, op: &'static str, other: &Tensor<T>) -> Result<()> {
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                expected: self.device().to_string(),
                actual: other.device().to_string(),
            });
        }
        if self.shape() != other.shape() {
            return Err(invalid(
                op,
                self.device(),
                format!(
                    "shapes {:?} and {:?} differ (no broadcasting here)",
                    self.shape(),
                    other.shape()
                ),
            ));
        }
        Ok(())
    }

    fn matrix(&self, op: &'static str, what: &str) -> Result<(usize, usize)> {
        match self.shape() {
            [r, c] => Ok((*r, *c)),
            s => Err(invalid(
                op,
                self.device(),
                format!("{what} must be a matrix [rows, cols], got shape {s:?}"),
            )),
        }
    }

    /// `self + other` (`torch.add`); saves nothing.
    pub fn add(&self, other: &Tensor<T>) -> Result<Tensor<T>> {
        const OP: &str = "add";
        self.same_shape(OP, other)?;
        count_forward(OP);
        let mut y = self.data().try_clone()?;
        ops::axpy(1.0, other.data(), &mut y)?;
        Tensor::record(
            "AddBackward0",
            y,
            self.shape().to_vec(),
            &[self, other],
            |_, _| Vec::new(),
            Box::new(|_, g| Ok(vec![Some(share(g)), Some(share(g))])),
        )
    }

    /// The element-wise product `self * other` (`torch.mul`); saves each operand if the other
    /// requires grad.
    pub fn mul(&self, other: &Tensor<T>) -> Result<Tensor<T>> {
        const OP: &str = "mul";
        self.same_shape(OP, other)?;
        count_forward(OP);
        let y = ops::mul(self.data(), other.data())?;
        let (a, b) = (share(self.data()), share(other.data()));
        let needs = [self.requires_grad(), other.requires_grad()];
        Tensor::record(
            "MulBackward0",
            y,
            self.shape().to_vec(),
            &[self, other],
            move |_, _| {
                // other is needed for self's gradient and self for other's.
                let mut saved = Vec::new();
                if needs[0] {
                    saved.push(Saved::Value(b));
                }
                if needs[1] {
                    saved.push(Saved::Value(a));
                }
                saved
            },
            Box::new(move |saved, g| {
                let mut it = saved.iter();
                let da = match needs[0] {
                    true => Some(ops::mul(g, next_value(&mut it)?)?),
                    false => None,
                };
                let db = match needs[1] {
                    true => Some(ops::mul(g, next_value(&mut it)?)?),
                    false => None,
                };
                Ok(vec![da, db])
            }),
        )
    }

    /// `self * s` for a number `s` (`x * 2`); saves no tensor, only the number.
    pub fn mul_scalar(&self, s: f32) -> Result<Tensor<T>> {
        count_forward("mul_scalar");
        let mut y = self.data().try_clone()?;
        ops::scale(&mut y, s)?;
        Tensor::record(
            "MulBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            |_, _| Vec::new(),
            Box::new(move |_, g| {
                let mut d = g.try_clone()?;
                ops::scale(&mut d, s)?;
                Ok(vec![Some(d)])
            }),
        )
    }

    /// The matrix product `self · other` of `[m, k]` and `[k, n]` (`torch.mm`); saves each operand
    /// if the other requires grad.
    pub fn matmul(&self, other: &Tensor<T>) -> Result<Tensor<T>> {
        const OP: &str = "matmul";
        let (m, k) = self.matrix(OP, "self")?;
        let (k2, n) = other.matrix(OP, "other")?;
        if k != k2 {
            return Err(invalid(
                OP,
                self.device(),
                format!("[{m}, {k}] · [{k2}, {n}]: inner dimensions differ"),
            ));
        }
        count_forward(OP);
        let y = ops::matmul(self.data(), other.data(), MatMul::new(m, k, n))?;
        let (a, b) = (share(self.data()), share(other.data()));
        let needs = [self.requires_grad(), other.requires_grad()];
        Tensor::record(
            "MmBackward0",
            y,
            vec![m, n],
            &[self, other],
            move |_, _| {
                let mut saved = Vec::new();
                if needs[0] {
                    saved.push(Saved::Value(b));
                }
                if needs[1] {
                    saved.push(Saved::Value(a));
                }
                saved
            },
            Box::new(move |saved, g| {
                let mut it = saved.iter();
                // dA = g·Bᵀ [m×k], dB = Aᵀ·g [k×n].
                let da = match needs[0] {
                    true => Some(ops::matmul(g, next_value(&mut it)?, MatMul::a_bt(m, n, k))?),
                    false => None,
                };
                let db = match needs[1] {
                    true => Some(ops::matmul(next_value(&mut it)?, g, MatMul::at_b(k, m, n))?),
                    false => None,
                };
                Ok(vec![da, db])
            }),
        )
    }

    /// `max(x, 0)` (`torch.relu`); saves its result.
    pub fn relu(&self) -> Result<Tensor<T>> {
        count_forward("relu");
        let y = ops::relu(self.data())?;
        Tensor::record(
            "ReluBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            |_, result| vec![Saved::Value(share(result))],
            Box::new(|saved, g| Ok(vec![Some(ops::relu_backward(g, saved[0].value()?)?)])),
        )
    }

    /// GELU, tanh approximation (`F.gelu(x, approximate="tanh")`); saves its input.
    pub fn gelu(&self) -> Result<Tensor<T>> {
        count_forward("gelu");
        let y = ops::gelu(self.data())?;
        let x = share(self.data());
        Tensor::record(
            "GeluBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            move |_, _| vec![Saved::Value(x)],
            Box::new(|saved, g| Ok(vec![Some(ops::gelu_backward(g, saved[0].value()?)?)])),
        )
    }

    /// The sum of all elements as a scalar (`tensor.sum()`); saves only the shape.
    pub fn sum(&self) -> Result<Tensor<T>> {
        count_forward("sum");
        self.reduce("SumBackward0", 1)
    }

    /// The mean of all elements as a scalar (`tensor.mean()`); saves only the shape.
    pub fn mean(&self) -> Result<Tensor<T>> {
        count_forward("mean");
        self.reduce("MeanBackward0", self.numel())
    }

    fn reduce(&self, name: &'static str, divisor: usize) -> Result<Tensor<T>> {
        let y = ops::sum_to_device(self.data(), divisor)?;
        let n = self.numel();
        Tensor::record(
            name,
            y,
            Vec::new(),
            &[self],
            |_, _| Vec::new(),
            Box::new(move |_, g| {
                let mut d = g.device().alloc::<T>(n)?;
                ops::fill(&mut d, 1.0 / divisor.max(1) as f32)?;
                ops::scale_by(&mut d, g)?;
                Ok(vec![Some(d)])
            }),
        )
    }
}

/// In-place ops (`add_`, `mul_`, `relu_`, ...). Each one writes into the tensor's own block (no new
/// allocation, except `mul_`'s copy of the old values when `other` requires grad, which torch
/// makes too) and bumps the memory's version counter ([`Buffer::version`], torch's `_version`), so
/// that a backward that needs the old values fails with torch's message instead of computing a
/// wrong gradient. They take the handle by value and return it: when a graph is recorded the
/// result has a new node (torch rebases the tensor's history); other clones of the old handle keep
/// the old history, where torch would rebase them all.
impl<T: Float> Tensor<T> {
    /// `self += other` in place (`tensor.add_(other)`); its node saves nothing.
    pub fn add_(self, other: &Tensor<T>) -> Result<Tensor<T>> {
        self.same_shape("add_", other)?;
        let record = self.check_in_place(&[other], false)?;
        let mut data = share(self.data());
        ops::axpy(1.0, other.data(), &mut data)?;
        self.finish_in_place(
            record,
            "AddBackward0",
            &[other],
            Vec::new(),
            Box::new(|_, g| Ok(vec![Some(share(g)), Some(share(g))])),
        )
    }

    /// `self *= s` in place for a number `s` (`tensor.mul_(s)`); its node saves the number only.
    pub fn mul_scalar_(self, s: f32) -> Result<Tensor<T>> {
        let record = self.check_in_place(&[], false)?;
        let mut data = share(self.data());
        ops::scale(&mut data, s)?;
        self.finish_in_place(
            record,
            "MulBackward0",
            &[],
            Vec::new(),
            Box::new(move |_, g| {
                let mut d = g.try_clone()?;
                ops::scale(&mut d, s)?;
                Ok(vec![Some(d)])
            }),
        )
    }

    /// `self *= other` element-wise in place (`tensor.mul_(other)`); its node saves `other` (for
    /// self's gradient) and, when `other` requires grad, a copy of self's old values: the one
    /// in-place op here that allocates.
    pub fn mul_(self, other: &Tensor<T>) -> Result<Tensor<T>> {
        self.same_shape("mul_", other)?;
        let record = self.check_in_place(&[other], true)?;
        let needs = [self.requires_grad(), other.requires_grad()];
        let mut saved = Vec::new();
        if record {
            if needs[0] {
                saved.push(Saved::Value(share(other.data())));
            }
            if needs[1] {
                saved.push(Saved::Value(self.data().try_clone()?));
            }
        }
        let mut data = share(self.data());
        ops::mul_in_place(&mut data, other.data())?;
        self.finish_in_place(
            record,
            "MulBackward0",
            &[other],
            saved,
            Box::new(move |saved, g| {
                let mut it = saved.iter();
                let da = match needs[0] {
                    true => Some(ops::mul(g, next_value(&mut it)?)?),
                    false => None,
                };
                let db = match needs[1] {
                    true => Some(ops::mul(g, next_value(&mut it)?)?),
                    false => None,
                };
                Ok(vec![da, db])
            }),
        )
    }

    /// `max(self, 0)` in place (`tensor.relu_()`, `F.relu(x, inplace=True)`); its node saves the
    /// result, which is the tensor's own block.
    pub fn relu_(self) -> Result<Tensor<T>> {
        let record = self.check_in_place(&[], false)?;
        let mut data = share(self.data());
        ops::relu_in_place(&mut data)?;
        let saved = if record {
            vec![Saved::Value(share(self.data()))]
        } else {
            Vec::new()
        };
        self.finish_in_place(
            record,
            "ReluBackward0",
            &[],
            saved,
            Box::new(|saved, g| Ok(vec![Some(ops::relu_backward(g, saved[0].value()?)?)])),
        )
    }

    /// The write is allowed (torch's rules); whether it is recorded in the graph.
    fn check_in_place(&self, others: &[&Tensor<T>], saves_others: bool) -> Result<bool> {
        if self.is_inference() && !is_inference_mode_enabled() {
            return Err(autograd_error(
                "Inplace update to inference tensor outside InferenceMode is not allowed.You can \
                 make a clone to get a normal tensor before doing inplace update.See \
                 https://github.com/pytorch/rfcs/pull/17 for more details.",
            ));
        }
        let record =
            is_grad_enabled() && (self.requires_grad() || others.iter().any(|t| t.requires_grad()));
        if record && self.is_leaf() && self.requires_grad() {
            return Err(autograd_error(
                "a leaf Variable that requires grad is being used in an in-place operation.",
            ));
        }
        // Only `mul_` keeps `other`, and only for self's gradient.
        if record && saves_others && self.requires_grad() && others.iter().any(|t| t.is_inference())
        {
            return Err(inference_saved_error());
        }
        Ok(record)
    }

    /// Bumps the version and, when recorded, gives the same memory a new node whose first input
    /// is the tensor's old history.
    fn finish_in_place(
        self,
        record: bool,
        name: &'static str,
        others: &[&Tensor<T>],
        saved: Vec<Saved<T>>,
        backward: BackwardFn<T>,
    ) -> Result<Tensor<T>> {
        self.data().bump_version();
        if !record {
            return Ok(self);
        }
        let mut inputs = vec![&self];
        inputs.extend_from_slice(others);
        Ok(Tensor::with_node(
            name,
            share(self.data()),
            self.shape().to_vec(),
            &inputs,
            saved,
            backward,
        ))
    }

    /// A copy of the values in a new block (torch's `tensor.clone()`, node `CloneBackward0`,
    /// which saves nothing). `Tensor::clone` is Rust's: another handle on the same memory.
    pub fn copy(&self) -> Result<Tensor<T>> {
        count_forward("copy");
        let y = self.data().try_clone()?;
        Tensor::record(
            "CloneBackward0",
            y,
            self.shape().to_vec(),
            &[self],
            |_, _| Vec::new(),
            Box::new(|_, g| Ok(vec![Some(share(g))])),
        )
    }

    /// How many in-place writes this tensor's memory has had (`tensor._version`).
    pub fn version(&self) -> u64 {
        self.data().version()
    }
}

fn next_value<'a, T: Float>(it: &mut std::slice::Iter<'a, Saved<T>>) -> Result<&'a Buffer<T>> {
    it.next()
        .ok_or_else(|| autograd_error("internal: a saved tensor is missing"))?
        .value()
}

/// `x·Wᵀ + b` for `x` `[batch, in]`, `weight` `[out, in]` and `bias` `[out]` (`F.linear`, whose
/// node in torch is `AddmmBackward0`, or `MmBackward0` without a bias). Saves the input if the
/// weight requires grad and the weight if the input does: both are existing blocks, so saving
/// adds no memory until the caller drops its own handle on the input.
pub fn linear<T: Float>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: Option<&Tensor<T>>,
) -> Result<Tensor<T>> {
    const OP: &str = "linear";
    let dev = x.device().clone();
    let (batch, inf) = x.matrix(OP, "the input")?;
    let (outf, inf2) = weight.matrix(OP, "the weight")?;
    if inf != inf2 {
        return Err(invalid(
            OP,
            &dev,
            format!("input [{batch}, {inf}] and weight [{outf}, {inf2}] differ in features"),
        ));
    }
    if weight.device() != &dev {
        return Err(Error::DeviceMismatch {
            op: OP,
            expected: dev.to_string(),
            actual: weight.device().to_string(),
        });
    }
    if let Some(b) = bias
        && b.shape() != [outf]
    {
        return Err(invalid(
            OP,
            &dev,
            format!("the bias must have shape [{outf}], got {:?}", b.shape()),
        ));
    }
    count_forward(OP);
    let mut y = ops::matmul(x.data(), weight.data(), MatMul::a_bt(batch, inf, outf))?;
    if let Some(b) = bias {
        ops::add_bias(&mut y, b.data(), batch, outf)?;
    }
    let needs_x = x.requires_grad();
    let needs_w = weight.requires_grad();
    let needs_b = bias.is_some_and(|b| b.requires_grad());
    let (xs, ws) = (share(x.data()), share(weight.data()));
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    let has_bias = bias.is_some();
    let out = Tensor::record(
        if has_bias {
            "AddmmBackward0"
        } else {
            "MmBackward0"
        },
        y,
        vec![batch, outf],
        &inputs,
        move |_, _| {
            let mut saved = Vec::new();
            if needs_w {
                saved.push(Saved::Value(xs));
            }
            if needs_x {
                saved.push(Saved::Value(ws));
            }
            saved
        },
        Box::new(move |saved, g| {
            let mut it = saved.iter();
            let saved_x = if needs_w {
                Some(next_value(&mut it)?)
            } else {
                None
            };
            let saved_w = if needs_x {
                Some(next_value(&mut it)?)
            } else {
                None
            };
            let mut grads = Vec::with_capacity(3);
            // dx = g·W [batch×in].
            grads.push(match saved_w {
                Some(w) => Some(ops::matmul(g, w, MatMul::new(batch, outf, inf))?),
                None => None,
            });
            // dW = gᵀ·x [out×in].
            grads.push(match saved_x {
                Some(xv) => Some(ops::matmul(g, xv, MatMul::at_b(outf, batch, inf))?),
                None => None,
            });
            if has_bias {
                grads.push(if needs_b {
                    Some(column_sums(g, batch, outf)?)
                } else {
                    None
                });
            }
            Ok(grads)
        }),
    )?;
    // torch's `F.linear` multiplies by `weight.t()`, a view with its own node.
    if let Some(node) = &out.inner.grad_fn {
        node.transposed_input.set(Some(1));
    }
    Ok(out)
}

/// Column sums of `g` `[rows×cols]` in `T` (a bias gradient), accumulated in f64.
fn column_sums<T: Float>(g: &Buffer<T>, rows: usize, cols: usize) -> Result<Buffer<T>> {
    let mut sums = g.device().alloc::<f32>(cols)?;
    ops::col_sum_into(g, rows, cols, &mut sums, false)?;
    if T::DTYPE == DType::F32 {
        let boxed: Box<dyn Any> = Box::new(sums);
        return boxed
            .downcast::<Buffer<T>>()
            .map(|b| *b)
            .map_err(|_| autograd_error("internal: f32 is not f32"));
    }
    ops::cast::<f32, T>(&sums)
}

/// The mean squared error `mean((pred − target)²)` as a scalar (`F.mse_loss`); saves both.
pub fn mse_loss<T: Float>(pred: &Tensor<T>, target: &Tensor<T>) -> Result<Tensor<T>> {
    const OP: &str = "mse_loss";
    pred.same_shape(OP, target)?;
    count_forward(OP);
    let y = ops::mse_loss_to_device(pred.data(), target.data())?;
    let (p, t) = (share(pred.data()), share(target.data()));
    let needs_target = target.requires_grad();
    Tensor::record(
        "MseLossBackward0",
        y,
        Vec::new(),
        &[pred, target],
        move |_, _| vec![Saved::Value(p), Saved::Value(t)],
        Box::new(move |saved, g| {
            let mut dp = ops::mse_loss_backward(saved[0].value()?, saved[1].value()?, 1.0)?;
            ops::scale_by(&mut dp, g)?;
            let dt = if needs_target {
                let mut d = dp.try_clone()?;
                ops::scale(&mut d, -1.0)?;
                Some(d)
            } else {
                None
            };
            Ok(vec![Some(dp), dt])
        }),
    )
}

/// Row-wise log-softmax of a `[rows, classes]` matrix (`F.log_softmax(x, dim=1)`); saves its
/// result.
pub fn log_softmax<T: Float>(x: &Tensor<T>) -> Result<Tensor<T>> {
    const OP: &str = "log_softmax";
    let (rows, cols) = x.matrix(OP, "the input")?;
    count_forward(OP);
    let y = ops::log_softmax(x.data(), rows, cols)?;
    Tensor::record(
        "LogSoftmaxBackward0",
        y,
        vec![rows, cols],
        &[x],
        |_, result| vec![Saved::Value(share(result))],
        Box::new(move |saved, g| {
            Ok(vec![Some(ops::log_softmax_backward(
                g,
                saved[0].value()?,
                rows,
                cols,
            )?)])
        }),
    )
}

/// Class indices on the device for [`nll_loss`] and [`cross_entropy`] (torch's int64 targets):
/// checked against `classes` on the host, then one host-to-device copy.
pub fn class_targets(dev: &Device, targets: &[usize], classes: usize) -> Result<Buffer<i64>> {
    ops::check_targets(dev, targets, classes)?;
    let values: Vec<i64> = targets.iter().map(|&t| t as i64).collect();
    dev.from_slice(&values)
}

/// The mean negative log-likelihood of `logp` `[rows, classes]` at `targets` (`F.nll_loss`);
/// saves the log-probabilities, the targets and a one-element `total_weight` (the number of rows),
/// as torch's `nll_loss_forward` returns it. Make the targets with [`class_targets`].
pub fn nll_loss<T: Float>(logp: &Tensor<T>, targets: &Buffer<i64>) -> Result<Tensor<T>> {
    const OP: &str = "nll_loss";
    let (rows, cols) = logp.matrix(OP, "the log-probabilities")?;
    count_forward(OP);
    let y = ops::nll_loss(logp.data(), targets, rows, cols)?;
    let mut total_weight = logp.device().alloc::<T>(1)?;
    ops::fill(&mut total_weight, rows as f32)?;
    let (l, t) = (share(logp.data()), share(targets));
    Tensor::record(
        "NllLossBackward0",
        y,
        Vec::new(),
        &[logp],
        move |_, _| vec![Saved::Value(l), Saved::Index(t), Saved::Value(total_weight)],
        Box::new(move |saved, g| {
            Ok(vec![Some(ops::nll_loss_backward(
                g,
                saved[1].index()?,
                rows,
                cols,
            )?)])
        }),
    )
}

/// Cross-entropy of logits `[rows, classes]` against class targets (`F.cross_entropy`): torch
/// builds it as [`log_softmax`] then [`nll_loss`], and so does this, with the same two nodes.
pub fn cross_entropy<T: Float>(logits: &Tensor<T>, targets: &Buffer<i64>) -> Result<Tensor<T>> {
    nll_loss(&log_softmax(logits)?, targets)
}

/// `.grad += g` for a leaf: takes `g` over when no other handle shares it and the leaf has no
/// gradient yet (torch steals it too), else copies or adds in place.
fn accumulate_into_leaf<T: Float>(leaf: &Inner<T>, g: Buffer<T>) -> Result<()> {
    let mut slot = leaf.grad.borrow_mut();
    match slot.as_mut() {
        None => {
            *slot = Some(if g.is_only_handle() {
                g
            } else {
                g.try_clone()?
            });
            Ok(())
        }
        Some(existing) => ops::axpy(1.0, &g, existing),
    }
}

/// `pending += g`, copying `pending` first when another handle shares its memory.
fn accumulate_pending<T: Float>(pending: &mut Option<Buffer<T>>, g: Buffer<T>) -> Result<()> {
    match pending.take() {
        None => *pending = Some(g),
        Some(mut existing) => {
            if !existing.is_only_handle() {
                existing = existing.try_clone()?;
            }
            ops::axpy(1.0, &g, &mut existing)?;
            *pending = Some(existing);
        }
    }
    Ok(())
}

/// A node ready to run, ordered by creation (latest first).
struct Ready<T: Float>(Rc<Node<T>>);

impl<T: Float> PartialEq for Ready<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.sequence == other.0.sequence
    }
}
impl<T: Float> Eq for Ready<T> {}
impl<T: Float> PartialOrd for Ready<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: Float> Ord for Ready<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.sequence.cmp(&other.0.sequence)
    }
}

/// Runs the graph below `root` backward from `grad`.
fn run_engine<T: Float>(root: Rc<Node<T>>, grad: Buffer<T>, retain_graph: bool) -> Result<()> {
    // How many edges lead into each node from the part of the graph this backward covers.
    let mut dependencies: HashMap<*const Node<T>, usize> = HashMap::new();
    let mut seen: HashSet<*const Node<T>> = HashSet::new();
    let mut stack = vec![root.clone()];
    while let Some(node) = stack.pop() {
        if !seen.insert(Rc::as_ptr(&node)) {
            continue;
        }
        for edge in node.next.iter().flatten() {
            if let Edge::Node(child) = edge {
                *dependencies.entry(Rc::as_ptr(child)).or_insert(0) += 1;
                stack.push(child.clone());
            }
        }
    }
    let mut pending: HashMap<*const Node<T>, Option<Buffer<T>>> = HashMap::new();
    pending.insert(Rc::as_ptr(&root), Some(grad));
    let mut ready = BinaryHeap::new();
    ready.push(Ready(root));
    while let Some(Ready(node)) = ready.pop() {
        let key = Rc::as_ptr(&node);
        let Some(g) = pending.remove(&key).flatten() else {
            continue;
        };
        let saved = take_saved(&node, retain_graph)?;
        check_versions(&node, &saved)?;
        let grads = (node.backward)(&saved, &g)?;
        // The node's saved tensors and incoming gradient are freed here, before its inputs run.
        drop(saved);
        drop(g);
        for (edge, gi) in node.next.iter().zip(grads) {
            let Some(edge) = edge else { continue };
            match edge {
                Edge::Leaf(leaf) => {
                    if let Some(gi) = gi {
                        accumulate_into_leaf(leaf, gi)?;
                    }
                }
                Edge::Node(child) => {
                    let child_key = Rc::as_ptr(child);
                    let slot = pending.entry(child_key).or_insert(None);
                    if let Some(gi) = gi {
                        accumulate_pending(slot, gi)?;
                    }
                    let left = dependencies.entry(child_key).or_insert(1);
                    *left -= 1;
                    if *left == 0 {
                        ready.push(Ready(child.clone()));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The node's saved tensors for its backward: taken out (freed after it runs) unless
/// `retain_graph`; an error once they are gone.
fn take_saved<T: Float>(node: &Node<T>, retain_graph: bool) -> Result<Vec<Saved<T>>> {
    let mut state = node.saved.borrow_mut();
    match std::mem::replace(&mut *state, SavedState::Freed) {
        // A node that saved nothing frees nothing, and torch lets it run again.
        SavedState::Live(saved) if retain_graph || saved.is_empty() => {
            let handles = saved.clone();
            *state = SavedState::Live(saved);
            Ok(handles)
        }
        SavedState::Live(saved) => Ok(saved),
        SavedState::Freed => Err(autograd_error(
            "Trying to backward through the graph a second time (or directly access saved \
             tensors after they have already been freed). Saved intermediate values of the graph \
             are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if \
             you need to backward through the graph a second time or if you need to access saved \
             tensors after calling backward.",
        )),
        SavedState::Discarded => {
            *state = SavedState::Discarded;
            Err(autograd_error(format!(
                "node {} was recorded inside checkpoint's first forward and saved nothing",
                node.name
            )))
        }
    }
}

/// torch's name for a tensor of this type on this device: `torch.FloatTensor` on the CPU,
/// `torch.cuda.FloatTensor` on CUDA (torch 2.15's rule; gpumem's `cpu` device gets the CPU name).
fn torch_type_name<U: crate::memory::buffer::Element>(dtype: DType, b: &Buffer<U>) -> String {
    let kind = match dtype {
        DType::F32 => "FloatTensor",
        DType::F16 => "HalfTensor",
        DType::BF16 => "BFloat16Tensor",
    };
    let cuda = if b.device().is_cuda() { "cuda." } else { "" };
    format!("torch.{cuda}{kind}")
}

/// The op's name as torch's version error says it: `Relu` for `ReluBackward0`.
fn op_name(node: &str) -> &str {
    let base = node.trim_end_matches(|c: char| c.is_ascii_digit());
    base.strip_suffix("Backward").unwrap_or(base)
}

/// Fails, with torch's message, when a saved tensor was written in place after it was saved.
fn check_versions<T: Float>(node: &Node<T>, saved: &[Saved<T>]) -> Result<()> {
    for ((s, &expected), description) in saved
        .iter()
        .zip(&node.saved_versions)
        .zip(&node.saved_descriptions)
    {
        let (now, what) = s.version();
        if now != expected {
            let dims: Vec<String> = description.shape.iter().map(usize::to_string).collect();
            let made_by = description
                .made_by
                .map(|name| format!(", which is output 0 of {},", op_name(name)))
                .unwrap_or_default();
            return Err(autograd_error(format!(
                "one of the variables needed for gradient computation has been modified by an \
                 inplace operation: [{what} [{}]]{made_by} is at version {now}; expected version \
                 {expected} instead. Hint: enable anomaly detection to find the operation that \
                 failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, \
                 check_nan=False).",
                dims.join(", ")
            )));
        }
    }
    Ok(())
}

/// Runs `f` on `inputs` without keeping what its ops would save for backward, keeps only the
/// inputs, and runs `f` again in backward to get them (`torch.utils.checkpoint.checkpoint(f,
/// *inputs, use_reentrant=False)`). Parameters `f` captures get their gradients too, even when no
/// input requires grad. Under [`no_grad`] it is just `f(inputs)`. `f` must compute the same thing
/// both times (no randomness of its own).
pub fn checkpoint<T, F>(f: F, inputs: &[Tensor<T>]) -> Result<Tensor<T>>
where
    T: Float,
    F: Fn(&[Tensor<T>]) -> Result<Tensor<T>> + 'static,
{
    checkpoint_with(f, inputs, Reentrant::No)
}

/// Which of torch's two checkpoint implementations (`use_reentrant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reentrant {
    /// `use_reentrant=False`, the variant torch 2.15 recommends (and [`checkpoint`]'s): the graph
    /// keeps the nodes inside the region, and parameters get gradients even when no input
    /// requires grad.
    No,
    /// `use_reentrant=True`, torch 2.15's default when the argument is left out (with a
    /// warning): one `CheckpointFunctionBackward` node for the region; when no input requires
    /// grad the output does not either, and the parameters inside get no gradient (torch warns
    /// "None of the inputs have requires_grad=True. Gradients will be None").
    Yes,
}

/// [`checkpoint`] with torch's `use_reentrant` choice.
pub fn checkpoint_with<T, F>(f: F, inputs: &[Tensor<T>], reentrant: Reentrant) -> Result<Tensor<T>>
where
    T: Float,
    F: Fn(&[Tensor<T>]) -> Result<Tensor<T>> + 'static,
{
    if !is_grad_enabled() {
        return f(inputs);
    }
    if reentrant == Reentrant::Yes && !inputs.iter().any(Tensor::requires_grad) {
        let _no_grad = no_grad();
        return f(inputs);
    }
    let out = {
        let _discard = DiscardSavedGuard::new();
        f(inputs)?
    };
    if !out.requires_grad() {
        return Ok(out);
    }
    let shape = out.shape().to_vec();
    let data = share(out.data());
    // What torch's graph shows inside the region: the nodes between the inputs and the output.
    let mut stop = HashSet::new();
    for t in inputs {
        if let Some(node) = &t.inner.grad_fn {
            let below = vec![node.clone()];
            let mut stack = below;
            while let Some(n) = stack.pop() {
                if stop.insert(Rc::as_ptr(&n)) {
                    stack.extend(n.next.iter().flatten().filter_map(|e| match e {
                        Edge::Node(c) => Some(c.clone()),
                        Edge::Leaf(_) => None,
                    }));
                }
            }
        }
    }
    let mut region = region_below(out.inner.grad_fn.iter().cloned().collect(), &stop);
    let input_leaves: HashSet<*const Inner<T>> =
        inputs.iter().map(|t| Rc::as_ptr(&t.inner)).collect();
    region
        .leaves
        .retain(|leaf| !input_leaves.contains(&Rc::as_ptr(leaf)));
    drop(out); // the inner graph saved nothing; only its edges to the parameters go with it
    let needs: Vec<bool> = inputs.iter().map(Tensor::requires_grad).collect();
    let input_shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    let input_refs: Vec<&Tensor<T>> = inputs.iter().collect();
    let saved_inputs: Vec<Saved<T>> = inputs
        .iter()
        .map(|t| Saved::Value(share(t.data())))
        .collect();
    let out_shape = shape.clone();
    // Nested inside another checkpoint's first forward, this node saves nothing either: the
    // outer checkpoint runs this one again in its own backward.
    // The output requires grad because f's did, even when no input does (then the node has no
    // edges and its backward reaches the parameters through f's own graph).
    let name = match reentrant {
        Reentrant::No => "CheckpointBackward",
        Reentrant::Yes => "CheckpointFunctionBackward",
    };
    let out = Tensor::with_node(
        name,
        data,
        shape,
        &input_refs,
        saved_inputs,
        Box::new(move |saved, g| {
            let _grad = enable_grad();
            let detached = saved
                .iter()
                .zip(&input_shapes)
                .zip(&needs)
                .map(|((s, shape), &need)| Ok(Tensor::leaf(share(s.value()?), shape.clone(), need)))
                .collect::<Result<Vec<Tensor<T>>>>()?;
            let out = f(&detached)?;
            if out.shape() != out_shape.as_slice() {
                return Err(autograd_error(format!(
                    "checkpoint: the recomputed output has shape {:?}, the first run {:?}",
                    out.shape(),
                    out_shape
                )));
            }
            if out.requires_grad() {
                out.backward_from(share(g), false)?;
            }
            Ok(detached
                .iter()
                .map(|t| t.inner.grad.borrow_mut().take())
                .collect())
        }),
    );
    if let Some(node) = &out.inner.grad_fn
        && reentrant == Reentrant::No
    {
        *node.region.borrow_mut() = Some(region);
    }
    Ok(out)
}

/// One layer of a sequence for [`checkpoint_sequential`]: a function of one tensor.
pub type Layer<T> = Rc<dyn Fn(&Tensor<T>) -> Result<Tensor<T>>>;

/// Runs `layers` in order on `input`, split into `segments` runs of consecutive layers: every
/// segment but the last under [`checkpoint`], the last one normally
/// (`torch.utils.checkpoint.checkpoint_sequential(functions, segments, input)`). Each segment has
/// `layers.len() / segments` layers; the last one takes the rest. With one segment nothing is
/// checkpointed, as in torch.
pub fn checkpoint_sequential<T: Float>(
    layers: &[Layer<T>],
    segments: usize,
    input: &Tensor<T>,
) -> Result<Tensor<T>> {
    checkpoint_sequential_with(layers, segments, input, Reentrant::No)
}

/// [`checkpoint_sequential`] with torch's `use_reentrant` choice.
pub fn checkpoint_sequential_with<T: Float>(
    layers: &[Layer<T>],
    segments: usize,
    input: &Tensor<T>,
    reentrant: Reentrant,
) -> Result<Tensor<T>> {
    if segments == 0 || segments > layers.len() {
        return Err(invalid(
            "checkpoint_sequential",
            input.device(),
            format!(
                "{segments} segments for {} layers: need between 1 and the number of layers",
                layers.len()
            ),
        ));
    }
    let size = layers.len() / segments;
    let mut x = input.clone();
    for s in 0..segments - 1 {
        let segment: Vec<Layer<T>> = layers[s * size..(s + 1) * size].to_vec();
        x = checkpoint_with(
            move |inputs: &[Tensor<T>]| run_layers(&segment, &inputs[0]),
            std::slice::from_ref(&x),
            reentrant,
        )?;
    }
    run_layers(&layers[(segments - 1) * size..], &x)
}

fn run_layers<T: Float>(layers: &[Layer<T>], input: &Tensor<T>) -> Result<Tensor<T>> {
    let mut x = input.clone();
    for layer in layers {
        x = layer(&x)?;
    }
    Ok(x)
}

/// A fully connected layer with parameters that require grad (`nn.Linear`).
pub struct Linear<T: Float = f32> {
    /// `[out_features, in_features]`.
    pub weight: Tensor<T>,
    /// `[out_features]`.
    pub bias: Tensor<T>,
}

impl<T: Float> Linear<T> {
    /// torch's default initialisation (uniform in `±1/√in_features`), drawn as
    /// [`crate::ops::Linear::new`] draws it, so both models start from the same weights.
    pub fn new(
        dev: &Device,
        in_features: usize,
        out_features: usize,
        rng: &mut XorShift,
    ) -> Result<Linear<T>> {
        let bound = 1.0 / (in_features.max(1) as f32).sqrt();
        let n = in_features.checked_mul(out_features).ok_or_else(|| {
            invalid(
                "Linear::new",
                dev,
                format!("{in_features} × {out_features} overflows"),
            )
        })?;
        let weight = rng.uniform_vec(n, -bound, bound);
        let bias = rng.uniform_vec(out_features, -bound, bound);
        Ok(Linear {
            weight: Tensor::from_f32(dev, &weight, &[out_features, in_features])?
                .requires_grad_(true)?,
            bias: Tensor::from_f32(dev, &bias, &[out_features])?.requires_grad_(true)?,
        })
    }

    /// `x·Wᵀ + b` through [`linear`].
    pub fn forward(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        linear(x, &self.weight, Some(&self.bias))
    }
}

/// The activation between an [`Mlp`]'s layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// [`Tensor::relu`]: saves its output, which the next layer saves anyway.
    Relu,
    /// [`Tensor::gelu`]: saves its input, a block nothing else keeps.
    Gelu,
}

/// `Linear → activation → … → Linear` with autograd (the activation after every layer but the
/// last).
pub struct Mlp<T: Float = f32> {
    /// The layers, input side first.
    pub layers: Vec<Linear<T>>,
    /// The activation between layers.
    pub activation: Activation,
}

impl<T: Float> Mlp<T> {
    /// Layers of widths `sizes = [in, hidden…, out]` (at least two entries).
    pub fn new(
        dev: &Device,
        sizes: &[usize],
        activation: Activation,
        rng: &mut XorShift,
    ) -> Result<Mlp<T>> {
        if sizes.len() < 2 {
            return Err(invalid(
                "Mlp::new",
                dev,
                format!("sizes needs at least [in, out], got {sizes:?}"),
            ));
        }
        let layers = sizes
            .windows(2)
            .map(|w| Linear::new(dev, w[0], w[1], rng))
            .collect::<Result<Vec<_>>>()?;
        Ok(Mlp { layers, activation })
    }

    /// The model as a list of [`Layer`]s, one per linear layer with its activation (the last
    /// without), for [`checkpoint_sequential`].
    pub fn as_layers(&self) -> Vec<Layer<T>> {
        let count = self.layers.len();
        self.layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let (w, b) = (l.weight.clone(), l.bias.clone());
                let activation = (i + 1 < count).then_some(self.activation);
                Rc::new(move |x: &Tensor<T>| {
                    let z = linear(x, &w, Some(&b))?;
                    match activation {
                        None => Ok(z),
                        Some(Activation::Relu) => z.relu(),
                        Some(Activation::Gelu) => z.gelu(),
                    }
                }) as Layer<T>
            })
            .collect()
    }

    /// The output `[batch, out]` for `x` `[batch, in]`.
    pub fn forward(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        run_layers(&self.as_layers(), x)
    }

    /// Every parameter: weight then bias, layer by layer.
    pub fn parameters(&self) -> Vec<Tensor<T>> {
        self.layers
            .iter()
            .flat_map(|l| [l.weight.clone(), l.bias.clone()])
            .collect()
    }

    /// Drops every parameter's gradient (`optimizer.zero_grad()`, which sets them to None).
    pub fn zero_grad(&self) {
        self.parameters().iter().for_each(Tensor::clear_grad);
    }

    /// One SGD step in place on every parameter that has a gradient: `p ← p − lr·p.grad`.
    pub fn sgd_step(&self, lr: f32) -> Result<()> {
        for p in self.parameters() {
            if let Some(g) = p.grad() {
                let mut data = share(p.data());
                ops::axpy(-lr, g.data(), &mut data)?;
            }
        }
        Ok(())
    }
}
