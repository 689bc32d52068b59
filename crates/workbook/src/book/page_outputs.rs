//! What the commands that the instructor's guide, the snapshots page and the README show print,
//! made by `workbook pictures` by running each command as the page shows it, in a scratch folder
//! (never in the repository: no learner's progress or file is touched), on the `cpu` device.
//!
//! Only what differs from run to run or machine to machine is masked, always the same way: a
//! time (`… s`, `… ns`), the count of files in the student edition (it changes with every file
//! added to the repository, this command's own outputs included), and the CPU model.

use super::pictures::{Picture, walkthrough_output};
use crate::course::app_state::Repo;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::{Command, Output};

/// The chapter the instructor's guide grades, and the fixture class's hidden test for it
/// (`book/instructors-example/hidden/<chapter>/`, which the page includes).
const GRADED_CHAPTER: &str = "ch03-drop-and-empty-cache";

/// The folder of the instructor's guide's hidden tests, from the repository's root.
const HIDDEN_TESTS: &str = "book/instructors-example/hidden";

/// Bob's mistake: his `unload_model` calls `empty_cache()` before dropping the model (the
/// reference solution's lines, then his).
const BOBS_MISTAKE: (&str, &str) = (
    "    drop(model);\n    dev.empty_cache();\n",
    "    dev.empty_cache();\n    drop(model);\n",
);

/// The README's mistake in chapter 2's `independent_copy`: a buffer that shares the original's
/// memory instead of a copy (the reference solution's line, then the mistaken one).
const COPY_MISTAKE: (&str, &str) = ("    buf.try_clone()\n", "    buf.to(buf.device())\n");

/// Where the student edition goes, from the folder the command runs in (beside the repository,
/// as a reader runs it).
const EDITION: &str = "../gpu-memory-workbook-student";

/// The Python program that reads `dump_snapshot`'s pickle on the snapshots page.
const READ_DUMP: &str = "import pickle
s = pickle.load(open('snapshot.pickle', 'rb'))
for e in s['device_traces'][0]:
    print(e['action'], e['size'])
for seg in s['segments']:
    print(seg['segment_type'], seg['total_size'], [(b['size'], b['state']) for b in seg['blocks']])
";

/// The Python program that reads the replay's `--snapshot-out` pickle on the snapshots page.
const READ_AFTER: &str = "import pickle
s = pickle.load(open('after.pickle', 'rb'))
print(sorted(s))
print(len(s['segments']), 'segments;', len(s['device_traces'][0]), 'trace entries')
";

/// The committed trace the snapshots page's round trip replays.
const ROUND_TRIP_TRACE: &str = "bench/traces/interleaved-lifetimes.json";

/// Every page output of this module whose page is in `repo` (a test's fake repository has none).
pub fn made(repo: &Repo, workbook: &Path) -> Result<Vec<Picture>> {
    let mut made = Vec::new();
    let scratch = tempfile::Builder::new()
        .prefix("workbook-page-outputs-")
        .tempdir()
        .context("making a temporary directory for the pages' commands")?;
    let run = Runner {
        repo,
        workbook,
        scratch: scratch.path(),
    };
    if repo.root.join("book/src/instructors.md").is_file() {
        eprintln!("instructors.md: exporting the student edition and grading a fixture class");
        made.extend(run.instructors()?);
        eprintln!("README.md: checking chapters 1 and 2 in the student edition");
        made.extend(run.readme_checks()?);
    }
    if repo.root.join(ROUND_TRIP_TRACE).is_file() {
        eprintln!("snapshots.md: dump_snapshot and the replay round trip");
        made.push(run.dump_snapshot()?);
        made.push(run.replay_round_trip()?);
    }
    Ok(made)
}

/// Runs the pages' commands in `scratch`.
struct Runner<'a> {
    repo: &'a Repo,
    workbook: &'a Path,
    scratch: &'a Path,
}

impl Runner<'_> {
    /// A folder `name` in the scratch folder, made empty.
    fn folder(&self, name: &str) -> Result<std::path::PathBuf> {
        let dir = self.scratch.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// `workbook args` run in `dir` on this repository, on the `cpu` device with the allocator's
    /// defaults, as a reader runs it with `cargo run -p workbook --` (the commands it suggests
    /// say so).
    fn workbook(&self, dir: &Path, args: &[&str]) -> Result<Output> {
        self.workbook_command(dir, args)
            .output()
            .with_context(|| format!("running workbook {}", args.join(" ")))
    }

    fn workbook_command(&self, dir: &Path, args: &[&str]) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(self.workbook);
        command
            .args(args)
            .current_dir(dir)
            .env("WORKBOOK_ROOT", &self.repo.root)
            .env("CARGO", cargo)
            .env("GPUMEM_DEVICE", "cpu")
            .env_remove("GPUMEM_ALLOC_CONF")
            .env_remove("GPUMEM_CPU_CAPACITY")
            .env("RUST_BACKTRACE", "0")
            .env_remove("RUST_LIB_BACKTRACE");
        command
    }

    /// The instructor's guide's outputs: the student edition's export, the sandbox's refusal,
    /// the class graded (its table, its CSV, the start of bob's feedback) and a lone `lib.rs`
    /// uploaded to Gradescope.
    fn instructors(&self) -> Result<Vec<Picture>> {
        let mut made = Vec::new();
        let here = self.folder("work")?;
        let export = self.workbook(&here, &["export", "student", "--out", EDITION])?;
        expect_success(&export, "export student")?;
        made.push(picture(
            "instructors-export-student.txt",
            without_file_count(&String::from_utf8_lossy(&export.stdout)),
        ));

        let grading = self.folder("grading")?;
        self.fixture_class(&grading)?;
        let empty = self.folder("empty-path")?;
        let refused = self
            .workbook_command(
                &grading,
                &[
                    "grade",
                    "--class",
                    "class/",
                    "--chapter",
                    "ch03",
                    "--sandbox",
                    "namespaces",
                ],
            )
            // A machine without bubblewrap: no `bwrap` on PATH.
            .env("PATH", &empty)
            .env_remove("WORKBOOK_BWRAP")
            .output()
            .context("running workbook grade without bubblewrap")?;
        if refused.status.success() {
            bail!("workbook grade --sandbox namespaces graded without bubblewrap on PATH");
        }
        made.push(picture(
            "instructors-sandbox-refused.txt",
            String::from_utf8_lossy(&refused.stderr).into_owned(),
        ));

        let graded = self.workbook(
            &grading,
            &[
                "grade",
                "--class",
                "class/",
                "--chapter",
                "ch03",
                "--hidden-tests",
                "hidden/",
                "--csv",
                "grades.csv",
                "--gradescope",
                "gradescope/",
                "--junit",
                "junit.xml",
                "--feedback",
                "feedback/",
            ],
        )?;
        expect_success(&graded, "grade --class class/")?;
        made.push(picture(
            "instructors-grade-class.txt",
            without_slowest(&without_seconds(&String::from_utf8_lossy(&graded.stdout))),
        ));
        made.push(picture(
            "instructors-grades-csv.txt",
            read(&grading.join("grades.csv"))?,
        ));
        made.push(picture(
            "instructors-feedback-index.txt",
            read(&grading.join("feedback/index.md"))?,
        ));

        // A regrade of bob alone, with a roster (that lacks carol), printing Canvas's file.
        std::fs::write(
            grading.join("roster.csv"),
            "folder,id,email,name\nalice,s1001,alice@uni.example,Alice Liddell\n\
             bob,s1002,bob@uni.example,\"Smith, Bob\"\n",
        )
        .context("writing the fixture's roster.csv")?;
        let regraded = self.workbook(
            &grading,
            &[
                "grade",
                "class/bob",
                "--chapter",
                "ch03",
                "--hidden-tests",
                "hidden/",
                "--csv",
                "grades.csv",
                "--roster",
                "roster.csv",
                "--format",
                "canvas",
            ],
        )?;
        expect_success(
            &regraded,
            "grade class/bob --csv grades.csv --format canvas",
        )?;
        let said: String = String::from_utf8_lossy(&regraded.stderr)
            .lines()
            .filter(|l| l.starts_with("grade: grades merged") || l.starts_with("grade: warning"))
            .map(|l| format!("{l}\n"))
            .collect();
        made.push(picture("instructors-regrade-stderr.txt", said));
        made.push(picture(
            "instructors-regrade-canvas.txt",
            String::from_utf8_lossy(&regraded.stdout).into_owned(),
        ));
        made.push(picture(
            "instructors-grades-csv-roster.txt",
            read(&grading.join("grades.csv"))?,
        ));
        let feedback = read(&grading.join("feedback/bob.md"))?;
        // The start: up to what the first failed test printed (its times differ run to run).
        let start = feedback
            .find("<details>")
            .map_or(feedback.as_str(), |at| &feedback[..at]);
        made.push(picture(
            "instructors-feedback-bob-start.txt",
            format!("{}\n", start.trim_end()),
        ));

        let upload = self.folder("upload")?;
        let submission = upload.join("submission");
        std::fs::create_dir_all(&submission)
            .with_context(|| format!("creating {}", submission.display()))?;
        std::fs::copy(
            self.repo
                .exercises_dir()
                .join("ch01-availability/src/lib.rs"),
            submission.join("lib.rs"),
        )
        .context("copying chapter 1's lib.rs")?;
        let lone = self.workbook(
            &upload,
            &[
                "grade",
                "submission/",
                "--chapter",
                "1",
                "--format",
                "json",
                "--sandbox",
                "none",
            ],
        )?;
        expect_success(&lone, "grade submission/ --format json")?;
        let json: serde_json::Value =
            serde_json::from_slice(&lone.stdout).context("grade --format json printed no JSON")?;
        let Some(output) = json["output"].as_str() else {
            bail!("grade --format json printed no `output`");
        };
        made.push(picture(
            "instructors-lone-lib-rs.txt",
            format!("{output}\n"),
        ));
        Ok(made)
    }

    /// In `dir`: `class/` with alice (the reference solution), bob (its mistake) and carol (the
    /// stubs untouched), each a folder holding the chapter's `src/`, and `hidden/`, the guide's
    /// hidden tests.
    fn fixture_class(&self, dir: &Path) -> Result<()> {
        let solution = self.repo.solutions_dir().join(GRADED_CHAPTER).join("src");
        let stubs = self.repo.exercises_dir().join(GRADED_CHAPTER).join("src");
        for (student, from) in [("alice", &solution), ("bob", &solution), ("carol", &stubs)] {
            copy_dir(
                from,
                &dir.join("class")
                    .join(student)
                    .join(GRADED_CHAPTER)
                    .join("src"),
            )?;
        }
        let lib = dir
            .join("class/bob")
            .join(GRADED_CHAPTER)
            .join("src/lib.rs");
        let text = read(&lib)?;
        let (right, wrong) = BOBS_MISTAKE;
        if text.matches(right).count() != 1 {
            bail!(
                "{GRADED_CHAPTER}'s reference unload_model no longer holds {right:?} once: bob's \
                 mistake (the instructor's guide) cannot be made from it; change BOBS_MISTAKE"
            );
        }
        std::fs::write(&lib, text.replace(right, wrong))
            .with_context(|| format!("writing {}", lib.display()))?;
        copy_dir(&self.repo.root.join(HIDDEN_TESTS), &dir.join("hidden"))
    }

    /// The README's `check` outputs, in the student edition that [`Runner::instructors`]
    /// exported, built into this repository's `target/` (or `CARGO_TARGET_DIR`): chapter 1 just
    /// started, and chapter 2 solved but for [`COPY_MISTAKE`] in `independent_copy` (the part of
    /// its output for that exercise).
    fn readme_checks(&self) -> Result<Vec<Picture>> {
        let edition = self.folder("work")?.join(EDITION);
        if !edition.is_dir() {
            bail!(
                "the student edition was not exported to {}",
                edition.display()
            );
        }
        let started = self.check_in(&edition, "ch01")?;
        let chapter = edition.join("exercises/ch02-transfers/src");
        copy_dir(
            &self.repo.solutions_dir().join("ch02-transfers/src"),
            &chapter,
        )?;
        let lib = chapter.join("lib.rs");
        let text = read(&lib)?;
        let (right, wrong) = COPY_MISTAKE;
        if text.matches(right).count() != 1 {
            bail!(
                "ch02-transfers's reference independent_copy no longer holds {right:?} once: the \
                 README's mistake cannot be made from it; change COPY_MISTAKE"
            );
        }
        std::fs::write(&lib, text.replace(right, wrong))
            .with_context(|| format!("writing {}", lib.display()))?;
        let mistaken = self.check_in(&edition, "ch02")?;
        let part: Vec<&str> = mistaken
            .lines()
            .skip_while(|l| !l.starts_with("✗ independent_copy"))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || l.starts_with("    "))
            .map(|(_, l)| l)
            .collect();
        if part.is_empty() {
            bail!(
                "check ch02 with the README's mistake shows no failing independent_copy:\n{mistaken}"
            );
        }
        Ok(vec![
            picture("readme-check.txt", started),
            picture("readme-check-mistake.txt", format!("{}\n", part.join("\n"))),
        ])
    }

    /// What `workbook check chapter` prints in `edition`, where the chapter fails (exit status 1).
    fn check_in(&self, edition: &Path, chapter: &str) -> Result<String> {
        let checked = self
            .workbook_command(edition, &["check", chapter])
            .env("WORKBOOK_ROOT", edition)
            .env(
                "CARGO_TARGET_DIR",
                crate::commands::check::target_dir(self.repo),
            )
            .output()
            .with_context(|| format!("running workbook check {chapter} in the student edition"))?;
        if checked.status.code() != Some(1) {
            bail!(
                "workbook check {chapter} in the student edition ended with {} (1 expected):\n{}",
                checked.status,
                tail(&String::from_utf8_lossy(&checked.stderr))
            );
        }
        Ok(String::from_utf8_lossy(&checked.stdout).into_owned())
    }

    /// The snapshots page's `dump_snapshot` and the Python that reads its pickle, as a
    /// transcript.
    fn dump_snapshot(&self) -> Result<Picture> {
        let dir = self.folder("dump")?;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let dumped = Command::new(&cargo)
            .arg("run")
            .arg("--quiet")
            .arg("--manifest-path")
            .arg(self.repo.root.join("Cargo.toml"))
            .args(["-p", "gpumem", "--example", "dump_snapshot", "--"])
            .arg("snapshot.pickle")
            .current_dir(&dir)
            .env("GPUMEM_DEVICE", "cpu")
            .env_remove("GPUMEM_ALLOC_CONF")
            .env_remove("GPUMEM_CPU_CAPACITY")
            .output()
            .context("running gpumem's dump_snapshot example")?;
        expect_success(&dumped, "cargo run -p gpumem --example dump_snapshot")?;
        let read = python(&dir, READ_DUMP)?;
        Ok(picture(
            "snapshots-dump.txt",
            transcript(&[
                (
                    "cargo run -p gpumem --example dump_snapshot -- snapshot.pickle".to_string(),
                    String::from_utf8_lossy(&dumped.stdout).into_owned(),
                ),
                (python_command(READ_DUMP), read),
            ]),
        ))
    }

    /// The snapshots page's round trip: a committed trace replayed into a snapshot, the
    /// snapshot read by Python, and replayed under four settings.
    fn replay_round_trip(&self) -> Result<Picture> {
        let dir = self.folder("round-trip")?;
        let trace = dir.join(ROUND_TRIP_TRACE);
        std::fs::create_dir_all(trace.parent().expect("the trace is in a folder"))
            .with_context(|| format!("creating the folder of {}", trace.display()))?;
        std::fs::copy(self.repo.root.join(ROUND_TRIP_TRACE), &trace)
            .with_context(|| format!("copying {ROUND_TRIP_TRACE}"))?;
        let first = [
            "replay",
            ROUND_TRIP_TRACE,
            "--repeat",
            "1",
            "--snapshot-out",
            "after.pickle",
        ];
        let replayed = self.workbook(&dir, &first)?;
        expect_success(&replayed, "replay --snapshot-out")?;
        let read = python(&dir, READ_AFTER)?;
        let what_if = [
            "replay",
            "after.pickle",
            "--alloc-conf",
            "",
            "--alloc-conf",
            "expandable_segments:True",
            "--alloc-conf",
            "max_split_size_mb:21",
            "--alloc-conf",
            "garbage_collection_threshold:0.6",
            "--memory-fraction",
            "0.5",
            "--capacity",
            "400MiB",
        ];
        let again = self.workbook(&dir, &what_if)?;
        expect_success(&again, "replay after.pickle")?;
        let model = cpu_model();
        // Its output, then its notes on stderr (the file it wrote), as a terminal shows them.
        let printed = |o: &Output| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            walkthrough_output(&text, &model)
        };
        Ok(picture(
            "snapshots-round-trip.txt",
            transcript(&[
                (
                    format!("workbook {}", first.join(" ")),
                    without_last_column(&printed(&replayed), "ns/event"),
                ),
                (python_command(READ_AFTER), read),
                (
                    "workbook replay after.pickle --alloc-conf \"\" --alloc-conf \
                     expandable_segments:True \\\n    --alloc-conf max_split_size_mb:21 \
                     --alloc-conf garbage_collection_threshold:0.6 \\\n    --memory-fraction \
                     0.5 --capacity 400MiB"
                        .to_string(),
                    printed(&again),
                ),
            ]),
        ))
    }
}

/// This machine's CPU model, as the cpu device names itself (empty if it cannot say).
fn cpu_model() -> String {
    gpumem::Device::cpu()
        .properties()
        .map(|p| p.name)
        .unwrap_or_default()
}

fn picture(file: &str, contents: String) -> Picture {
    Picture {
        file: file.to_string(),
        contents,
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The last lines of `text`, for an error.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn expect_success(output: &Output, what: &str) -> Result<()> {
    if !output.status.success() {
        bail!(
            "workbook {what} failed ({}):\n{}{}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stdout)),
            tail(&String::from_utf8_lossy(&output.stderr))
        );
    }
    Ok(())
}

/// Copies the folder `from` (files and folders) to `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()))?;
        } else {
            std::fs::copy(&path, to.join(entry.file_name()))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

/// What `python3 -c PROGRAM` prints in `dir`.
fn python(dir: &Path, program: &str) -> Result<String> {
    let output = Command::new("python3")
        .args(["-c", program])
        .current_dir(dir)
        .output()
        .context("running python3")?;
    if !output.status.success() {
        bail!(
            "python3 -c failed ({}):\n{}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr))
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `python3 -c "PROGRAM"` as a terminal shows it, the program on lines of its own.
fn python_command(program: &str) -> String {
    format!("python3 -c \"\n{program}\"")
}

/// Commands and what each printed, as a terminal shows them: `$ command`, then its output.
fn transcript(steps: &[(String, String)]) -> String {
    steps
        .iter()
        .map(|(command, output)| format!("$ {command}\n{output}"))
        .collect()
}

/// `text` with the count in `(N files;` written as `(… files;`.
fn without_file_count(text: &str) -> String {
    let Some(at) = text.find(" files;") else {
        return text.to_string();
    };
    let start = text[..at]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    format!("{}…{}", &text[..start], &text[at..])
}

/// `text` with each ` in N s` (a duration in seconds) written as ` in … s`.
fn without_seconds(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" in ") {
        let (before, after) = rest.split_at(at + " in ".len());
        out.push_str(before);
        let number = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        if number > 0 && after[number..].starts_with(" s") {
            out.push('…');
            rest = &after[number..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `text` with the lines of the summary's slowest submissions masked (`  …`): which submission
/// is slowest, and by how much, differs from run to run.
fn without_slowest(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_list = false;
    for line in text.lines() {
        if line.starts_with("Slowest submissions") {
            in_list = true;
            out.push_str(line);
        } else if in_list && line.starts_with("  ") {
            out.push_str("  …");
        } else {
            if in_list && !line.is_empty() {
                in_list = false;
            }
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// `text` with the last column of the table whose header ends with `header` masked: each row's
/// last field (up to the next blank line) written as `…`, right-aligned as it was.
fn without_last_column(text: &str, header: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_table = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        if body.trim().is_empty() {
            in_table = false;
        } else if in_table && let Some(at) = body.trim_end().rfind(' ') {
            let field = body.trim_end().len() - at - 1;
            out.push_str(&body[..at + 1]);
            out.push_str(&format!("{:>field$}", "…"));
            out.push_str(&line[body.len()..]);
            continue;
        }
        if body.trim_end().ends_with(header) {
            in_table = true;
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edition_s_file_count_is_masked() {
        assert_eq!(
            without_file_count("out: the student edition (417 files; no solutions/)\n"),
            "out: the student edition (… files; no solutions/)\n"
        );
        assert_eq!(without_file_count("no count\n"), "no count\n");
    }

    #[test]
    fn only_durations_in_seconds_are_masked() {
        assert_eq!(
            without_seconds("Graded 3 submission(s) in 4.3 s.\nin 2 tests; in 5 s\n"),
            "Graded 3 submission(s) in … s.\nin 2 tests; in … s\n"
        );
    }

    #[test]
    fn the_slowest_submissions_are_masked_and_the_next_section_kept() {
        let summary = "Slowest submissions (building and testing, all chapters)\n\n  bob: 3.2 s\n  \
                       alice: 1.0 s\n\nSubmissions that look alike\n\n  none\n";
        assert_eq!(
            without_slowest(summary),
            "Slowest submissions (building and testing, all chapters)\n\n  …\n  …\n\n\
             Submissions that look alike\n\n  none\n"
        );
    }

    #[test]
    fn the_time_column_is_masked_and_the_rest_kept() {
        let table = "replay on cpu\n\ntrace   events  ns/event\nabc       3000     605.0\nd           12      88.1\n\nwrote x (12 segments)\n";
        assert_eq!(
            without_last_column(table, "ns/event"),
            "replay on cpu\n\ntrace   events  ns/event\nabc       3000         …\nd           12         …\n\nwrote x (12 segments)\n"
        );
    }

    #[test]
    fn a_transcript_shows_each_command_before_its_output() {
        assert_eq!(
            transcript(&[
                ("a 1".to_string(), "one\n".to_string()),
                (python_command("print(2)\n"), "2\n".to_string())
            ]),
            "$ a 1\none\n$ python3 -c \"\nprint(2)\n\"\n2\n"
        );
    }
}
