//! Chapter 6: mixed precision (being written).
