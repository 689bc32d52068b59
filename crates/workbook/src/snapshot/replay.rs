//! Replay from a file: the allocation traces a gpumem trace file or a PyTorch snapshot pickle
//! holds (a snapshot's `device_traces` converted by `gpumem::trace::EntryConverter`), what
//! `workbook replay` runs through a fresh allocator.

use crate::snapshot::analysis::{Point, Range, choose_device, range_text};
use anyhow::{Context, Result, bail};
use gpumem::snapshot_pickle;
use gpumem::trace::{AllocTrace, EntryConverter, TraceEvent};
use std::path::Path;

/// Reads and checks a trace file.
pub fn read_trace(path: &Path) -> Result<AllocTrace> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    AllocTrace::from_json(&text).with_context(|| format!("{}", path.display()))
}

/// The traces in a file, with their names: one for a gpumem trace (its file name), one per device
/// with entries for a PyTorch snapshot pickle (`name` alone when it has one device, else
/// `name:cuda:N`). A pickle is read as a stream (`gpumem::snapshot_pickle`): what is held is the
/// replayable events, 24 bytes each, not the snapshot's entries.
pub fn read_traces(path: &Path) -> Result<Vec<(String, AllocTrace)>> {
    read_traces_in(path, None)
}

/// Traces to replay, each with its name.
pub type NamedTraces = Vec<(String, AllocTrace)>;

/// The trace of one device of a snapshot pickle, and why that one, in words: `device` if given,
/// else the device whose allocated peak is the largest ([`choose_device`]). A gpumem trace file
/// is one trace, and no device is said.
pub fn read_device_trace(
    path: &Path,
    range: Option<Range>,
    device: Option<usize>,
) -> Result<(NamedTraces, Option<String>)> {
    if !snapshot_pickle::is_pickle(path) {
        if let Some(n) = device {
            bail!(
                "{}: --snapshot-device {n}: a gpumem trace file holds one device's events",
                path.display()
            );
        }
        return Ok((read_traces_in(path, range)?, None));
    }
    let (chosen, why) = choose_device(path, device, "--snapshot-device")?;
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    );
    let traces = pickle_traces(path, range)?;
    let one = traces.len() == 1;
    let Some((_, trace)) = traces.into_iter().find(|(d, _)| *d == chosen) else {
        bail!(
            "{}: device {chosen} has no alloc entries to replay{}",
            path.display(),
            range
                .map(|r| format!(" in {}", range_text(&r)))
                .unwrap_or_default()
        );
    };
    let label = if one {
        name
    } else {
        format!("{name}:cuda:{chosen}")
    };
    // A file with one device to replay needs no word on which.
    let said = (!one || device.is_some()).then_some(why);
    Ok((vec![(label, trace)], said))
}

/// [`read_traces`], keeping only the events in `range` (`--range`): a trace file's events by
/// index, a snapshot's entries by index or time; frees of blocks allocated before the range are
/// left out.
pub fn read_traces_in(path: &Path, range: Option<Range>) -> Result<Vec<(String, AllocTrace)>> {
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    );
    if !snapshot_pickle::is_pickle(path) {
        let trace = read_trace(path)?;
        let Some(range) = range else {
            return Ok(vec![(name, trace)]);
        };
        if matches!(range.start, Some(Point::Micros(_)))
            || matches!(range.end, Some(Point::Micros(_)))
        {
            bail!("--range: a gpumem trace records no times; give event indices");
        }
        let mut kept = AllocTrace::new(format!("{} (events in the range)", trace.description));
        let mut ids = std::collections::HashSet::new();
        for (i, event) in trace.events.iter().enumerate() {
            if !range.contains(i as u64, 0) {
                continue;
            }
            match *event {
                TraceEvent::Alloc { id, .. } => {
                    ids.insert(id);
                    kept.events.push(*event);
                }
                TraceEvent::Free { id } if ids.contains(&id) => kept.events.push(*event),
                TraceEvent::Free { .. } => {}
                TraceEvent::EmptyCache => kept.events.push(*event),
            }
        }
        return Ok(vec![(name, kept)]);
    }
    let traces = pickle_traces(path, range)?;
    let one = traces.len() == 1;
    Ok(traces
        .into_iter()
        .map(|(device, trace)| {
            let label = if one {
                name.clone()
            } else {
                format!("{name}:cuda:{device}")
            };
            (label, trace)
        })
        .collect())
}

/// The traces of a snapshot pickle's devices with alloc entries (in `range`), by device.
fn pickle_traces(path: &Path, range: Option<Range>) -> Result<Vec<(usize, AllocTrace)>> {
    let traces = match range {
        None => snapshot_pickle::read_alloc_traces(path)
            .with_context(|| format!("reading the snapshot {}", path.display()))?,
        Some(range) => {
            let mut converters: Vec<(u64, EntryConverter)> = Vec::new();
            let (_, stacks) =
                snapshot_pickle::read_snapshot_file_stacks(path, |device, entry, stack| {
                    while converters.len() <= device {
                        converters.push((
                            0,
                            EntryConverter::window(format!(
                                "device_traces[{}] of {}, the entries in {}",
                                converters.len(),
                                path.display(),
                                range_text(&range)
                            )),
                        ));
                    }
                    let (index, converter) = &mut converters[device];
                    if range.contains(*index, entry.time_us) {
                        converter.push_with_stack(&entry, stack);
                    }
                    *index += 1;
                })
                .with_context(|| format!("reading the snapshot {}", path.display()))?;
            let traces: Vec<(usize, AllocTrace)> = converters
                .into_iter()
                .map(|(_, c)| c.finish_with(&stacks))
                .enumerate()
                .filter(|(_, t)| !t.events.is_empty())
                .collect();
            if traces.is_empty() {
                bail!("{}: no alloc entries in the range", path.display());
            }
            traces
        }
    };
    Ok(traces)
}
