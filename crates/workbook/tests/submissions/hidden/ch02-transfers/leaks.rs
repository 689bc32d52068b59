//! Hidden tests for ch02-transfers, used by `tests/grade_corpus.rs` (`workbook grade
//! --hidden-tests`): the learner's functions must leave `memory_allocated` where they found it
//! once their results are dropped.

use ch02_transfers::{batched_upload, round_trip};

#[test]
fn batched_upload_leaves_nothing_behind_once_dropped() {
    let dev = gpumem::testing::device();
    let before = dev.memory_allocated();
    let rows = vec![vec![1.0f32; 100]; 3];
    let batch = batched_upload(&dev, &rows).expect("batched upload");
    drop(batch);
    assert_eq!(
        dev.memory_allocated(),
        before,
        "batched_upload left device memory allocated"
    );
}

#[test]
fn round_trip_twice_leaves_nothing_behind() {
    let dev = gpumem::testing::device();
    let before = dev.memory_allocated();
    for _ in 0..2 {
        round_trip(&dev, &[1.0, 2.0, 3.0]).expect("round trip");
    }
    assert_eq!(dev.memory_allocated(), before);
}
