//! Snapshots: what a snapshot file says and how it is drawn, shared by the commands (`inspect`,
//! `diff`, `viz`, `replay`) and the book's pictures. [`analysis`] reads a file's history as a
//! stream; [`viz`] draws a snapshot as SVG; [`replay`] turns a file into the allocation traces
//! `workbook replay` runs.
//!
//! It imports nothing else of the CLI: the commands and the book import it.

pub mod analysis;
pub mod replay;
pub mod viz;
