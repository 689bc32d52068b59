//! Pinned (page-locked) host memory through a caching host allocator, as torch's
//! `CachingHostAllocator`: sizes round up to a power of two and freed blocks are kept for reuse.

use crate::error::{Error, Result};
use crate::memory::activity::WorkKind;
use crate::memory::buffer::{Buffer, Element};
use crate::memory::device::Device;
pub use crate::memory::host_cache::HostMemoryStats;
use crate::memory::stream::{Event, Stream};
use crate::memory::transfer::Direction;
use crate::policy::allocator::PendingUse;
pub use crate::policy::history::HostSegmentInfo;
use crate::raw::backend::HostAllocation;
use std::marker::PhantomData;

/// `len` elements of `T` in pinned host memory (`torch.empty(.., pin_memory=True)`).
///
/// Reading or writing it waits for any asynchronous copy still using it, so a copy can never see
/// its data change underneath.
pub struct PinnedBuffer<T: Element> {
    device: Device,
    alloc: HostAllocation,
    /// The block's size: `size_of::<T>() × len` rounded up to a power of two.
    block_size: usize,
    /// The block's number in the device's pinned activity.
    block: u64,
    len: usize,
    pending: Vec<Event>,
    _element: PhantomData<T>,
}

impl Device {
    /// `len` zeros of `T` in pinned host memory, from this device's caching host allocator.
    pub fn alloc_pinned<T: Element>(&self, len: usize) -> Result<PinnedBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::HostAlloc {
                size: usize::MAX,
                reason: format!("{len} elements overflow the address space"),
            })?;
        let block_size = bytes.max(1).next_power_of_two();
        let (alloc, block) = self.inner.host.malloc(
            self.inner.backend.as_ref(),
            &self.inner.activity,
            block_size,
            bytes,
            self.inner.allocator.config_pinning(),
        )?;
        // SAFETY: the block holds block_size >= bytes bytes and is ours.
        unsafe { std::ptr::write_bytes(alloc.ptr, 0, bytes) };
        Ok(PinnedBuffer {
            device: self.clone(),
            alloc,
            block_size,
            block,
            len,
            pending: Vec::new(),
            _element: PhantomData,
        })
    }
}

impl<T: Element> PinnedBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the operating system really locked the pages (it may refuse on cpu, e.g. a low
    /// `ulimit -l`; the buffer then works as ordinary pageable memory).
    pub fn is_page_locked(&self) -> bool {
        self.alloc.page_locked
    }

    /// Bytes of the cached host block behind it (a power of two).
    pub fn block_bytes(&self) -> usize {
        self.block_size
    }

    /// How its host block was pinned (`pinned_use_cuda_host_register` when it was made).
    pub fn pinning(&self) -> crate::raw::backend::Pinning {
        self.alloc.pinning
    }

    /// Remembers a copy in flight, forgetting those already finished (a loop of copies that never
    /// reads the buffer must not pile up events).
    fn track(&mut self, copy: Event) {
        self.pending.retain(|e| !e.is_done());
        self.pending.push(copy);
    }

    fn wait_for_copies(&mut self) {
        for event in self.pending.drain(..) {
            event.wait();
        }
    }

    /// The data, after waiting for copies still using it.
    pub fn as_slice(&mut self) -> &[T] {
        self.wait_for_copies();
        // SAFETY: the block holds len elements of T, initialised (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.alloc.ptr.cast(), self.len) }
    }

    /// The data for writing, after waiting for copies still using it.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        self.wait_for_copies();
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.cast(), self.len) }
    }

    fn check(&self, op: &'static str, buf: &Buffer<T>, stream: &Stream) -> Result<()> {
        if buf.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: buf.len(),
                actual: self.len,
            });
        }
        for dev in [buf.device(), stream.device()] {
            if *dev != self.device {
                return Err(Error::DeviceMismatch {
                    op,
                    expected: self.device.to_string(),
                    actual: dev.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Queues a copy of this pinned data into `dst` on `stream` and returns at once (cuda); the
    /// device buffer is marked as used by `stream`. On cpu the copy is done on return unless
    /// [`Device::set_late_streams`] made it run late.
    pub fn copy_to_device_async(&mut self, dst: &mut Buffer<T>, stream: &Stream) -> Result<()> {
        self.check("copy_to_device_async", dst, stream)?;
        let n = dst.size_bytes();
        if n > 0 {
            let span = self.device.inner.activity.start();
            // SAFETY: both ranges hold n bytes; the pinned block stays alive and unchanged until
            // the copy's event has passed (every access waits for `pending`).
            unsafe {
                self.device.inner.backend.copy_htod(
                    dst.ptr(),
                    self.alloc.ptr,
                    n,
                    stream.raw(),
                    true,
                )?
            };
            self.device.inner.activity.finish(
                span,
                WorkKind::HostToDevice,
                "copy",
                stream.id().0,
                n,
                Some(self.block),
            );
            dst.record_stream(stream);
            self.track(stream.record_untimed_event()?);
            self.device.count(Direction::HostToDevice, n, true);
        }
        Ok(())
    }

    /// Queues a copy of `src` into this pinned memory on `stream` and returns at once (cuda).
    pub fn copy_from_device_async(&mut self, src: &Buffer<T>, stream: &Stream) -> Result<()> {
        self.check("copy_from_device_async", src, stream)?;
        let n = src.size_bytes();
        if n > 0 {
            let span = self.device.inner.activity.start();
            // SAFETY: as in copy_to_device_async.
            unsafe {
                self.device.inner.backend.copy_dtoh(
                    self.alloc.ptr,
                    src.ptr(),
                    n,
                    stream.raw(),
                    true,
                )?
            };
            self.device.inner.activity.finish(
                span,
                WorkKind::DeviceToHost,
                "copy",
                stream.id().0,
                n,
                Some(self.block),
            );
            src.record_stream(stream);
            self.track(stream.record_untimed_event()?);
            self.device.count(Direction::DeviceToHost, n, true);
        }
        Ok(())
    }
}

impl<T: Element> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let inner = &self.device.inner;
        inner.host.free(
            &inner.activity,
            self.alloc,
            self.block,
            self.block_size,
            pending,
        );
    }
}
