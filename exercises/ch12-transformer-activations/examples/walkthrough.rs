//! Chapter 12 walkthrough: one GPT layer in bf16, measured with `memory_allocated` as the paper
//! counts it, as torch keeps it, with its attention core checkpointed, with fused attention, and
//! checkpointed whole; torch 2.15's own bytes (`conformance/goldens/transformer_layer.json`)
//! corrected for CUDA beside them; and the longest sequence that fits a budget each way. Runs on
//! `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu) and works unsolved: it uses only
//! the chapter's given code and gpumem's reference forward (`GptLayer::forward`).
//!
//! `cargo run -p ch12-transformer-activations --example walkthrough`

use anyhow::Context;
use ch12_transformer_activations::{Shape, bf16_layer, layer_input};
use gpumem::Device;
use gpumem::autograd::{AttentionBackend, GptLayer, LayerPlan, Tensor, checkpoint};
use gpumem::bf16;
use gpumem::ops::XorShift;
use std::rc::Rc;

/// The shapes torch's golden file holds.
const SHAPES: [Shape; 3] = [
    Shape {
        s: 128,
        b: 2,
        h: 128,
        a: 4,
    },
    Shape {
        s: 256,
        b: 2,
        h: 128,
        a: 4,
    },
    Shape {
        s: 512,
        b: 1,
        h: 128,
        a: 8,
    },
];

/// `s·b·h·(34 + 5·a·s/h)`.
fn formula(sh: Shape) -> u64 {
    34 * sh.s * sh.b * sh.h + 5 * sh.a * sh.s * sh.s * sh.b
}

/// The plans of the chapter, by name.
fn plans() -> Vec<(&'static str, LayerPlan)> {
    let torch = LayerPlan::torch();
    vec![
        ("paper's layer", LayerPlan::paper()),
        ("torch's layer", torch),
        (
            "core checkpointed",
            LayerPlan {
                checkpoint_core: true,
                ..torch
            },
        ),
        (
            "flash",
            LayerPlan {
                backend: AttentionBackend::Flash,
                ..torch
            },
        ),
        (
            "memory-efficient",
            LayerPlan {
                backend: AttentionBackend::MemoryEfficient,
                ..torch
            },
        ),
    ]
}

/// What one forward pass leaves allocated above its input, with its output held.
fn kept(
    dev: &Device,
    layer: &GptLayer<bf16>,
    x: &Tensor<bf16>,
    plan: &LayerPlan,
) -> anyhow::Result<u64> {
    let before = dev.memory_allocated();
    let out = layer.forward(x, plan)?;
    let kept = dev.memory_allocated() - before;
    drop(out);
    Ok(kept)
}

/// The same, with the whole layer under one checkpoint (it keeps its input only).
fn kept_whole_checkpoint(
    dev: &Device,
    layer: &Rc<GptLayer<bf16>>,
    x: &Tensor<bf16>,
) -> anyhow::Result<u64> {
    let before = dev.memory_allocated();
    let inner = layer.clone();
    let run = move |t: &[Tensor<bf16>]| inner.forward(&t[0], &LayerPlan::torch());
    let out = checkpoint(run, std::slice::from_ref(x))?;
    let kept = dev.memory_allocated() - before;
    drop(out);
    Ok(kept)
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// torch's saved bytes per shape from the golden file.
fn torch_cpu_bytes() -> anyhow::Result<Vec<(String, u64)>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../conformance/goldens/transformer_layer.json"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let golden: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {path}"))?;
    let facts = golden["facts"]
        .as_array()
        .context("the golden file has no facts")?;
    Ok(facts
        .iter()
        .filter(|f| f["fact"] == "saved_bytes")
        .filter_map(|f| Some((f["scenario"].as_str()?.to_string(), f["value"].as_u64()?)))
        .collect())
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");
    let mut rng = XorShift::new(12);

    println!("\n== 1. One bf16 GPT layer: what a forward pass keeps (KiB) ==");
    println!(
        "  {:<24} {:>11} {:>14} {:>14} {:>17} {:>10} {:>17} {:>16}",
        "shape",
        "formula",
        "paper's layer",
        "torch's layer",
        "core checkpointed",
        "flash",
        "memory-efficient",
        "whole layer ckpt"
    );
    let snapshot = gpumem::SnapshotRequest::from_env(&dev);
    let mut measured = Vec::new();
    for (i, sh) in SHAPES.into_iter().enumerate() {
        let layer = Rc::new(bf16_layer(&dev, sh.h as usize, sh.a as usize, &mut rng)?);
        let x = layer_input(&dev, sh, &mut rng)?;
        if i == 0 {
            dev.record_annotation("1. s=128 b=2 h=128 a=4, six ways");
        }
        let mut row = Vec::new();
        for (_, plan) in plans() {
            row.push(kept(&dev, &layer, &x, &plan)?);
        }
        row.push(kept_whole_checkpoint(&dev, &layer, &x)?);
        if i == 0 {
            // The pictures end here: the first shape's six forward passes, one after the other.
            snapshot.write(&dev)?;
        }
        print!("  {:<24} {:>11}", sh.to_string(), kib(formula(sh)));
        for (bytes, width) in row.iter().zip([14, 14, 17, 10, 17, 16]) {
            print!(" {:>width$}", kib(*bytes));
        }
        println!();
        measured.push(row);
    }

    println!("\n== 2. torch 2.15 (bf16, cpu) against the formula, corrected for CUDA (bytes) ==");
    println!(
        "  {:<24} {:>10} {:>11} {:>9} {:>12} {:>9} {:>11} {:>11} {:>10}",
        "shape",
        "formula",
        "torch cpu",
        "over",
        "− masks",
        "+ stats",
        "torch cuda",
        "gpumem",
        "cuda over"
    );
    let torch = torch_cpu_bytes()?;
    for (sh, row) in SHAPES.into_iter().zip(&measured) {
        let Some((_, cpu)) = torch
            .iter()
            .find(|(scenario, _)| *scenario == sh.to_string())
        else {
            println!("  {sh}: not in the golden file");
            continue;
        };
        let Shape { s, b, h, a } = sh;
        let masks = a * s * s * b + 2 * s * b * h;
        let stats = 4 * s * b * 2;
        let cuda = cpu - masks + stats;
        let paper = formula(sh);
        println!(
            "  {:<24} {:>10} {:>11} {:>8.1}% {:>12} {:>9} {:>11} {:>11} {:>10}",
            sh.to_string(),
            paper,
            cpu,
            (*cpu as f64 / paper as f64 - 1.0) * 100.0,
            format!("−{masks}"),
            format!("+{stats}"),
            cuda,
            row[1],
            cuda - paper
        );
    }

    println!(
        "\n== 3. How much of a layer each way keeps, against torch's layer (math attention) =="
    );
    println!(
        "  {:<24} {:>17} {:>10} {:>17} {:>16}",
        "shape", "core checkpointed", "flash", "memory-efficient", "whole layer ckpt"
    );
    for (sh, row) in SHAPES.into_iter().zip(&measured) {
        let pct = |bytes: u64| format!("{:.1} %", bytes as f64 / row[1] as f64 * 100.0);
        println!(
            "  {:<24} {:>17} {:>10} {:>17} {:>16}",
            sh.to_string(),
            pct(row[2]),
            pct(row[3]),
            pct(row[4]),
            pct(row[5])
        );
    }

    let (layers, budget) = (4u64, 8u64 << 20);
    println!(
        "\n== 4. The longest sequence for {layers} layers of h=128 a=4 b=1 in {} MiB, measured ==",
        budget >> 20
    );
    let sh = Shape {
        s: 0,
        b: 1,
        h: 128,
        a: 4,
    };
    let layer = bf16_layer(&dev, 128, 4, &mut rng)?;
    for (what, plan) in plans().into_iter().skip(1) {
        let mut at = |s: u64| -> anyhow::Result<u64> {
            let x = layer_input(&dev, Shape { s, ..sh }, &mut rng)?;
            Ok(layers * kept(&dev, &layer, &x, &plan)?)
        };
        // The bytes grow with s: bisect between a length that fits and one that does not.
        let (mut low, mut high) = (1, 2);
        while at(high)? <= budget {
            (low, high) = (high, high * 2);
        }
        while high - low > 1 {
            let mid = (low + high) / 2;
            if at(mid)? <= budget {
                low = mid;
            } else {
                high = mid;
            }
        }
        println!("  {what:<18} s = {low:>5}  ({} kept)", kib(at(low)?));
    }
    Ok(())
}
