//! Chapter 13 walkthrough: the KV cache of a served model, sized from its config; a stream of
//! requests shaped like the vLLM paper's ShareGPT workload, served with each request reserving
//! its maximum length and with blocks handed out on demand; where the memory went, by kind; a
//! prompt shared by four samples; and a small pool stepped through, block by block. Runs on
//! `GPUMEM_DEVICE` (default: cuda:0 if there is one, else cpu) and works unsolved: it uses only
//! gpumem.
//!
//! `cargo run -p ch13-kv-cache --example walkthrough`

use anyhow::Context;
use gpumem::kv_cache::{BlockPool, BlockTable, KvConfig};
use gpumem::ops::DType;
use gpumem::serving::{
    Report, Request, Scheme, Server, StepView, StreamShape, request_stream, serve,
};
use gpumem::{Device, SnapshotRequest};

const MIB: u64 = 1 << 20;

/// Mistral-7B-v0.1's attention, as its config.json gives it (the chapter's first exercise).
fn mistral_7b() -> KvConfig {
    KvConfig {
        layers: 32,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        dtype: DType::BF16,
    }
}

/// The two comparison tables, narrow enough for a terminal (and a phone): how the schemes ran,
/// then where the KV memory they held went. Token states are the utilisation.
fn tables(reports: &[Report]) -> String {
    let mut out = format!(
        "  {:<16} {:>6}  {:>12}  {:>12}  {:>9}\n",
        "scheme", "steps", "mean running", "most running", "preempted"
    );
    for r in reports {
        out += &format!(
            "  {:<16} {:>6}  {:>12.1}  {:>12}  {:>9}\n",
            r.scheme.name(),
            r.steps,
            r.mean_running(),
            r.max_running,
            r.preemptions
        );
    }
    out += &format!(
        "\n  {:<16} {:>7} {:>9} {:>9} {:>9} {:>9}\n",
        "scheme", "tokens", "reserved", "internal", "external", "unfilled"
    );
    for r in reports {
        let w = r.waste;
        let share = |part: u64| format!("{:.1} %", 100.0 * part as f64 / w.held() as f64);
        let unfilled = match r.scheme {
            Scheme::Contiguous => "—".to_string(),
            Scheme::Paged { block_size } => format!("{} ≤ {}", r.max_unfilled, block_size - 1),
        };
        out += &format!(
            "  {:<16} {:>7} {:>9} {:>9} {:>9} {:>9}\n",
            r.scheme.name(),
            share(w.token_states),
            share(w.reservation),
            share(w.internal),
            share(w.external),
            unfilled
        );
    }
    out
}

/// The small run the book's block view steps through: six requests, a pool of 16 blocks of 8.
fn small_run(dev: &Device) -> anyhow::Result<String> {
    let kv = KvConfig {
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        dtype: DType::F16,
    };
    let requests: Vec<Request> = [
        (0, 20, 30),
        (1, 45, 12),
        (3, 8, 40),
        (5, 30, 25),
        (6, 50, 10),
        (9, 16, 33),
    ]
    .iter()
    .enumerate()
    .map(|(id, &(arrival, prompt, output))| Request {
        id: id as u64,
        arrival,
        prompt,
        output,
    })
    .collect();
    // 16 blocks of 8 tokens: a pool the view can show whole.
    let server = Server {
        kv,
        budget: 16 * 8 * kv.bytes_per_token() as u64,
        max_len: 128,
        max_running: 8,
    };
    let mut steps: Vec<String> = Vec::new();
    let report = serve(
        dev,
        &server,
        Scheme::Paged { block_size: 8 },
        &requests,
        |s: &StepView| {
            let running: Vec<String> = s
                .running
                .iter()
                .map(|r| {
                    format!(
                        "[{},{},{},{:?}]",
                        r.request.id,
                        r.request.prompt + r.generated,
                        r.request.total(),
                        r.blocks
                    )
                })
                .collect();
            steps.push(format!(
                "{{\"step\":{},\"running\":[{}],\"waiting\":{:?},\"preempted\":{:?}}}",
                s.step,
                running.join(","),
                s.waiting,
                s.preempted
            ));
        },
    )?;
    println!(
        "  6 requests, a pool of 16 blocks of 8 tokens: {} steps, {} preemption{}, at most {} running",
        report.steps,
        report.preemptions,
        if report.preemptions == 1 { "" } else { "s" },
        report.max_running
    );
    Ok(format!(
        "{{\"block_size\":8,\"num_blocks\":16,\"steps\":[\n{}\n]}}",
        steps.join(",\n")
    ))
}

fn main() -> anyhow::Result<()> {
    let dev = Device::from_env().context("opening the device named by GPUMEM_DEVICE")?;
    let name = dev.properties().map(|p| p.name).unwrap_or_default();
    println!("device {dev} ({name})");

    println!("\n== The KV cache, sized from the config ==");
    for (name, kv) in [
        ("Mistral-7B-v0.1, bf16", mistral_7b()),
        ("OPT-13B, f16 (the paper's)", KvConfig::opt_13b()),
    ] {
        let per_token = kv.bytes_per_token() as u64;
        println!(
            "  {name:<28} {} layers x {} KV heads x {} x {} B x 2: {:>6.1} KiB per token, {:>6} MiB for 2048 tokens, {:>6} MiB for 32768",
            kv.layers,
            kv.kv_heads,
            kv.head_dim,
            kv.dtype.size(),
            per_token as f64 / 1024.0,
            per_token * 2048 / MIB,
            per_token * 32768 / MIB
        );
    }
    let window = 4096;
    println!(
        "  (32768 tokens: a model of Mistral's shape with full attention, Mistral-7B-v0.2; v0.1's sliding window of {window} tokens caps a cache that keeps only the window at {} MiB. OPT-13B's context is 2048 tokens.)",
        mistral_7b().bytes_per_token() as u64 * window / MIB
    );

    // The paper's setting, one layer of OPT-13B in forty: every size is the model's / 40, and the
    // allocator treats a 40 MiB region as it treats a 1600 MiB one (its own segment, rounded to
    // 2 MiB), so every share below is the whole model's.
    let kv = KvConfig {
        layers: 1,
        ..KvConfig::opt_13b()
    };
    let max_len = 2048;
    let region = (max_len * kv.bytes_per_token()) as u64;
    let server = Server {
        kv,
        budget: 7 * region,
        max_len,
        max_running: 256,
    };
    let shape = StreamShape {
        requests: 200,
        mean_gap: 2,
        max_len,
        seed: 2023,
    };
    let stream = request_stream(shape);
    let mean =
        |f: fn(&Request) -> usize| stream.iter().map(f).sum::<usize>() as f64 / stream.len() as f64;
    println!("\n== A ShareGPT-shaped stream, served two ways ==");
    println!(
        "  {} requests (seed {}), a request every {:.1} steps on average;\n  prompts {:.1} tokens and outputs {:.1} on average, the longest {} in all",
        stream.len(),
        shape.seed,
        stream.last().map_or(0, |r| r.arrival) as f64 / stream.len() as f64,
        mean(|r| r.prompt),
        mean(|r| r.output),
        stream.iter().map(Request::total).max().unwrap_or(0)
    );
    println!(
        "  OPT-13B, one layer in 40: {} KiB per token, regions of {max_len} tokens = {} MiB,\n  a KV budget of {} MiB (seven regions)",
        kv.bytes_per_token() / 1024,
        region / MIB,
        server.budget / MIB
    );
    // The pictures show the contiguous run's allocator at step 400, and the history up to it.
    let mut snapshot = Some(SnapshotRequest::from_env(&dev));
    dev.record_annotation("1. Contiguous: a region of 2048 tokens per request");
    let mut snapshot_error = None;
    let contiguous = serve(&dev, &server, Scheme::Contiguous, &stream, |s| {
        if s.step == 400
            && let Some(request) = snapshot.take()
        {
            snapshot_error = request.write(&dev).err();
        }
    })?;
    if let Some(e) = snapshot_error {
        return Err(e).context("writing the snapshot");
    }
    dev.record_memory_history(false);
    let contiguous_ooms = dev.memory_stats().get("num_ooms").unwrap_or(0);
    dev.empty_cache();
    let mut reports = vec![contiguous];
    for block_size in [8, 16, 32] {
        reports.push(serve(
            &dev,
            &server,
            Scheme::Paged { block_size },
            &stream,
            |_| {},
        )?);
    }
    println!("\n{}", tables(&reports));
    println!(
        "  (shares of the KV memory held, summed over every step; tokens: token states, the\n   utilisation; reserved: slots kept for output still to come; unfilled: the most slots a\n   request's last block left empty; the allocator's out-of-memory errors in the contiguous\n   run: {contiguous_ooms})"
    );

    println!("\n== Four samples of one prompt (parallel sampling) ==");
    let mut pool = BlockPool::new(&dev, kv, 16, 64)?;
    let mut prompt = BlockTable::new();
    prompt
        .append_tokens(&mut pool, 100)
        .map_err(|_| anyhow::anyhow!("the pool holds the prompt"))?;
    let mut samples: Vec<BlockTable> = (0..3).map(|_| prompt.fork(&mut pool)).collect();
    samples.push(prompt);
    for _ in 0..20 {
        for s in &mut samples {
            s.append_token(&mut pool)
                .map_err(|_| anyhow::anyhow!("the pool holds the samples"))?;
        }
    }
    println!(
        "  a 100-token prompt, 4 samples of 20 tokens, blocks of 16: {} blocks held ({} copied on write); without sharing {}",
        pool.num_blocks() - pool.num_free(),
        pool.copies(),
        4 * BlockTable::blocks_for(120, 16)
    );
    drop(samples);
    drop(pool);

    println!("\n== A small pool, step by step (the book's block view) ==");
    let blocks = small_run(&dev)?;
    if let Some(file) = std::env::var_os("GPUMEM_SNAPSHOT").filter(|f| !f.is_empty()) {
        // The block view's steps travel in the snapshot file, beside the allocator's history.
        let text = std::fs::read_to_string(&file).context("reading the snapshot back")?;
        let mut json: serde_json::Value = serde_json::from_str(&text).context("the snapshot")?;
        json["kv_blocks"] = serde_json::from_str(&blocks).context("the block view's steps")?;
        std::fs::write(&file, serde_json::to_string_pretty(&json)?).context("the snapshot")?;
    }
    Ok(())
}
