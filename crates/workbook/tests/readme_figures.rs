//! The README's figures that the code defines are checked against it: a sample output that says
//! how many exercises there are says what `exercises/*/chapter.toml` list.

use std::path::Path;

#[test]
fn the_readmes_progress_line_counts_every_exercise() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut exercises = 0;
    for entry in std::fs::read_dir(root.join("exercises")).expect("exercises/") {
        let toml = entry.expect("an entry").path().join("chapter.toml");
        if let Ok(text) = std::fs::read_to_string(&toml) {
            exercises += text.lines().filter(|l| l.trim() == "[[exercises]]").count();
        }
    }
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let shown: Vec<&str> = readme
        .lines()
        .filter(|l| l.trim_start().starts_with("progress") && l.contains(" exercises"))
        .collect();
    assert!(!shown.is_empty(), "the README shows no progress line");
    for line in shown {
        let total = line
            .split_whitespace()
            .find_map(|w| w.split_once('/').map(|(_, n)| n.to_string()))
            .expect("a done/total count");
        assert_eq!(
            total,
            exercises.to_string(),
            "the README's progress line {line:?}: the chapters list {exercises} exercises"
        );
    }
}
