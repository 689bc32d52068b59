//! Shared by the `conformance_<area>` tests: loads a golden recorded from torch 2.15.0
//! (`conformance/goldens/<area>.json`), compares gpumem's values fact by fact, skips the facts
//! listed in `conformance/simplifications.toml`, and writes the area's table for the book.

#![allow(dead_code)] // each test file uses part of it

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[derive(Deserialize)]
struct Golden {
    area: String,
    torch_version: String,
    facts: Vec<GoldenFact>,
}

#[derive(Deserialize)]
struct GoldenFact {
    scenario: String,
    fact: String,
    value: Value,
}

/// One entry of `conformance/simplifications.toml`.
#[derive(Deserialize, Clone)]
pub struct Simplification {
    pub area: String,
    pub scenario: String,
    pub fact: String,
    pub reason: String,
}

#[derive(Deserialize)]
struct SimplificationFile {
    #[serde(default)]
    simplification: Vec<Simplification>,
}

/// Every simplification, in file order.
pub fn simplifications() -> Vec<Simplification> {
    let path = repo().join("conformance/simplifications.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let file: SimplificationFile =
        toml::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    file.simplification
}

/// Checks (or, with `GPUMEM_BLESS=1`, writes) the book's table of every simplification.
pub fn simplifications_table() {
    let mut out = String::from(
        "<!-- Written by crates/gpumem/tests/conformance_errors.rs from \
         conformance/simplifications.toml; GPUMEM_BLESS=1 rewrites it. -->\n\n\
         | area | scenario | fact | why gpumem does not compare it |\n|---|---|---|---|\n",
    );
    for s in simplifications() {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            escape(&s.area),
            escape(&s.scenario),
            escape(&s.fact),
            escape(&s.reason)
        ));
    }
    compare_or_bless("book/src/conformance/simplifications.md", &out);
}

/// What one fact came to.
enum Outcome {
    Match(Value),
    Mismatch(Value),
    Simplified(String),
}

/// One area's comparison in progress.
pub struct Conformance {
    area: String,
    torch_version: String,
    facts: Vec<GoldenFact>,
    index: HashMap<(String, String), usize>,
    simplified: HashMap<(String, String), String>,
    outcomes: HashMap<usize, Outcome>,
}

impl Conformance {
    /// Loads `conformance/goldens/<area>.json` and the area's simplifications.
    pub fn load(area: &str) -> Conformance {
        let path = repo().join(format!("conformance/goldens/{area}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let golden: Golden = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
        assert_eq!(golden.area, area, "{} names another area", path.display());
        let index = golden
            .facts
            .iter()
            .enumerate()
            .map(|(i, f)| ((f.scenario.clone(), f.fact.clone()), i))
            .collect::<HashMap<_, _>>();
        let simplified: HashMap<(String, String), String> = simplifications()
            .into_iter()
            .filter(|s| s.area == area)
            .map(|s| ((s.scenario, s.fact), s.reason))
            .collect();
        for (scenario, fact) in simplified.keys() {
            assert!(
                index.contains_key(&(scenario.clone(), fact.clone())),
                "simplifications.toml names {area} / {scenario} / {fact}, which the golden lacks"
            );
        }
        Conformance {
            area: area.to_string(),
            torch_version: golden.torch_version,
            facts: golden.facts,
            index,
            simplified,
            outcomes: HashMap::new(),
        }
    }

    fn position(&self, scenario: &str, fact: &str) -> usize {
        *self
            .index
            .get(&(scenario.to_string(), fact.to_string()))
            .unwrap_or_else(|| panic!("{}: the golden has no fact {scenario} / {fact}", self.area))
    }

    /// torch's value of a fact (to build the scenario from, such as its inputs).
    pub fn torch(&self, scenario: &str, fact: &str) -> &Value {
        &self.facts[self.position(scenario, fact)].value
    }

    /// The scenarios of the golden, in order, without repeats.
    pub fn scenarios(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.facts
            .iter()
            .filter(|f| seen.insert(f.scenario.clone()))
            .map(|f| f.scenario.clone())
            .collect()
    }

    /// Compares gpumem's value with torch's exactly (numbers as JSON numbers: 3 and 3.0 are
    /// equal), or within `abs_tol` when torch's value is `{"values": [...], "abs_tol": t}`.
    pub fn check(&mut self, scenario: &str, fact: &str, gpumem: impl Into<Value>) {
        let i = self.position(scenario, fact);
        let gpumem = gpumem.into();
        let key = (scenario.to_string(), fact.to_string());
        let outcome = if let Some(reason) = self.simplified.get(&key) {
            Outcome::Simplified(reason.clone())
        } else if same(&self.facts[i].value, &gpumem) {
            Outcome::Match(gpumem)
        } else {
            Outcome::Mismatch(gpumem)
        };
        assert!(
            self.outcomes.insert(i, outcome).is_none(),
            "{}: {scenario} / {fact} compared twice",
            self.area
        );
    }

    /// Records that gpumem cannot produce this fact at all (it must be a listed simplification).
    pub fn not_modelled(&mut self, scenario: &str, fact: &str) {
        self.check(scenario, fact, Value::Null);
    }

    /// Fails with every mismatch and every fact never compared; then checks (or, with
    /// `GPUMEM_BLESS=1`, writes) the area's table in the book.
    pub fn finish(self) {
        let mut problems = Vec::new();
        let (mut matched, mut simplified) = (0, 0);
        for (i, f) in self.facts.iter().enumerate() {
            match self.outcomes.get(&i) {
                None => problems.push(format!("{} / {}: never compared", f.scenario, f.fact)),
                Some(Outcome::Mismatch(g)) => problems.push(format!(
                    "{} / {}: torch {} {}, gpumem {}",
                    f.scenario, f.fact, self.torch_version, f.value, g
                )),
                Some(Outcome::Match(_)) => matched += 1,
                Some(Outcome::Simplified(reason)) => {
                    simplified += 1;
                    eprintln!("{} / {}: not compared: {reason}", f.scenario, f.fact);
                }
            }
        }
        eprintln!(
            "conformance {}: {} facts, {matched} match torch {}, {simplified} simplified",
            self.area,
            self.facts.len(),
            self.torch_version
        );
        assert!(
            problems.is_empty(),
            "{}: {} of {} facts differ from torch {}:\n{}",
            self.area,
            problems.len(),
            self.facts.len(),
            self.torch_version,
            problems.join("\n")
        );
        self.book_table();
    }

    fn book_table(&self) {
        let mut out = format!(
            "<!-- Written by crates/gpumem/tests/conformance_{}.rs from conformance/goldens/{}.json; \
             GPUMEM_BLESS=1 rewrites it. -->\n\n| scenario | fact | torch {} | gpumem |\n|---|---|---|---|\n",
            self.area, self.area, self.torch_version
        );
        for (i, f) in self.facts.iter().enumerate() {
            let gpumem = match &self.outcomes[&i] {
                Outcome::Match(_) => "same".to_string(),
                Outcome::Mismatch(g) => cell(g),
                Outcome::Simplified(_) => "not modelled (see the table below)".to_string(),
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                escape(&f.scenario),
                escape(&f.fact),
                cell(&f.value),
                gpumem
            ));
        }
        compare_or_bless(&format!("book/src/conformance/{}.md", self.area), &out);
    }
}

/// Checks that the file at `path` (from the repository root) holds `text`, or writes it with
/// `GPUMEM_BLESS=1`.
pub fn compare_or_bless(path: &str, text: &str) {
    let full = repo().join(path);
    if std::env::var_os("GPUMEM_BLESS").is_some_and(|v| v == "1") {
        if let Some(dir) = full.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(&full, text).unwrap_or_else(|e| panic!("writing {}: {e}", full.display()));
        return;
    }
    let now = std::fs::read_to_string(&full).unwrap_or_default();
    assert!(
        now == text,
        "{path} is not what the goldens and gpumem give now: rewrite it with \
         GPUMEM_BLESS=1 cargo test -p gpumem --test 'conformance_*'"
    );
}

fn escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A value as a Markdown code span that shows torch's text as it is, backticks included: the
/// span's fence is one backtick longer than the longest run inside it (CommonMark).
pub fn cell(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let text = escape(&text);
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    if longest_run == 0 {
        format!("`{text}`")
    } else {
        let fence = "`".repeat(longest_run + 1);
        format!("{fence} {text} {fence}")
    }
}

fn same(torch: &Value, gpumem: &Value) -> bool {
    match (torch, gpumem) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        (Value::Object(t), _) if t.contains_key("abs_tol") => {
            let tol = t["abs_tol"].as_f64().unwrap_or(0.0);
            let want = t.get("values").and_then(Value::as_array);
            let got = gpumem
                .get("values")
                .and_then(Value::as_array)
                .or_else(|| gpumem.as_array());
            match (want, got) {
                (Some(w), Some(g)) => {
                    w.len() == g.len()
                        && w.iter()
                            .zip(g)
                            .all(|(a, b)| match (a.as_f64(), b.as_f64()) {
                                (Some(a), Some(b)) => (a - b).abs() <= tol,
                                _ => false,
                            })
                }
                _ => false,
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, x)| b.get(k).is_some_and(|y| same(x, y)))
        }
        (a, b) => a == b,
    }
}
