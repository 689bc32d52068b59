//! The memory a learner holds: the `Device` handle, device buffers, pinned host buffers, streams
//! and events, copy counters, the record of what the device did, and collectives over several
//! devices.

pub mod activity;
pub mod buffer;
pub mod collective;
pub mod device;
pub mod event;
pub mod host_cache;
pub mod pinned;
pub mod snapshot_request;
pub mod stream;
pub mod transfer;
