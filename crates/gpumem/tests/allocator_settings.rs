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
    // `>:1` starts at 256 MiB (overriding its 4): 1 division is no rounding either.
    assert_eq!(block_size(&a, 300 * MIB + 1), 300 * MIB + 512);
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
