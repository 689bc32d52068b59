//! The pictures of a device's recorded activity ([`gpumem::activity`]): the pinned host blocks'
//! lives, and the copies and kernels in one lane per stream.
//!
//! Both are drawn from the activity's ticks, never from its clock times: the same program gives
//! the same bytes on every run, and what the picture shows side by side is what the record says
//! happened at once. Blocks are numbered from 1 in the order they first appear in the record.

use super::{
    FREE, Figure, GRID, INK, LIVE, MUTED, OOM, document, esc, header, num, plural, size, text,
};
use gpumem::activity::{Activity, HostAction, WorkKind, WorkSpan};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The width of the activity pictures, in pixels: wider than the timeline's, for the lanes'
/// names and their spans (a phone scrolls them sideways in their own box).
const WIDTH: f64 = 750.0;
/// Where the lanes begin: their names are written left of it.
const LANES_LEFT: f64 = 230.0;
const LANES_RIGHT: f64 = WIDTH - 24.0;
const LANE: f64 = 34.0;
const BAR: f64 = 22.0;
/// A copy into the device, out of it, within it, and a kernel.
const TO_DEVICE: &str = "#e69f00";
const TO_HOST: &str = "#2e8b57";
const ON_DEVICE: &str = "#8c959f";
const KERNEL: &str = LIVE;
const CACHED: &str = "#c9d1d9";
/// A pinned block's life under the copies that use it.
const IN_USE: &str = "#a8cbea";

/// The block numbers as the pictures write them: 1, 2, ... in the order blocks appear.
pub fn block_numbers(activity: &Activity) -> BTreeMap<u64, usize> {
    let mut order: Vec<(u64, u64)> = activity
        .host
        .iter()
        .map(|e| (e.tick, e.block))
        .chain(
            activity
                .work
                .iter()
                .filter_map(|w| w.pinned_block.map(|b| (w.start, b))),
        )
        .collect();
    order.sort();
    let mut numbers = BTreeMap::new();
    for (_, block) in order {
        let next = numbers.len() + 1;
        numbers.entry(block).or_insert(next);
    }
    numbers
}

/// The sentence every stream picture ends with: what its spans are on this device.
pub fn device_note(device: &str) -> &'static str {
    if device == "cpu" {
        "On the cpu device each copy and kernel runs when issued: nothing overlaps. On a GPU the \
         side-stream copies would run under the compute."
    } else {
        "Each span is a call, from its start to its return: on a GPU a queued copy or kernel runs \
         later, and gpumem records no GPU times."
    }
}

/// What a span was, in words: "copy host→device 256 KiB on stream 1 from pinned block 1".
pub fn describe_span(w: &WorkSpan, block: Option<usize>) -> String {
    let what = match w.kind {
        WorkKind::HostToDevice => "copy host→device".to_string(),
        WorkKind::DeviceToHost => "copy device→host".to_string(),
        WorkKind::DeviceToDevice => "copy device→device".to_string(),
        WorkKind::Kernel => format!("kernel {}", w.name),
    };
    let mut out = format!("{what} {} on stream {}", size(w.bytes), w.stream);
    if let Some(b) = block {
        let _ = write!(
            out,
            " {} pinned block {b}",
            if w.kind == WorkKind::DeviceToHost {
                "into"
            } else {
                "from"
            }
        );
    }
    out
}

fn kind_colour(kind: WorkKind) -> &'static str {
    match kind {
        WorkKind::HostToDevice => TO_DEVICE,
        WorkKind::DeviceToHost => TO_HOST,
        WorkKind::DeviceToDevice => ON_DEVICE,
        WorkKind::Kernel => KERNEL,
    }
}

/// The x position of each span's start and end on the picture's axis: the ends in tick order,
/// one step apart, except that a call beginning right after another returned shares its
/// position (they touch; nothing ran between them). Spans that overlapped in the record overlap
/// here; spans that did not, do not.
fn span_positions(work: &[WorkSpan]) -> (Vec<(f64, f64)>, f64) {
    let mut ends: Vec<(u64, bool, usize)> = work
        .iter()
        .enumerate()
        .flat_map(|(i, w)| [(w.start, true, i), (w.end, false, i)])
        .collect();
    ends.sort();
    let mut at = vec![(0.0, 0.0); work.len()];
    let mut pos = 0.0;
    let mut previous: Option<bool> = None;
    for (_, is_start, i) in ends {
        match previous {
            None => {}
            Some(false) if is_start => {}
            Some(_) => pos += 1.0,
        }
        if is_start {
            at[i].0 = pos;
        } else {
            at[i].1 = pos;
        }
        previous = Some(is_start);
    }
    (at, pos.max(1.0))
}

/// The stream lanes: one per stream with its copies and kernels, and one per pinned block the
/// copies used; `None` when no copy or kernel was recorded.
pub fn streams_svg(activity: &Activity) -> Option<String> {
    if activity.work.is_empty() {
        return None;
    }
    Some(document(&[streams(activity)], WIDTH))
}

fn streams(activity: &Activity) -> Figure {
    let work = &activity.work;
    let numbers = block_numbers(activity);
    let mut streams: Vec<u64> = work.iter().map(|w| w.stream).collect();
    streams.sort();
    streams.dedup();
    let mut blocks: Vec<u64> = work.iter().filter_map(|w| w.pinned_block).collect();
    blocks.sort_by_key(|b| numbers[b]);
    blocks.dedup();
    let copies = work.iter().filter(|w| w.kind != WorkKind::Kernel).count();
    let title = format!("Streams · {}", activity.device);
    let mut summary = vec![format!(
        "{} calls: {copies} cop{}, {} kernel{}",
        work.len(),
        if copies == 1 { "y" } else { "ies" },
        work.len() - copies,
        plural(work.len() - copies)
    )];
    for s in &streams {
        let n = work.iter().filter(|w| w.stream == *s).count();
        summary.push(format!("{n} on stream {s}"));
    }
    let mut legend = vec![
        (TO_DEVICE, TO_DEVICE, "copy host→device"),
        (TO_HOST, TO_HOST, "copy device→host"),
    ];
    if work.iter().any(|w| w.kind == WorkKind::DeviceToDevice) {
        legend.push((ON_DEVICE, ON_DEVICE, "copy device→device"));
    }
    legend.push((KERNEL, KERNEL, "kernel (zero, sum, ...)"));
    if !blocks.is_empty() {
        legend.push((IN_USE, IN_USE, "pinned block in use"));
    }
    let mut b = String::new();
    let top = header(&mut b, WIDTH, &title, &summary, &legend) + 20.0;
    let (at, domain) = span_positions(work);
    let px = |p: f64| LANES_LEFT + (LANES_RIGHT - LANES_LEFT) * p / domain;
    let lane_name = |b: &mut String, row: usize, name: &str, detail: &str| {
        let y = top + LANE * row as f64;
        text(b, 20.0, y + 10.0, 13.0, INK, "start", true, name);
        text(b, 20.0, y + 26.0, 12.0, MUTED, "start", false, detail);
        let _ = writeln!(
            b,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{FREE}" fill-opacity="0.5"/>"#,
            num(LANES_LEFT),
            num(y),
            num(LANES_RIGHT - LANES_LEFT),
            num(BAR)
        );
    };
    let mut row = 0;
    for s in &streams {
        let side = *s != 0;
        lane_name(
            &mut b,
            row,
            &format!("stream {s}"),
            if side {
                "a side stream: copies"
            } else {
                "default stream: compute"
            },
        );
        let y = top + LANE * row as f64;
        let mut copies_here = 0;
        for (i, w) in work.iter().enumerate().filter(|(_, w)| w.stream == *s) {
            let (x0, x1) = (px(at[i].0), px(at[i].1));
            let block = w.pinned_block.map(|k| numbers[&k]);
            let _ = writeln!(
                b,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}" stroke="white" stroke-width="1"><title>{}</title></rect>"#,
                num(x0),
                num(y),
                num((x1 - x0).max(2.0)),
                num(BAR),
                kind_colour(w.kind),
                esc(&format!("call {}: {}", i + 1, describe_span(w, block)))
            );
            if w.kind == WorkKind::HostToDevice && side {
                // The copies of a side stream are numbered: batch 0, 1, ...
                if x1 - x0 >= 9.0 {
                    text(
                        &mut b,
                        (x0 + x1) / 2.0,
                        y + 16.0,
                        12.0,
                        INK,
                        "middle",
                        false,
                        &copies_here.to_string(),
                    );
                }
                copies_here += 1;
            }
        }
        row += 1;
    }
    for k in &blocks {
        let n = numbers[k];
        let bytes = activity
            .host
            .iter()
            .find(|e| e.block == *k)
            .map(|e| e.size)
            .or_else(|| {
                work.iter()
                    .find(|w| w.pinned_block == Some(*k))
                    .map(|w| w.bytes)
            })
            .unwrap_or(0);
        lane_name(
            &mut b,
            row,
            &format!("pinned block {n}"),
            &format!("host memory, {}", size(bytes)),
        );
        let y = top + LANE * row as f64;
        // In use from its alloc or reuse to its free, placed among the calls.
        let x_of_tick = |tick: u64| {
            let p = work
                .iter()
                .enumerate()
                .find(|(_, w)| w.start > tick)
                .map_or(domain, |(i, _)| at[i].0);
            px(p)
        };
        let mut from: Option<f64> = None;
        let mut lives = Vec::new();
        for e in activity.host.iter().filter(|e| e.block == *k) {
            match e.action {
                HostAction::Alloc | HostAction::Reuse => from = Some(x_of_tick(e.tick)),
                HostAction::Free => {
                    lives.push((from.unwrap_or(px(0.0)), x_of_tick(e.tick)));
                    from = None;
                }
                HostAction::Release => {}
            }
        }
        if let Some(x0) = from {
            lives.push((x0, px(domain)));
        }
        for (x0, x1) in lives {
            let _ = writeln!(
                b,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{IN_USE}"><title>{}</title></rect>"#,
                num(x0),
                num(y + 4.0),
                num((x1 - x0).max(2.0)),
                num(BAR - 8.0),
                esc(&format!("pinned block {n} in use ({})", size(bytes)))
            );
        }
        for (i, w) in work
            .iter()
            .enumerate()
            .filter(|(_, w)| w.pinned_block == Some(*k))
        {
            let (x0, x1) = (px(at[i].0), px(at[i].1));
            let _ = writeln!(
                b,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}" stroke="white" stroke-width="1"><title>{}</title></rect>"#,
                num(x0),
                num(y),
                num((x1 - x0).max(2.0)),
                num(BAR),
                kind_colour(w.kind),
                esc(&format!("call {}: {}", i + 1, describe_span(w, Some(n))))
            );
        }
        row += 1;
    }
    let bottom = top + LANE * row as f64;
    let _ = writeln!(
        b,
        r#"<line x1="{l}" y1="{y}" x2="{r}" y2="{y}" stroke="{MUTED}"/>"#,
        l = num(LANES_LEFT),
        r = num(LANES_RIGHT),
        y = num(bottom)
    );
    text(
        &mut b,
        LANES_LEFT,
        bottom + 18.0,
        12.0,
        MUTED,
        "start",
        false,
        "the calls in the order they ran; a span: a call to its return",
    );
    let mut y = bottom + 42.0;
    for line in wrap(device_note(&activity.device), 13.0, WIDTH - 40.0) {
        text(&mut b, 20.0, y, 13.0, INK, "start", false, &line);
        y += 18.0;
    }
    Figure {
        height: y + 4.0,
        body: b,
        title: format!(
            "{title}: {}. {}",
            summary.join(" · "),
            device_note(&activity.device)
        ),
    }
}

/// Bytes as the walkthrough writes a request: `100,000 B`.
fn bytes_exactly(bytes: u64) -> String {
    let digits = bytes.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out} B")
}

/// `s` in lines that fit `room` pixels at `font` px.
fn wrap(s: &str, font: f64, room: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let joined = if line.is_empty() {
            word.to_string()
        } else {
            format!("{line} {word}")
        };
        if !line.is_empty() && super::text_width(&joined, font) > room {
            lines.push(std::mem::replace(&mut line, word.to_string()));
        } else {
            line = joined;
        }
    }
    lines.push(line);
    lines
}

/// The pinned host blocks: one lane per block, in use or cached after each of the host
/// allocator's events; the walkthrough's steps marked above.
pub fn pinned_svg(activity: &Activity) -> String {
    document(&[pinned(activity)], WIDTH)
}

fn pinned(activity: &Activity) -> Figure {
    let host = &activity.host;
    let numbers = block_numbers(activity);
    let mut blocks: Vec<u64> = host.iter().map(|e| e.block).collect();
    blocks.sort_by_key(|b| numbers[b]);
    blocks.dedup();
    let count = |a: HostAction| host.iter().filter(|e| e.action == a).count();
    let peak_in_use = host.iter().map(|e| e.allocated).max().unwrap_or(0);
    let peak_held = host.iter().map(|e| e.reserved).max().unwrap_or(0);
    let title = format!("Pinned host blocks · {}", activity.device);
    let summary = vec![
        format!("{} host allocator events", host.len()),
        format!(
            "{} block{} from the system (num_host_alloc)",
            count(HostAction::Alloc),
            plural(count(HostAction::Alloc))
        ),
        format!("{} reused from the cache", count(HostAction::Reuse)),
        format!("{} given back (num_host_free)", count(HostAction::Release)),
        format!("peak in use {}", size(peak_in_use)),
        format!("peak held {}", size(peak_held)),
    ];
    let legend = [
        (LIVE, LIVE, "in use: a live PinnedBuffer"),
        (
            CACHED,
            MUTED,
            "cached: freed, kept for a request of its size",
        ),
    ];
    let mut b = String::new();
    let top = header(&mut b, WIDTH, &title, &summary, &legend) + 34.0;
    let events = host.len().max(1) as f64;
    let px = |i: f64| LANES_LEFT + (LANES_RIGHT - LANES_LEFT) * i / events;
    // The steps the program marked, at the first host event after each mark.
    let mut numbered = f64::NEG_INFINITY;
    for m in &activity.marks {
        let i = host
            .iter()
            .position(|e| e.tick > m.tick)
            .unwrap_or(host.len());
        let x = px(i as f64);
        let _ = writeln!(
            b,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{MUTED}" stroke-dasharray="3 3"/>"#,
            num(top - 16.0),
            num(top + LANE * blocks.len() as f64),
            x = num(x)
        );
        let number = m.label.split_once('.').map_or(m.label.as_str(), |(n, _)| n);
        if x - numbered >= 60.0 {
            text(
                &mut b,
                x + 4.0,
                top - 6.0,
                12.0,
                INK,
                "start",
                false,
                &format!("step {number}"),
            );
            numbered = x;
        }
    }
    for (row, k) in blocks.iter().enumerate() {
        let n = numbers[k];
        let y = top + LANE * row as f64;
        let mine: Vec<(usize, &gpumem::activity::HostEvent)> = host
            .iter()
            .enumerate()
            .filter(|(_, e)| e.block == *k)
            .collect();
        let bytes = mine.first().map_or(0, |(_, e)| e.size);
        text(
            &mut b,
            20.0,
            y + 10.0,
            13.0,
            INK,
            "start",
            true,
            &format!("block {n} · {}", size(bytes)),
        );
        let asked: Vec<String> = mine
            .iter()
            .filter(|(_, e)| matches!(e.action, HostAction::Alloc | HostAction::Reuse))
            .map(|(_, e)| bytes_exactly(e.requested))
            .collect();
        text(
            &mut b,
            20.0,
            y + 26.0,
            12.0,
            MUTED,
            "start",
            false,
            &if asked.is_empty() {
                "asked before recording".to_string()
            } else {
                format!("asked {}", asked.join(", then "))
            },
        );
        let _ = writeln!(
            b,
            r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{GRID}"/>"#,
            num(LANES_LEFT),
            num(LANES_RIGHT),
            y = num(y + BAR + 6.0)
        );
        // The block's state from each of its events to its next one (or the end).
        for (j, (i, e)) in mine.iter().enumerate() {
            let until = mine.get(j + 1).map_or(host.len(), |(next, _)| *next);
            let (fill, state) = match e.action {
                HostAction::Alloc | HostAction::Reuse => (LIVE, "in use"),
                HostAction::Free => (CACHED, "cached"),
                HostAction::Release => continue,
            };
            let how = match e.action {
                HostAction::Alloc => {
                    format!("taken from the system for {}", bytes_exactly(e.requested))
                }
                HostAction::Reuse => {
                    format!("reused from the cache for {}", bytes_exactly(e.requested))
                }
                _ => "freed to the cache".to_string(),
            };
            let (x0, x1) = (px(*i as f64), px(until as f64));
            let _ = writeln!(
                b,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="white" stroke-width="1"><title>{}</title></rect>"#,
                num(x0),
                num(y),
                num((x1 - x0).max(2.0)),
                num(BAR),
                esc(&format!(
                    "block {n} · {} · {state} from event {} ({how})",
                    size(e.size),
                    i + 1
                ))
            );
            if e.action == HostAction::Reuse && x1 - x0 >= 44.0 {
                text(
                    &mut b,
                    (x0 + x1) / 2.0,
                    y + 16.0,
                    12.0,
                    "#ffffff",
                    "middle",
                    true,
                    "reuse",
                );
            }
        }
        if let Some((i, _)) = mine.iter().find(|(_, e)| e.action == HostAction::Release) {
            let x = px(*i as f64);
            let _ = writeln!(
                b,
                r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{OOM}" stroke-width="2"><title>{}</title></line>"#,
                num(y - 2.0),
                num(y + BAR + 2.0),
                esc(&format!("block {n} given back at event {}", i + 1)),
                x = num(x)
            );
        }
    }
    let bottom = top + LANE * blocks.len() as f64;
    let step = super::count_step(host.len());
    let mut i = 0;
    while i <= host.len() {
        let x = px(i as f64);
        let _ = writeln!(
            b,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{MUTED}"/>"#,
            num(bottom),
            num(bottom + 5.0),
            x = num(x)
        );
        text(
            &mut b,
            x,
            bottom + 18.0,
            12.0,
            MUTED,
            "middle",
            false,
            &i.to_string(),
        );
        i += step;
    }
    text(
        &mut b,
        (LANES_LEFT + LANES_RIGHT) / 2.0,
        bottom + 36.0,
        12.0,
        MUTED,
        "middle",
        false,
        "host allocator event: alloc, reuse, free or release",
    );
    let _ = writeln!(
        b,
        r#"<rect x="20" y="{}" width="14" height="3" fill="{OOM}"/>"#,
        num(bottom + 50.0)
    );
    text(
        &mut b,
        40.0,
        bottom + 56.0,
        12.0,
        INK,
        "start",
        false,
        "red mark: given back to the system (empty_host_cache)",
    );
    Figure {
        height: bottom + 70.0,
        body: b,
        title: format!("{title}: {}", summary.join(" · ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem::activity::{HostEvent, Mark};

    fn span(start: u64, end: u64, kind: WorkKind, stream: u64, block: Option<u64>) -> WorkSpan {
        WorkSpan {
            start,
            end,
            kind,
            name: if kind == WorkKind::Kernel {
                "sum".into()
            } else {
                "copy".into()
            },
            stream,
            bytes: 4096,
            pinned_block: block,
            start_ns: 0,
            end_ns: 0,
        }
    }

    fn host(tick: u64, action: HostAction, block: u64, size: u64, requested: u64) -> HostEvent {
        HostEvent {
            tick,
            action,
            block,
            size,
            requested,
            allocated: 0,
            reserved: 0,
        }
    }

    /// Step 3 of chapter 7 in small: a staging block (gpumem's block 7), two batches, each a copy
    /// on stream 1 then a sum on stream 0.
    fn two_batches() -> Activity {
        Activity {
            device: "cpu".into(),
            host: vec![host(1, HostAction::Alloc, 7, 4096, 4000)],
            work: vec![
                span(2, 3, WorkKind::HostToDevice, 1, Some(7)),
                span(4, 5, WorkKind::Kernel, 0, None),
                span(6, 7, WorkKind::HostToDevice, 1, Some(7)),
                span(8, 9, WorkKind::Kernel, 0, None),
            ],
            marks: vec![Mark {
                tick: 0,
                label: "3. staging".into(),
            }],
        }
    }

    #[test]
    fn calls_that_ran_one_after_another_touch_and_never_overlap() {
        let a = two_batches();
        let (at, domain) = span_positions(&a.work);
        assert_eq!(at, [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]);
        assert_eq!(domain, 4.0);
        // A copy recorded running while a kernel ran (two threads, or a GPU's times) overlaps.
        let overlapping = [
            span(0, 3, WorkKind::Kernel, 0, None),
            span(1, 2, WorkKind::HostToDevice, 1, None),
        ];
        let (at, _) = span_positions(&overlapping);
        assert!(at[1].0 < at[0].1 && at[0].0 < at[1].1, "{at:?}");
    }

    #[test]
    fn the_stream_lanes_name_each_stream_and_say_what_the_spans_are_on_cpu() {
        let svg = streams_svg(&two_batches()).unwrap();
        assert!(svg.contains("Streams · cpu"));
        assert!(svg.contains("4 calls: 2 copies, 2 kernels · 2 on stream 0 · 2 on stream 1"));
        assert!(svg.contains(">stream 0</text>") && svg.contains(">stream 1</text>"));
        assert!(svg.contains("default stream: compute") && svg.contains("a side stream: copies"));
        // The block is named as the pictures number it, from 1.
        assert!(svg.contains(">pinned block 1</text>") && !svg.contains("block 7"));
        assert!(svg.contains("call 1: copy host→device 4 KiB on stream 1 from pinned block 1"));
        assert!(svg.contains("call 2: kernel sum 4 KiB on stream 0"));
        // Said in the picture (wrapped) and whole in its title.
        assert!(svg.contains(
            "On the cpu device each copy and kernel runs when issued: nothing overlaps. On a GPU \
             the side-stream copies would run under the compute.</title>"
        ));
        assert!(svg.contains(">On the cpu device each copy and kernel runs when issued: nothing"));
        // Every label is readable at 390 px, where the pictures keep 660 px of their 750.
        assert!(!svg.contains("font-size=\"11\"") && !svg.contains("font-size=\"10"));
        let cuda = Activity {
            device: "cuda:0".into(),
            ..two_batches()
        };
        let svg = streams_svg(&cuda).unwrap();
        assert!(svg.contains("gpumem records no GPU times") && !svg.contains("nothing overlaps"));
        let none = Activity {
            work: Vec::new(),
            ..two_batches()
        };
        assert!(streams_svg(&none).is_none());
    }

    #[test]
    fn the_pinned_picture_shows_each_block_taken_reused_and_given_back() {
        use HostAction::*;
        let a = Activity {
            device: "cpu".into(),
            host: vec![
                host(0, Alloc, 5, 131_072, 100_000),
                host(1, Free, 5, 131_072, 0),
                host(2, Reuse, 5, 131_072, 70_000),
                host(3, Alloc, 6, 8192, 4097),
                host(4, Free, 5, 131_072, 0),
                host(5, Release, 5, 131_072, 0),
            ],
            work: Vec::new(),
            marks: Vec::new(),
        };
        let svg = pinned_svg(&a);
        assert!(svg.contains("Pinned host blocks · cpu"));
        assert!(svg.contains(
            "6 host allocator events · 2 blocks from the system (num_host_alloc) · 1 reused from \
             the cache"
        ));
        assert!(
            svg.contains(">block 1 · 128 KiB</text>") && svg.contains(">block 2 · 8 KiB</text>")
        );
        assert!(svg.contains("asked 100,000 B, then 70,000 B") && svg.contains("asked 4,097 B"));
        assert!(svg.contains(
            "block 1 · 128 KiB · in use from event 3 (reused from the cache for 70,000 B)"
        ));
        assert!(svg.contains("block 1 · 128 KiB · cached from event 2 (freed to the cache)"));
        assert!(svg.contains("block 1 given back at event 6"));
        assert_eq!(
            svg.matches("given back at event").count(),
            1,
            "block 2 stays"
        );
    }
}
