//! Collectives over several devices of one process: a [`ProcessGroup`] is torch.distributed's
//! process group with one rank per device (`cpu`, `cpu:1`, ...), and its all-gather,
//! reduce-scatter and all-reduce write into buffers allocated on each rank's device, from that
//! device's caching allocator, as NCCL's and gloo's output tensors are. DDP's gradient buckets
//! ([`GradBuckets`]) are such buffers too.
//!
//! The data travels through the host (each input is read back, the result written to each
//! output), so the transfer counters show a device-to-host copy per input and a host-to-device
//! copy per output; what the chapter measures is the memory, which is the same as with NCCL.
//! Sums run in f32 in rank order.

use crate::error::{Error, Result};
use crate::memory::buffer::Buffer;
use crate::memory::device::Device;

/// The size at which DDP closes its first gradient bucket (torch's
/// `dist._DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB).
pub const DEFAULT_FIRST_BUCKET_BYTES: usize = 1 << 20;
/// The size at which DDP closes every later bucket (`bucket_cap_mb`'s default, 25 MiB).
pub const DEFAULT_BUCKET_CAP_BYTES: usize = 25 << 20;

/// Ranks that run collectives together, one device each (`torch.distributed`'s process group).
#[derive(Debug, Clone)]
pub struct ProcessGroup {
    devices: Vec<Device>,
}

impl ProcessGroup {
    /// A group whose rank `r` runs on `devices[r]`; an error when it is empty or a device is
    /// named twice (two ranks of one process on one device would share its allocator).
    pub fn new(devices: Vec<Device>) -> Result<ProcessGroup> {
        if devices.is_empty() {
            return Err(Error::BadCollective {
                op: "ProcessGroup::new",
                reason: "a group needs at least one device".into(),
            });
        }
        for (rank, dev) in devices.iter().enumerate() {
            if let Some(first) = devices[..rank].iter().position(|d| d == dev) {
                return Err(Error::BadCollective {
                    op: "ProcessGroup::new",
                    reason: format!("ranks {first} and {rank} are both on {dev}"),
                });
            }
        }
        Ok(ProcessGroup { devices })
    }

    /// A group of `world_size` ranks on `cpu`, `cpu:1`, ... `cpu:{world_size - 1}`.
    pub fn cpu(world_size: usize) -> Result<ProcessGroup> {
        let devices = (0..world_size)
            .map(Device::cpu_n)
            .collect::<Result<Vec<_>>>()?;
        ProcessGroup::new(devices)
    }

    /// How many ranks (`dist.get_world_size()`).
    pub fn world_size(&self) -> usize {
        self.devices.len()
    }

    /// The device of each rank, in rank order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device of `rank`; an error naming the world size past the last rank.
    pub fn device(&self, rank: usize) -> Result<&Device> {
        self.devices.get(rank).ok_or_else(|| Error::BadCollective {
            op: "ProcessGroup::device",
            reason: format!(
                "there is no rank {rank} in a group of {} ranks",
                self.world_size()
            ),
        })
    }

    /// Checks that `inputs` holds one buffer per rank, each on its rank's device, all of one
    /// length, and returns that length.
    fn check_inputs(&self, op: &'static str, inputs: &[&Buffer<f32>]) -> Result<usize> {
        if inputs.len() != self.world_size() {
            return Err(Error::BadCollective {
                op,
                reason: format!(
                    "{} buffers for {} ranks: give one per rank, in rank order",
                    inputs.len(),
                    self.world_size()
                ),
            });
        }
        let len = inputs[0].len();
        for (rank, (buf, dev)) in inputs.iter().zip(&self.devices).enumerate() {
            if buf.device() != dev {
                return Err(Error::BadCollective {
                    op,
                    reason: format!("rank {rank}'s buffer is on {}, not on {dev}", buf.device()),
                });
            }
            if buf.len() != len {
                return Err(Error::BadCollective {
                    op,
                    reason: format!(
                        "rank {rank}'s buffer holds {} elements, rank 0's {len}",
                        buf.len()
                    ),
                });
            }
        }
        Ok(len)
    }

    /// The sum over ranks of `inputs`, on the host.
    fn host_sum(inputs: &[&Buffer<f32>], len: usize) -> Result<Vec<f32>> {
        let mut sum = vec![0.0f32; len];
        for buf in inputs {
            for (s, x) in sum.iter_mut().zip(buf.to_vec()?) {
                *s += x;
            }
        }
        Ok(sum)
    }

    /// `dist.all_gather_into_tensor`: every rank gets, in a new buffer of `world_size × shard`
    /// elements on its own device, every rank's shard in rank order (what FSDP gathers before
    /// it computes with a layer's parameters).
    pub fn all_gather(&self, shards: &[&Buffer<f32>]) -> Result<Vec<Buffer<f32>>> {
        let len = self.check_inputs("all_gather", shards)?;
        let mut whole = Vec::with_capacity(len * self.world_size());
        for shard in shards {
            whole.extend(shard.to_vec()?);
        }
        self.devices
            .iter()
            .map(|dev| dev.from_slice(&whole))
            .collect()
    }

    /// `dist.reduce_scatter_tensor` with `ReduceOp.SUM`: rank `r` gets, in a new buffer of
    /// `len / world_size` elements on its own device, the sum over ranks of chunk `r` of their
    /// inputs (what FSDP does with gradients). The length must divide by the world size.
    pub fn reduce_scatter(&self, inputs: &[&Buffer<f32>]) -> Result<Vec<Buffer<f32>>> {
        let len = self.check_inputs("reduce_scatter", inputs)?;
        if len % self.world_size() != 0 {
            return Err(Error::BadCollective {
                op: "reduce_scatter",
                reason: format!(
                    "{len} elements do not split into {} equal chunks (pad the input)",
                    self.world_size()
                ),
            });
        }
        let sum = Self::host_sum(inputs, len)?;
        let chunk = len / self.world_size();
        self.devices
            .iter()
            .enumerate()
            .map(|(rank, dev)| dev.from_slice(&sum[rank * chunk..(rank + 1) * chunk]))
            .collect()
    }

    /// `dist.all_reduce` with `ReduceOp.SUM`, in place: every rank's buffer becomes the sum of
    /// all of them. Allocates nothing.
    pub fn all_reduce(&self, buffers: &mut [Buffer<f32>]) -> Result<()> {
        let mut refs: Vec<&mut Buffer<f32>> = buffers.iter_mut().collect();
        self.all_reduce_each(&mut refs)
    }

    /// [`all_reduce`](Self::all_reduce) over buffers held elsewhere (DDP's buckets).
    fn all_reduce_each(&self, buffers: &mut [&mut Buffer<f32>]) -> Result<()> {
        let sum = {
            let inputs: Vec<&Buffer<f32>> = buffers.iter().map(|b| &**b).collect();
            let len = self.check_inputs("all_reduce", &inputs)?;
            Self::host_sum(&inputs, len)?
        };
        for buf in buffers.iter_mut() {
            buf.copy_from_slice(&sum)?;
        }
        Ok(())
    }
}

/// DDP's gradient buckets: on every rank, flat buffers that the gradients are copied into, all-
/// reduced and averaged in, and copied back from (torch's `Reducer`, without
/// `gradient_as_bucket_view`). They are allocated once, when DDP wraps the model, and live as
/// long as it: a copy of the gradients' size on every rank.
#[derive(Debug)]
pub struct GradBuckets {
    /// Which gradients each bucket holds, by index, in bucket order.
    members: Vec<Vec<usize>>,
    /// The gradients' lengths, by index.
    lens: Vec<usize>,
    /// `buffers[rank][bucket]`.
    buffers: Vec<Vec<Buffer<f32>>>,
}

impl GradBuckets {
    /// Buckets for gradients of `lens` elements (f32), filled in the order given: a bucket
    /// closes once it holds `first_bucket_bytes` or more (the first) or `bucket_cap_bytes` or
    /// more (every later one), as torch's `compute_bucket_assignment_by_size`. (torch 2.15's DDP
    /// uses a 1 MiB first bucket only when `bucket_cap_mb` is left at its default, 25.)
    /// Allocates each bucket on every rank.
    pub fn new(
        group: &ProcessGroup,
        lens: &[usize],
        first_bucket_bytes: usize,
        bucket_cap_bytes: usize,
    ) -> Result<GradBuckets> {
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let mut open_bytes = 0usize;
        for (i, &len) in lens.iter().enumerate() {
            open.push(i);
            open_bytes += len * size_of::<f32>();
            let limit = if members.is_empty() {
                first_bucket_bytes
            } else {
                bucket_cap_bytes
            };
            if open_bytes >= limit {
                members.push(std::mem::take(&mut open));
                open_bytes = 0;
            }
        }
        if !open.is_empty() {
            members.push(open);
        }
        let sizes: Vec<usize> = members
            .iter()
            .map(|m| m.iter().map(|&i| lens[i]).sum())
            .collect();
        let buffers = group
            .devices()
            .iter()
            .map(|dev| sizes.iter().map(|&n| dev.alloc::<f32>(n)).collect())
            .collect::<Result<Vec<Vec<_>>>>()?;
        Ok(GradBuckets {
            members,
            lens: lens.to_vec(),
            buffers,
        })
    }

    /// The gradients (by index) each bucket holds, in bucket order.
    pub fn members(&self) -> &[Vec<usize>] {
        &self.members
    }

    /// Each bucket's length in elements, in bucket order.
    pub fn bucket_lens(&self) -> Vec<usize> {
        self.buffers
            .first()
            .map(|b| b.iter().map(Buffer::len).collect())
            .unwrap_or_default()
    }

    /// DDP's gradient synchronisation: `grads[rank][i]` is rank `rank`'s gradient `i`; each is
    /// copied into its bucket, each bucket all-reduced and divided by the world size, and the
    /// averages copied back into the gradients.
    pub fn all_reduce(
        &mut self,
        group: &ProcessGroup,
        grads: &mut [Vec<Buffer<f32>>],
    ) -> Result<()> {
        if grads.len() != self.buffers.len() || grads.iter().any(|g| g.len() != self.lens.len()) {
            return Err(Error::BadCollective {
                op: "GradBuckets::all_reduce",
                reason: format!(
                    "give {} gradients for each of {} ranks, as the buckets were made for",
                    self.lens.len(),
                    self.buffers.len()
                ),
            });
        }
        let scale = 1.0 / group.world_size() as f32;
        for (bucket, members) in self.members.iter().enumerate() {
            for (rank, rank_grads) in grads.iter().enumerate() {
                let mut flat = Vec::with_capacity(self.buffers[rank][bucket].len());
                for &i in members {
                    if rank_grads[i].len() != self.lens[i] {
                        return Err(Error::LengthMismatch {
                            expected: self.lens[i],
                            actual: rank_grads[i].len(),
                        });
                    }
                    flat.extend(rank_grads[i].to_vec()?);
                }
                self.buffers[rank][bucket].copy_from_slice(&flat)?;
            }
            let mut bucket_bufs: Vec<&mut Buffer<f32>> =
                self.buffers.iter_mut().map(|b| &mut b[bucket]).collect();
            group.all_reduce_each(&mut bucket_bufs)?;
            for (rank, rank_grads) in grads.iter_mut().enumerate() {
                let averaged: Vec<f32> = self.buffers[rank][bucket]
                    .to_vec()?
                    .into_iter()
                    .map(|x| x * scale)
                    .collect();
                let mut at = 0;
                for &i in members {
                    rank_grads[i].copy_from_slice(&averaged[at..at + self.lens[i]])?;
                    at += self.lens[i];
                }
            }
        }
        Ok(())
    }
}
