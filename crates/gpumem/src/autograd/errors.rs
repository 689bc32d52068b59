//! The errors autograd raises, with torch's messages.

use crate::error::Error;
use crate::memory::device::Device;

/// torch 2.15's message for an inference tensor that backward would keep.
pub(super) fn inference_saved_error() -> Error {
    autograd_error(
        "Inference tensors cannot be saved for backward. Please do not use Tensors created in \
         inference mode in computation tracked by autograd. To work around this, you can make a \
         clone to get a normal tensor and use it in autograd, or use `torch.no_grad()` instead of \
         `torch.inference_mode()`.",
    )
}

pub(super) fn autograd_error(message: impl Into<String>) -> Error {
    Error::Autograd {
        message: message.into(),
    }
}

pub(super) fn invalid(op: &'static str, dev: &Device, message: String) -> Error {
    Error::InvalidArgument {
        op,
        device: dev.to_string(),
        message,
    }
}
