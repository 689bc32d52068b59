//! `GPUMEM_ALLOC_CONF`: torch's `PYTORCH_CUDA_ALLOC_CONF` syntax for the caching allocator's knobs.

use crate::error::{Error, Result};

const MIB: usize = 1 << 20;

/// The caching allocator's tunables. `Default` is torch's default behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// Blocks of at least this size are never split ("oversize"); `usize::MAX` when unset.
    pub max_split_size: usize,
    /// Round requests up to this many divisions of each power-of-two interval (0 or 1: off).
    pub roundup_power2_divisions: usize,
    /// Reclaim old cached blocks once reserved memory exceeds this fraction of the process's
    /// allowed memory (needs a memory fraction to be set, as in torch); 0.0: off.
    pub garbage_collection_threshold: f64,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: usize::MAX,
            roundup_power2_divisions: 0,
            garbage_collection_threshold: 0.0,
        }
    }
}

impl AllocatorConfig {
    /// Parses `key:value,key:value` as torch does; an empty string is the default.
    pub fn parse(text: &str) -> Result<AllocatorConfig> {
        let mut config = AllocatorConfig::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |reason: String| Error::BadSetting {
                setting: format!("GPUMEM_ALLOC_CONF option {item:?}"),
                reason,
            };
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| bad("expected key:value".to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "max_split_size_mb" => {
                    let mb: usize = value
                        .parse()
                        .map_err(|_| bad(format!("{value:?} is not a whole number of MiB")))?;
                    if mb <= 20 {
                        return Err(bad(format!(
                            "max_split_size_mb must be more than 20 (the large-segment size), got {mb}"
                        )));
                    }
                    config.max_split_size = mb
                        .checked_mul(MIB)
                        .ok_or_else(|| bad(format!("{mb} MiB is too large")))?;
                }
                "roundup_power2_divisions" => {
                    let n: usize = value.parse().map_err(|_| {
                        bad(format!(
                            "{value:?} is not a whole number (per-size lists are not supported)"
                        ))
                    })?;
                    if n != 0 && !n.is_power_of_two() {
                        return Err(bad(format!("divisions must be a power of two, got {n}")));
                    }
                    config.roundup_power2_divisions = n;
                }
                "garbage_collection_threshold" => {
                    let f: f64 = value
                        .parse()
                        .map_err(|_| bad(format!("{value:?} is not a number")))?;
                    if !(f > 0.0 && f < 1.0) {
                        return Err(bad(format!("must be between 0 and 1 (exclusive), got {f}")));
                    }
                    config.garbage_collection_threshold = f;
                }
                "expandable_segments" if value.eq_ignore_ascii_case("false") => {}
                "expandable_segments" => {
                    return Err(bad(
                        "expandable segments are not modelled by gpumem; only False is accepted"
                            .into(),
                    ));
                }
                other => {
                    return Err(bad(format!(
                        "unknown option {other:?}; known: max_split_size_mb, roundup_power2_divisions, \
                         garbage_collection_threshold, expandable_segments"
                    )));
                }
            }
        }
        Ok(config)
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
        assert_eq!(c.roundup_power2_divisions, 4);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig::default()
        );
    }

    #[test]
    fn malformed_or_unknown_options_name_the_culprit() {
        for (text, needle) in [
            ("max_split_size_mb:abc", "max_split_size_mb:abc"),
            ("max_split_size_mb:20", "more than 20"),
            ("roundup_power2_divisions:3", "power of two"),
            ("garbage_collection_threshold:1.5", "between 0 and 1"),
            ("cheese:1", "unknown option \"cheese\""),
            ("max_split_size_mb", "expected key:value"),
            ("expandable_segments:True", "not modelled"),
        ] {
            let err = AllocatorConfig::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
