//! `workbook replay`: runs allocation traces (`gpumem::trace`, format in `bench/README.md`)
//! through a fresh caching allocator and prints the peaks, the fragmentation overhead, the device
//! reservations and the time per event — the columns `bench/torch_replay.py` prints for PyTorch.
//!
//! Each replay gets a private allocator (never the shared device's), so nothing else in the process
//! disturbs it: over host memory on `cpu`, over the driver (`cuMemAlloc`) on `cuda:N`.

use crate::snapshot::analysis::Range;
use crate::snapshot::replay::read_device_trace;
use anyhow::{Context, Result, bail};
use clap::Args;
use gpumem::backend::{DeviceBackend, RawMemory};
use gpumem::backend_cpu::CpuBackend;
use gpumem::backend_cuda::CudaBackend;
use gpumem::snapshot_pickle;
use gpumem::trace::{AllocTrace, ReplayError, ReplayStats, replay, replay_recorded};
use gpumem::{AllocatorConfig, CachingAllocator, DeviceKind, format_bytes};
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Replay only the events from START up to END (event indices, or microseconds with a us
    /// suffix for a snapshot): from an empty cache at START, frees of blocks allocated before it
    /// left out.
    #[arg(long, value_name = "START..END")]
    pub range: Option<String>,
    /// Write the allocator's state after the replay (one trace, at most one --alloc-conf) as a
    /// PyTorch snapshot pickle, for pytorch.org/memory_viz.
    #[arg(long = "snapshot-out", value_name = "FILE.pickle")]
    pub snapshot_out: Option<PathBuf>,
    /// The device of a snapshot to replay (what `--device N` chooses in `workbook inspect`,
    /// `diff` and `viz`; here `--device` is where the replay runs). Default: the device whose
    /// allocated peak is the largest.
    #[arg(long = "snapshot-device", value_name = "N")]
    pub snapshot_device: Option<usize>,
}

/// One trace's result: the stats of the first replay and the median time per event over all.
#[derive(Debug, Clone)]
pub struct TraceResult {
    /// The trace's name (its file name without `.json`).
    pub name: String,
    /// The path as given.
    pub path: String,
    /// The trace's own description.
    pub description: String,
    /// What the replay measured (the first replay; every replay gives the same counts).
    pub stats: ReplayStats,
    /// Median nanoseconds per event over the replays.
    pub ns_per_event: f64,
    /// How many replays were timed.
    pub repeats: u32,
    /// The allocator settings it replayed under, and where they came from.
    pub settings: Settings,
    /// What the trace recorded beyond its allocs and frees, said after the table.
    pub notes: Vec<String>,
}

/// The allocator settings a trace replays under, and where they came from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The settings.
    pub config: AllocatorConfig,
    /// `GPUMEM_ALLOC_CONF`, `the file's` (a snapshot's `allocator_settings`), or `torch's defaults`.
    pub source: &'static str,
}

/// The settings `trace` replays under: `GPUMEM_ALLOC_CONF` when it is set, else those the
/// snapshot recorded (its `allocator_settings`), else torch's defaults.
pub fn settings_for(trace: &AllocTrace) -> Result<Settings> {
    if std::env::var_os("GPUMEM_ALLOC_CONF").is_some() {
        let config = AllocatorConfig::from_env().context("GPUMEM_ALLOC_CONF")?;
        return Ok(Settings {
            config,
            source: "GPUMEM_ALLOC_CONF",
        });
    }
    match &trace.recorded_settings {
        Some(text) if !text.trim().is_empty() => Ok(Settings {
            config: AllocatorConfig::parse(text)
                .with_context(|| format!("the snapshot's allocator_settings {text:?}"))?,
            source: "the file's",
        }),
        _ => Ok(Settings {
            config: AllocatorConfig::default(),
            source: "torch's defaults",
        }),
    }
}

/// What a trace made from a snapshot carries beyond its allocs and frees, in words: the blocks
/// held before recording began, `empty_cache()` calls ([`recorded_state_notes`]), and the request
/// that failed, with whether it failed again (`oom_at`: the event at which this replay ran out of
/// memory).
pub fn recording_notes(trace: &AllocTrace, target: Target, oom_at: Option<usize>) -> Vec<String> {
    let mut notes = recorded_state_notes(trace);
    notes.extend(failed_request_notes(trace, target, oom_at));
    notes
}

/// The blocks held before recording began and the `empty_cache()` calls a trace replays.
pub fn recorded_state_notes(trace: &AllocTrace) -> Vec<String> {
    let mut notes = Vec::new();
    if trace.recorded_before > 0 {
        let bytes: u64 = trace.events[..trace.recorded_before]
            .iter()
            .map(|e| match e {
                gpumem::trace::TraceEvent::Alloc { size, .. } => *size,
                _ => 0,
            })
            .sum();
        notes.push(format!(
            "{} block{} ({}) held before recording began, allocated first, each in the order of \
             its address (where they lay then is not in the file: their segments are new ones)",
            trace.recorded_before,
            if trace.recorded_before == 1 { "" } else { "s" },
            format_bytes(bytes)
        ));
    }
    let empties = trace
        .events
        .iter()
        .filter(|e| matches!(e, gpumem::trace::TraceEvent::EmptyCache))
        .count();
    if empties > 0 {
        notes.push(format!(
            "{empties} empty_cache() call{} replayed (segments the recording freed with no \
             request waiting on them)",
            if empties == 1 { "" } else { "s" }
        ));
    }
    notes
}

/// Whether each request that ran out of memory in the recording did so in this replay.
pub fn failed_request_notes(
    trace: &AllocTrace,
    target: Target,
    oom_at: Option<usize>,
) -> Vec<String> {
    let mut notes = Vec::new();
    for &index in &trace.failed_in_recording {
        let size = match trace.events.get(index) {
            Some(gpumem::trace::TraceEvent::Alloc { size, .. }) => *size,
            _ => continue,
        };
        let outcome = match oom_at {
            Some(at) if at == index => "ran out of memory here too".to_string(),
            Some(at) if at < index => format!("was not reached (out of memory at event {at})"),
            _ if target.kind == DeviceKind::Cpu && target.capacity == usize::MAX => {
                "fit here: this cpu replay has no capacity limit (give --capacity, the GPU's \
                 memory or the cap the job ran under, or --device cuda)"
                    .to_string()
            }
            _ => "fit here".to_string(),
        };
        notes.push(format!(
            "the request that ran out of memory in the recording (event {index}, {}) {outcome}",
            format_bytes(size)
        ));
    }
    notes
}

/// Which memory backs the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// `cpu` or `cuda:N`.
    pub kind: DeviceKind,
    /// On cpu: the most bytes that may be reserved at once.
    pub capacity: usize,
}

/// Parses `--device`: `cpu`, `cuda` (= `cuda:0`) or `cuda:N`.
pub fn parse_device(name: &str) -> Result<DeviceKind> {
    match name.trim().to_ascii_lowercase().as_str() {
        "cpu" => Ok(DeviceKind::Cpu),
        "cuda" => Ok(DeviceKind::Cuda(0)),
        other => match other.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(n)) => Ok(DeviceKind::Cuda(n)),
            _ => bail!("--device {name:?}: expected cpu, cuda or cuda:N"),
        },
    }
}

/// Replays `trace` `repeats` times, each through a fresh allocator on `target`.
pub fn replay_trace(
    trace: &AllocTrace,
    target: Target,
    config: &AllocatorConfig,
    repeats: u32,
) -> Result<(ReplayStats, f64)> {
    let mut first: Option<ReplayStats> = None;
    let mut times = Vec::new();
    for _ in 0..repeats.max(1) {
        let stats = match target.kind {
            DeviceKind::Cpu | DeviceKind::CpuN(_) => {
                once(CpuBackend::new(target.capacity), "cpu", config, trace)?
            }
            DeviceKind::Cuda(n) => {
                let backend = CudaBackend::new(n).with_context(|| format!("opening cuda:{n}"))?;
                once(backend, &format!("cuda:{n}"), config, trace)?
            }
        };
        times.push(stats.ns_per_event());
        match &first {
            None => first = Some(stats),
            Some(f) => {
                let counts = |s: &ReplayStats| ReplayStats {
                    elapsed: Duration::ZERO,
                    ..s.clone()
                };
                if counts(f) != counts(&stats) {
                    bail!(
                        "two replays of the same trace gave different counts: {f:?} and {stats:?}"
                    );
                }
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    Ok((first.expect("at least one replay"), median))
}

fn once<B: RawMemory>(
    backend: B,
    name: &str,
    config: &AllocatorConfig,
    trace: &AllocTrace,
) -> Result<ReplayStats> {
    let allocator = CachingAllocator::new(backend, name, config.clone());
    Ok(replay(&allocator, trace)?)
}

/// `--snapshot-out FILE`: replays the only trace once more under `config` with the history
/// recorded, and writes the state after it (at the failing event, if one fails) as a PyTorch
/// snapshot pickle.
fn write_snapshot_out(
    out: &Path,
    traces: &[&AllocTrace],
    target: Target,
    config: &AllocatorConfig,
    memory_fraction: Option<f64>,
) -> Result<()> {
    let [trace] = traces else {
        bail!(
            "--snapshot-out writes one snapshot: give one trace (these files hold {})",
            traces.len()
        );
    };
    fn recorded<B: RawMemory>(
        backend: B,
        name: &str,
        config: &AllocatorConfig,
        fraction: Option<f64>,
        trace: &AllocTrace,
    ) -> Result<(gpumem::Snapshot, Option<usize>)> {
        let allocator = CachingAllocator::new(backend, name, config.clone());
        if let Some(f) = fraction {
            allocator.set_memory_fraction(f)?;
        }
        let (result, snapshot) = replay_recorded(&allocator, trace);
        let oom = match result {
            Ok(_) => None,
            Err(ReplayError::Alloc { index, source }) if source.is_out_of_memory() => Some(index),
            Err(e) => return Err(e.into()),
        };
        Ok((snapshot.context("the replay stopped before it began")?, oom))
    }
    let (snapshot, oom) = match target.kind {
        DeviceKind::Cpu | DeviceKind::CpuN(_) => recorded(
            CpuBackend::new(target.capacity),
            "cpu",
            config,
            memory_fraction,
            trace,
        )?,
        DeviceKind::Cuda(n) => {
            let backend = CudaBackend::new(n).with_context(|| format!("opening cuda:{n}"))?;
            recorded(
                backend,
                &format!("cuda:{n}"),
                config,
                memory_fraction,
                trace,
            )?
        }
    };
    snapshot_pickle::dump_snapshot(&snapshot, out)?;
    let at = match oom {
        Some(index) => format!(", at event {index}, which ran out of memory: its oom entry last"),
        None => String::new(),
    };
    eprintln!(
        "wrote {} ({} segment{}, {} trace entries{at}): open it at pytorch.org/memory_viz",
        out.display(),
        snapshot.segments.len(),
        if snapshot.segments.len() == 1 {
            ""
        } else {
            "s"
        },
        snapshot.trace.len()
    );
    Ok(())
}

/// One trace replayed under one allocator setting: what `--alloc-conf` compares.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WhatIf {
    /// The trace's name.
    pub trace: String,
    /// The setting as given (`""`: torch's defaults).
    pub alloc_conf: String,
    /// `requested_bytes.all.peak` (up to the failure, if one came).
    pub peak_requested_bytes: u64,
    /// `allocated_bytes.all.peak`.
    pub peak_allocated_bytes: u64,
    /// `reserved_bytes.all.peak`.
    pub peak_reserved_bytes: u64,
    /// Peak reserved over peak requested.
    pub reserved_over_requested: f64,
    /// The event at which the allocator ran out of memory; `None`: the whole trace ran.
    pub oom_at_event: Option<usize>,
    /// Reservations retried after releasing the cache (`num_alloc_retries`).
    pub num_alloc_retries: u64,
    /// Whether the replay ran out of memory at the request that did so in the recording.
    pub oom_as_recorded: bool,
}

/// What a what-if replay runs on and under: the device, the setting as given and parsed, and the
/// memory fraction, if any.
pub struct WhatIfSetup<'a> {
    /// `cpu` or `cuda:N`.
    pub device: &'a str,
    /// The setting as given.
    pub setting: &'a str,
    /// The setting, parsed.
    pub config: &'a AllocatorConfig,
    /// The cap, as `set_per_process_memory_fraction`.
    pub memory_fraction: Option<f64>,
}

/// Replays `trace` once through a fresh allocator with the setup's setting; out of memory is a
/// result.
pub fn what_if<B: RawMemory>(
    backend: B,
    setup: &WhatIfSetup,
    name: &str,
    trace: &AllocTrace,
) -> Result<WhatIf> {
    let allocator = CachingAllocator::new(backend, setup.device, setup.config.clone());
    if let Some(fraction) = setup.memory_fraction {
        allocator.set_memory_fraction(fraction)?;
    }
    let setting = setup.setting;
    let oom_at_event = match replay(&allocator, trace) {
        Ok(_) => None,
        Err(ReplayError::Alloc { index, source }) if source.is_out_of_memory() => Some(index),
        Err(e) => return Err(e.into()),
    };
    // A fresh allocator: its peaks and counters are this replay's, up to a failure if any.
    let s = allocator.device_stats();
    let (requested, reserved) = (s.requested_bytes.all.peak, s.reserved_bytes.all.peak);
    Ok(WhatIf {
        trace: name.to_string(),
        alloc_conf: setting.to_string(),
        peak_requested_bytes: requested,
        peak_allocated_bytes: s.allocated_bytes.all.peak,
        peak_reserved_bytes: reserved,
        reserved_over_requested: if requested == 0 {
            0.0
        } else {
            reserved as f64 / requested as f64
        },
        oom_at_event,
        num_alloc_retries: s.num_alloc_retries,
        oom_as_recorded: oom_at_event.is_some_and(|i| trace.failed_in_recording.contains(&i)),
    })
}

/// A setting as the what-if table names it.
fn label_of(alloc_conf: &str) -> String {
    if alloc_conf.is_empty() {
        "(torch's defaults)".to_string()
    } else {
        alloc_conf.to_string()
    }
}

/// The what-if rows as a table: per trace, one row per setting.
pub fn what_if_table(rows: &[WhatIf]) -> String {
    let label = |r: &WhatIf| label_of(&r.alloc_conf);
    let width = rows
        .iter()
        .map(|r| label(r).len())
        .max()
        .unwrap_or(7)
        .max(7);
    let mut out = String::new();
    let mut current = None;
    for r in rows {
        if current != Some(&r.trace) {
            if current.is_some() {
                out.push('\n');
            }
            current = Some(&r.trace);
            out.push_str(&format!(
                "{}\n{:<width$}  {:>14}  {:>14}  {:>18}  {:>16}  {:>7}\n",
                r.trace,
                "setting",
                "peak allocated",
                "peak reserved",
                "reserved/requested",
                "out of memory",
                "retries"
            ));
        }
        let oom = match r.oom_at_event {
            None => "no".to_string(),
            Some(i) if r.oom_as_recorded => format!("at {i}, as recorded"),
            Some(i) => format!("at event {i}"),
        };
        out.push_str(&format!(
            "{:<width$}  {:>14}  {:>14}  {:>18.3}  {:>19}  {:>7}\n",
            label(r),
            format_bytes(r.peak_allocated_bytes),
            format_bytes(r.peak_reserved_bytes),
            r.reserved_over_requested,
            oom,
            r.num_alloc_retries
        ));
    }
    out
}

/// `workbook replay --alloc-conf ...`: every trace under every setting, once each.
fn run_what_if(args: &ReplayArgs, target: Target) -> Result<ExitCode> {
    let mut settings = Vec::new();
    for text in &args.alloc_conf {
        let config =
            AllocatorConfig::parse(text).with_context(|| format!("--alloc-conf {text:?}"))?;
        settings.push((text.as_str(), config));
    }
    let mut rows = Vec::new();
    let mut all = Vec::new();
    let range = args.range.as_deref().map(Range::parse).transpose()?;
    let mut chosen = Vec::new();
    for path in &args.traces {
        let (traces, why) = read_device_trace(path, range, args.snapshot_device)?;
        for (name, trace) in traces {
            if let Some(why) = &why {
                chosen.push((name.clone(), why.clone()));
            }
            all.push((path, name, trace));
        }
    }
    for (path, name, trace) in &all {
        for (text, config) in &settings {
            let device = target.kind.to_string();
            let setup = WhatIfSetup {
                device: &device,
                setting: text,
                config,
                memory_fraction: args.memory_fraction,
            };
            let row = match target.kind {
                DeviceKind::Cpu | DeviceKind::CpuN(_) => {
                    what_if(CpuBackend::new(target.capacity), &setup, name, trace)
                }
                DeviceKind::Cuda(n) => {
                    let backend =
                        CudaBackend::new(n).with_context(|| format!("opening cuda:{n}"))?;
                    what_if(backend, &setup, name, trace)
                }
            }
            .with_context(|| format!("replaying {} with {text:?}", path.display()))?;
            rows.push(row);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("JSON values serialise")
        );
    } else {
        let fraction = args
            .memory_fraction
            .map(|f| format!("; memory fraction {f}"))
            .unwrap_or_default();
        println!("what-if replay on {}{fraction}\n", device_line(target));
        print!("{}", what_if_table(&rows));
        for (name, why) in &chosen {
            println!("note ({name}): replayed {why}");
        }
        for (_, name, trace) in &all {
            if let Some(text) = &trace.recorded_settings {
                let text = if text.trim().is_empty() {
                    "none (torch's defaults)"
                } else {
                    text.as_str()
                };
                println!("note ({name}): the recording ran with allocator settings {text}");
            }
            for note in recorded_state_notes(trace) {
                println!("note ({name}): {note}");
            }
            for r in rows
                .iter()
                .filter(|r| &r.trace == name && r.oom_at_event.is_none())
            {
                for note in failed_request_notes(trace, target, None) {
                    println!("note ({name}, {}): {note}", label_of(&r.alloc_conf));
                }
            }
        }
        for (text, config) in &settings {
            for note in config.notes() {
                println!("note ({text}): {note}");
            }
        }
    }
    if let Some(out) = &args.snapshot_out {
        let [(_, config)] = settings.as_slice() else {
            bail!("--snapshot-out writes one snapshot: give at most one --alloc-conf");
        };
        let traces: Vec<_> = all.iter().map(|(_, _, t)| t).collect();
        write_snapshot_out(out, &traces, target, config, args.memory_fraction)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `workbook replay`.
pub fn run(args: &ReplayArgs) -> Result<ExitCode> {
    let kind = parse_device(&args.device)?;
    let capacity = match (&args.capacity, kind) {
        (None, _) => usize::MAX,
        (Some(text), DeviceKind::Cpu | DeviceKind::CpuN(_)) => gpumem::format::parse_bytes(text)
            .filter(|&n| n > 0)
            .and_then(|n| usize::try_from(n).ok())
            .with_context(|| {
                format!("--capacity {text:?}: use bytes or a KiB/MiB/GiB suffix, e.g. 8GiB")
            })?,
        (Some(_), DeviceKind::Cuda(_)) => {
            bail!("--capacity is for the cpu device; a GPU's capacity is its memory")
        }
    };
    let target = Target { kind, capacity };
    if !args.alloc_conf.is_empty() {
        return run_what_if(args, target);
    }
    let mut all = Vec::new();
    let range = args.range.as_deref().map(Range::parse).transpose()?;
    for path in &args.traces {
        let (traces, why) = read_device_trace(path, range, args.snapshot_device)?;
        for (name, trace) in traces {
            let settings = settings_for(&trace).with_context(|| format!("{}", path.display()))?;
            all.push((path, name, trace, settings, why.clone()));
        }
    }
    // First, so that a replay that runs out of memory still leaves its snapshot.
    if let Some(out) = &args.snapshot_out {
        let traces: Vec<_> = all.iter().map(|(_, _, t, _, _)| t).collect();
        let config = all
            .first()
            .map(|(_, _, _, s, _)| s.config.clone())
            .unwrap_or_default();
        write_snapshot_out(out, &traces, target, &config, None)?;
    }
    let mut results = Vec::new();
    for (path, name, trace, settings, why) in all {
        let (stats, ns_per_event) = replay_trace(&trace, target, &settings.config, args.repeat)
            .with_context(|| {
                let failed = if trace.failed_in_recording.is_empty() {
                    String::new()
                } else {
                    " (the recording ran out of memory too: its oom entry is replayed as the \
                     request that failed; `--alloc-conf SETTING` compares settings and keeps \
                     going)"
                        .to_string()
                };
                format!("replaying {}{failed}", path.display())
            })?;
        results.push(TraceResult {
            name: name.clone(),
            path: path.display().to_string(),
            description: trace.description.clone(),
            stats,
            ns_per_event,
            repeats: args.repeat,
            notes: recording_notes(&trace, target, None)
                .into_iter()
                .chain(why.map(|why| format!("replayed {why}")))
                .collect(),
            settings,
        });
    }
    if args.json {
        println!("{}", to_json(&results, target));
    } else {
        print!("{}", header(target, &results, args.repeat));
        print!("{}", table(&results));
        print!("{}", notes_text(&results));
    }
    Ok(ExitCode::SUCCESS)
}

/// What the replay ran on, in words.
fn device_line(target: Target) -> String {
    match target.kind {
        DeviceKind::Cpu | DeviceKind::CpuN(_) => {
            let name = CpuBackend::new(0)
                .properties()
                .map(|p| p.name)
                .unwrap_or_default();
            let cap = if target.capacity == usize::MAX {
                "no capacity limit".to_string()
            } else {
                format!("capacity {}", format_bytes(target.capacity as u64))
            };
            format!("cpu ({name}; a private allocator over host memory, {cap})")
        }
        DeviceKind::Cuda(n) => {
            let name = CudaBackend::new(n)
                .and_then(|b| b.properties())
                .map(|p| p.name)
                .unwrap_or_default();
            let driver = gpumem::cuda::driver_version()
                .map(|v| format!("CUDA driver {}.{}", v / 1000, (v % 1000) / 10))
                .unwrap_or_else(|| "driver version unknown".into());
            format!("cuda:{n} ({name}, {driver}; a private allocator over cuMemAlloc)")
        }
    }
}

fn header(target: Target, results: &[TraceResult], repeats: u32) -> String {
    let described = |r: &TraceResult| {
        format!(
            "{} ({})",
            r.settings.config.describe(),
            if r.settings.source == "torch's defaults" {
                "none set"
            } else {
                r.settings.source
            }
        )
    };
    let conf = match results.first() {
        Some(first) if results.iter().all(|r| described(r) == described(first)) => described(first),
        _ => "per trace, in the notes below".to_string(),
    };
    format!(
        "replay on {}\nallocator settings: {conf}; time per event: the median of {repeats} replay(s)\n\n",
        device_line(target)
    )
}

/// The notes under the table: each trace's settings when they differ, and what its recording
/// held beyond allocs and frees.
fn notes_text(results: &[TraceResult]) -> String {
    let mixed = results
        .windows(2)
        .any(|w| w[0].settings.config.describe() != w[1].settings.config.describe());
    let mut out = String::new();
    for r in results {
        if mixed {
            out.push_str(&format!(
                "  {}: allocator settings {} ({})\n",
                r.name,
                r.settings.config.describe(),
                r.settings.source
            ));
        }
        for note in &r.notes {
            out.push_str(&format!("  {}: {note}\n", r.name));
        }
    }
    if out.is_empty() {
        out
    } else {
        format!("\nnotes\n{out}")
    }
}

/// The results as a table, one row per trace.
pub fn table(results: &[TraceResult]) -> String {
    let width = results
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "{:<width$}  {:>7}  {:>14}  {:>14}  {:>14}  {:>18}  {:>13}  {:>8}\n",
        "trace",
        "events",
        "peak requested",
        "peak allocated",
        "peak reserved",
        "reserved/requested",
        "device allocs",
        "ns/event"
    );
    for r in results {
        let s = &r.stats;
        out.push_str(&format!(
            "{:<width$}  {:>7}  {:>14}  {:>14}  {:>14}  {:>18.3}  {:>13}  {:>8.1}\n",
            r.name,
            s.events,
            format_bytes(s.peak_requested),
            format_bytes(s.peak_allocated),
            format_bytes(s.peak_reserved),
            s.overhead(),
            s.num_device_alloc,
            r.ns_per_event
        ));
    }
    out
}

/// The results as JSON: a list with one object per trace (the keys `bench/torch_replay.py` uses).
pub fn to_json(results: &[TraceResult], target: Target) -> String {
    let device = target.kind.to_string();
    let list: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let s = &r.stats;
            serde_json::json!({
                "trace": r.name,
                "path": r.path,
                "allocator": "gpumem",
                "device": device,
                "events": s.events,
                "allocs": s.summary.allocs,
                "frees": s.summary.frees,
                "peak_requested_bytes": s.peak_requested,
                "peak_allocated_bytes": s.peak_allocated,
                "peak_reserved_bytes": s.peak_reserved,
                "reserved_over_requested": s.overhead(),
                "num_device_alloc": s.num_device_alloc,
                "num_device_free": s.num_device_free,
                "num_alloc_retries": s.num_alloc_retries,
                "ns_per_event": r.ns_per_event,
                "repeats": r.repeats,
                "allocator_settings": r.settings.config.describe(),
                "allocator_settings_from": r.settings.source,
                "notes": r.notes,
            })
        })
        .collect();
    serde_json::to_string_pretty(&list).expect("JSON values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse() {
        assert_eq!(parse_device("cpu").unwrap(), DeviceKind::Cpu);
        assert_eq!(parse_device("CUDA").unwrap(), DeviceKind::Cuda(0));
        assert_eq!(parse_device("cuda:3").unwrap(), DeviceKind::Cuda(3));
        let e = parse_device("gpu").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--device \"gpu\": expected cpu, cuda or cuda:N"
        );
    }
}
