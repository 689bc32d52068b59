//! The workbook's integration tests, one module per file beside this one, built into one
//! executable (`cargo test -p workbook --test integration`; one file's tests:
//! `cargo test -p workbook --test integration grade_cli::`). `grade_corpus.rs`,
//! `grade_build_timeout.rs` and `runner.rs` are executables of their own (see `Cargo.toml`).

mod common;

mod answers_after_predictions;
mod book;
mod book_outputs;
mod browser;
mod chapter_toml;
mod doctor;
mod grade_class_summary;
mod grade_cli;
mod grade_feedback;
mod grade_gradescope;
mod grade_lms;
mod gradescope_assignment;
mod i18n;
mod inspect;
mod learner_cli;
mod learner_watch_serve;
mod measured;
mod official_tests;
mod readme_figures;
mod real_snapshots;
mod replay;
mod snapshot_corpus;
mod snapshot_pickle;
mod student_edition;
mod torch_fsdp2;
mod verify_all_chapters;
mod verify_cli;
mod viz;
