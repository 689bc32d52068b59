//! A lock file: two workbook runs never write the same progress file or scratch workspace at once.

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

/// An exclusive advisory lock (`flock`) on a file, held until dropped: two workbook runs never
/// write the same progress file or build the same scratch workspace at once.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock on `path` (created if needed), waiting for another holder if there is one.
    pub fn acquire(path: &Path) -> Result<DirLock> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        let fd = file.as_raw_fd();
        // SAFETY: flock only takes a lock on a descriptor we own and keep open.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            eprintln!(
                "waiting for another workbook run that holds {}",
                path.display()
            );
            // SAFETY: as above.
            if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(DirLock { _file: file })
    }
}
