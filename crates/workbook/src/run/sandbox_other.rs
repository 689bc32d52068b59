//! The sandbox where there is none: bubblewrap needs Linux's namespaces, so on other systems
//! [`Sandbox::detect`] says so, and grading runs only with `--no-sandbox`. The same names as the
//! Linux module, so that the runner compiles everywhere.

use anyhow::{Result, bail};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Command;

/// Where the harness's log file is inside the sandbox.
pub const LOG_PATH: &str = "/run/workbook/log/harness.log";
/// The scratch folder inside the sandbox.
pub const SCRATCH: &str = "/tmp";

/// A sandbox that cannot exist here.
#[derive(Debug)]
pub struct Sandbox {
    _never: std::convert::Infallible,
}

/// What one sandboxed process needs (never made here).
#[derive(Debug)]
pub struct Prepared {
    /// `bwrap` with every argument.
    pub command: Command,
    /// The harness's log.
    pub log: LogGate,
    /// bwrap's info descriptor.
    pub info: OwnedFd,
}

/// The harness's log behind its gate (never made here).
#[derive(Debug)]
pub struct LogGate {
    _never: std::convert::Infallible,
}

impl Sandbox {
    /// Always an error: the sandbox needs Linux.
    pub fn detect() -> Result<Sandbox> {
        bail!("the sandbox needs Linux's namespaces (bubblewrap), and this is not Linux")
    }

    /// The `bwrap` program (never called).
    pub fn bwrap(&self) -> &Path {
        match self._never {}
    }

    /// Never called: there is no sandbox here.
    pub fn command(
        &self,
        _binary: &Path,
        _args: &[&str],
        _memory_limit: Option<u64>,
        _extra_env: &[(String, String)],
    ) -> Result<Prepared> {
        match self._never {}
    }
}

impl Prepared {
    /// Never called.
    pub fn spawned(&mut self) {}
}

impl LogGate {
    /// Never called.
    pub fn finish(self) -> Option<String> {
        match self._never {}
    }
}

/// Never called.
pub fn read_child_pid(_info: OwnedFd) -> Option<libc::pid_t> {
    None
}
