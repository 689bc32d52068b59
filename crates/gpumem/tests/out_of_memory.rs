//! The out-of-memory error as torch 2.x words it (`c10/cuda/CUDACachingAllocator.cpp`, read at
//! pytorch/pytorch commit 001074d), and torch's own tests of it from `test/test_cuda.py`, ported
//! with torch's expected texts.

use gpumem::allocator::{CachingAllocator, ONE_EXA_BYTE, StreamId};
use gpumem::backend_cpu::CpuBackend;
use gpumem::{AllocatorConfig, Error};

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const S0: StreamId = StreamId(0);

fn allocator(capacity: usize) -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(CpuBackend::new(capacity), "cpu", AllocatorConfig::default())
}

/// test_cuda.py `test_out_of_memory`: 800000000 GiB is refused by the allocator with torch's
/// size in torch's units; 8000000000 GiB by the guard for absurd sizes; the device still works.
#[test]
fn test_out_of_memory() {
    let a = allocator(GIB);
    let tensor = a.malloc(1024 * 4, S0).unwrap();
    let err = a.malloc(1024 * 1024 * 1024 * 800000000, S0).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("Tried to allocate 800000000.00 GiB. The cpu device has a total capacity of"),
        "{err}"
    );
    let err = a
        .malloc(1024usize * 1024 * 1024 * 8000000000, S0)
        .unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { too_large: true, requested, .. } if requested >= 1 << 60),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("Tried to allocate more than 1EB memory"),
        "{err}"
    );
    assert!(err.is_out_of_memory());
    // The guard runs before the allocator: only the first refusal counts as an OOM.
    assert_eq!(a.memory_stats().get("num_ooms"), Some(1));
    // An out-of-memory error does not disturb what is already allocated.
    assert_eq!(a.allocated_bytes(), 4096);
    a.free(tensor, vec![]);
}

/// test_cuda.py `test_out_of_memory_retry`: half the memory, then half again fails with "Tried to
/// allocate"; after freeing the first, the second fits.
#[test]
fn test_out_of_memory_retry() {
    let total = 256 * MIB;
    let a = allocator(total);
    let size = total / 2;
    let first = a.malloc(size, S0).unwrap();
    let second = a.malloc(size + 1, S0).unwrap_err();
    assert!(second.to_string().contains("Tried to allocate"), "{second}");
    a.free(first, vec![]);
    let again = a.malloc(size, S0).unwrap();
    a.free(again, vec![]);
}

/// torch's guard: 2^60 bytes and more are refused at once; one byte less reaches the allocator.
#[test]
fn the_guard_for_absurd_sizes_starts_at_one_exabyte() {
    let a = allocator(GIB);
    let err = a.malloc(ONE_EXA_BYTE as usize, S0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Out of memory on the cpu device. Tried to allocate more than 1EB memory."
    );
    let err = a.malloc(ONE_EXA_BYTE as usize - 1, S0).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert_eq!(a.memory_stats().get("num_ooms"), Some(1));
}

/// The whole sentence, in torch's order and units: the size named is the segment torch tried to
/// reserve (20 MiB for a 5 MiB request), then capacity, free, allocated, reserved-but-unallocated,
/// and the expandable_segments hint (torch prints it always, whatever the numbers).
#[test]
fn the_message_names_the_segment_size_and_keeps_torchs_order_and_units() {
    let a = allocator(30 * MIB);
    let live = a.malloc(12 * MIB, S0).unwrap();
    let small = a.malloc(1000, S0).unwrap();
    let err = a.malloc(5 * MIB, S0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Out of memory on the cpu device. Tried to allocate 20.00 MiB. The cpu device has a total \
         capacity of 30.00 MiB of which 16.00 MiB is free. Of the allocated memory 12.00 MiB is \
         allocated by gpumem, and 2.00 MiB is reserved by gpumem but unallocated. If reserved \
         but unallocated memory is large try setting GPUMEM_ALLOC_CONF=expandable_segments:True to \
         avoid fragmentation.  See documentation for Memory Management  \
         (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    );
    match err {
        Error::OutOfMemory {
            device,
            alloc_size,
            requested,
            total,
            free,
            allocated,
            reserved_unallocated,
            allowed,
            too_large,
        } => {
            assert!(!too_large);
            assert_eq!(device, "cpu");
            assert_eq!(alloc_size, 20 * MIB as u64);
            assert_eq!(requested, 5 * MIB as u64);
            assert_eq!(total, 30 * MIB as u64);
            assert_eq!(free, 16 * MIB as u64);
            assert_eq!(allocated, 12 * MIB as u64 + 1024);
            assert_eq!(reserved_unallocated, 2 * MIB as u64 - 1024);
            assert_eq!(allowed, None);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    a.free(live, vec![]);
    a.free(small, vec![]);
}

/// With a memory fraction set, torch adds "<allowed> allowed; " before "Of the allocated memory".
#[test]
fn a_memory_fraction_adds_what_is_allowed() {
    let a = allocator(100 * MIB);
    a.set_memory_fraction(0.25).unwrap();
    let err = a.malloc(30 * MIB, S0).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(
            "total capacity of 100.00 MiB of which 100.00 MiB is free. 25.00 MiB allowed; Of the \
             allocated memory 0 bytes is allocated by gpumem, and 0 bytes is reserved by gpumem"
        ),
        "{text}"
    );
}

/// A buffer whose bytes exceed 1 EiB (here they overflow `usize`) is torch's `OutOfMemoryError`
/// with torch 2.15's text, from the same guard as any request of 1 EiB or more, never a panic.
#[test]
fn a_buffer_of_more_than_1_eib_is_an_out_of_memory_error() {
    let dev = gpumem::testing::device();
    let allocated = dev.memory_allocated();
    let err = dev.alloc::<f32>(1 << 62).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert!(
        matches!(err, Error::OutOfMemory { too_large: true, requested, .. } if requested >= 1 << 60),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with(". Tried to allocate more than 1EB memory."),
        "{err}"
    );
    assert_eq!(dev.memory_allocated(), allocated, "nothing was allocated");
}

/// torch raises `torch.OutOfMemoryError` for a request of 1 EiB or more, as for any other: code
/// that matches `Error::OutOfMemory { .. }` catches both, and the numbers are the device's.
#[test]
fn a_request_of_1_eib_is_the_same_kind_of_error_as_any_out_of_memory() {
    let a = allocator(64 * MIB);
    let live = a.malloc(3 * MIB, S0).unwrap();
    let err = a.malloc(1 << 60, S0).unwrap_err();
    match &err {
        Error::OutOfMemory {
            device,
            alloc_size,
            requested,
            total,
            allocated,
            too_large,
            ..
        } => {
            assert!(*too_large);
            assert_eq!(device, "cpu");
            assert_eq!((*alloc_size, *requested), (1 << 60, 1 << 60));
            assert_eq!(*total, 64 * MIB as u64);
            assert_eq!(*allocated, 3 * MIB as u64);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "Out of memory on the cpu device. Tried to allocate more than 1EB memory."
    );
    assert_eq!(
        a.memory_stats().get("num_ooms"),
        Some(0),
        "the guard is not the allocator's out-of-memory"
    );
    a.free(live, vec![]);
}
