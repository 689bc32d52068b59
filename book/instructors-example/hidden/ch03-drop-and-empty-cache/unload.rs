//! Hidden test: unloading two models, one after the other, leaves nothing reserved.

use ch03_drop_and_empty_cache::{TinyLinear, unload_model};

#[test]
fn unload_model_twice_leaves_nothing_reserved() -> anyhow::Result<()> {
    let dev = gpumem::testing::device();
    for _ in 0..2 {
        let model = TinyLinear::new(&dev, 100, 100)?;
        unload_model(&dev, model);
        assert_eq!(dev.memory_reserved(), 0, "a segment is still reserved");
    }
    Ok(())
}
