//! The raw backends: reserve and release device memory, copy bytes, streams and events, on host
//! memory (`cpu`) or through the CUDA driver, and the probe that says whether CUDA is usable.
//! Nothing here caches, counts or decides.

pub mod backend;
pub mod cpu;
pub mod cpu_streams;
pub mod cuda;
pub mod driver;
