//! The compute layer: GEMM and element-wise kernels on both devices, every buffer from the caching
//! allocator.
