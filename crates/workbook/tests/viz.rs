//! `workbook viz` draws a snapshot file, with clear errors for a missing or malformed one; and
//! `workbook pictures` makes and checks the pictures of the chapters whose walkthrough can write a
//! snapshot.

use crate::common;

use common::FakeRepo;

const MIB: u64 = 1 << 20;

/// A 20 MiB segment holding one live 4 MiB block, reached in two events.
fn snapshot_json() -> String {
    let a = 0x7f12_3456_0000u64;
    format!(
        r#"{{
  "device": "cpu",
  "segments": [{{
    "address": {a}, "total_size": {seg}, "stream": 0, "segment_type": "large",
    "allocated_size": {four}, "active_size": {four},
    "blocks": [
      {{"address": {a}, "size": {four}, "requested_size": {four}, "state": "active_allocated"}},
      {{"address": {b}, "size": {rest}, "requested_size": 0, "state": "inactive"}}
    ]
  }}],
  "trace": [
    {{"action": "segment_alloc", "addr": {a}, "size": {seg}, "stream": 0, "allocated": 0, "reserved": {seg}}},
    {{"action": "alloc", "addr": {a}, "size": {four}, "stream": 0, "allocated": {four}, "reserved": {seg}}}
  ]
}}"#,
        seg = 20 * MIB,
        four = 4 * MIB,
        rest = 16 * MIB,
        b = a + 4 * MIB,
    )
}

#[test]
fn viz_writes_one_svg_with_the_timeline_and_the_segment_map() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("snap.json");
    std::fs::write(&input, snapshot_json()).unwrap();
    let out = dir.path().join("memory.svg");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("viz")
            .arg(&input)
            .arg("-o")
            .arg(&out),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let svg = std::fs::read_to_string(&out).expect("the SVG was written");
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains("Active memory timeline · cpu"));
    assert!(svg.contains("2 events · peak allocated 4 MiB · peak reserved 20 MiB"));
    assert!(svg.contains("1 segment reserved (20 MiB) · live 4 MiB"));
    assert!(svg.contains("free 16 MiB"));
    assert!(!svg.contains("7f12") && !svg.contains(&0x7f12_3456_0000u64.to_string()));

    // The same snapshot gives the same bytes; one view alone is part of both.
    let again = dir.path().join("again.svg");
    let timeline = dir.path().join("timeline.svg");
    for (file, view) in [(&again, "both"), (&timeline, "timeline")] {
        let (output, _, stderr) = common::run(
            common::workbook()
                .arg("viz")
                .arg(&input)
                .args(["--view", view, "-o"])
                .arg(file),
        );
        assert!(output.status.success(), "{stderr}");
    }
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
    let timeline = std::fs::read_to_string(&timeline).unwrap();
    assert!(timeline.contains("Active memory timeline") && !timeline.contains("Segments ·"));
}

#[test]
fn viz_of_a_missing_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.json");
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("viz")
            .arg(&missing)
            .arg("-o")
            .arg(dir.path().join("x.svg")),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot read the snapshot {}", missing.display())),
        "{stderr}"
    );
    assert!(!dir.path().join("x.svg").exists());
}

#[test]
fn viz_of_malformed_json_names_the_file_and_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\n  \"device\": \"cpu\",\n  \"segments\": 3\n}\n").unwrap();
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("viz")
            .arg(&bad)
            .arg("-o")
            .arg(dir.path().join("x.svg")),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is not a gpumem snapshot", bad.display())),
        "{stderr}"
    );
    assert!(stderr.contains("line 3"), "{stderr}");
}

/// A workbook with two chapters: `ch01-pics`, whose walkthrough writes a snapshot when
/// GPUMEM_SNAPSHOT is set (on the cpu device only), and `ch02-plain`, whose walkthrough does not.
fn repo_with_pictures() -> FakeRepo {
    let repo = FakeRepo::new();
    repo.chapter("ch01-pics", "", "", &[], None);
    repo.chapter("ch02-plain", "", "", &[], None);
    let json = snapshot_json();
    repo.write(
        "exercises/ch01-pics/examples/walkthrough.rs",
        &format!(
            "fn main() {{\n    assert_eq!(std::env::var(\"GPUMEM_DEVICE\").as_deref(), Ok(\"cpu\"));\n    \
             if let Some(file) = std::env::var_os(\"GPUMEM_SNAPSHOT\") {{\n        \
             std::fs::write(file, {json:?}).unwrap();\n    }}\n}}\n"
        ),
    );
    repo.write(
        "exercises/ch02-plain/examples/walkthrough.rs",
        "fn main() {}\n",
    );
    repo
}

#[test]
fn pictures_are_made_for_walkthroughs_that_write_a_snapshot_and_checked() {
    let repo = repo_with_pictures();
    let pictures = repo.root().join("book/src/pictures");
    let pictures_cmd = |check: bool| {
        let mut cmd = common::workbook();
        cmd.arg("--root").arg(repo.root()).arg("pictures");
        if check {
            cmd.arg("--check");
        }
        common::run(&mut cmd)
    };

    let (output, stdout, stderr) = pictures_cmd(true);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("book/src/pictures/ch01-pics-timeline.svg: missing"),
        "{stdout}"
    );

    let (output, stdout, stderr) = pictures_cmd(false);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let mut made: Vec<String> = std::fs::read_dir(&pictures)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    assert_eq!(
        made,
        [
            "ch01-pics-history.json",
            "ch01-pics-segments.svg",
            "ch01-pics-timeline.svg",
            "ch01-pics-walkthrough.txt"
        ]
    );
    let timeline = std::fs::read_to_string(pictures.join("ch01-pics-timeline.svg")).unwrap();
    assert!(timeline.contains("peak reserved 20 MiB"));

    let (output, stdout, stderr) = pictures_cmd(true);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("4 files of 1 chapters are up to date"),
        "{stdout}"
    );

    // A picture edited by hand, and one no walkthrough makes, fail the check.
    std::fs::write(pictures.join("ch01-pics-segments.svg"), "<svg/>").unwrap();
    std::fs::write(pictures.join("ch09-gone-timeline.svg"), "<svg/>").unwrap();
    let (output, stdout, _) = pictures_cmd(true);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("book/src/pictures/ch01-pics-segments.svg: out of date"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "book/src/pictures/ch09-gone-timeline.svg: no chapter's walkthrough makes it"
        ),
        "{stdout}"
    );
}

#[test]
fn pictures_of_a_chapter_without_a_snapshot_is_an_error() {
    let repo = repo_with_pictures();
    let (output, _, stderr) = common::run(
        common::workbook()
            .arg("--root")
            .arg(repo.root())
            .args(["pictures", "ch02"]),
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "ch02-plain has no pictures: its examples/walkthrough.rs does not read GPUMEM_SNAPSHOT"
        ),
        "{stderr}"
    );
}

/// Every history the book ships (`book/src/pictures/*-history.json`, which the interactive view
/// steps through) is whole: replaying its events from the blocks live before recording, the live
/// blocks add up to the allocated bytes after every event, each free_requested frees a live
/// block of its size, and each free_completed returns one so freed.
#[test]
fn the_books_histories_replay_to_their_allocated_totals() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src/pictures");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with("-history.json") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let history: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut live = std::collections::BTreeMap::new();
        let mut pending = std::collections::BTreeMap::new();
        for (k, segment) in history["initial"].as_array().unwrap().iter().enumerate() {
            for b in segment["blocks"].as_array().unwrap() {
                live.insert((k as u64, b[0].as_u64().unwrap()), b[1].as_u64().unwrap());
            }
        }
        assert_eq!(
            live.values().sum::<u64>(),
            history["before"][0].as_u64().unwrap(),
            "{name}: the blocks live before recording"
        );
        for (i, row) in history["trace"].as_array().unwrap().iter().enumerate() {
            let key = (
                row[1].as_u64().unwrap_or(u64::MAX),
                row[2].as_u64().unwrap(),
            );
            let size = row[3].as_u64().unwrap();
            match row[0].as_str().unwrap() {
                "alloc" => assert!(live.insert(key, size).is_none(), "{name} event {i}"),
                "free_requested" => {
                    assert_eq!(live.remove(&key), Some(size), "{name} event {i}");
                    assert!(pending.insert(key, size).is_none(), "{name} event {i}");
                }
                "free_completed" => {
                    assert_eq!(pending.remove(&key), Some(size), "{name} event {i}")
                }
                _ => {}
            }
            assert_eq!(
                live.values().sum::<u64>(),
                row[6].as_u64().unwrap(),
                "{name}: the live blocks after event {i}"
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no history in {}", dir.display());
}
