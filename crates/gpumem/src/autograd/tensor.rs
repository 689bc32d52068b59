//! `Tensor`: a device buffer with a shape that may require grad, its ops that record the graph,
//! `backward`, and what a learner can ask of the graph.

use super::engine::{accumulate_into_leaf, run_engine};
use super::errors::{autograd_error, inference_saved_error, invalid};
use super::graph::{
    BackwardFn, Edge, Inner, Node, Saved, SavedDescription, SavedState, SavedTensor, next_value,
    region_below, share,
};
use super::mode::{
    DISCARD_SAVED, NEXT_SEQUENCE, count_forward, is_grad_enabled, is_inference_mode_enabled,
};
use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;
use crate::ops::{self, Float, MatMul, XorShift};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// A device buffer with a shape that may require grad (`torch.Tensor`). Cloning is cheap and
/// shares the data and the graph.
pub struct Tensor<T: Float = f32> {
    pub(super) inner: Rc<Inner<T>>,
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

pub(super) fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl<T: Float> Tensor<T> {
    pub(super) fn leaf(data: Buffer<T>, shape: Vec<usize>, requires_grad: bool) -> Tensor<T> {
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

    /// Whether the tensor was made in [`inference_mode`](crate::autograd::inference_mode).
    pub fn is_inference(&self) -> bool {
        self.inner.inference
    }

    /// The name of the node that made this tensor (`tensor.grad_fn`), such as `"ReluBackward0"`;
    /// for a [`checkpoint`](crate::autograd::checkpoint)'s output, the last node inside it, as in torch's `use_reentrant=False`.
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
    /// the `memory_allocated` difference against the same forward under [`no_grad`](crate::autograd::no_grad).
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
    /// it reaches first. A [`checkpoint`](crate::autograd::checkpoint) region shows the nodes torch keeps inside it
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

    pub(super) fn visit_nodes(&self, mut visit: impl FnMut(&Node<T>)) {
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
    pub(super) fn record(
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
    pub(super) fn with_node(
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

    pub(super) fn same_shape(&self, op: &'static str, other: &Tensor<T>) -> Result<()> {
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

    pub(super) fn matrix(&self, op: &'static str, what: &str) -> Result<(usize, usize)> {
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

    pub(super) fn reduce(&self, name: &'static str, divisor: usize) -> Result<Tensor<T>> {
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
