//! Frames a user recognises: which frames of a recorded stack are the user's own code, and how a
//! frame is printed.
//!
//! torch's viewers (`_frame_filter` in torch/cuda/_memory_viz.py, `frameFilter` in MemoryViz.js,
//! torch 2.15) leave out the unwinder's and the interpreter's own frames. A stack recorded with
//! torch's default `stacks="all"` still starts with torch's C++ allocator
//! (`CUDACachingAllocator.cpp … DeviceCachingAllocator::malloc`) and, under Python, with torch's
//! own modules (`torch/nn/modules/linear.py`, `module.py:_call_impl`): the same frames for every
//! block, so a stack cut after a few frames names no line of the user's. Here a frame is the
//! user's when torch's viewers show it, it is Python (a `.py` file, or `<stdin>`, a notebook
//! cell) or Rust (gpumem's own snapshots), it is not in a directory named `torch` (torch's
//! package, installed or built), and it is not Python's own library (a `pythonX.Y` directory
//! outside `site-packages`, `<frozen …>`).
//! Third-party libraries (transformers, accelerate) count as the user's: their lines are the
//! ones a user can change or look up.

use gpumem::history::Frame;
use gpumem::trace::Stacks;
use std::collections::{BTreeMap, BTreeSet};

/// Whether torch's viewers show a frame (`_frame_filter`, torch 2.15: the unwinder's and the
/// interpreter's own frames are left out).
pub fn shown(f: &Frame) -> bool {
    const FUNCTIONS: [&str; 8] = [
        "unwind::unwind",
        "CapturedTraceback::gather",
        "gather_with_cpp",
        "_start",
        "__libc_start_main",
        "PyEval_",
        "PyObject_",
        "PyFunction_",
    ];
    const FILES: [&str; 10] = [
        "core/boxing",
        "/Register",
        "/Redispatch",
        "pythonrun.c",
        "Modules/main.c",
        "Objects/call.c",
        "Objects/methodobject.c",
        "pycore_ceval.h",
        "ceval.c",
        "cpython/abstract.h",
    ];
    !FUNCTIONS.iter().any(|n| f.name.contains(n)) && !FILES.iter().any(|n| f.filename.contains(n))
}

/// Whether a frame is the user's code: shown by torch's viewers, Python, and neither torch's own
/// nor Python's own library.
pub fn is_users(f: &Frame) -> bool {
    let file = &*f.filename;
    // Python's files and pseudo-files (`<stdin>`, a notebook's cells), and Rust's: gpumem
    // records the caller of `malloc`, a line of the program that uses it.
    let source = file.ends_with(".py")
        || file.ends_with(".rs")
        || (file.starts_with('<') && !file.starts_with("<frozen"));
    let parts: Vec<&str> = file.split(['/', '\\']).collect();
    let dirs = &parts[..parts.len().saturating_sub(1)];
    let torchs = dirs.contains(&"torch");
    let in_packages = dirs
        .iter()
        .any(|d| *d == "site-packages" || *d == "dist-packages");
    let pythons = !in_packages
        && dirs.iter().any(|d| {
            d.strip_prefix("python")
                .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        });
    shown(f) && source && !torchs && !pythons
}

/// A frame as MemoryViz.js prints it: `file:line:function`, the file's whole path.
pub fn frame_text(f: &Frame) -> String {
    format!("{}:{}:{}", f.filename, f.line, f.name)
}

/// The frames of a stack shown for it, innermost first: its first `n` user frames. A stack with
/// none (torch's own work, such as a backward pass on autograd's thread, which has no Python
/// frame) keeps the frames torch's viewers show from the operator that allocated
/// ([`operator_frames`]), so that it is not mistaken for one with no frames and two operators'
/// blocks do not print alike.
pub fn user_frames(stacks: &Stacks, stack: u32, n: usize) -> Vec<String> {
    let users: Vec<String> = stacks
        .frames(stack)
        .filter(|f| is_users(f))
        .take(n)
        .map(frame_text)
        .collect();
    if !users.is_empty() {
        return users;
    }
    let shown: Vec<&Frame> = stacks.frames(stack).filter(|f| shown(f)).collect();
    operator_frames(&shown)
        .iter()
        .take(n)
        .map(|f| frame_text(f))
        .collect()
}

/// A C++ stack from the operator on: from its first dispatcher entry (`at::_ops::mm::call`, the
/// operator a user called or autograd ran), or else past the allocator and the empty-tensor
/// helpers (`…CachingAllocator…`, `at::detail::empty_…`), which every block's stack starts with.
/// A stack with neither is kept whole.
pub fn operator_frames<'a, 'f>(frames: &'a [&'f Frame]) -> &'a [&'f Frame] {
    let is_op_entry = |f: &&Frame| f.name.starts_with("at::_ops::") && f.name.contains("::call(");
    if let Some(at) = frames.iter().position(is_op_entry) {
        return &frames[at..];
    }
    let machinery =
        |f: &&Frame| f.name.contains("CachingAllocator") || f.name.contains("at::detail::empty");
    match frames.iter().rposition(machinery) {
        Some(at) if at + 1 < frames.len() => &frames[at + 1..],
        _ => frames,
    }
}

/// A frame's text with its file's last part only (`_memory_viz.py`'s `_frame_fmt`): the file is
/// what comes before the first `:LINE:`.
fn short(full: &str) -> &str {
    let bytes = full.as_bytes();
    let mut i = 0;
    while let Some(at) = full[i..].find(':').map(|p| p + i) {
        let digits = bytes[at + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0 && bytes.get(at + 1 + digits) == Some(&b':') {
            let file = &full[..at];
            let start = file.rfind(['/', '\\']).map_or(0, |p| p + 1);
            return &full[start..];
        }
        i = at + 1;
    }
    full
}

/// How the frames of one printed report are written: each with its file's last part, unless two
/// different frames of the report would then read the same (two files of one name): those keep
/// their whole path, so that two different lines never print alike.
#[derive(Debug, Default)]
pub struct FrameNames {
    ambiguous: BTreeSet<String>,
}

impl FrameNames {
    /// The names for a report whose frames are `all`.
    pub fn of<'a>(all: impl IntoIterator<Item = &'a String>) -> FrameNames {
        let mut by_short: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for full in all {
            by_short.entry(short(full)).or_default().insert(full);
        }
        FrameNames {
            ambiguous: by_short
                .into_values()
                .filter(|fulls| fulls.len() > 1)
                .flatten()
                .map(str::to_string)
                .collect(),
        }
    }

    /// A frame as printed.
    pub fn name<'a>(&self, full: &'a str) -> &'a str {
        if self.ambiguous.contains(full) {
            full
        } else {
            short(full)
        }
    }

    /// A site's or block's stack on one line (`before_recording`: allocated before recording
    /// began, so the file holds no stack for it).
    pub fn site(&self, frames: &[String], before_recording: bool) -> String {
        if before_recording {
            "(allocated before recording began)".to_string()
        } else {
            self.stack(frames)
        }
    }

    /// A stack on one line, innermost first.
    pub fn stack(&self, frames: &[String]) -> String {
        if frames.is_empty() {
            "(no frames recorded)".to_string()
        } else {
            frames
                .iter()
                .map(|f| self.name(f))
                .collect::<Vec<_>>()
                .join(" ← ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(filename: &'static str, line: u64, name: &'static str) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    #[test]
    fn torchs_allocator_modules_and_pythons_library_are_not_the_users() {
        let not_users = [
            f(
                "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            ),
            f("??", 0, "at::native::empty_cuda"),
            f(
                "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                134,
                "forward",
            ),
            f("torch/optim/adam.py", 160, "_init_group"),
            f("/usr/lib/python3.11/contextlib.py", 81, "inner"),
            f("<frozen runpy>", 88, "_run_code"),
        ];
        for frame in &not_users {
            assert!(!is_users(frame), "{frame:?}");
        }
        let users = [
            f("/home/u/proj/model.py", 41, "forward"),
            f("train.py", 12, "step"),
            f(
                "/opt/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py",
                300,
                "forward",
            ),
            f("<stdin>", 1, "<module>"),
            f("/home/u/torch-experiments/run.py", 9, "main"),
        ];
        for frame in &users {
            assert!(is_users(frame), "{frame:?}");
        }
    }

    #[test]
    fn a_stack_without_user_frames_starts_at_the_operator() {
        // the shape of a backward pass's block on autograd's thread (torch 2.11, H100): no
        // Python frame, the allocator first
        let backward = [
            f(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)",
            ),
            f(
                "??",
                0,
                "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)",
            ),
            f(
                "??",
                0,
                "at::meta::structured_mm::meta(at::Tensor const&, at::Tensor const&)",
            ),
            f(
                "??",
                0,
                "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)",
            ),
            f(
                "Functions.cpp",
                0,
                "torch::autograd::generated::AddmmBackward0_apply_functional()",
            ),
        ];
        let refs: Vec<&Frame> = backward.iter().collect();
        let kept = operator_frames(&refs);
        assert_eq!(kept.len(), 2);
        assert!(kept[0].name.starts_with("at::_ops::mm::call"));
        // no dispatcher entry: past the allocator and the empty-tensor helpers
        let refs: Vec<&Frame> = [&backward[0], &backward[1], &backward[4]].into();
        assert_eq!(operator_frames(&refs).len(), 1);
        // neither: whole
        let refs: Vec<&Frame> = [&backward[4]].into();
        assert_eq!(operator_frames(&refs).len(), 1);
    }

    #[test]
    fn a_frame_prints_with_its_files_last_part_unless_another_file_shares_it() {
        let all = [
            "/home/u/a/model.py:41:forward".to_string(),
            "/home/u/b/model.py:41:forward".to_string(),
            "/home/u/train.py:12:step".to_string(),
            "??:0:c10::cuda::CUDACachingAllocator::malloc".to_string(),
        ];
        let names = FrameNames::of(&all);
        assert_eq!(names.name(&all[0]), "/home/u/a/model.py:41:forward");
        assert_eq!(names.name(&all[1]), "/home/u/b/model.py:41:forward");
        assert_eq!(names.name(&all[2]), "train.py:12:step");
        assert_eq!(names.name(&all[3]), all[3]);
        assert_eq!(short("C:\\u\\train.py:3:f"), "train.py:3:f");
    }
}
