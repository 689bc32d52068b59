//! Every element-wise kernel of `ops/kernels.cu` compiled by NVIDIA's own compilers, with no GPU:
//! NVRTC, loaded through cudarc exactly as the cuda device loads it, makes machine code and PTX for
//! the oldest architecture it supports, sm_80 (A100) and sm_90 (H100/H200); ptxas assembles the PTX
//! and reports registers, stack frame and spills per kernel (a compile-time figure, not a GPU run).
//!
//! Needs libnvrtc on `LD_LIBRARY_PATH` and ptxas (`GPUMEM_PTXAS`, else on `PATH`):
//! `eval "$(bash scripts/install-nvrtc.sh)"` installs both from PyPI wheels, as CI does. Required
//! when `CI=true`; elsewhere each test is skipped with a notice when they are missing. See the
//! table: `cargo test -p gpumem --test kernels_compile -- --nocapture`.

use anyhow::{Context, Result, bail, ensure};
use gpumem::cuda::{
    KernelCache, KernelImage, KernelTarget, Lookup, compile_kernels, compile_kernels_cached,
    kernel_names,
};
use std::path::PathBuf;
use std::process::Command;

/// Threads per block of every launch (`THREADS` in ops/cuda.rs): a multiprocessor's 65,536
/// registers must hold a whole block, so a kernel may use at most 255 registers per thread.
const THREADS: u32 = 256;

/// The largest stack frame a kernel may have, in bytes per thread. The driver backs a context's local
/// memory for the largest frame among the kernels it launches, on every thread the device can hold
/// at once, and the caching allocator never sees it (neither `memory_reserved()` nor an OOM retry):
/// on an H100 (132 multiprocessors of 2,048 threads) each byte of frame costs 264 KiB, so the
/// 4,096-byte frames the attention kernels once had took 1 GiB. No kernel needs one, so none is
/// allowed: a kernel that indexes an array at run time, calls a function ptxas does not inline, or
/// uses `printf` fails here.
const MAX_STACK_FRAME: u32 = 0;

fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

const HOW: &str = "run `eval \"$(bash scripts/install-nvrtc.sh)\"` first";

/// Whether NVRTC loads; `Err` under CI=true when it does not, `Ok(false)` (with a notice) elsewhere.
fn nvrtc_here(test: &str) -> Result<bool> {
    match gpumem::cuda::nvrtc_version() {
        Ok(_) => Ok(true),
        Err(e) if required() => bail!("CI=true requires NVRTC ({HOW}): {e}"),
        Err(e) => {
            eprintln!("{test}: skipped, NVRTC is missing ({HOW}): {e}");
            Ok(false)
        }
    }
}

/// The architectures every kernel is compiled for: the oldest NVRTC supports, sm_80 and sm_90.
fn architectures() -> Result<Vec<u32>> {
    let supported = gpumem::cuda::nvrtc_supported_archs().context("nvrtcGetSupportedArchs")?;
    let oldest = *supported.first().context("NVRTC lists no architecture")?;
    for arch in [80, 90] {
        ensure!(
            supported.contains(&arch),
            "NVRTC cannot target sm_{arch}: {supported:?}"
        );
    }
    let mut archs = vec![oldest, 80, 90];
    archs.dedup();
    Ok(archs)
}

fn split(arch: u32) -> (u32, u32) {
    (arch / 10, arch % 10)
}

#[test]
fn every_kernel_compiles_to_machine_code_for_each_architecture() -> Result<()> {
    if !nvrtc_here("every_kernel_compiles_to_machine_code_for_each_architecture")? {
        return Ok(());
    }
    let names = kernel_names();
    for arch in architectures()? {
        let (major, minor) = split(arch);
        let image = compile_kernels(KernelTarget::Cubin(major, minor))
            .with_context(|| format!("compiling the kernels for sm_{arch}"))?;
        let KernelImage::Cubin(bytes) = image else {
            bail!("sm_{arch}: machine code was asked for, NVRTC gave PTX");
        };
        ensure!(bytes.starts_with(b"\x7fELF"), "sm_{arch}: not an ELF image");
        for name in &names {
            let symbol = format!("{name}\0");
            ensure!(
                bytes.windows(symbol.len()).any(|w| w == symbol.as_bytes()),
                "sm_{arch}: {name} is missing from the machine code"
            );
        }
    }
    Ok(())
}

/// The machine code in `image`, or an error naming what NVRTC gave instead.
fn cubin(image: KernelImage) -> Result<Vec<u8>> {
    match image {
        KernelImage::Cubin(bytes) => Ok(bytes),
        KernelImage::Ptx(_) => bail!("machine code was asked for, NVRTC gave PTX"),
    }
}

#[test]
fn the_kernel_cache_compiles_once_per_machine_and_recompiles_a_corrupt_entry() -> Result<()> {
    if !nvrtc_here("the_kernel_cache_compiles_once_per_machine_and_recompiles_a_corrupt_entry")? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let cache = KernelCache::at(dir.path().join("kernels"));
    let target = KernelTarget::Cubin(9, 0);
    let (image, lookup) = compile_kernels_cached(target, Some(&cache))?;
    ensure!(
        lookup == Lookup::Compiled,
        "an empty cache compiles: {lookup:?}"
    );
    let first = cubin(image)?;
    ensure!(first.starts_with(b"\x7fELF"), "not an ELF image");
    let (image, lookup) = compile_kernels_cached(target, Some(&cache))?;
    ensure!(
        lookup == Lookup::Hit,
        "the second process reads the entry: {lookup:?}"
    );
    ensure!(cubin(image)? == first, "the entry holds what NVRTC made");
    let size = cache.size()?;
    ensure!(size.entries == 1, "one entry: {size:?}");
    ensure!(size.bytes > first.len() as u64, "{size:?}");
    // A damaged entry (a bit flipped on disk) is compiled again, never loaded.
    let entry = std::fs::read_dir(cache.dir())?
        .next()
        .context("the entry")??
        .path();
    let mut bytes = std::fs::read(&entry)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&entry, &bytes)?;
    let (image, lookup) = compile_kernels_cached(target, Some(&cache))?;
    ensure!(
        matches!(&lookup, Lookup::Recompiled(why) if why.contains("corrupt")),
        "{lookup:?}"
    );
    ensure!(cubin(image)? == first, "recompiled, the same machine code");
    let (_, lookup) = compile_kernels_cached(target, Some(&cache))?;
    ensure!(lookup == Lookup::Hit, "and stored again: {lookup:?}");
    Ok(())
}

/// ptxas's report for one kernel.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Usage {
    registers: u32,
    stack_frame: u32,
    spill_stores: u32,
    spill_loads: u32,
}

/// The first integer before `unit` in `line` (`"0 bytes spill stores"` → 0).
fn number_before(line: &str, unit: &str) -> Option<u32> {
    let before = &line[..line.find(unit)?];
    before.split_whitespace().last()?.parse().ok()
}

/// Reads `ptxas -v`'s report: per entry function, registers, stack frame and bytes of spill stores
/// and loads.
fn parse_ptxas_report(report: &str) -> Vec<(String, Usage)> {
    let mut kernels: Vec<(String, Usage)> = Vec::new();
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            kernels.push((name, Usage::default()));
        } else if let Some((_, usage)) = kernels.last_mut() {
            if line.contains("spill stores") {
                usage.stack_frame = number_before(line, "bytes stack frame").unwrap_or(0);
                usage.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                usage.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                usage.registers = number_before(line, "registers").unwrap_or(0);
            }
        }
    }
    kernels
}

/// ptxas: `GPUMEM_PTXAS`, else the one on `PATH`.
fn ptxas() -> PathBuf {
    std::env::var_os("GPUMEM_PTXAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ptxas"))
}

#[test]
fn ptxas_assembles_the_ptx_and_reports_registers_stack_and_spills() -> Result<()> {
    let test = "ptxas_assembles_the_ptx_and_reports_registers_stack_and_spills";
    if !nvrtc_here(test)? {
        return Ok(());
    }
    let ptxas = ptxas();
    let version = match Command::new(&ptxas).arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(_) | Err(_) if required() => bail!("CI=true requires ptxas ({HOW}): {ptxas:?}"),
        _ => {
            eprintln!("{test}: skipped, ptxas is missing ({HOW}): {ptxas:?}");
            return Ok(());
        }
    };
    let (major, minor) = gpumem::cuda::nvrtc_version()?;
    let names = kernel_names();
    let archs = architectures()?;
    // cargo makes this folder; a test executable carried to another machine (a GPU host) finds
    // none, so it is made here.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    let mut table: Vec<(String, Vec<Usage>)> = names.iter().map(|n| (n.clone(), vec![])).collect();
    for &arch in &archs {
        let KernelImage::Ptx(ptx) = compile_kernels(KernelTarget::Ptx(Some(split(arch))))
            .with_context(|| format!("compiling the kernels to PTX for compute_{arch}"))?
        else {
            bail!("compute_{arch}: PTX was asked for, NVRTC gave machine code");
        };
        let input = dir.join(format!("kernels_compute_{arch}.ptx"));
        std::fs::write(&input, &ptx).with_context(|| format!("writing {input:?}"))?;
        let out = Command::new(&ptxas)
            .arg(format!("--gpu-name=sm_{arch}"))
            .arg("--verbose")
            .arg("--output-file")
            .arg(dir.join(format!("kernels_sm_{arch}.cubin")))
            .arg(&input)
            .output()
            .with_context(|| format!("running {ptxas:?}"))?;
        let report = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "ptxas could not assemble the PTX for sm_{arch}:\n{report}"
        );
        let found = parse_ptxas_report(&report);
        for (name, usages) in &mut table {
            let usage = found
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, u)| u.clone())
                .with_context(|| format!("sm_{arch}: ptxas reports nothing for {name}"))?;
            usages.push(usage);
        }
    }

    // The table, as bench/README.md records it: printed, and kept in `kernels_usage.md` beside the
    // PTX (CI prints that file after `cargo test`, which captures this output).
    let tool = version.lines().last().unwrap_or_default().trim();
    let mut report = format!("NVRTC {major}.{minor}; ptxas: {tool}\n| kernel |");
    for arch in &archs {
        report += &format!(" sm_{arch} registers | sm_{arch} stack (B) | sm_{arch} spills (B) |");
    }
    report += &format!("\n|---|{}\n", "---:|---:|---:|".repeat(archs.len()));
    for (name, usages) in &table {
        report += &format!("| `{name}` |");
        for u in usages {
            report += &format!(
                " {} | {} | {} |",
                u.registers,
                u.stack_frame,
                u.spill_stores + u.spill_loads
            );
        }
        report += "\n";
    }
    print!("{report}");
    let kept = dir.join("kernels_usage.md");
    std::fs::write(&kept, &report).with_context(|| format!("writing {}", kept.display()))?;

    for (name, usages) in &table {
        for (arch, u) in archs.iter().zip(usages) {
            ensure!(
                u.registers > 0 && u.registers * THREADS <= 65_536,
                "{name} on sm_{arch} uses {} registers per thread: a {THREADS}-thread block would not fit",
                u.registers
            );
            #[allow(clippy::absurd_extreme_comparisons)] // "at most": the bound is 0 today
            let within = u.stack_frame <= MAX_STACK_FRAME;
            ensure!(
                within,
                "{name} on sm_{arch} has a {} B stack frame (at most {MAX_STACK_FRAME} B): the \
                 driver would reserve that much local memory for every thread the device can hold",
                u.stack_frame
            );
            ensure!(
                u.spill_stores == 0 && u.spill_loads == 0,
                "{name} on sm_{arch} spills registers to local memory: {u:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_ptxas_report_is_read_per_kernel() {
    let report = "ptxas info    : 0 bytes gmem\n\
        ptxas info    : Compiling entry function 'sum_f32' for 'sm_80'\n\
        ptxas info    : Function properties for sum_f32\n\
        \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
        ptxas info    : Used 18 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]\n\
        ptxas info    : Compiling entry function 'relu_f16' for 'sm_80'\n\
        ptxas info    : Function properties for relu_f16\n\
        \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
        ptxas info    : Used 10 registers, 380 bytes cmem[0]\n";
    let usage = |registers, stack_frame, spill_stores, spill_loads| Usage {
        registers,
        stack_frame,
        spill_stores,
        spill_loads,
    };
    assert_eq!(
        parse_ptxas_report(report),
        vec![
            ("sum_f32".to_string(), usage(18, 8, 4, 12)),
            ("relu_f16".to_string(), usage(10, 0, 0, 0)),
        ]
    );
}
