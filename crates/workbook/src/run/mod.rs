//! Running learner code: scratch workspaces that lay a `src/` over an official crate
//! ([`scratch`]), the runner that builds test executables and runs every test in a process of its
//! own ([`runner`]), and the sandbox those processes run in when grading ([`sandbox`]).

pub mod runner;
#[cfg(target_os = "linux")]
pub mod sandbox;
#[cfg(not(target_os = "linux"))]
#[path = "sandbox_other.rs"]
pub mod sandbox;
pub mod scratch;
