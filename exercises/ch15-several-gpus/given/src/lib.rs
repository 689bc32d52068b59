//! Chapter 15's given code: the checkpoint rank 0 saved, the sharded model and the measurement
//! of what each rank holds. A crate of its own, outside your `src/`, so that `check` and `grade`
//! run and measure with this official copy; your crate re-exports it.

pub use ch15_predict::{PerRank, Stage, Training};
use gpumem::autograd::Tensor;
use gpumem::collective::ProcessGroup;
use gpumem::optim::{Adam, AdamOptions};
use gpumem::{Buffer, Device, Error, Result, f16};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

// ANCHOR: checkpoint
/// Tensors saved with `torch.save`: their values and the device each was on when saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// `(device name, values)` of each tensor, in the order saved.
    tensors: Vec<(String, Vec<f32>)>,
}

impl Checkpoint {
    /// `torch.save(tensors)`: copies each buffer's values and remembers its device.
    pub fn save(tensors: &[&Buffer<f32>]) -> Result<Checkpoint> {
        let tensors = tensors
            .iter()
            .map(|t| Ok((t.device().to_string(), t.to_vec()?)))
            .collect::<Result<_>>()?;
        Ok(Checkpoint { tensors })
    }

    /// `torch.load(f, map_location=...)`: without `map_location`, every tensor goes back to the
    /// device it was saved from (rank 0 saved it: device 0), whoever loads it; with it, onto
    /// `map_location`.
    pub fn load(&self, map_location: Option<&Device>) -> Result<Vec<Buffer<f32>>> {
        self.tensors
            .iter()
            .map(|(saved_on, values)| {
                let dev = match map_location {
                    Some(dev) => dev.clone(),
                    None => Device::by_name(saved_on)?,
                };
                dev.from_slice(values)
            })
            .collect()
    }

    /// Bytes of the saved values.
    pub fn bytes(&self) -> u64 {
        self.tensors.iter().map(|(_, v)| 4 * v.len() as u64).sum()
    }
}
// ANCHOR_END: checkpoint

// ANCHOR: fsdp
/// One rank of a fully sharded model: its shard of the parameters (a leaf that requires grad,
/// on the rank's device) and an Adam that updates that shard alone.
pub struct FsdpRank {
    /// This rank's `1/N` of the flat parameters: rank `r` holds elements `r·n/N .. (r+1)·n/N`.
    pub shard: Tensor<f32>,
    /// Adam over `shard` (torch's defaults): its state is made on the first step, shard-sized.
    pub optimizer: Adam<f32>,
}

/// `fully_shard(model)`: splits `params` into `world_size` equal shards, rank `r`'s on its own
/// device. The length must divide by the world size (FSDP pads it; here it is refused).
pub fn shard_model(group: &ProcessGroup, params: &[f32]) -> Result<Vec<FsdpRank>> {
    let n = group.world_size();
    if !params.len().is_multiple_of(n) {
        return Err(Error::BadCollective {
            op: "shard_model",
            reason: format!(
                "{} parameters do not split into {n} equal shards",
                params.len()
            ),
        });
    }
    params
        .chunks(params.len() / n)
        .zip(group.devices())
        .map(|(chunk, dev)| {
            let shard = Tensor::from_slice(dev, chunk, &[chunk.len()])?.requires_grad_(true)?;
            let optimizer = Adam::new(vec![shard.clone()], AdamOptions::default())?;
            Ok(FsdpRank { shard, optimizer })
        })
        .collect()
}

/// The gradient of the toy loss `½‖params − batch‖²` for one rank's batch: `params − batch`,
/// a new buffer on the parameters' device. It needs the whole parameters, as a forward and a
/// backward need every layer's.
pub fn local_gradient(params: &Buffer<f32>, batch: &[f32]) -> Result<Buffer<f32>> {
    if batch.len() != params.len() {
        return Err(Error::LengthMismatch {
            expected: params.len(),
            actual: batch.len(),
        });
    }
    let grad: Vec<f32> = params
        .to_vec()?
        .iter()
        .zip(batch)
        .map(|(p, b)| p - b)
        .collect();
    params.device().from_slice(&grad)
}
// ANCHOR_END: fsdp

// ANCHOR: measure
/// Builds on every rank of `group` what `training` keeps there between steps (fp16 parameters
/// and gradients, `K/4` fp32 buffers of optimizer state, each whole or the rank's shard) and
/// measures each rank's allocated bytes after each part: one [`PerRank`] per rank. Up to 256 Ki
/// parameters (every buffer at most 1 MiB), a multiple of 256 × the world size.
pub fn measure_per_rank(group: &ProcessGroup, training: Training) -> Result<Vec<PerRank>> {
    let n = group.world_size() as u64;
    // Every buffer whole blocks of the small pool (at most 1 MiB, a multiple of 512 B): a block
    // of its own exact size, never a segment's rest.
    if training.ranks != n || !training.params.is_multiple_of(256 * n) || 4 * training.params > MIB
    {
        return Err(Error::BadCollective {
            op: "measure_per_rank",
            reason: format!(
                "{training:?} on {n} ranks: give the group's world size and a multiple of 256 × it \
                 parameters, at most 256 Ki"
            ),
        });
    }
    let shard = |sharded: bool| {
        (if sharded {
            training.params / n
        } else {
            training.params
        }) as usize
    };
    let (p, g) = match training.stage {
        Stage::Ddp | Stage::Zero1 => (false, false),
        Stage::Zero2 => (false, true),
        Stage::Zero3 => (true, true),
    };
    let os = training.stage != Stage::Ddp;
    group
        .devices()
        .iter()
        .map(|dev| {
            let start = dev.memory_allocated();
            let params = dev.alloc::<f16>(shard(p))?;
            let after_params = dev.memory_allocated();
            let grads = dev.alloc::<f16>(shard(g))?;
            let after_grads = dev.memory_allocated();
            let state = (0..training.optimizer_bytes_per_param / 4)
                .map(|_| dev.alloc::<f32>(shard(os)))
                .collect::<Result<Vec<_>>>()?;
            let measured = PerRank {
                params: after_params - start,
                grads: after_grads - after_params,
                optimizer: dev.memory_allocated() - after_grads,
            };
            drop((params, grads, state));
            Ok(measured)
        })
        .collect()
}
// ANCHOR_END: measure
