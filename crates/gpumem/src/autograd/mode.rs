//! The thread's autograd state: grad mode and inference mode with their guards (`no_grad`,
//! `enable_grad`, `inference_mode`), checkpoint's "save nothing" flag, the creation order of nodes,
//! and the count of forward runs of each op.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::marker::PhantomData;

thread_local! {
    pub(super) static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    pub(super) static INFERENCE_MODE: Cell<bool> = const { Cell::new(false) };
    /// Inside [`checkpoint`]'s first forward: nodes are recorded, nothing is saved.
    pub(super) static DISCARD_SAVED: Cell<bool> = const { Cell::new(false) };
    pub(super) static NEXT_SEQUENCE: Cell<u64> = const { Cell::new(0) };
    pub(super) static FORWARD_OPS: RefCell<HashMap<&'static str, u64>> = RefCell::new(HashMap::new());
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
    pub(super) previous: bool,
    pub(super) _not_send: PhantomData<*const ()>,
}

impl GradModeGuard {
    pub(super) fn set(enabled: bool) -> GradModeGuard {
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
    pub(super) previous_grad: bool,
    pub(super) previous_inference: bool,
    pub(super) _not_send: PhantomData<*const ()>,
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
pub(super) struct DiscardSavedGuard(bool);

impl DiscardSavedGuard {
    pub(super) fn new() -> DiscardSavedGuard {
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

pub(super) fn count_forward(name: &'static str) {
    FORWARD_OPS.with(|m| *m.borrow_mut().entry(name).or_insert(0) += 1);
}
