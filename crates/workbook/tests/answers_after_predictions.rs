//! Answers after the prediction (issue 40): a prediction exercise's answers, at the page's sizes,
//! appear in its chapter's page only inside a reveal (`<details class="wb-answer">`), never in the
//! page's text before it, nor in the chapter's quiz.
//!
//! The answers come from the reference predictions themselves: each `solutions/<chapter>/
//! src/predict.rs` has no dependencies, so it is compiled into this test as a module. A number
//! counts as an answer when it is distinctive: at least 1000, not a power of two and not a whole
//! number of MiB (the rules' own constants, 512 B or 2 MiB, are the lesson and appear
//! everywhere). Chapters 3 and 10 predict only such numbers (and yes/no), so they have nothing
//! distinctive to look for; chapter 10 is checked by its own test, for its peaks in MiB and for
//! its fixes named before its exercises.

use std::path::Path;

#[path = "../../../solutions/ch01-availability/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch01;
#[path = "../../../solutions/ch02-transfers/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch02;
#[path = "../../../solutions/ch04-memory-stats/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch04;
#[path = "../../../solutions/ch05-gradient-accumulation/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch05;
#[path = "../../../solutions/ch06-mixed-precision/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch06;
#[path = "../../../solutions/ch07-pinned-memory/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch07;
#[path = "../../../solutions/ch08-autograd-memory/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch08;
#[path = "../../../solutions/ch09-checkpointing/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch09;
#[path = "../../../solutions/ch10-out-of-memory/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch10;
#[path = "../../../solutions/ch11-optimizer-state/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch11;
#[path = "../../../solutions/ch12-transformer-activations/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch12;
#[path = "../../../solutions/ch13-kv-cache/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch13;
#[path = "../../../solutions/ch14-after-out-of-memory/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch14;
#[path = "../../../solutions/ch15-several-gpus/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch15;
#[path = "../../../solutions/ch16-big-models/src/predict.rs"]
#[allow(dead_code)] // the test calls only the page\'s predictions
mod ch16;

/// The page's predictions of each chapter, printed with `{:?}` (their numbers are read back).
fn page_predictions() -> Vec<(&'static str, Vec<String>)> {
    let show = |v: &dyn std::fmt::Debug| format!("{v:?}");
    let plan = |stats_kept, backend, checkpoint_core| ch12::Plan {
        stats_kept,
        backend,
        checkpoint_core,
    };
    let shape = |s, b, h, a| ch12::Shape { s, b, h, a };
    let plans = [
        plan(false, ch12::Backend::Math, false),
        plan(true, ch12::Backend::Math, false),
        plan(true, ch12::Backend::Math, true),
        plan(true, ch12::Backend::MemoryEfficient, false),
    ];
    vec![
        (
            "ch01-availability",
            vec![show(&ch01::predict_first_allocations(1, 200))],
        ),
        ("ch02-transfers", vec![show(&ch02::predict_pipeline(1000))]),
        (
            "ch04-memory-stats",
            vec![
                show(&ch04::predict_mlp(&[(1024, 1024), (1024, 10)])),
                show(&ch04::predict_fragmented(4 << 20, 6 << 20)),
            ],
        ),
        (
            "ch05-gradient-accumulation",
            [64, 16, 1]
                .iter()
                .map(|&rows| show(&ch05::predict_step_memory(rows)))
                .collect(),
        ),
        (
            "ch06-mixed-precision",
            [ch06::DType::F32, ch06::DType::F16, ch06::DType::BF16]
                .iter()
                .map(|&d| show(&ch06::predict_memory(d, ch06::PREDICT_ROWS)))
                .collect(),
        ),
        (
            "ch07-pinned-memory",
            vec![show(&ch07::predict_host(ch07::HOST_SIZES))],
        ),
        (
            "ch08-autograd-memory",
            [
                (48, ch08::Activation::Relu),
                (48, ch08::Activation::Gelu),
                (3, ch08::Activation::Relu),
            ]
            .iter()
            .map(|&(rows, a)| show(&ch08::predict_forward_memory(rows, a)))
            .collect(),
        ),
        (
            "ch09-checkpointing",
            [(16, 1), (16, 4), (10, 3)]
                .iter()
                .map(|&(d, s)| show(&ch09::predict_cost(d, s)))
                .collect(),
        ),
        (
            "ch11-optimizer-state",
            ch11::Kind::ALL
                .iter()
                .flat_map(|&k| {
                    [
                        show(&ch11::predict_state_bytes(k, &ch11::SIZES)),
                        show(&ch11::predict_step_memory(k, &ch11::SIZES)),
                    ]
                })
                .collect(),
        ),
        (
            "ch12-transformer-activations",
            [shape(32, 2, 64, 4), shape(24, 1, 40, 4)]
                .iter()
                .flat_map(|&sh| plans.iter().map(move |p| show(&ch12::predict_saved(sh, p))))
                .collect(),
        ),
        (
            "ch13-kv-cache",
            vec![
                show(&ch13::predict_fit(1024, 40 << 20, 300, 16, 100)),
                show(&ch13::predict_fit(131_072, 16 << 30, 32_768, 16, 1000)),
            ],
        ),
        (
            "ch14-after-out-of-memory",
            [(8, 3 << 20), (100, 100_000), (4, (25 << 20) + 1000)]
                .iter()
                .flat_map(|&(buffers, size)| {
                    [false, true].map(|empty_cache| {
                        show(&ch14::predict_refill(ch14::Steps {
                            buffers,
                            size,
                            steps: 3,
                            empty_cache,
                        }))
                    })
                })
                .collect(),
        ),
        (
            "ch15-several-gpus",
            [
                ch15::Stage::Ddp,
                ch15::Stage::Zero1,
                ch15::Stage::Zero2,
                ch15::Stage::Zero3,
            ]
            .map(|stage| {
                show(&ch15::predict_per_rank(ch15::Training {
                    params: 256 << 10,
                    ranks: 4,
                    optimizer_bytes_per_param: 12,
                    stage,
                }))
            })
            .to_vec(),
        ),
        (
            "ch16-big-models",
            ch16_page_predictions().iter().map(|p| show(p)).collect(),
        ),
    ]
}

/// Chapter 16's predictions at its page's sizes: the four loadings of 4 x nn.Linear(1024, 1024)
/// in float32, and a weight of 1024 x 1000 in every storage the page shows.
fn ch16_page_predictions() -> Vec<Box<dyn std::fmt::Debug>> {
    use ch16::{Loading, Scale, Storage};
    let model: Vec<u64> = (0..4).flat_map(|_| [4 << 20, 4096]).collect();
    let mut all: Vec<Box<dyn std::fmt::Debug>> = [
        Loading::BuildThenLoad,
        Loading::Mmap,
        Loading::MetaAssign,
        Loading::MetaMmapAssign,
    ]
    .iter()
    .map(|&l| Box::new(ch16::predict_loading(l, &model)) as Box<dyn std::fmt::Debug>)
    .collect();
    let mut storages = vec![Storage::F32, Storage::Bf16];
    for scale in [Scale::F32, Scale::Bf16] {
        storages.push(Storage::Int8PerRow { scale });
        for group in [32, 64, 128] {
            storages.push(Storage::Int4PerGroup { group, scale });
        }
    }
    all.extend(
        storages.into_iter().map(|s| {
            Box::new(ch16::predict_weight_bytes(1024, 1000, s)) as Box<dyn std::fmt::Debug>
        }),
    );
    all
}

/// The distinctive numbers in `text`: at least 1000, not a power of two and not a whole number of
/// MiB.
fn distinctive_numbers(text: &str) -> Vec<u64> {
    let mut numbers: Vec<u64> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .filter(|&n: &u64| n >= 1000 && !n.is_power_of_two() && !n.is_multiple_of(1 << 20))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
}

/// How `n` bytes may be written: `140800`, `140,800`, `140_800`, `137.5 KiB`, `137.50 KiB` (and
/// in MiB from 1 MiB on).
fn spellings(n: u64) -> Vec<String> {
    let plain = n.to_string();
    let grouped = |sep: char| {
        let mut out = String::new();
        for (i, c) in plain.chars().enumerate() {
            if i > 0 && (plain.len() - i).is_multiple_of(3) {
                out.push(sep);
            }
            out.push(c);
        }
        out
    };
    let mut all = vec![plain.clone(), grouped(','), grouped('_')];
    let kib = n as f64 / 1024.0;
    all.push(format!("{kib:.2} KiB"));
    if (kib * 10.0).fract() == 0.0 {
        all.push(format!("{kib:.1} KiB"));
    }
    if n >= 1 << 20 {
        all.push(format!("{:.2} MiB", kib / 1024.0));
    }
    all
}

/// The page of `chapter` as a reader sees it: each `{{#include file}}` of a text file (a
/// walkthrough's or a bench's output, whole or by lines, `file:start:end`) replaced by the lines
/// it shows, so that an output included outside a reveal is searched too. The code includes
/// (`.rs`, by anchor) stay as they are: they show the stub and the given code.
fn page_as_read(root: &Path, chapter: &str) -> String {
    let dir = root.join("book/src");
    let page = std::fs::read_to_string(dir.join(format!("{chapter}.md")))
        .unwrap_or_else(|e| panic!("{chapter}'s page: {e}"));
    let mut out = String::new();
    for line in page.lines() {
        let include = line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|rest| rest.strip_suffix("}}"));
        match include {
            Some(spec) if !spec.split(':').next().unwrap_or_default().ends_with(".rs") => {
                out.push_str(&included_lines(&dir, spec));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The lines `spec` (`file`, `file:start:end`, `file::end` or `file:start:`, 1-based and
/// inclusive, as mdBook reads them) includes from a file beside the pages in `dir`.
fn included_lines(dir: &Path, spec: &str) -> String {
    let mut parts = spec.split(':');
    let file = parts.next().unwrap_or_default();
    let text = std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{{{{#include {spec}}}}}: {e}"));
    let bound = |part: Option<&str>| {
        part.filter(|p| !p.is_empty()).map(|p| {
            p.parse::<usize>()
                .unwrap_or_else(|_| panic!("{{{{#include {spec}}}}}: {p:?} is not a line number"))
        })
    };
    let start = bound(parts.next()).unwrap_or(1);
    let end = bound(parts.next()).unwrap_or(usize::MAX);
    text.lines()
        .enumerate()
        .filter(|(i, _)| (start..=end).contains(&(i + 1)))
        .map(|(_, line)| format!("{line}\n"))
        .collect()
}

/// `page` without its reveals (`<details class="wb-answer" ...>` up to its `</details>`).
fn outside_reveals(page: &str) -> String {
    let mut out = String::new();
    let mut rest = page;
    while let Some(start) = rest.find("<details class=\"wb-answer\"") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</details>") {
            Some(end) => rest = &rest[start + end + "</details>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where `n` appears in `text` as a whole number, by line.
fn found_at(text: &str, n: u64) -> Vec<(usize, String)> {
    let spellings = spellings(n);
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            spellings.iter().any(|s| {
                line.match_indices(s.as_str()).any(|(i, _)| {
                    let before = line[..i].chars().last();
                    let after = line[i + s.len()..].chars().next();
                    let digit_like = |c: Option<char>| {
                        c.is_some_and(|c| c.is_ascii_digit() || c == ',' || c == '_' || c == '.')
                    };
                    // A number followed by a comma may end a clause ("4000, then"); one followed
                    // by a digit, `_` or `.` is a longer number.
                    let continues =
                        after.is_some_and(|c| c.is_ascii_digit() || c == '_' || c == '.');
                    !digit_like(before) && (s.ends_with("iB") || !continues)
                })
            })
        })
        .map(|(i, line)| (i + 1, line.trim().to_string()))
        .collect()
}

#[test]
fn no_prediction_answer_is_stated_outside_a_reveal_or_in_a_quiz() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut leaks = Vec::new();
    for (chapter, predictions) in page_predictions() {
        let answers = distinctive_numbers(&predictions.join(" "));
        let page = page_as_read(&root, chapter);
        let quiz = std::fs::read_to_string(root.join(format!("book/quizzes/{chapter}.toml")))
            .unwrap_or_default();
        for (what, text) in [("page", outside_reveals(&page)), ("quiz", quiz)] {
            for &n in &answers {
                for (line, text) in found_at(&text, n) {
                    leaks.push(format!("{chapter} {what} line {line}: {n} in {text:?}"));
                }
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "a prediction's answer stated before the learner predicts it (move it into a \
         <details class=\"wb-answer\"> reveal, or change the example's sizes):\n{}",
        leaks.join("\n")
    );
}

/// The text of `page` from its heading `heading` to the next `## ` heading.
fn section<'a>(page: &'a str, heading: &str) -> &'a str {
    let Some(start) = page.find(heading) else {
        return "";
    };
    let rest = &page[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// Chapter 10 predicts whether each fix saves the workload, its peak in whole MiB and its
/// retries, which the number search above skips: its peaks other than the workload's own sizes
/// (the 100 MiB staging buffer, the 130 MiB budget) are looked for in MiB, and the fixes'
/// settings must not be named in "Myth vs measurement" or the quiz, which come before the
/// exercises that make and predict them.
#[test]
fn chapter_10_states_no_fix_and_no_peak_before_its_exercises() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let chapter = "ch10-out-of-memory";
    let page = page_as_read(&root, chapter);
    let quiz = std::fs::read_to_string(root.join(format!("book/quizzes/{chapter}.toml")))
        .expect("the chapter's quiz");
    let outside = outside_reveals(&page);
    let mut leaks = Vec::new();
    let mut peaks: Vec<u64> = ch10::CASES
        .iter()
        .map(|&c| ch10::predict(c).peak_reserved_mib)
        .filter(|&mib| mib != 100 && mib != 130)
        .collect();
    peaks.dedup();
    assert!(!peaks.is_empty(), "a peak of the prediction to look for");
    for (what, text) in [("page", outside.as_str()), ("quiz", quiz.as_str())] {
        for mib in &peaks {
            for spelling in [format!("{mib} MiB"), format!("{mib}.00 MiB")] {
                for (i, line) in text.lines().enumerate() {
                    if line.contains(&spelling) {
                        leaks.push(format!("{what} line {}: {spelling} in {line:?}", i + 1));
                    }
                }
            }
        }
    }
    let myth = section(&outside, "## Myth vs measurement");
    assert!(
        !myth.is_empty(),
        "the page has a Myth vs measurement section"
    );
    for (what, text) in [("Myth vs measurement", myth), ("quiz", quiz.as_str())] {
        for setting in [
            "max_split_size_mb",
            "expandable_segments",
            "garbage_collection_threshold",
        ] {
            for line in text.lines().filter(|l| l.contains(setting)) {
                leaks.push(format!("{what} names the fix {setting}: {:?}", line.trim()));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "chapter 10 states a fix or its measured peak before the learner makes and predicts it \
         (move it into the <details class=\"wb-answer\"> reveal):\n{}",
        leaks.join("\n")
    );
}

/// Chapter 14 predicts what `empty_cache()` costs three steps: counts too small for the number
/// search above, and peaks in whole MiB. Its peaks other than the rules' own sizes (2, 10 and
/// 20 MiB) are looked for in MiB outside the reveal and in the quiz.
#[test]
fn chapter_14_states_no_peak_before_its_prediction() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let chapter = "ch14-after-out-of-memory";
    let page = page_as_read(&root, chapter);
    let quiz = std::fs::read_to_string(root.join(format!("book/quizzes/{chapter}.toml")))
        .expect("the chapter's quiz");
    let outside = outside_reveals(&page);
    let mut peaks: Vec<u64> = [(8, 3 << 20), (100, 100_000), (4, (25 << 20) + 1000)]
        .iter()
        .map(|&(buffers, size)| {
            ch14::predict_refill(ch14::Steps {
                buffers,
                size,
                steps: 3,
                empty_cache: true,
            })
            .peak_reserved
                >> 20
        })
        .filter(|mib| ![2, 10, 20].contains(mib))
        .collect();
    peaks.dedup();
    assert!(!peaks.is_empty(), "a peak of the prediction to look for");
    let mut leaks = Vec::new();
    for (what, text) in [("page", outside.as_str()), ("quiz", quiz.as_str())] {
        for mib in &peaks {
            for spelling in [format!("{mib} MiB"), format!("{mib}.00 MiB")] {
                for (i, line) in text.lines().enumerate() {
                    if line.contains(&spelling) {
                        leaks.push(format!("{what} line {}: {spelling} in {line:?}", i + 1));
                    }
                }
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "chapter 14 states a measured peak before the learner predicts it (move it into the \
         <details class=\"wb-answer\"> reveal):\n{}",
        leaks.join("\n")
    );
}

/// Chapter 15 predicts what each rank keeps at 256 Ki parameters on 4 ranks: whole numbers of
/// KiB and MiB, which the number search above skips. Each of them, and each rank's total, as the
/// walkthrough prints them ("768.00 KiB", "1.75 MiB"), is looked for outside the reveal (its
/// included outputs too) and in the quiz.
#[test]
fn chapter_15_states_no_rank_s_bytes_before_its_prediction() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let chapter = "ch15-several-gpus";
    let outside = outside_reveals(&page_as_read(&root, chapter));
    let quiz = std::fs::read_to_string(root.join(format!("book/quizzes/{chapter}.toml")))
        .expect("the chapter's quiz");
    let mut answers: Vec<u64> = [
        ch15::Stage::Ddp,
        ch15::Stage::Zero1,
        ch15::Stage::Zero2,
        ch15::Stage::Zero3,
    ]
    .into_iter()
    .flat_map(|stage| {
        let p = ch15::predict_per_rank(ch15::Training {
            params: 256 << 10,
            ranks: 4,
            optimizer_bytes_per_param: 12,
            stage,
        });
        [
            p.params,
            p.grads,
            p.optimizer,
            p.params + p.grads + p.optimizer,
        ]
    })
    .collect();
    answers.sort_unstable();
    answers.dedup();
    let spelled = |n: u64| {
        if n >= 1 << 20 {
            format!("{:.2} MiB", n as f64 / f64::from(1 << 20))
        } else {
            format!("{:.2} KiB", n as f64 / 1024.0)
        }
    };
    let mut leaks = Vec::new();
    for (what, text) in [("page", outside.as_str()), ("quiz", quiz.as_str())] {
        for spelling in answers.iter().map(|&n| spelled(n)) {
            for (i, line) in text.lines().enumerate() {
                // "4.00 MiB" is in "24.00 MiB" too: only where no digit comes before it.
                let alone = line.match_indices(&spelling).any(|(at, _)| {
                    !line[..at]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_ascii_digit() || c == '.')
                });
                if alone {
                    leaks.push(format!("{what} line {}: {spelling} in {line:?}", i + 1));
                }
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "chapter 15 states what a rank keeps before the learner predicts it (move it into the \
         <details class=\"wb-answer\"> reveal):\n{}",
        leaks.join("\n")
    );
}

#[test]
fn the_page_as_read_shows_the_lines_an_include_names() {
    let dir = std::env::temp_dir().join(format!("wb-includes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    std::fs::write(dir.join("out.txt"), "one\ntwo\nthree\nfour\n").expect("a file");
    assert_eq!(included_lines(&dir, "out.txt:2:3"), "two\nthree\n");
    assert_eq!(included_lines(&dir, "out.txt::2"), "one\ntwo\n");
    assert_eq!(included_lines(&dir, "out.txt:3:"), "three\nfour\n");
    assert_eq!(included_lines(&dir, "out.txt"), "one\ntwo\nthree\nfour\n");
    std::fs::remove_dir_all(&dir).expect("removing the temporary folder");
}

/// Chapters 12 to 16 state every answer of their "Check yourself" questions in their sections:
/// the questions go before the first section (the page's `<!-- check yourself -->` line), so
/// that "Answer before you scroll on" can be done.
#[test]
fn check_yourself_comes_before_the_sections_that_answer_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for chapter in [
        "ch12-transformer-activations",
        "ch13-kv-cache",
        "ch14-after-out-of-memory",
        "ch15-several-gpus",
        "ch16-big-models",
    ] {
        let page = std::fs::read_to_string(root.join(format!("book/src/{chapter}.md")))
            .expect("the chapter's page");
        let marker = page.find("\n<!-- check yourself -->\n").unwrap_or_else(|| {
            panic!("{chapter}: no <!-- check yourself --> line: its questions would come last")
        });
        let first_section = page.find("\n## ").expect("a section");
        assert!(
            marker < first_section,
            "{chapter}: the questions come after a section that answers them"
        );
    }
}

#[test]
fn the_search_finds_grouped_numbers_and_skips_revealed_ones() {
    assert_eq!(
        distinctive_numbers("a 140800 b 2097152 c 512 d 1536"),
        [1536, 140_800]
    );
    let page = "x 140,800 y\n<details class=\"wb-answer\">1536</details>\nz 1_536";
    let outside = outside_reveals(page);
    assert_eq!(found_at(&outside, 140_800).len(), 1);
    assert_eq!(found_at(&outside, 1536).len(), 1, "{outside}");
    assert!(found_at("11536 and 15360", 1536).is_empty());
    assert_eq!(found_at("peak 968.5 KiB here", 991_744).len(), 1);
}
/// What `chapter`'s walkthrough prints on `cpu`, run from the repository (`cargo run --example
/// walkthrough`) while its predictions are still the stub's; `None`, with a notice, once
/// `src/predict.rs` is no longer the stub (a learner's repository).
fn stub_walkthrough(chapter: &str) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let predict = format!("exercises/{chapter}/src/predict.rs");
    let stub = std::fs::read_to_string(root.join(&predict)).expect("the chapter's predictions");
    if !stub.contains("todo!(") {
        eprintln!("skipped: {predict} is no longer the stub");
        return None;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["run", "--quiet", "-p", chapter, "--example", "walkthrough"])
        .current_dir(&root)
        .env("GPUMEM_DEVICE", "cpu")
        .env_remove("WORKBOOK_ANSWERS")
        .env_remove("GPUMEM_ALLOC_CONF")
        .output()
        .unwrap_or_else(|e| panic!("running {chapter}'s walkthrough: {e}"));
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "the walkthrough failed: {printed}");
    Some(printed)
}

/// Chapter 10's walkthrough measures every fix but prints the table (exercise 4's answer) only
/// once the learner's predictions match it: run on the stub, it says to predict first.
#[test]
fn chapter_10s_walkthrough_keeps_its_fixes_until_the_predictions_match() {
    let Some(printed) = stub_walkthrough("ch10-out-of-memory") else {
        return;
    };
    let fixes = section(&printed, "== Each fix, measured ==");
    assert!(
        fixes.contains("Predict first: `workbook check ch10`"),
        "the walkthrough asks the learner to predict first:\n{fixes}"
    );
    for setting in [
        "max_split_size_mb:64",
        "expandable_segments:True",
        "peak reserved",
    ] {
        assert!(
            !fixes.contains(setting),
            "the walkthrough shows {setting:?} before the predictions match:\n{fixes}"
        );
    }
}

/// Chapter 14's walkthrough measures what `empty_cache()` costs but prints the table (exercise
/// 3's answer) only once the learner's predictions match it: run on the stub, it says to predict
/// first.
#[test]
fn chapter_14s_walkthrough_keeps_its_costs_until_the_predictions_match() {
    let Some(printed) = stub_walkthrough("ch14-after-out-of-memory") else {
        return;
    };
    let costs = section(
        &printed,
        "== What empty_cache() costs the steps after it (3 steps each) ==",
    );
    assert!(
        costs.contains("Predict first: `workbook check ch14`"),
        "the walkthrough asks the learner to predict first:\n{costs}"
    );
    for shown in ["device allocs", "every step", "peak reserved"] {
        assert!(
            !costs.contains(shown),
            "the walkthrough shows {shown:?} before the predictions match:\n{costs}"
        );
    }
}

/// Chapter 15's walkthrough measures what each rank keeps under DDP and ZeRO but prints the
/// table (exercise 3's answer) and the paper's setting only once the learner's predictions match:
/// run on the stub, it says to predict first.
#[test]
fn chapter_15s_walkthrough_keeps_its_table_until_the_predictions_match() {
    let Some(printed) = stub_walkthrough("ch15-several-gpus") else {
        return;
    };
    let table = section(&printed, "== What each rank keeps");
    assert!(
        table.contains("Predict first: `workbook check ch15`"),
        "the walkthrough asks the learner to predict first:\n{table}"
    );
    for shown in ["Zero1", "Zero3", "GB per GPU"] {
        assert!(
            !printed.contains(shown),
            "the walkthrough shows {shown:?} before the predictions match:\n{printed}"
        );
    }
}

/// Chapter 16's walkthrough measures both of its predictions (the four loadings, a weight's five
/// storages) but prints each table only once the learner's predictions match it: run on the
/// stub, it says to predict first, twice.
#[test]
fn chapter_16s_walkthrough_keeps_its_tables_until_the_predictions_match() {
    let Some(printed) = stub_walkthrough("ch16-big-models") else {
        return;
    };
    let between = |from: &str, to: &str| {
        let start = printed
            .find(from)
            .unwrap_or_else(|| panic!("{from:?} in:\n{printed}"));
        let rest = &printed[start..];
        rest[..rest.find(to).unwrap_or(rest.len())].to_string()
    };
    for (table, shown) in [
        (
            between("== Loading", "== One weight"),
            ["peak allocated", "BuildThenLoad", "MetaMmapAssign"],
        ),
        (
            between("== One weight", "== 8 layers"),
            ["scales", "Int8PerRow", "Int4PerGroup"],
        ),
    ] {
        assert!(
            table.contains("Predict first: `workbook check ch16`"),
            "the walkthrough asks the learner to predict first:\n{table}"
        );
        for word in shown {
            assert!(
                !table.contains(word),
                "the walkthrough shows {word:?} before the predictions match:\n{table}"
            );
        }
    }
}
