//! The one error type of the runtime, with messages a learner can act on.

use crate::format::format_bytes;

/// Everything that can go wrong in `gpumem`.
#[derive(thiserror::Error)]
pub enum Error {
    /// A reservation failed even after the cache was released and the allocation retried.
    #[error(
        "out of memory on {device}: tried to allocate {}. The device has a total capacity of {} of which {} is free{}. \
         Of the memory this process reserved, {} is allocated and {} is reserved but unallocated{}",
        format_bytes(*requested), format_bytes(*total), format_bytes(*free),
        limit.map(|l| format!(" (this process may reserve at most {})", format_bytes(l))).unwrap_or_default(),
        format_bytes(*allocated), format_bytes(*reserved_unallocated),
        if *reserved_unallocated > *requested { "; the cache is fragmented: a max_split_size_mb in GPUMEM_ALLOC_CONF may help" } else { "" }
    )]
    OutOfMemory {
        /// `cpu` or `cuda:N`.
        device: String,
        /// Bytes asked for (after rounding to the allocator's block size).
        requested: u64,
        /// The device's total memory.
        total: u64,
        /// The device's free memory, as the driver reports it.
        free: u64,
        /// Bytes in live blocks of this process.
        allocated: u64,
        /// Bytes reserved by this process's allocator but not in live blocks.
        reserved_unallocated: u64,
        /// The cap from `set_per_process_memory_fraction`, if any.
        limit: Option<u64>,
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
    /// A device name that cannot be parsed (for example in `GPUMEM_DEVICE`).
    #[error("cannot understand device {value:?}: expected auto, cpu, cuda or cuda:N")]
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

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
