//! In-place tensor ops (`add_`, `mul_`, `relu_`, ...): they write into the tensor's own block and
//! bump its memory's version counter.

use super::errors::{autograd_error, inference_saved_error};
use super::graph::{BackwardFn, Saved, next_value, share};
use super::mode::{count_forward, is_grad_enabled, is_inference_mode_enabled};
use super::tensor::Tensor;
use crate::error::Result;
use crate::ops::{self, Float};

/// In-place ops (`add_`, `mul_`, `relu_`, ...). Each one writes into the tensor's own block (no new
/// allocation, except `mul_`'s copy of the old values when `other` requires grad, which torch
/// makes too) and bumps the memory's version counter ([`Buffer::version`](crate::Buffer::version), torch's `_version`), so
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
    pub(super) fn check_in_place(&self, others: &[&Tensor<T>], saves_others: bool) -> Result<bool> {
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
    pub(super) fn finish_in_place(
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
