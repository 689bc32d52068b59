//! The `GPUMEM_ALLOC_CONF` options that change numbers, each pinned with exact numbers on a
//! private allocator over host memory, and the settings changed at run time.

use gpumem::AllocatorConfig;
use gpumem::allocator::{CachingAllocator, StreamId};
use gpumem::backend_cpu::CpuBackend;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const S0: StreamId = StreamId(0);

fn with_config(capacity: usize, conf: &str) -> CachingAllocator<CpuBackend> {
    CachingAllocator::new(
        CpuBackend::new(capacity),
        "cpu",
        AllocatorConfig::parse(conf).unwrap(),
    )
}

fn stat(a: &CachingAllocator<CpuBackend>, key: &str) -> u64 {
    a.memory_stats()
        .get(key)
        .unwrap_or_else(|| panic!("no stat {key}"))
}

/// Allocates `size` and frees it at once; returns the block size it got.
fn block_size(a: &CachingAllocator<CpuBackend>, size: usize) -> usize {
    let b = a.malloc(size, S0).unwrap();
    let got = b.size;
    a.free(b, vec![]);
    got
}

#[test]
fn roundup_power2_divisions_per_interval_rounds_each_size_by_its_own_interval() {
    let a = with_config(GIB, "roundup_power2_divisions:[64:8,256:4,>:1]");
    // Below 128 MiB: 8 divisions. 1200 KiB lies in [1 MiB, 2 MiB): steps of 128 KiB.
    assert_eq!(block_size(&a, 1200 * KIB), 1280 * KIB);
    // 65 MiB lies in [64 MiB, 128 MiB): steps of 8 MiB.
    assert_eq!(block_size(&a, 65 * MIB), 72 * MIB);
    // [128 MiB, 256 MiB) was never named: 0, so only the 512-byte rounding.
    assert_eq!(block_size(&a, 130 * MIB + 1), 130 * MIB + 512);
    // [256 MiB, 512 MiB) keeps its 4: steps of 64 MiB (torch 2.15's `>` starts after it).
    assert_eq!(block_size(&a, 300 * MIB + 1), 320 * MIB);
    // `>:1` covers 512 MiB and up: 1 division is no rounding.
    assert_eq!(block_size(&a, 600 * MIB + 1), 600 * MIB + 512);
}

#[test]
fn roundup_power2_divisions_single_value_rounds_every_size() {
    let a = with_config(GIB, "roundup_power2_divisions:4");
    assert_eq!(block_size(&a, 1200 * KIB), 1280 * KIB);
    assert_eq!(block_size(&a, 65 * MIB), 80 * MIB);
    // Sizes up to 512 B x divisions keep the 512-byte rounding (torch's `size > 512 * divisions`).
    assert_eq!(block_size(&a, 2000), 2048);
}

#[test]
fn max_non_split_rounding_mb_lets_an_oversize_request_take_a_larger_cached_block() {
    for (conf, expected, reserved) in [
        // Default: 30 MiB of waste is 20 MiB or more, so a new 70 MiB segment.
        ("max_split_size_mb:64", 70 * MIB, 170 * MIB),
        // Up to 40 MiB of waste allowed: the cached 100 MiB block, whole.
        (
            "max_split_size_mb:64,max_non_split_rounding_mb:40",
            100 * MIB,
            100 * MIB,
        ),
    ] {
        let a = with_config(GIB, conf);
        let big = a.malloc(100 * MIB, S0).unwrap();
        a.free(big, vec![]);
        let b = a.malloc(70 * MIB, S0).unwrap();
        assert_eq!(b.size, expected, "{conf}");
        assert_eq!(a.reserved_bytes(), reserved as u64, "{conf}");
        a.free(b, vec![]);
    }
}

#[test]
fn max_split_size_mb_is_reported_in_memory_stats() {
    let a = with_config(GIB, "");
    assert_eq!(stat(&a, "max_split_size"), u64::MAX, "unset: torch's -1");
    let a = with_config(GIB, "max_split_size_mb:64");
    assert_eq!(stat(&a, "max_split_size"), 64 * MIB as u64);
}

#[test]
fn garbage_collection_releases_every_cached_block_of_at_least_average_age() {
    let a = with_config(100 * MIB, "garbage_collection_threshold:0.5");
    a.set_memory_fraction(1.0).unwrap();
    let x = a.malloc(30 * MIB, S0).unwrap();
    let y = a.malloc(24 * MIB, S0).unwrap();
    a.free(x, vec![]);
    a.free(y, vec![]);
    // 54 MiB reserved, over the 50 MiB threshold. A 40 MiB request fits no cached block; both
    // cached blocks are one search old (the average), so both go, not just the 4 MiB needed.
    let z = a.malloc(40 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 40 * MIB as u64);
    assert_eq!(stat(&a, "num_device_free"), 2);
    assert_eq!(stat(&a, "num_alloc_retries"), 0);
    a.free(z, vec![]);
}

#[test]
fn garbage_collection_needs_a_memory_fraction_as_in_torch() {
    let a = with_config(100 * MIB, "garbage_collection_threshold:0.5");
    let x = a.malloc(30 * MIB, S0).unwrap();
    let y = a.malloc(24 * MIB, S0).unwrap();
    a.free(x, vec![]);
    a.free(y, vec![]);
    let z = a.malloc(40 * MIB, S0).unwrap();
    assert_eq!(a.reserved_bytes(), 94 * MIB as u64, "nothing reclaimed");
    a.free(z, vec![]);
}

#[test]
fn settings_change_at_run_time_and_stats_stay_consistent() {
    let a = with_config(GIB, "");
    let before = a.malloc(100 * MIB, S0).unwrap();
    a.set_allocator_settings("max_split_size_mb:64").unwrap();
    assert_eq!(stat(&a, "max_split_size"), 64 * MIB as u64);
    let during = a.malloc(100 * MIB, S0).unwrap();
    assert_eq!(
        stat(&a, "oversize_allocations.current"),
        1,
        "only the new block"
    );
    assert_eq!(stat(&a, "oversize_segments.current"), 1);
    // A new string resets max_split_size_mb, as torch's parser does.
    a.set_allocator_settings("roundup_power2_divisions:2")
        .unwrap();
    assert_eq!(stat(&a, "max_split_size"), u64::MAX);
    a.free(before, vec![]);
    a.free(during, vec![]);
    a.empty_cache();
    assert_eq!(stat(&a, "oversize_allocations.current"), 0);
    assert_eq!(stat(&a, "oversize_segments.current"), 0);
    assert_eq!(a.reserved_bytes(), 0);
    let err = a.set_allocator_settings("max_split_size_mb:2").unwrap_err();
    assert!(
        err.to_string().contains("max_split_size_mb too small"),
        "{err}"
    );
    assert_eq!(
        a.config().roundup_power2_divisions[0],
        2,
        "a bad string changes nothing"
    );
}

#[test]
fn the_memory_fraction_reads_back() {
    let a = with_config(100 * MIB, "");
    assert_eq!(a.memory_fraction(), 1.0);
    a.set_memory_fraction(0.5).unwrap();
    assert_eq!(a.memory_fraction(), 0.5);
    let err = a.set_memory_fraction(1.5).unwrap_err();
    assert!(
        err.to_string()
            .contains("Invalid fraction value: 1.5. Allowed range: 0~1"),
        "{err}"
    );
    assert_eq!(a.memory_fraction(), 0.5);
    a.clear_memory_fraction();
    assert_eq!(a.memory_fraction(), 1.0);
}

/// torch's `power2_div` helper of test_cuda.py: `size` rounded up to the next of `div_factor`
/// steps between two powers of two.
fn power2_div(size: usize, div_factor: usize) -> usize {
    let mut pow2 = 1;
    while pow2 < size {
        pow2 *= 2;
    }
    if pow2 == size {
        return pow2;
    }
    let step = pow2 / 2 / div_factor;
    let mut ret = pow2 / 2;
    while ret < size {
        ret += step;
    }
    ret
}

/// Allocates `nbytes` and returns how much `active_bytes.all.allocated` grew (torch's key).
fn grows_by(a: &CachingAllocator<CpuBackend>, nbytes: usize) -> (u64, gpumem::Allocation) {
    let start = stat(a, "active_bytes.all.allocated");
    let b = a.malloc(nbytes, S0).unwrap();
    (stat(a, "active_bytes.all.allocated") - start, b)
}

/// test_cuda.py `test_allocator_settings` (read in torch_mlu's copy of it): settings changed at
/// run time with `_set_allocator_settings`, with torch's expected sizes.
#[test]
fn test_allocator_settings() {
    let a = with_config(4 * GIB, "");
    let nbytes = 4 * 21 * 1024 * 1024;
    let nbytes_big = 4 * 100 * 1024 * 1024;
    a.set_allocator_settings("").unwrap();
    let (reg, x) = grows_by(&a, nbytes);
    assert_eq!(reg, nbytes as u64);
    a.set_allocator_settings("roundup_power2_divisions:4")
        .unwrap();
    let (div4, y) = grows_by(&a, nbytes);
    assert_eq!(div4, power2_div(nbytes, 4) as u64);
    assert_eq!(div4, 96 * MIB as u64);
    a.set_allocator_settings("garbage_collection_threshold:0.5")
        .unwrap();
    a.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:70")
        .unwrap();
    // Setting anything resets the power-of-two divisions.
    a.empty_cache();
    let (reset, z) = grows_by(&a, nbytes);
    assert_eq!(reset, nbytes as u64);
    a.empty_cache();
    a.set_allocator_settings(
        "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]",
    )
    .unwrap();
    let (div8, w) = grows_by(&a, nbytes);
    assert_eq!(div8, power2_div(nbytes, 8) as u64);
    a.empty_cache();
    let (div2, v) = grows_by(&a, nbytes_big);
    assert_eq!(div2, power2_div(nbytes_big, 2) as u64);
    for bad in [
        "foo:1,bar:2",
        "garbage_collection_threshold:1.2",
        "max_split_size_mb:2",
    ] {
        assert!(a.set_allocator_settings(bad).is_err(), "{bad}");
    }
    for b in [x, y, z, w, v] {
        a.free(b, vec![]);
    }
}

/// test_cuda.py `test_roundup_power2_divisions_0`: 0 divisions for an interval, no rounding.
#[test]
fn test_roundup_power2_divisions_0() {
    let a = with_config(4 * GIB, "");
    a.set_allocator_settings("roundup_power2_divisions:[128:1,256:0,512:4]")
        .unwrap();
    let nbytes = 4 * 67 * 1024 * 1024; // 268 MB, in [256, 512)
    let (grew, y) = grows_by(&a, nbytes);
    assert_eq!(grew, nbytes as u64);
    a.free(y, vec![]);
    a.empty_cache();
    let nbytes = 4 * 130 * 1024 * 1024; // 520 MB, in [512, 1024): 640 MB
    let (grew, y) = grows_by(&a, nbytes);
    assert_eq!(grew, power2_div(nbytes, 4) as u64);
    assert_eq!(grew, 640 * MIB as u64);
    a.free(y, vec![]);
}

/// test_cuda.py `test_roundup_power2_divisions_1`: one division is no rounding at all.
#[test]
fn test_roundup_power2_divisions_1() {
    let a = with_config(GIB, "");
    let nbytes: usize = 4 * 21 * 125 * 125;
    let roundup_512 = nbytes.div_ceil(512) * 512;
    let (reg, x) = grows_by(&a, nbytes);
    a.set_allocator_settings("roundup_power2_divisions:1")
        .unwrap();
    let (div1, y) = grows_by(&a, nbytes);
    assert_eq!(reg, roundup_512 as u64);
    assert_eq!(div1, roundup_512 as u64);
    assert_eq!(stat(&a, "requested_bytes.all.current"), 2 * nbytes as u64);
    a.free(x, vec![]);
    a.free(y, vec![]);
}

/// test_cuda.py `test_raises_oom` (with `max_split_size_mb:1024`, which takes the allocator down
/// more paths) and `test_raises_oom_no_max_split_size`: 1 TiB is out of memory.
#[test]
fn test_raises_oom() {
    for conf in ["max_split_size_mb:1024", ""] {
        let a = with_config(GIB, "");
        a.set_allocator_settings(conf).unwrap();
        a.empty_cache();
        let err = a.malloc(1024 * 1024 * 1024 * 1024, S0).unwrap_err();
        assert!(
            matches!(err, gpumem::Error::OutOfMemory { .. }),
            "{conf}: {err}"
        );
    }
}
