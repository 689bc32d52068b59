//! Chapter 6's `GradScaler` (its reference solution, compiled here as a module) against torch
//! 2.15.0's `torch.amp.GradScaler` (`conformance/goldens/gradscaler.json`): defaults, growth,
//! backoff, skipped steps on inf and NaN, `unscale_`, growth past the largest f32.

mod conformance_support;

#[allow(dead_code)] // the chapter's other exercises are not compared here
#[path = "../../../solutions/ch06-mixed-precision/src/lib.rs"]
mod ch06;

use ch06::GradScaler;
use conformance_support::Conformance;
use gpumem::ops::{Mlp, XorShift};
use gpumem::testing::device;
use serde_json::json;

#[test]
fn the_chapters_grad_scaler_matches_torch_2_15() {
    let dev = device();
    let mut c = Conformance::load("gradscaler");
    let mut rng = XorShift::new(6);
    let s = GradScaler::new();
    c.check(
        "GradScaler() defaults",
        "init_scale, growth_factor, backoff_factor, growth_interval",
        json!([
            s.scale,
            s.growth_factor,
            s.backoff_factor,
            s.growth_interval
        ]),
    );
    let script = [
        "clean", "clean", "clean", "inf", "clean", "nan", "clean", "clean", "clean", "clean",
    ];
    let mut scaler = GradScaler::with_settings(1024.0, 2.0, 0.5, 3);
    let mut grads = Mlp::new(&dev, &[4, 1], &mut rng)
        .unwrap()
        .zero_grads()
        .unwrap();
    let (mut scales, mut trackers, mut skipped) = (vec![], vec![], vec![]);
    for kind in script {
        // torch's script: every gradient equals the scale, one inf or NaN where the step says.
        let mut g = vec![scaler.scale; 4];
        match kind {
            "inf" => g[1] = f32::INFINITY,
            "nan" => g[2] = f32::NAN,
            _ => {}
        }
        grads.layers[0].weight.copy_from_slice(&g).unwrap();
        let stepped = scaler.step(&mut grads, |_| Ok(())).unwrap();
        scaler.update();
        skipped.push(!stepped);
        scales.push(scaler.scale);
        trackers.push(scaler.growth_tracker);
    }
    let scenario = format!("growth_interval=3, init 1024: {}", script.join(" "));
    c.check(&scenario, "scale after each update", json!(scales));
    c.check(
        &scenario,
        "growth tracker after each update",
        json!(trackers),
    );
    c.check(&scenario, "optimizer step skipped", json!(skipped));

    let mut scaler = GradScaler::with_settings(8.0, 2.0, 0.5, 2000);
    let mut grads = Mlp::new(&dev, &[4, 1], &mut rng)
        .unwrap()
        .zero_grads()
        .unwrap();
    grads.layers[0]
        .weight
        .copy_from_slice(&[8.0, 4.0, 2.0, 1.0])
        .unwrap();
    scaler.unscale(&mut grads).unwrap();
    c.check(
        "unscale_ at scale 8",
        "grads",
        json!(grads.layers[0].weight.to_vec().unwrap()),
    );
    c.not_modelled("unscale_ twice before update", "error");
    c.not_modelled("update without a step", "error");

    let mut scaler = GradScaler::with_settings(2f32.powi(127), 2.0, 0.5, 1);
    let mut grads = Mlp::new(&dev, &[4, 1], &mut rng)
        .unwrap()
        .zero_grads()
        .unwrap();
    scaler.step(&mut grads, |_| Ok(())).unwrap();
    scaler.update();
    c.check(
        "growth past the largest f32",
        "scale after update",
        json!(scaler.scale),
    );
    c.finish();
}
