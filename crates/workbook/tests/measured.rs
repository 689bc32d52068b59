//! The book's page of measured results (appendix D) lists every page that quotes a measurement.

use std::path::Path;

#[test]
fn every_page_with_measured_output_is_linked_from_the_measured_results_page() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src");
    let measured = std::fs::read_to_string(src.join("measured.md")).expect("book/src/measured.md");
    let mut pages: Vec<String> = std::fs::read_dir(&src)
        .expect("book/src")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md") && name != "measured.md")
        .collect();
    pages.sort();
    let mut missing = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(src.join(page)).expect("a page");
        // Pages label what they measured "Output on `cpu` (2026-11-20)" or "(output on `cpu`, ...)";
        // the label in quotes is the introduction explaining the convention.
        let lower = text.to_lowercase();
        let quotes_output = lower
            .match_indices("output on `")
            .any(|(i, _)| !lower[..i].ends_with('"'));
        if quotes_output && !measured.contains(&format!("]({page})")) {
            missing.push(page.as_str());
        }
    }
    assert!(
        missing.is_empty(),
        "these pages quote measured output but book/src/measured.md does not list them: {missing:?}"
    );
}
