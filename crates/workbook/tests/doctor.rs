//! `workbook doctor` exits 0 on a machine without a GPU and says clearly what is malformed.

use crate::common;

#[test]
fn doctor_exits_zero_and_shows_the_smoke_test() {
    let (output, stdout, stderr) = common::run(common::workbook().arg("doctor"));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for needle in [
        "CUDA",
        "cuBLAS",
        "NVRTC",
        "cpu",
        "mem_get_info",
        "GPUMEM_DEVICE",
        "GPUMEM_ALLOC_CONF",
        "GPUMEM_CPU_CAPACITY",
        "allocated 512 B",
        "reserved 2.00 MiB",
        "memory_summary()",
        "doctor: all good",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("UNEXPECTED"), "{stdout}");
    if !gpumem::cuda::is_available() {
        assert!(stdout.contains("Device::from_env() picks cpu"), "{stdout}");
    }
}

#[test]
fn doctor_reports_nvrtc_version_and_targets_where_it_loads() {
    let (output, stdout, stderr) = common::run(common::workbook().arg("doctor"));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    match gpumem::cuda::nvrtc_version() {
        Ok((major, minor)) => {
            assert!(
                stdout.contains(&format!("NVRTC version         {major}.{minor} (")),
                "{stdout}"
            );
            let oldest = gpumem::cuda::nvrtc_supported_archs().expect("NVRTC loads")[0];
            assert!(
                stdout.contains(&format!("NVRTC targets         sm_{oldest}")),
                "{stdout}"
            );
        }
        Err(_) => {
            assert!(
                stdout.contains("NVRTC                 does not load: "),
                "{stdout}"
            );
            assert!(!stdout.contains("NVRTC version"), "{stdout}");
        }
    }
}

#[test]
fn a_malformed_alloc_conf_is_named_and_fails_doctor() {
    let (output, stdout, _) = common::run(
        common::workbook()
            .arg("doctor")
            .env("GPUMEM_ALLOC_CONF", "max_split_size_mb:lots"),
    );
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("GPUMEM_ALLOC_CONF     \"max_split_size_mb:lots\": MALFORMED"),
        "{stdout}"
    );
    // The allocator refuses to work under a malformed setting, and doctor shows that too.
    assert!(stdout.contains("FAILED"), "{stdout}");
}

#[test]
fn a_malformed_cpu_capacity_is_named_and_fails_doctor() {
    let (output, stdout, _) = common::run(
        common::workbook()
            .arg("doctor")
            .env("GPUMEM_CPU_CAPACITY", "2 parsecs"),
    );
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("\"2 parsecs\": MALFORMED"), "{stdout}");
}

#[test]
fn an_unusable_device_setting_is_named_and_fails_doctor() {
    let (output, stdout, _) =
        common::run(common::workbook().arg("doctor").env("GPUMEM_DEVICE", "tpu"));
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("\"tpu\": Device::from_env() fails: cannot understand device"),
        "{stdout}"
    );
    assert!(stdout.contains("smoke test skipped"), "{stdout}");
}

#[test]
fn doctor_shows_the_kernel_caches_folder_entries_and_size() {
    let dir = tempfile::tempdir().expect("scratch folder");
    let cache = gpumem::cuda::KernelCache::at(dir.path().join("kernels"));
    let key = gpumem::cuda::KernelKey {
        source: "// a kernel",
        target: "sm_90",
        nvrtc: (13, 0),
    };
    cache
        .get_or_compile(&key, || Ok(vec![7; 3000]))
        .expect("an entry");
    let size = cache.size().expect("size");
    let (output, stdout, stderr) = common::run(
        common::workbook()
            .arg("doctor")
            .env("GPUMEM_KERNEL_CACHE", cache.dir()),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let want = format!(
        "kernel cache          {}: 1 entries, {}",
        cache.dir().display(),
        gpumem::format_bytes(size.bytes)
    );
    assert!(stdout.contains(&want), "missing {want:?} in:\n{stdout}");
    let (_, stdout, _) = common::run(
        common::workbook()
            .arg("doctor")
            .env("GPUMEM_KERNEL_CACHE", "off"),
    );
    assert!(stdout.contains("kernel cache          off"), "{stdout}");
}
