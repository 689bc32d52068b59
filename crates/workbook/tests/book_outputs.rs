//! A page shows what a walkthrough prints by including the file `workbook pictures` writes from
//! the walkthrough's own output (`book/src/pictures/<chapter>-walkthrough.txt`), whole or some
//! of its sections (mdBook's `{{#include file:first:last}}`), never a copy: a pasted copy goes
//! stale when the code changes, where the file is checked against what the walkthrough prints now
//! by `workbook pictures --check` (CI).

use std::path::Path;

/// The text blocks a page presents as a walkthrough's output, as `(chapter, the block's lines)`:
/// the block after `$ cargo run -p <chapter> --example walkthrough`, and on a chapter's page or
/// its solution page every block whose label (the paragraph just before it) speaks of "the
/// walkthrough's" output, table or section.
fn walkthrough_blocks(page_name: &str, page: &str) -> Vec<(String, Vec<String>)> {
    let lines: Vec<&str> = page.lines().collect();
    let this_chapter = page_name
        .strip_suffix("-solution.md")
        .or_else(|| page_name.strip_suffix(".md"))
        .filter(|c| c.starts_with("ch"));
    let block_at = |start: usize| -> Vec<String> {
        let end = (start + 1..lines.len())
            .find(|&j| lines[j] == "```")
            .unwrap_or(lines.len());
        lines[start + 1..end]
            .iter()
            .map(|l| l.to_string())
            .collect()
    };
    let mut out = Vec::new();
    let mut after_command: Option<String> = None;
    for (i, line) in lines.iter().enumerate() {
        if let Some(chapter) = line
            .strip_prefix("$ cargo run -p ")
            .and_then(|rest| rest.strip_suffix(" --example walkthrough"))
        {
            after_command = Some(chapter.to_string());
            continue;
        }
        if !line.starts_with("```text") {
            continue;
        }
        if let Some(chapter) = after_command.take() {
            out.push((chapter, block_at(i)));
            continue;
        }
        let label: Vec<&str> = lines[..i]
            .iter()
            .rev()
            .skip_while(|l| l.trim().is_empty())
            .take_while(|l| !l.trim().is_empty())
            .copied()
            .collect();
        if let Some(chapter) = this_chapter
            && label
                .iter()
                .any(|l| l.to_lowercase().contains("the walkthrough's"))
        {
            out.push((chapter.to_string(), block_at(i)));
        }
    }
    out
}

/// What is wrong with a block shown as `chapter`'s walkthrough output, if anything: it must be
/// one include of the chapter's output file, and a range of lines must be whole sections (it
/// starts at the top or after a blank line, and ends at the bottom or before one).
fn problem(src: &Path, chapter: &str, block: &[String]) -> Option<String> {
    let file = format!("pictures/{chapter}-walkthrough.txt");
    let include = match block {
        [line] => line
            .strip_prefix(&format!("{{{{#include {file}"))
            .and_then(|rest| rest.strip_suffix("}}")),
        _ => None,
    };
    let Some(range) = include else {
        return Some(format!(
            "is not `{{{{#include {file}}}}}` (or a range of its lines) but {} pasted line(s)",
            block.len()
        ));
    };
    let Ok(text) = std::fs::read_to_string(src.join(&file)) else {
        return Some(format!(
            "includes book/src/{file}, which is missing (cargo run -p workbook -- pictures)"
        ));
    };
    let lines: Vec<&str> = text.lines().collect();
    // mdBook's ranges: `:N` is line N alone, `:A:` from A, `::B` up to B, `:A:B` from A to B.
    let number = |part: &str, default: usize| {
        if part.is_empty() {
            Some(default)
        } else {
            part.parse::<usize>().ok()
        }
    };
    let parts: Vec<&str> = range.split(':').skip(1).collect();
    let bounds = match parts[..] {
        [] => Some((1, lines.len())),
        [n] => number(n, 0).map(|n| (n, n)),
        [a, b] => number(a, 1).zip(number(b, lines.len())),
        _ => None,
    };
    let Some((first, last)) = bounds else {
        return Some(format!(
            "includes {file} with a range that is not line numbers: {range}"
        ));
    };
    let whole_start = first == 1 || lines.get(first - 2).is_some_and(|l| l.is_empty());
    let whole_end = last == lines.len() || lines.get(last).is_some_and(|l| l.is_empty());
    if first == 0 || first > last || last > lines.len() || !whole_start || !whole_end {
        return Some(format!(
            "includes lines {first}..{last} of {file} ({} lines), which are not whole sections",
            lines.len()
        ));
    }
    None
}

#[test]
fn every_walkthrough_output_on_a_page_is_the_file_its_walkthrough_wrote() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src");
    let mut pages: Vec<String> = std::fs::read_dir(&src)
        .expect("book/src")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .collect();
    pages.sort();
    let mut shown = 0;
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(src.join(page)).expect("a page");
        for (chapter, block) in walkthrough_blocks(page, &text) {
            if let Some(p) = problem(&src, &chapter, &block) {
                problems.push(format!("{page}: {chapter}'s walkthrough output {p}"));
            }
            shown += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        shown >= 16,
        "only {shown} walkthrough outputs found: the search is broken"
    );
}

#[test]
fn pasted_outputs_and_ranges_that_cut_a_section_are_problems() {
    let page = "```console\n$ cargo run -p ch02-transfers --example walkthrough\n```\n\nOutput on \
                `cpu`:\n\n```text\nDevice: cpu\n```\n\nThe walkthrough's last table (output on \
                `cpu`):\n\n```text\n{{#include pictures/ch02-transfers-walkthrough.txt:3:}}\n```\n";
    let blocks = walkthrough_blocks("ch02-transfers-solution.md", page);
    assert_eq!(
        blocks,
        vec![
            (
                "ch02-transfers".to_string(),
                vec!["Device: cpu".to_string()]
            ),
            (
                "ch02-transfers".to_string(),
                vec!["{{#include pictures/ch02-transfers-walkthrough.txt:3:}}".to_string()]
            ),
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pictures")).unwrap();
    std::fs::write(
        dir.path().join("pictures/ch02-transfers-walkthrough.txt"),
        "Device: cpu\n\n== A ==\n  a 1\n\n== B ==\n  b 2\n",
    )
    .unwrap();
    let check = |line: &str| problem(dir.path(), "ch02-transfers", &[line.to_string()]);
    assert!(problem(dir.path(), "ch02-transfers", &blocks[0].1).is_some());
    assert_eq!(
        check("{{#include pictures/ch02-transfers-walkthrough.txt}}"),
        None
    );
    assert_eq!(
        check("{{#include pictures/ch02-transfers-walkthrough.txt:3:}}"),
        None
    );
    assert_eq!(
        check("{{#include pictures/ch02-transfers-walkthrough.txt::4}}"),
        None
    );
    assert!(check("{{#include pictures/ch02-transfers-walkthrough.txt:4:}}").is_some());
    assert!(check("{{#include pictures/ch02-transfers-walkthrough.txt::3}}").is_some());
    assert!(check("{{#include pictures/ch01-availability-walkthrough.txt}}").is_some());
}
