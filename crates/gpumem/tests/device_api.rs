//! The safe surface: devices, buffers, transfers and their counters, pinned memory, streams.

use gpumem::{Device, DeviceKind, Error, cuda};

const MIB: u64 = 1 << 20;

#[test]
fn device_names_parse_and_print_like_torch() {
    assert_eq!(Device::cpu().to_string(), "cpu");
    assert_eq!(Device::by_name(" CPU ").unwrap().kind(), DeviceKind::Cpu);
    for bad in ["gpu", "cuda:x", "cuda:-1", "cuda0"] {
        let err = Device::by_name(bad).unwrap_err();
        assert!(matches!(err, Error::BadDeviceName { .. }), "{bad}: {err}");
        assert!(
            err.to_string()
                .contains("expected auto, cpu, cpu:N, cuda or cuda:N")
        );
    }
}

#[test]
fn asking_for_cuda_without_a_gpu_is_an_error_not_a_fallback() {
    if cuda::is_available() {
        let count = cuda::device_count();
        let err = Device::cuda(count).unwrap_err();
        assert!(matches!(err, Error::NoSuchDevice { .. }), "{err}");
        assert_eq!(Device::best().to_string(), "cuda:0");
    } else {
        assert_eq!(cuda::device_count(), 0);
        assert!(cuda::unavailable_reason().is_some());
        let err = Device::by_name("cuda").unwrap_err();
        assert!(matches!(err, Error::CudaUnavailable { .. }), "{err}");
        assert_eq!(Device::best(), Device::cpu());
    }
}

#[test]
fn every_handle_to_a_device_shares_one_allocator() {
    let dev = gpumem::testing::device();
    let other = Device::by_name(&dev.to_string()).unwrap();
    let buf = dev.alloc::<u8>(1).unwrap();
    assert_eq!(other.memory_allocated(), 512);
    drop(buf);
    assert_eq!(other.memory_allocated(), 0);
}

#[test]
fn cpu_properties_describe_the_host() {
    let props = Device::cpu().properties().unwrap();
    assert!(!props.name.is_empty());
    assert!(props.multi_processor_count >= 1);
    assert_eq!(props.compute_capability, (0, 0));
    let (free, total) = Device::cpu().mem_get_info().unwrap();
    assert_eq!(total, props.total_memory);
    assert!(free <= total);
}

#[test]
fn alloc_zero_fills_on_the_device_without_a_copy() {
    let dev = gpumem::testing::device();
    let buf = dev.alloc::<f32>(1000).unwrap();
    assert_eq!(dev.transfer_stats().host_to_device.copies, 0);
    assert_eq!(buf.to_vec().unwrap(), vec![0.0; 1000]);
    assert_eq!(buf.block_bytes(), 4096);
    assert_eq!(dev.memory_allocated(), 4096);
    assert_eq!(dev.memory_reserved(), 2 * MIB);
}

#[test]
fn from_slice_and_to_vec_count_one_copy_each_way() {
    let dev = gpumem::testing::device();
    let data: Vec<u32> = (0..1000).collect();
    let buf = dev.from_slice(&data).unwrap();
    assert_eq!(buf.to_vec().unwrap(), data);
    let t = dev.transfer_stats();
    assert_eq!((t.host_to_device.copies, t.host_to_device.bytes), (1, 4000));
    assert_eq!((t.device_to_host.copies, t.device_to_host.bytes), (1, 4000));
    assert_eq!(t.device_to_device.copies, 0);
    assert_eq!(t.total_copies(), 2);
    dev.reset_transfer_stats();
    assert_eq!(dev.transfer_stats().total_copies(), 0);
}

#[test]
fn to_the_same_device_shares_memory_and_copies_nothing() {
    let dev = gpumem::testing::device();
    let a = dev.from_slice(&[1.0f32, 2.0, 3.0]).unwrap();
    let b = a.to(&dev).unwrap();
    assert!(b.shares_memory_with(&a));
    assert_eq!(dev.memory_allocated(), 512, "no second block");
    assert_eq!(dev.transfer_stats().total_copies(), 1, "only the upload");
    drop(a);
    assert_eq!(dev.memory_allocated(), 512, "b still holds the memory");
    drop(b);
    assert_eq!(dev.memory_allocated(), 0);
}

#[test]
fn try_clone_copies_within_the_device() {
    let dev = gpumem::testing::device();
    let a = dev.from_slice(&[7u8; 600]).unwrap();
    let b = a.try_clone().unwrap();
    assert!(!b.shares_memory_with(&a));
    assert_eq!(b.to_vec().unwrap(), vec![7u8; 600]);
    assert_eq!(dev.transfer_stats().device_to_device.copies, 1);
    assert_eq!(dev.memory_allocated(), 2048);
}

#[test]
fn length_mismatches_are_errors_not_panics() {
    let dev = gpumem::testing::device();
    let mut buf = dev.alloc::<f32>(4).unwrap();
    let err = buf.copy_from_slice(&[1.0; 5]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::LengthMismatch {
                expected: 4,
                actual: 5
            }
        ),
        "{err}"
    );
    let other = dev.alloc::<f32>(3).unwrap();
    assert!(buf.copy_from(&other).is_err());
    assert_eq!(dev.transfer_stats().total_copies(), 0);
}

#[test]
fn empty_buffers_take_no_memory() {
    let dev = gpumem::testing::device();
    let buf = dev.from_slice::<f64>(&[]).unwrap();
    assert!(buf.is_empty());
    assert_eq!(dev.memory_allocated(), 0);
    assert_eq!(dev.memory_reserved(), 0);
    assert_eq!(buf.to_vec().unwrap(), Vec::<f64>::new());
}

#[test]
fn summary_and_stats_describe_the_same_state() {
    let dev = gpumem::testing::device();
    let _buf = dev.alloc::<u8>(1).unwrap();
    let stats = dev.memory_stats();
    assert_eq!(stats.get("allocated_bytes.all.current"), Some(512));
    assert_eq!(stats.get("requested_bytes.all.current"), Some(1));
    assert_eq!(
        stats.get("reserved_bytes.small_pool.current"),
        Some(2 * MIB)
    );
    let summary = dev.memory_summary();
    assert!(
        summary.contains("PyTorch CUDA memory summary, device ID 0 "),
        "{summary}"
    );
    assert!(
        summary.contains("| Allocated memory      |    512 B   |"),
        "{summary}"
    );
}

#[test]
fn pinned_buffers_come_from_a_caching_host_allocator() {
    let dev = gpumem::testing::device();
    let first = dev.alloc_pinned::<f32>(1000).unwrap();
    assert_eq!(first.block_bytes(), 4096, "rounded up to a power of two");
    let s = dev.host_memory_stats();
    assert_eq!(
        (
            s.active_requests.current,
            s.active_bytes.current,
            s.num_host_alloc
        ),
        (1, 4096, 1)
    );
    drop(first);
    let second = dev.alloc_pinned::<f32>(1024).unwrap();
    let s = dev.host_memory_stats();
    assert_eq!(s.num_host_alloc, 1, "the cached block is reused");
    assert_eq!(s.allocated_bytes.current, 4096, "the pool");
    drop(second);
    dev.empty_host_cache();
    let s = dev.host_memory_stats();
    assert_eq!((s.allocated_bytes.current, s.num_host_free), (0, 1));
}

#[test]
fn with_host_register_pinned_blocks_are_registered_memory_and_carry_copies_intact() {
    let dev = gpumem::testing::device();
    dev.set_allocator_settings("pinned_use_cuda_host_register:True,pinned_num_register_threads:4")
        .unwrap();
    let stream = dev.stream().unwrap();
    let n = 1 << 18; // 1 MiB of u32: four threads touch its pages
    let mut staging = dev.alloc_pinned::<u32>(n).unwrap();
    assert_eq!(
        staging.pinning(),
        gpumem::backend::Pinning::Register { threads: 4 }
    );
    assert!(
        staging.as_slice().iter().all(|&v| v == 0),
        "zeros, as alloc_pinned promises"
    );
    staging
        .as_mut_slice()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as u32 ^ 0x5a5a);
    let mut on_device = stream.alloc::<u32>(n).unwrap();
    staging
        .copy_to_device_async(&mut on_device, &stream)
        .unwrap();
    let mut back = dev.alloc_pinned::<u32>(n).unwrap();
    back.copy_from_device_async(&on_device, &stream).unwrap();
    stream.synchronize().unwrap();
    assert!(
        back.as_slice()
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u32 ^ 0x5a5a)
    );
    drop((staging, back));
    // A block made by registering is freed by unregistering, whatever the settings are by then.
    dev.set_allocator_settings("pinned_use_cuda_host_register:False")
        .unwrap();
    dev.empty_host_cache();
    assert_eq!(dev.host_memory_stats().num_host_free, 2);
    let plain = dev.alloc_pinned::<u32>(16).unwrap();
    assert_eq!(plain.pinning(), gpumem::backend::Pinning::HostAlloc);
}

#[test]
fn async_copies_through_pinned_memory_arrive_intact_and_are_counted() {
    let dev = gpumem::testing::device();
    let stream = dev.stream().unwrap();
    let mut staging = dev.alloc_pinned::<u32>(4096).unwrap();
    staging
        .as_mut_slice()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as u32);
    let mut on_device = stream.alloc::<u32>(4096).unwrap();
    staging
        .copy_to_device_async(&mut on_device, &stream)
        .unwrap();
    let mut back = dev.alloc_pinned::<u32>(4096).unwrap();
    back.copy_from_device_async(&on_device, &stream).unwrap();
    stream.synchronize().unwrap();
    assert!(
        back.as_slice()
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u32)
    );
    let t = dev.transfer_stats();
    assert_eq!(
        (
            t.host_to_device.copies,
            t.device_to_host.copies,
            t.pinned.copies
        ),
        (1, 1, 2)
    );
    assert_eq!(t.pinned.bytes, 2 * 4096 * 4);
}

#[test]
fn record_stream_delays_reuse_only_while_the_stream_is_busy() {
    let dev = gpumem::testing::device();
    let side = dev.stream().unwrap();
    let buf = dev.alloc::<u8>(100).unwrap();
    buf.record_stream(&side);
    side.synchronize().unwrap();
    drop(buf);
    let again = dev.alloc::<u8>(100).unwrap();
    assert_eq!(
        dev.memory_reserved(),
        2 * MIB,
        "the finished stream let the block be reused"
    );
    drop(again);
}

#[test]
fn events_time_work_on_a_stream() {
    let dev = gpumem::testing::device();
    let stream = dev.stream().unwrap();
    let start = stream.record_event().unwrap();
    let _buf = stream.alloc::<f32>(1 << 16).unwrap();
    let end = stream.record_event().unwrap();
    end.synchronize().unwrap();
    assert!(end.query().unwrap());
    let ms = start.elapsed_ms(&end).unwrap();
    assert!(ms >= 0.0 && ms.is_finite());
}

#[test]
fn out_of_memory_on_a_device_is_recoverable() {
    let dev = gpumem::testing::device();
    let (_, total) = dev.mem_get_info().unwrap();
    dev.set_per_process_memory_fraction(64.0 * MIB as f64 / total as f64)
        .unwrap();
    let keep = dev.alloc::<u8>(40 << 20).unwrap();
    let err = dev.alloc::<u8>(40 << 20).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert!(
        err.to_string().contains("Tried to allocate 40.00 MiB"),
        "{err}"
    );
    assert_eq!(dev.memory_stats().get("num_ooms"), Some(1));
    drop(keep);
    let retry = dev.alloc::<u8>(40 << 20).unwrap();
    assert_eq!(retry.block_bytes(), 40 << 20);
}

/// Runs one `#[ignore]`d probe of this file in a child process with extra environment variables.
fn run_probe(name: &str, env: &[(&str, &str)]) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", name, "--ignored", "--test-threads=1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("GPUMEM_DEVICE").env("GPUMEM_DEVICE", "cpu");
    cmd.output().unwrap()
}

#[test]
fn malformed_settings_are_reported_by_the_first_allocation() {
    let out = run_probe(
        "probe_bad_settings",
        &[("GPUMEM_ALLOC_CONF", "max_split_size_mb:lots")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = run_probe("probe_bad_capacity", &[("GPUMEM_CPU_CAPACITY", "a lot")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = run_probe("probe_capacity", &[("GPUMEM_CPU_CAPACITY", "64MiB")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
#[ignore = "run by malformed_settings_are_reported_by_the_first_allocation"]
fn probe_bad_settings() {
    let err = Device::cpu().alloc::<u8>(1).unwrap_err();
    assert!(
        err.to_string()
            .contains("GPUMEM_ALLOC_CONF option max_split_size_mb: \"lots\" is not a whole number"),
        "{err}"
    );
}

#[test]
#[ignore = "run by malformed_settings_are_reported_by_the_first_allocation"]
fn probe_bad_capacity() {
    let err = Device::cpu().alloc::<u8>(1).unwrap_err();
    assert!(
        err.to_string().contains("invalid GPUMEM_CPU_CAPACITY"),
        "{err}"
    );
}

#[test]
#[ignore = "run by malformed_settings_are_reported_by_the_first_allocation"]
fn probe_capacity() {
    let dev = Device::cpu();
    assert_eq!(dev.mem_get_info().unwrap(), (64 * MIB, 64 * MIB));
    let err = dev.alloc::<u8>(100 << 20).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { total, .. } if total == 64 * MIB),
        "{err}"
    );
}

#[test]
fn a_stream_can_wait_for_another_streams_work() {
    let dev = gpumem::testing::device();
    let copy = dev.stream().unwrap();
    let compute = dev.stream().unwrap();
    let mut staging = dev.alloc_pinned::<u32>(256).unwrap();
    staging.as_mut_slice().fill(7);
    let mut on_device = copy.alloc::<u32>(256).unwrap();
    staging.copy_to_device_async(&mut on_device, &copy).unwrap();
    compute.wait_stream(&copy).unwrap();
    let done = copy.record_event().unwrap();
    compute.wait_event(&done).unwrap();
    compute.synchronize().unwrap();
    copy.synchronize().unwrap();
    assert_eq!(on_device.to_vec().unwrap(), vec![7; 256]);
}

#[test]
fn a_new_stream_never_inherits_a_destroyed_streams_id_or_cached_blocks() {
    let dev = gpumem::testing::device();
    let first = dev.stream().unwrap();
    let first_id = first.id();
    drop(first.alloc::<u8>(100).unwrap());
    assert_eq!(
        dev.memory_reserved(),
        2 * MIB,
        "cached for the first stream"
    );
    // The driver (and the cpu device, likewise) may give the next stream the destroyed one's
    // handle; its id, by which the allocator caches blocks, is new.
    drop(first);
    let second = dev.stream().unwrap();
    assert_ne!(second.id(), first_id);
    assert_ne!(second.id(), dev.default_stream().id());
    let _buf = second.alloc::<u8>(100).unwrap();
    assert_eq!(
        dev.memory_reserved(),
        4 * MIB,
        "the second stream got a segment of its own, not the first stream's cached block"
    );
}

#[test]
fn an_untimed_event_marks_work_but_cannot_time_it() {
    let dev = gpumem::testing::device();
    let stream = dev.stream().unwrap();
    let start = stream.record_untimed_event().unwrap();
    let end = stream.record_event().unwrap();
    end.synchronize().unwrap();
    assert!(start.query().unwrap());
    let err = start.elapsed_ms(&end).unwrap_err();
    assert!(matches!(err, Error::Driver { .. }), "{err}");
    let timed = stream.record_event().unwrap();
    timed.synchronize().unwrap();
    assert!(end.elapsed_ms(&timed).unwrap() >= 0.0);
}
