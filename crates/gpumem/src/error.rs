//! The one error type of the runtime, with messages a learner can act on.

use crate::format::{format_bytes, format_size};

/// Everything that can go wrong in `gpumem`.
#[derive(thiserror::Error)]
pub enum Error {
    /// torch's `OutOfMemoryError`: a reservation failed even after the cache was released and the
    /// allocation retried, or the request was 1 EiB or more (`too_large`). The message is torch
    /// 2.x's (`c10/cuda/CUDACachingAllocator.cpp`), sentence by sentence, with gpumem in place of
    /// PyTorch and `GPUMEM_ALLOC_CONF` in place of `PYTORCH_CUDA_ALLOC_CONF`.
    #[error("{}", self.out_of_memory_message())]
    OutOfMemory {
        /// `cpu` or `cuda:N`.
        device: String,
        /// The size torch names after "Tried to allocate": the segment the allocator tried to
        /// reserve (20 MiB for a 5 MiB request), torch's `alloc_size`; the request itself when
        /// `too_large`.
        alloc_size: u64,
        /// Bytes the caller asked for.
        requested: u64,
        /// The device's total memory.
        total: u64,
        /// The device's free memory, as the driver reports it.
        free: u64,
        /// Bytes in live blocks of this process (`allocated_bytes.all.current`).
        allocated: u64,
        /// Bytes reserved by this process's allocator but not in live blocks.
        reserved_unallocated: u64,
        /// The cap from `set_per_process_memory_fraction`, if any (torch's "allowed").
        allowed: Option<u64>,
        /// The request was 1 EiB (2^60 bytes) or more: torch's guard for absurd sizes refused it
        /// before the allocator was asked ("Tried to allocate more than 1EB memory."), and the
        /// numbers above are the device's at that moment.
        too_large: bool,
    },
    /// CUDA was asked for but cannot be used on this machine.
    #[error("CUDA is not available: {reason}")]
    CudaUnavailable {
        /// Why (no driver library, no device, ...).
        reason: String,
    },
    /// A device ordinal that does not exist.
    #[error("there is no device cuda:{ordinal} (this machine has {count} CUDA device(s))")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices there are.
        count: usize,
    },
    /// A collective called with buffers it cannot combine (a rank missing, another device, lengths
    /// that differ).
    #[error("{op}: {reason}")]
    BadCollective {
        /// Which collective.
        op: &'static str,
        /// What is wrong, naming the rank.
        reason: String,
    },
    /// A cpu device index past the last one a process may open.
    #[error("there is no device cpu:{index} (a process may open cpu:0 to cpu:{}, {count} cpu devices)", count - 1)]
    NoSuchCpuDevice {
        /// The index asked for.
        index: usize,
        /// How many cpu devices a process may open.
        count: usize,
    },
    /// A device name that cannot be parsed (for example in `GPUMEM_DEVICE`).
    #[error("cannot understand device {value:?}: expected auto, cpu, cpu:N, cuda or cuda:N")]
    BadDeviceName {
        /// What was given.
        value: String,
    },
    /// A malformed setting (`GPUMEM_ALLOC_CONF`, `GPUMEM_CPU_CAPACITY`, a memory fraction, ...).
    #[error("invalid {setting}: {reason}")]
    BadSetting {
        /// Which setting, with the offending part.
        setting: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// Two lengths that must agree do not.
    #[error("length mismatch: the buffer holds {expected} elements but {actual} were given")]
    LengthMismatch {
        /// The buffer's length.
        expected: usize,
        /// The other side's length.
        actual: usize,
    },
    /// An operation mixed buffers of different devices.
    #[error("{op}: expected buffers on {expected}, got one on {actual}")]
    DeviceMismatch {
        /// What was being done.
        op: &'static str,
        /// The device the operation runs on.
        expected: String,
        /// The device of the offending buffer.
        actual: String,
    },
    /// `record_memory_history` was given an option torch 2.15 refuses; the message is torch's.
    #[error("{message}")]
    HistoryOption {
        /// torch's whole message.
        message: String,
    },
    /// An operation was given arguments it cannot work with (shapes, lengths, aliasing, types).
    #[error("{op} on {device}: {message}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// `cpu` or `cuda:N`.
        device: String,
        /// What is wrong with the arguments.
        message: String,
    },
    /// A CUDA driver, cuBLAS or NVRTC call failed.
    #[error("{op} failed on {device}: {message}")]
    Driver {
        /// The call that failed.
        op: &'static str,
        /// `cuda:N`.
        device: String,
        /// The driver's words.
        message: String,
    },
    /// Autograd was asked for something its graph cannot do (a second backward through freed saved
    /// tensors, backward from a tensor that does not require grad, ...); the message is torch's.
    #[error("{message}")]
    Autograd {
        /// What went wrong and what to do about it.
        message: String,
    },
    /// Host memory could not be obtained.
    #[error("could not allocate {} of host memory: {reason}", format_bytes(*size as u64))]
    HostAlloc {
        /// Bytes asked for.
        size: usize,
        /// Why.
        reason: String,
    },
}

/// `{:?}` prints the same message as `{}`, so that `.unwrap()` and `.expect()` (in a learner's
/// code, in a test) show the sentence a learner can act on rather than the variant's fields.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// Whether this is an out-of-memory error (torch's `OutOfMemoryError`): the allocator's, or
    /// the guard for absurd sizes.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::OutOfMemory { .. })
    }

    /// torch's text for an out-of-memory error; empty for any other error.
    fn out_of_memory_message(&self) -> String {
        let Error::OutOfMemory {
            device,
            alloc_size,
            total,
            free,
            allocated,
            reserved_unallocated,
            allowed,
            too_large,
            ..
        } = self
        else {
            return String::new();
        };
        if *too_large {
            return format!(
                "{}. Tried to allocate more than 1EB memory.",
                out_of_memory_on(device)
            );
        }
        format!(
            "{}. Tried to allocate {}. {} has a total capacity of {} of which {} is free. {}\
             Of the allocated memory {} is allocated by gpumem, and {} is reserved by gpumem but unallocated. \
             If reserved but unallocated memory is large try setting GPUMEM_ALLOC_CONF=expandable_segments:True \
             to avoid fragmentation.  See documentation for Memory Management  \
             (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            out_of_memory_on(device),
            format_size(*alloc_size),
            device_in_sentence(device),
            format_size(*total),
            format_size(*free),
            allowed
                .map(|a| format!("{} allowed; ", format_size(a)))
                .unwrap_or_default(),
            format_size(*allocated),
            format_size(*reserved_unallocated)
        )
    }
}

/// torch's first sentence: "CUDA out of memory" on a GPU; the cpu device says what it is.
fn out_of_memory_on(device: &str) -> String {
    if device.starts_with("cuda") {
        "CUDA out of memory".to_string()
    } else {
        format!("Out of memory on the {device} device")
    }
}

/// torch's "GPU 0"; the cpu device is "The cpu device".
fn device_in_sentence(device: &str) -> String {
    match device.strip_prefix("cuda:") {
        Some(ordinal) => format!("GPU {ordinal}"),
        None => format!("The {device} device"),
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
