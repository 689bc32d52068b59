//! The recorded graph: nodes, their edges to the next nodes or to leaves, and the tensors each node
//! saves for backward, as second handles on existing blocks.

use super::errors::autograd_error;
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::ops::{DType, Float};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;

/// A tensor a node keeps for backward.
pub(super) enum Saved<T: Float> {
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
    pub(super) fn value(&self) -> Result<&Buffer<T>> {
        match self {
            Saved::Value(b) => Ok(b),
            _ => Err(autograd_error(
                "internal: a saved value is not a value buffer",
            )),
        }
    }

    pub(super) fn index(&self) -> Result<&Buffer<i64>> {
        match self {
            Saved::Index(b) => Ok(b),
            _ => Err(autograd_error(
                "internal: saved targets are not an index buffer",
            )),
        }
    }

    /// The memory's version counter now, and torch's type name for the version error.
    pub(super) fn version(&self) -> (u64, String) {
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

    pub(super) fn ptr(&self) -> u64 {
        match self {
            Saved::Value(b) => b.ptr(),
            Saved::Index(b) => b.ptr(),
            Saved::Mask(b) => b.ptr(),
            Saved::Stats(b) => b.ptr(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Saved::Value(b) => b.len(),
            Saved::Index(b) => b.len(),
            Saved::Mask(b) => b.len(),
            Saved::Stats(b) => b.len(),
        }
    }

    /// (address, block bytes) of the memory.
    pub(super) fn block(&self) -> (u64, usize) {
        match self {
            Saved::Value(b) => (b.ptr(), b.block_bytes()),
            Saved::Index(b) => (b.ptr(), b.block_bytes()),
            Saved::Mask(b) => (b.ptr(), b.block_bytes()),
            Saved::Stats(b) => (b.ptr(), b.block_bytes()),
        }
    }

    /// What [`Tensor::graph_saved`](crate::autograd::Tensor::graph_saved) reports.
    pub(super) fn described(&self) -> SavedTensor {
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

pub(super) enum SavedState<T: Float> {
    Live(Vec<Saved<T>>),
    /// Freed by a backward without `retain_graph`.
    Freed,
    /// Never kept: recorded inside [`checkpoint`]'s first forward.
    Discarded,
}

pub(super) type BackwardFn<T> =
    Box<dyn Fn(&[Saved<T>], &Buffer<T>) -> Result<Vec<Option<Buffer<T>>>>>;

/// One recorded op: where the gradients of its inputs go, what it saved, how to differentiate.
pub(super) struct Node<T: Float> {
    pub(super) name: &'static str,
    /// Creation order; backward runs the latest node first, as torch's engine does.
    pub(super) sequence: u64,
    /// One entry per input: `None` when that input does not require grad.
    pub(super) next: Vec<Option<Edge<T>>>,
    pub(super) saved: RefCell<SavedState<T>>,
    /// The version of each saved tensor when it was saved (checked when backward unpacks it).
    pub(super) saved_versions: Vec<u64>,
    /// What torch's message says of each saved tensor: its shape and, for an op's result or an
    /// input made by an op, that op's name (`Relu` for `ReluBackward0`).
    pub(super) saved_descriptions: Vec<SavedDescription>,
    /// The input that reaches this node through a transposed view (a linear's weight: torch's
    /// `TBackward0` between `AddmmBackward0` and the weight's `AccumulateGrad`).
    pub(super) transposed_input: Cell<Option<usize>>,
    /// For [`checkpoint`]'s node: the nodes torch keeps inside the region (`use_reentrant=False`
    /// keeps them, with placeholders for what they save), and the leaves they reach.
    pub(super) region: RefCell<Option<Region<T>>>,
    pub(super) backward: BackwardFn<T>,
}

/// The inner graph of a checkpointed region, as [`Tensor::graph_nodes`] shows it.
pub(super) struct Region<T: Float> {
    pub(super) names: Vec<&'static str>,
    pub(super) leaves: Vec<Rc<Inner<T>>>,
}

/// The nodes reachable from `roots` but not through `stop`, latest first, each followed by the
/// `TBackward0` of a transposed input, then (in `leaves`) every leaf they reach, without repeats,
/// each standing for one `AccumulateGrad` (torch makes one per leaf).
pub(super) fn region_below<T: Float>(
    roots: Vec<Rc<Node<T>>>,
    stop: &HashSet<*const Node<T>>,
) -> Region<T> {
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
pub(super) struct SavedDescription {
    pub(super) shape: Vec<usize>,
    pub(super) made_by: Option<&'static str>,
}

/// What a node keeps for backward, as [`Tensor::graph_saved`](crate::autograd::Tensor::graph_saved) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedTensor {
    /// The address of the memory (one entry per distinct memory).
    pub ptr: u64,
    /// Bytes of the tensor's elements (not of the allocator block holding them).
    pub bytes: usize,
    /// torch's name for the element type, such as `"torch.float32"` or `"torch.int64"`.
    pub dtype: &'static str,
}

pub(super) enum Edge<T: Float> {
    Node(Rc<Node<T>>),
    /// A leaf that requires grad: its gradient is accumulated into `.grad` (`AccumulateGrad`).
    Leaf(Rc<Inner<T>>),
}

pub(super) struct Inner<T: Float> {
    pub(super) data: Buffer<T>,
    pub(super) shape: Vec<usize>,
    pub(super) requires_grad: bool,
    pub(super) grad_fn: Option<Rc<Node<T>>>,
    /// The accumulated gradient of a leaf.
    pub(super) grad: RefCell<Option<Buffer<T>>>,
    pub(super) inference: bool,
}

/// A second handle on the same memory (no copy, no allocation).
pub(super) fn share<T: crate::memory::buffer::Element>(b: &Buffer<T>) -> Buffer<T> {
    // `to` on the buffer's own device returns the same storage and cannot fail.
    b.to(b.device())
        .unwrap_or_else(|_| unreachable!("to() on the same device shares the memory"))
}

pub(super) fn next_value<'a, T: Float>(
    it: &mut std::slice::Iter<'a, Saved<T>>,
) -> Result<&'a Buffer<T>> {
    it.next()
        .ok_or_else(|| autograd_error("internal: a saved tensor is missing"))?
        .value()
}

/// torch's name for a tensor of this type on this device: `torch.FloatTensor` on the CPU,
/// `torch.cuda.FloatTensor` on CUDA (torch 2.15's rule; gpumem's `cpu` device gets the CPU name).
pub(super) fn torch_type_name<U: crate::memory::buffer::Element>(
    dtype: DType,
    b: &Buffer<U>,
) -> String {
    let kind = match dtype {
        DType::F32 => "FloatTensor",
        DType::F16 => "HalfTensor",
        DType::BF16 => "BFloat16Tensor",
    };
    let cuda = if b.device().is_cuda() { "cuda." } else { "" };
    format!("torch.{cuda}{kind}")
}
