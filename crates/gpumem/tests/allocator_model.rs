//! Property test: random alloc/free/empty_cache sequences, with every setting that changes numbers
//! (expandable segments included, and settings changed midway), against a simple model of what
//! must hold: live blocks never overlap, the statistics equal the sums over the blocks, the
//! snapshot's blocks tile what is reserved, and nothing is lost at the end.

use gpumem::allocator::{Allocation, CachingAllocator, StreamId};
use gpumem::backend::RawMemory;
use gpumem::backend_cpu::CpuBackend;
use gpumem::testing::{rng, seeded};
use gpumem::{AllocatorConfig, Error};
use proptest::prelude::*;
use proptest::test_runner::{RngSeed, TestCaseError, TestRunner};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: usize,
        stream: u64,
    },
    Free {
        index: usize,
    },
    EmptyCache,
    ResetPeak,
    /// Applies `CONFIGS[i]` at run time (`set_allocator_settings`).
    Settings(usize),
    /// Sets a memory fraction of 0.8 (true) or clears it (false).
    Fraction(bool),
}

const CONFIGS: [&str; 8] = [
    "",
    "max_split_size_mb:32",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[1:8,4:2,>:1]",
    "max_split_size_mb:32,max_non_split_rounding_mb:40",
    "garbage_collection_threshold:0.5",
    "expandable_segments:True",
    "expandable_segments:True,max_split_size_mb:32,roundup_power2_divisions:2",
];

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1..=4 * KIB,
        3 => 4 * KIB..=MIB,
        2 => MIB + 1..10 * MIB,
        1 => 10 * MIB..=40 * MIB,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), 0..2u64).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        5 => any::<usize>().prop_map(|index| Op::Free { index }),
        1 => Just(Op::EmptyCache),
        1 => Just(Op::ResetPeak),
        1 => (0..CONFIGS.len()).prop_map(Op::Settings),
        1 => any::<bool>().prop_map(Op::Fraction),
    ]
}

fn config() -> impl Strategy<Value = &'static str> {
    (0..CONFIGS.len()).prop_map(|i| CONFIGS[i])
}

fn check(a: &CachingAllocator<CpuBackend>, live: &[Allocation], peak_model: u64) {
    let stats = a.memory_stats();
    let get = |k: &str| stats.get(k).unwrap();
    let allocated: u64 = live.iter().map(|b| b.size as u64).sum();
    let requested: u64 = live.iter().map(|b| b.requested as u64).sum();
    assert_eq!(get("allocated_bytes.all.current"), allocated);
    assert_eq!(get("requested_bytes.all.current"), requested);
    assert_eq!(
        get("allocation.all.current"),
        live.iter().filter(|b| b.size > 0).count() as u64
    );
    assert!(get("allocated_bytes.all.current") <= get("reserved_bytes.all.current"));
    assert_eq!(
        get("active_bytes.all.current"),
        allocated,
        "no pending frees: active = live"
    );
    assert_eq!(
        get("allocated_bytes.all.peak"),
        peak_model,
        "peak holds until reset"
    );
    for stat in [
        "allocated_bytes",
        "reserved_bytes",
        "segment",
        "inactive_split_bytes",
        "active_bytes",
    ] {
        for field in ["current", "peak"] {
            let all = get(&format!("{stat}.all.{field}"));
            let pools = get(&format!("{stat}.small_pool.{field}"))
                + get(&format!("{stat}.large_pool.{field}"));
            if field == "current" {
                assert_eq!(all, pools, "{stat}.{field}: all = small + large");
            } else {
                assert!(
                    all <= pools,
                    "{stat}.{field}: peak of the sum <= sum of the peaks"
                );
            }
        }
    }
    // Live blocks never overlap.
    let mut spans: Vec<(u64, u64)> = live
        .iter()
        .filter(|b| b.size > 0)
        .map(|b| (b.ptr, b.ptr + b.size as u64))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "live blocks overlap: {pair:?}");
    }
    // The snapshot's segments add up to what is reserved, and their blocks tile them exactly.
    let snap = a.snapshot();
    let reserved: u64 = snap.segments.iter().map(|s| s.total_size).sum();
    assert_eq!(reserved, get("reserved_bytes.all.current"));
    for seg in &snap.segments {
        let mut at = seg.address;
        for block in &seg.blocks {
            assert_eq!(block.address, at, "blocks tile their segment");
            at += block.size;
        }
    }
    let snap_allocated: u64 = snap.segments.iter().map(|s| s.allocated_size).sum();
    assert_eq!(snap_allocated, allocated);
}

/// Cases per seed: a plain run tries 4,000 sequences; a sweep (`GPUMEM_TEST_SEEDS`) tries this
/// many for each seed of its range.
const CASES: u32 = 4_000;
/// Cases per seed in a sweep: 2,000 seeds then try 100,000 sequences.
const SWEEP_CASES: u32 = 50;

#[test]
fn random_sequences_keep_every_invariant() {
    let cases = if std::env::var_os(gpumem::testing::TEST_SEEDS).is_some() {
        SWEEP_CASES
    } else {
        CASES
    };
    seeded(|| {
        // proptest's generator starts from the test's seed, so GPUMEM_TEST_SEED replays a failure
        // (and its shrinking).
        let mut runner = TestRunner::new(ProptestConfig {
            cases,
            rng_seed: RngSeed::Fixed(rng().seed()),
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let sequences = (config(), prop::collection::vec(op(), 1..40));
        if let Err(failure) = runner.run(&sequences, |(conf, ops)| keeps_every_invariant(conf, ops))
        {
            panic!("{failure}");
        }
    })
}

/// Runs `ops` on an allocator with the setting `conf`, checking every invariant after each.
fn keeps_every_invariant(conf: &str, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let a = CachingAllocator::new(
        CpuBackend::new(96 * MIB),
        "cpu",
        AllocatorConfig::parse(conf).unwrap(),
    );
    let mut live: Vec<Allocation> = Vec::new();
    let mut peak = 0u64;
    for op in ops {
        match op {
            Op::Alloc { size, stream } => match a.malloc(size, StreamId(stream)) {
                Ok(b) => {
                    prop_assert!(b.size >= size);
                    prop_assert_eq!(b.size % 512, 0);
                    live.push(b);
                }
                Err(Error::OutOfMemory { .. }) => {}
                Err(other) => prop_assert!(false, "unexpected error {}", other),
            },
            Op::Free { index } => {
                if !live.is_empty() {
                    let b = live.swap_remove(index % live.len());
                    a.free(b, vec![]);
                }
            }
            Op::EmptyCache => a.empty_cache(),
            Op::ResetPeak => {
                a.reset_peak_stats();
                peak = a.allocated_bytes();
            }
            Op::Settings(i) => a.set_allocator_settings(CONFIGS[i]).unwrap(),
            Op::Fraction(true) => a.set_memory_fraction(0.8).unwrap(),
            Op::Fraction(false) => a.clear_memory_fraction(),
        }
        peak = peak.max(a.allocated_bytes());
        check(&a, &live, peak);
    }
    for b in live.drain(..) {
        a.free(b, vec![]);
    }
    a.empty_cache();
    prop_assert_eq!(
        a.reserved_bytes(),
        0,
        "everything freed plus empty_cache leaves nothing reserved"
    );
    prop_assert!(a.snapshot().segments.is_empty());
    let stats = a.memory_stats();
    for key in [
        "allocated_bytes.all.current",
        "active_bytes.all.current",
        "inactive_split_bytes.all.current",
        "requested_bytes.all.current",
        "oversize_allocations.current",
        "oversize_segments.current",
        "segment.all.current",
    ] {
        prop_assert_eq!(stats.get(key), Some(0), "{}", key);
    }
    prop_assert_eq!(
        a.backend().mem_get_info().map(|(free, _)| free).ok(),
        Some(96 * MIB)
    );
    Ok(())
}
