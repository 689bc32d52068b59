//! Whether CUDA can be used on this machine, asked without ever panicking.
//!
//! `libcuda` is loaded at run time, so a machine without a GPU or a driver still runs everything
//! else. Two traps of the loader are avoided here: counting devices through cudarc's safe layer
//! panics when the library is missing, and so does *formatting* a `DriverError` (it asks the
//! library for the message). Every answer about the driver is probed once and cached.

use cudarc::driver::{DriverError, result, sys};
use std::sync::OnceLock;

/// What probing the driver found, once per process.
struct Probe {
    /// Whether `libcuda` could be loaded at all.
    library_present: bool,
    /// `None` when at least one device can be used, else why not.
    unavailable: Option<String>,
    /// Devices the driver reports (0 when unavailable).
    device_count: usize,
    /// `cuDriverGetVersion`, when the library answered.
    driver_version: Option<i32>,
}

fn probe() -> &'static Probe {
    static PROBE: OnceLock<Probe> = OnceLock::new();
    PROBE.get_or_init(|| {
        // The calls below are not expected to panic once the library is known to be present; this
        // is a last guard so that asking "is there CUDA?" can never bring the process down.
        std::panic::catch_unwind(run_probe).unwrap_or_else(|_| Probe {
            library_present: false,
            unavailable: Some("probing the CUDA driver failed unexpectedly".to_string()),
            device_count: 0,
            driver_version: None,
        })
    })
}

fn run_probe() -> Probe {
    // SAFETY: only tries to open the library (dlopen) and closes it again.
    let library_present = unsafe { sys::is_culib_present() };
    if !library_present {
        return Probe {
            library_present,
            unavailable: Some("no CUDA driver library (libcuda.so) could be loaded".to_string()),
            device_count: 0,
            driver_version: None,
        };
    }
    let driver_version = {
        let mut version: std::ffi::c_int = 0;
        // SAFETY: the library is present; cuDriverGetVersion only writes the integer.
        match unsafe { sys::cuDriverGetVersion(&mut version) }.result() {
            Ok(()) => Some(version),
            Err(_) => None,
        }
    };
    let mut found = Probe {
        library_present,
        unavailable: None,
        device_count: 0,
        driver_version,
    };
    if let Err(err) = result::init() {
        found.unavailable = Some(if err.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            "the driver found no CUDA device".to_string()
        } else {
            format!(
                "the CUDA driver failed to initialise: {}",
                describe_driver_error(err)
            )
        });
        return found;
    }
    match result::device::get_count() {
        Ok(n) if n > 0 => found.device_count = n as usize,
        Ok(_) => found.unavailable = Some("the driver found no CUDA device".to_string()),
        Err(err) => {
            found.unavailable = Some(format!(
                "the CUDA driver could not count devices: {}",
                describe_driver_error(err)
            ))
        }
    }
    found
}

/// Words for a driver error: `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`; never panics.
pub(crate) fn describe_driver_error(err: DriverError) -> String {
    // Asking the driver for its words needs the library; without it the code's name must do.
    // (`probe` is not used here: it calls this function while being initialised.)
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to open the library.
    let present = *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() });
    let code = format!("{:?}", err.0);
    if !present {
        return code;
    }
    match err.error_string() {
        Ok(text) => format!("{code} ({})", text.to_string_lossy()),
        Err(_) => code,
    }
}

/// Whether at least one CUDA device can be used (never panics, needs no CUDA install).
pub fn is_available() -> bool {
    probe().unavailable.is_none()
}

/// How many CUDA devices the driver reports; 0 when CUDA is unavailable.
pub fn device_count() -> usize {
    probe().device_count
}

/// Why CUDA cannot be used, as a plain sentence; `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    probe().unavailable.clone()
}

/// Whether the CUDA driver library itself (`libcuda.so`) could be loaded.
pub fn driver_library_present() -> bool {
    probe().library_present
}

/// The driver's CUDA version as `cuDriverGetVersion` gives it (`13000` = 13.0), when libcuda loads.
pub fn driver_version() -> Option<i32> {
    probe().driver_version
}

/// Whether the run-time-loaded CUDA libraries (cuBLAS, NVRTC) can be opened, for `workbook doctor`.
pub fn library_status() -> Vec<(&'static str, Result<(), String>)> {
    fn status(present: bool, lib: &str) -> Result<(), String> {
        if present {
            return Ok(());
        }
        // The versioned name cudarc tries (`libcublas.so.13`), to say what to look for.
        let name = cudarc::get_lib_name_candidates(lib)
            .into_iter()
            .find(|n| n.contains(".so."))
            .unwrap_or_else(|| format!("lib{lib}.so"));
        Err(format!(
            "could not load {name} or a similar name (is the CUDA toolkit's lib directory on LD_LIBRARY_PATH?)"
        ))
    }
    // SAFETY: each call only tries to open a library and closes it again.
    let cublas = unsafe { cudarc::cublas::sys::is_culib_present() };
    // SAFETY: as above.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    vec![
        ("cuBLAS", status(cublas, "cublas")),
        ("NVRTC", status(nvrtc, "nvrtc")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_never_panics_and_agrees_with_itself() {
        let available = is_available();
        assert_eq!(available, device_count() > 0);
        assert_eq!(available, unavailable_reason().is_none());
        if !driver_library_present() {
            assert!(!available);
            assert_eq!(driver_version(), None);
        }
        assert_eq!(library_status().len(), 2);
    }
}
