//! What the allocator knows of streams: their ids, by which blocks are cached, and the pending
//! work a freed block waits for before it can be reused.

/// A stream as the allocator sees it: blocks are cached per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
pub struct StreamId(pub u64);

/// Work that may still use a freed block (an event recorded on a stream that used it).
pub trait PendingUse: Send {
    /// Whether the work has finished.
    fn is_done(&self) -> bool;
    /// Waits for the work to finish.
    fn wait(&self);
}
