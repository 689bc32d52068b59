//! `Buffer<T>`: device memory from the caching allocator. Dropping it is Rust's `del`.

use crate::error::{Error, Result};
use crate::memory::activity::WorkKind;
use crate::memory::device::Device;
use crate::memory::stream::Stream;
use crate::memory::transfer::Direction;
use crate::policy::allocator::{Allocation, PendingUse, StreamId};
use crate::raw::backend::{DevicePtr, RawStream};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Element types a buffer can hold: plain data with no padding.
pub trait Element: bytemuck::Pod + Default + std::fmt::Debug + Send + Sync + 'static {}

impl<T: bytemuck::Pod + Default + std::fmt::Debug + Send + Sync + 'static> Element for T {}

/// The memory behind one or more `Buffer`s (several after `to` on the same device).
pub(crate) struct Storage {
    pub(crate) device: Device,
    pub(crate) alloc: Allocation,
    stream: StreamId,
    /// Other streams that used this memory (`record_stream`).
    uses: Mutex<Vec<Stream>>,
    /// torch's version counter: bumped by every in-place write through a tensor, shared by every
    /// handle on this memory (as torch shares it between a tensor, its views and `detach()`).
    version: AtomicU64,
}

impl Drop for Storage {
    fn drop(&mut self) {
        let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|p| p.into_inner()));
        let pending: Vec<Box<dyn PendingUse>> = uses
            .iter()
            .filter_map(|s| s.record_untimed_event().ok())
            .map(|e| Box::new(e) as Box<dyn PendingUse>)
            .collect();
        self.device.inner.allocator.free(self.alloc, pending);
    }
}

/// `len` elements of `T` in a device's memory.
pub struct Buffer<T: Element> {
    storage: Arc<Storage>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer<{}>(len {}, {})",
            std::any::type_name::<T>(),
            self.len,
            self.storage.device
        )
    }
}

/// `len` elements' bytes; a count whose bytes overflow saturates, so the allocator refuses it as
/// torch refuses any request of 1 EiB or more (an out-of-memory error), never a panic.
fn bytes_for<T>(len: usize) -> usize {
    len.saturating_mul(size_of::<T>())
}

impl Device {
    #[track_caller]
    fn alloc_storage(&self, bytes: usize, stream: StreamId) -> Result<Arc<Storage>> {
        self.check_setup()?;
        let alloc = self.inner.allocator.malloc(bytes, stream)?;
        Ok(Arc::new(Storage {
            device: self.clone(),
            alloc,
            stream,
            uses: Mutex::new(Vec::new()),
            version: AtomicU64::new(0),
        }))
    }

    #[track_caller]
    fn buffer<T: Element>(&self, len: usize, stream: StreamId) -> Result<Buffer<T>> {
        let storage = self.alloc_storage(bytes_for::<T>(len), stream)?;
        Ok(Buffer {
            storage,
            len,
            _element: PhantomData,
        })
    }

    /// `len` zeros of `T` on this device (`torch.zeros`): no host data, no copy.
    #[track_caller]
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        let buf = self.buffer::<T>(len, StreamId(0))?;
        if len > 0 {
            // SAFETY: the block is ours and holds at least size_bytes bytes.
            unsafe { self.fill_zero(buf.ptr(), buf.size_bytes(), RawStream(0), 0)? };
        }
        Ok(buf)
    }

    /// Sets `bytes` bytes at `ptr` to zero on `stream` (numbered `stream_id` in the activity),
    /// recorded as one `zero` kernel: the fill of `alloc`, `Stream::alloc` and `ops::zero`.
    ///
    /// # Safety
    /// The memory at `ptr` is a block of this device holding at least `bytes` bytes, and the
    /// stream orders the fill after earlier work on it.
    pub(crate) unsafe fn fill_zero(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        stream: RawStream,
        stream_id: u64,
    ) -> Result<()> {
        let span = self.inner.activity.start();
        // SAFETY: the caller's contract.
        unsafe { self.inner.backend.memset_zero(ptr, bytes, stream)? };
        let log = &self.inner.activity;
        log.finish(span, WorkKind::Kernel, "zero", stream_id, bytes, None);
        Ok(())
    }

    /// A buffer holding a copy of `data` (one host-to-device copy, `torch.tensor(data, device=..)`).
    #[track_caller]
    pub fn from_slice<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        let mut buf = self.buffer::<T>(data.len(), StreamId(0))?;
        buf.copy_from_slice(data)?;
        Ok(buf)
    }

    pub(crate) fn count(&self, direction: Direction, bytes: usize, pinned: bool) {
        if bytes > 0 {
            self.inner.transfers.count(direction, bytes, pinned);
        }
    }
}

impl Stream {
    /// `len` zeros of `T`, cached for this stream (blocks are reused per stream, as in torch).
    #[track_caller]
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        let dev = self.device();
        let buf = dev.buffer::<T>(len, self.id())?;
        if len > 0 {
            let (bytes, id) = (buf.size_bytes(), self.id().0);
            // SAFETY: the block is ours and holds at least size_bytes bytes.
            unsafe { dev.fill_zero(buf.ptr(), bytes, self.raw(), id)? };
        }
        Ok(buf)
    }
}

impl<T: Element> Buffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of data (`len × size_of::<T>()`); the block behind it may be larger.
    pub fn size_bytes(&self) -> usize {
        bytes_for::<T>(self.len)
    }

    /// Bytes of the allocator block behind the buffer (rounded up: what `memory_allocated` counts).
    pub fn block_bytes(&self) -> usize {
        self.storage.alloc.size
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> &Device {
        &self.storage.device
    }

    /// The buffer's device address (a host address on cpu).
    pub fn ptr(&self) -> DevicePtr {
        self.storage.alloc.ptr
    }

    /// The stream the buffer was allocated on.
    pub fn stream_id(&self) -> StreamId {
        self.storage.stream
    }

    /// How many in-place writes the memory has had through autograd tensors (`tensor._version`).
    pub fn version(&self) -> u64 {
        self.storage.version.load(Ordering::Relaxed)
    }

    /// Counts one in-place write (what every in-place op does in torch).
    pub(crate) fn bump_version(&self) {
        self.storage.version.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether `self` and `other` share the same memory (as after `to` on the same device).
    pub fn shares_memory_with(&self, other: &Buffer<T>) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// Whether this is the only handle to its memory (no other buffer shares it), so that the
    /// autograd may take it over or write into it.
    pub(crate) fn is_only_handle(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
    }

    fn check_len(&self, actual: usize) -> Result<()> {
        if actual == self.len {
            Ok(())
        } else {
            Err(Error::LengthMismatch {
                expected: self.len,
                actual,
            })
        }
    }

    /// Copies the buffer to a new host `Vec` (one device-to-host copy, `tensor.cpu()`).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = vec![T::default(); self.len];
        self.copy_to_slice(&mut out)?;
        Ok(out)
    }

    /// Copies the buffer into `out`, which must have the same length (one device-to-host copy).
    pub fn copy_to_slice(&self, out: &mut [T]) -> Result<()> {
        self.check_len(out.len())?;
        let n = self.size_bytes();
        if n > 0 {
            let dev = self.device();
            let span = dev.inner.activity.start();
            // SAFETY: both ranges hold n bytes; the copy is synchronous.
            unsafe {
                dev.inner.backend.copy_dtoh(
                    out.as_mut_ptr().cast(),
                    self.ptr(),
                    n,
                    RawStream(0),
                    false,
                )?
            };
            let log = &dev.inner.activity;
            log.finish(span, WorkKind::DeviceToHost, "copy", 0, n, None);
            dev.count(Direction::DeviceToHost, n, false);
        }
        Ok(())
    }

    /// Overwrites the buffer with `data`, which must have the same length (one host-to-device copy).
    pub fn copy_from_slice(&mut self, data: &[T]) -> Result<()> {
        self.check_len(data.len())?;
        let n = self.size_bytes();
        if n > 0 {
            let dev = self.device();
            let span = dev.inner.activity.start();
            // SAFETY: both ranges hold n bytes; the copy is synchronous.
            unsafe {
                dev.inner.backend.copy_htod(
                    self.ptr(),
                    data.as_ptr().cast(),
                    n,
                    RawStream(0),
                    false,
                )?
            };
            let log = &dev.inner.activity;
            log.finish(span, WorkKind::HostToDevice, "copy", 0, n, None);
            dev.count(Direction::HostToDevice, n, false);
        }
        Ok(())
    }

    /// Overwrites the buffer with another buffer of the same device and length (one device copy).
    pub fn copy_from(&mut self, src: &Buffer<T>) -> Result<()> {
        self.check_len(src.len)?;
        if src.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op: "copy_from",
                expected: self.device().to_string(),
                actual: src.device().to_string(),
            });
        }
        let n = self.size_bytes();
        if n > 0 && !self.shares_memory_with(src) {
            let dev = self.device();
            let span = dev.inner.activity.start();
            // SAFETY: both are live device buffers of n bytes.
            unsafe {
                dev.inner
                    .backend
                    .copy_dtod(self.ptr(), src.ptr(), n, RawStream(0), false)?
            };
            let log = &dev.inner.activity;
            log.finish(span, WorkKind::DeviceToDevice, "copy", 0, n, None);
            dev.count(Direction::DeviceToDevice, n, false);
        }
        Ok(())
    }

    /// A new buffer with the same contents on the same device (`tensor.clone()`: one device copy).
    pub fn try_clone(&self) -> Result<Buffer<T>> {
        let mut copy = self.device().buffer::<T>(self.len, StreamId(0))?;
        copy.copy_from(self)?;
        Ok(copy)
    }

    /// The buffer on `device` (`tensor.to(device)`): on the same device this is the same memory and
    /// no copy happens; on another device, one copy (counted as device-to-device on both).
    pub fn to(&self, device: &Device) -> Result<Buffer<T>> {
        if device == self.device() {
            return Ok(Buffer {
                storage: self.storage.clone(),
                len: self.len,
                _element: PhantomData,
            });
        }
        let out = device.buffer::<T>(self.len, StreamId(0))?;
        let n = self.size_bytes();
        if n > 0 {
            let (src, dst) = (self.device(), device);
            match (src.is_cuda(), dst.is_cuda()) {
                // SAFETY (all arms): both buffers are live and hold n bytes; cpu memory is host memory.
                (false, true) => unsafe {
                    dst.inner.backend.copy_htod(
                        out.ptr(),
                        self.ptr() as *const u8,
                        n,
                        RawStream(0),
                        false,
                    )?
                },
                (true, false) => unsafe {
                    src.inner.backend.copy_dtoh(
                        out.ptr() as *mut u8,
                        self.ptr(),
                        n,
                        RawStream(0),
                        false,
                    )?
                },
                _ => {
                    let host = self.to_vec()?;
                    // SAFETY: as above.
                    unsafe {
                        dst.inner.backend.copy_htod(
                            out.ptr(),
                            host.as_ptr().cast(),
                            n,
                            RawStream(0),
                            false,
                        )?
                    };
                }
            }
            src.count(Direction::DeviceToDevice, n, false);
            dst.count(Direction::DeviceToDevice, n, false);
        }
        Ok(out)
    }

    /// Marks the memory as used by `stream` too (`tensor.record_stream`): when the buffer is
    /// dropped, its block is not reused until that stream's work queued so far is done. Without
    /// it, a buffer allocated on a side stream, read by work queued on another stream and
    /// dropped goes back to the side stream's cache at once: its next allocation there (and the
    /// zero-fill `Stream::alloc` queues on it) may overwrite the memory before that work has read
    /// it, as in torch. The copy functions of pinned buffers call it for you.
    pub fn record_stream(&self, stream: &Stream) {
        if stream.device() != self.device() || stream.id() == self.storage.stream {
            return;
        }
        let mut uses = self.storage.uses.lock().unwrap_or_else(|p| p.into_inner());
        if !uses.contains(stream) {
            uses.push(stream.clone());
        }
    }
}
