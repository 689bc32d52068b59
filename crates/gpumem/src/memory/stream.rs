//! Streams and events, as in torch: queues of device work and markers in them.

use crate::error::Result;
use crate::memory::device::Device;
pub use crate::memory::event::Event;
use crate::policy::allocator::StreamId;
use crate::raw::backend::RawStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;

struct StreamInner {
    device: Device,
    raw: RawStream,
    /// The allocator's name for the stream: never reused on its device, unlike the driver's
    /// handle, which a new stream may get again once this one is destroyed.
    id: StreamId,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.raw != RawStream(0) {
            let _ = self.device.synchronize_raw(self.raw);
            self.device.inner.allocator.forget_stream(self.id);
            self.device.inner.backend.destroy_stream(self.raw);
        }
    }
}

/// A queue of work on a device. On cpu its work runs when queued, or late as on a GPU after
/// [`Device::set_late_streams`].
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({}, {})", self.inner.device, self.inner.id.0)
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.device == other.inner.device && self.inner.id == other.inner.id
    }
}

impl Device {
    /// A new stream on this device (`torch.cuda.Stream()`).
    pub fn stream(&self) -> Result<Stream> {
        let raw = self.inner.backend.create_stream()?;
        let id = StreamId(self.inner.next_stream_id.fetch_add(1, Ordering::Relaxed));
        self.inner.allocator.register_stream(id, raw);
        Ok(Stream {
            inner: Arc::new(StreamInner {
                device: self.clone(),
                raw,
                id,
            }),
        })
    }

    /// The default stream, where `alloc`, `from_slice` and `to_vec` run.
    pub fn default_stream(&self) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                device: self.clone(),
                raw: RawStream(0),
                id: StreamId(0),
            }),
        }
    }

    fn synchronize_raw(&self, raw: RawStream) -> Result<()> {
        self.inner.backend.stream_synchronize(raw)
    }
}

impl Stream {
    /// The device the stream belongs to.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The allocator's name for this stream: 0 for the default stream, then 1, 2, ... in order of
    /// creation on its device, never reused (blocks are cached per stream by it).
    pub fn id(&self) -> StreamId {
        self.inner.id
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.inner.raw
    }

    /// Waits until all work queued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.device.synchronize_raw(self.inner.raw)
    }

    /// Makes work queued on this stream from now on wait for `event` (`torch.cuda.Stream.wait_event`);
    /// the host does not wait.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.inner
            .device
            .inner
            .backend
            .stream_wait_event(self.inner.raw, event.raw())
    }

    /// Makes work queued on this stream from now on wait for all work queued on `other` so far
    /// (`torch.cuda.Stream.wait_stream`).
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        self.wait_event(&other.record_untimed_event()?)
    }

    /// Marks the current end of this stream's work with an event that can also time it
    /// ([`Event::elapsed_ms`]; torch's `torch.cuda.Event(enable_timing=True)` recorded here).
    pub fn record_event(&self) -> Result<Event> {
        self.record(true)
    }

    /// As [`record_event`](Self::record_event), with an event that cannot time (torch's default,
    /// `enable_timing=False`): what the runtime itself waits for, taken from the device's pool on
    /// cuda.
    pub fn record_untimed_event(&self) -> Result<Event> {
        self.record(false)
    }

    fn record(&self, timing: bool) -> Result<Event> {
        let backend = &self.inner.device.inner.backend;
        let raw = backend.record_event(self.inner.raw, timing)?;
        Ok(Event {
            backend: backend.clone(),
            raw: Some(raw),
        })
    }
}
