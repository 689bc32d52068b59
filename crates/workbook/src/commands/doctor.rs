//! `workbook doctor`: what this machine offers the workbook — CUDA, devices, settings — and a smoke
//! test of the caching allocator on the device the exercises will use.

use gpumem::{AllocatorConfig, Device, format_bytes};

/// Whether doctor found something that stops the workbook from working as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Everything the settings ask for works (no GPU is not a problem: the `cpu` device is used).
    Good,
    /// A setting is malformed or the allocator misbehaved.
    Broken,
}

const LABEL: usize = 22;

fn row(label: &str, value: impl std::fmt::Display) {
    println!("  {label:<LABEL$}{value}");
}

fn more(value: impl std::fmt::Display) {
    println!("  {:<LABEL$}{value}", "");
}

/// Prints the report on stdout and says whether anything is broken.
pub fn run() -> Health {
    let mut health = Health::Good;
    println!("GPU Memory Workbook doctor");

    println!("\nCUDA");
    match gpumem::cuda::unavailable_reason() {
        None => row("available", "yes"),
        Some(reason) => row("available", format!("no: {reason}")),
    }
    row(
        "driver library",
        if gpumem::cuda::driver_library_present() {
            "libcuda loaded"
        } else {
            "libcuda not found"
        },
    );
    row(
        "driver version",
        match gpumem::cuda::driver_version() {
            Some(v) => format!("CUDA {}.{} ({v})", v / 1000, (v % 1000) / 10),
            None => "unknown (the driver did not answer)".to_string(),
        },
    );
    row("devices", gpumem::cuda::device_count());
    for (lib, status) in gpumem::cuda::library_status() {
        match status {
            Ok(()) => row(lib, "loads"),
            Err(why) => row(lib, format!("does not load: {why}")),
        }
    }
    describe_nvrtc();
    describe_kernel_cache();
    row(
        "auto picks",
        match gpumem::cuda::auto_cpu_reason() {
            None => "cuda:0 (the driver, cuBLAS and NVRTC load)".to_string(),
            Some(reason) => format!("cpu: {reason}"),
        },
    );

    println!("\nDevices");
    let mut devices = vec![Ok(Device::cpu())];
    for i in 0..gpumem::cuda::device_count() {
        devices.push(Device::cuda(i).map_err(|e| (i, e)));
    }
    for dev in devices {
        match dev {
            Ok(dev) => describe_device(&dev),
            Err((i, e)) => row(&format!("cuda:{i}"), format!("cannot be opened: {e}")),
        }
    }

    println!("\nSettings");
    let device_setting = std::env::var("GPUMEM_DEVICE");
    let chosen = Device::from_env();
    let picks = match &chosen {
        Ok(dev) => format!("Device::from_env() picks {dev}"),
        Err(e) => {
            health = Health::Broken;
            format!("Device::from_env() fails: {e}")
        }
    };
    match &device_setting {
        Ok(value) => row("GPUMEM_DEVICE", format!("{value:?}: {picks}")),
        Err(std::env::VarError::NotPresent) => {
            row("GPUMEM_DEVICE", format!("unset (auto): {picks}"))
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            row("GPUMEM_DEVICE", format!("not valid UTF-8: {picks}"))
        }
    }
    let conf = std::env::var("GPUMEM_ALLOC_CONF").ok();
    let shown = conf
        .as_deref()
        .map(|c| format!("{c:?}"))
        .unwrap_or_else(|| "unset".to_string());
    match AllocatorConfig::from_env() {
        Ok(config) => row(
            "GPUMEM_ALLOC_CONF",
            format!("{shown}: {}", describe_config(&config)),
        ),
        Err(e) => {
            health = Health::Broken;
            row("GPUMEM_ALLOC_CONF", format!("{shown}: MALFORMED: {e}"));
        }
    }
    let capacity = std::env::var("GPUMEM_CPU_CAPACITY").ok();
    match gpumem::backend_cpu::cpu_capacity() {
        Ok(bytes) => row(
            "GPUMEM_CPU_CAPACITY",
            match capacity {
                Some(text) => format!(
                    "{text:?}: the cpu device holds {}",
                    format_bytes(bytes as u64)
                ),
                None => format!(
                    "unset: the cpu device holds {} (physical memory)",
                    format_bytes(bytes as u64)
                ),
            },
        ),
        Err(e) => {
            health = Health::Broken;
            row(
                "GPUMEM_CPU_CAPACITY",
                format!("{:?}: MALFORMED: {e}", capacity.unwrap_or_default()),
            );
        }
    }

    let limit = format_bytes(crate::run::runner::DEFAULT_MEMORY_LIMIT);
    row(
        "test memory limit",
        if gpumem::cuda::is_available() {
            format!(
                "RLIMIT_DATA {limit} per check/grade test process (--memory-limit), the same on \
                 cuda: `cargo test -p gpumem --test memory_limit` shows a CUDA context, cuBLAS \
                 and NVRTC start under it here"
            )
        } else {
            format!(
                "RLIMIT_DATA {limit} per check/grade test process (--memory-limit), the cpu \
                 device's memory included"
            )
        },
    );
    let streams = std::env::var("GPUMEM_CPU_STREAMS").ok();
    let shown = streams
        .as_deref()
        .map(|v| format!("{v:?}"))
        .unwrap_or_else(|| "unset".to_string());
    match gpumem::backend_cpu::cpu_streams_late() {
        Ok(true) => row(
            "GPUMEM_CPU_STREAMS",
            format!("{shown}: cpu streams run work late, as a GPU's"),
        ),
        Ok(false) => row(
            "GPUMEM_CPU_STREAMS",
            format!("{shown}: cpu streams run work when it is queued"),
        ),
        Err(e) => {
            health = Health::Broken;
            row("GPUMEM_CPU_STREAMS", format!("{shown}: MALFORMED: {e}"));
        }
    }

    match chosen {
        Ok(dev) => {
            println!("\nAllocator smoke test on {dev}");
            if !smoke_test(&dev) {
                health = Health::Broken;
            }
        }
        Err(_) => println!("\nAllocator smoke test skipped: GPUMEM_DEVICE names no usable device"),
    }

    println!();
    match health {
        Health::Good => println!("doctor: all good"),
        Health::Broken => {
            println!("doctor: problems found (marked MALFORMED, FAILED or UNEXPECTED above)")
        }
    }
    health
}

/// NVRTC's version and the architectures it compiles the kernels for (nothing when it does not
/// load: the NVRTC row above says why).
fn describe_nvrtc() {
    let Ok((major, minor)) = gpumem::cuda::nvrtc_version() else {
        return;
    };
    row(
        "NVRTC version",
        format!(
            "{major}.{minor} (its PTX, used when it has no machine code for a GPU, needs a driver of CUDA {major}.{minor} or newer)"
        ),
    );
    match gpumem::cuda::nvrtc_supported_archs() {
        Ok(archs) => row(
            "NVRTC targets",
            archs
                .iter()
                .map(|a| format!("sm_{a}"))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Err(e) => row("NVRTC targets", format!("unknown: {e}")),
    }
}

/// Where the cuda device keeps NVRTC's compiled kernels, and how much is there.
fn describe_kernel_cache() {
    let Some(cache) = gpumem::cuda::KernelCache::from_env() else {
        row(
            "kernel cache",
            "off (GPUMEM_KERNEL_CACHE=off, or no home folder): NVRTC compiles in every process",
        );
        return;
    };
    let dir = cache.dir().display();
    match cache.size() {
        Ok(size) => row(
            "kernel cache",
            format!(
                "{dir}: {} entries, {}",
                size.entries,
                format_bytes(size.bytes)
            ),
        ),
        Err(e) => row(
            "kernel cache",
            format!("{dir}: unreadable ({e}); kernels are compiled in every process"),
        ),
    }
}

/// Whether NVRTC makes machine code for a GPU of compute capability `major.minor`, in words.
fn kernels_for(major: u32, minor: u32) -> String {
    match gpumem::cuda::nvrtc_supported_archs() {
        Ok(archs) if archs.contains(&(major * 10 + minor)) => {
            format!("kernels: NVRTC makes machine code for sm_{major}{minor}")
        }
        Ok(_) => format!(
            "kernels: NVRTC does not know sm_{major}{minor}; they go as PTX for the driver to compile"
        ),
        Err(_) => "kernels: NVRTC does not load, so the element-wise ops cannot run".to_string(),
    }
}

fn describe_device(dev: &gpumem::Device) {
    let name = dev.to_string();
    match dev.properties() {
        Ok(p) => {
            row(&name, &p.name);
            if dev.is_cuda() {
                let (major, minor) = p.compute_capability;
                more(format!(
                    "{} memory, {} multiprocessors, compute capability {major}.{minor}",
                    format_bytes(p.total_memory),
                    p.multi_processor_count
                ));
                more(kernels_for(major, minor));
                more(if dev.virtual_memory_management() {
                    "expandable_segments:True: supported (virtual memory management)"
                } else {
                    "expandable_segments:True: NOT supported (no virtual memory management): \
                     allocations fail with it set"
                });
            } else {
                more(format!(
                    "{} capacity, {} cores",
                    format_bytes(p.total_memory),
                    p.multi_processor_count
                ));
            }
        }
        Err(e) => row(&name, format!("properties unavailable: {e}")),
    }
    match dev.mem_get_info() {
        Ok((free, total)) => more(format!(
            "mem_get_info: {} free of {}",
            format_bytes(free),
            format_bytes(total)
        )),
        Err(e) => more(format!("mem_get_info failed: {e}")),
    }
}

fn describe_config(config: &AllocatorConfig) -> String {
    let split = if config.max_split_size == usize::MAX {
        "max_split_size none".to_string()
    } else {
        format!(
            "max_split_size {}",
            format_bytes(config.max_split_size as u64)
        )
    };
    let d = config.roundup_power2_divisions;
    let divisions = if d.iter().all(|&n| n <= 1) {
        "roundup_power2_divisions off".to_string()
    } else if d.iter().all(|&n| n == d[0]) {
        format!("roundup_power2_divisions {}", d[0])
    } else {
        format!("roundup_power2_divisions {d:?} (one per power of two from 1 MiB)")
    };
    let gc = if config.garbage_collection_threshold > 0.0 {
        format!(
            "garbage_collection_threshold {}",
            config.garbage_collection_threshold
        )
    } else {
        "garbage_collection_threshold off".to_string()
    };
    let expandable = if config.expandable_segments {
        "expandable_segments on"
    } else {
        "expandable_segments off"
    };
    let mut text = format!("{split}, {divisions}, {gc}, {expandable}");
    if config.large_segment_size != gpumem::allocator::LARGE_BUFFER {
        text.push_str(&format!(
            ", large_segment_size {}",
            format_bytes(config.large_segment_size as u64)
        ));
    }
    // Options accepted as torch accepts them but without effect in gpumem, each with why.
    for note in config.notes() {
        text.push_str(&format!("; {note}"));
    }
    text
}

/// One `f32` on `dev`: 512 B allocated in a 2 MiB segment, then freed and released. True when
/// the numbers are the allocator's rules.
fn smoke_test(dev: &Device) -> bool {
    const SMALL_BLOCK: u64 = 512;
    const SMALL_SEGMENT: u64 = 2 << 20;
    let mut good = true;
    let mut step = |what: &str, allocated: u64, reserved: u64| {
        let seen = (dev.memory_allocated(), dev.memory_reserved());
        let verdict = if seen == (allocated, reserved) {
            "as expected".to_string()
        } else {
            good = false;
            format!(
                "UNEXPECTED: expected {} / {}",
                format_bytes(allocated),
                format_bytes(reserved)
            )
        };
        row(
            what,
            format!(
                "allocated {:<10} reserved {:<10} {verdict}",
                format_bytes(seen.0),
                format_bytes(seen.1)
            ),
        );
    };
    step("before", 0, 0);
    match dev.alloc::<f32>(1) {
        Ok(buffer) => {
            step("alloc 1 × f32", SMALL_BLOCK, SMALL_SEGMENT);
            drop(buffer);
            step("drop", 0, SMALL_SEGMENT);
            dev.empty_cache();
            step("empty_cache", 0, 0);
        }
        Err(e) => {
            good = false;
            row("alloc 1 × f32", format!("FAILED: {e}"));
        }
    }
    println!("\nmemory_summary() on {dev}:");
    println!("{}", dev.memory_summary());
    good
}
