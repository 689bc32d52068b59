//! `workbook check` and `workbook grade` run every test process with a memory limit
//! (`RLIMIT_DATA`, 4 GiB by default: `runner::DEFAULT_MEMORY_LIMIT`). This test runs a small workload
//! on the test device in a child process under that limit: on `cuda` it shows that the driver's
//! context, cuBLAS, NVRTC and pinned memory all start within it; on `cpu` that the device's own
//! memory fits beside the process's.

use gpumem::ops::{self, MatMul};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The limit `workbook` gives a test process by default.
const LIMIT: u64 = 4 << 30;
/// Set in the child: run the workload instead of starting another child.
const CHILD: &str = "GPUMEM_TEST_UNDER_MEMORY_LIMIT";
const NAME: &str = "the_test_device_works_under_the_workbooks_default_memory_limit";

#[test]
fn the_test_device_works_under_the_workbooks_default_memory_limit() {
    if std::env::var_os(CHILD).is_some() {
        workload().expect("the workload under the limit");
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("this test's executable"));
    child
        .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
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
    assert!(
        output.status.success(),
        "under RLIMIT_DATA = {}: {}\n{}\n{}",
        gpumem::format::format_bytes(LIMIT),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
}

/// What a chapter's tests do: device buffers both ways, a matrix product, an element-wise kernel,
/// pinned memory.
fn workload() -> gpumem::Result<()> {
    let dev = gpumem::testing::device();
    let n = 256;
    let a = dev.from_slice(&vec![1.0f32; n * n])?;
    let b = dev.from_slice(&vec![2.0f32; n * n])?;
    let c = ops::matmul(&a, &b, MatMul::new(n, n, n))?;
    let r = ops::relu(&c)?;
    assert!(r.to_vec()?.iter().all(|&v| v == 2.0 * n as f32));
    let big = dev.alloc::<u8>(256 << 20)?;
    assert_eq!(big.size_bytes(), 256 << 20);
    let mut pinned = dev.alloc_pinned::<f32>(1 << 20)?;
    pinned.as_mut_slice().fill(3.0);
    let up = dev.from_slice(pinned.as_slice())?;
    assert_eq!(up.to_vec()?[1000], 3.0);
    Ok(())
}
