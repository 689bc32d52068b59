//! Embeds every chapter crate (`exercises/<chapter>/`: `Cargo.toml`, `chapter.toml`, `src/`,
//! `tests/`, `examples/`) in the binary, for `workbook reset` (the stubs) and `workbook check` (the
//! official tests).
//!
//! The copies come from the commit checked out (git `HEAD`), not from the working tree: a learner
//! edits `exercises/*/src`, and a rebuild must not take their work for the stubs. Without git (a
//! downloaded archive) the working tree is embedded once, as it was at the first build; this script
//! then never reruns on its own, for the same reason.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Chapter name → (path inside the chapter crate → bytes).
type Chapters = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let root = manifest_dir.join("../..");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=WORKBOOK_EMBED_FROM_FILES");
    // A package built where the files are the official ones and there is no git (Gradescope's
    // setup.sh): embed them as they are, without a warning.
    if std::env::var_os("WORKBOOK_EMBED_FROM_FILES").is_some() {
        let chapters = from_tree(&root.join("exercises"));
        write_module(&out_dir, &chapters, "the files at build time");
        return;
    }

    // A git command can fail while another process rewrites the repository (a commit, a gc):
    // try again before falling back.
    let mut from_git_result = from_git(&root);
    for _ in 0..3 {
        if from_git_result.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        from_git_result = from_git(&root);
    }
    let (chapters, source) = match from_git_result {
        Ok(Some((chapters, commit, watched))) => {
            // Rerun when HEAD moves (a commit, a checkout, a pull), never on a learner's save.
            for path in watched {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            (chapters, format!("git commit {commit}"))
        }
        not_git => {
            let why = match not_git {
                Err(e) => format!("git failed: {e}"),
                _ => "not a git checkout".to_string(),
            };
            println!(
                "cargo:warning=workbook: {why}; embedding exercises/ as it is now (reset will \
                 restore these files)"
            );
            (
                from_tree(&root.join("exercises")),
                "the files at build time".to_string(),
            )
        }
    };
    write_module(&out_dir, &chapters, &source);
}

/// The chapter crates as `HEAD` has them, the short commit id, and the git files that say when
/// HEAD moved. `None` when this is not a git checkout or `HEAD` has no `exercises/`.
fn from_git(root: &Path) -> std::io::Result<Option<(Chapters, String, Vec<PathBuf>)>> {
    let git = |args: &[&str]| -> std::io::Result<Option<Vec<u8>>> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()?;
        Ok(out.status.success().then_some(out.stdout))
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"])? else {
        return Ok(None);
    };
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    let Some(listing) = git(&["ls-tree", "-r", "-z", "HEAD", "--", "exercises/"])? else {
        return Err(std::io::Error::other("git ls-tree HEAD failed"));
    };
    // `<mode> <type> <object>\t<path>`, NUL-terminated; paths relative to `root`.
    let mut wanted = Vec::new();
    for entry in listing.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let Some((meta, path)) = entry.split_once('\t') else {
            continue;
        };
        let mut meta = meta.split(' ');
        let (Some(mode), Some("blob"), Some(object)) = (meta.next(), meta.next(), meta.next())
        else {
            continue;
        };
        if mode == "120000" {
            continue; // a symbolic link
        }
        if let Some((chapter, rel)) = chapter_path(path.strip_prefix("exercises/").unwrap_or("")) {
            wanted.push((chapter, rel, object.to_string()));
        }
    }
    if wanted.is_empty() {
        return Ok(None);
    }
    let blobs = cat_blobs(root, wanted.iter().map(|(_, _, o)| o.as_str()))?;
    let mut chapters = Chapters::new();
    for ((chapter, rel, _), bytes) in wanted.into_iter().zip(blobs) {
        chapters.entry(chapter).or_default().insert(rel, bytes);
    }
    chapters.retain(|_, files| files.contains_key("Cargo.toml"));
    let mut watched = Vec::new();
    for name in ["HEAD", "logs/HEAD", "packed-refs", "refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", name])? {
            let path = root.join(String::from_utf8_lossy(&path).trim());
            if path.exists() {
                watched.push(path);
            }
        }
    }
    Ok(Some((chapters, commit, watched)))
}

/// Reads blobs through one `git cat-file --batch`.
fn cat_blobs<'a>(
    root: &Path,
    objects: impl Iterator<Item = &'a str>,
) -> std::io::Result<Vec<Vec<u8>>> {
    let objects: Vec<&str> = objects.collect();
    let mut child = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    let input: String = objects.iter().map(|o| format!("{o}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let mut reader = BufReader::new(child.stdout.take().expect("piped"));
    let mut blobs = Vec::new();
    for _ in &objects {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let size: usize = header
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("git cat-file said {header:?}")))?;
        let mut bytes = vec![0; size + 1]; // the content and a newline
        reader.read_exact(&mut bytes)?;
        bytes.pop();
        blobs.push(bytes);
    }
    writer
        .join()
        .map_err(|_| std::io::Error::other("writing to git cat-file"))??;
    child.wait()?;
    Ok(blobs)
}

/// `("ch01-x", "src/lib.rs")` for `ch01-x/src/lib.rs`; `None` for files outside a chapter crate
/// (`README.md`) and for build output and hidden files.
fn chapter_path(path: &str) -> Option<(String, String)> {
    let (chapter, rel) = path.split_once('/')?;
    let hidden = |c: &str| c.starts_with('.') || c == "target";
    if hidden(chapter) || rel.split('/').any(|c| hidden(c) || c.is_empty()) {
        return None;
    }
    Some((chapter.to_string(), rel.to_string()))
}

/// The chapter crates under `exercises` as they are on disk.
fn from_tree(exercises: &Path) -> Chapters {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let path = entry.path();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if path.is_dir() {
                walk(&path, &rel, out);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.insert(rel, bytes);
            }
        }
    }
    let mut chapters = Chapters::new();
    let Ok(entries) = std::fs::read_dir(exercises) else {
        return chapters;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') || !path.join("Cargo.toml").is_file() {
            continue;
        }
        let mut files = BTreeMap::new();
        walk(&path, "", &mut files);
        chapters.insert(name, files);
    }
    chapters
}

/// Writes each file under `OUT_DIR/embedded/` and `embedded.rs`, which `include_bytes!`s them.
fn write_module(out_dir: &Path, chapters: &Chapters, source: &str) {
    let files_dir = out_dir.join("embedded");
    let _ = std::fs::remove_dir_all(&files_dir);
    let mut code = String::new();
    code.push_str(&format!(
        "/// Where the copies come from.\npub const SOURCE: &str = {source:?};\n"
    ));
    code.push_str("/// The chapter crates.\npub static CHAPTERS: &[EmbeddedChapter] = &[\n");
    for (chapter, files) in chapters {
        code.push_str(&format!(
            "    EmbeddedChapter {{\n        name: {chapter:?},\n        files: &[\n"
        ));
        for (rel, bytes) in files {
            let path = files_dir.join(chapter).join(rel);
            std::fs::create_dir_all(path.parent().expect("a file has a parent"))
                .expect("creating a directory in OUT_DIR");
            std::fs::write(&path, bytes).expect("writing a file in OUT_DIR");
            code.push_str(&format!(
                "            ({rel:?}, include_bytes!({:?})),\n",
                path.display().to_string()
            ));
        }
        code.push_str("        ],\n    },\n");
    }
    code.push_str("];\n");
    std::fs::write(out_dir.join("embedded.rs"), code).expect("writing embedded.rs");
}
