//! Whether CUDA can be used on this machine, asked without ever panicking.
//!
//! `libcuda` is loaded at run time, so a machine without a GPU or a driver still runs everything
//! else. Two traps of the loader are avoided here: counting devices through cudarc's safe layer
//! panics when the library is missing, and so does *formatting* a `DriverError` (it asks the
//! library for the message). Every answer about the driver is probed once and cached.

use crate::error::{Error, Result};
use cudarc::cublas::result::CublasError;
use cudarc::driver::{DriverError, result, sys};
use cudarc::nvrtc::result::NvrtcError;
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
    if let Some(reason) = driver_version.and_then(|v| driver_too_old(v, BUILT_FOR_CUDA)) {
        found.unavailable = Some(reason);
        return found;
    }
    if let Err(err) = result::init() {
        found.unavailable = Some(if err.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            "the driver found no CUDA device".to_string()
        } else {
            format!(
                "the CUDA driver failed to initialise: {}",
                explain_driver_error(err)
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
                explain_driver_error(err)
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

/// The CUDA major version this build of gpumem is for (its `cuda-12` or default `cuda-13` feature),
/// as `cuDriverGetVersion` counts it: the driver must be at least this new.
pub const BUILT_FOR_CUDA: i32 = if cfg!(feature = "cuda-12") {
    12000
} else {
    13000
};

/// Why a driver supporting CUDA `version` cannot run a build for CUDA `built_for`, if it cannot.
///
/// cudarc's bindings for CUDA 13 load symbols a CUDA 12 driver lacks (`cuEventElapsedTime_v2`),
/// and a missing symbol is a panic: an older driver is refused up front, with what to do.
fn driver_too_old(version: i32, built_for: i32) -> Option<String> {
    if version >= built_for {
        return None;
    }
    let instead = if built_for > 12000 && version >= 12000 {
        ", or build with --no-default-features --features gpumem/cuda-12"
    } else {
        ""
    };
    Some(format!(
        "the NVIDIA driver supports CUDA {}, older than the CUDA {} this build of gpumem is for: \
         update the driver{instead}",
        version_words(version),
        version_words(built_for)
    ))
}

/// Words for a version as `cuDriverGetVersion` and NVRTC count it: `13000` is `13.0`.
fn version_words(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// What [`is_available`], [`device_count`] and [`unavailable_reason`] answer on one thread while
/// a test feeds them a status of its own (`gpumem::testing::with_cuda_status`), so that code for
/// a machine with a GPU is exercised on one without.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaStatus {
    /// CUDA can be used, with this many devices (at least one).
    Available {
        /// How many devices the driver reports.
        devices: usize,
    },
    /// CUDA cannot be used, for this reason.
    Unavailable {
        /// Why not, as a plain sentence.
        reason: String,
    },
}

thread_local! {
    static FED: std::cell::RefCell<Option<CudaStatus>> = const { std::cell::RefCell::new(None) };
}

/// The status a test fed this thread, if any.
pub(crate) fn fed_status() -> Option<CudaStatus> {
    FED.with(|fed| fed.borrow().clone())
}

/// Feeds `status` to this thread's answers until the returned guard is dropped.
pub(crate) fn feed_status(status: CudaStatus) -> FedStatus {
    let previous = FED.with(|fed| fed.replace(Some(status)));
    FedStatus { previous }
}

/// Puts back the status a thread had before [`feed_status`] when dropped.
pub(crate) struct FedStatus {
    previous: Option<CudaStatus>,
}

impl Drop for FedStatus {
    fn drop(&mut self) {
        let previous = self.previous.take();
        FED.with(|fed| fed.replace(previous));
    }
}

/// How many CUDA devices the driver really reports, whatever status a test fed.
pub(crate) fn probe_device_count() -> usize {
    probe().device_count
}

/// Whether at least one CUDA device can be used (never panics, needs no CUDA install).
pub fn is_available() -> bool {
    unavailable_reason().is_none()
}

/// How many CUDA devices the driver reports; 0 when CUDA is unavailable.
pub fn device_count() -> usize {
    match fed_status() {
        Some(CudaStatus::Available { devices }) => devices,
        Some(CudaStatus::Unavailable { .. }) => 0,
        None => probe().device_count,
    }
}

/// Why CUDA cannot be used, as a plain sentence; `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    match fed_status() {
        Some(CudaStatus::Available { .. }) => None,
        Some(CudaStatus::Unavailable { reason }) => Some(reason),
        None => probe().unavailable.clone(),
    }
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
        let name = library_name(lib);
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

/// Why `Device::best()` (and so `GPUMEM_DEVICE` unset or `auto`) picks cpu: the driver cannot be
/// used, or it can but cuBLAS or NVRTC, which the ops need, does not load; `None` when it picks
/// cuda. Probed once per process.
pub fn auto_cpu_reason() -> Option<String> {
    static REASON: OnceLock<Option<String>> = OnceLock::new();
    if fed_status().is_some() {
        // A fed status is one thread's, for a while: never cached for the process.
        return cpu_reason(unavailable_reason(), library_status());
    }
    REASON
        .get_or_init(|| cpu_reason(unavailable_reason(), library_status()))
        .clone()
}

/// [`auto_cpu_reason`] from what was probed: the driver's unavailability, then each library's.
fn cpu_reason(
    driver: Option<String>,
    libraries: Vec<(&'static str, Result<(), String>)>,
) -> Option<String> {
    if driver.is_some() {
        return driver;
    }
    let missing: Vec<String> = libraries
        .into_iter()
        .filter_map(|(lib, status)| status.err().map(|why| format!("{lib} {why}")))
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "the CUDA driver works, but {}: every op needs cuBLAS and NVRTC, so `auto` uses cpu \
         (GPUMEM_DEVICE=cuda uses the GPU anyway, and an op then fails saying what is missing)",
        missing.join("; ")
    ))
}

// ---------------------------------------------------------------------------------------------
// Failures of driver, cuBLAS and NVRTC calls, as errors a learner can act on.
//
// cudarc 0.19 returns a bare status code for each library (`DriverError(CUresult)`,
// `CublasError(cublasStatus_t)`, `NvrtcError(nvrtcResult)`). Formatting a `DriverError` asks libcuda
// for its words, so only the code (`err.0`) is ever formatted here; the other two format as their
// code's name. The code's name and the library's words say what happened; the sentence added here
// says what to do, following NVIDIA's documentation of each code.

/// Whether a failure means the device cannot be used at all, or only that one call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Severity {
    /// CUDA cannot be used (no device, a wrong library, a busy or broken system): `CudaUnavailable`.
    Unavailable,
    /// The call failed: `Driver`, naming the call.
    Failed,
}

/// What to do about a driver error, for the codes a learner can meet; `None` for the others.
fn driver_advice(code: sys::CUresult) -> Option<(Severity, &'static str)> {
    use Severity::{Failed, Unavailable};
    use sys::CUresult::*;
    Some(match code {
        CUDA_ERROR_OUT_OF_MEMORY => (
            Failed,
            "Memory ran out outside the caching allocator's blocks (the kernels' module, a stream, \
             an event, cuBLAS's workspace, or page-locked host memory for cuMemHostAlloc): free \
             buffers and call empty_cache(), or make the work smaller",
        ),
        CUDA_ERROR_ILLEGAL_ADDRESS
        | CUDA_ERROR_LAUNCH_FAILED
        | CUDA_ERROR_ILLEGAL_INSTRUCTION
        | CUDA_ERROR_MISALIGNED_ADDRESS
        | CUDA_ERROR_INVALID_ADDRESS_SPACE
        | CUDA_ERROR_INVALID_PC
        | CUDA_ERROR_HARDWARE_STACK_ERROR
        | CUDA_ERROR_ASSERT => (
            Failed,
            "A kernel faulted. The error is sticky: this process's CUDA context is unusable and \
             every later call fails too, so restart the process. Kernels run asynchronously, so the \
             op named here may not be the one that faulted: rerun with GPUMEM_LAUNCH_BLOCKING=1 to \
             find it",
        ),
        CUDA_ERROR_LAUNCH_TIMEOUT => (
            Failed,
            "A kernel ran past the display watchdog's limit (this GPU also drives a display): use \
             a GPU without a display or smaller work, and restart the process (the context is \
             unusable)",
        ),
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => (
            Failed,
            "The launch asked for more registers or threads than this GPU gives one block: a \
             gpumem bug, please report it with `workbook doctor`'s output",
        ),
        CUDA_ERROR_ECC_UNCORRECTABLE | CUDA_ERROR_NVLINK_UNCORRECTABLE => (
            Failed,
            "The GPU reported an uncorrectable hardware error: check `nvidia-smi -q` and the system \
             log, and restart the process (the context is unusable)",
        ),
        CUDA_ERROR_NO_BINARY_FOR_GPU | CUDA_ERROR_INVALID_IMAGE => (
            Failed,
            "The compiled kernels do not fit this GPU: `workbook doctor` shows the architectures \
             NVRTC targets and the GPU's compute capability",
        ),
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION | CUDA_ERROR_INVALID_PTX => (
            Failed,
            "The driver could not compile the PTX, most often because an NVRTC newer than the \
             driver made it: update the NVIDIA driver, or use an NVRTC no newer than the driver \
             (`workbook doctor` shows both versions)",
        ),
        CUDA_ERROR_JIT_COMPILER_NOT_FOUND | CUDA_ERROR_JIT_COMPILATION_DISABLED => (
            Failed,
            "The driver cannot compile PTX here (its JIT compiler is missing or disabled, as by \
             CUDA_DISABLE_PTX_JIT): use an NVRTC that knows this GPU's architecture, so that \
             machine code is loaded instead",
        ),
        CUDA_ERROR_INVALID_VALUE | CUDA_ERROR_INVALID_HANDLE => (
            Failed,
            "The driver rejected gpumem's arguments: a gpumem bug, please report it with the op \
             and the sizes involved",
        ),
        CUDA_ERROR_INVALID_CONTEXT | CUDA_ERROR_CONTEXT_IS_DESTROYED => (
            Failed,
            "The device's context is gone (destroyed, or the device was reset): restart the process",
        ),
        CUDA_ERROR_INVALID_DEVICE => (
            Failed,
            "No such device: `workbook doctor` lists the devices (CUDA_VISIBLE_DEVICES may hide \
             some)",
        ),
        CUDA_ERROR_NOT_PERMITTED | CUDA_ERROR_NOT_SUPPORTED => (
            Failed,
            "The driver does not allow this operation on this device or system (a virtual or MIG \
             GPU, or a setting of the administrator's)",
        ),
        CUDA_ERROR_NO_DEVICE => (
            Unavailable,
            "The driver sees no GPU: check `nvidia-smi` and CUDA_VISIBLE_DEVICES, or use \
             GPUMEM_DEVICE=cpu",
        ),
        CUDA_ERROR_STUB_LIBRARY => (
            Unavailable,
            "The libcuda.so loaded is the CUDA toolkit's stub, not the driver's: take the \
             toolkit's lib64/stubs folder off LD_LIBRARY_PATH",
        ),
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => (
            Unavailable,
            "The driver's library and its kernel module are of different versions (updated \
             without a reboot?): reboot, or reinstall the NVIDIA driver",
        ),
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => (
            Unavailable,
            "A newer CUDA library over an older kernel driver (forward compatibility) is not \
             supported on this GPU: install an NVIDIA driver of the CUDA version gpumem was built for",
        ),
        CUDA_ERROR_DEVICE_UNAVAILABLE => (
            Unavailable,
            "The GPU is unavailable, most often because it is in exclusive-process compute mode \
             and another process holds it: see `nvidia-smi`",
        ),
        CUDA_ERROR_SYSTEM_NOT_READY => (
            Unavailable,
            "The system is not ready for CUDA work: check that the driver's daemons (such as the \
             fabric manager on NVSwitch machines) are running",
        ),
        CUDA_ERROR_NOT_INITIALIZED | CUDA_ERROR_DEINITIALIZED => (
            Unavailable,
            "The driver is not initialised or is shutting down (a call made while the process \
             exits?)",
        ),
        CUDA_ERROR_MPS_CONNECTION_FAILED
        | CUDA_ERROR_MPS_RPC_FAILURE
        | CUDA_ERROR_MPS_SERVER_NOT_READY
        | CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
        | CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED
        | CUDA_ERROR_MPS_CLIENT_TERMINATED => (
            Unavailable,
            "The Multi-Process Service (MPS) refused or dropped this process: check its control \
             daemon (nvidia-cuda-mps-control), or run without MPS",
        ),
        _ => return None,
    })
}

/// A driver error in words with what to do: `CUDA_ERROR_X (the driver's words). What to do`.
pub(crate) fn explain_driver_error(err: DriverError) -> String {
    let words = describe_driver_error(err);
    match driver_advice(err.0) {
        Some((_, advice)) => format!("{words}. {advice}"),
        None => words,
    }
}

/// The crate's error for driver call `op` failing on `device` (`cuda:N`).
pub(crate) fn driver_error(op: &'static str, device: &str, err: DriverError) -> Error {
    let message = explain_driver_error(err);
    match driver_advice(err.0) {
        Some((Severity::Unavailable, _)) => Error::CudaUnavailable {
            reason: format!("{op} failed on {device}: {message}"),
        },
        _ => Error::Driver {
            op,
            device: device.to_string(),
            message,
        },
    }
}

/// The crate's error for op `op` failing on `device` because cuBLAS's `call` returned `err`.
pub(crate) fn cublas_error(op: &'static str, device: &str, call: &str, err: CublasError) -> Error {
    use cudarc::cublas::sys::cublasStatus_t::*;
    let advice = match err.0 {
        CUBLAS_STATUS_NOT_INITIALIZED => Some(
            "cuBLAS could not start on this device: the CUDA runtime inside it failed (a driver \
             older than this cuBLAS, or no memory left) or the hardware setup is wrong; `workbook \
             doctor` shows the versions",
        ),
        CUBLAS_STATUS_ALLOC_FAILED => Some(
            "cuBLAS could not allocate its workspace on the device (that memory is outside the \
             caching allocator): free buffers and call empty_cache(), or make the work smaller",
        ),
        CUBLAS_STATUS_INVALID_VALUE => Some(
            "cuBLAS rejected the sizes or leading dimensions gpumem passed: a gpumem bug, please \
             report it with the shapes",
        ),
        CUBLAS_STATUS_ARCH_MISMATCH | CUBLAS_STATUS_NOT_SUPPORTED => {
            Some("This GPU or this cuBLAS cannot run the GEMM for these element types: try f32")
        }
        CUBLAS_STATUS_EXECUTION_FAILED | CUBLAS_STATUS_INTERNAL_ERROR => Some(
            "The GEMM failed on the GPU. If an earlier kernel faulted, every later call fails too \
             (the error is sticky): rerun with GPUMEM_LAUNCH_BLOCKING=1 to find the first failing \
             op, and restart the process",
        ),
        _ => None,
    };
    Error::Driver {
        op,
        device: device.to_string(),
        message: match advice {
            Some(advice) => format!("{call} returned {:?}. {advice}", err.0),
            None => format!("{call} returned {:?}", err.0),
        },
    }
}

/// The crate's error for NVRTC call `op` failing for `target` (`sm_90`, `cuda:0`, ...); `log` is
/// NVRTC's compile log, when there is one.
pub(crate) fn nvrtc_error(op: &'static str, target: &str, err: NvrtcError, log: &str) -> Error {
    use cudarc::nvrtc::sys::nvrtcResult::*;
    let advice = match err.0 {
        NVRTC_ERROR_OUT_OF_MEMORY => Some("Host memory ran out while compiling the kernels"),
        NVRTC_ERROR_INVALID_OPTION => Some(
            "NVRTC rejected an option, most often an architecture it does not know (a GPU newer \
             than this NVRTC, or one it no longer supports): `workbook doctor` lists the \
             architectures it can target",
        ),
        NVRTC_ERROR_COMPILATION => Some(
            "The kernels did not compile; NVRTC's log follows. Unless kernels.cu was edited this \
             is a gpumem bug: please report it with the log",
        ),
        NVRTC_ERROR_BUILTIN_OPERATION_FAILURE => Some(
            "NVRTC could not load its builtins library (libnvrtc-builtins.so of the same version, \
             which must lie beside libnvrtc or on LD_LIBRARY_PATH)",
        ),
        _ => None,
    };
    let mut message = format!("{:?}", err.0);
    if let Some(advice) = advice {
        message = format!("{message}. {advice}");
    }
    if !log.trim().is_empty() {
        message = format!("{message}:\n{}", log.trim_end());
    }
    Error::Driver {
        op,
        device: target.to_string(),
        message,
    }
}

/// Why NVRTC cannot be used here, as the crate's error.
pub(crate) fn nvrtc_missing() -> Error {
    Error::CudaUnavailable {
        reason: format!(
            "NVRTC could not be loaded ({} or a similar name): install the CUDA toolkit's NVRTC \
             (or the nvidia-cuda-nvrtc wheel, see scripts/install-nvrtc.sh) and put its lib \
             directory on LD_LIBRARY_PATH",
            library_name("nvrtc")
        ),
    }
}

/// The versioned library name cudarc looks for (`libnvrtc.so.13`), for messages.
pub(crate) fn library_name(lib: &str) -> String {
    cudarc::get_lib_name_candidates(lib)
        .into_iter()
        .find(|n| n.contains(".so."))
        .unwrap_or_else(|| format!("lib{lib}.so"))
}

/// Whether libnvrtc can be loaded (never panics).
fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library and closes it again.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC's version `(major, minor)`, from `nvrtcVersion`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    if !nvrtc_present() {
        return Err(nvrtc_missing());
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; the call only writes the two integers.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| nvrtc_error("nvrtcVersion", "the host", e, ""))?;
    Ok((major, minor))
}

/// The GPU architectures NVRTC can compile for, oldest first (`75` is `sm_75`), from
/// `nvrtcGetSupportedArchs`.
pub fn nvrtc_supported_archs() -> Result<Vec<u32>> {
    use cudarc::nvrtc::sys;
    if !nvrtc_present() {
        return Err(nvrtc_missing());
    }
    let mut count = 0;
    // SAFETY: the library is present; the call only writes the integer.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut count) }
        .result()
        .map_err(|e| nvrtc_error("nvrtcGetNumSupportedArchs", "the host", e, ""))?;
    let mut archs = vec![0; count.max(0) as usize];
    // SAFETY: `archs` holds the `count` integers NVRTC writes.
    unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| nvrtc_error("nvrtcGetSupportedArchs", "the host", e, ""))?;
    let mut archs: Vec<u32> = archs.into_iter().map(|a| a.max(0) as u32).collect();
    archs.sort_unstable();
    Ok(archs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads() -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn auto_picks_cuda_only_when_the_driver_cublas_and_nvrtc_all_load() {
        let missing = || Err("could not load libnvrtc.so.13".to_string());
        assert_eq!(
            cpu_reason(None, vec![("cuBLAS", loads()), ("NVRTC", loads())]),
            None
        );
        let no_driver = Some("no CUDA driver library (libcuda.so) could be loaded".to_string());
        assert_eq!(
            cpu_reason(
                no_driver.clone(),
                vec![("cuBLAS", loads()), ("NVRTC", missing())]
            ),
            no_driver
        );
        let reason = cpu_reason(None, vec![("cuBLAS", loads()), ("NVRTC", missing())])
            .expect("NVRTC missing: cpu");
        assert!(
            reason.starts_with("the CUDA driver works, but NVRTC could not load libnvrtc.so.13:"),
            "{reason}"
        );
        assert!(!reason.contains("cuBLAS could not"), "{reason}");
    }

    #[test]
    fn the_auto_choice_agrees_with_the_probes() {
        let reason = auto_cpu_reason();
        if !is_available() {
            assert_eq!(reason, unavailable_reason());
        }
        if library_status().iter().any(|(_, s)| s.is_err()) {
            assert!(reason.is_some());
        }
    }

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

    #[test]
    fn a_driver_older_than_the_build_is_refused_with_what_to_do() {
        assert_eq!(driver_too_old(13000, 13000), None);
        assert_eq!(driver_too_old(13020, 13000), None);
        assert_eq!(driver_too_old(12080, 12000), None);
        let reason = driver_too_old(12040, 13000).expect("12.4 cannot run a CUDA 13 build");
        assert!(
            reason.contains("supports CUDA 12.4, older than the CUDA 13.0"),
            "{reason}"
        );
        assert!(reason.contains("--features gpumem/cuda-12"), "{reason}");
        // A CUDA 11 driver: no build of gpumem fits it, only a newer driver does.
        let reason = driver_too_old(11080, 12000).expect("11.8 cannot run a CUDA 12 build");
        assert!(reason.ends_with("update the driver"), "{reason}");
    }

    // The mapping of failures, checked on error values made here: no GPU or library is needed
    // (without libcuda the driver's words are left out, the code's name and the advice remain).

    fn driver(op: &'static str, code: sys::CUresult) -> Error {
        driver_error(op, "cuda:0", DriverError(code))
    }

    #[test]
    fn a_kernel_fault_says_it_is_sticky_and_how_to_find_the_op() {
        use sys::CUresult::*;
        for code in [
            CUDA_ERROR_ILLEGAL_ADDRESS,
            CUDA_ERROR_LAUNCH_FAILED,
            CUDA_ERROR_MISALIGNED_ADDRESS,
            CUDA_ERROR_ASSERT,
        ] {
            let err = driver("cuStreamSynchronize", code);
            let text = err.to_string();
            assert!(
                matches!(err, Error::Driver { op: "cuStreamSynchronize", ref device, .. } if device == "cuda:0"),
                "{text}"
            );
            assert!(
                text.starts_with("cuStreamSynchronize failed on cuda:0: "),
                "{text}"
            );
            assert!(text.contains(&format!("{code:?}")), "{text}");
            assert!(text.contains("GPUMEM_LAUNCH_BLOCKING=1"), "{text}");
            assert!(text.contains("restart the process"), "{text}");
        }
    }

    #[test]
    fn an_unusable_setup_is_cuda_unavailable_with_the_fix() {
        use sys::CUresult::*;
        for (code, fix) in [
            (CUDA_ERROR_NO_DEVICE, "GPUMEM_DEVICE=cpu"),
            (CUDA_ERROR_STUB_LIBRARY, "stubs"),
            (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "reboot"),
            (CUDA_ERROR_DEVICE_UNAVAILABLE, "exclusive-process"),
            (CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS"),
        ] {
            let err = driver("cuDevicePrimaryCtxRetain", code);
            let text = err.to_string();
            assert!(matches!(err, Error::CudaUnavailable { .. }), "{text}");
            assert!(
                text.contains(&format!(
                    "cuDevicePrimaryCtxRetain failed on cuda:0: {code:?}"
                )),
                "{text}"
            );
            assert!(text.contains(fix), "{code:?}: {text}");
        }
    }

    #[test]
    fn other_driver_failures_name_the_code_and_what_to_do() {
        use sys::CUresult::*;
        for (code, fix) in [
            (CUDA_ERROR_OUT_OF_MEMORY, "empty_cache()"),
            (
                CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                "update the NVIDIA driver",
            ),
            (CUDA_ERROR_NO_BINARY_FOR_GPU, "workbook doctor"),
            (CUDA_ERROR_INVALID_VALUE, "gpumem bug"),
            (CUDA_ERROR_LAUNCH_TIMEOUT, "watchdog"),
        ] {
            let text = driver("cuModuleLoadData", code).to_string();
            assert!(text.contains(&format!("{code:?}")), "{text}");
            assert!(text.contains(fix), "{code:?}: {text}");
        }
        // A code with no advice keeps the code's name alone (and the driver's words, if loaded).
        let text = driver("cuMemsetD8Async", CUDA_ERROR_UNKNOWN).to_string();
        assert!(text.contains("CUDA_ERROR_UNKNOWN"), "{text}");
        // Page-locked host memory keeps its own error, with the advice.
        assert!(
            explain_driver_error(DriverError(CUDA_ERROR_OUT_OF_MEMORY)).contains("cuMemHostAlloc")
        );
    }

    #[test]
    fn cublas_failures_name_the_call_the_status_and_what_to_do() {
        use cudarc::cublas::sys::cublasStatus_t::*;
        for (status, fix) in [
            (CUBLAS_STATUS_ALLOC_FAILED, "empty_cache()"),
            (CUBLAS_STATUS_NOT_INITIALIZED, "workbook doctor"),
            (CUBLAS_STATUS_INVALID_VALUE, "gpumem bug"),
            (CUBLAS_STATUS_NOT_SUPPORTED, "try f32"),
            (CUBLAS_STATUS_EXECUTION_FAILED, "GPUMEM_LAUNCH_BLOCKING=1"),
        ] {
            let err = cublas_error("matmul", "cuda:1", "cublasGemmEx", CublasError(status));
            let text = err.to_string();
            assert!(matches!(err, Error::Driver { op: "matmul", .. }), "{text}");
            assert!(
                text.starts_with(&format!(
                    "matmul failed on cuda:1: cublasGemmEx returned {status:?}. "
                )),
                "{text}"
            );
            assert!(text.contains(fix), "{status:?}: {text}");
        }
    }

    #[test]
    fn nvrtc_failures_name_the_target_and_carry_the_log() {
        use cudarc::nvrtc::sys::nvrtcResult::*;
        let err = nvrtc_error(
            "nvrtcCompileProgram",
            "sm_90",
            NvrtcError(NVRTC_ERROR_COMPILATION),
            "kernels.cu(3): error: identifier \"x\" is undefined\n",
        );
        let text = err.to_string();
        assert!(
            matches!(
                err,
                Error::Driver {
                    op: "nvrtcCompileProgram",
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.starts_with("nvrtcCompileProgram failed on sm_90: NVRTC_ERROR_COMPILATION. "),
            "{text}"
        );
        assert!(
            text.ends_with(":\nkernels.cu(3): error: identifier \"x\" is undefined"),
            "{text}"
        );
        for (code, fix) in [
            (NVRTC_ERROR_INVALID_OPTION, "architectures it can target"),
            (NVRTC_ERROR_BUILTIN_OPERATION_FAILURE, "libnvrtc-builtins"),
            (NVRTC_ERROR_OUT_OF_MEMORY, "Host memory"),
        ] {
            let text =
                nvrtc_error("nvrtcCompileProgram", "sm_80", NvrtcError(code), "").to_string();
            assert!(
                text.contains(&format!("{code:?}")) && text.contains(fix),
                "{text}"
            );
            assert!(!text.ends_with(':'), "no log, no colon: {text}");
        }
        let missing = nvrtc_missing().to_string();
        assert!(missing.contains(&library_name("nvrtc")), "{missing}");
        assert!(missing.contains("LD_LIBRARY_PATH"), "{missing}");
    }

    #[test]
    fn nvrtc_reports_its_version_and_architectures_where_it_loads() {
        match (nvrtc_version(), nvrtc_supported_archs()) {
            (Ok((major, _)), Ok(archs)) => {
                assert!(major >= 11, "{major}");
                assert!(!archs.is_empty());
                assert!(archs.windows(2).all(|w| w[0] < w[1]), "{archs:?}");
            }
            (Err(a), Err(b)) => {
                assert!(matches!(a, Error::CudaUnavailable { .. }), "{a}");
                assert!(matches!(b, Error::CudaUnavailable { .. }), "{b}");
            }
            (a, b) => panic!("the two NVRTC queries disagree: {a:?} / {b:?}"),
        }
    }
}
