//! Chapter 4 walkthrough: the numbers `memory_stats()` keeps, the peak that sampling misses, a
//! leak, and fragmentation. Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu)
//! and works unsolved.
//!
//! `cargo run -p ch04-memory-stats --example walkthrough`

use anyhow::Context;
use ch04_memory_stats::{
    FRAGMENT_SIZES, MIB, Mlp, fragment, sampled_peak, source_loop, train_keeping_device_losses,
    training_step, workspace_op,
};
use gpumem::Device;

/// An MNIST classifier's shape (784 pixels, 256 hidden units, 10 classes); the prediction
/// exercise uses another model, so this output does not give its answers away.
const MNIST_SHAPE: [(usize, usize); 2] = [(784, 256), (256, 10)];

/// The keys this walkthrough prints, in torch's names.
const KEYS: [&str; 7] = [
    "requested_bytes.all.current",
    "allocated_bytes.all.current",
    "reserved_bytes.all.current",
    "allocated_bytes.all.peak",
    "segment.small_pool.current",
    "segment.large_pool.current",
    "inactive_split_bytes.all.current",
];

/// Prints the chapter's keys from `memory_stats()`.
fn show_stats(dev: &Device) {
    let stats = dev.memory_stats();
    for key in KEYS {
        println!("  {key:<34} {:>10}", stats.get(key).unwrap_or(0));
    }
}

/// Bytes as a count of whole MiB when exact, else in bytes.
fn exact(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} B")
    }
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);

    dev.record_annotation("1. A model's size");
    println!("\n== A model's size: parameters versus blocks ==");
    let mlp = Mlp::new(&dev, &MNIST_SHAPE)?;
    let numel: usize = mlp.parameters().map(|p| p.len()).sum();
    println!(
        "Mlp {MNIST_SHAPE:?}: {numel} parameters x 4 B = {} B",
        numel * 4
    );
    for p in mlp.parameters() {
        println!(
            "  buffer of {:>7} f32: {:>7} B asked for, block of {:>7} B",
            p.len(),
            p.size_bytes(),
            p.block_bytes()
        );
    }
    show_stats(&dev);
    print!("\n{}", dev.memory_summary());
    drop(mlp);
    dev.empty_cache();

    dev.record_annotation("2. 11 MiB + 400 B asked for");
    println!("\n== 11 MiB + 400 B asked for, 12 MiB handed out ==");
    let big = dev.alloc::<f32>(((11 * MIB + 400) / 4) as usize)?;
    println!(
        "  block {} for a request of {} B (the 1 MiB - 512 B left is too little to split off)",
        exact(big.block_bytes() as u64),
        big.size_bytes()
    );
    drop(big);
    dev.empty_cache();

    dev.record_annotation("3. The peak inside an operation");
    println!("\n== The peak inside an operation ==");
    let x = dev.alloc::<f32>((2 * MIB / 4) as usize)?;
    println!("  x: 2 MiB; workspace_op(x) makes two 2 MiB temporaries and a 2 MiB output");
    let sampled = sampled_peak(&x, 3)?;
    dev.reset_peak_memory_stats();
    let y = workspace_op(&x)?;
    println!(
        "  max of memory_allocated() sampled between calls: {}",
        exact(sampled)
    );
    println!(
        "  reset_peak_memory_stats(); op; max_memory_allocated(): {}",
        exact(dev.max_memory_allocated())
    );
    drop((x, y));
    dev.empty_cache();

    dev.record_annotation("4. The source's loop");
    println!("\n== The source's loop: x_gpu = x.to('cuda') three times ==");
    dev.reset_peak_memory_stats();
    let sampled = source_loop(&dev, 3)?;
    println!(
        "  the loop's hand-rolled maximum:           {}",
        exact(sampled)
    );
    println!(
        "  max_memory_allocated() over the same loop: {}",
        exact(dev.max_memory_allocated())
    );
    dev.empty_cache();

    dev.record_annotation("5. Keeping every step's loss");
    println!("\n== Keeping every step's loss on the device ==");
    let model = Mlp::new(&dev, &[(256, 256)])?;
    let base = dev.memory_allocated();
    println!("  model: {base} B allocated");
    for steps in [1, 2, 4, 8] {
        let kept = train_keeping_device_losses(&model, steps)?;
        println!(
            "  {steps} losses kept as device buffers: memory_allocated - model = {:>5} B",
            dev.memory_allocated() - base
        );
        drop(kept);
    }
    let mut losses = Vec::new();
    for step in 0..8 {
        let loss = training_step(&model, step)?;
        losses.push(loss.to_vec()?[0]);
    }
    println!(
        "  8 losses copied to the host:     memory_allocated - model = {:>5} B",
        dev.memory_allocated() - base
    );
    drop(model);
    dev.empty_cache();

    dev.record_annotation("6. Host memory is not device memory");
    println!("\n== Host memory is not device memory ==");
    let before = dev.memory_allocated();
    let host = vec![1.0f32; (4 * MIB / 4) as usize];
    println!(
        "  a 4 MiB Vec<f32> on the host: memory_allocated {} -> {}",
        before,
        dev.memory_allocated()
    );
    drop(host);

    dev.record_annotation("7. Fragmentation");
    println!("\n== Fragmentation (the answer to predict_fragmented) ==");
    // Peaks and totals from here on belong to this scenario alone.
    dev.reset_peak_memory_stats();
    dev.reset_accumulated_memory_stats();
    let live = fragment(&dev, FRAGMENT_SIZES.0, FRAGMENT_SIZES.1)?;
    // The chapter's pictures end here, with the fragmented segments.
    snapshot.write(&dev)?;
    println!("  four 4 MiB buffers; drop the 1st and 3rd; then ask for 6 MiB");
    show_stats(&dev);
    dev.empty_cache();
    println!(
        "  after empty_cache(): reserved {}",
        exact(dev.memory_reserved())
    );
    print!("\n{}", dev.memory_summary());
    drop(live);
    dev.empty_cache();
    Ok(())
}
