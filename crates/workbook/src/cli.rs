//! The command line: every command and flag of `workbook`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The GPU Memory Workbook: check this machine, verify the exercises, build the book.
#[derive(Debug, Parser)]
#[command(
    name = "workbook",
    version,
    after_help = "Exit status: 0 when all is well, 1 when the command found problems (a failing \
                  check, a malformed setting), 2 when it could not run."
)]
pub struct Cli {
    /// The workbook's root directory (default: found from the current directory upwards).
    #[arg(long, global = true, env = "WORKBOOK_ROOT", value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start here: check this machine, build and serve the book, show your progress.
    Start(StartArgs),
    /// Every chapter and exercise with its state, your progress, and what to do next.
    List(ListArgs),
    /// Run a chapter's tests on your code: what passes, what fails, and why.
    Check(CheckArgs),
    /// Check a chapter again every time you save a file in its src/.
    Watch(WatchArgs),
    /// The next hint for an exercise, gentle first, then more explicit.
    Hint(HintArgs),
    /// Put a chapter's original stubs back in its src/ (your files are backed up first).
    Reset(ResetArgs),
    /// The reference solution of a chapter, once its tests pass.
    Solution(SolutionArgs),
    /// Report CUDA, the devices, the GPUMEM_* settings, and smoke-test the allocator.
    Doctor,
    /// Prove that every test fails on the stubs and passes on the reference solutions.
    Verify(VerifyArgs),
    /// Build the book (book/) into book/book/ or another directory.
    Book(BookArgs),
    /// Grade submissions with the official (and hidden) tests: a table, Gradescope JSON, JUnit
    /// XML, CSV, and a feedback report per student.
    Grade(GradeArgs),
    /// Package the grader for a hosted autograder (`export gradescope --out autograder.zip`).
    Export(ExportArgs),
    /// Draw a gpumem snapshot as SVG: memory over time, and each segment with its blocks.
    Viz(VizArgs),
    /// Make the book's pictures from each chapter's walkthrough, or check they are up to date.
    Pictures(PicturesArgs),
    /// Replay allocation traces through a fresh caching allocator: peaks, fragmentation
    /// overhead, device reservations, time per event.
    Replay(ReplayArgs),
}

/// Flags of `workbook replay`.
#[derive(Debug, Args)]
#[command(after_help = "The trace format and the committed traces: bench/README.md.")]
pub struct ReplayArgs {
    /// Trace files (JSON, `"format": "gpumem-alloc-trace"`), or PyTorch snapshot pickles
    /// (`torch.cuda.memory._dump_snapshot`), whose device_traces are replayed.
    #[arg(value_name = "TRACE.json|SNAPSHOT.pickle", required = true)]
    pub traces: Vec<PathBuf>,
    /// The memory behind the allocator: cpu (host memory), cuda or cuda:N (cuMemAlloc).
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    pub device: String,
    /// Replays per trace, each through a fresh allocator; the time per event is their median.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// The cpu device's memory (bytes, or with a KiB/MiB/GiB suffix); default: no limit.
    #[arg(long, value_name = "SIZE")]
    pub capacity: Option<String>,
    /// Print JSON (a list, one object per trace) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// What-if: replay each trace once per setting (GPUMEM_ALLOC_CONF syntax, "" for torch's
    /// defaults) and print them side by side; repeat the flag to compare settings.
    #[arg(long = "alloc-conf", value_name = "CONF")]
    pub alloc_conf: Vec<String>,
    /// With --alloc-conf: cap each replay's reservations at this fraction of the capacity
    /// (set_per_process_memory_fraction; garbage_collection_threshold needs one, as in torch).
    #[arg(long = "memory-fraction", value_name = "F", requires = "alloc_conf")]
    pub memory_fraction: Option<f64>,
    /// Write the allocator's state after the replay (one trace, at most one --alloc-conf) as a
    /// PyTorch snapshot pickle, for pytorch.org/memory_viz.
    #[arg(long = "snapshot-out", value_name = "FILE.pickle")]
    pub snapshot_out: Option<PathBuf>,
}

/// Flags of `workbook verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Chapters to verify, by name or unique prefix (`ch01`); default: all.
    #[arg(value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Test processes to run at once (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is killed and counts as timed out.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
}

/// Flags of `workbook book`.
#[derive(Debug, Args)]
pub struct BookArgs {
    /// Where to write the HTML (default: book/book/).
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
    /// Serve the book on 127.0.0.1 until Ctrl-C.
    #[arg(long)]
    pub serve: bool,
    /// Open the book in the browser (a warning if no browser can be started).
    #[arg(long)]
    pub open: bool,
    /// The port to serve on (default: 3000, or the next free one).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
}

/// Flags of `workbook start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// Build the book and report, but do not serve it.
    #[arg(long)]
    pub no_serve: bool,
    /// Open the book in the browser (a warning if no browser can be started).
    #[arg(long)]
    pub open: bool,
    /// The port to serve on (default: 3000, or the next free one).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
}

/// Flags of `workbook list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Check every chapter now, instead of showing the results of the last checks.
    #[arg(long)]
    pub refresh: bool,
    /// How the chapter's tests run.
    #[command(flatten)]
    pub tests: TestRunArgs,
}

/// Flags of `workbook check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The chapter, by name or unique prefix (`ch01`); default: the first one not done.
    #[arg(value_name = "CHAPTER")]
    pub chapter: Option<String>,
    /// How the chapter's tests run.
    #[command(flatten)]
    pub tests: TestRunArgs,
}

/// How `list --refresh`, `check`, `watch` and `solution` run a chapter's tests.
#[derive(Debug, Args)]
pub struct TestRunArgs {
    /// Test processes to run at once (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is stopped and counts as failed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Memory one test process may have, such as 4GiB or 512MiB, or `none`; half of it is the cpu
    /// device's capacity (unless GPUMEM_CPU_CAPACITY is set). A loop that allocates forever then
    /// fails its test instead of taking the machine's memory.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_memory_limit)]
    pub memory_limit: MemoryLimit,
}

/// Flags of `workbook watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The chapter, by name or unique prefix (`ch01`); default: the first one not done.
    #[arg(value_name = "CHAPTER")]
    pub chapter: Option<String>,
    /// Read the files at an interval instead of waiting for file-system events (for file systems
    /// that send none: network shares, some VM and container mounts).
    #[arg(long)]
    pub poll: bool,
    /// Milliseconds between two reads with --poll (and when events are not available).
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..))]
    pub poll_interval: u64,
    /// How the chapter's tests run.
    #[command(flatten)]
    pub tests: TestRunArgs,
}

/// Flags of `workbook hint`.
#[derive(Debug, Args)]
pub struct HintArgs {
    /// The chapter, by name or unique prefix (`ch01`).
    #[arg(value_name = "CHAPTER")]
    pub chapter: String,
    /// The exercise, by name, unique prefix or number; default: the first one not done.
    #[arg(value_name = "EXERCISE")]
    pub exercise: Option<String>,
    /// Show every hint given so far instead of the next one.
    #[arg(long)]
    pub all: bool,
}

/// Flags of `workbook reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The chapter, by name or unique prefix (`ch01`).
    #[arg(value_name = "CHAPTER")]
    pub chapter: String,
    /// Do not ask (needed where there is no terminal to ask on).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Flags of `workbook solution`.
#[derive(Debug, Args)]
pub struct SolutionArgs {
    /// The chapter, by name or unique prefix (`ch01`).
    #[arg(value_name = "CHAPTER")]
    pub chapter: String,
    /// Show it even though the chapter's tests do not pass yet.
    #[arg(long)]
    pub force: bool,
    /// How the chapter's tests run, if a check is needed.
    #[command(flatten)]
    pub tests: TestRunArgs,
}

/// Flags of `workbook grade`.
#[derive(Debug, Args)]
#[command(
    after_help = "A submission is a folder (a copy of the workbook, its exercises/ folder, or \
                  <chapter>/src folders) or a .zip, .tar.gz, .tgz or .tar of one. Each chapter's \
                  src/ is laid over a pristine copy of its crate: the official tests/ and \
                  Cargo.toml are used, never the submitted ones.\n\n\
                  Hidden tests: <FOLDER>/<chapter>/*.rs, each a test file like those in tests/; \
                  <FOLDER>/<chapter>/points.toml maps test names to points (a test it does not \
                  list is worth 1 point)."
)]
pub struct GradeArgs {
    /// Submissions to grade: folders or archives; each student is named after the entry.
    #[arg(value_name = "SUBMISSION")]
    pub submissions: Vec<PathBuf>,
    /// Grade every folder and archive in FOLDER, one per student (named after the entry).
    #[arg(long, value_name = "FOLDER")]
    pub class: Option<PathBuf>,
    /// Grade only this chapter (name or unique prefix; repeat for more); default: all.
    #[arg(long = "chapter", value_name = "CHAPTER")]
    pub chapters: Vec<String>,
    /// Add the tests in FOLDER/<chapter>/*.rs, which the learners never saw.
    #[arg(long, value_name = "FOLDER")]
    pub hidden_tests: Option<PathBuf>,
    /// What to print on stdout: a table, or Gradescope's results.json.
    #[arg(long, value_enum, default_value_t = GradeFormat::Table)]
    pub format: GradeFormat,
    /// Write Gradescope's results.json to FILE (several submissions: FILE is a folder of
    /// <student>.json).
    #[arg(long, value_name = "FILE")]
    pub gradescope: Option<PathBuf>,
    /// Write JUnit XML (a test suite per student and chapter) to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write a CSV to FILE: one row per student, one column per chapter, and the total.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write one Markdown feedback report per student into FOLDER.
    #[arg(long, value_name = "FOLDER")]
    pub feedback: Option<PathBuf>,
    /// Chapters graded at once, and test processes at once in each (default: the machine's cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seconds a test may run before it is killed and counts as failed (timed out).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Memory one test process may have (its heap and private mappings), such as 4GiB or 512MiB,
    /// or `none`. Half of it is the cpu device's capacity (unless GPUMEM_CPU_CAPACITY is set), so
    /// runaway allocations end in an out-of-memory error instead of taking the machine's memory.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_memory_limit)]
    pub memory_limit: MemoryLimit,
    /// Keep the test executables of every graded chapter (about 20 MB each) under target/workbook.
    #[arg(long)]
    pub keep_builds: bool,
    /// Run the tests without the bubblewrap sandbox (where it cannot run): the learners' code then
    /// runs with your permissions and can forge its results. Only for code you trust.
    #[arg(long)]
    pub no_sandbox: bool,
}

/// The `--memory-limit` of `check`, `watch` and `grade`: bytes, or no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit(pub Option<u64>);

/// The smallest `--memory-limit`: below it a test process cannot even start.
pub const MIN_MEMORY_LIMIT: u64 = 64 << 20;

fn parse_memory_limit(text: &str) -> Result<MemoryLimit, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(MemoryLimit(None));
    }
    let bytes = gpumem::format::parse_bytes(text).ok_or_else(|| {
        format!("`{text}` is not a size: write it like 4GiB, 512MiB or 1073741824, or `none`")
    })?;
    if bytes < MIN_MEMORY_LIMIT {
        return Err(format!(
            "{text} is too little for a test process to start; give 64MiB or more, or `none`"
        ));
    }
    Ok(MemoryLimit(Some(bytes)))
}

/// What `workbook grade` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GradeFormat {
    /// A table: one row per student, one column per chapter, then what cost points.
    Table,
    /// Gradescope's results.json (several submissions: an object of them by student).
    Json,
}

/// Flags of `workbook viz`.
#[derive(Debug, Args)]
#[command(
    after_help = "Write a snapshot with `dev.record_memory_history(true)` before the work and \
                  `std::fs::write(path, dev.snapshot().to_json())` after it."
)]
pub struct VizArgs {
    /// The snapshot: the JSON that `dev.snapshot().to_json()` writes, or a snapshot pickle
    /// (`dev.dump_snapshot`, PyTorch's `torch.cuda.memory._dump_snapshot`).
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: PathBuf,
    /// The SVG file to write.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// What to draw: the timeline, the segment map, or both (one above the other).
    #[arg(long, value_enum, default_value_t = crate::viz::View::Both)]
    pub view: crate::viz::View,
}

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

/// `workbook export`: the grader, packaged for a hosted autograder.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// What to package it for.
    #[command(subcommand)]
    pub target: ExportTarget,
}

/// The autograders `workbook export` packages for.
#[derive(Debug, Subcommand)]
pub enum ExportTarget {
    /// Gradescope's zip: setup.sh (Rust, bubblewrap, the tests built once), run_autograder (grades
    /// /autograder/submission into /autograder/results/results.json), the workspace.
    Gradescope(ExportGradescopeArgs),
}

/// `workbook export gradescope`.
#[derive(Debug, Args)]
pub struct ExportGradescopeArgs {
    /// Where to write the zip.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Hidden tests to grade with too: FOLDER/<chapter>/*.rs and points.toml, as for `grade`.
    #[arg(long, value_name = "FOLDER")]
    pub hidden_tests: Option<PathBuf>,
    /// run_autograder grades with `grade --no-sandbox` (where the sandbox cannot run): each
    /// submission is then isolated only by Gradescope's container, and can forge its results.
    #[arg(long)]
    pub no_sandbox: bool,
}
