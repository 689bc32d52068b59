//! A small pseudo-random generator for initial weights, test data and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};

/// xorshift64* (Marsaglia, Vigna): fast, reproducible from its seed, not for cryptography.
#[derive(Debug, Clone)]
pub struct XorShift {
    seed: u64,
    state: u64,
}

/// splitmix64's finaliser: spreads any seed (0 too) over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl XorShift {
    /// A generator that gives the same numbers for the same seed.
    pub fn new(seed: u64) -> XorShift {
        let state = mix(seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
        XorShift {
            seed,
            state: if state == 0 {
                0x2545_f491_4f6c_dd1d
            } else {
                state
            },
        }
    }

    /// A generator with a fresh seed (the clock and a process-wide counter); print
    /// [`seed`](Self::seed) to reproduce a run.
    pub fn fresh() -> XorShift {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        XorShift::new(mix(nanos ^ mix(count) ^ std::process::id() as u64))
    }

    /// The seed this generator started from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A float uniform in `[0, 1)`, on a grid of 2^-24.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// A float uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.next_f32()
    }

    /// `n` floats uniform in `[lo, hi)`.
    pub fn uniform_vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// `n` floats whose magnitudes are uniform in `[lo, hi)` (0 < lo), each with a random sign:
    /// test data that is never zero and never subnormal.
    pub fn nonzero_vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = self.uniform(lo, hi);
                if self.next_u64() >> 63 == 1 { -v } else { v }
            })
            .collect()
    }
}
