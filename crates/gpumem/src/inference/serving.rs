//! A serving simulator: a seeded stream of requests, served with continuous batching (a request
//! joins the batch at any step and leaves the step it completes) from a KV cache held either
//! contiguously ([`ContiguousCache`]) or in blocks ([`BlockPool`], [`BlockTable`]), preempting
//! (free the blocks, recompute later) when blocks run out, and measuring every step where the KV
//! memory goes.
//!
//! One step is one forward pass of the batch: every running request gains one token; a request
//! admitted in a step has its prompt (and, after a preemption, the tokens it had generated)
//! written at once and gains its first new token.

use crate::error::{Error, Result};
use crate::inference::kv_cache::{
    BlockPool, BlockTable, ContiguousCache, KvConfig, OutOfBlocks, RequestId,
};
use crate::memory::device::Device;
use crate::ops::XorShift;
use std::collections::VecDeque;

/// One request of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Its number, from 0 in arrival order.
    pub id: RequestId,
    /// The step it arrives at.
    pub arrival: u64,
    /// Prompt tokens.
    pub prompt: usize,
    /// Tokens it will generate (the model stops there; the server does not know it in advance).
    pub output: usize,
}

impl Request {
    /// Prompt and output: the tokens it holds when it completes.
    pub fn total(&self) -> usize {
        self.prompt + self.output
    }
}

/// A length distribution as points of its inverse CDF: (cumulative probability in thousandths,
/// tokens), interpolated linearly between points in integers, so a seed gives the same lengths on
/// every platform.
pub type Quantiles = [(u64, usize)];

/// Prompt lengths shaped like the vLLM paper's ShareGPT workload (long, heavy-tailed); mean about
/// 170 tokens.
pub const SHAREGPT_PROMPT: [(u64, usize); 8] = [
    (0, 4),
    (100, 12),
    (250, 30),
    (500, 75),
    (750, 180),
    (900, 400),
    (970, 800),
    (1000, 1500),
];

/// Output lengths shaped like the vLLM paper's ShareGPT workload; mean about 330 tokens.
pub const SHAREGPT_OUTPUT: [(u64, usize); 8] = [
    (0, 4),
    (100, 30),
    (250, 90),
    (500, 230),
    (750, 450),
    (900, 750),
    (970, 1100),
    (1000, 1500),
];

/// Draws one length from `quantiles` (which start at 0 and end at 1000 thousandths).
pub fn sample_length(rng: &mut XorShift, quantiles: &Quantiles) -> usize {
    let u = rng.next_u64() % 1_000_000; // millionths
    for pair in quantiles.windows(2) {
        let ((p0, l0), (p1, l1)) = (pair[0], pair[1]);
        let (lo, hi) = (p0 * 1000, p1 * 1000);
        if u < hi {
            let span = (l1 - l0) as u64;
            return l0 + (span * (u - lo) / (hi - lo)) as usize;
        }
    }
    quantiles.last().map_or(1, |&(_, l)| l)
}

/// What a stream looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamShape {
    /// How many requests.
    pub requests: usize,
    /// Mean steps between arrivals (geometric gaps: a Bernoulli process, the discrete Poisson).
    pub mean_gap: u64,
    /// Longest prompt + output: outputs are cut so that a request fits (the model's context).
    pub max_len: usize,
    /// The seed of the generator ([`XorShift`]).
    pub seed: u64,
}

/// A stream of requests with ShareGPT-shaped lengths ([`SHAREGPT_PROMPT`], [`SHAREGPT_OUTPUT`]).
pub fn request_stream(shape: StreamShape) -> Vec<Request> {
    let mut rng = XorShift::new(shape.seed);
    let max_len = shape.max_len.max(2);
    let mut at = 0;
    (0..shape.requests as u64)
        .map(|id| {
            while !rng.next_u64().is_multiple_of(shape.mean_gap + 1) {
                at += 1;
            }
            let prompt = sample_length(&mut rng, &SHAREGPT_PROMPT).clamp(1, max_len - 1);
            let output = sample_length(&mut rng, &SHAREGPT_OUTPUT).clamp(1, max_len - prompt);
            Request {
                id,
                arrival: at,
                prompt,
                output,
            }
        })
        .collect()
}

/// How the KV cache is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// One region of `max_len` tokens per request, through the caching allocator.
    Contiguous,
    /// A pool of blocks of `block_size` tokens, a block table per request.
    Paged {
        /// Tokens per block (vLLM's default: 16).
        block_size: usize,
    },
}

impl Scheme {
    /// `contiguous` or `paged (block 16)`.
    pub fn name(&self) -> String {
        match self {
            Scheme::Contiguous => "contiguous".into(),
            Scheme::Paged { block_size } => format!("paged (block {block_size})"),
        }
    }
}

/// The server's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// The model's KV cache shape.
    pub kv: KvConfig,
    /// Bytes for the KV cache: the contiguous scheme's allocator cap, the paged scheme's pool
    /// (`budget / block_bytes` blocks). A multiple of 2 MiB.
    pub budget: u64,
    /// The contiguous scheme's region, in tokens (the model's context).
    pub max_len: usize,
    /// At most this many requests run at once (vLLM's `max_num_seqs`).
    pub max_running: usize,
}

/// Where the KV memory went, in bytes, summed over the steps (divide by the steps for a mean).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waste {
    /// Slots holding a token's keys and values.
    pub token_states: u64,
    /// Slots reserved for tokens a request will still generate (contiguous only).
    pub reservation: u64,
    /// Slots a request holds but will never fill: past its final length in a region, the
    /// unfilled tail of its last block.
    pub internal: u64,
    /// Reserved by the allocator but in no request's region (torch's "reserved but unallocated").
    pub external: u64,
}

impl Waste {
    /// Everything held for the requests: the sum of the four.
    pub fn held(&self) -> u64 {
        self.token_states + self.reservation + self.internal + self.external
    }

    /// Token states ÷ held.
    pub fn utilisation(&self) -> f64 {
        self.token_states as f64 / self.held().max(1) as f64
    }

    fn add(&mut self, other: Waste) {
        self.token_states += other.token_states;
        self.reservation += other.reservation;
        self.internal += other.internal;
        self.external += other.external;
    }
}

/// What a run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    /// The scheme.
    pub scheme: Scheme,
    /// Steps until the last request completed.
    pub steps: u64,
    /// Requests completed (all of them).
    pub completed: usize,
    /// Requests preempted (their blocks freed, recomputed later).
    pub preemptions: u64,
    /// The most requests running in one step.
    pub max_running: usize,
    /// Requests running, summed over the steps.
    pub running_steps: u64,
    /// Where the memory went, summed over the steps.
    pub waste: Waste,
    /// The most unfilled slots one request held in its last block (paged; 0 for contiguous).
    pub max_unfilled: usize,
}

impl Report {
    /// Requests running in the mean step.
    pub fn mean_running(&self) -> f64 {
        self.running_steps as f64 / self.steps.max(1) as f64
    }
}

/// A running request.
struct Running {
    request: Request,
    generated: usize,
    table: BlockTable,
}

/// Which cache the run uses.
enum Cache {
    Contiguous(ContiguousCache),
    Paged(BlockPool),
}

/// A running request as a step left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningView {
    /// The request.
    pub request: Request,
    /// Tokens generated so far (the request holds `prompt + generated`).
    pub generated: usize,
    /// Its blocks, in token order (empty for the contiguous scheme).
    pub blocks: Vec<u32>,
}

/// One step as the simulator saw it, after admission and before completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepView {
    /// The step.
    pub step: u64,
    /// The running requests, in batch order (admitted first, first).
    pub running: Vec<RunningView>,
    /// Bytes the allocator holds in live blocks for the cache, above what it held before the run.
    pub allocated: u64,
    /// Bytes the allocator has reserved, above what it had reserved before the run.
    pub reserved: u64,
    /// Free blocks in the pool (0 for the contiguous scheme).
    pub free_blocks: usize,
    /// Requests waiting (arrived, or preempted), in queue order.
    pub waiting: Vec<RequestId>,
    /// Requests preempted in this step.
    pub preempted: Vec<RequestId>,
}

/// Serves `requests` (sorted by arrival) with `scheme`, step by step, until every request has
/// completed; `on_step` sees each step.
pub fn serve(
    dev: &Device,
    server: &Server,
    scheme: Scheme,
    requests: &[Request],
    mut on_step: impl FnMut(&StepView),
) -> Result<Report> {
    let bpt = server.kv.bytes_per_token() as u64;
    let mut cache = match scheme {
        Scheme::Contiguous => Cache::Contiguous(ContiguousCache::new(
            dev,
            server.kv,
            server.max_len,
            server.budget,
        )?),
        Scheme::Paged { block_size } => {
            let block_bytes = (block_size * server.kv.bytes_per_token()) as u64;
            let blocks = (server.budget / block_bytes.max(1)) as usize;
            Cache::Paged(BlockPool::new(dev, server.kv, block_size, blocks)?)
        }
    };
    let (allocated0, reserved0) = (dev.memory_allocated(), dev.memory_reserved());
    let mut arrivals: VecDeque<Request> = requests.iter().copied().collect();
    let mut waiting: VecDeque<(Request, usize)> = VecDeque::new();
    let mut running: Vec<Running> = Vec::new();
    let mut report = Report {
        scheme,
        steps: 0,
        completed: 0,
        preemptions: 0,
        max_running: 0,
        running_steps: 0,
        waste: Waste::default(),
        max_unfilled: 0,
    };
    let mut step = 0u64;
    while report.completed < requests.len() {
        while arrivals.front().is_some_and(|r| r.arrival <= step) {
            let request = arrivals.pop_front().expect("a front");
            if request.total() > server.max_len {
                return Err(too_long(&request, server.max_len));
            }
            waiting.push_back((request, 0));
        }
        // The running requests each gain a token; a request that finds no block preempts the
        // request admitted last (itself, if it is the last).
        let mut preempted = Vec::new();
        let mut i = 0;
        while i < running.len() {
            if let Cache::Paged(pool) = &mut cache {
                loop {
                    match running[i].table.append_token(pool) {
                        Ok(_) => break,
                        Err(OutOfBlocks) => {
                            let mut victim = running.pop().expect("the request itself runs");
                            victim.table.release(pool);
                            preempted.push(victim.request.id);
                            report.preemptions += 1;
                            waiting.push_front((victim.request, victim.generated));
                            if running.len() == i {
                                break;
                            }
                        }
                    }
                }
            }
            if i < running.len() {
                running[i].generated += 1;
            }
            i += 1;
        }
        // Admission, first come first served, only in a step that preempted nobody.
        while preempted.is_empty() && running.len() < server.max_running {
            let Some(&(request, generated)) = waiting.front() else {
                break;
            };
            let mut table = BlockTable::new();
            let admitted = match &mut cache {
                Cache::Contiguous(slots) => slots.reserve(request.id)?,
                Cache::Paged(pool) => {
                    let tokens = request.prompt + generated + 1;
                    let need = BlockTable::blocks_for(tokens, pool.block_size());
                    // vLLM keeps 1 % of the blocks free on admission, so that the requests
                    // running can grow a while before one is preempted.
                    let watermark = pool.num_blocks() / 100;
                    pool.num_free() >= need + watermark && table.append_tokens(pool, tokens).is_ok()
                }
            };
            if !admitted {
                if running.is_empty() {
                    return Err(never_fits(&request, scheme));
                }
                break;
            }
            waiting.pop_front();
            running.push(Running {
                request,
                generated: generated + 1,
                table,
            });
        }
        // Measure the step.
        let mut waste = Waste::default();
        for r in &running {
            let held = r.request.prompt + r.generated;
            waste.token_states += held as u64 * bpt;
            match &cache {
                Cache::Contiguous(_) => {
                    waste.reservation += (r.request.total() - held) as u64 * bpt;
                    waste.internal += (server.max_len - r.request.total()) as u64 * bpt;
                }
                Cache::Paged(pool) => {
                    let unfilled = r.table.blocks.len() * pool.block_size() - held;
                    waste.internal += unfilled as u64 * bpt;
                    report.max_unfilled = report.max_unfilled.max(unfilled);
                }
            }
        }
        let allocated = dev.memory_allocated() - allocated0;
        let reserved = dev.memory_reserved() - reserved0;
        if let Cache::Contiguous(slots) = &cache {
            let regions = slots.len() as u64 * slots.slot_bytes() as u64;
            // The allocator rounds a region up (to 512 B): never used, like the region's tail.
            waste.internal += allocated - regions;
            waste.external += reserved - allocated;
        }
        report.waste.add(waste);
        report.max_running = report.max_running.max(running.len());
        report.running_steps += running.len() as u64;
        on_step(&StepView {
            step,
            running: running
                .iter()
                .map(|r| RunningView {
                    request: r.request,
                    generated: r.generated,
                    blocks: r.table.blocks.clone(),
                })
                .collect(),
            allocated,
            reserved,
            free_blocks: match &cache {
                Cache::Contiguous(_) => 0,
                Cache::Paged(pool) => pool.num_free(),
            },
            waiting: waiting.iter().map(|(r, _)| r.id).collect(),
            preempted,
        });
        // Completion: the requests that generated their last token leave the batch.
        let mut k = 0;
        while k < running.len() {
            if running[k].generated == running[k].request.output {
                let mut done = running.remove(k);
                match &mut cache {
                    Cache::Contiguous(slots) => {
                        slots.release(done.request.id);
                    }
                    Cache::Paged(pool) => done.table.release(pool),
                }
                report.completed += 1;
            } else {
                k += 1;
            }
        }
        step += 1;
    }
    report.steps = step;
    Ok(report)
}

fn too_long(request: &Request, max_len: usize) -> Error {
    Error::InvalidArgument {
        op: "serve",
        device: "any".into(),
        message: format!(
            "request {} needs {} tokens ({} prompt + {} output) but max_len is {max_len}",
            request.id,
            request.total(),
            request.prompt,
            request.output
        ),
    }
}

fn never_fits(request: &Request, scheme: Scheme) -> Error {
    Error::InvalidArgument {
        op: "serve",
        device: "any".into(),
        message: format!(
            "request {} ({} prompt tokens) does not fit an empty {} KV cache: raise the budget",
            request.id,
            request.prompt,
            scheme.name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::DType;
    use crate::testing;

    fn tiny() -> KvConfig {
        KvConfig {
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            dtype: DType::F16,
        }
    }

    fn shape() -> StreamShape {
        StreamShape {
            requests: 40,
            mean_gap: 4,
            max_len: 512,
            seed: 7,
        }
    }

    #[test]
    fn the_stream_is_the_same_for_the_same_seed() {
        let stream = request_stream(shape());
        assert_eq!(stream, request_stream(shape()));
        assert_eq!(stream.len(), 40);
        assert_eq!(
            stream[..3]
                .iter()
                .map(|r| (r.arrival, r.prompt, r.output))
                .collect::<Vec<_>>(),
            vec![(14, 9, 159), (21, 11, 130), (24, 511, 1)]
        );
        assert!(
            stream
                .iter()
                .all(|r| r.total() <= 512 && r.prompt >= 1 && r.output >= 1)
        );
    }

    #[test]
    fn both_schemes_serve_every_request_and_account_for_every_byte() {
        let dev = testing::device();
        let server = Server {
            kv: tiny(),
            budget: 4 << 20,
            max_len: 512,
            max_running: 64,
        };
        let stream = request_stream(shape());
        let contiguous = serve(&dev, &server, Scheme::Contiguous, &stream, |_| {}).unwrap();
        let paged = serve(
            &dev,
            &server,
            Scheme::Paged { block_size: 16 },
            &stream,
            |_| {},
        )
        .unwrap();
        assert_eq!((contiguous.completed, paged.completed), (40, 40));
        // The same requests, each running for its output's steps: the same token states.
        assert_eq!(contiguous.running_steps, paged.running_steps);
        assert_eq!(
            (
                contiguous.steps,
                contiguous.max_running,
                contiguous.preemptions
            ),
            (1453, 8, 0)
        );
        assert_eq!(
            (paged.steps, paged.max_running, paged.preemptions),
            (999, 20, 18)
        );
        assert_eq!(
            contiguous.waste,
            Waste {
                token_states: 2_570_670_080,
                reservation: 1_763_219_456,
                internal: 534_648_832,
                external: 1_104_150_528,
            }
        );
        assert_eq!(
            paged.waste,
            Waste {
                token_states: 2_570_670_080,
                reservation: 0,
                internal: 70_856_704,
                external: 0,
            }
        );
        // Paged: never more than one unfilled block's worth per request.
        assert_eq!(paged.max_unfilled, 15);
        assert_eq!(dev.memory_allocated(), 0);
    }

    #[test]
    fn a_prompt_larger_than_the_whole_pool_is_an_error_not_a_hang() {
        let dev = testing::device();
        let server = Server {
            kv: tiny(),
            budget: 2 << 20,
            max_len: 4096,
            max_running: 8,
        };
        let request = Request {
            id: 0,
            arrival: 0,
            prompt: 3000,
            output: 1,
        };
        let message = serve(
            &dev,
            &server,
            Scheme::Paged { block_size: 16 },
            &[request],
            |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            message.contains("does not fit an empty paged (block 16) KV cache"),
            "{message}"
        );
    }
}
