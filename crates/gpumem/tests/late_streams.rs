//! The cpu device's streams run their work late, as a GPU's do, once asked
//! (`Device::set_late_streams`): an asynchronous copy then runs only when a synchronize, an event or
//! another stream's wait needs it, so a missing wait shows on cpu as stale memory. Each test skips on
//! cuda, where whether a copy has finished by the next line is a race.

use gpumem::Device;
use gpumem::testing::TestDevice;

const N: usize = 3000;

fn data() -> Vec<f32> {
    (0..N).map(|i| i as f32 + 0.5).collect()
}

/// The test device with late streams, or `None` (with a notice) on cuda.
fn late_cpu(test: &str) -> Option<TestDevice> {
    let dev = gpumem::testing::device();
    if dev.is_cuda() {
        eprintln!(
            "{test}: skipped on cuda (a GPU's copies race the host; this is the cpu device's)"
        );
        return None;
    }
    dev.set_late_streams(true);
    assert!(dev.late_streams());
    Some(dev)
}

/// A device buffer of zeros and an upload of [`data`] into it queued on `side`.
fn upload_on(
    dev: &Device,
    side: &gpumem::Stream,
) -> (gpumem::Buffer<f32>, gpumem::PinnedBuffer<f32>) {
    let mut pinned = dev.alloc_pinned::<f32>(N).expect("pinned buffer");
    pinned.as_mut_slice().copy_from_slice(&data());
    let mut dst = dev.alloc::<f32>(N).expect("device buffer");
    pinned
        .copy_to_device_async(&mut dst, side)
        .expect("queued upload");
    (dst, pinned)
}

#[test]
fn a_side_stream_upload_is_unseen_on_the_default_stream_until_it_waits() {
    let Some(dev) = late_cpu("a_side_stream_upload_is_unseen_on_the_default_stream_until_it_waits")
    else {
        return;
    };
    let side = dev.stream().expect("stream");
    let (dst, _pinned) = upload_on(&dev, &side);
    assert_eq!(
        dst.to_vec().expect("read"),
        vec![0.0; N],
        "read on the default stream with no wait: the upload has not run yet"
    );
    dev.default_stream().wait_stream(&side).expect("wait");
    assert_eq!(dst.to_vec().expect("read"), data());
}

#[test]
fn a_kernel_reads_a_side_stream_upload_only_after_a_wait() {
    let Some(dev) = late_cpu("a_kernel_reads_a_side_stream_upload_only_after_a_wait") else {
        return;
    };
    let side = dev.stream().expect("stream");
    let (dst, _pinned) = upload_on(&dev, &side);
    assert_eq!(gpumem::ops::sum(&dst).expect("sum"), 0.0);
    dev.default_stream().wait_stream(&side).expect("wait");
    let want: f64 = data().iter().map(|&x| x as f64).sum();
    assert_eq!(gpumem::ops::sum(&dst).expect("sum"), want as f32);
}

#[test]
fn at_once_an_upload_is_done_when_queued() {
    let dev = gpumem::testing::device();
    if dev.is_cuda() {
        return;
    }
    dev.set_late_streams(false);
    assert!(!dev.late_streams());
    let side = dev.stream().expect("stream");
    let (dst, _pinned) = upload_on(&dev, &side);
    assert_eq!(dst.to_vec().expect("read"), data());
}

#[test]
fn an_event_is_reached_when_the_work_before_it_has_run() {
    let Some(dev) = late_cpu("an_event_is_reached_when_the_work_before_it_has_run") else {
        return;
    };
    let side = dev.stream().expect("stream");
    let (dst, _pinned) = upload_on(&dev, &side);
    let event = side.record_event().expect("event");
    assert!(!event.query().expect("query"));
    event.synchronize().expect("event synchronize");
    assert!(event.query().expect("query"));
    assert_eq!(dst.to_vec().expect("read"), data());
}

#[test]
fn stream_and_device_synchronize_run_the_queued_work() {
    let Some(dev) = late_cpu("stream_and_device_synchronize_run_the_queued_work") else {
        return;
    };
    let (a, b) = (dev.stream().expect("stream"), dev.stream().expect("stream"));
    let (dst_a, _pa) = upload_on(&dev, &a);
    let (dst_b, _pb) = upload_on(&dev, &b);
    a.synchronize().expect("stream synchronize");
    assert_eq!(dst_a.to_vec().expect("read"), data());
    assert_eq!(
        dst_b.to_vec().expect("read"),
        vec![0.0; N],
        "b not waited for"
    );
    dev.synchronize().expect("device synchronize");
    assert_eq!(dst_b.to_vec().expect("read"), data());
}

#[test]
fn a_download_into_pinned_memory_is_waited_for_before_the_host_reads_it() {
    let Some(dev) =
        late_cpu("a_download_into_pinned_memory_is_waited_for_before_the_host_reads_it")
    else {
        return;
    };
    let side = dev.stream().expect("stream");
    let src = dev.from_slice(&data()).expect("upload");
    side.wait_stream(&dev.default_stream()).expect("wait");
    let mut pinned = dev.alloc_pinned::<f32>(N).expect("pinned buffer");
    pinned
        .copy_from_device_async(&src, &side)
        .expect("queued download");
    assert_eq!(pinned.as_slice(), data().as_slice());
}

#[test]
fn a_block_a_side_stream_still_writes_is_not_reused_before_that_stream_has_run() {
    let Some(dev) =
        late_cpu("a_block_a_side_stream_still_writes_is_not_reused_before_that_stream_has_run")
    else {
        return;
    };
    let side = dev.stream().expect("stream");
    let (dst, _pinned) = upload_on(&dev, &side);
    let old = dst.ptr();
    // The upload marked `dst` as used by `side` (record_stream): its block waits for that stream.
    drop(dst);
    let fresh = dev.alloc::<f32>(N).expect("device buffer");
    assert_ne!(
        fresh.ptr(),
        old,
        "the block is reused while the upload into it is queued"
    );
    side.synchronize().expect("stream synchronize");
    assert_eq!(fresh.to_vec().expect("read"), vec![0.0; N]);
}

#[test]
fn empty_cache_runs_queued_copies_before_it_releases_their_memory() {
    let Some(dev) = late_cpu("empty_cache_runs_queued_copies_before_it_releases_their_memory")
    else {
        return;
    };
    let side = dev.stream().expect("stream");
    let (dst, _pinned) = upload_on(&dev, &side);
    drop(dst);
    dev.empty_cache();
    assert_eq!(dev.memory_reserved(), 0);
    // The queued upload ran before its segment was released (else this would fault).
    dev.synchronize().expect("device synchronize");
}

#[test]
fn unmapping_an_expandable_segment_waits_for_its_stream_and_only_that_stream() {
    let Some(dev) =
        late_cpu("unmapping_an_expandable_segment_waits_for_its_stream_and_only_that_stream")
    else {
        return;
    };
    dev.set_allocator_settings("expandable_segments:True")
        .expect("settings");
    let (side, other) = (dev.stream().expect("stream"), dev.stream().expect("stream"));
    // A block of side's own segment, freed at once: its page is unmapped by empty_cache.
    let freed = side.alloc::<f32>(N).expect("side-stream buffer");
    // Work queued on side and on another stream. Side's writes a buffer that stays in use, not
    // the page unmapped, so that a missing wait fails the assertion below instead of faulting.
    let (_kept_side, _pinned_side) = upload_on(&dev, &side);
    let side_done = side.record_untimed_event().expect("event");
    let (_kept_other, _pinned_other) = upload_on(&dev, &other);
    let other_done = other.record_untimed_event().expect("event");
    drop(freed);
    let reserved = dev.memory_reserved();
    dev.empty_cache();
    assert!(
        dev.memory_reserved() < reserved,
        "empty_cache unmapped side's page ({reserved} B reserved before, {} B after)",
        dev.memory_reserved()
    );
    assert!(
        side_done.query().expect("query"),
        "the page was unmapped before the work queued on its segment's stream had run"
    );
    assert!(
        !other_done.query().expect("query"),
        "unmapping waited for the whole device, not the segment's stream alone"
    );
    dev.synchronize().expect("device synchronize");
}
