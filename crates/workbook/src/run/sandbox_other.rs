//! The sandbox where there is none: both tiers need Linux (bubblewrap's namespaces, Landlock), so
//! on other systems [`Sandbox::choose`] says so, and grading runs only with `--sandbox none`. The
//! same names as the Linux modules, so that the runner compiles everywhere.

use anyhow::{Result, bail};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Command;

pub use super::Tier;

/// Where the harness's log file is inside the sandbox.
pub const LOG_PATH: &str = "/run/workbook/log/harness.log";
/// The scratch folder inside the sandbox.
pub const SCRATCH: &str = "/tmp";

/// A sandbox that cannot exist here.
#[derive(Debug)]
pub enum Sandbox {
    /// Namespaces (never made here).
    Namespaces(Bubblewrap),
    /// Landlock (never made here).
    Landlock(Landlocked),
}

impl Sandbox {
    /// Always an error: the sandbox needs Linux.
    pub fn detect() -> Result<Sandbox> {
        bail!(
            "the sandbox needs Linux (bubblewrap's namespaces or Landlock), and this is not Linux"
        )
    }

    /// `None` for [`Tier::None`]; any other tier is an error here.
    pub fn choose(tier: Tier) -> Result<Option<Sandbox>> {
        match tier {
            Tier::None => Ok(None),
            _ => Sandbox::detect().map(Some),
        }
    }

    /// Never called.
    pub fn describe(&self) -> String {
        match self {
            Sandbox::Namespaces(b) => match b._never {},
            Sandbox::Landlock(l) => match l._never {},
        }
    }
}

/// bubblewrap (never made here).
#[derive(Debug)]
pub struct Bubblewrap {
    _never: std::convert::Infallible,
}

/// The Landlock tier (never made here).
#[derive(Debug)]
pub struct Landlocked {
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

/// One confined process (never made here).
#[derive(Debug)]
pub struct Confined {
    /// The command.
    pub command: Command,
    /// The harness's log.
    pub log: LogGate,
}

/// The harness's log behind its gate (never made here).
#[derive(Debug)]
pub struct LogGate {
    _never: std::convert::Infallible,
}

impl Bubblewrap {
    /// Always an error: bubblewrap needs Linux.
    pub fn detect() -> Result<Bubblewrap> {
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

impl Landlocked {
    /// Always an error: Landlock is Linux's.
    pub fn detect() -> Result<Landlocked> {
        bail!("Landlock is Linux's, and this is not Linux")
    }

    /// Never called: there is no sandbox here.
    pub fn command(
        &self,
        _binary: &Path,
        _args: &[&str],
        _log: bool,
        _memory_limit: Option<u64>,
        _extra_env: &[(String, String)],
    ) -> Result<Confined> {
        match self._never {}
    }
}

impl Confined {
    /// Never called.
    pub fn end(&self, _pid: libc::pid_t) {}
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
