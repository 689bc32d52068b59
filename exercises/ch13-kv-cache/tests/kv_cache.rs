//! Graded tests for chapter 13: serving — the KV cache, and why vLLM pages it.

use ch13_kv_cache::{
    Appended, DType, KvConfig, OutOfBlocks, Pool, Sequence, Waste, decode_step, kv_bytes,
    mistral_7b, step_waste, tiny_model,
};
use ch13_predict::{Fit, predict_fit};
use gpumem::kv_cache::{BlockPool, BlockTable, ContiguousCache};
use gpumem::serving::{
    Request, RunningView, Scheme, Server, StepView, StreamShape, request_stream, serve,
};
use gpumem::testing::device;
use std::collections::VecDeque;

const MIB: u64 = 1 << 20;

// ---- size_kv_cache ----

#[test]
fn mistral_7b_is_its_config_json() {
    let m = mistral_7b();
    assert_eq!(
        (m.layers, m.heads, m.kv_heads, m.head_dim, m.dtype),
        (32, 32, 8, 128, DType::BF16),
        "Mistral-7B-v0.1: num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8, \
         hidden_size 4096, served in bf16"
    );
}

#[test]
fn kv_bytes_follows_the_formula() {
    assert_eq!(
        kv_bytes(&mistral_7b(), 1),
        131_072,
        "one Mistral-7B token: 128 KiB"
    );
    assert_eq!(
        kv_bytes(&mistral_7b(), 32_768),
        4 << 30,
        "a 32k context: 4 GiB"
    );
    assert_eq!(kv_bytes(&tiny_model(), 1), 1024);
    let opt_13b = KvConfig {
        layers: 40,
        heads: 40,
        kv_heads: 40,
        head_dim: 128,
        dtype: DType::F16,
    };
    assert_eq!(
        kv_bytes(&opt_13b, 1),
        819_200,
        "the vLLM paper's 800 KB per OPT-13B token"
    );
    let one_kv_head = KvConfig {
        kv_heads: 1,
        dtype: DType::F32,
        ..mistral_7b()
    };
    assert_eq!(
        kv_bytes(&one_kv_head, 3),
        3 * 2 * 32 * 128 * 4,
        "multi-query attention, f32"
    );
}

#[test]
fn kv_bytes_is_what_a_pool_of_that_many_tokens_allocates() {
    let dev = device();
    let _pool = BlockPool::new(&dev, tiny_model(), 16, 10).expect("a pool");
    // Yours first, then what the pool allocated.
    assert_eq!(
        kv_bytes(&tiny_model(), 160),
        dev.memory_allocated(),
        "the KV bytes of 160 tokens: what a pool of 10 blocks of 16 tokens allocates"
    );
}

// ---- predict_fit ----

/// Regions of `max_len` tokens reserved until the allocator, capped at `budget`, refuses one.
fn measured_contiguous(dev: &gpumem::Device, max_len: usize, budget: u64) -> usize {
    let mut cache = ContiguousCache::new(dev, tiny_model(), max_len, budget).expect("a cache");
    let mut n = 0;
    while cache.reserve(n).expect("no other error") {
        n += 1;
    }
    n as usize
}

/// The KV bytes of one token of `config`, computed here (not by your `kv_bytes`).
fn token_bytes(config: &KvConfig) -> u64 {
    2 * (config.layers * config.kv_heads * config.head_dim * config.dtype.size()) as u64
}

#[test]
fn contiguous_prediction_matches_the_allocator() {
    gpumem::testing::seeded(|| {
        let dev = device();
        // Regions of 300 KiB (small pool), 1.5 and 2 MiB (20 MiB segments), 11.7 MiB (own segment);
        // the pools' edges, exactly 1 MiB (still the small pool) and exactly 10 MiB (already a
        // segment of its own), in 30 MiB, which no 20 MiB segment divides (so `<` and `<=` give
        // different counts); then two drawn on this run (a copied number passes one case at most).
        let mut draw = gpumem::testing::Draw::from_env();
        let mut cases: Vec<(usize, u64)> = [300, 1500, 2048, 12_000]
            .map(|max_len| (max_len, 40 * MIB))
            .to_vec();
        cases.extend([(1024, 30 * MIB), (10_240, 30 * MIB)]);
        for _ in 0..2 {
            cases.push((draw.size(1, 16_000), 2 * MIB * draw.range(10, 40)));
        }
        let bytes = token_bytes(&tiny_model());
        for (max_len, budget) in cases {
            let predicted = predict_fit(bytes, budget, max_len, 16, 100).contiguous;
            let measured = measured_contiguous(&dev, max_len, budget);
            gpumem::testing::reset(&dev);
            assert_eq!(
                predicted,
                measured,
                "regions of {max_len} tokens (1 KiB each) in a budget of {} MiB: you predicted \
             {predicted} (the rules: a region is one block, rounded to 512 B, in a segment of \
             2 MiB up to 1 MiB, 20 MiB below 10 MiB, else its own rounded to 2 MiB)",
                budget / MIB
            );
        }
    })
}

#[test]
fn paged_prediction_matches_the_pool() {
    gpumem::testing::seeded(|| {
        let dev = device();
        let mut draw = gpumem::testing::Draw::from_env();
        let mut cases = vec![
            (16, 500, 40 * MIB),
            (16, 17, 40 * MIB),
            (32, 1000, 40 * MIB),
        ];
        for _ in 0..2 {
            cases.push((
                draw.pick(&[8, 16, 32]),
                draw.size(1, 3000),
                2 * MIB * draw.range(10, 40),
            ));
        }
        let bytes = token_bytes(&tiny_model());
        for (block_size, tokens, budget) in cases {
            let predicted = predict_fit(bytes, budget, 2048, block_size, tokens).paged;
            let blocks = (budget / (bytes * block_size as u64)) as usize;
            let mut pool = BlockPool::new(&dev, tiny_model(), block_size, blocks).expect("a pool");
            let mut measured = 0;
            while BlockTable::new().append_tokens(&mut pool, tokens).is_ok() {
                measured += 1;
            }
            drop(pool);
            gpumem::testing::reset(&dev);
            assert_eq!(
                predicted,
                measured,
                "requests of {tokens} tokens, blocks of {block_size}, {} MiB: you predicted \
             {predicted} (the rule: the pool's blocks divided by the blocks one request needs)",
                budget / MIB
            );
        }
    })
}

#[test]
fn mistral_on_a_16_gib_budget() {
    assert_eq!(
        predict_fit(token_bytes(&mistral_7b()), 16 << 30, 32_768, 16, 1000),
        Fit {
            contiguous: 4,
            paged: 130
        },
        "4 GiB regions; 8192 blocks of 2 MiB, 63 per request of 1000 tokens"
    );
}

// ---- pool ----

#[test]
fn pool_is_one_allocator_block_per_layer() {
    let dev = device();
    let pool = Pool::new(&dev, &tiny_model(), 16, 64).expect("a pool");
    assert_eq!(pool.layers.len(), 2);
    assert_eq!(
        dev.memory_allocated(),
        MIB,
        "64 blocks of 16 tokens of 1 KiB"
    );
    assert_eq!(dev.memory_stats().get("allocation.all.current"), Some(2));
    assert_eq!(pool.free, (0..64).collect::<VecDeque<u32>>());
    assert_eq!(pool.refs, vec![0; 64]);
}

#[test]
fn allocate_takes_the_front_and_release_gives_to_the_back() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 16, 3).expect("a pool");
    assert_eq!((pool.allocate(), pool.allocate()), (Some(0), Some(1)));
    assert_eq!(pool.refs, vec![1, 1, 0]);
    pool.release(0);
    assert_eq!(pool.free, VecDeque::from([2, 0]));
    assert_eq!(
        (pool.allocate(), pool.allocate(), pool.allocate()),
        (Some(2), Some(0), None)
    );
}

#[test]
fn a_shared_block_is_free_only_after_its_last_holder() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 16, 2).expect("a pool");
    let block = pool.allocate().expect("a block");
    pool.refs[block as usize] += 1;
    pool.release(block);
    assert_eq!((pool.refs[0], pool.free.len()), (1, 1));
    pool.release(block);
    assert_eq!((pool.refs[0], pool.free.len()), (0, 2));
}

// ---- block_table ----

fn sequence(pool: &mut Pool, id: u64, tokens: usize) -> Sequence {
    let mut s = Sequence {
        id,
        ..Sequence::default()
    };
    for _ in 0..tokens {
        s.append_token(pool).expect("room for the prompt");
    }
    s
}

#[test]
fn tokens_fill_a_block_before_taking_the_next() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 4, 4).expect("a pool");
    let mut s = Sequence::default();
    assert_eq!(s.append_token(&mut pool), Ok(Appended::NewBlock));
    for _ in 0..3 {
        assert_eq!(s.append_token(&mut pool), Ok(Appended::InLastBlock));
    }
    assert_eq!(s.append_token(&mut pool), Ok(Appended::NewBlock));
    assert_eq!((s.blocks.clone(), s.tokens), (vec![0, 1], 5));
    s.release(&mut pool);
    assert_eq!(
        (s.blocks.len(), s.tokens),
        (0, 5),
        "release keeps the count to recompute"
    );
    assert_eq!(pool.free, VecDeque::from([2, 3, 0, 1]));
}

#[test]
fn out_of_blocks_leaves_the_sequence_as_it_was() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 4, 1).expect("a pool");
    let mut s = sequence(&mut pool, 0, 4);
    assert_eq!(s.append_token(&mut pool), Err(OutOfBlocks));
    assert_eq!((s.blocks.clone(), s.tokens), (vec![0], 4));
}

#[test]
fn a_fork_shares_the_prompt_and_copies_its_last_block_on_write() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 4, 8).expect("a pool");
    let mut first = sequence(&mut pool, 0, 6);
    let mut second = first.fork(&mut pool, 1);
    assert_eq!(
        (second.id, second.blocks.clone(), second.tokens),
        (1, vec![0, 1], 6)
    );
    assert_eq!((pool.refs[0], pool.refs[1], pool.free.len()), (2, 2, 6));
    assert_eq!(first.append_token(&mut pool), Ok(Appended::CopiedOnWrite));
    assert_eq!(first.blocks, vec![0, 2]);
    assert_eq!(
        second.append_token(&mut pool),
        Ok(Appended::InLastBlock),
        "now its own"
    );
    assert_eq!((pool.refs[0], pool.refs[1], pool.refs[2]), (2, 1, 1));
}

#[test]
fn four_samples_of_one_prompt_hold_14_blocks_not_32() {
    let dev = device();
    let before = dev.memory_allocated();
    let mut pool = Pool::new(&dev, &tiny_model(), 16, 64).expect("a pool");
    let pool_bytes = dev.memory_allocated() - before;
    let prompt = sequence(&mut pool, 0, 100);
    let mut samples: Vec<Sequence> = (1..4).map(|id| prompt.fork(&mut pool, id)).collect();
    samples.insert(0, prompt);
    for _ in 0..20 {
        for s in &mut samples {
            s.append_token(&mut pool).expect("room");
        }
    }
    assert_eq!(
        64 - pool.free.len(),
        14,
        "6 shared full blocks, the 7th and 3 copies, 4 new"
    );
    assert_eq!(
        dev.memory_allocated() - before,
        pool_bytes,
        "blocks come from the pool"
    );
}

// ---- step_waste ----

fn running(prompt: usize, output: usize, generated: usize, blocks: Vec<u32>) -> RunningView {
    RunningView {
        request: Request {
            id: 0,
            arrival: 0,
            prompt,
            output,
        },
        generated,
        blocks,
    }
}

#[test]
fn step_waste_by_hand() {
    let contiguous = StepView {
        step: 0,
        running: vec![running(10, 20, 5, vec![]), running(3, 4, 1, vec![])],
        allocated: 2 * 64 + 4,
        reserved: 200,
        free_blocks: 0,
        waiting: vec![],
        preempted: vec![],
    };
    assert_eq!(
        step_waste(&contiguous, Scheme::Contiguous, 64, 1),
        Waste {
            token_states: 19,
            reservation: 18,
            internal: 34 + 57 + 4,
            external: 68,
        }
    );
    let paged = StepView {
        running: vec![running(10, 20, 5, vec![0]), running(3, 4, 1, vec![1])],
        ..contiguous
    };
    assert_eq!(
        step_waste(&paged, Scheme::Paged { block_size: 16 }, 64, 2),
        Waste {
            token_states: 38,
            reservation: 0,
            internal: 2 + 24,
            external: 0,
        }
    );
}

#[test]
fn step_waste_summed_is_what_the_simulator_measured() {
    let dev = device();
    let server = Server {
        kv: tiny_model(),
        budget: 4 * MIB,
        max_len: 512,
        max_running: 64,
    };
    let stream = request_stream(StreamShape {
        requests: 40,
        mean_gap: 4,
        max_len: 512,
        seed: 7,
    });
    for scheme in [Scheme::Contiguous, Scheme::Paged { block_size: 16 }] {
        let mut sum = Waste::default();
        let report = serve(&dev, &server, scheme, &stream, |step| {
            let w = step_waste(step, scheme, 512, 1024);
            sum.token_states += w.token_states;
            sum.reservation += w.reservation;
            sum.internal += w.internal;
            sum.external += w.external;
        })
        .expect("the run");
        assert_eq!(sum, report.waste, "{}", scheme.name());
    }
}

// ---- decode_step ----

#[test]
fn decode_step_preempts_the_request_admitted_last() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 4, 4).expect("a pool");
    let allocated = dev.memory_allocated();
    let mut running: Vec<Sequence> = (0..3).map(|id| sequence(&mut pool, id, 4)).collect();
    let mut waiting = VecDeque::from([sequence(&mut pool, 9, 0)]);
    assert_eq!(decode_step(&mut pool, &mut running, &mut waiting), vec![2]);
    assert_eq!(
        running
            .iter()
            .map(|s| (s.id, s.blocks.clone(), s.tokens))
            .collect::<Vec<_>>(),
        vec![(0, vec![0, 3], 5), (1, vec![1, 2], 5)]
    );
    assert_eq!(
        waiting
            .iter()
            .map(|s| (s.id, s.blocks.len(), s.tokens))
            .collect::<Vec<_>>(),
        vec![(2, 0, 4), (9, 0, 0)],
        "the preempted request goes first, to recompute its 4 tokens"
    );
    assert_eq!(
        dev.memory_allocated(),
        allocated,
        "no allocation: no out-of-memory"
    );
    assert_eq!(dev.memory_stats().get("num_ooms"), Some(0));
}

#[test]
fn decode_step_preempts_the_last_request_itself_when_it_finds_no_block() {
    let dev = device();
    let mut pool = Pool::new(&dev, &tiny_model(), 4, 2).expect("a pool");
    let mut running = vec![sequence(&mut pool, 0, 3), sequence(&mut pool, 1, 4)];
    let mut waiting = VecDeque::new();
    assert_eq!(decode_step(&mut pool, &mut running, &mut waiting), vec![1]);
    assert_eq!(running.len(), 1);
    assert_eq!((running[0].blocks.clone(), running[0].tokens), (vec![0], 4));
    assert_eq!((waiting[0].id, waiting[0].tokens), (1, 4));
    assert_eq!(pool.free, VecDeque::from([1]));
}
