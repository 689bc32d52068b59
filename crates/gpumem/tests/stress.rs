//! Several threads allocating, writing, checking and freeing at once: nothing lost, nothing shared.

use gpumem::Buffer;

#[test]
fn threads_allocating_at_once_never_share_or_lose_memory() {
    let dev = gpumem::testing::device();
    let before = dev.memory_allocated();
    std::thread::scope(|scope| {
        for thread in 0..8u32 {
            let dev = dev.clone();
            scope.spawn(move || {
                let mut held: Vec<(u32, Buffer<u32>)> = Vec::new();
                let mut seed = 0x9E37_79B9u32.wrapping_mul(thread + 1);
                for step in 0..400u32 {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    let len = 1 + (seed % 70_000) as usize;
                    let tag = thread << 16 | step;
                    held.push((tag, dev.from_slice(&vec![tag; len]).expect("allocation")));
                    if seed.is_multiple_of(3) || held.len() > 12 {
                        let (tag, buf) = held.swap_remove(seed as usize % held.len());
                        let data = buf.to_vec().expect("read back");
                        assert!(
                            data.iter().all(|&v| v == tag),
                            "a buffer's data was overwritten"
                        );
                    }
                }
                for (tag, buf) in held {
                    assert!(buf.to_vec().unwrap().iter().all(|&v| v == tag));
                }
            });
        }
    });
    assert_eq!(dev.memory_allocated(), before, "every block came back");
    dev.empty_cache();
    assert_eq!(dev.memory_reserved(), 0);
}
