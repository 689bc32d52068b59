//! The backward engine: runs the graph below a root latest node first, frees each node's saved
//! tensors after it ran (unless `retain_graph`), checks their versions, and accumulates leaves'
//! gradients.

use super::errors::autograd_error;
use super::graph::{Edge, Inner, Node, Saved, SavedState};
use crate::error::Result;
use crate::memory::buffer::Buffer;
use crate::ops::{self, Float};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::rc::Rc;

/// `.grad += g` for a leaf: takes `g` over when no other handle shares it and the leaf has no
/// gradient yet (torch steals it too), else copies or adds in place.
pub(super) fn accumulate_into_leaf<T: Float>(leaf: &Inner<T>, g: Buffer<T>) -> Result<()> {
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
pub(super) fn accumulate_pending<T: Float>(
    pending: &mut Option<Buffer<T>>,
    g: Buffer<T>,
) -> Result<()> {
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
pub(super) struct Ready<T: Float>(Rc<Node<T>>);

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
pub(super) fn run_engine<T: Float>(
    root: Rc<Node<T>>,
    grad: Buffer<T>,
    retain_graph: bool,
) -> Result<()> {
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
pub(super) fn take_saved<T: Float>(node: &Node<T>, retain_graph: bool) -> Result<Vec<Saved<T>>> {
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

/// The op's name as torch's version error says it: `Relu` for `ReluBackward0`.
pub(super) fn op_name(node: &str) -> &str {
    let base = node.trim_end_matches(|c: char| c.is_ascii_digit());
    base.strip_suffix("Backward").unwrap_or(base)
}

/// Fails, with torch's message, when a saved tensor was written in place after it was saved.
pub(super) fn check_versions<T: Float>(node: &Node<T>, saved: &[Saved<T>]) -> Result<()> {
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
