//! `workbook pictures`: the book's pictures of memory, made from the allocator's own history.
//!
//! A chapter has pictures when its `examples/walkthrough.rs` reads [`SNAPSHOT_VAR`]: run with it
//! set, the walkthrough records the allocator's history from the start and writes its snapshot to
//! that file. This command runs each such walkthrough on the `cpu` device (the same numbers on
//! every machine), draws the snapshot with [`crate::snapshot::viz`], and writes
//! `book/src/pictures/<chapter>-timeline.svg` and `<chapter>-segments.svg`, and beside them
//! `<chapter>-history.json`, the events the book's interactive view steps through (see
//! [`history_json`]), and `<chapter>-walkthrough.txt`, what the walkthrough printed, which the
//! chapter's page includes as its output (see [`walkthrough_output`]). Beside them go the outputs
//! of the commands other pages show (`snapshots-*.txt`, `instructors-*.txt`, `readme-*.txt`; see
//! [`super::page_outputs`]). With `--check` it writes nothing and fails when a committed file
//! differs from what the code makes now.

use crate::course::app_state::Repo;
use crate::snapshot::viz;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Flags of `workbook pictures`.
#[derive(Debug, Args)]
#[command(
    after_help = "A chapter has pictures when its examples/walkthrough.rs reads GPUMEM_SNAPSHOT: \
                  with that variable set, it records the allocator's history from the start and \
                  writes `dev.snapshot().to_json()` to the file it names. Each walkthrough runs \
                  with GPUMEM_DEVICE=cpu; the pictures go to book/src/pictures/."
)]
pub struct PicturesArgs {
    /// Chapters, by name or unique prefix (`ch03`); default: every chapter with pictures.
    #[arg(value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Write nothing; exit with 1 when a committed picture differs from what the code makes.
    #[arg(long)]
    pub check: bool,
}

/// The variable a walkthrough reads (through `gpumem::SnapshotRequest`) for the file to write its
/// snapshot to.
pub use gpumem::history::SNAPSHOT_VAR;

/// Where the pictures go, from the repository's root.
pub const PICTURES_DIR: &str = "book/src/pictures";

/// The pictures drawn from each chapter's snapshot: the file name's suffix and the view.
const KINDS: [(&str, viz::View); 2] = [
    ("timeline", viz::View::Timeline),
    ("segments", viz::View::Segments),
];

/// The suffix of the data file the interactive view reads: `<chapter>-history.json`.
const HISTORY_SUFFIX: &str = "history.json";

/// The suffix of the walkthrough's printed output, which the chapter's page includes:
/// `<chapter>-walkthrough.txt`.
pub const OUTPUT_SUFFIX: &str = "walkthrough.txt";

/// The cpu device's size for every walkthrough run here, so that what it prints (a capacity, a
/// memory fraction) is the same on every machine; the pages say so.
pub const CPU_CAPACITY: &str = "24GiB";

/// What stands in a walkthrough's output for this machine's CPU model, which the cpu device
/// reports as its name.
pub const CPU_MODEL: &str = "<CPU model>";

/// The suffix of the data file the block view reads, when a walkthrough served requests from a
/// block pool: `<chapter>-blocks.json`, the key `kv_blocks` of its snapshot file (chapter 13).
const BLOCKS_SUFFIX: &str = "blocks.json";

/// The pictures drawn from a chapter's recorded activity when its walkthrough used pinned memory:
/// the stream lanes and the pinned host blocks ([`viz::activity`]).
const ACTIVITY_SUFFIXES: [&str; 2] = ["streams", "pinned"];

/// One file made: its name under [`PICTURES_DIR`] and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    /// `<chapter>-timeline.svg`, `<chapter>-segments.svg`, `<chapter>-history.json`, or a
    /// page's command output (`snapshots-*.txt`, [`super::page_outputs`]).
    pub file: String,
    /// The SVG document, or the history's JSON.
    pub contents: String,
}

/// `workbook pictures`: makes (or with `--check`, checks) the pictures of the chapters asked for.
pub fn run(root: Option<&Path>, args: &PicturesArgs) -> Result<ExitCode> {
    let repo = Repo::from_option(root)?;
    let with_pictures = chapters_with_pictures(&repo)?;
    let chapters = if args.chapters.is_empty() {
        with_pictures.clone()
    } else {
        let chosen = repo.select_chapters(&args.chapters)?;
        for chapter in &chosen {
            if !with_pictures.contains(chapter) {
                bail!(
                    "{chapter} has no pictures: its examples/walkthrough.rs does not read \
                     {SNAPSHOT_VAR} (see `workbook pictures --help`)"
                );
            }
        }
        chosen
    };
    if chapters.is_empty() {
        bail!("no chapter's walkthrough reads {SNAPSHOT_VAR}: there are no pictures to make");
    }
    let dir = repo.root.join(PICTURES_DIR);
    let scratch = tempfile::Builder::new()
        .prefix("workbook-pictures-")
        .tempdir()
        .context("making a temporary directory for the snapshots")?;
    let mut problems = Vec::new();
    let mut made = Vec::new();
    let ran = run_walkthroughs(&repo, &chapters, scratch.path());
    for (chapter, result) in chapters.iter().zip(ran) {
        let (snapshot, activity, printed) = result?;
        made.extend(pictures_of(chapter, &snapshot, activity.as_ref()));
        made.push(Picture {
            file: format!("{chapter}-{OUTPUT_SUFFIX}"),
            contents: walkthrough_output(&printed, &cpu_model()),
        });
        if chapter == CUDA_ERROR_CHAPTER {
            made.extend(cuda_error_output(&repo)?);
        }
        let file = scratch.path().join(format!("{chapter}.json"));
        if let Some(contents) = read_kv_blocks(&file)? {
            made.push(Picture {
                file: format!("{chapter}-{BLOCKS_SUFFIX}"),
                contents,
            });
        }
    }
    // A repository without the fixture's script (a test's) has no snapshots page to make.
    if args.chapters.is_empty() && repo.root.join(FIXTURE_SCRIPT).is_file() {
        made.extend(snapshot_command_outputs(&repo)?);
    }
    if args.chapters.is_empty() {
        let workbook = std::env::current_exe().context("finding this program to run it")?;
        made.extend(super::page_outputs::made(&repo, &workbook)?);
    }
    if args.check {
        problems.extend(differences(&dir, &made));
        if args.chapters.is_empty() {
            problems.extend(
                orphans(&dir, &with_pictures)?
                    .into_iter()
                    .map(|f| format!("{PICTURES_DIR}/{f}: no chapter's walkthrough makes it")),
            );
        }
        if problems.is_empty() {
            println!(
                "{} files of {} chapters are up to date",
                made.len(),
                chapters.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!("the book's pictures are not what the code makes now:");
        for problem in &problems {
            println!("  {problem}");
        }
        println!(
            "run `cargo run -p workbook -- pictures` and commit {PICTURES_DIR}/ (delete pictures no \
             chapter makes)"
        );
        return Ok(ExitCode::FAILURE);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for picture in &made {
        let path = dir.join(&picture.file);
        let state = match std::fs::read_to_string(&path) {
            Ok(old) if old == picture.contents => "unchanged",
            // A walkthrough's output whose times alone differ keeps the times it was made with.
            Ok(old)
                if picture.file.ends_with(".txt")
                    && without_times(&old) == without_times(&picture.contents) =>
            {
                println!("{PICTURES_DIR}/{} (unchanged but for times)", picture.file);
                continue;
            }
            Ok(_) => "updated",
            Err(_) => "new",
        };
        std::fs::write(&path, &picture.contents)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{PICTURES_DIR}/{} ({state})", picture.file);
    }
    Ok(ExitCode::SUCCESS)
}

/// The chapters whose `examples/walkthrough.rs` reads [`SNAPSHOT_VAR`], in order.
pub fn chapters_with_pictures(repo: &Repo) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for chapter in repo.chapter_names()? {
        let walkthrough = repo
            .exercises_dir()
            .join(&chapter)
            .join("examples")
            .join("walkthrough.rs");
        match std::fs::read_to_string(&walkthrough) {
            Ok(text) if text.contains(SNAPSHOT_VAR) || text.contains("SnapshotRequest") => {
                found.push(chapter)
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("reading {}", walkthrough.display()));
            }
        }
    }
    Ok(found)
}

/// What a walkthrough gave: its snapshot, its recorded activity (if any) and what it printed.
pub type Walked = (gpumem::Snapshot, Option<gpumem::Activity>, String);

/// Runs the chapters' walkthroughs ([`snapshot_of`]) as many at once as the machine has cores
/// (each is a process of its own, and most use one core), and returns what each gave in the
/// chapters' order. Each writes its own files in `scratch`, so none sees another's.
fn run_walkthroughs(repo: &Repo, chapters: &[String], scratch: &Path) -> Vec<Result<Walked>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Walked>>>> = chapters
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(chapter) = chapters.get(i) else {
                        break;
                    };
                    eprintln!("{chapter}: running its walkthrough on cpu");
                    let walked = snapshot_of(repo, chapter, scratch);
                    *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(walked);
                }
            });
        }
    });
    results
        .into_iter()
        .zip(chapters)
        .map(|(slot, chapter)| {
            slot.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| Err(anyhow::anyhow!("{chapter}'s walkthrough did not run")))
        })
        .collect()
}

/// Runs `chapter`'s walkthrough on the `cpu` device (of [`CPU_CAPACITY`]) with [`SNAPSHOT_VAR`]
/// set, and reads the snapshot it wrote into `scratch`, with the activity recorded beside it (if
/// any), and what it printed.
pub fn snapshot_of(repo: &Repo, chapter: &str, scratch: &Path) -> Result<Walked> {
    let file = scratch.join(format!("{chapter}.json"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args(["run", "--quiet", "-p", chapter, "--example", "walkthrough"])
        .current_dir(&repo.root)
        .env("GPUMEM_DEVICE", "cpu")
        .env(SNAPSHOT_VAR, &file)
        // A walkthrough keeps a prediction's answer until the learner's prediction matches it;
        // the page shows it inside a closed reveal.
        .env("WORKBOOK_ANSWERS", "show")
        // The pictures show the allocator's default rules, on a cpu device of the same size on
        // every machine.
        .env_remove("GPUMEM_ALLOC_CONF")
        .env("GPUMEM_CPU_CAPACITY", CPU_CAPACITY)
        .output()
        .with_context(|| format!("running {cargo:?} for {chapter}'s walkthrough"))?;
    if !output.status.success() {
        bail!(
            "{chapter}'s walkthrough failed ({}):\n{}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 30)
        );
    }
    if !file.is_file() {
        bail!(
            "{chapter}'s walkthrough ran but wrote no snapshot to {}: it must write \
             `dev.snapshot().to_json()` to the file {SNAPSHOT_VAR} names",
            file.display()
        );
    }
    let printed = String::from_utf8(output.stdout)
        .with_context(|| format!("{chapter}'s walkthrough printed text that is not UTF-8"))?;
    Ok((viz::read_snapshot(&file)?, read_activity(&file)?, printed))
}

/// The chapter whose page shows what its walkthrough prints when `GPUMEM_DEVICE=cuda` asks for a
/// GPU on a machine without CUDA.
const CUDA_ERROR_CHAPTER: &str = "ch01-availability";

/// The file holding that output: `ch01-availability-cuda-error.txt`.
pub const CUDA_ERROR_FILE: &str = "ch01-availability-cuda-error.txt";

/// What [`CUDA_ERROR_CHAPTER`]'s walkthrough prints (its output, then its error) when
/// `GPUMEM_DEVICE=cuda` names a GPU this machine cannot open, or `None` (with a notice) where CUDA
/// is available and the walkthrough runs: the page shows the error, which only a machine without
/// CUDA prints (CI's).
fn cuda_error_output(repo: &Repo) -> Result<Option<Picture>> {
    eprintln!("{CUDA_ERROR_CHAPTER}: running its walkthrough with GPUMEM_DEVICE=cuda");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args([
            "run",
            "--quiet",
            "-p",
            CUDA_ERROR_CHAPTER,
            "--example",
            "walkthrough",
        ])
        .current_dir(&repo.root)
        .env("GPUMEM_DEVICE", "cuda")
        .env_remove(SNAPSHOT_VAR)
        .env_remove("GPUMEM_ALLOC_CONF")
        // The error as a learner sees it, without the backtrace anyhow adds when asked.
        .env("RUST_BACKTRACE", "0")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .with_context(|| format!("running {cargo:?} for {CUDA_ERROR_CHAPTER}'s walkthrough"))?;
    if output.status.success() {
        eprintln!(
            "{CUDA_ERROR_CHAPTER}: CUDA is available here, so {PICTURES_DIR}/{CUDA_ERROR_FILE} \
             (what it prints without CUDA) is neither made nor checked"
        );
        return Ok(None);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    // What cargo itself may print (a warning) comes before the program's `Error:`.
    let Some(error) = stderr.find("Error: ").map(|at| &stderr[at..]) else {
        bail!(
            "{CUDA_ERROR_CHAPTER}'s walkthrough with GPUMEM_DEVICE=cuda failed without an \
             error of its own ({}):\n{}",
            output.status,
            tail(&stderr, 30)
        );
    };
    let printed = String::from_utf8_lossy(&output.stdout);
    Ok(Some(Picture {
        file: CUDA_ERROR_FILE.to_string(),
        contents: format!("{printed}{error}"),
    }))
}

/// The commands whose output `book/src/snapshots.md` shows, run on the fixture snapshots
/// `before.pickle` and `after.pickle` (`python3 bench/make_big_snapshot.py fixture`), in order
/// (the last reads the `oom.pickle` the one before it writes): the file under [`PICTURES_DIR`]
/// each output goes to, and the command's arguments after `workbook`.
const SNAPSHOT_COMMANDS: [(&str, &[&str]); 8] = [
    (
        "snapshots-inspect.txt",
        &["inspect", "before.pickle", "--top", "5", "--frames", "2"],
    ),
    (
        "snapshots-diff.txt",
        &["diff", "before.pickle", "after.pickle", "--frames", "2"],
    ),
    (
        "snapshots-replay-oom.txt",
        &[
            "replay",
            "before.pickle",
            "--repeat",
            "1",
            "--capacity",
            "20MiB",
            "--snapshot-out",
            "oom.pickle",
        ],
    ),
    (
        "snapshots-inspect-oom.txt",
        &["inspect", "oom.pickle", "--top", "3", "--frames", "1"],
    ),
    (
        "snapshots-real-inspect.txt",
        &[
            "inspect",
            "h100-torch-2.11-oom-expandable.pickle",
            "--top",
            "3",
            "--frames",
            "1",
        ],
    ),
    (
        "snapshots-real-replay.txt",
        &[
            "replay",
            "h100-torch-2.11-oom-expandable.pickle",
            "--capacity",
            "2GiB",
            "--alloc-conf",
            "expandable_segments:True",
            "--alloc-conf",
            "",
            "--alloc-conf",
            "max_split_size_mb:128",
        ],
    ),
    (
        "snapshots-frag-inspect.txt",
        &["inspect", "h100-torch-2.11-frag.pickle", "--top", "3"],
    ),
    (
        "snapshots-frag-replay.txt",
        &[
            "replay",
            "h100-torch-2.11-frag.pickle",
            "--capacity",
            "2GiB",
            "--alloc-conf",
            "",
            "--alloc-conf",
            "expandable_segments:True",
        ],
    ),
];

/// The snapshots of the repository that [`SNAPSHOT_COMMANDS`] read too, from its root: two that
/// torch 2.11 recorded on an H100, one of them an out-of-memory error from fragmentation.
const COPIED_SNAPSHOTS: [&str; 2] = [
    "conformance/real-snapshots/h100-torch-2.11-oom-expandable.pickle",
    "conformance/real-snapshots/h100-torch-2.11-frag.pickle",
];

/// The script that writes the fixture snapshots [`SNAPSHOT_COMMANDS`] read, from the
/// repository's root.
const FIXTURE_SCRIPT: &str = "bench/make_big_snapshot.py";

/// What each of [`SNAPSHOT_COMMANDS`] prints (its output, then its errors, as a terminal shows
/// them), run by this program in a scratch directory that holds the fixture snapshots.
fn snapshot_command_outputs(repo: &Repo) -> Result<Vec<Picture>> {
    eprintln!("snapshots.md: running workbook inspect, diff and replay on the fixture snapshots");
    let scratch = tempfile::Builder::new()
        .prefix("workbook-snapshots-")
        .tempdir()
        .context("making a temporary directory for the fixture snapshots")?;
    let script = repo.root.join(FIXTURE_SCRIPT);
    for (file, variant) in [("before.pickle", "before"), ("after.pickle", "after")] {
        let output = Command::new("python3")
            .arg(&script)
            .args(["fixture", file, "--variant", variant])
            .current_dir(scratch.path())
            .output()
            .with_context(|| format!("running python3 {}", script.display()))?;
        if !output.status.success() {
            bail!(
                "python3 {} fixture {file} failed ({}):\n{}",
                script.display(),
                output.status,
                tail(&String::from_utf8_lossy(&output.stderr), 30)
            );
        }
    }
    for file in COPIED_SNAPSHOTS {
        let from = repo.root.join(file);
        let copy = scratch.path().join(from.file_name().expect("a file name"));
        std::fs::copy(&from, &copy).with_context(|| format!("copying {}", from.display()))?;
    }
    let workbook = std::env::current_exe().context("finding this program to run it")?;
    let mut made = Vec::new();
    for (file, args) in SNAPSHOT_COMMANDS {
        let output = Command::new(&workbook)
            .args(args)
            .current_dir(scratch.path())
            .env("GPUMEM_DEVICE", "cpu")
            .env_remove("GPUMEM_ALLOC_CONF")
            .env_remove("GPUMEM_CPU_CAPACITY")
            .env("RUST_BACKTRACE", "0")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()
            .with_context(|| format!("running workbook {}", args.join(" ")))?;
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        made.push(Picture {
            file: file.to_string(),
            contents: walkthrough_output(&printed, &cpu_model()),
        });
    }
    Ok(made)
}

/// This machine's CPU model, as the cpu device names itself (empty if it cannot say).
fn cpu_model() -> String {
    gpumem::Device::cpu()
        .properties()
        .map(|p| p.name)
        .unwrap_or_default()
}

/// A walkthrough's output as its page shows it: what it printed, with this machine's CPU model
/// (`cpu_model`, the cpu device's name) written as [`CPU_MODEL`], since it differs from machine
/// to machine.
pub fn walkthrough_output(printed: &str, cpu_model: &str) -> String {
    if cpu_model.is_empty() {
        printed.to_string()
    } else {
        printed.replace(cpu_model, CPU_MODEL)
    }
}

/// A walkthrough's output with each measured time (a number followed by ` ms`) written as `… ms`:
/// what must be the same from run to run and machine to machine.
pub fn without_times(output: &str) -> String {
    let mut out = String::with_capacity(output.len());
    let mut rest = output;
    while let Some(at) = rest.find(" ms") {
        let (before, after) = rest.split_at(at);
        let number = before
            .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
            .map_or(0, |i| i + 1);
        if number < before.len() && before[number..].starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str(&before[..number]);
            out.push('…');
        } else {
            out.push_str(before);
        }
        out.push_str(" ms");
        rest = &after[" ms".len()..];
    }
    out.push_str(rest);
    without_time_stamps(&out)
}

/// `output` with each `time_us N` (a snapshot's time stamp, from the clock of the run that
/// recorded it) written as `time_us …`.
fn without_time_stamps(output: &str) -> String {
    let mut out = String::with_capacity(output.len());
    let mut rest = output;
    while let Some(at) = rest.find("time_us ") {
        let (before, after) = rest.split_at(at + "time_us ".len());
        out.push_str(before);
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push('…');
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// The block pool's steps a snapshot file holds beside the snapshot (its key `kv_blocks`, written
/// by chapter 13's walkthrough), as compact JSON, if any.
pub fn read_kv_blocks(file: &Path) -> Result<Option<String>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    Ok(json.get("kv_blocks").map(|blocks| format!("{blocks}\n")))
}

/// The activity a snapshot file holds beside the snapshot (its key `activity`, written by
/// `gpumem::SnapshotRequest`), if any.
pub fn read_activity(file: &Path) -> Result<Option<gpumem::Activity>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the snapshot {}", file.display()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    match json.get_mut("activity").map(serde_json::Value::take) {
        None => Ok(None),
        Some(value) => serde_json::from_value(value).map(Some).with_context(|| {
            format!(
                "the activity in {} is not what gpumem records",
                file.display()
            )
        }),
    }
}

/// Whether a chapter's activity gets pictures: when its walkthrough used pinned memory.
fn pictures_activity(activity: Option<&gpumem::Activity>) -> Option<&gpumem::Activity> {
    activity.filter(|a| !a.host.is_empty())
}

/// The pictures of one chapter's snapshot, and the history the interactive view reads; when the
/// walkthrough used pinned memory, the pictures of its activity too, and the history holds it.
pub fn pictures_of(
    chapter: &str,
    snapshot: &gpumem::Snapshot,
    activity: Option<&gpumem::Activity>,
) -> Vec<Picture> {
    let activity = pictures_activity(activity);
    let mut history = history_json(snapshot);
    let mut made: Vec<Picture> = KINDS
        .iter()
        .map(|(suffix, view)| Picture {
            file: format!("{chapter}-{suffix}.svg"),
            contents: viz::render(snapshot, *view),
        })
        .collect();
    if let Some(activity) = activity {
        if let Some(svg) = viz::activity::streams_svg(activity) {
            made.push(Picture {
                file: format!("{chapter}-{}.svg", ACTIVITY_SUFFIXES[0]),
                contents: svg,
            });
        }
        made.push(Picture {
            file: format!("{chapter}-{}.svg", ACTIVITY_SUFFIXES[1]),
            contents: viz::activity::pinned_svg(activity),
        });
        let end = history.trim_end().trim_end_matches('}').len();
        history = format!(
            "{},\n\"activity\":{}}}\n",
            &history[..end],
            activity_json(activity)
        );
    }
    made.push(Picture {
        file: format!("{chapter}-{HISTORY_SUFFIX}"),
        contents: history,
    });
    made
}

/// The activity as the interactive view reads it, compact and without clock times: `host`
/// rows `[tick, action, block, size, requested, allocated, reserved]`, `work` rows `[start,
/// end, kind, name, stream, bytes, block]` (`block` null when no pinned block), `marks` rows
/// `[tick, label]`; blocks numbered as the pictures number them, from 1.
pub fn activity_json(activity: &gpumem::Activity) -> String {
    let numbers = viz::activity::block_numbers(activity);
    let string = |s: &str| serde_json::to_string(s).expect("a string always serialises");
    let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let host: Vec<String> = activity
        .host
        .iter()
        .map(|e| {
            format!(
                "[{},\"{}\",{},{},{},{},{}]",
                e.tick,
                name(serde_json::to_value(e.action).unwrap_or_default()),
                numbers[&e.block],
                e.size,
                e.requested,
                e.allocated,
                e.reserved
            )
        })
        .collect();
    let work: Vec<String> = activity
        .work
        .iter()
        .map(|w| {
            format!(
                "[{},{},\"{}\",{},{},{},{}]",
                w.start,
                w.end,
                name(serde_json::to_value(w.kind).unwrap_or_default()),
                string(&w.name),
                w.stream,
                w.bytes,
                w.pinned_block
                    .map_or_else(|| "null".to_string(), |b| numbers[&b].to_string())
            )
        })
        .collect();
    let marks: Vec<String> = activity
        .marks
        .iter()
        .map(|m| format!("[{},{}]", m.tick, string(&m.label)))
        .collect();
    format!(
        "{{\"device\":{},\"host\":[\n{}\n],\n\"work\":[\n{}\n],\n\"marks\":[{}]}}",
        string(&activity.device),
        host.join(",\n"),
        work.join(",\n"),
        marks.join(",")
    )
}

/// What differs between the pictures `made` and the files in `dir`: one line per picture.
pub fn differences(dir: &Path, made: &[Picture]) -> Vec<String> {
    let mut out = Vec::new();
    for picture in made {
        let path: PathBuf = dir.join(&picture.file);
        // What a command printed (`.txt`): its times differ from run to run.
        let output = picture.file.ends_with(".txt");
        match std::fs::read_to_string(&path) {
            Ok(old) if old == picture.contents => {}
            // A walkthrough's times differ from run to run: only the rest must match.
            Ok(old) if output && without_times(&old) == without_times(&picture.contents) => {}
            Ok(_) => out.push(format!("{PICTURES_DIR}/{}: out of date", picture.file)),
            Err(_) => out.push(format!("{PICTURES_DIR}/{}: missing", picture.file)),
        }
    }
    out
}

/// Files in `dir` named like a chapter's (`*-timeline.svg`, `*-segments.svg`, `*-streams.svg`,
/// `*-pinned.svg`, `*-history.json`, `*-blocks.json`, `*-walkthrough.txt`) that none of
/// `chapters` makes.
pub fn orphans(dir: &Path, chapters: &[String]) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let name = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        let chapter = KINDS
            .iter()
            .map(|(suffix, _)| format!("-{suffix}.svg"))
            .chain(ACTIVITY_SUFFIXES.iter().map(|s| format!("-{s}.svg")))
            .chain([
                format!("-{HISTORY_SUFFIX}"),
                format!("-{BLOCKS_SUFFIX}"),
                format!("-{OUTPUT_SUFFIX}"),
            ])
            .find_map(|suffix| name.strip_suffix(&suffix).map(str::to_string));
        if let Some(chapter) = chapter
            && !chapters.contains(&chapter)
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// The history the book's interactive view (book/theme/workbook.js) steps through, as compact
/// JSON. Host addresses differ from run to run, so none is written: a block is named by its
/// segment (numbered from 0 by `viz::SegmentNumbers`, the rule the segment map numbers them by;
/// both show the number counted from 1) and its offset there.
///
/// `trace` holds one row per event: `[action, segment, offset, size, requested, stream,
/// allocated, reserved]`, the action named as torch's trace names it. For `alloc`,
/// `free_requested` and `free_completed`, `size` is the block's size (the change in allocated
/// bytes at its alloc or free_requested: torch's trace gives only the size asked for, which is
/// `requested`); for segment events it is the segment's (or mapped range's) size; for `oom` the
/// segment that could not be reserved; for `snapshot` the active bytes then. `segment` is null when the event lies in no segment the trace reserved.
/// `before` is `[allocated, reserved]` before the first event; `initial` the segments reserved
/// before recording began, each `{size, blocks}` with the blocks known to be live then
/// (`[offset, size, requested, stream]`: those the trace frees without allocating, and those
/// live at the end that no alloc in the trace made); `segments` the segment map when the
/// snapshot was taken. `steps` names the parts of the program the walkthrough marked
/// (`dev.record_annotation`): `[index, label]`, the step beginning at the event `trace[index]`
/// (`index` is the trace's length for a mark after the last event); annotations are no events.
pub fn history_json(snapshot: &gpumem::Snapshot) -> String {
    use gpumem::TraceAction as A;
    let mut events = Vec::with_capacity(snapshot.trace.len());
    let mut steps = Vec::new();
    for e in &snapshot.trace {
        match (e.action, &e.label) {
            (A::Annotation, Some(label)) => steps.push(format!(
                "[{},{}]",
                events.len(),
                serde_json::to_string(label).expect("a string always serialises")
            )),
            (A::Annotation, None) => {}
            _ => events.push(e.clone()),
        }
    }
    let trace = &events;
    // Segments numbered by the book's one rule, as the segment map numbers them.
    let mut numbers = crate::snapshot::viz::SegmentNumbers::new(snapshot);
    let initial = numbers.initial;
    let initial_sizes: Vec<u64> = numbers.segments.iter().map(|s| s.size).collect();
    // Which blocks are live as the trace is replayed, and the blocks that were live before
    // recording began (freed in the trace without being allocated there, or live at the end
    // without an alloc in the trace): (segment, offset, size, requested, stream).
    // Live blocks, and blocks freed (`free_requested`) but not yet back in the cache
    // (`free_completed`), by (segment, offset), with their sizes.
    let mut live = std::collections::BTreeMap::new();
    let mut pending = std::collections::BTreeMap::new();
    let mut live_before: Vec<(usize, u64, u64, u64, u64)> = Vec::new();
    let config = gpumem::AllocatorConfig::default();
    let mut rows = Vec::with_capacity(trace.len());
    let mut before = (0u64, 0u64);
    for (i, e) in trace.iter().enumerate() {
        let previous = if i == 0 {
            None
        } else {
            Some(trace[i - 1].allocated)
        };
        let (segment, offset) = numbers.apply(e);
        let (size, requested) = match e.action {
            A::Alloc => (
                match previous {
                    Some(p) => e.allocated.saturating_sub(p),
                    None => gpumem::allocator::round_size(e.size as usize, &config) as u64,
                },
                e.size,
            ),
            A::FreeRequested => (
                match previous {
                    Some(p) => p.saturating_sub(e.allocated),
                    None => gpumem::allocator::round_size(e.size as usize, &config) as u64,
                },
                e.size,
            ),
            A::FreeCompleted => (
                match segment.and_then(|k| pending.get(&(k, offset))) {
                    Some(size) => *size,
                    None => gpumem::allocator::round_size(e.size as usize, &config) as u64,
                },
                e.size,
            ),
            _ => (e.size, 0),
        };
        if i == 0 {
            before = match e.action {
                A::Alloc => (e.allocated.saturating_sub(size), e.reserved),
                A::FreeRequested => (e.allocated + size, e.reserved),
                A::SegmentAlloc | A::SegmentMap => (e.allocated, e.reserved.saturating_sub(e.size)),
                A::SegmentFree | A::SegmentUnmap => (e.allocated, e.reserved + e.size),
                A::FreeCompleted | A::Oom | A::Snapshot | A::Annotation => {
                    (e.allocated, e.reserved)
                }
            };
        }
        match (e.action, segment) {
            (A::Alloc, Some(k)) => {
                live.insert((k, offset), size);
            }
            (A::FreeRequested, Some(k)) => {
                if live.remove(&(k, offset)).is_none() && k < initial {
                    live_before.push((k, offset, size, requested, e.stream));
                }
                pending.insert((k, offset), size);
            }
            (A::FreeCompleted, Some(k)) => {
                pending.remove(&(k, offset));
            }
            _ => {}
        }
        let segment = segment.map_or_else(|| "null".to_string(), |k| k.to_string());
        rows.push(format!(
            "[\"{}\",{segment},{offset},{size},{requested},{},{},{}]",
            e.action.torch_name(),
            e.stream,
            e.allocated,
            e.reserved
        ));
    }
    // The segment map at the end, numbered as above.
    let mut end = Vec::new();
    for s in &snapshot.segments {
        let number = numbers.containing(s.address);
        if let Some(k) = number.filter(|k| *k < initial) {
            for b in &s.blocks {
                let offset = b.address - s.address;
                if b.state != gpumem::history::BlockState::Inactive
                    && !live.contains_key(&(k, offset))
                {
                    live_before.push((k, offset, b.size, b.requested_size, s.stream));
                }
            }
        }
        let blocks: Vec<String> = s
            .blocks
            .iter()
            .map(|b| {
                let state = match b.state {
                    gpumem::history::BlockState::ActiveAllocated => "live",
                    gpumem::history::BlockState::ActivePendingFree => "pending_free",
                    gpumem::history::BlockState::Inactive => "free",
                };
                format!(
                    "[{},{},{},\"{state}\"]",
                    b.address - s.address,
                    b.size,
                    b.requested_size
                )
            })
            .collect();
        end.push((
            number,
            format!(
                "{{\"segment\":{},\"pool\":\"{}\",\"size\":{},\"stream\":{},\"blocks\":[{}]}}",
                number.map_or_else(|| "null".to_string(), |k| k.to_string()),
                if s.segment_type == "small" {
                    "small"
                } else {
                    "large"
                },
                s.total_size,
                s.stream,
                blocks.join(",")
            ),
        ));
    }
    end.sort_by_key(|(number, _)| *number);
    live_before.sort();
    let initial: Vec<String> = initial_sizes
        .iter()
        .enumerate()
        .map(|(k, size)| {
            let blocks: Vec<String> = live_before
                .iter()
                .filter(|b| b.0 == k)
                .map(|b| format!("[{},{},{},{}]", b.1, b.2, b.3, b.4))
                .collect();
            format!("{{\"size\":{size},\"blocks\":[{}]}}", blocks.join(","))
        })
        .collect();
    let device = serde_json::to_string(&snapshot.device).expect("a string always serialises");
    format!(
        "{{\"device\":{device},\"columns\":[\"action\",\"segment\",\"offset\",\"size\",\"requested\",\
         \"stream\",\"allocated\",\"reserved\"],\n\"before\":[{},{}],\"initial\":[{}],\n\"steps\":[{}],\n\"trace\":[\n{}\n],\n\
         \"segments\":[\n{}\n]}}\n",
        before.0,
        before.1,
        initial.join(","),
        steps.join(","),
        rows.join(",\n"),
        end.into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(",\n")
    )
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::viz::tests::entry;
    use gpumem::{TraceAction, TraceEntry};

    fn picture(file: &str, contents: &str) -> Picture {
        Picture {
            file: file.to_string(),
            contents: contents.to_string(),
        }
    }

    #[test]
    fn a_walkthrough_output_that_differs_only_in_its_times_is_up_to_date() {
        let dir = tempfile::tempdir().unwrap();
        let old = "device cpu (<CPU model>)\n  probing took 1.701 ms; 12 blocks\n";
        std::fs::write(dir.path().join("a-walkthrough.txt"), old).unwrap();
        std::fs::write(dir.path().join("b-walkthrough.txt"), old).unwrap();
        let made = [
            picture(
                "a-walkthrough.txt",
                "device cpu (<CPU model>)\n  probing took 0.2 ms; 12 blocks\n",
            ),
            picture(
                "b-walkthrough.txt",
                "device cpu (<CPU model>)\n  probing took 1.701 ms; 13 blocks\n",
            ),
        ];
        assert_eq!(
            differences(dir.path(), &made),
            vec!["book/src/pictures/b-walkthrough.txt: out of date"]
        );
    }

    #[test]
    fn only_numbers_before_ms_count_as_times() {
        assert_eq!(
            without_times("took 1.7 ms, 0.001 ms; 3 items ms; 5 ms"),
            "took … ms, … ms; 3 items ms; … ms"
        );
        assert_eq!(without_times("no time here"), "no time here");
        assert_eq!(
            without_times("at event 3 (time_us 1795631747223903); time_us x"),
            "at event 3 (time_us …); time_us x"
        );
    }

    #[test]
    fn the_cpu_model_is_written_as_a_placeholder() {
        assert_eq!(
            walkthrough_output("device cpu (AMD EPYC)\n  name = AMD EPYC\n", "AMD EPYC"),
            "device cpu (<CPU model>)\n  name = <CPU model>\n"
        );
        assert_eq!(walkthrough_output("device cpu ()\n", ""), "device cpu ()\n");
    }

    #[test]
    fn differences_name_missing_and_changed_pictures() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a-timeline.svg"), "<svg>old</svg>").unwrap();
        std::fs::write(dir.path().join("a-segments.svg"), "<svg>same</svg>").unwrap();
        let made = [
            picture("a-timeline.svg", "<svg>new</svg>"),
            picture("a-segments.svg", "<svg>same</svg>"),
            picture("b-timeline.svg", "<svg/>"),
        ];
        assert_eq!(
            differences(dir.path(), &made),
            vec![
                "book/src/pictures/a-timeline.svg: out of date",
                "book/src/pictures/b-timeline.svg: missing",
            ]
        );
    }

    #[test]
    fn orphans_are_chapter_pictures_no_chapter_makes() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "a-timeline.svg",
            "a-history.json",
            "gone-segments.svg",
            "gone-history.json",
            "gone-walkthrough.txt",
            "diagram.svg",
        ] {
            std::fs::write(dir.path().join(f), "<svg/>").unwrap();
        }
        assert_eq!(
            orphans(dir.path(), &["a".to_string()]).unwrap(),
            vec![
                "gone-history.json",
                "gone-segments.svg",
                "gone-walkthrough.txt"
            ]
        );
        assert!(orphans(&dir.path().join("none"), &[]).unwrap().is_empty());
    }

    #[test]
    fn each_snapshot_gives_a_timeline_and_a_segment_map() {
        let snapshot = gpumem::Snapshot {
            device: "cpu".to_string(),
            segments: Vec::new(),
            trace: Vec::new(),
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        };
        let made = pictures_of("ch09-x", &snapshot, None);
        let files: Vec<&str> = made.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "ch09-x-timeline.svg",
                "ch09-x-segments.svg",
                "ch09-x-history.json"
            ]
        );
        assert!(made[0].contents.contains("Active memory timeline"));
        assert!(made[1].contents.contains("Segments · cpu"));
    }

    #[test]
    fn a_walkthrough_that_used_pinned_memory_gets_the_activity_pictures() {
        use gpumem::activity::{Activity, HostAction, HostEvent, WorkKind, WorkSpan};
        let snapshot = gpumem::Snapshot {
            device: "cpu".to_string(),
            segments: Vec::new(),
            trace: Vec::new(),
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        };
        let copy = WorkSpan {
            start: 1,
            end: 2,
            kind: WorkKind::HostToDevice,
            name: "copy".into(),
            stream: 1,
            bytes: 4000,
            pinned_block: Some(9),
            start_ns: 123,
            end_ns: 456,
        };
        let mut activity = Activity {
            device: "cpu".into(),
            host: Vec::new(),
            work: vec![copy],
            marks: Vec::new(),
        };
        // Copies and kernels alone (every chapter has them): no activity pictures.
        assert_eq!(pictures_of("ch07-x", &snapshot, Some(&activity)).len(), 3);
        activity.host.push(HostEvent {
            tick: 0,
            action: HostAction::Alloc,
            block: 9,
            size: 4096,
            requested: 4000,
            allocated: 4096,
            reserved: 4096,
        });
        let made = pictures_of("ch07-x", &snapshot, Some(&activity));
        let files: Vec<&str> = made.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "ch07-x-timeline.svg",
                "ch07-x-segments.svg",
                "ch07-x-streams.svg",
                "ch07-x-pinned.svg",
                "ch07-x-history.json"
            ]
        );
        let history: serde_json::Value = serde_json::from_str(&made[4].contents).unwrap();
        assert_eq!(history["device"], "cpu");
        assert_eq!(
            history["activity"]["host"],
            serde_json::json!([[0, "alloc", 1, 4096, 4000, 4096, 4096]])
        );
        assert_eq!(
            history["activity"]["work"],
            serde_json::json!([[1, 2, "host_to_device", "copy", 1, 4000, 1]])
        );
        // No clock time goes into the book: the same program gives the same bytes.
        assert!(!made[4].contents.contains("456"));
    }

    #[test]
    fn annotations_become_steps_and_no_events() {
        let mark = |label: &str| TraceEntry {
            label: Some(label.to_string()),
            ..entry(TraceAction::Annotation, 0, 0, 0, 2 << 20)
        };
        let trace = vec![
            mark("1. \"first\""),
            entry(TraceAction::SegmentAlloc, 0x1000, 2 << 20, 0, 2 << 20),
            entry(TraceAction::Alloc, 0x1000, 512, 512, 2 << 20),
            mark("2. then"),
            entry(TraceAction::FreeRequested, 0x1000, 512, 0, 2 << 20),
            mark("3. at the end"),
        ];
        let snapshot = gpumem::Snapshot {
            device: "cpu".to_string(),
            segments: Vec::new(),
            trace,
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
        };
        let json: serde_json::Value = serde_json::from_str(&history_json(&snapshot)).unwrap();
        assert_eq!(
            json["steps"],
            serde_json::json!([[0, "1. \"first\""], [2, "2. then"], [3, "3. at the end"]])
        );
        let actions: Vec<&str> = json["trace"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[0].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["segment_alloc", "alloc", "free_requested"]);
        assert_eq!(json["before"], serde_json::json!([0, 0]));
    }

    #[test]
    fn the_history_names_the_blocks_live_before_recording_began() {
        use gpumem::history::{BlockInfo, BlockState, SegmentInfo};
        let base = 0x7f00_0000_0000;
        let block = |offset: u64, size: u64, requested_size: u64, state| BlockInfo {
            address: base + offset,
            size,
            requested_size,
            state,
        };
        // Before recording: blocks at 0 (kept) and 512 (freed in the trace) in a 2 MiB segment.
        let snapshot = gpumem::Snapshot {
            device: "cpu".to_string(),
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
            segments: vec![SegmentInfo::new(
                base,
                gpumem::StreamId(0),
                gpumem::Pool::Small,
                false,
                vec![
                    block(0, 512, 100, BlockState::ActiveAllocated),
                    block(512, 1024, 0, BlockState::Inactive),
                    block(1536, 512, 8, BlockState::ActiveAllocated),
                    block(2048, (2 << 20) - 2048, 0, BlockState::Inactive),
                ],
            )],
            trace: vec![
                entry(TraceAction::FreeRequested, base + 512, 1000, 512, 2 << 20),
                entry(TraceAction::Alloc, base + 1536, 8, 1024, 2 << 20),
            ],
        };
        let history: serde_json::Value = serde_json::from_str(&history_json(&snapshot)).unwrap();
        assert_eq!(history["before"], serde_json::json!([1536, 2 << 20]));
        assert_eq!(
            history["initial"],
            serde_json::json!([{"size": 2 << 20, "blocks": [[0, 512, 100, 0], [512, 1024, 1000, 0]]}])
        );
    }

    #[test]
    fn the_history_names_blocks_by_segment_and_offset_with_the_block_size() {
        use gpumem::history::{BlockInfo, BlockState, SegmentInfo};
        const MIB: u64 = 1 << 20;
        let base = 0x7f00_0000_0000;
        let other = base; // the second segment is reserved where the first was
        let snapshot = gpumem::Snapshot {
            device: "cpu".to_string(),
            allocator_settings: Default::default(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
            segments: vec![SegmentInfo::new(
                other,
                gpumem::StreamId(0),
                gpumem::Pool::Small,
                false,
                vec![
                    BlockInfo {
                        address: other,
                        size: 512,
                        requested_size: 4,
                        state: BlockState::ActiveAllocated,
                    },
                    BlockInfo {
                        address: other + 512,
                        size: 2 * MIB - 512,
                        requested_size: 0,
                        state: BlockState::Inactive,
                    },
                ],
            )],
            trace: vec![
                entry(TraceAction::SegmentAlloc, base, 20 * MIB, 0, 20 * MIB),
                entry(TraceAction::Alloc, base, 3_000_000, 3_000_064, 20 * MIB),
                entry(TraceAction::FreeRequested, base, 3_000_000, 0, 20 * MIB),
                entry(TraceAction::SegmentFree, base, 20 * MIB, 0, 0),
                entry(TraceAction::SegmentAlloc, other, 2 * MIB, 0, 2 * MIB),
                entry(TraceAction::Alloc, other, 4, 512, 2 * MIB),
                entry(TraceAction::Oom, 0, 40 * MIB, 512, 2 * MIB),
            ],
        };
        let json = history_json(&snapshot);
        assert!(!json.contains(&base.to_string()) && !json.contains(&other.to_string()));
        let history: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(history["before"], serde_json::json!([0, 0]));
        let rows = history["trace"].as_array().unwrap();
        assert_eq!(
            rows[1],
            serde_json::json!(["alloc", 0, 0, 3_000_064, 3_000_000, 0, 3_000_064, 20 * MIB])
        );
        assert_eq!(rows[2][3], serde_json::json!(3_000_064));
        // A segment reserved again at an address once used is a new segment.
        assert_eq!(
            rows[5],
            serde_json::json!(["alloc", 1, 0, 512, 4, 0, 512, 2 * MIB])
        );
        assert_eq!(rows[6][1], serde_json::Value::Null);
        assert_eq!(history["segments"][0]["segment"], serde_json::json!(1));
        assert_eq!(
            history["segments"][0]["blocks"][0],
            serde_json::json!([0, 512, 4, "live"])
        );
    }
}
