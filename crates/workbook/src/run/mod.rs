//! Running learner code: scratch workspaces that lay a `src/` over an official crate
//! ([`scratch`]; a `src/predict.rs` that reaches outside the process fails to build there,
//! [`prediction_guard`]), the runner that builds test executables and runs every test in a process of its
//! own ([`runner`]), and the sandbox those processes run in when grading ([`sandbox`]), in one of
//! its two tiers (namespaces made by bubblewrap, or [`landlocked`]), both on what [`confinement`]
//! gives a test process (its environment, the gate on the harness's log): the tiers import it, not
//! each other.

pub mod cgroup;
#[cfg(target_os = "linux")]
pub mod confinement;
#[cfg(target_os = "linux")]
pub mod landlocked;
pub mod prediction_guard;
pub mod runner;
#[cfg(target_os = "linux")]
pub mod sandbox;
#[cfg(not(target_os = "linux"))]
#[path = "sandbox_other.rs"]
pub mod sandbox;
pub mod scratch;

/// `--sandbox`: where each graded test process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Tier {
    /// Namespaces where bubblewrap can make them, else Landlock.
    #[default]
    Auto,
    /// Namespaces of its own, made by bubblewrap (`bwrap`).
    Namespaces,
    /// Landlock, seccomp and rlimits, under a uid of its own when grading as root: for a hosted
    /// grader's container, where namespaces are refused.
    Landlock,
    /// No sandbox: the learners' code runs with your permissions (`--no-sandbox`).
    None,
}

/// Where the sandbox cannot run, its tests fail under CI=true and are skipped elsewhere (the
/// integration tests' own module, shared).
#[cfg(all(test, target_os = "linux"))]
#[path = "../../tests/common/sandbox.rs"]
pub(crate) mod needs_sandbox;
