//! autograd's errors against torch 2.15.0's whole texts (`conformance/goldens/errors.json`).
//! torch names tensor types by device (`torch.FloatTensor` on the CPU, `torch.cuda.FloatTensor`
//! on CUDA); the goldens hold the CPU text, and gpumem's `cpu` device gives the CPU names. On
//! `cuda` gpumem names the CUDA types, as torch does there (seen on an H100, 2026-11-27); the
//! comparison reads them back in the CPU's spelling.

mod conformance_support;

use conformance_support::Conformance;
use gpumem::Device;
use gpumem::autograd::{self, Tensor};
use gpumem::testing::device;

fn values(dev: &Device, shape: &[usize], start: usize) -> Tensor {
    let n = shape.iter().product::<usize>();
    let v: Vec<f32> = (0..n)
        .map(|k| (((start + k) % 17) as f32 - 8.0) / 8.0)
        .collect();
    Tensor::from_slice(dev, &v, shape).unwrap()
}

fn ones(dev: &Device, shape: &[usize]) -> Tensor {
    let n = shape.iter().product::<usize>();
    Tensor::from_slice(dev, &vec![1.0f32; n], shape).unwrap()
}

/// torch's `None` when it worked, else the message, with tensor types in the CPU's spelling
/// (`torch.cuda.FloatTensor` read as `torch.FloatTensor`: the goldens were recorded on the CPU).
fn error<T>(r: gpumem::Result<T>) -> Option<String> {
    r.err()
        .map(|e| e.to_string().replace("[torch.cuda.", "[torch."))
}

#[test]
fn errors_match_torch_2_15() {
    let dev = device();
    let mut c = Conformance::load("errors");
    let rg = |shape: &[usize], start| values(&dev, shape, start).requires_grad_(true).unwrap();

    let x = rg(&[4, 8], 0);
    let loss = x.relu().unwrap().sum().unwrap();
    loss.backward().unwrap();
    c.check("second backward", "error", error(loss.backward()));

    let x = rg(&[64, 1024], 0);
    let h = x.relu().unwrap();
    let loss = h.mul_scalar(2.0).unwrap().relu().unwrap().sum().unwrap();
    h.add_(&ones(&dev, &[64, 1024])).unwrap();
    c.check(
        "in-place on the saved output of relu, then backward (x [64, 1024])",
        "error",
        error(loss.backward()),
    );

    let x = rg(&[4, 8], 0);
    let w = rg(&[3, 8], 0);
    let z = autograd::linear(&x, &w, None).unwrap();
    let loss = z.gelu().unwrap().sum().unwrap();
    z.mul_scalar_(2.0).unwrap();
    c.check(
        "in-place on linear's output that gelu saved, then backward",
        "error",
        error(loss.backward()),
    );

    let x = rg(&[4, 8], 0);
    let k = values(&dev, &[4, 8], 1);
    let loss = x.mul(&k).unwrap().sum().unwrap();
    k.add_(&ones(&dev, &[4, 8])).unwrap();
    c.check(
        "in-place on a saved leaf that does not require grad, then backward",
        "error",
        error(loss.backward()),
    );

    let x = rg(&[4, 8], 0);
    c.check(
        "add_ on a leaf that requires grad",
        "error",
        error(x.clone().add_(&ones(&dev, &[4, 8]))),
    );
    c.check(
        "relu_ on a leaf that requires grad",
        "error",
        error(x.clone().relu_()),
    );
    {
        let _no_grad = autograd::no_grad();
        c.check(
            "add_ on a leaf that requires grad under no_grad",
            "error",
            error(x.clone().add_(&Tensor::zeros(&dev, &[4, 8]).unwrap())),
        );
    }

    let h = x.mul_scalar(2.0).unwrap();
    c.check(
        "requires_grad_(False) on a non-leaf",
        "error",
        error(h.clone().requires_grad_(false)),
    );
    c.check(
        "requires_grad_(True) on a non-leaf",
        "error",
        error(h.requires_grad_(true)),
    );

    let inf = {
        let _inference = autograd::inference_mode();
        values(&dev, &[4, 8], 0)
    };
    let w = rg(&[4, 8], 2);
    c.check(
        "inference tensor times a tensor that requires grad",
        "error",
        error(inf.mul(&w)),
    );
    let sum = inf.add(&w);
    c.check(
        "inference tensor plus a tensor that requires grad",
        "grad_fn",
        sum.as_ref().ok().and_then(Tensor::grad_fn_name),
    );
    c.check(
        "inference tensor plus a tensor that requires grad",
        "error",
        error(sum),
    );
    c.check(
        "relu of an inference tensor, outside inference_mode",
        "error",
        error(inf.relu()),
    );
    c.check(
        "add_ on an inference tensor outside inference_mode",
        "error",
        error(inf.add_(&ones(&dev, &[4, 8]))),
    );

    let y = rg(&[4, 8], 0);
    c.check(
        "backward of a non-scalar",
        "error",
        error(y.mul_scalar(2.0).unwrap().backward()),
    );
    c.check(
        "backward of a tensor that does not require grad",
        "error",
        error(values(&dev, &[4, 8], 0).sum().unwrap().backward()),
    );
    c.check(
        "item of a [4, 8] tensor",
        "error",
        error(values(&dev, &[4, 8], 0).item()),
    );
    c.finish();
}

#[test]
fn the_books_table_of_simplifications_is_current() {
    conformance_support::simplifications_table();
}

#[test]
fn the_books_table_shows_torchs_backticks_as_torch_writes_them() {
    let torch = "or use `torch.no_grad()` instead of `torch.inference_mode()`.";
    assert_eq!(
        conformance_support::cell(&torch.into()),
        "`` or use `torch.no_grad()` instead of `torch.inference_mode()`. ``"
    );
    assert_eq!(
        conformance_support::cell(&"no backtick".into()),
        "`no backtick`"
    );
}
