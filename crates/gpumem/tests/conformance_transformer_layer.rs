//! torch 2.15's saved tensors of one GPT layer (`conformance/goldens/transformer_layer.json`,
//! recorded in bf16 on the CPU by `conformance/transformer_layer.py`), accounted for byte by byte:
//! the paper's formula, plus the CPU's 2-byte dropout masks, plus its bf16 LayerNorm statistics.
//! Corrected for CUDA (1-byte `native_dropout` masks, f32 statistics), torch's bytes are what
//! gpumem's layer measures with [`LayerPlan::torch`], shape by shape.

use gpumem::autograd::{GptLayer, LayerPlan, Tensor};
use gpumem::bf16;
use gpumem::ops::XorShift;
use gpumem::testing::device;
use serde_json::Value;

fn golden() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../conformance/goldens/transformer_layer.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `(s, b, h, a)` from a scenario `"s=128 b=2 h=128 a=4"`.
fn shape(scenario: &str) -> [u64; 4] {
    let v: Vec<u64> = scenario
        .split(' ')
        .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap())
        .collect();
    [v[0], v[1], v[2], v[3]]
}

/// The bytes of the storages saved under one paper term.
fn term_bytes(storages: &Value, term: &str) -> u64 {
    storages
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["terms"].as_array().unwrap().iter().any(|t| t == term))
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn torchs_saved_bytes_are_the_formula_plus_mask_width_plus_layer_norm_statistics() {
    let golden = golden();
    assert_eq!(golden["torch_version"], "2.15.0");
    let mut mismatches = Vec::new();
    let facts = golden["facts"].as_array().unwrap();
    for fact in facts.iter().filter(|f| f["fact"] == "saved_storages") {
        let scenario = fact["scenario"].as_str().unwrap();
        let [s, b, h, a] = shape(scenario);
        let total: u64 = facts
            .iter()
            .find(|f| f["scenario"] == scenario && f["fact"] == "saved_bytes")
            .and_then(|f| f["value"].as_u64())
            .unwrap();
        let paper = s * b * h * 34 + 5 * a * s * s * b;
        // The CPU's masks are bf16: one byte more per element than CUDA's, for a·s²·b + 2·s·b·h
        // elements.
        let mask_elements = a * s * s * b + 2 * s * b * h;
        let masks = term_bytes(&fact["value"], "dropout mask");
        // Two LayerNorms keep mean and rstd of s·b rows: bf16 on the CPU.
        let stats = term_bytes(&fact["value"], "layernorm mean")
            + term_bytes(&fact["value"], "layernorm rstd");
        let checks = [
            (
                "dropout masks (2 bytes per element)",
                masks,
                2 * mask_elements,
            ),
            ("layernorm statistics (bf16)", stats, 4 * s * b * 2),
            ("total", total, paper + mask_elements + 4 * s * b * 2),
        ];
        for (what, torch, want) in checks {
            if torch != want {
                mismatches.push(format!("{scenario} {what}: torch {torch}, expected {want}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn torchs_bytes_corrected_for_cuda_are_gpumems_measured_bytes() {
    let golden = golden();
    let facts = golden["facts"].as_array().unwrap();
    let mut mismatches = Vec::new();
    for fact in facts.iter().filter(|f| f["fact"] == "saved_bytes") {
        let scenario = fact["scenario"].as_str().unwrap();
        let [s, b, h, a] = shape(scenario);
        let torch_cpu = fact["value"].as_u64().unwrap();
        // CUDA: masks of 1 byte (one byte less per element), statistics in f32 (2 more).
        let torch_cuda = torch_cpu - (a * s * s * b + 2 * s * b * h) + 4 * s * b * 2;
        let dev = device();
        let mut rng = XorShift::new(1);
        let layer: GptLayer<bf16> = GptLayer::<f32>::new(&dev, h as usize, a as usize, &mut rng)
            .unwrap()
            .cast()
            .unwrap();
        let x = Tensor::<bf16>::uniform(
            &dev,
            &[b as usize, s as usize, h as usize],
            -1.0,
            1.0,
            &mut rng,
        )
        .unwrap()
        .requires_grad_(true)
        .unwrap();
        let before = dev.memory_allocated();
        let out = layer.forward(&x, &LayerPlan::torch()).unwrap();
        let measured = dev.memory_allocated() - before;
        drop(out);
        if measured != torch_cuda {
            mismatches.push(format!(
                "{scenario}: torch 2.15 (cpu, corrected for cuda) {torch_cuda}, gpumem {measured}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
