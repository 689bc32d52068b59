//! Graded tests for chapter 16: big models.

// The measurements and the forward pass come from the given crate, never from your `src/`.
use ch16_big_models::offload;
use ch16_given::{
    Loaded, Loading, OffloadError, Scale, Storage, WeightBytes, block, forward, measure_loading,
    store,
};
use ch16_predict::{predict_loading, predict_weight_bytes};
use gpumem::testing::{Draw, Prediction};

const LOADINGS: [Loading; 4] = [
    Loading::BuildThenLoad,
    Loading::Mmap,
    Loading::MetaAssign,
    Loading::MetaMmapAssign,
];

/// A checkpoint with tensors of these lengths (float32), each filled with its own values.
fn checkpoint(lengths: &[usize]) -> Vec<Vec<f32>> {
    lengths
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * 7 + j % 13) as f32).collect())
        .collect()
}

/// The page's model: `layers` nn.Linear(width, width), a weight and a bias each.
fn linear_layers(layers: usize, width: usize) -> Vec<usize> {
    (0..layers).flat_map(|_| [width * width, width]).collect()
}

/// Checks the loading prediction for a checkpoint of tensors of `lengths` against a run.
fn check_loading(dev: &gpumem::Device, lengths: &[usize]) -> anyhow::Result<()> {
    let tensors = checkpoint(lengths);
    let bytes: Vec<u64> = lengths.iter().map(|&n| 4 * n as u64).collect();
    for loading in LOADINGS {
        // The prediction is made before anything runs.
        let predicted: Loaded = predict_loading(loading, &bytes);
        let measured = measure_loading(dev, loading, &tensors)?;
        Prediction::new(format!(
            "your prediction for {loading:?} of tensors of {bytes:?} bytes"
        ))
        .bytes(
            "peak_allocated",
            predicted.peak_allocated,
            measured.peak_allocated,
        )
        .rule(
            "each tensor the allocator holds is a block rounded up to 512 B; which copies \
             (the model's weights, the loaded state dict) are alive at once while loading",
        )
        .bytes("file_backed", predicted.file_backed, measured.file_backed)
        .rule("the weights that stay views of the mapped file, in bytes (not blocks)")
        .check();
    }
    Ok(())
}

#[test]
fn loading_prediction_at_the_pages_sizes_matches() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    check_loading(&dev, &linear_layers(4, 1024))
}

#[test]
fn loading_prediction_at_block_edges_matches() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    // 4 B, 508 B, exactly 512 B and 516 B: one block, one, one, two.
    check_loading(&dev, &[1, 127, 128, 129])
}

#[test]
fn loading_prediction_at_drawn_sizes_matches() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let mut draw = Draw::from_env();
        let tensors = draw.size(1, 8);
        let lengths: Vec<usize> = (0..tensors).map(|_| draw.size(1, 300_000)).collect();
        check_loading(&dev, &lengths)
    })
}

/// Every storage the page shows.
fn storages() -> Vec<Storage> {
    let mut all = vec![Storage::F32, Storage::Bf16];
    for scale in [Scale::F32, Scale::Bf16] {
        all.push(Storage::Int8PerRow { scale });
        for group in [32, 64, 128] {
            all.push(Storage::Int4PerGroup { group, scale });
        }
    }
    all
}

/// Checks the bytes predicted for a `rows` × `cols` weight stored as `storage` against the
/// bytes `store` put on the device.
fn check_weight_bytes(
    dev: &gpumem::Device,
    rows: usize,
    cols: usize,
    storage: Storage,
) -> anyhow::Result<()> {
    let predicted: WeightBytes = predict_weight_bytes(rows as u64, cols as u64, storage);
    let weight: Vec<f32> = (0..rows * cols).map(|i| (i % 17) as f32 - 8.0).collect();
    let measured = store(dev, &weight, rows, cols, storage)?.bytes();
    Prediction::new(format!(
        "your prediction for a weight of {rows} x {cols} as {storage:?}"
    ))
    .bytes("values", predicted.values, measured.values)
    .rule(
        "bytes per value: 4 (f32), 2 (bf16), 1 (int8), a half (4-bit, two to a byte along a \
         row: a row of odd length ends in half a byte)",
    )
    .bytes("scales", predicted.scales, measured.scales)
    .rule(
        "one scale per row (int8) or per group of a row (4-bit; the last group of a row may be \
         short), 4 or 2 bytes each",
    )
    .check();
    Ok(())
}

#[test]
fn weight_bytes_prediction_at_the_pages_sizes_matches() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    for storage in storages() {
        check_weight_bytes(&dev, 1024, 1000, storage)?;
    }
    Ok(())
}

#[test]
fn weight_bytes_prediction_at_odd_edges_matches() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    // A row of odd length; a group longer than a row; a group of one; groups that divide a row.
    for (rows, cols, group) in [(3, 7, 4), (5, 9, 16), (2, 5, 1), (4, 64, 32)] {
        for scale in [Scale::F32, Scale::Bf16] {
            for storage in [
                Storage::Int8PerRow { scale },
                Storage::Int4PerGroup { group, scale },
            ] {
                check_weight_bytes(&dev, rows, cols, storage)?;
            }
        }
    }
    Ok(())
}

#[test]
fn weight_bytes_prediction_at_drawn_sizes_matches() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let mut draw = Draw::from_env();
        let (rows, cols) = (draw.size(1, 300), draw.size(1, 300));
        let scale = draw.pick(&[Scale::F32, Scale::Bf16]);
        let group = draw.range(1, 2 * cols as u64);
        for storage in [
            Storage::F32,
            Storage::Bf16,
            Storage::Int8PerRow { scale },
            Storage::Int4PerGroup { group, scale },
        ] {
            check_weight_bytes(&dev, rows, cols, storage)?;
        }
        Ok(())
    })
}

/// `count` layers of `len` float32 values, each with its own values.
fn layers(count: usize, len: usize) -> Vec<Vec<f32>> {
    (0..count)
        .map(|i| (0..len).map(|j| ((i * 31 + j) % 11) as f32).collect())
        .collect()
}

/// The forward pass computed on the host alone.
fn on_the_host(layers: &[Vec<f32>], input: &[f32]) -> Vec<f32> {
    let mut x = input.to_vec();
    for layer in layers {
        let sum: f32 = layer.iter().sum();
        x = x.iter().map(|v| 0.5 * v + sum).collect();
    }
    x
}

/// The most layers of `layer` bytes that fit with activations of `acts` bytes under `budget`:
/// all when they fit, else those that fit beside one layer's buffer.
fn most_that_fit(count: u64, layer: u64, acts: u64, budget: u64) -> u64 {
    let (layer, acts) = (block(layer), block(acts));
    if count * layer + acts <= budget {
        count
    } else {
        (budget - acts - layer) / layer
    }
}

/// Offloads `count` layers of `len` values with `acts` values of activations under `budget`,
/// runs the forward pass, and checks the count kept, the peak and the result.
fn check_offload(
    dev: &gpumem::Device,
    count: usize,
    len: usize,
    acts: usize,
    budget: u64,
) -> anyhow::Result<()> {
    let model = layers(count, len);
    let input: Vec<f32> = (0..acts).map(|i| i as f32).collect();
    dev.synchronize()?;
    dev.reset_peak_memory_stats();
    let start = dev.memory_allocated();
    let mut offloaded = offload(dev, &model, acts, budget)?;
    let expected = most_that_fit(count as u64, 4 * len as u64, 4 * acts as u64, budget);
    assert_eq!(
        offloaded.resident.len() as u64,
        expected,
        "layers kept on the device for {count} layers of {len} floats, {acts} floats of \
         activations, a budget of {budget} B: as many as fit (blocks of 512 B), beside one \
         layer's buffer when not all do"
    );
    for (i, resident) in offloaded.resident.iter().enumerate() {
        assert!(
            resident.to_vec()? == model[i],
            "resident layer {i} holds layer {i}'s weights, all of them"
        );
    }
    if let Some(prefetch) = &offloaded.prefetch {
        assert_eq!(
            prefetch.len(),
            len,
            "the prefetch buffer holds one layer: {len} floats"
        );
    }
    assert_eq!(
        offloaded.activations.len(),
        acts,
        "the activations buffer holds {acts} floats"
    );
    let out = forward(&mut offloaded, &model, &input)?;
    let peak = dev.max_memory_allocated() - start;
    assert!(
        peak <= budget,
        "max_memory_allocated() went {peak} B over the start, over the budget of {budget} B"
    );
    assert_eq!(
        out,
        on_the_host(&model, &input),
        "the forward pass through the offloaded model gives what the host computes"
    );
    Ok(())
}

#[test]
fn offload_keeps_every_layer_when_all_fit() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    let model = layers(4, 1000);
    // 4 layers of 4,096 B blocks and 1,024 B of activations: 17,408 B exactly.
    let offloaded = offload(&dev, &model, 256, 17_408)?;
    assert_eq!(
        offloaded.resident.len(),
        4,
        "every layer fits: all stay on the device"
    );
    assert!(
        offloaded.prefetch.is_none(),
        "with every layer on the device there is nothing to copy in: no prefetch buffer"
    );
    drop(offloaded);
    check_offload(&dev, 4, 1000, 256, 17_408)
}

#[test]
fn offload_keeps_the_most_layers_that_fit_with_one_buffer() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    // One byte short of all four: two resident and the buffer (3 x 4,096 + 1,024 = 13,312 B).
    check_offload(&dev, 4, 1000, 256, 17_407)?;
    // Layers of 1,001 floats are blocks of 4,096 B too; of 1,025 floats, 4,608 B.
    check_offload(&dev, 6, 1001, 256, 20_000)?;
    check_offload(&dev, 6, 1025, 100, 20_000)?;
    // Room for the buffer alone.
    check_offload(&dev, 3, 1000, 256, 4_096 + 1_024)
}

#[test]
fn offload_refuses_a_budget_too_small_with_an_error() {
    let dev = gpumem::testing::device();
    let start = dev.memory_allocated();
    match offload(&dev, &layers(3, 1000), 256, 5_119) {
        Err(OffloadError::TooSmall { budget, needed }) => {
            assert_eq!(
                (budget, needed),
                (5_119, 5_120),
                "the error names the budget and what one layer's buffer and the activations need"
            );
        }
        other => panic!(
            "a budget below one layer's buffer and the activations is an error \
             (OffloadError::TooSmall), not {other:?}"
        ),
    }
    assert_eq!(
        dev.memory_allocated(),
        start,
        "nothing is left allocated after refusing"
    );
}

#[test]
fn offload_at_drawn_sizes_keeps_the_most_that_fit_within_the_budget() -> anyhow::Result<()> {
    gpumem::testing::seeded(|| {
        let dev = gpumem::testing::device();
        let mut draw = Draw::from_env();
        let (count, len, acts) = (draw.size(1, 12), draw.size(1, 5000), draw.size(1, 5000));
        let least = block(4 * acts as u64) + block(4 * len as u64);
        let all = count as u64 * block(4 * len as u64) + block(4 * acts as u64);
        let budget = draw.range(least, all + 4096);
        check_offload(&dev, count, len, acts, budget)
    })
}
