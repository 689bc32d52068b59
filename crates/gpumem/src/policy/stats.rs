//! The allocator's statistics, under torch's own key names, and `memory_summary`'s table.

use std::collections::BTreeMap;

/// One counter with its peak and running totals, as torch's `Stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    /// Value now.
    pub current: u64,
    /// Highest `current` since the last peak reset.
    pub peak: u64,
    /// Total ever added since the last accumulated reset.
    pub allocated: u64,
    /// Total ever taken away since the last accumulated reset.
    pub freed: u64,
}

impl Stat {
    /// Adds `n`.
    #[inline]
    pub fn increase(&mut self, n: u64) {
        self.current += n;
        self.allocated += n;
        self.peak = self.peak.max(self.current);
    }

    /// Takes `n` away.
    #[inline]
    pub fn decrease(&mut self, n: u64) {
        debug_assert!(self.current >= n, "stat underflow");
        self.current -= n;
        self.freed += n;
    }

    fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Which pool a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    /// Requests up to 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

/// A stat kept for all pools together and for each pool: `all`, `small_pool`, `large_pool`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// The small pool.
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    /// Adds `n` to `all` and to `pool`.
    #[inline]
    pub fn increase(&mut self, pool: Pool, n: u64) {
        self.all.increase(n);
        self.pool_mut(pool).increase(n);
    }

    /// Takes `n` from `all` and from `pool`.
    #[inline]
    pub fn decrease(&mut self, pool: Pool, n: u64) {
        self.all.decrease(n);
        self.pool_mut(pool).decrease(n);
    }

    #[inline]
    fn pool_mut(&mut self, pool: Pool) -> &mut Stat {
        match pool {
            Pool::Small => &mut self.small_pool,
            Pool::Large => &mut self.large_pool,
        }
    }

    fn stats_mut(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }
}

/// The allocator's raw counters; `MemoryStats` is their public, torch-keyed view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Live (allocated) blocks.
    pub allocation: StatArray,
    /// Reserved segments.
    pub segment: StatArray,
    /// Blocks that are allocated or waiting for a stream to finish with them.
    pub active: StatArray,
    /// Free blocks that are part of a split segment (they keep the segment from being released).
    pub inactive_split: StatArray,
    /// Bytes in live blocks.
    pub allocated_bytes: StatArray,
    /// Bytes in reserved segments.
    pub reserved_bytes: StatArray,
    /// Bytes in active blocks.
    pub active_bytes: StatArray,
    /// Bytes in inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for (before rounding).
    pub requested_bytes: StatArray,
    /// Live blocks of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    /// Reservations retried after releasing the whole cache.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Times the allocator waited for all streams (to release cached memory).
    pub num_sync_all_streams: u64,
    /// Segments reserved from the device.
    pub num_device_alloc: u64,
    /// Segments returned to the device.
    pub num_device_free: u64,
    /// Allocations refused before asking the device, by torch 2.15's `throw_on_cudamalloc_oom`
    /// with a memory fraction; gpumem refuses that option, so this stays 0 (the key is torch's).
    pub num_oom_rejections: u64,
    /// The `max_split_size` setting in bytes; `u64::MAX` when unset (torch reports the same bits
    /// as -1, its `int64_t` of `SIZE_MAX`).
    pub max_split_size: u64,
}

impl DeviceStats {
    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    fn for_each_stat(&mut self, mut f: impl FnMut(&mut Stat)) {
        for array in self.arrays_mut() {
            for stat in array.stats_mut() {
                f(stat);
            }
        }
        f(&mut self.oversize_allocations);
        f(&mut self.oversize_segments);
    }

    /// Sets every peak to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        self.for_each_stat(Stat::reset_peak);
    }

    /// Zeroes the running totals and event counters (`reset_accumulated_memory_stats`).
    pub fn reset_accumulated(&mut self) {
        self.for_each_stat(Stat::reset_accumulated);
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.num_oom_rejections = 0;
    }

    /// The torch-keyed view of these counters.
    pub fn to_memory_stats(&self) -> MemoryStats {
        let mut map = BTreeMap::new();
        let mut put_stat = |prefix: &str, stat: &Stat| {
            map.insert(format!("{prefix}.current"), stat.current);
            map.insert(format!("{prefix}.peak"), stat.peak);
            map.insert(format!("{prefix}.allocated"), stat.allocated);
            map.insert(format!("{prefix}.freed"), stat.freed);
        };
        let arrays: [(&str, &StatArray); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        for (name, array) in arrays {
            put_stat(&format!("{name}.all"), &array.all);
            put_stat(&format!("{name}.large_pool"), &array.large_pool);
            put_stat(&format!("{name}.small_pool"), &array.small_pool);
        }
        put_stat("oversize_allocations", &self.oversize_allocations);
        put_stat("oversize_segments", &self.oversize_segments);
        map.insert("num_alloc_retries".into(), self.num_alloc_retries);
        map.insert("num_ooms".into(), self.num_ooms);
        map.insert("num_sync_all_streams".into(), self.num_sync_all_streams);
        map.insert("num_device_alloc".into(), self.num_device_alloc);
        map.insert("num_device_free".into(), self.num_device_free);
        map.insert("num_oom_rejections".into(), self.num_oom_rejections);
        map.insert("max_split_size".into(), self.max_split_size);
        MemoryStats { map }
    }
}

/// `torch.cuda.memory_stats()`: every counter under torch's key, iterated in sorted order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct MemoryStats {
    map: BTreeMap<String, u64>,
}

impl MemoryStats {
    /// The value of one key, such as `allocated_bytes.all.current`.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.map.get(key).copied()
    }

    /// Every `(key, value)` pair, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.map.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: every key is always present.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn value(&self, key: &str) -> u64 {
        self.get(key).unwrap_or(0)
    }

    /// The table `torch.cuda.memory_summary()` prints, for the device named `device`.
    pub fn summary(&self, device: &str) -> String {
        let rule = |c: char| c.to_string().repeat(75);
        let mut lines: Vec<String> = vec![
            rule('='),
            format!(
                " {:16} PyTorch CUDA memory summary, device ID {:<17} ",
                "",
                device_id(device)
            ),
            rule('-'),
            format!(
                "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
                "",
                self.value("num_ooms"),
                "",
                self.value("num_alloc_retries")
            ),
            rule('='),
            "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".into(),
        ];
        let rows: [(&str, &str, Formatter); 9] = [
            ("allocated_bytes", "Allocated memory", format_size),
            ("active_bytes", "Active memory", format_size),
            ("requested_bytes", "Requested memory", format_size),
            ("reserved_bytes", "GPU reserved memory", format_size),
            ("inactive_split_bytes", "Non-releasable memory", format_size),
            ("allocation", "Allocations", format_count),
            ("active", "Active allocs", format_count),
            ("segment", "GPU reserved segments", format_count),
            ("inactive_split", "Non-releasable allocs", format_count),
        ];
        for (key, title, fmt) in rows {
            lines.push(rule('-'));
            let all = self.columns(&format!("{key}.all"));
            for (pool, name) in [
                ("all", title),
                ("large_pool", "      from large pool"),
                ("small_pool", "      from small pool"),
            ] {
                let cols = self.columns(&format!("{key}.{pool}"));
                lines.push(row(name, cols, all, fmt));
            }
        }
        for (key, title) in [
            ("oversize_allocations", "Oversize allocations"),
            ("oversize_segments", "Oversize GPU segments"),
        ] {
            lines.push(rule('-'));
            let cols = self.columns(key);
            lines.push(row(title, cols, cols, format_count));
        }
        lines.push(rule('='));
        let mut out = String::new();
        for line in lines {
            out.push('|');
            out.push_str(&line);
            out.push_str("|\n");
        }
        out
    }

    fn columns(&self, prefix: &str) -> [u64; 4] {
        ["current", "peak", "allocated", "freed"].map(|c| self.value(&format!("{prefix}.{c}")))
    }
}

/// torch's device ID in the summary's header: N for `cuda:N`, 0 for the `cpu` device (which
/// stands in for the first GPU).
fn device_id(device: &str) -> usize {
    device
        .strip_prefix("cuda:")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Formats a cell given its value and the "all" row's value (which picks the unit).
type Formatter = fn(u64, u64) -> String;

fn row(name: &str, cols: [u64; 4], pref: [u64; 4], fmt: Formatter) -> String {
    format!(
        " {name:<21} | {} | {} | {} | {} ",
        fmt(cols[0], pref[0]),
        fmt(cols[1], pref[1]),
        fmt(cols[2], pref[2]),
        fmt(cols[3], pref[3])
    )
}

/// torch's `_format_size`: the unit follows the "all" row so the pool rows line up with it.
fn format_size(mut value: u64, pref: u64) -> String {
    let prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut prefix = prefixes[0];
    let mut pref = pref as f64;
    for next in &prefixes[1..] {
        if pref < 768.0 * 1024.0 {
            break;
        }
        prefix = next;
        value /= 1024;
        pref /= 1024.0;
    }
    format!("{value:>6} {prefix}")
}

/// torch's `_format_count`.
fn format_count(mut value: u64, pref: u64) -> String {
    let prefixes = [" ", "K", "M"];
    let mut prefix = prefixes[0];
    let mut pref = pref as f64;
    for next in &prefixes[1..] {
        if pref < 750.0 * 1000.0 {
            break;
        }
        prefix = next;
        value /= 1000;
        pref /= 1000.0;
    }
    format!("{value:>7} {prefix} ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_holds_until_reset() {
        let mut s = Stat::default();
        s.increase(10);
        s.decrease(4);
        assert_eq!((s.current, s.peak, s.allocated, s.freed), (6, 10, 10, 4));
        s.reset_peak();
        assert_eq!(s.peak, 6);
        s.reset_accumulated();
        assert_eq!((s.current, s.allocated, s.freed), (6, 0, 0));
    }

    #[test]
    fn every_torch_key_is_present() {
        let stats = DeviceStats::default().to_memory_stats();
        // 9 pooled stats x 3 pools x 4 fields + 2 oversize x 4 + 6 counters + max_split_size
        // (torch 2.15's `memory_stats()` keys; `reserved_bytes_by_private_pools.*` has none
        // without private pools, and gpumem has none).
        assert_eq!(stats.len(), 9 * 3 * 4 + 2 * 4 + 6 + 1);
        assert_eq!(stats.get("num_oom_rejections"), Some(0));
        assert_eq!(stats.get("allocated_bytes.all.current"), Some(0));
        assert_eq!(stats.get("inactive_split_bytes.small_pool.peak"), Some(0));
        assert_eq!(stats.get("requested_bytes.large_pool.freed"), Some(0));
        assert_eq!(stats.get("oversize_segments.allocated"), Some(0));
        assert_eq!(stats.get("num_device_free"), Some(0));
        assert_eq!(stats.get("no.such.key"), None);
        let keys: Vec<&str> = stats.iter().map(|(k, _)| k).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn summary_is_torchs_text() {
        let mut d = DeviceStats::default();
        d.allocated_bytes.increase(Pool::Small, 512);
        d.reserved_bytes.increase(Pool::Small, 2 << 20);
        // torch 2.15.0's `torch.cuda.memory_summary(device=0)` for these statistics (its
        // `memory_stats` given the same numbers, run on cpu, 2026-11-25), byte for byte.
        let torch = r"|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |    512 B   |    512 B   |    512 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |    512 B   |    512 B   |    512 B   |      0 B   |
|---------------------------------------------------------------------------|
| Active memory         |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Requested memory      |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |
|       from large pool |      0 KiB |      0 KiB |      0 KiB |      0 B   |
|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Active allocs         |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| GPU reserved segments |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
";
        assert_eq!(d.to_memory_stats().summary("cpu"), torch);
        assert!(
            d.to_memory_stats()
                .summary("cuda:1")
                .contains("PyTorch CUDA memory summary, device ID 1 ")
        );
    }
}
