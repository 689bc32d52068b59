//! Gradient checkpointing: `checkpoint` and `checkpoint_sequential`, torch's `use_reentrant`
//! choice included.

use super::errors::{autograd_error, invalid};
use super::graph::{Edge, Inner, Saved, region_below, share};
use super::mode::{DiscardSavedGuard, enable_grad, is_grad_enabled, no_grad};
use super::tensor::Tensor;
use crate::error::Result;
use crate::ops::Float;
use std::collections::HashSet;
use std::rc::Rc;

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

pub(super) fn run_layers<T: Float>(layers: &[Layer<T>], input: &Tensor<T>) -> Result<Tensor<T>> {
    let mut x = input.clone();
    for layer in layers {
        x = layer(&x)?;
    }
    Ok(x)
}
