//! NVRTC's output kept on disk, so that a machine compiles each kernel source once per target and
//! NVRTC version instead of once per process (3.4 to 3.9 s of CPU for sm_90, in every test process
//! of every `workbook check`).
//!
//! An entry's name is the SHA-256 of what decides NVRTC's output: the source, the target (`sm_90`,
//! `compute_90 (PTX)`, ...) and NVRTC's version. Its file holds a header, the SHA-256 of the image
//! and the image. Entries are written to a temporary file in the same folder and renamed into
//! place, so a reader sees a whole entry or none, whatever runs beside it. An entry that cannot be
//! read, is cut short or does not match its checksum is compiled again and replaced; a cache that
//! cannot be written is skipped. Neither is ever an error: the cache only saves time.
//!
//! Where: `GPUMEM_KERNEL_CACHE` (a folder, or `off`), else `$XDG_CACHE_HOME/gpumem/kernels`, else
//! `~/.cache/gpumem/kernels`.

use crate::error::Result;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first bytes of every entry; a new layout gets a new one.
const MAGIC: &[u8] = b"gpumem-kernel-cache 1\n";
/// Bytes of a SHA-256.
const DIGEST: usize = 32;
/// The entries' file name ending; temporary files end otherwise, so they are never read.
const ENTRY: &str = "kernel";

/// What decides NVRTC's output for one compilation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelKey<'a> {
    /// The CUDA C++ source.
    pub source: &'a str,
    /// The target, as `KernelTarget` displays it (`sm_90`, `compute_90 (PTX)`).
    pub target: &'a str,
    /// NVRTC's version, `(major, minor)`.
    pub nvrtc: (i32, i32),
}

impl KernelKey<'_> {
    /// The entry's name: the SHA-256, in hex, of the target, NVRTC's version and the source.
    pub fn name(&self) -> String {
        let mut hash = Sha256::new();
        // Each part with its length, so that no two keys run together into the same bytes.
        for part in [
            self.target.as_bytes(),
            format!("{}.{}", self.nvrtc.0, self.nvrtc.1).as_bytes(),
            self.source.as_bytes(),
        ] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        hex(&hash.finalize())
    }
}

/// Where a kernel image came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Read from the cache.
    Hit,
    /// Compiled: the cache had no entry (or is off).
    Compiled,
    /// Compiled again: the entry could not be used, for the reason given.
    Recompiled(String),
}

/// A folder of compiled kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCache {
    dir: PathBuf,
}

/// Entries and bytes in a cache folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheSize {
    /// Entries.
    pub entries: u64,
    /// Their bytes on disk.
    pub bytes: u64,
}

impl KernelCache {
    /// A cache in `dir` (made when the first entry is written).
    pub fn at(dir: impl Into<PathBuf>) -> KernelCache {
        KernelCache { dir: dir.into() }
    }

    /// The cache the cuda device uses: `GPUMEM_KERNEL_CACHE` (a folder, or `off` for none), else
    /// `$XDG_CACHE_HOME/gpumem/kernels`, else `~/.cache/gpumem/kernels`; `None` when it is off or
    /// there is no home folder.
    pub fn from_env() -> Option<KernelCache> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(setting) = var("GPUMEM_KERNEL_CACHE") {
            return (setting != "off").then(|| KernelCache::at(setting));
        }
        // The XDG base directory rules: a relative XDG_CACHE_HOME is to be ignored.
        let base = match var("XDG_CACHE_HOME").map(PathBuf::from) {
            Some(xdg) if xdg.is_absolute() => xdg,
            _ => PathBuf::from(var("HOME")?).join(".cache"),
        };
        Some(KernelCache::at(base.join("gpumem").join("kernels")))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`'s entry.
    pub fn entry_path(&self, key: &KernelKey) -> PathBuf {
        self.dir.join(format!("{}.{ENTRY}", key.name()))
    }

    /// The image for `key`: the cached one, or what `compile` makes (then stored). A compile
    /// error is returned as it is and stores nothing; every cache failure is a miss.
    pub fn get_or_compile(
        &self,
        key: &KernelKey,
        compile: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<(Vec<u8>, Lookup)> {
        let path = self.entry_path(key);
        let lookup = match std::fs::read(&path) {
            Ok(bytes) => match parse_entry(&bytes) {
                Ok(image) => return Ok((image, Lookup::Hit)),
                Err(why) => Lookup::Recompiled(why),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Lookup::Compiled,
            Err(e) => Lookup::Recompiled(format!("unreadable: {e}")),
        };
        let image = compile()?;
        // A cache that cannot be written costs a compile next time, nothing more.
        let _ = self.store(&path, &image);
        Ok((image, lookup))
    }

    /// Writes `image` as the entry at `path`: into a temporary file of the same folder, then
    /// renamed over the entry (atomic on one file system).
    fn store(&self, path: &Path, image: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut file = tempfile::Builder::new()
            .prefix(".tmp-")
            .suffix(".partial")
            .tempfile_in(&self.dir)?;
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(image))?;
        file.write_all(image)?;
        file.as_file().sync_all()?;
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// The entries in the folder and their bytes (none when it does not exist yet).
    pub fn size(&self) -> std::io::Result<CacheSize> {
        let mut size = CacheSize::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(size),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let is_entry = entry
                .path()
                .extension()
                .is_some_and(|extension| extension == ENTRY);
            if is_entry && entry.file_type()?.is_file() {
                size.entries += 1;
                size.bytes += entry.metadata()?.len();
            }
        }
        Ok(size)
    }
}

/// The image in an entry's bytes, or why they are not a whole entry.
fn parse_entry(bytes: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or("not a gpumem kernel cache entry (its header differs)")?;
    if rest.len() < DIGEST {
        return Err(format!("cut short: {} bytes", bytes.len()));
    }
    let (digest, image) = rest.split_at(DIGEST);
    if Sha256::digest(image).as_slice() != digest {
        return Err("corrupt: its checksum does not match".to_string());
    }
    Ok(image.to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const KEY: KernelKey = KernelKey {
        source: "extern \"C\" __global__ void k() {}",
        target: "sm_90",
        nvrtc: (13, 0),
    };

    /// A compile that counts its calls and returns `image`.
    fn counting<'a>(calls: &'a Cell<u32>, image: &'a [u8]) -> impl FnOnce() -> Result<Vec<u8>> {
        move || {
            calls.set(calls.get() + 1);
            Ok(image.to_vec())
        }
    }

    #[test]
    fn the_key_changes_with_the_source_the_target_and_the_nvrtc_version_only() {
        let name = KEY.name();
        assert_eq!(name.len(), 64);
        assert_eq!(name, KEY.name(), "the same inputs, the same entry");
        let others = [
            KernelKey {
                source: "extern \"C\" __global__ void k() { }",
                ..KEY
            },
            KernelKey {
                target: "sm_80",
                ..KEY
            },
            KernelKey {
                target: "compute_90 (PTX)",
                ..KEY
            },
            KernelKey {
                nvrtc: (13, 1),
                ..KEY
            },
            KernelKey {
                nvrtc: (12, 9),
                ..KEY
            },
        ];
        for other in others {
            assert_ne!(other.name(), name, "{other:?}");
        }
        // Parts do not run together: moving a character from target to source changes the key.
        let a = KernelKey {
            source: "0x",
            target: "sm_9",
            nvrtc: (13, 0),
        };
        let b = KernelKey {
            source: "x",
            target: "sm_90",
            nvrtc: (13, 0),
        };
        assert_ne!(a.name(), b.name());
    }

    #[test]
    fn a_second_lookup_reads_the_entry_instead_of_compiling() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path().join("kernels"));
        let calls = Cell::new(0);
        let first = cache
            .get_or_compile(&KEY, counting(&calls, b"ELF image"))
            .unwrap();
        assert_eq!(first, (b"ELF image".to_vec(), Lookup::Compiled));
        let again = cache
            .get_or_compile(&KEY, counting(&calls, b"other"))
            .unwrap();
        assert_eq!(again, (b"ELF image".to_vec(), Lookup::Hit));
        assert_eq!(calls.get(), 1, "compiled once");
        let size = cache.size().unwrap();
        assert_eq!(size.entries, 1);
        assert_eq!(size.bytes, (MAGIC.len() + DIGEST + 9) as u64);
    }

    #[test]
    fn a_corrupt_cut_short_or_foreign_entry_is_compiled_again_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        let path = cache.entry_path(&KEY);
        let calls = Cell::new(0);
        cache
            .get_or_compile(&KEY, counting(&calls, b"good image"))
            .unwrap();
        let whole = std::fs::read(&path).unwrap();
        let mut flipped = whole.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let damaged: [(&str, Vec<u8>); 4] = [
            ("corrupt", flipped),
            ("cut short", whole[..MAGIC.len() + 5].to_vec()),
            ("header differs", b"\x7fELF not ours".to_vec()),
            ("header differs", Vec::new()),
        ];
        for (why, bytes) in damaged {
            std::fs::write(&path, &bytes).unwrap();
            let (image, lookup) = cache
                .get_or_compile(&KEY, counting(&calls, b"good image"))
                .unwrap();
            assert_eq!(image, b"good image");
            assert!(
                matches!(&lookup, Lookup::Recompiled(reason) if reason.contains(why)),
                "{why}: {lookup:?}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                whole,
                "{why}: the entry is replaced"
            );
        }
        assert_eq!(calls.get(), 5);
    }

    #[test]
    fn an_unreadable_entry_or_an_unwritable_folder_costs_a_compile_never_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // The entry's name is taken by a folder: it cannot be read, nor replaced.
        let cache = KernelCache::at(dir.path());
        std::fs::create_dir(cache.entry_path(&KEY)).unwrap();
        let calls = Cell::new(0);
        let (image, lookup) = cache
            .get_or_compile(&KEY, counting(&calls, b"image"))
            .unwrap();
        assert_eq!(image, b"image");
        assert!(
            matches!(lookup, Lookup::Recompiled(ref r) if r.contains("unreadable")),
            "{lookup:?}"
        );
        // The cache folder's path is a file: nothing can be written under it.
        let file = dir.path().join("a file");
        std::fs::write(&file, b"").unwrap();
        let cache = KernelCache::at(file.join("kernels"));
        for _ in 0..2 {
            let (image, lookup) = cache
                .get_or_compile(&KEY, counting(&calls, b"image"))
                .unwrap();
            assert_eq!(image, b"image");
            assert_ne!(lookup, Lookup::Hit, "nothing could be stored");
        }
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn a_compile_error_is_returned_and_stores_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        let err = cache
            .get_or_compile(&KEY, || {
                Err(crate::error::Error::InvalidArgument {
                    op: "nvrtcCompileProgram",
                    device: "sm_90".into(),
                    message: "a syntax error".into(),
                })
            })
            .unwrap_err();
        assert!(err.to_string().contains("a syntax error"), "{err}");
        assert_eq!(cache.size().unwrap(), CacheSize::default());
    }

    #[test]
    fn writers_side_by_side_leave_one_whole_entry_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        // Large enough that a write is many system calls; every writer writes the same image.
        let image: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..4 {
                        let (got, _) = cache.get_or_compile(&KEY, || Ok(image.clone())).unwrap();
                        assert!(got == image, "a reader saw a partial entry");
                    }
                });
            }
        });
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [format!("{}.{ENTRY}", KEY.name())],
            "no temporary file is left"
        );
    }

    #[test]
    fn a_temporary_file_left_by_a_crashed_writer_is_never_read_nor_counted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        std::fs::write(dir.path().join(".tmp-crashed.partial"), &MAGIC[..4]).unwrap();
        assert_eq!(cache.size().unwrap(), CacheSize::default());
        let calls = Cell::new(0);
        let (_, lookup) = cache
            .get_or_compile(&KEY, counting(&calls, b"image"))
            .unwrap();
        assert_eq!(lookup, Lookup::Compiled);
        assert_eq!(cache.size().unwrap().entries, 1);
    }
}
