//! `GPUMEM_ALLOC_CONF`: torch's `PYTORCH_CUDA_ALLOC_CONF` syntax for the caching allocator's knobs.
//!
//! The grammar, bounds and messages follow torch 2.x's `c10/cuda/CUDAAllocatorConfig.cpp` (the
//! 2.1–2.7 parser) and, for `max_non_split_rounding_mb`, the newer `c10/core/AllocatorConfig.cpp`:
//! the text is cut into tokens at `,` `:` `[` `]` with spaces dropped, then read option by option.

use crate::error::{Error, Result};

const MIB: usize = 1 << 20;
/// torch's `kLargeBuffer` in MiB: the floor of `max_split_size_mb` and `max_non_split_rounding_mb`.
const LARGE_BUFFER_MB: usize = 20;
/// How many power-of-two intervals `roundup_power2_divisions` distinguishes (1 MiB up to 64 GiB).
pub const ROUNDUP_INTERVALS: usize = 16;
/// torch's `pinned_max_register_threads`.
const PINNED_MAX_REGISTER_THREADS: usize = 128;

/// The caching allocator's tunables. `Default` is torch's default behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
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
    /// Accepted as torch does; gpumem's pinned memory is always `cuMemHostAlloc` (or host pages).
    pub pinned_use_cuda_host_register: bool,
    /// Accepted as torch does (a power of two up to 128); gpumem registers no host memory.
    pub pinned_num_register_threads: usize,
    /// Accepted as newer torch does; gpumem's pinned frees are synchronous.
    pub pinned_use_background_threads: bool,
    /// The last text applied (torch's `last_allocator_settings`).
    pub text: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: usize::MAX,
            max_non_split_rounding_size: LARGE_BUFFER_MB * MIB,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            text: String::new(),
        }
    }
}

/// The tokens of a setting string, as torch's `lexArgs` cuts them.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            out.push(c.to_string());
        } else if c != ' ' {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// A cursor over the tokens, with errors that name the option being read.
struct Parser {
    tokens: Vec<String>,
    at: usize,
    option: String,
}

impl Parser {
    fn error(&self, reason: impl Into<String>) -> Error {
        Error::BadSetting {
            setting: format!("GPUMEM_ALLOC_CONF option {}", self.option),
            reason: reason.into(),
        }
    }

    fn next(&mut self) -> Option<String> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn expect(&mut self, token: &str) -> Result<()> {
        match self.next() {
            Some(t) if t == token => Ok(()),
            Some(t) => Err(self.error(format!(
                "Error parsing CachingAllocator settings, expected {token} but found {t:?}"
            ))),
            None => Err(self.error(format!(
                "Error parsing CachingAllocator settings, expected {token} at the end"
            ))),
        }
    }

    fn value(&mut self) -> Result<String> {
        self.expect(":")?;
        match self.next() {
            Some(v) if !matches!(v.as_str(), "," | ":" | "[" | "]") => Ok(v),
            _ => Err(self.error(format!("Error, expecting {} value", self.option))),
        }
    }

    fn whole(&self, value: &str) -> Result<usize> {
        value
            .parse()
            .map_err(|_| self.error(format!("{value:?} is not a whole number")))
    }

    fn boolean(&self, value: &str) -> Result<bool> {
        match value {
            "True" => Ok(true),
            "False" => Ok(false),
            _ => Err(self.error(format!(
                "Expected a single True/False argument for {}, got {value:?}",
                self.option
            ))),
        }
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

    /// Applies a setting string to this configuration, as torch's `parseArgs` (and
    /// `torch.cuda.memory._set_allocator_settings`) does: `max_split_size_mb`,
    /// `roundup_power2_divisions` and `garbage_collection_threshold` go back to their defaults
    /// first; the other options keep their value unless the text names them. On error nothing
    /// changes.
    pub fn apply(&mut self, text: &str) -> Result<()> {
        let mut next = self.clone();
        next.max_split_size = usize::MAX;
        next.roundup_power2_divisions = [0; ROUNDUP_INTERVALS];
        next.garbage_collection_threshold = 0.0;
        next.text = text.to_string();
        let mut p = Parser {
            tokens: tokens(text),
            at: 0,
            option: String::new(),
        };
        while let Some(key) = p.next() {
            p.option = key.clone();
            match key.as_str() {
                "max_split_size_mb" => {
                    let mb = {
                        let v = p.value()?;
                        p.whole(&v)?
                    };
                    if mb <= LARGE_BUFFER_MB {
                        return Err(p.error(format!(
                            "CachingAllocator option max_split_size_mb too small, must be > \
                             {LARGE_BUFFER_MB}, got {mb}"
                        )));
                    }
                    next.max_split_size = mb.min(usize::MAX / MIB) * MIB;
                }
                "max_non_split_rounding_mb" => {
                    let mb = {
                        let v = p.value()?;
                        p.whole(&v)?
                    };
                    if mb < LARGE_BUFFER_MB {
                        return Err(p.error(format!(
                            "CachingAllocator option max_non_split_rounding_mb too small, must be \
                             >= {LARGE_BUFFER_MB}, got {mb}"
                        )));
                    }
                    next.max_non_split_rounding_size = mb.min(usize::MAX / MIB) * MIB;
                }
                "garbage_collection_threshold" => {
                    let v = p.value()?;
                    let f: f64 = v
                        .parse()
                        .map_err(|_| p.error(format!("{v:?} is not a number")))?;
                    if f.is_nan() || f <= 0.0 {
                        return Err(p.error(format!(
                            "garbage_collect_threshold too small, set it 0.0~1.0, got {v}"
                        )));
                    }
                    if f >= 1.0 {
                        return Err(p.error(format!(
                            "garbage_collect_threshold too big, set it 0.0~1.0, got {v}"
                        )));
                    }
                    next.garbage_collection_threshold = f;
                }
                "roundup_power2_divisions" => {
                    next.roundup_power2_divisions = parse_divisions(&mut p)?;
                }
                "expandable_segments" => {
                    next.expandable_segments = {
                        let v = p.value()?;
                        p.boolean(&v)?
                    };
                }
                "release_lock_on_cudamalloc" => {
                    next.release_lock_on_cudamalloc = {
                        let v = p.value()?;
                        p.boolean(&v)?
                    };
                }
                "pinned_use_cuda_host_register" => {
                    next.pinned_use_cuda_host_register = {
                        let v = p.value()?;
                        p.boolean(&v)?
                    };
                }
                "pinned_use_background_threads" => {
                    next.pinned_use_background_threads = {
                        let v = p.value()?;
                        p.boolean(&v)?
                    };
                }
                "pinned_num_register_threads" => {
                    let n = {
                        let v = p.value()?;
                        p.whole(&v)?
                    };
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
                    next.pinned_num_register_threads = n;
                }
                "backend" => match p.value()?.as_str() {
                    "native" => {}
                    "cudaMallocAsync" => {
                        return Err(p.error(
                            "gpumem models the native caching allocator only; with \
                             cudaMallocAsync the driver's pool decides what is reserved, and none \
                             of gpumem's numbers would be torch's",
                        ));
                    }
                    other => {
                        return Err(p.error(format!(
                            "Unknown allocator backend {other:?}, options are native and \
                             cudaMallocAsync"
                        )));
                    }
                },
                "," | ":" | "[" | "]" => {
                    return Err(p.error(format!("unexpected {key:?}; expected an option name")));
                }
                other => {
                    return Err(p.error(format!(
                        "Unrecognized CachingAllocator option: {other}; known: max_split_size_mb, \
                         max_non_split_rounding_mb, roundup_power2_divisions, \
                         garbage_collection_threshold, expandable_segments, \
                         release_lock_on_cudamalloc, pinned_use_cuda_host_register, \
                         pinned_num_register_threads, pinned_use_background_threads, backend"
                    )));
                }
            }
            if p.at < p.tokens.len() {
                p.expect(",")?;
            }
        }
        *self = next;
        Ok(())
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
        if self.pinned_use_cuda_host_register {
            notes.push(
                "pinned_use_cuda_host_register:True makes torch pin with malloc + cudaHostRegister; \
                 gpumem always pins with cuMemHostAlloc, so this has no effect"
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
        if self.pinned_num_register_threads != 1 {
            notes.push(format!(
                "pinned_num_register_threads:{} has no effect: gpumem registers no host memory",
                self.pinned_num_register_threads
            ));
        }
        notes
    }

    /// A one-line description of the settings that change numbers (for `doctor` and `replay`).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.max_split_size != usize::MAX {
            parts.push(format!("max_split_size_mb:{}", self.max_split_size / MIB));
        }
        if self.max_non_split_rounding_size != LARGE_BUFFER_MB * MIB {
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

/// `roundup_power2_divisions`: one number for every interval, or `[MB:n,MB:n,>:n]` per interval.
///
/// As torch (the list form's 0 as newer torch, `c10/core/AllocatorConfig.cpp`): the first `MB:n`
/// also fills every interval below it; `>:n` fills from the last
/// interval named (that one included) to the end; intervals between two named ones keep 0.
fn parse_divisions(p: &mut Parser) -> Result<[usize; ROUNDUP_INTERVALS]> {
    p.expect(":")?;
    let mut table = [0; ROUNDUP_INTERVALS];
    let first = p
        .next()
        .ok_or_else(|| p.error("Error, expecting roundup_power2_divisions value"))?;
    if first != "[" {
        let n = p.whole(&first)?;
        if !n.is_power_of_two() {
            return Err(p.error(format!(
                "For roundups, the divisons has to be power of 2, got {n}"
            )));
        }
        return Ok([n; ROUNDUP_INTERVALS]);
    }
    let mut first_value = true;
    let mut last_index = 0;
    loop {
        let interval = p
            .next()
            .ok_or_else(|| p.error("Error parsing roundup_power2_divisions value: no closing ]"))?;
        if interval == "]" {
            break;
        }
        p.expect(":")?;
        let n = match p.next() {
            Some(v) => p.whole(&v)?,
            None => return Err(p.error("Error parsing roundup_power2_divisions value")),
        };
        // In the list form newer torch also takes 0: no rounding for that interval.
        if n != 0 && !n.is_power_of_two() {
            return Err(p.error(format!(
                "For roundups, the divisons has to be power of 2 or 0 to disable roundup, got {n}"
            )));
        }
        if interval == ">" {
            table[last_index..].fill(n);
        } else {
            let mb = p.whole(&interval)?;
            if !mb.is_power_of_two() {
                return Err(p.error(format!(
                    "For roundups, the intervals have to be power of 2, got {mb}"
                )));
            }
            let index = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
            if first_value {
                table[..index].fill(n);
                first_value = false;
            }
            table[index] = n;
            last_index = index;
        }
        match p.tokens.get(p.at).map(String::as_str) {
            Some("]") => {}
            None => {
                return Err(p.error("Error parsing roundup_power2_divisions value: no closing ]"));
            }
            _ => p.expect(",")?,
        }
    }
    Ok(table)
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
        // 64 MiB is interval 6: it and everything below get 8; 128 MiB (7) keeps 0; `>` starts
        // at the last interval named (256 MiB, 8) and overrides its 4.
        let mut expected = [8; ROUNDUP_INTERVALS];
        expected[7] = 0;
        expected[8..].fill(1);
        assert_eq!(c.roundup_power2_divisions, expected);
        assert_eq!(c.divisions_for(1 << 20), 8);
        assert_eq!(c.divisions_for(100 << 20), 8);
        assert_eq!(c.divisions_for(130 << 20), 0);
        assert_eq!(c.divisions_for(300 << 20), 1);
        assert_eq!(c.divisions_for(1 << 40), 1);
        let c = AllocatorConfig::parse("roundup_power2_divisions:[1:2, 2:4]").unwrap();
        assert_eq!(c.divisions_for(1 << 20), 2);
        assert_eq!(c.divisions_for(3 << 20), 4);
        assert_eq!(c.divisions_for(5 << 20), 0);
    }

    #[test]
    fn a_new_setting_string_resets_three_options_as_torch_does() {
        let mut c = AllocatorConfig::parse(
            "max_split_size_mb:64,expandable_segments:True,max_non_split_rounding_mb:40",
        )
        .unwrap();
        c.apply("garbage_collection_threshold:0.5").unwrap();
        assert_eq!(c.max_split_size, usize::MAX);
        assert!(c.expandable_segments, "expandable_segments is kept");
        assert_eq!(c.max_non_split_rounding_size, 40 << 20);
        assert!(c.apply("max_split_size_mb:1").is_err());
        assert_eq!(
            c.garbage_collection_threshold, 0.5,
            "an error changes nothing"
        );
    }

    #[test]
    fn malformed_or_unknown_options_name_the_culprit() {
        for (text, needle) in [
            (
                "max_split_size_mb:abc",
                "max_split_size_mb: \"abc\" is not a whole number",
            ),
            (
                "max_split_size_mb:20",
                "max_split_size_mb too small, must be > 20",
            ),
            (
                "max_non_split_rounding_mb:19",
                "max_non_split_rounding_mb too small, must be >= 20",
            ),
            (
                "roundup_power2_divisions:3",
                "divisons has to be power of 2, got 3",
            ),
            (
                "roundup_power2_divisions:0",
                "divisons has to be power of 2, got 0",
            ),
            (
                "roundup_power2_divisions:[64:3]",
                "power of 2 or 0 to disable roundup, got 3",
            ),
            (
                "roundup_power2_divisions:[63:4]",
                "intervals have to be power of 2, got 63",
            ),
            ("roundup_power2_divisions:[64:4", "no closing ]"),
            (
                "garbage_collection_threshold:1.5",
                "too big, set it 0.0~1.0",
            ),
            (
                "garbage_collection_threshold:0",
                "too small, set it 0.0~1.0",
            ),
            ("cheese:1", "Unrecognized CachingAllocator option: cheese"),
            ("max_split_size_mb", "expected : at the end"),
            (
                "max_split_size_mb:",
                "Error, expecting max_split_size_mb value",
            ),
            (
                "expandable_segments:true",
                "True/False argument for expandable_segments",
            ),
            (
                "release_lock_on_cudamalloc:1",
                "True/False argument for release_lock_on_cudamalloc",
            ),
            (
                "pinned_num_register_threads:3",
                "has to be power of 2, got 3",
            ),
            (
                "pinned_num_register_threads:256",
                "less than or equal to 128",
            ),
            ("backend:cudaMallocAsync", "native caching allocator only"),
            ("backend:magic", "Unknown allocator backend"),
            (
                "max_split_size_mb:64 expandable_segments:True",
                "is not a whole number",
            ),
        ] {
            let err = AllocatorConfig::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
            let option = text.split(':').next().unwrap();
            assert!(
                err.contains(option),
                "{text}: the error names the option: {err}"
            );
        }
    }

    #[test]
    fn options_that_change_nothing_are_accepted_with_a_note() {
        let c = AllocatorConfig::parse(
            "backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,\
             pinned_num_register_threads:8,pinned_use_background_threads:True",
        )
        .unwrap();
        let notes = c.notes();
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[0].contains("no number changes"));
        assert_eq!(c.describe(), "torch's defaults");
    }
}
