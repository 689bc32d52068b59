//! Chapter 15 compares its FSDP step with torch 2.15's `fully_shard`: the numbers its test holds
//! (`TORCH_FSDP2_PER_RANK` in exercises/ch15-several-gpus/tests/several_gpus.rs) are those that
//! `bench/torch_fsdp2.py` printed into `bench/torch_fsdp2.txt`, for every rank.

use std::path::Path;

/// The file at `path` under the repository root.
fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The number of bytes written just before `after` (`32768 B; gradients`).
fn bytes_before(line: &str, after: &str) -> u64 {
    let end = line
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} is not in {line:?}"));
    let number = line[..end]
        .trim_end()
        .rsplit(' ')
        .next()
        .unwrap_or_default();
    number
        .parse()
        .unwrap_or_else(|_| panic!("no number before {after:?} in {line:?}"))
}

#[test]
fn chapter_15_holds_torch_fsdp2s_per_rank_bytes() {
    let torch = read("bench/torch_fsdp2.txt");
    assert!(
        torch.starts_with("torch 2.15.0"),
        "recorded with torch 2.15.0: {torch}"
    );
    let ranks: Vec<[u64; 3]> = torch
        .lines()
        .filter(|l| l.starts_with("rank "))
        .map(|l| {
            [
                bytes_before(l, " B; gradients"),
                bytes_before(l, " B; Adam"),
                bytes_before(l, " B; step"),
            ]
        })
        .collect();
    assert_eq!(ranks.len(), 2, "two ranks in bench/torch_fsdp2.txt");
    let test = read("exercises/ch15-several-gpus/tests/several_gpus.rs");
    let line = test
        .lines()
        .find(|l| l.starts_with("const TORCH_FSDP2_PER_RANK"))
        .expect("the chapter's test holds TORCH_FSDP2_PER_RANK");
    let value = line.split('=').nth(1).expect("a value");
    let held: Vec<u64> = value
        .trim_matches(|c: char| " [];".contains(c))
        .split(',')
        .map(|n| n.trim().parse().expect("a number"))
        .collect();
    for (rank, torch) in ranks.iter().enumerate() {
        assert_eq!(
            held,
            torch.to_vec(),
            "rank {rank}: the chapter's numbers, torch's"
        );
    }
}
