//! Snapshots: what a snapshot file says and how it is drawn, shared by the commands (`inspect`,
//! `diff`, `viz`, `replay`) and the book's pictures. [`model`] is one device's memory at every
//! event of a history, those older than the trace included; [`analysis`] reads a file's history as a
//! stream; [`frames`] picks a stack's frames that are the user's code; [`viz`] draws a snapshot as
//! SVG; [`replay`] turns a file into the allocation traces `workbook replay` runs.
//!
//! It imports nothing else of the CLI: the commands and the book import it.

pub mod analysis;
pub mod frames;
pub mod model;
pub mod replay;
pub mod viz;
