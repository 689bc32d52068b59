//! Streams and events, as in torch: queues of device work and markers in them.

use crate::error::Result;
use crate::memory::device::Device;
pub use crate::memory::event::Event;
use crate::policy::allocator::StreamId;
use crate::raw::backend::RawStream;
use std::sync::Arc;

struct StreamInner {
    device: Device,
    raw: RawStream,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.raw != RawStream(0) {
            let _ = self.device.synchronize_raw(self.raw);
            self.device.inner.backend.destroy_stream(self.raw);
        }
    }
}

/// A queue of work on a device. On cpu all work is synchronous and a stream is only a name.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({}, {})", self.inner.device, self.inner.raw.0)
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.device == other.inner.device && self.inner.raw == other.inner.raw
    }
}

impl Device {
    /// A new stream on this device (`torch.cuda.Stream()`).
    pub fn stream(&self) -> Result<Stream> {
        let raw = self.inner.backend.create_stream()?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                device: self.clone(),
                raw,
            }),
        })
    }

    /// The default stream, where `alloc`, `from_slice` and `to_vec` run.
    pub fn default_stream(&self) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                device: self.clone(),
                raw: RawStream(0),
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

    /// The allocator's name for this stream.
    pub fn id(&self) -> StreamId {
        StreamId(self.inner.raw.0)
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.inner.raw
    }

    /// Waits until all work queued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.device.synchronize_raw(self.inner.raw)
    }

    /// Makes work queued on this stream from now on wait for `event` (`torch.cuda.Stream.wait_event`);
    /// the host does not wait. On cpu all work is already in order.
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
        self.wait_event(&other.record_event()?)
    }

    /// Marks the current end of this stream's work.
    pub fn record_event(&self) -> Result<Event> {
        let raw = self
            .inner
            .device
            .inner
            .backend
            .record_event(self.inner.raw)?;
        Ok(Event {
            backend: self.inner.device.inner.backend.clone(),
            raw: Some(raw),
        })
    }
}
