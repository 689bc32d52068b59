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

/// The blocks a page presents as what a command printed, as `(line number, the block's label,
/// the lines of the block that stand for the output)`: a `text` block whose label (the paragraph just before it) speaks of an output or of
/// what something prints, and a `console` block that holds a line after a `$ ` command that is
/// not part of a command (neither after a line ending in `\` nor inside a quoted argument). A
/// label that calls the block a quotation or an abridged example presents no command's output.
/// A `text` block's output is all of it, a `console` block's the lines that are not commands.
fn command_output_blocks(page: &str) -> Vec<(usize, String, Vec<String>)> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let kind = if line.starts_with("```text") {
            "text"
        } else if line.starts_with("```console") {
            "console"
        } else {
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or(lines.len());
        let block = &lines[i + 1..end];
        let label = lines[..i]
            .iter()
            .rev()
            .skip_while(|l| l.trim().is_empty())
            .take_while(|l| !l.trim().is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        let output: Vec<String> = if kind == "text" {
            let labelled = ["output", "prints", "printed"]
                .iter()
                .any(|w| label.contains(w))
                && !label.contains("quoted")
                && !label.contains("abridged example");
            if labelled {
                block.iter().map(|l| l.to_string()).collect()
            } else {
                Vec::new()
            }
        } else {
            let mut continued = false;
            let mut in_quote = false;
            let mut printed = Vec::new();
            for l in block {
                let command = continued || in_quote || l.starts_with("$ ");
                if command {
                    if l.matches('"').count() % 2 == 1 {
                        in_quote = !in_quote;
                    }
                    continued = l.ends_with('\\');
                } else {
                    printed.push(l.to_string());
                    continued = false;
                }
            }
            printed
        };
        if !output.is_empty() {
            out.push((i + 1, label, output));
        }
    }
    out
}

/// The README, which GitHub shows without mdBook's includes, holds a copy of a generated file:
/// its block's label names the file (`book/src/pictures/<file>`), and the copy must be the file,
/// line for line. What is wrong with the copy, if anything.
fn copy_problem(src: &Path, label: &str, output: &[String]) -> Option<String> {
    let prefix = "book/src/pictures/";
    let Some(at) = label.find(prefix) else {
        return Some(
            "is pasted: its label must name the generated file it copies \
             (book/src/pictures/<file>)"
                .to_string(),
        );
    };
    let file: String = label[at + prefix.len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .collect();
    let file = file.trim_end_matches('.');
    let Ok(text) = std::fs::read_to_string(src.join("pictures").join(file)) else {
        return Some(format!(
            "copies book/src/pictures/{file}, which is missing (cargo run -p workbook -- pictures)"
        ));
    };
    let generated: Vec<&str> = text.lines().collect();
    if generated != output {
        let at = generated
            .iter()
            .zip(output)
            .position(|(a, b)| a != b)
            .unwrap_or(generated.len().min(output.len()));
        return Some(format!(
            "differs from book/src/pictures/{file} at its line {}: the file has {:?}, the copy \
             {:?} (copy the file into the block)",
            at + 1,
            generated.get(at).copied().unwrap_or("(its end)"),
            output.get(at).map_or("(its end)", String::as_str),
        ));
    }
    None
}

/// An output that only torch 2.15 can make, which `workbook pictures` cannot run: a page includes
/// `bench/<name>.txt`, which `python bench/<name>.py` (committed beside it) wrote with torch
/// 2.15.0, as its first line says. `None` when `shown` is not such an include; else whether it
/// is one.
fn torch_recording(root: &Path, shown: &str) -> Option<Result<(), String>> {
    let file = shown
        .strip_prefix("{{#include ../../bench/")?
        .strip_suffix("}}")?
        .split(':')
        .next()?;
    let script = root
        .join("bench")
        .join(file.strip_suffix(".txt").unwrap_or(file))
        .with_extension("py");
    let text = std::fs::read_to_string(root.join("bench").join(file)).unwrap_or_default();
    Some(if !script.is_file() {
        Err(format!(
            "includes bench/{file}, but no bench/*.py script beside it writes it"
        ))
    } else if !text.starts_with("torch 2.15.0") {
        Err(format!(
            "includes bench/{file}, whose first line does not say it was recorded with torch \
             2.15.0 (run {} with torch 2.15.0)",
            script.display()
        ))
    } else {
        Ok(())
    })
}

#[test]
fn every_command_output_on_a_page_is_a_file_a_command_wrote() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = root.join("book/src");
    let mut pages: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&src)
        .expect("book/src")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| (name.clone(), src.join(&name)))
        .collect();
    pages.push(("README.md".to_string(), root.join("README.md")));
    pages.sort();
    let mut found = 0;
    let mut problems = Vec::new();
    for (name, path) in &pages {
        let text = std::fs::read_to_string(path).expect("a page");
        for (line, label, output) in command_output_blocks(&text) {
            found += 1;
            if name == "README.md" {
                if let Some(p) = copy_problem(&src, &label, &output) {
                    problems.push(format!("{name}:{line}: an output shown as a command's {p}"));
                }
                continue;
            }
            for shown in &output {
                let included = shown
                    .strip_prefix("{{#include pictures/")
                    .and_then(|rest| rest.strip_suffix("}}"))
                    .map(|rest| rest.split(':').next().unwrap_or(rest));
                if let Some(recorded) = torch_recording(&root, shown) {
                    if let Err(problem) = recorded {
                        problems.push(format!("{name}:{line}: {problem}"));
                    }
                    continue;
                }
                match included {
                    Some(file) if src.join("pictures").join(file).is_file() => {}
                    Some(file) => problems.push(format!(
                        "{name}:{line}: includes book/src/pictures/{file}, which is missing \
                         (cargo run -p workbook -- pictures)"
                    )),
                    None => {
                        problems.push(format!(
                            "{name}:{line}: an output shown as a command's is pasted \
                             ({shown:?}): make it with `workbook pictures` and include the file \
                             it writes"
                        ));
                        break;
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        found >= 20,
        "only {found} command outputs found: the search is broken"
    );
}

#[test]
fn pasted_command_outputs_are_found_and_includes_quotes_and_commands_are_not() {
    let page = "Output on `cpu`:\n\n```text\nStep 2\n```\n\nIt prints:\n\n```text\n\
                {{#include pictures/a.txt:8:}}\n```\n\nA message torch printed, quoted in a \
                bug report:\n\n```text\nCUDA out of memory\n```\n\n```console\n$ a \\\n    --b\n\
                $ python3 -c \"\nprint(1)\n\"\n```\n\n```console\n$ workbook diff a b\nA: a\n```\n";
    let found: Vec<(usize, String, Vec<String>)> = command_output_blocks(page);
    let shown = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let lines_and_outputs: Vec<(usize, Vec<String>)> =
        found.iter().map(|(l, _, o)| (*l, o.clone())).collect();
    assert_eq!(
        lines_and_outputs,
        vec![
            (3, shown(&["Step 2"])),
            (9, shown(&["{{#include pictures/a.txt:8:}}"])),
            (27, shown(&["A: a"])),
        ]
    );
    assert_eq!(found[0].1, "output on `cpu`:");
    assert_eq!(found[1].1, "it prints:");
}

#[test]
fn a_readme_copy_must_name_its_generated_file_and_equal_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pictures")).unwrap();
    std::fs::write(dir.path().join("pictures/readme-check.txt"), "a\n\nb\n").unwrap();
    let label = "output on `cpu`: a copy of `book/src/pictures/readme-check.txt`, which";
    let copy = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert_eq!(
        copy_problem(dir.path(), label, &copy(&["a", "", "b"])),
        None
    );
    let stale = copy_problem(dir.path(), label, &copy(&["a", "", "c"])).unwrap();
    assert!(stale.contains("at its line 3"), "{stale}");
    assert!(copy_problem(dir.path(), label, &copy(&["a", ""])).is_some());
    assert!(copy_problem(dir.path(), "output on `cpu`:", &copy(&["a", "", "b"])).is_some());
    let missing = "output: a copy of book/src/pictures/gone.txt.";
    assert!(
        copy_problem(dir.path(), missing, &copy(&["a"]))
            .unwrap()
            .contains("gone.txt, which is missing")
    );
}

#[test]
fn a_torch_recording_needs_its_script_and_torch_2_15() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let bench = root.path().join("bench");
    std::fs::create_dir(&bench).expect("bench/");
    let shown = "{{#include ../../bench/run.txt}}";
    std::fs::write(bench.join("run.txt"), "torch 2.14.0\n1. freed\n").expect("run.txt");
    let no_script = torch_recording(root.path(), shown).expect("an include of bench/");
    assert!(
        no_script
            .as_ref()
            .is_err_and(|e| e.contains("no bench/*.py")),
        "{no_script:?}"
    );
    std::fs::write(bench.join("run.py"), "import torch\n").expect("run.py");
    let old_torch = torch_recording(root.path(), shown).expect("an include of bench/");
    assert!(
        old_torch
            .as_ref()
            .is_err_and(|e| e.contains("torch 2.15.0")),
        "{old_torch:?}"
    );
    std::fs::write(bench.join("run.txt"), "torch 2.15.0+cpu\n1. freed\n").expect("run.txt");
    assert_eq!(torch_recording(root.path(), shown), Some(Ok(())));
    assert_eq!(
        torch_recording(root.path(), "{{#include pictures/a.txt}}"),
        None
    );
}
