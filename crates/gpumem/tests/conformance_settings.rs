//! The `settings` area of the conformance suite: gpumem's `GPUMEM_ALLOC_CONF` parser against
//! torch 2.15.0's allocator-settings parser, fact by fact.
//!
//! `conformance/goldens/settings.json` (written by `conformance/settings.py` with torch 2.15.0)
//! holds, for each scenario, the setting strings applied (`texts`), torch's error (`error`,
//! `error_type`) or, when torch accepted them, every value it parsed. This test applies the same
//! strings to a fresh [`AllocatorConfig`] and compares. A fact listed in
//! `conformance/simplifications.toml` is skipped with its reason; when the listed fact is a
//! scenario's `error` and torch accepted the strings, the scenario's values are skipped with it
//! (gpumem refused, so it has none to compare).

use gpumem::{AllocatorConfig, Error};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

const AREA: &str = "settings";

#[derive(Deserialize)]
struct Golden {
    area: String,
    torch_version: String,
    facts: Vec<Fact>,
}

#[derive(Deserialize)]
struct Fact {
    scenario: String,
    fact: String,
    value: Value,
}

#[derive(Deserialize)]
struct Simplification {
    area: String,
    scenario: String,
    fact: String,
    reason: String,
}

#[derive(Deserialize)]
struct Simplifications {
    #[serde(default)]
    simplification: Vec<Simplification>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> anyhow::Result<String> {
    let path = repo().join(path);
    std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
}

/// What gpumem makes of a scenario's strings: each fact's value, as the golden names them.
fn gpumem_facts(texts: &[String]) -> BTreeMap<&'static str, Value> {
    let mut config = AllocatorConfig::default();
    let mut facts = BTreeMap::new();
    for text in texts {
        if let Err(e) = config.apply(text) {
            let reason = match e {
                Error::BadSetting { reason, .. } => reason,
                other => other.to_string(),
            };
            facts.insert("error", json!(reason));
            // every refusal is a bad value, torch's ValueError
            facts.insert("error_type", json!("ValueError"));
            return facts;
        }
    }
    facts.insert("error", Value::Null);
    facts.insert("large_segment_size", json!(config.large_segment_size));
    facts.insert("max_split_size", json!(config.max_split_size));
    facts.insert(
        "max_non_split_rounding_size",
        json!(config.max_non_split_rounding_size),
    );
    facts.insert(
        "garbage_collection_threshold",
        json!(config.garbage_collection_threshold),
    );
    facts.insert(
        "roundup_power2_divisions",
        json!(config.roundup_power2_divisions),
    );
    facts.insert("expandable_segments", json!(config.expandable_segments));
    facts.insert(
        "pinned_use_background_threads",
        json!(config.pinned_use_background_threads),
    );
    facts.insert(
        "release_lock_on_cudamalloc",
        json!(config.release_lock_on_cudamalloc),
    );
    facts.insert(
        "pinned_use_cuda_host_register",
        json!(config.pinned_use_cuda_host_register),
    );
    facts.insert(
        "pinned_num_register_threads",
        json!(config.pinned_num_register_threads),
    );
    facts.insert(
        "graph_capture_record_stream_reuse",
        json!(config.graph_capture_record_stream_reuse),
    );
    facts.insert("pinned_free_catch_all", json!(config.pinned_free_catch_all));
    // gpumem refuses every other value of these three, so its value is always torch's default
    facts.insert("pinned_reserve_segment_size_mb", json!(0));
    facts.insert("per_process_memory_fraction", json!(1.0));
    facts.insert("throw_on_cudamalloc_oom", json!(false));
    facts.insert("settings", json!(config.text));
    facts
}

/// Equal as torch's JSON has them: numbers by value (2^64-1 exactly), the rest structurally.
fn same(torch: &Value, gpumem: &Value) -> bool {
    match (torch, gpumem) {
        (Value::Number(a), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
            (Some(a), Some(b)) => a == b,
            _ => a.as_f64() == b.as_f64(),
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        (a, b) => a == b,
    }
}

#[test]
fn the_settings_parser_matches_torch_2_15_fact_by_fact() -> anyhow::Result<()> {
    let golden: Golden = serde_json::from_str(&read("conformance/goldens/settings.json")?)?;
    assert_eq!(golden.area, AREA);
    let simplified: HashMap<(String, String), String> =
        toml::from_str::<Simplifications>(&read("conformance/simplifications.toml")?)?
            .simplification
            .into_iter()
            .filter(|s| s.area == AREA)
            .map(|s| ((s.scenario, s.fact), s.reason))
            .collect();
    for (scenario, fact) in simplified.keys() {
        assert!(
            golden
                .facts
                .iter()
                .any(|f| &f.scenario == scenario && &f.fact == fact),
            "simplifications.toml names {AREA} / {scenario} / {fact}, which the golden lacks"
        );
    }
    let mut by_scenario: BTreeMap<&str, Vec<&Fact>> = BTreeMap::new();
    for f in &golden.facts {
        by_scenario.entry(&f.scenario).or_default().push(f);
    }

    let (mut matched, mut skipped) = (0, 0);
    let mut problems = Vec::new();
    for (scenario, facts) in &by_scenario {
        let texts: Vec<String> = facts
            .iter()
            .find(|f| f.fact == "texts")
            .map(|f| serde_json::from_value(f.value.clone()))
            .transpose()?
            .unwrap_or_else(|| panic!("{scenario}: the golden has no texts"));
        let ours = gpumem_facts(&texts);
        let torch_accepted = facts.iter().any(|f| f.fact == "error" && f.value.is_null());
        let refusal_listed = simplified.contains_key(&(scenario.to_string(), "error".to_string()));
        for f in facts {
            if f.fact == "texts" {
                continue;
            }
            let key = (scenario.to_string(), f.fact.clone());
            if let Some(reason) = simplified.get(&key) {
                eprintln!("{scenario} / {}: not compared: {reason}", f.fact);
                skipped += 1;
                continue;
            }
            if torch_accepted && refusal_listed {
                skipped += 1; // gpumem refused these strings: it has no values to compare
                continue;
            }
            let gpumem = ours.get(f.fact.as_str()).cloned().unwrap_or(Value::Null);
            if same(&f.value, &gpumem) {
                matched += 1;
            } else {
                problems.push(format!(
                    "{scenario} / {}: torch {} {}, gpumem {}",
                    f.fact, golden.torch_version, f.value, gpumem
                ));
            }
        }
    }
    eprintln!(
        "conformance {AREA}: {} facts, {matched} match torch {}, {skipped} not compared",
        golden.facts.len(),
        golden.torch_version
    );
    assert!(
        problems.is_empty(),
        "{} facts differ from torch {}:\n{}",
        problems.len(),
        golden.torch_version,
        problems.join("\n")
    );
    Ok(())
}
