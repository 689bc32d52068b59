//! Chapter 14: the first minute after an out-of-memory error.
//!
//! Go from torch's message, then from a snapshot, to the lever that fits it, release what a caught out-of-memory error
//! keeps alive before trying again, and predict what `empty_cache()` costs the steps after it.
//! Edit the items marked `TODO`.

pub use ch14_given::{Step, StepFailure, measure_refill, train_step};
pub use ch14_predict::{Cost, Lever, MIB, Steps};
use gpumem::format::format_size;
use gpumem::{Device, Error, Result};

// ANCHOR: reading
/// The numbers of an out-of-memory message, in bytes: chapter 10's `OomReport`, and the
/// sentences torch takes from NVML about the device's other users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// "Tried to allocate X": the segment the allocator tried to reserve.
    pub tried_to_allocate: u64,
    /// "a total capacity of X".
    pub total: u64,
    /// "of which X is free": the device's free memory, after the allocator released its cache.
    pub free: u64,
    /// "X allowed;": the cap from `set_per_process_memory_fraction`, when one is set.
    pub allowed: Option<u64>,
    /// "Including non-PyTorch memory, this process has X memory in use", when NVML answered.
    pub this_process: Option<u64>,
    /// The sum of every "Process N has X memory in use": the device's other processes (0 when
    /// there is none, or NVML did not answer).
    pub other_processes: u64,
    /// "X is allocated by PyTorch": bytes in live blocks.
    pub allocated: u64,
    /// "X is reserved by PyTorch but unallocated": cached, free, in segments that hold a live
    /// block (the release-and-retry gave back every other one).
    pub reserved_unallocated: u64,
}

// ANCHOR_END: reading

impl Reading {
    /// The numbers of gpumem's own out-of-memory error (gpumem does not ask NVML, so there are
    /// no other processes); `None` for any other error and for the "more than 1EB" refusal.
    pub fn from_error(error: &Error) -> Option<Reading> {
        match *error {
            Error::OutOfMemory {
                alloc_size,
                total,
                free,
                allowed,
                allocated,
                reserved_unallocated,
                too_large: false,
                ..
            } => Some(Reading {
                tried_to_allocate: alloc_size,
                total,
                free,
                allowed,
                this_process: None,
                other_processes: 0,
                allocated,
                reserved_unallocated,
            }),
            _ => None,
        }
    }

    /// The message torch 2.15 prints for these numbers on `GPU 0`, sentence by sentence as
    /// `c10/cuda/CUDACachingAllocator.cpp` writes it (the other processes as one, PID 4242).
    pub fn torch_message(&self) -> String {
        let mut processes = String::new();
        if self.other_processes > 0 {
            processes += &format!(
                "Process 4242 has {} memory in use. ",
                format_size(self.other_processes)
            );
        }
        if let Some(mine) = self.this_process {
            processes += &format!(
                "Including non-PyTorch memory, this process has {} memory in use. ",
                format_size(mine)
            );
        }
        let allowed = self
            .allowed
            .map(|a| format!("{} allowed; ", format_size(a)))
            .unwrap_or_default();
        format!(
            "CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of {} of which \
             {} is free. {processes}{allowed}Of the allocated memory {} is allocated by PyTorch, \
             and {} is reserved by PyTorch but unallocated. If reserved but unallocated memory is \
             large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid \
             fragmentation.  See documentation for Memory Management  \
             (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            format_size(self.tried_to_allocate),
            format_size(self.total),
            format_size(self.free),
            format_size(self.allocated),
            format_size(self.reserved_unallocated),
        )
    }
}

// ANCHOR: triage
/// The lever `reading` points to, the first rule that holds:
/// 1. `Fragmentation`: the cached bytes and the room the process still has (the device's free
///    memory, and under a cap no more than `allowed − reserved`) would hold the request;
/// 2. `OverTheCap`: a cap is set and the device's free memory alone would hold it;
/// 3. `AnotherProcess`: the device's free memory and what the other processes hold would;
/// 4. `HoldLess` otherwise.
pub fn triage(reading: &Reading) -> Lever {
    // TODO: reserved = allocated + reserved_unallocated; room = free, or under a cap the smaller
    // of free and allowed − reserved. Then the four rules, in order.
    todo!("the lever for {reading:?}")
}
// ANCHOR_END: triage

// ANCHOR: fitted
/// A step that fitted, and the messages of the tries that did not.
pub struct Fitted {
    /// The batch that fitted.
    pub batch: usize,
    /// What its step holds.
    pub step: Step,
    /// The message of each out-of-memory error on the way, in order.
    pub messages: Vec<String>,
}
// ANCHOR_END: fitted

// ANCHOR: fit_batch
/// Runs `train_step` at `batch`, and after each out-of-memory error at half the batch, until a
/// step fits. Keeps each error's message, never the failure itself, and releases what a failure
/// holds before the next try. Any other error, or running out of memory at a batch of 1, ends it
/// with that error.
pub fn fit_batch(dev: &Device, batch: usize, sample_bytes: usize) -> Result<Fitted> {
    // TODO: try train_step; on an out-of-memory failure keep its message (a String), let the
    // failure go before the next try, and halve the batch.
    todo!("fit a batch of at most {batch} samples of {sample_bytes} bytes on {dev}")
}
// ANCHOR_END: fit_batch
