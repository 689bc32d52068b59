//! Events, as in torch: markers in a stream's work, which a cached block waits for.

use crate::error::Result;
use crate::policy::allocator::PendingUse;
use crate::raw::backend::{DeviceBackend, RawEvent};
use std::sync::Arc;

/// A marker in a stream's work: wait for it, ask whether it is reached, time between two.
pub struct Event {
    pub(super) backend: Arc<dyn DeviceBackend>,
    pub(super) raw: Option<RawEvent>,
}

impl Event {
    pub(super) fn raw(&self) -> &RawEvent {
        self.raw
            .as_ref()
            .expect("an event holds its raw event until dropped")
    }

    /// Whether all work before the event has finished.
    pub fn query(&self) -> Result<bool> {
        self.backend.event_query(self.raw())
    }

    /// Waits for the work before the event.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.event_synchronize(self.raw())
    }

    /// Milliseconds from `self` to `end` (both must have completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.backend.event_elapsed_ms(self.raw(), end.raw())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.backend.destroy_event(raw);
        }
    }
}

impl PendingUse for Event {
    fn is_done(&self) -> bool {
        // A failed query means the context is gone; nothing can still be using the memory.
        self.query().unwrap_or(true)
    }

    fn wait(&self) {
        let _ = self.synchronize();
    }
}
