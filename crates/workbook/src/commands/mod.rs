//! One module per learner's and maintainer's command (the instructor's `grade` has a folder of
//! its own, [`crate::grade`]). `check` is also the machinery `list`, `watch`, `start` and
//! `solution` share: the state of each exercise from running its tests.

pub mod check;
pub mod diff;
pub mod doctor;
pub mod hint;
pub mod inspect;
pub mod list;
pub mod replay;
pub mod reset;
pub mod solution;
pub mod start;
pub mod verify;
pub mod viz;
pub mod watch;
