//! `record_activity`: the pinned host allocator's events (exact sizes, in order) and each copy and
//! kernel with its stream. Order is asserted through the ticks, never through clock times.

use gpumem::activity::{HostAction, HostEvent, WorkKind, WorkSpan};

/// (action, block, size, requested, allocated, reserved) of each host event, the block numbers
/// counted from the first event's.
fn host_events(events: &[HostEvent]) -> Vec<(HostAction, u64, u64, u64, u64, u64)> {
    let first = events.first().map_or(0, |e| e.block);
    events
        .iter()
        .map(|e| {
            (
                e.action,
                e.block - first,
                e.size,
                e.requested,
                e.allocated,
                e.reserved,
            )
        })
        .collect()
}

/// (kind, name, stream, bytes, whether a pinned block) of each span.
fn spans(work: &[WorkSpan]) -> Vec<(WorkKind, &str, u64, u64, bool)> {
    work.iter()
        .map(|w| {
            (
                w.kind,
                w.name.as_str(),
                w.stream,
                w.bytes,
                w.pinned_block.is_some(),
            )
        })
        .collect()
}

#[test]
fn pinned_blocks_are_recorded_taken_freed_reused_and_released_with_their_sizes() {
    use HostAction::*;
    let dev = gpumem::testing::device();
    dev.record_activity(true);
    let a = dev.alloc_pinned::<u8>(100_000).unwrap();
    drop(a);
    let b = dev.alloc_pinned::<u8>(70_000).unwrap();
    let c = dev.alloc_pinned::<u8>(4097).unwrap();
    drop(b);
    dev.empty_host_cache();
    let activity = dev.activity();
    dev.record_activity(false);
    drop(c);
    const K128: u64 = 128 << 10;
    assert_eq!(
        host_events(&activity.host),
        [
            (Alloc, 0, K128, 100_000, K128, K128),
            (Free, 0, K128, 0, 0, K128),
            // 70,000 bytes round up to the same 128 KiB: the cached block is handed out again.
            (Reuse, 0, K128, 70_000, K128, K128),
            (Alloc, 1, 8192, 4097, K128 + 8192, K128 + 8192),
            (Free, 0, K128, 0, 8192, K128 + 8192),
            // empty_host_cache gives back the cached block; the live one stays.
            (Release, 0, K128, 0, 8192, 8192),
        ]
    );
    assert!(activity.work.is_empty(), "{:?}", activity.work);
    let ticks: Vec<u64> = activity.host.iter().map(|e| e.tick).collect();
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
    assert_eq!(activity.device, dev.to_string());
}

#[test]
fn each_copy_and_kernel_is_recorded_with_its_stream_and_its_pinned_block() {
    let dev = gpumem::testing::device();
    let copy_stream = dev.stream().unwrap();
    dev.record_activity(true);
    dev.record_annotation("batch 0");
    let mut staging = dev.alloc_pinned::<f32>(1000).unwrap();
    staging.as_mut_slice().fill(2.0);
    let mut batch = dev.alloc::<f32>(1000).unwrap();
    staging
        .copy_to_device_async(&mut batch, &copy_stream)
        .unwrap();
    copy_stream.synchronize().unwrap();
    let total = gpumem::ops::sum(&batch).unwrap();
    drop(staging);
    let activity = dev.activity();
    dev.record_activity(false);
    assert_eq!(total, 2000.0);

    let side = copy_stream.id().0;
    assert_ne!(side, 0);
    assert_eq!(
        spans(&activity.work),
        [
            (WorkKind::Kernel, "zero", 0, 4000, false),
            (WorkKind::HostToDevice, "copy", side, 4000, true),
            // ops::sum: its one-element f64 result zeroed, the sum, and the result read back.
            (WorkKind::Kernel, "zero", 0, 8, false),
            (WorkKind::Kernel, "sum", 0, 4000, false),
            (WorkKind::DeviceToHost, "copy", 0, 8, false),
        ]
    );
    // The upload read the staging block: the one allocated before it and freed after it.
    let [alloc, free] = activity.host.as_slice() else {
        panic!("{:?}", activity.host)
    };
    let upload = &activity.work[1];
    assert_eq!(
        (alloc.action, free.action, upload.pinned_block),
        (HostAction::Alloc, HostAction::Free, Some(alloc.block))
    );
    assert_eq!((alloc.size, alloc.requested), (4096, 4000));
    assert!(alloc.tick < upload.start && upload.end < free.tick);
    // The host thread issues one call at a time: every span begins after the one before ended.
    for w in activity.work.windows(2) {
        assert!(w[0].start < w[0].end && w[0].end < w[1].start, "{w:?}");
        assert!(w[0].start_ns <= w[0].end_ns && w[0].end_ns <= w[1].start_ns);
    }
    assert_eq!(activity.marks.len(), 1);
    assert_eq!(activity.marks[0].label, "batch 0");
    assert!(activity.marks[0].tick < alloc.tick);
}

#[test]
fn nothing_is_recorded_while_off_and_turning_it_off_forgets() {
    let dev = gpumem::testing::device();
    let x = dev.alloc_pinned::<u8>(10).unwrap();
    let buf = dev.from_slice(&[1.0f32; 4]).unwrap();
    dev.record_annotation("not recorded");
    assert!(dev.activity().is_empty());
    dev.record_activity(true);
    drop(x);
    let _ = buf.to_vec().unwrap();
    let on = dev.activity();
    assert_eq!((on.host.len(), on.work.len()), (1, 1));
    assert_eq!(on.host[0].tick, 0, "the ticks start again at 0");
    // Turned on again while on: kept.
    dev.record_activity(true);
    assert_eq!(dev.activity(), on);
    dev.record_activity(false);
    assert!(dev.activity().is_empty());
}

#[test]
fn the_activity_stays_out_of_the_snapshot_and_its_pickle() {
    let dev = gpumem::testing::device();
    let dir = tempfile::tempdir().unwrap();
    let (plain, with_activity) = (dir.path().join("a.pickle"), dir.path().join("b.pickle"));
    let run = |activity: bool, file: &std::path::Path| {
        dev.empty_cache();
        dev.record_memory_history(true);
        dev.record_activity(activity);
        let pinned = dev.alloc_pinned::<u8>(100).unwrap();
        let buf = dev.from_slice(&[1.0f32; 64]).unwrap();
        drop(pinned);
        // Addresses and times differ between runs: compare what is written, not the bytes.
        let snapshot = dev.snapshot();
        dev.dump_snapshot(file).unwrap();
        drop(buf);
        dev.record_activity(false);
        dev.record_memory_history(false);
        snapshot
            .trace
            .iter()
            .map(|e| (e.action, e.size))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(false, &plain), run(true, &with_activity));
    let pickle = std::fs::read(&with_activity).unwrap();
    assert!(!std::fs::read(&plain).unwrap().is_empty());
    // (The frames name this file, activity.rs: look for the record's own keys.)
    for key in ["pinned_block", "host_to_device", "start_ns"] {
        assert!(
            !pickle.windows(key.len()).any(|w| w == key.as_bytes()),
            "{key} in the pickle"
        );
    }
}

#[test]
fn an_op_records_the_zeroing_of_its_output_then_its_kernel_one_after_the_other() {
    let dev = gpumem::testing::device();
    let a = dev.from_slice(&[1.0f32; 6]).unwrap();
    let b = dev.from_slice(&[2.0f32; 12]).unwrap();
    dev.record_activity(true);
    let r = gpumem::ops::relu(&a).unwrap();
    let c = gpumem::ops::matmul(&a, &b, gpumem::ops::MatMul::new(2, 3, 4)).unwrap();
    let activity = dev.activity();
    dev.record_activity(false);
    assert_eq!((r.len(), c.len()), (6, 8));
    assert_eq!(
        spans(&activity.work),
        [
            (WorkKind::Kernel, "zero", 0, 24, false),
            (WorkKind::Kernel, "relu", 0, 24, false),
            (WorkKind::Kernel, "zero", 0, 32, false),
            (WorkKind::Kernel, "matmul", 0, 32, false),
        ]
    );
    for w in activity.work.windows(2) {
        assert!(w[0].end < w[1].start, "{w:?}");
    }
}

/// Each span as `name bytes` (copies as `copy:<direction>`), once every span is checked to be on
/// the default stream and to begin after the one before it ended: one launch, one span, none
/// recorded inside another.
fn launches(activity: &gpumem::Activity) -> Vec<String> {
    for w in activity.work.windows(2) {
        assert!(w[0].start < w[0].end && w[0].end < w[1].start, "{w:?}");
    }
    activity
        .work
        .iter()
        .map(|w| {
            assert_eq!(w.stream, 0, "{w:?}");
            match w.kind {
                WorkKind::Kernel => format!("{} {}", w.name, w.bytes),
                kind => format!("{}:{kind:?} {}", w.name, w.bytes),
            }
        })
        .collect()
}

/// Runs `f` with `dev`'s activity recorded, and returns what was recorded.
fn recorded(dev: &gpumem::Device, f: impl FnOnce()) -> gpumem::Activity {
    dev.record_activity(true);
    f();
    let activity = dev.activity();
    dev.record_activity(false);
    activity
}

/// Two leaf parameters of 3 and 2 f32 (12 and 8 bytes), each with a gradient of ones.
fn two_parameters(dev: &gpumem::Device) -> Vec<gpumem::autograd::Tensor> {
    [3usize, 2]
        .iter()
        .map(|&n| {
            let p = gpumem::autograd::Tensor::from_f32(dev, &vec![0.5; n], &[n])
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            p.sum().unwrap().backward().unwrap();
            p
        })
        .collect()
}

/// Adam's state for parameters of these bytes: exp_avg and exp_avg_sq, zeros, made for every
/// parameter before any is updated (torch 2.15's `_init_group`).
fn adam_state_launches(bytes: &[u64]) -> Vec<String> {
    bytes
        .iter()
        .flat_map(|b| [format!("zero {b}"), format!("zero {b}")])
        .collect()
}

/// The launches of one for-loop Adam step of a parameter of `b` bytes, once its state exists.
fn adam_for_loop_launches(b: u64) -> Vec<String> {
    [
        // m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g².
        "scale",
        "axpy",
        "scale",
        "addcmul",
        // √v into a new block, its copy scaled by 1/√(1 − β₂ᵗ), plus eps.
        "zero",
        "sqrt",
        "copy:DeviceToDevice",
        "scale",
        "add_scalar",
        // p ← p − step_size·m / denom.
        "addcdiv",
    ]
    .iter()
    .map(|name| format!("{name} {b}"))
    .collect()
}

#[test]
fn an_adam_step_records_each_kernel_of_each_parameter_once_in_order() {
    use gpumem::optim::{Adam, AdamOptions, Implementation, Optimizer};
    let dev = gpumem::testing::device();
    let options = AdamOptions {
        implementation: Implementation::ForLoop,
        ..AdamOptions::default()
    };
    let mut adam = Adam::new(two_parameters(&dev), options).unwrap();
    let activity = recorded(&dev, || adam.step().unwrap());
    assert_eq!(
        launches(&activity),
        [
            adam_state_launches(&[12, 8]),
            adam_for_loop_launches(12),
            adam_for_loop_launches(8)
        ]
        .concat()
    );

    // For-each: the state first, then each operation over both parameters before the next.
    let options = AdamOptions {
        implementation: Implementation::ForEach,
        ..options
    };
    let mut adam = Adam::new(two_parameters(&dev), options).unwrap();
    let activity = recorded(&dev, || adam.step().unwrap());
    let moments = |b: u64| ["scale", "axpy", "scale", "addcmul"].map(|n| format!("{n} {b}"));
    let expected: Vec<String> = [
        &adam_state_launches(&[12, 8])[..],
        &moments(12),
        &moments(8),
        &["zero 12", "sqrt 12", "zero 8", "sqrt 8"].map(String::from),
        &["scale 12", "add_scalar 12", "scale 8", "add_scalar 8"].map(String::from),
        &["addcdiv 12", "addcdiv 8"].map(String::from),
    ]
    .concat();
    assert_eq!(launches(&activity), expected);
}

#[test]
fn an_mlp_forward_and_backward_records_each_kernel_once_and_the_autograd_ops_nothing_more() {
    use gpumem::autograd::{self, Tensor};
    let dev = gpumem::testing::device();
    let leaf = |data: &[f32], shape: &[usize]| {
        Tensor::from_f32(&dev, data, shape)
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    };
    let x = Tensor::<f32>::from_f32(&dev, &[0.5; 6], &[2, 3]).unwrap();
    let (w1, b1) = (leaf(&[0.1; 12], &[4, 3]), leaf(&[0.1; 4], &[4]));
    let (w2, b2) = (leaf(&[0.1; 4], &[1, 4]), leaf(&[0.1], &[1]));
    let target = Tensor::from_f32(&dev, &[1.0; 2], &[2, 1]).unwrap();
    let activity = recorded(&dev, || {
        let h = autograd::linear(&x, &w1, Some(&b1)).unwrap();
        let h = h.relu().unwrap();
        let y = autograd::linear(&h, &w2, Some(&b2)).unwrap();
        let loss = autograd::mse_loss(&y, &target).unwrap();
        loss.backward().unwrap();
    });
    assert!(w1.grad().is_some() && b2.grad().is_some());
    assert_eq!(
        launches(&activity),
        [
            // linear 3 → 4 on a batch of 2: [2×4] f32.
            "zero 32",
            "matmul 32",
            "add_bias 32",
            "zero 32",
            "relu 32",
            // linear 4 → 1: [2×1].
            "zero 8",
            "matmul 8",
            "add_bias 8",
            // mse_loss: the f64 sum of squares (of the 8 bytes it reads), then the mean.
            "zero 8",
            "mse_loss 8",
            "zero 4",
            "f64_div 4",
            // backward's seed, a one.
            "zero 4",
            "fill 4",
            // MseLossBackward0.
            "zero 8",
            "mse_loss_backward 8",
            "scale_by 8",
            // AddmmBackward0 of the second layer: dx, dW, db.
            "zero 32",
            "matmul 32",
            "zero 16",
            "matmul 16",
            "zero 4",
            "col_sum_into 4",
            // ReluBackward0.
            "zero 32",
            "relu_backward 32",
            // AddmmBackward0 of the first layer (x needs no gradient): dW, db.
            "zero 48",
            "matmul 48",
            "zero 16",
            "col_sum_into 16",
        ]
    );
}

#[test]
fn cross_entropy_records_log_softmax_nll_loss_and_their_backwards_once_each() {
    use gpumem::autograd::{self, Tensor};
    let dev = gpumem::testing::device();
    let logits = Tensor::<f32>::from_f32(&dev, &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let targets = autograd::class_targets(&dev, &[2, 0], 3).unwrap();
    let activity = recorded(&dev, || {
        let loss = autograd::cross_entropy(&logits, &targets).unwrap();
        loss.backward().unwrap();
    });
    assert_eq!(
        launches(&activity),
        [
            "zero 24",
            "log_softmax 24",
            // nll_loss: the f64 sum (of the 24 bytes it reads), the mean; total_weight.
            "zero 8",
            "nll_loss 24",
            "zero 4",
            "f64_div 4",
            "zero 4",
            "fill 4",
            // backward's seed.
            "zero 4",
            "fill 4",
            "zero 24",
            "nll_loss_backward 24",
            "zero 24",
            "log_softmax_backward 24",
        ]
    );
}

#[test]
fn the_kernels_written_apart_from_the_helpers_are_recorded_once_each() {
    use gpumem::ops;
    let dev = gpumem::testing::device();
    let mut x = dev
        .from_slice(&[1.0f32, -2.0, 3.0, f32::INFINITY, 5.0, 6.0])
        .unwrap();
    let bias = dev.from_slice(&[0.5f32; 3]).unwrap();
    let s = dev.from_slice(&[2.0f32]).unwrap();
    let mut sums = dev.alloc::<f32>(3).unwrap();
    let activity = recorded(&dev, || {
        ops::add_bias(&mut x, &bias, 2, 3).unwrap();
        ops::col_sum_into(&x, 2, 3, &mut sums, true).unwrap();
        assert!(ops::unscale_and_check(&mut x, 0.5).unwrap());
        ops::scale_by(&mut x, &s).unwrap();
        let total = ops::sum_to_device(&x, 1).unwrap();
        let b = x.try_clone().unwrap();
        ops::addcdiv(&mut x, 1.0, &b, &b).unwrap();
        ops::mul_in_place(&mut x, &b).unwrap();
        ops::relu_in_place(&mut x).unwrap();
        let _ = ops::gelu(&x).unwrap();
        ops::zero(&mut x).unwrap();
        drop(total);
    });
    assert_eq!(
        launches(&activity),
        [
            "add_bias 24",
            "col_sum_into 12",
            // unscale_and_check: its one-element flag, the kernel, the flag read back.
            "zero 4",
            "unscale_and_check 24",
            "copy:DeviceToHost 4",
            "scale_by 24",
            "zero 8",
            "sum_to_device 24",
            "zero 4",
            "f64_div 4",
            "copy:DeviceToDevice 24",
            "addcdiv 24",
            "mul_in_place 24",
            "relu_in_place 24",
            "zero 24",
            "gelu 24",
            // ops::zero: the same fill as alloc's.
            "zero 24",
        ]
    );
    // Off: the same ops record nothing.
    ops::add_bias(&mut x, &bias, 2, 3).unwrap();
    ops::zero(&mut x).unwrap();
    assert!(dev.activity().is_empty());
}

#[test]
fn a_cast_records_the_bytes_it_writes() {
    let dev = gpumem::testing::device();
    let x = dev.from_slice(&[1.0f32; 8]).unwrap();
    let activity = recorded(&dev, || {
        let _ = gpumem::ops::cast::<f32, half::f16>(&x).unwrap();
    });
    assert_eq!(launches(&activity), ["zero 16", "cast 16"]);
}
