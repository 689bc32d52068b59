//! `workbook check` and `workbook grade` run every test process with a memory limit
//! (`RLIMIT_DATA`, 4 GiB by default: `runner::DEFAULT_MEMORY_LIMIT`). These tests run a small
//! workload in a child process under that limit: on the test device (on `cpu`, the device's own
//! memory fits beside the process's), and on `cuda:0` wherever CUDA is available, whatever the
//! test device, to show that the driver's context, cuBLAS, NVRTC and pinned memory all start
//! within it (skipped, saying so, where there is no CUDA). The child prints its `VmData`.

use gpumem::ops::{self, MatMul};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The limit `workbook` gives a test process by default.
const LIMIT: u64 = 4 << 30;
/// Set in the child: run the workload instead of starting another child.
const CHILD: &str = "GPUMEM_TEST_UNDER_MEMORY_LIMIT";

#[test]
fn the_test_device_works_under_the_workbooks_default_memory_limit() {
    under_the_limit(
        "the_test_device_works_under_the_workbooks_default_memory_limit",
        || workload(&gpumem::testing::device()),
    );
}

/// The first thing to run on a GPU (`ONLY=memory_limit bash .gpu/run.sh`, see bench/README.md):
/// whatever `GPUMEM_DEVICE` says, `cuda:0` with its context, cuBLAS, NVRTC's kernels (the
/// attention ones too) and pinned memory, under the limit. Skipped where CUDA is unavailable.
#[test]
fn a_cuda_context_with_cublas_and_nvrtc_works_under_the_workbooks_default_memory_limit() {
    let name =
        "a_cuda_context_with_cublas_and_nvrtc_works_under_the_workbooks_default_memory_limit";
    if let Some(reason) = gpumem::cuda::unavailable_reason() {
        eprintln!("{name}: skipped, no CUDA here: {reason}");
        return;
    }
    under_the_limit(name, || workload(&gpumem::Device::cuda(0)?));
}

/// Runs test `name` again in a child process under `RLIMIT_DATA` = [`LIMIT`], where it runs
/// `workload` and prints the process's data size after it.
fn under_the_limit(name: &str, workload: impl FnOnce() -> gpumem::Result<()>) {
    if std::env::var_os(CHILD).is_some() {
        workload().expect("the workload under the limit");
        println!("{name}: VmData after the workload: {}", vm_data());
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("this test's executable"));
    child
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(CHILD, "1");
    // SAFETY: runs in the forked child before exec; setrlimit is async-signal-safe.
    unsafe {
        child.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT as libc::rlim_t,
                rlim_max: LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    };
    let output = child.output().expect("the child test process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "under RLIMIT_DATA = {}: {}\n{}\n{}",
        gpumem::format::format_bytes(LIMIT),
        output.status,
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
    if let Some(line) = stdout.lines().find(|l| l.contains("VmData")) {
        println!("{line} (limit {})", gpumem::format::format_bytes(LIMIT));
    }
}

/// `VmData` of /proc/self/status (what `RLIMIT_DATA` limits), as the kernel writes it.
fn vm_data() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmData:"))
                .map(|l| l[7..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown (no /proc/self/status)".to_string())
}

/// What a chapter's tests do: device buffers both ways, a matrix product, an element-wise kernel,
/// attention, pinned memory.
fn workload(dev: &gpumem::Device) -> gpumem::Result<()> {
    let n = 256;
    let a = dev.from_slice(&vec![1.0f32; n * n])?;
    let b = dev.from_slice(&vec![2.0f32; n * n])?;
    let c = ops::matmul(&a, &b, MatMul::new(n, n, n))?;
    let r = ops::relu(&c)?;
    assert!(r.to_vec()?.iter().all(|&v| v == 2.0 * n as f32));
    let (heads, s, d) = (2, 16, 64);
    let q = dev.from_slice(&vec![0.5f32; heads * s * d])?;
    let shape = ops::SdpaShape {
        heads,
        s,
        d,
        lse_stride: s,
        scale: 1.0 / (d as f32).sqrt(),
        causal: true,
        p: 0.0,
        seed: 0,
        a: 1,
        rows: false,
    };
    let (out, _lse) = ops::sdpa_forward(&q, &q, &q, shape)?;
    assert!(out.to_vec()?.iter().all(|&v| v == 0.5));
    let big = dev.alloc::<u8>(256 << 20)?;
    assert_eq!(big.size_bytes(), 256 << 20);
    let mut pinned = dev.alloc_pinned::<f32>(1 << 20)?;
    pinned.as_mut_slice().fill(3.0);
    let up = dev.from_slice(pinned.as_slice())?;
    assert_eq!(up.to_vec()?[1000], 3.0);
    Ok(())
}
