//! Several cpu devices in one process, and the collectives of a process group over them.

use gpumem::collective::{GradBuckets, ProcessGroup};
use gpumem::{Buffer, Device, DeviceKind, Error};

const MIB: usize = 1 << 20;

#[test]
fn cpu_devices_are_named_like_cuda_devices() {
    let _group = gpumem::testing::devices(1);
    let one = Device::by_name("cpu:1").expect("cpu:1");
    assert_eq!(one.kind(), DeviceKind::CpuN(1));
    assert_eq!(one.to_string(), "cpu:1");
    assert_eq!(Device::by_name(" CPU:0 ").expect("cpu:0"), Device::cpu());
    assert_eq!(
        Device::cpu_n(3).expect("cpu:3"),
        Device::by_name("cpu:3").unwrap()
    );
    let err = Device::by_name("cpu:64").expect_err("past the last cpu device");
    assert!(
        matches!(
            err,
            Error::NoSuchCpuDevice {
                index: 64,
                count: 64
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("cpu:0 to cpu:63"), "{err}");
    let err = Device::by_name("cpu:x").expect_err("not a number");
    assert!(err.to_string().contains("cpu:N"), "{err}");
}

#[test]
fn each_cpu_device_has_its_own_allocator_and_statistics() {
    let group = gpumem::testing::devices(3);
    let [zero, one, two] = [0, 1, 2].map(|r| group.device(r).unwrap().clone());
    let a = one.alloc::<f32>(1000).unwrap();
    assert_eq!(
        one.memory_allocated(),
        4096,
        "1000 f32 in a block of 4096 B"
    );
    assert_eq!(one.memory_reserved(), 2 * MIB as u64, "one small segment");
    assert_eq!(zero.memory_allocated(), 0, "cpu:1's buffer is not cpu's");
    assert_eq!(two.memory_reserved(), 0, "nor cpu:2's");
    let b = a.to(&two).unwrap();
    assert_eq!(b.device(), &two);
    assert_eq!(two.memory_allocated(), 4096);
    assert_eq!(b.to_vec().unwrap(), vec![0.0; 1000]);
    drop(a);
    assert_eq!(one.memory_allocated(), 0);
    assert_eq!(two.memory_allocated(), 4096, "the copy on cpu:2 lives on");
}

#[test]
fn a_group_refuses_no_devices_and_a_device_named_twice() {
    let _group = gpumem::testing::devices(2);
    let err = ProcessGroup::new(vec![]).expect_err("empty");
    assert!(err.to_string().contains("at least one device"), "{err}");
    let err = ProcessGroup::new(vec![
        Device::cpu(),
        Device::cpu_n(1).unwrap(),
        Device::cpu(),
    ])
    .expect_err("cpu twice");
    assert_eq!(
        err.to_string(),
        "ProcessGroup::new: ranks 0 and 2 are both on cpu"
    );
    let err = ProcessGroup::cpu(65).expect_err("too many");
    assert!(err.to_string().contains("cpu:64"), "{err}");
}

/// One buffer per rank, rank `r`'s holding `values(r)`.
fn per_rank(group: &ProcessGroup, values: impl Fn(usize) -> Vec<f32>) -> Vec<Buffer<f32>> {
    group
        .devices()
        .iter()
        .enumerate()
        .map(|(r, dev)| dev.from_slice(&values(r)).unwrap())
        .collect()
}

#[test]
fn all_gather_puts_every_shard_in_rank_order_in_a_new_buffer_on_each_rank() {
    let group = gpumem::testing::devices(4);
    let shards = per_rank(&group, |r| vec![r as f32; 3000]);
    let gathered = group
        .all_gather(&shards.iter().collect::<Vec<_>>())
        .unwrap();
    let whole: Vec<f32> = (0..4).flat_map(|r| vec![r as f32; 3000]).collect();
    for (rank, (buf, dev)) in gathered.iter().zip(group.devices()).enumerate() {
        assert_eq!(buf.device(), dev, "rank {rank}'s output on its own device");
        assert_eq!(buf.to_vec().unwrap(), whole, "rank {rank}");
        // The shard (12000 B, a block of 12288) and the gathered whole (48000 B, 48128).
        assert_eq!(dev.memory_allocated(), 12288 + 48128, "rank {rank}");
    }
    drop(gathered);
    for dev in group.devices() {
        assert_eq!(
            dev.memory_allocated(),
            12288,
            "{dev}: the gathered buffer went back"
        );
    }
}

#[test]
fn reduce_scatter_gives_each_rank_the_sum_of_its_chunk() {
    let group = gpumem::testing::devices(2);
    let inputs = per_rank(&group, |r| (0..8).map(|i| (10 * r + i) as f32).collect());
    let out = group
        .reduce_scatter(&inputs.iter().collect::<Vec<_>>())
        .unwrap();
    // Sums: 0+10, 1+11, ... = 10, 12, 14, ..., 24.
    assert_eq!(out[0].to_vec().unwrap(), vec![10.0, 12.0, 14.0, 16.0]);
    assert_eq!(out[1].to_vec().unwrap(), vec![18.0, 20.0, 22.0, 24.0]);
    for (rank, dev) in group.devices().iter().enumerate() {
        assert_eq!(out[rank].device(), dev);
        assert_eq!(
            dev.memory_allocated(),
            512 + 512,
            "rank {rank}: input and output blocks"
        );
    }
    let odd = per_rank(&group, |_| vec![1.0; 7]);
    let err = group
        .reduce_scatter(&odd.iter().collect::<Vec<_>>())
        .expect_err("7 elements over 2 ranks");
    assert!(
        err.to_string().contains("7 elements do not split into 2"),
        "{err}"
    );
}

#[test]
fn all_reduce_sums_in_place_and_allocates_nothing() {
    let group = gpumem::testing::devices(3);
    let mut bufs = per_rank(&group, |r| vec![(r + 1) as f32; 100]);
    let before: Vec<u64> = group
        .devices()
        .iter()
        .map(|d| d.memory_allocated())
        .collect();
    group.all_reduce(&mut bufs).unwrap();
    for (rank, buf) in bufs.iter().enumerate() {
        assert_eq!(buf.to_vec().unwrap(), vec![6.0; 100], "rank {rank}");
        assert_eq!(group.devices()[rank].max_memory_allocated(), before[rank]);
    }
}

#[test]
fn collectives_name_the_rank_that_is_wrong() {
    let group = gpumem::testing::devices(2);
    let zero = group.device(0).unwrap();
    let a = zero.from_slice(&[1.0f32; 4]).unwrap();
    let b = zero.from_slice(&[1.0f32; 4]).unwrap();
    let err = group.all_gather(&[&a, &b]).expect_err("both on cpu");
    assert_eq!(
        err.to_string(),
        "all_gather: rank 1's buffer is on cpu, not on cpu:1"
    );
    let err = group
        .all_gather(&[&a])
        .expect_err("one buffer for two ranks");
    assert!(err.to_string().contains("1 buffers for 2 ranks"), "{err}");
    let c = group.device(1).unwrap().from_slice(&[1.0f32; 5]).unwrap();
    let err = group.reduce_scatter(&[&a, &c]).expect_err("lengths");
    assert!(
        err.to_string()
            .contains("rank 1's buffer holds 5 elements, rank 0's 4"),
        "{err}"
    );
    let err = group.device(2).expect_err("no rank 2");
    assert!(
        err.to_string().contains("no rank 2 in a group of 2"),
        "{err}"
    );
}

#[test]
fn grad_buckets_close_at_one_mib_first_then_at_the_cap() {
    let group = gpumem::testing::devices(2);
    // 4-byte gradients of 0.5, 0.5, 0.25 MiB, then 10 MiB, 10 MiB, 10 MiB, 1 MiB.
    let quarter = MIB / 16;
    let lens = [
        2 * quarter,
        2 * quarter,
        quarter,
        40 * quarter,
        40 * quarter,
        40 * quarter,
        4 * quarter,
    ];
    let buckets = GradBuckets::new(&group, &lens, MIB, 25 * MIB).unwrap();
    // The first closes at 1 MiB exactly; the second once it holds 25 MiB or more (30.25 MiB).
    assert_eq!(buckets.members(), &[vec![0, 1], vec![2, 3, 4, 5], vec![6]]);
    assert_eq!(
        buckets.bucket_lens(),
        vec![4 * quarter, 121 * quarter, 4 * quarter]
    );
    for dev in group.devices() {
        // Each bucket a block of its own: 1 MiB, 30.25 MiB, 1 MiB.
        assert_eq!(
            dev.memory_allocated(),
            (MIB + 121 * MIB / 4 + MIB) as u64,
            "{dev}"
        );
    }
    drop(buckets);
    for dev in group.devices() {
        assert_eq!(dev.memory_allocated(), 0, "{dev}");
    }
}

#[test]
fn grad_buckets_average_every_gradient_over_the_ranks() {
    let group = gpumem::testing::devices(2);
    let lens = [3, 5, 2];
    let mut buckets = GradBuckets::new(&group, &lens, 16, 24).unwrap();
    assert_eq!(buckets.members(), &[vec![0, 1], vec![2]]);
    let mut grads: Vec<Vec<Buffer<f32>>> = group
        .devices()
        .iter()
        .enumerate()
        .map(|(r, dev)| {
            lens.iter()
                .map(|&n| dev.from_slice(&vec![(2 * r + 1) as f32; n]).unwrap())
                .collect()
        })
        .collect();
    buckets.all_reduce(&group, &mut grads).unwrap();
    for rank_grads in &grads {
        for (g, &n) in rank_grads.iter().zip(&lens) {
            assert_eq!(g.to_vec().unwrap(), vec![2.0; n], "(1 + 3) / 2");
        }
    }
    let err = buckets
        .all_reduce(&group, &mut grads[..1])
        .expect_err("one rank's gradients");
    assert!(
        err.to_string()
            .contains("give 3 gradients for each of 2 ranks"),
        "{err}"
    );
}
