//! `GPUMEM_ALLOC_CONF`: torch's `PYTORCH_ALLOC_CONF` syntax for the caching allocator's knobs.
//!
//! The grammar, bounds and messages are torch 2.15's (`c10/core/AllocatorConfig.{h,cpp}` and
//! `c10/cuda/CUDAAllocatorConfig.{h,cpp}` at v2.15.0), checked fact by fact against torch 2.15.0
//! by `conformance/goldens/settings.json`. The text is cut into tokens at `,` `:` `[` `]` with
//! white space dropped, then read in three passes, as torch does: `large_segment_size_mb` first
//! (it sets the floor of two other options), then the options of every accelerator, then the
//! CUDA ones. Like torch, a key's `:` and the `,` after its value are skipped without being
//! looked at. Unlike torch, a number must be a whole number (or a decimal one where a fraction is
//! asked for): torch reads it with C++'s `std::stoull`/`std::stod`, which take a value's leading
//! digits (`64abc` is 64) and wrap a minus sign, and fails on a missing value with an internal
//! assert; gpumem names the problem instead.

use crate::error::{Error, Result};
use crate::raw::backend::Pinning;

const MIB: usize = 1 << 20;
/// torch's default `large_segment_size_mb` (`kLargeBuffer`, 20 MiB): the segment size of requests
/// between 1 and 10 MiB and the floor of `max_split_size_mb` and `max_non_split_rounding_mb`.
const LARGE_SEGMENT_SIZE_MB: usize = 20;
/// `large_segment_size_mb` must be above this (torch's `kMinLargeAlloc` in MiB).
const MIN_LARGE_ALLOC_MB: usize = 10;
/// How many power-of-two intervals `roundup_power2_divisions` distinguishes (1 MiB up to 64 GiB).
pub const ROUNDUP_INTERVALS: usize = 16;
/// torch's `pinned_max_register_threads`.
const PINNED_MAX_REGISTER_THREADS: usize = 128;

/// The options of every accelerator (torch's `AcceleratorAllocatorConfig::getKeys`).
const ACCELERATOR_KEYS: [&str; 7] = [
    "large_segment_size_mb",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "pinned_use_background_threads",
];

/// The CUDA options (torch's `CUDAAllocatorConfig::getKeys`).
const CUDA_KEYS: [&str; 13] = [
    "backend",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "release_lock_on_hipmalloc",
    "pinned_use_hip_host_register",
    "graph_capture_record_stream_reuse",
    "pinned_reserve_segment_size_mb",
    "pinned_num_register_threads",
    "per_process_memory_fraction",
    "pinned_free_catch_all",
    "throw_on_cudamalloc_oom",
    "expandable_segments_reserve",
    "expandable_segments_reserve_by_class",
];

/// The caching allocator's tunables. `Default` is torch's default behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// The segment size of requests between 1 and 10 MiB (torch 2.15's `large_segment_size_mb`,
    /// default 20 MiB); also the floor of `max_split_size_mb` and `max_non_split_rounding_mb`.
    pub large_segment_size: usize,
    /// Blocks of at least this size are never split ("oversize"); `usize::MAX` when unset.
    pub max_split_size: usize,
    /// An oversize request may take a cached block at most this much larger (default 20 MiB).
    pub max_non_split_rounding_size: usize,
    /// Divisions per power-of-two interval, by interval: index 0 for sizes below 2 MiB, index `i`
    /// for sizes in `[2^i MiB, 2^(i+1) MiB)`, the last for 32 GiB and up. 0 or 1: no rounding.
    pub roundup_power2_divisions: [usize; ROUNDUP_INTERVALS],
    /// Reclaim old cached blocks once reserved memory exceeds this fraction of the process's
    /// allowed memory (needs a memory fraction to be set, as in torch); 0.0: off.
    pub garbage_collection_threshold: f64,
    /// Grow one segment per stream and pool instead of reserving a segment per request.
    pub expandable_segments: bool,
    /// Accepted as torch does; gpumem holds its lock through every reservation either way.
    pub release_lock_on_cudamalloc: bool,
    /// Pin new host blocks by registering ordinary memory (`cuMemHostRegister`) instead of
    /// `cuMemHostAlloc`, as torch does ([`AllocatorConfig::pinning`]).
    pub pinned_use_cuda_host_register: bool,
    /// Threads that touch a block's pages before it is registered (a power of two up to 128).
    pub pinned_num_register_threads: usize,
    /// Accepted as torch does; gpumem's pinned frees are synchronous.
    pub pinned_use_background_threads: bool,
    /// Accepted as torch does; gpumem captures no CUDA graphs.
    pub graph_capture_record_stream_reuse: bool,
    /// Accepted as torch does; gpumem frees only the pinned memory it allocated.
    pub pinned_free_catch_all: bool,
    /// The last text applied (torch's `last_allocator_settings`).
    pub text: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            large_segment_size: LARGE_SEGMENT_SIZE_MB * MIB,
            max_split_size: usize::MAX,
            max_non_split_rounding_size: LARGE_SEGMENT_SIZE_MB * MIB,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            graph_capture_record_stream_reuse: false,
            pinned_free_catch_all: false,
            text: String::new(),
        }
    }
}

/// The tokens of a setting string, as torch's `ConfigTokenizer` cuts them (C's `isspace` drops).
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            out.push(c.to_string());
        } else if !matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r') {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The tokens, with errors that name the option being read.
struct Parser {
    tokens: Vec<String>,
    option: String,
}

impl Parser {
    fn error(&self, reason: impl Into<String>) -> Error {
        Error::BadSetting {
            setting: format!("GPUMEM_ALLOC_CONF option {}", self.option),
            reason: reason.into(),
        }
    }

    /// Token `i`; torch fails here with an internal assert ("Index out of bounds").
    fn at(&self, i: usize) -> Result<&str> {
        self.tokens.get(i).map(String::as_str).ok_or_else(|| {
            self.error(format!(
                "the setting ends before {}'s value is complete",
                self.option
            ))
        })
    }

    /// The index of `key`'s value (`i` is the key's index): the `:` is not looked at, as torch.
    fn value_index(&self, i: usize) -> Result<usize> {
        self.at(i + 1)?;
        self.at(i + 2)?;
        Ok(i + 2)
    }

    fn whole(&self, i: usize) -> Result<usize> {
        let value = self.at(i)?;
        value.parse().map_err(|_| {
            self.error(format!(
                "{value:?} is not a whole number (torch's std::stoull would say only \"stoull\", \
                 or read a number's leading digits)"
            ))
        })
    }

    fn number(&self, i: usize) -> Result<f64> {
        let value = self.at(i)?;
        value.parse().map_err(|_| {
            self.error(format!(
                "{value:?} is not a number (torch's std::stod would say only \"stod\", or read \
                 a number's leading digits)"
            ))
        })
    }

    /// torch's `ConfigTokenizer::toBool`, with its message (which names the token's index).
    fn boolean(&self, i: usize) -> Result<bool> {
        match self.at(i)? {
            "True" => Ok(true),
            "False" => Ok(false),
            other => Err(self.error(format!(
                "Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{other}'"
            ))),
        }
    }

    /// torch's `skipKey`: past the value of an option another pass reads (a `[...]` list whole).
    fn skip_key(&self, i: usize) -> Result<usize> {
        let mut i = self.value_index(i)?;
        if self.tokens[i] != "[" {
            return Ok(i);
        }
        while i + 1 < self.tokens.len() {
            i += 1;
            if self.tokens[i] == "]" {
                return Ok(i);
            }
        }
        Err(self.error("a list opened with [ is not closed with ]"))
    }
}

/// The interval index of `size` bytes for `roundup_power2_divisions` (torch's lookup).
pub fn roundup_interval(size: usize) -> usize {
    let log_size = (usize::BITS - 1 - size.max(1).leading_zeros()) as usize;
    log_size.saturating_sub(20).min(ROUNDUP_INTERVALS - 1)
}

impl AllocatorConfig {
    /// Parses `key:value,key:value` as torch does; an empty string is the default.
    pub fn parse(text: &str) -> Result<AllocatorConfig> {
        let mut config = AllocatorConfig::default();
        config.apply(text)?;
        Ok(config)
    }

    /// Applies a setting string to this configuration, as torch 2.15's `parseArgs` (and
    /// `torch._C._accelerator_setAllocatorSettings`) does: `max_split_size_mb`,
    /// `roundup_power2_divisions` and `garbage_collection_threshold` go back to their defaults
    /// and `max_non_split_rounding_mb` to `large_segment_size_mb` first; the other options keep
    /// their value unless the text names them. On error nothing changes (torch keeps what it
    /// parsed before the error).
    pub fn apply(&mut self, text: &str) -> Result<()> {
        let mut next = self.clone();
        next.max_split_size = usize::MAX;
        next.roundup_power2_divisions = [0; ROUNDUP_INTERVALS];
        next.garbage_collection_threshold = 0.0;
        next.text = text.to_string();
        let mut p = Parser {
            tokens: tokens(text),
            option: String::new(),
        };
        // Pass 1: `large_segment_size_mb`, wherever it is, before the options it bounds.
        let mut i = 0;
        while i < p.tokens.len() {
            if p.tokens[i] == "large_segment_size_mb" {
                p.option = p.tokens[i].clone();
                i = p.value_index(i)?;
                let mb = p.whole(i)?;
                if mb <= MIN_LARGE_ALLOC_MB {
                    return Err(p.error(format!(
                        "CachingAllocator option large_segment_size_mb must be > \
                         {MIN_LARGE_ALLOC_MB} MB"
                    )));
                }
                next.large_segment_size = mb.min(usize::MAX / MIB) * MIB;
            }
            i += 1;
        }
        next.max_non_split_rounding_size = next.large_segment_size;
        // Pass 2: every accelerator's options; pass 3: CUDA's. Each skips the other's.
        for cuda_pass in [false, true] {
            let mut i = 0;
            while i < p.tokens.len() {
                p.option = p.tokens[i].clone();
                let key = p.option.clone();
                let mine = if cuda_pass {
                    CUDA_KEYS.contains(&key.as_str())
                } else {
                    ACCELERATOR_KEYS.contains(&key.as_str()) && key != "large_segment_size_mb"
                };
                i = if mine {
                    if cuda_pass {
                        next.apply_cuda_option(&p, i)?
                    } else {
                        next.apply_accelerator_option(&p, i)?
                    }
                } else if ACCELERATOR_KEYS.contains(&key.as_str())
                    || CUDA_KEYS.contains(&key.as_str())
                {
                    p.skip_key(i)?
                } else {
                    return Err(p.error(format!(
                        "Unrecognized key '{key}' in Accelerator allocator config."
                    )));
                };
                // The token after a value is skipped unseen, as torch's unchecked `checkToken`.
                if i + 1 < p.tokens.len() {
                    i += 1;
                }
                i += 1;
            }
        }
        *self = next;
        Ok(())
    }

    /// Reads one of every accelerator's options at token `i`; returns its last token's index.
    fn apply_accelerator_option(&mut self, p: &Parser, i: usize) -> Result<usize> {
        let v = p.value_index(i)?;
        let floor_mb = self.large_segment_size / MIB;
        match p.option.as_str() {
            "max_split_size_mb" | "max_non_split_rounding_mb" => {
                let mb = p.whole(v)?;
                if mb < floor_mb {
                    return Err(p.error(format!(
                        "CachingAllocator option {} too small, must be >= {floor_mb}",
                        p.option
                    )));
                }
                let bytes = mb.min(usize::MAX / MIB) * MIB;
                if p.option == "max_split_size_mb" {
                    self.max_split_size = bytes;
                } else {
                    self.max_non_split_rounding_size = bytes;
                }
                Ok(v)
            }
            "garbage_collection_threshold" => {
                let f = p.number(v)?;
                if !(f > 0.0 && f < 1.0) {
                    return Err(
                        p.error("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
                    );
                }
                self.garbage_collection_threshold = f;
                Ok(v)
            }
            "roundup_power2_divisions" => {
                let (table, end) = parse_divisions(p, v)?;
                self.roundup_power2_divisions = table;
                Ok(end)
            }
            "expandable_segments" => {
                self.expandable_segments = p.boolean(v)?;
                Ok(v)
            }
            _ => {
                self.pinned_use_background_threads = p.boolean(v)?;
                Ok(v)
            }
        }
    }

    /// Reads one of CUDA's options at token `i`; returns its last token's index. The options
    /// that would change numbers gpumem does not model are checked as torch checks them, then
    /// refused with the reason.
    fn apply_cuda_option(&mut self, p: &Parser, i: usize) -> Result<usize> {
        let v = p.value_index(i)?;
        match p.option.as_str() {
            "backend" => match p.at(v)? {
                "native" => Ok(v),
                "cudaMallocAsync" => Err(p.error(
                    "gpumem models the native caching allocator only; with cudaMallocAsync the \
                     driver's pool decides what is reserved, and none of gpumem's numbers would \
                     be torch's",
                )),
                _ => {
                    Err(p
                        .error("Unknown allocator backend, options are native and cudaMallocAsync"))
                }
            },
            "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => {
                self.release_lock_on_cudamalloc = p.boolean(v)?;
                Ok(v)
            }
            "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => {
                self.pinned_use_cuda_host_register = p.boolean(v)?;
                Ok(v)
            }
            "graph_capture_record_stream_reuse" => {
                self.graph_capture_record_stream_reuse = p.boolean(v)?;
                Ok(v)
            }
            "pinned_free_catch_all" => {
                self.pinned_free_catch_all = p.boolean(v)?;
                Ok(v)
            }
            "pinned_num_register_threads" => {
                let n = p.whole(v)?;
                if !n.is_power_of_two() {
                    return Err(p.error(format!(
                        "Number of register threads has to be power of 2, got {n}"
                    )));
                }
                if n > PINNED_MAX_REGISTER_THREADS {
                    return Err(p.error(format!(
                        "Number of register threads should be less than or equal to \
                         {PINNED_MAX_REGISTER_THREADS}, got {n}"
                    )));
                }
                self.pinned_num_register_threads = n;
                Ok(v)
            }
            "pinned_reserve_segment_size_mb" => {
                if p.whole(v)? == 0 {
                    return Err(p.error("Pinned reserve segment size has to be greater than 0"));
                }
                Err(p.error(
                    "gpumem's pinned allocator reserves no segment up front: each pinned buffer \
                     is its own allocation, so host_memory_stats would not be torch's",
                ))
            }
            "per_process_memory_fraction" => {
                let f = p.number(v)?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(
                        p.error("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
                    );
                }
                Err(p.error(
                    "gpumem sets the fraction at run time only: call \
                     Device::set_per_process_memory_fraction (torch.cuda.\
                     set_per_process_memory_fraction)",
                ))
            }
            "throw_on_cudamalloc_oom" => {
                p.boolean(v)?;
                Err(p.error(
                    "gpumem does not model torch's early out-of-memory check against \
                     cudaMemGetInfo: its out-of-memory errors come from a failed reservation, \
                     after the cache is released, as torch's do without this option",
                ))
            }
            _ => Err(p.error(
                "gpumem reserves one fixed amount of address space per expandable segment \
                 (torch's 9/8 of the device's memory, at most 1 TiB); it does not model \
                 expandable_segments_reserve or expandable_segments_reserve_by_class",
            )),
        }
    }

    /// How pinned host memory is made: `cuMemHostAlloc`, or with `pinned_use_cuda_host_register`
    /// ordinary memory registered after `pinned_num_register_threads` threads touched its pages.
    pub fn pinning(&self) -> Pinning {
        if self.pinned_use_cuda_host_register {
            Pinning::Register {
                threads: self.pinned_num_register_threads,
            }
        } else {
            Pinning::HostAlloc
        }
    }

    /// The divisions for a request of `size` bytes (torch's `roundup_power2_divisions(size)`).
    pub fn divisions_for(&self, size: usize) -> usize {
        self.roundup_power2_divisions[roundup_interval(size)]
    }

    /// Options that were accepted but change nothing gpumem models, each with why.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.release_lock_on_cudamalloc {
            notes.push(
                "release_lock_on_cudamalloc:True changes only whether other threads may use the \
                 allocator while a reservation is under way; gpumem keeps its lock, and no number \
                 changes"
                    .to_string(),
            );
        }
        if self.pinned_use_background_threads {
            notes.push(
                "pinned_use_background_threads:True makes torch process pinned frees on a thread; \
                 gpumem frees pinned memory at once, so this has no effect"
                    .to_string(),
            );
        }
        if self.graph_capture_record_stream_reuse {
            notes.push(
                "graph_capture_record_stream_reuse:True changes how torch reuses blocks while a \
                 CUDA graph is captured; gpumem captures no graphs, so this has no effect"
                    .to_string(),
            );
        }
        if self.pinned_free_catch_all {
            notes.push(
                "pinned_free_catch_all:True lets torch's pinned allocator free host memory it \
                 did not allocate; gpumem frees only its own pinned buffers, so this has no effect"
                    .to_string(),
            );
        }
        notes
    }

    /// A one-line description of the settings that change numbers (for `doctor` and `replay`).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.large_segment_size != LARGE_SEGMENT_SIZE_MB * MIB {
            parts.push(format!(
                "large_segment_size_mb:{}",
                self.large_segment_size / MIB
            ));
        }
        if self.max_split_size != usize::MAX {
            parts.push(format!("max_split_size_mb:{}", self.max_split_size / MIB));
        }
        if self.max_non_split_rounding_size != self.large_segment_size {
            parts.push(format!(
                "max_non_split_rounding_mb:{}",
                self.max_non_split_rounding_size / MIB
            ));
        }
        let d = &self.roundup_power2_divisions;
        if d.iter().all(|&n| n == d[0]) {
            if d[0] > 1 {
                parts.push(format!("roundup_power2_divisions:{}", d[0]));
            }
        } else {
            let list: Vec<String> = d
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{}:{n}", 1usize << i))
                .collect();
            parts.push(format!("roundup_power2_divisions:[{}]", list.join(",")));
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!(
                "garbage_collection_threshold:{}",
                self.garbage_collection_threshold
            ));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_string());
        }
        if parts.is_empty() {
            "torch's defaults".to_string()
        } else {
            parts.join(",")
        }
    }

    /// Reads `GPUMEM_ALLOC_CONF` (unset: the default).
    pub fn from_env() -> Result<AllocatorConfig> {
        match std::env::var("GPUMEM_ALLOC_CONF") {
            Ok(text) => AllocatorConfig::parse(&text),
            Err(std::env::VarError::NotPresent) => Ok(AllocatorConfig::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::BadSetting {
                setting: "GPUMEM_ALLOC_CONF".into(),
                reason: "not valid UTF-8".into(),
            }),
        }
    }
}

/// `roundup_power2_divisions` with its value at token `v`: one number for every interval, or
/// `[MB:n,MB:n,>:n]` per interval. Returns the table and the index of its last token.
///
/// As torch 2.15: an interval `MB` is interval `floor(log2(MB))` (at most 15); the first `MB:n`
/// also fills every interval below it; `>:n` fills the intervals after the last one named (after
/// interval 0 when none is); intervals between two named ones keep 0; a list's `n` may be 0 (no
/// rounding there).
fn parse_divisions(p: &Parser, v: usize) -> Result<([usize; ROUNDUP_INTERVALS], usize)> {
    let mut table = [0; ROUNDUP_INTERVALS];
    if p.at(v)? != "[" {
        let n = p.whole(v)?;
        if !n.is_power_of_two() {
            return Err(p.error("For roundups, the divisions has to be power of 2 "));
        }
        return Ok(([n; ROUNDUP_INTERVALS], v));
    }
    let mut first_value = true;
    let mut last_index = 0;
    let mut i = v + 1;
    while p.at(i)? != "]" {
        let interval_at = i;
        p.at(i + 1)?; // its `:`, not looked at, as torch
        i += 2;
        let n = p.whole(i)?;
        if n != 0 && !n.is_power_of_two() {
            return Err(p.error(
                "For roundups, the divisions has to be power of 2 or 0 to disable roundup ",
            ));
        }
        if p.tokens[interval_at] == ">" {
            table[(last_index + 1).min(ROUNDUP_INTERVALS)..].fill(n);
        } else {
            let mb = p.whole(interval_at)?;
            if !mb.is_power_of_two() {
                return Err(p.error("For roundups, the intervals have to be power of 2 "));
            }
            let index = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
            if first_value {
                table[..index].fill(n);
                first_value = false;
            }
            table[index] = n;
            last_index = index;
        }
        // The `,` between entries is skipped unseen, as torch.
        if p.at(i + 1)? != "]" {
            i += 1;
        }
        i += 1;
    }
    Ok((table, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_torch_syntax() {
        let c = AllocatorConfig::parse(
            "max_split_size_mb:128, roundup_power2_divisions:4,garbage_collection_threshold:0.6",
        )
        .unwrap();
        assert_eq!(c.max_split_size, 128 << 20);
        assert_eq!(c.roundup_power2_divisions, [4; ROUNDUP_INTERVALS]);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig {
                text: String::new(),
                ..AllocatorConfig::default()
            }
        );
    }

    #[test]
    fn the_list_form_fills_intervals_as_torch_does() {
        let c = AllocatorConfig::parse("roundup_power2_divisions:[64:8,256:4,>:1]").unwrap();
        // 64 MiB is interval 6: it and everything below get 8; 128 MiB (7) keeps 0; 256 MiB (8)
        // gets 4; `>` fills the intervals after the last one named (torch 2.15).
        let mut expected = [8; ROUNDUP_INTERVALS];
        expected[7] = 0;
        expected[8] = 4;
        expected[9..].fill(1);
        assert_eq!(c.roundup_power2_divisions, expected);
        assert_eq!(c.divisions_for(1 << 20), 8);
        assert_eq!(c.divisions_for(100 << 20), 8);
        assert_eq!(c.divisions_for(130 << 20), 0);
        assert_eq!(c.divisions_for(300 << 20), 4);
        assert_eq!(c.divisions_for(1 << 40), 1);
        let c = AllocatorConfig::parse("roundup_power2_divisions:[1:2, 2:4]").unwrap();
        assert_eq!(c.divisions_for(1 << 20), 2);
        assert_eq!(c.divisions_for(3 << 20), 4);
        assert_eq!(c.divisions_for(5 << 20), 0);
    }

    #[test]
    fn a_new_setting_string_resets_four_options_as_torch_does() {
        let mut c = AllocatorConfig::parse(
            "max_split_size_mb:64,expandable_segments:True,max_non_split_rounding_mb:40,\
             large_segment_size_mb:30",
        )
        .unwrap();
        c.apply("garbage_collection_threshold:0.5").unwrap();
        assert_eq!(c.max_split_size, usize::MAX);
        assert!(c.expandable_segments, "expandable_segments is kept");
        assert_eq!(
            c.large_segment_size,
            30 << 20,
            "large_segment_size_mb is kept"
        );
        assert_eq!(
            c.max_non_split_rounding_size,
            30 << 20,
            "max_non_split_rounding_mb goes back to large_segment_size_mb"
        );
        assert!(c.apply("max_split_size_mb:29").is_err());
        assert_eq!(
            c.garbage_collection_threshold, 0.5,
            "an error changes nothing"
        );
    }

    #[test]
    fn large_segment_size_mb_is_read_first_and_bounds_two_options() {
        let err = AllocatorConfig::parse("max_split_size_mb:39,large_segment_size_mb:40")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid GPUMEM_ALLOC_CONF option max_split_size_mb: CachingAllocator option \
             max_split_size_mb too small, must be >= 40"
        );
        let c = AllocatorConfig::parse("large_segment_size_mb:40,max_split_size_mb:40").unwrap();
        assert_eq!(c.large_segment_size, 40 << 20);
        assert_eq!(c.max_non_split_rounding_size, 40 << 20);
    }

    #[test]
    fn malformed_or_unknown_options_name_the_culprit() {
        for (text, needle) in [
            (
                "max_split_size_mb:abc",
                "max_split_size_mb: \"abc\" is not a whole number",
            ),
            (
                "max_split_size_mb:19",
                "max_split_size_mb too small, must be >= 20",
            ),
            (
                "max_non_split_rounding_mb:19",
                "max_non_split_rounding_mb too small, must be >= 20",
            ),
            (
                "roundup_power2_divisions:3",
                "the divisions has to be power of 2 ",
            ),
            ("roundup_power2_divisions:[64:3]", "or 0 to disable roundup"),
            (
                "roundup_power2_divisions:[63:4]",
                "intervals have to be power of 2",
            ),
            ("roundup_power2_divisions:[64:4", "value is complete"),
            (
                "garbage_collection_threshold:1.5",
                "garbage_collect_threshold is invalid, set it in (0.0, 1.0)",
            ),
            (
                "cheese:1",
                "Unrecognized key 'cheese' in Accelerator allocator config.",
            ),
            ("max_split_size_mb", "value is complete"),
            (
                "expandable_segments:true",
                "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'",
            ),
            (
                "pinned_num_register_threads:3",
                "has to be power of 2, got 3",
            ),
            (
                "pinned_num_register_threads:256",
                "less than or equal to 128, got 256",
            ),
            ("backend:cudaMallocAsync", "native caching allocator only"),
            ("backend:magic", "Unknown allocator backend"),
            ("throw_on_cudamalloc_oom:True", "early out-of-memory check"),
            (
                "per_process_memory_fraction:0.5",
                "set_per_process_memory_fraction",
            ),
            (
                "pinned_reserve_segment_size_mb:64",
                "reserves no segment up front",
            ),
            (
                "expandable_segments_reserve:0.5",
                "does not model expandable_segments_reserve",
            ),
        ] {
            let err = AllocatorConfig::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
            let option = text.split(':').next().unwrap();
            assert!(
                err.contains(&format!("option {option}:")),
                "{text}: the error names the option: {err}"
            );
        }
    }

    #[test]
    fn host_register_pins_with_the_register_threads_and_is_no_note() {
        assert_eq!(AllocatorConfig::default().pinning(), Pinning::HostAlloc);
        let threads_alone = AllocatorConfig::parse("pinned_num_register_threads:8").unwrap();
        assert_eq!(threads_alone.pinning(), Pinning::HostAlloc);
        let c = AllocatorConfig::parse(
            "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
        )
        .unwrap();
        assert_eq!(c.pinning(), Pinning::Register { threads: 8 });
        let c = AllocatorConfig::parse("pinned_use_cuda_host_register:True").unwrap();
        assert_eq!(c.pinning(), Pinning::Register { threads: 1 });
        assert!(c.notes().is_empty(), "{:?}", c.notes());
    }

    #[test]
    fn options_that_change_nothing_are_accepted_with_a_note() {
        let c = AllocatorConfig::parse(
            "backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,\
             pinned_num_register_threads:8,pinned_use_background_threads:True,\
             graph_capture_record_stream_reuse:True,pinned_free_catch_all:True",
        )
        .unwrap();
        let notes = c.notes();
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[0].contains("no number changes"));
        assert_eq!(c.describe(), "torch's defaults");
    }
}
