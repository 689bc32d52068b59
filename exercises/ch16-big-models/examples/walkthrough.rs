//! Chapter 16 walkthrough: a checkpoint of the page's model loaded the four ways, one after the
//! other, with the allocator's peak for each; one layer's weight stored as float32, bfloat16,
//! int8 and 4 bits; and a model run with half its layers offloaded, what it holds and copies.
//! Runs on `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu) and works unsolved: it
//! uses only gpumem and the chapter's given code (`given/`).
//!
//! `cargo run -p ch16-big-models --example walkthrough`

use anyhow::Context;
use ch16_given::{
    Loaded, Loading, Offloaded, Scale, Storage, WeightBytes, forward, measure_loading, store,
};
use ch16_predict::{predict_loading, predict_weight_bytes};
use gpumem::{Device, format_bytes};

/// The page's model: 4 x nn.Linear(1024, 1024), float32.
const LAYERS: usize = 4;
const WIDTH: usize = 1024;
/// The page's quantized weight: 1024 rows of 1000.
const ROWS: usize = 1024;
const COLS: usize = 1000;

/// Whether `predict` gives every measured answer (a prediction still `todo!()` does not: its
/// panic is caught, silently).
fn predictions_match(predict: impl Fn() -> bool + std::panic::UnwindSafe) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let matched = std::panic::catch_unwind(predict).unwrap_or(false);
    std::panic::set_hook(hook);
    matched
}

/// Whether `WORKBOOK_ANSWERS=show` asks for every table (as `workbook pictures` runs it, for the
/// page's closed reveals).
fn answers_shown() -> bool {
    std::env::var("WORKBOOK_ANSWERS").is_ok_and(|v| v == "show")
}

/// Prints `rows` under `header` when `shown`, else says which exercise they answer.
fn table(shown: bool, header: String, rows: Vec<String>, exercise: &str) {
    println!();
    if shown {
        println!("{header}");
        for row in rows {
            println!("{row}");
        }
    } else {
        println!(
            "  (measured, and kept until your predictions match: this table is {exercise}'s answer.\n   Predict first: `workbook check ch16`, then run this again.)"
        );
    }
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);

    println!("\n== Loading {LAYERS} x nn.Linear({WIDTH}, {WIDTH}), float32, four ways ==");
    let checkpoint: Vec<Vec<f32>> = (0..LAYERS)
        .flat_map(|_| [vec![0.5f32; WIDTH * WIDTH], vec![0.25f32; WIDTH]])
        .collect();
    let bytes: Vec<u64> = checkpoint.iter().map(|t| 4 * t.len() as u64).collect();
    println!(
        "  the checkpoint: {} tensors ({LAYERS} weights of {}, {LAYERS} biases of {})",
        checkpoint.len(),
        format_bytes(4 * (WIDTH * WIDTH) as u64),
        format_bytes(4 * WIDTH as u64)
    );
    let mut measured: Vec<(Loading, Loaded)> = Vec::new();
    for (i, loading) in [
        Loading::BuildThenLoad,
        Loading::Mmap,
        Loading::MetaAssign,
        Loading::MetaMmapAssign,
    ]
    .into_iter()
    .enumerate()
    {
        dev.record_annotation(&format!("{}. {loading:?}", i + 1));
        measured.push((loading, measure_loading(&dev, loading, &checkpoint)?));
    }
    let rows = measured
        .iter()
        .map(|(loading, loaded)| {
            format!(
                "  {:<16} {:>16} {:>14}",
                format!("{loading:?}"),
                format_bytes(loaded.peak_allocated),
                format_bytes(loaded.file_backed)
            )
        })
        .collect();
    let shown = answers_shown()
        || predictions_match(|| {
            measured
                .iter()
                .all(|&(loading, loaded)| predict_loading(loading, &bytes) == loaded)
        });
    table(
        shown,
        format!(
            "  {:<16} {:>16} {:>14}",
            "loading", "peak allocated", "file-backed"
        ),
        rows,
        "exercise 1",
    );

    println!("\n== One weight of {ROWS} x {COLS}, stored five ways ==");
    let weight: Vec<f32> = (0..ROWS * COLS).map(|i| (i % 17) as f32 - 8.0).collect();
    let mut stored: Vec<(Storage, WeightBytes)> = Vec::new();
    for storage in [
        Storage::F32,
        Storage::Bf16,
        Storage::Int8PerRow { scale: Scale::F32 },
        Storage::Int4PerGroup {
            group: 128,
            scale: Scale::Bf16,
        },
        Storage::Int4PerGroup {
            group: 32,
            scale: Scale::Bf16,
        },
    ] {
        stored.push((storage, store(&dev, &weight, ROWS, COLS, storage)?.bytes()));
    }
    let rows = stored
        .iter()
        .map(|(storage, bytes)| {
            format!(
                "  {:<48} {:>10} {:>8} {:>10}",
                format!("{storage:?}"),
                bytes.values,
                bytes.scales,
                bytes.values + bytes.scales
            )
        })
        .collect();
    let shown = answers_shown()
        || predictions_match(|| {
            stored.iter().all(|&(storage, bytes)| {
                predict_weight_bytes(ROWS as u64, COLS as u64, storage) == bytes
            })
        });
    table(
        shown,
        format!(
            "  {:<48} {:>10} {:>8} {:>10}",
            "storage", "values", "scales", "total"
        ),
        rows,
        "exercise 2",
    );

    println!("\n== 8 layers of 1 MiB, 4 on the device, 4 streamed through one buffer ==");
    dev.record_annotation("5. Offloading: 4 layers resident, one buffer");
    let layers: Vec<Vec<f32>> = (0..8).map(|i| vec![i as f32; 1 << 18]).collect();
    let input = vec![1.0f32; 1 << 16];
    dev.reset_peak_memory_stats();
    let start = dev.memory_allocated();
    let mut model = Offloaded {
        resident: layers[..4]
            .iter()
            .map(|l| dev.from_slice(l))
            .collect::<gpumem::Result<Vec<_>>>()?,
        prefetch: Some(dev.alloc::<f32>(1 << 18)?),
        activations: dev.alloc::<f32>(input.len())?,
    };
    println!(
        "  placed:  allocated {} (4 layers, the buffer, 256 KiB of activations)",
        format_bytes(dev.memory_allocated() - start)
    );
    dev.reset_transfer_stats();
    let out = forward(&mut model, &layers, &input)?;
    let copies = dev.transfer_stats().host_to_device;
    println!(
        "  forward: peak allocated {}; host-to-device copies {} ({}): the 4 offloaded layers\n           (4 MiB), and the activations written at the start and after each of the 8 layers",
        format_bytes(dev.max_memory_allocated() - start),
        copies.copies,
        format_bytes(copies.bytes)
    );
    anyhow::ensure!(
        out.len() == input.len(),
        "the forward pass gave {} values",
        out.len()
    );
    snapshot.write(&dev)?;
    drop(model);
    Ok(())
}
