//! The cuda side of the compute layer: one NVRTC module of element-wise kernels and one cuBLAS
//! handle per device, made at first use and kept; launches on the legacy default stream.

use super::DType;
use super::kernel_cache::{KernelCache, KernelKey, Lookup};
use super::kernel_source::kernel_source;
use crate::error::{Error, Result};
use crate::raw::backend::{DeviceBackend, DevicePtr};
use crate::raw::cuda::CudaBackend;
use crate::raw::driver::{
    cublas_error, driver_error, explain_driver_error, library_name, nvrtc_error, nvrtc_missing,
    nvrtc_version,
};
use cudarc::cublas::{result as blas_result, sys as blas_sys};
use cudarc::driver::{CudaContext, CudaFunction, result as driver_result};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// Threads per block of every launch (the reductions in `kernels.cu` rely on it).
const THREADS: u32 = 256;
/// At most this many blocks; the kernels' grid-stride loops cover the rest.
const MAX_BLOCKS: u64 = 8192;

fn device_name(backend: &CudaBackend) -> String {
    format!("cuda:{}", backend.ordinal())
}

/// Whether `GPUMEM_LAUNCH_BLOCKING=1` asks to wait for every launch (read once).
fn launch_blocking() -> bool {
    static BLOCKING: OnceLock<bool> = OnceLock::new();
    *BLOCKING.get_or_init(|| {
        std::env::var("GPUMEM_LAUNCH_BLOCKING").is_ok_and(|v| matches!(v.trim(), "1" | "true"))
    })
}

/// Waits for the legacy default stream when launches are blocking, reporting a fault as `op`'s.
fn finish(op: &'static str, device: &str) -> Result<()> {
    if !launch_blocking() {
        return Ok(());
    }
    // SAFETY: the null stream always exists; the context is bound by the caller.
    unsafe { driver_result::stream::synchronize(std::ptr::null_mut()) }
        .map_err(|e| driver_error(op, device, e))
}

/// What NVRTC is asked to make of the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelTarget {
    /// Machine code for one GPU architecture, `sm_{major}{minor}`: loads on any driver of the
    /// toolkit's major version (CUDA's minor-version compatibility), with no JIT at load.
    Cubin(u32, u32),
    /// PTX for the virtual architecture `compute_{major}{minor}`, or NVRTC's default one for
    /// `None`; the driver compiles it at load, and needs to be at least as new as NVRTC.
    Ptx(Option<(u32, u32)>),
}

impl std::fmt::Display for KernelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelTarget::Cubin(major, minor) => write!(f, "sm_{major}{minor}"),
            KernelTarget::Ptx(Some((major, minor))) => write!(f, "compute_{major}{minor} (PTX)"),
            KernelTarget::Ptx(None) => write!(f, "NVRTC's default architecture (PTX)"),
        }
    }
}

/// What NVRTC made of the kernels.
#[derive(Debug, Clone)]
pub enum KernelImage {
    /// An ELF image of machine code.
    Cubin(Vec<u8>),
    /// PTX text.
    Ptx(String),
}

impl KernelImage {
    /// The image's bytes (PTX as UTF-8 text), as the kernel cache stores them.
    fn into_bytes(self) -> Vec<u8> {
        match self {
            KernelImage::Cubin(bytes) => bytes,
            KernelImage::Ptx(text) => text.into_bytes(),
        }
    }

    /// The image `into_bytes` made for `target`.
    fn from_bytes(target: KernelTarget, bytes: Vec<u8>) -> KernelImage {
        match target {
            KernelTarget::Cubin(..) => KernelImage::Cubin(bytes),
            KernelTarget::Ptx(_) => KernelImage::Ptx(String::from_utf8_lossy(&bytes).into_owned()),
        }
    }

    /// The image in cudarc's type, for `CudaContext::load_module`.
    fn into_cudarc(self) -> cudarc::nvrtc::Ptx {
        match self {
            KernelImage::Cubin(bytes) => cudarc::nvrtc::Ptx::from_binary(bytes),
            KernelImage::Ptx(text) => cudarc::nvrtc::Ptx::from_src(text),
        }
    }
}

/// An NVRTC program, destroyed when dropped.
struct Program(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
    }
}

/// Compiles the element-wise kernels for `target` with NVRTC, as the cuda device does at first use
/// (needs libnvrtc, no GPU); a compile error carries NVRTC's log.
pub fn compile_kernels(target: KernelTarget) -> Result<KernelImage> {
    compile_source(&kernel_source().0, target)
}

/// As [`compile_kernels`], through `cache` (see [`KernelCache`]): a machine compiles the kernels
/// once per target and NVRTC version. `None` compiles every time. Says where the image came from.
pub fn compile_kernels_cached(
    target: KernelTarget,
    cache: Option<&KernelCache>,
) -> Result<(KernelImage, Lookup)> {
    let (source, _) = kernel_source();
    let Some(cache) = cache else {
        return Ok((compile_source(&source, target)?, Lookup::Compiled));
    };
    let target_name = target.to_string();
    let key = KernelKey {
        source: &source,
        target: &target_name,
        nvrtc: nvrtc_version()?,
    };
    let (bytes, lookup) = cache.get_or_compile(&key, || {
        compile_source(&source, target).map(KernelImage::into_bytes)
    })?;
    Ok((KernelImage::from_bytes(target, bytes), lookup))
}

/// NVRTC's text (a log, PTX) up to its terminating NUL.
fn nvrtc_text(raw: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles CUDA C++ `src` for `target`; a compile error carries NVRTC's log.
fn compile_source(src: &str, target: KernelTarget) -> Result<KernelImage> {
    use cudarc::nvrtc::{result, sys};
    // SAFETY: only tries to open the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(nvrtc_missing());
    }
    let name = target.to_string();
    let src = std::ffi::CString::new(src).map_err(|e| Error::InvalidArgument {
        op: "nvrtcCreateProgram",
        device: name.clone(),
        message: format!("the kernel source holds a NUL byte: {e}"),
    })?;
    let program = Program(
        result::create_program(&src, Some(c"gpumem_ops.cu"))
            .map_err(|e| nvrtc_error("nvrtcCreateProgram", &name, e, ""))?,
    );
    let options: Vec<String> = match target {
        KernelTarget::Cubin(major, minor) => vec![format!("--gpu-architecture=sm_{major}{minor}")],
        KernelTarget::Ptx(Some((major, minor))) => {
            vec![format!("--gpu-architecture=compute_{major}{minor}")]
        }
        KernelTarget::Ptx(None) => Vec::new(),
    };
    // SAFETY: the program is live; the options are plain strings.
    if let Err(e) = unsafe { result::compile_program(program.0, &options) } {
        // SAFETY: as above.
        let log = unsafe { result::get_program_log(program.0) }
            .map(|raw| nvrtc_text(&raw))
            .unwrap_or_default();
        let log = format!("options {options:?}\n{log}");
        return Err(nvrtc_error("nvrtcCompileProgram", &name, e, &log));
    }
    match target {
        KernelTarget::Cubin(..) => {
            let mut size = 0usize;
            // SAFETY: the program compiled; NVRTC writes the size, then that many bytes.
            unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) }
                .result()
                .map_err(|e| nvrtc_error("nvrtcGetCUBINSize", &name, e, ""))?;
            let mut cubin = vec![0u8; size];
            // SAFETY: as above; `cubin` holds `size` bytes.
            unsafe { sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) }
                .result()
                .map_err(|e| nvrtc_error("nvrtcGetCUBIN", &name, e, ""))?;
            Ok(KernelImage::Cubin(cubin))
        }
        KernelTarget::Ptx(_) => {
            // SAFETY: the program compiled.
            let ptx = unsafe { result::get_ptx(program.0) }
                .map_err(|e| nvrtc_error("nvrtcGetPTX", &name, e, ""))?;
            Ok(KernelImage::Ptx(nvrtc_text(&ptx)))
        }
    }
}

/// A kernel argument, passed by value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg {
    /// A device address.
    Ptr(DevicePtr),
    /// A `float`.
    F32(f32),
    /// A `gm_u64` (element counts, rows, columns).
    U64(u64),
    /// A `gm_u32` (flags).
    U32(u32),
}

impl Arg {
    /// The argument in an 8-byte slot: the driver reads the parameter's size from the kernel's
    /// signature at the slot's start, and on a little-endian machine the low bytes come first.
    fn slot(self) -> u64 {
        match self {
            Arg::Ptr(p) | Arg::U64(p) => p,
            Arg::F32(f) => f.to_bits() as u64,
            Arg::U32(u) => u as u64,
        }
    }
}

/// The compiled element-wise kernels of one device.
pub(crate) struct Kernels {
    ctx: Arc<CudaContext>,
    device: String,
    functions: HashMap<String, CudaFunction>,
}

impl Kernels {
    fn load(backend: &CudaBackend) -> Result<Kernels> {
        let device = device_name(backend);
        let ctx = backend.context().clone();
        let load_module = |image: KernelImage| {
            ctx.load_module(image.into_cudarc())
                .map_err(|e| driver_error("cuModuleLoadData", &device, e))
        };
        // Machine code for this GPU first; PTX, which the driver compiles, if NVRTC does not know
        // the GPU's architecture (a GPU newer than NVRTC).
        let (major, minor) = backend.properties()?.compute_capability;
        let cache = KernelCache::from_env();
        let compile =
            |target| compile_kernels_cached(target, cache.as_ref()).map(|(image, _)| image);
        let module = match compile(KernelTarget::Cubin(major, minor)).and_then(load_module) {
            Ok(module) => module,
            // NVRTC is missing: PTX would need it too.
            Err(e @ Error::CudaUnavailable { .. }) => return Err(e),
            Err(first) => compile(KernelTarget::Ptx(None))
                .and_then(load_module)
                .map_err(|second| Error::Driver {
                    op: "load_kernels",
                    device: device.clone(),
                    message: format!(
                        "as machine code for sm_{major}{minor}: {first}\nas PTX: {second}"
                    ),
                })?,
        };
        let (_, names) = kernel_source();
        let mut functions = HashMap::with_capacity(names.len());
        for name in names {
            let function = module.load_function(&name).map_err(|e| Error::Driver {
                op: "cuModuleGetFunction",
                device: device.clone(),
                message: format!("{name}: {}", explain_driver_error(e)),
            })?;
            functions.insert(name, function);
        }
        Ok(Kernels {
            ctx,
            device,
            functions,
        })
    }

    /// Launches kernel `name` over `work` items on the legacy default stream and checks the launch.
    pub(crate) fn launch(
        &self,
        op: &'static str,
        name: &str,
        work: u64,
        args: &[Arg],
    ) -> Result<()> {
        let function = self.functions.get(name).ok_or_else(|| Error::Driver {
            op,
            device: self.device.clone(),
            message: format!("no kernel named {name} in the compiled module"),
        })?;
        let blocks = work.div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
        let mut slots: Vec<u64> = args.iter().map(|a| a.slot()).collect();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect();
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error(op, &self.device, e))?;
        // SAFETY: `params` point at one live slot per kernel parameter, in order, each holding the
        // value the kernel's signature expects (the caller's contract, checked by the typed ops);
        // the driver copies them before returning.
        unsafe {
            driver_result::launch_kernel(
                function.cu_function(),
                (blocks, 1, 1),
                (THREADS, 1, 1),
                0,
                std::ptr::null_mut(),
                &mut params,
            )
        }
        .map_err(|e| driver_error(op, &self.device, e))?;
        finish(op, &self.device)
    }
}

/// Why a device's kernels or cuBLAS handle could not be made, kept so that a failing setup is not
/// retried on every call (the crate's `Error` is not `Clone`).
#[derive(Debug, Clone)]
enum SetupFailure {
    /// `Error::CudaUnavailable`'s reason.
    Unavailable(String),
    /// Any other error: `Error::Driver`'s fields.
    Failed {
        op: &'static str,
        device: String,
        message: String,
    },
}

impl SetupFailure {
    /// Keeps `err`, which happened while setting `device` up.
    fn keep(err: Error, device: &str) -> SetupFailure {
        match err {
            Error::CudaUnavailable { reason } => SetupFailure::Unavailable(reason),
            Error::Driver {
                op,
                device,
                message,
            } => SetupFailure::Failed {
                op,
                device,
                message,
            },
            other => SetupFailure::Failed {
                op: "setup",
                device: device.to_string(),
                message: other.to_string(),
            },
        }
    }

    /// The kept error, anew.
    fn error(&self) -> Error {
        match self.clone() {
            SetupFailure::Unavailable(reason) => Error::CudaUnavailable { reason },
            SetupFailure::Failed {
                op,
                device,
                message,
            } => Error::Driver {
                op,
                device,
                message,
            },
        }
    }
}

/// One entry per device ordinal: the kernels, or why they could not be made.
type LoadedKernels = Mutex<HashMap<usize, std::result::Result<Arc<Kernels>, SetupFailure>>>;

/// The device's kernels, compiled and loaded at first use.
pub(crate) fn kernels(backend: &CudaBackend) -> Result<Arc<Kernels>> {
    static CACHE: OnceLock<LoadedKernels> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let entry = cache.entry(backend.ordinal()).or_insert_with(|| {
        Kernels::load(backend)
            .map(Arc::new)
            .map_err(|e| SetupFailure::keep(e, &device_name(backend)))
    });
    entry.clone().map_err(|failure| failure.error())
}

/// A cuBLAS handle bound to the legacy default stream.
pub(crate) struct Blas {
    handle: blas_sys::cublasHandle_t,
    ctx: Arc<CudaContext>,
    device: String,
}

// SAFETY: the handle is only used under the Mutex that holds the Blas, with its context bound.
unsafe impl Send for Blas {}

/// What `Blas::gemm` computes, in cuBLAS's column-major terms: C = α·op(A)·op(B) + β·C.
pub(crate) struct ColumnMajorGemm {
    pub(crate) transa: bool,
    pub(crate) transb: bool,
    pub(crate) m: i32,
    pub(crate) n: i32,
    pub(crate) k: i32,
    pub(crate) alpha: f32,
    pub(crate) a: DevicePtr,
    pub(crate) lda: i32,
    pub(crate) b: DevicePtr,
    pub(crate) ldb: i32,
    pub(crate) beta: f32,
    pub(crate) c: DevicePtr,
    pub(crate) ldc: i32,
    /// Element type of A and B.
    pub(crate) input: DType,
    /// Element type of C.
    pub(crate) output: DType,
}

fn blas_type(dtype: DType) -> blas_sys::cudaDataType {
    match dtype {
        DType::F32 => blas_sys::cudaDataType::CUDA_R_32F,
        DType::F16 => blas_sys::cudaDataType::CUDA_R_16F,
        DType::BF16 => blas_sys::cudaDataType::CUDA_R_16BF,
    }
}

fn blas_op(transpose: bool) -> blas_sys::cublasOperation_t {
    if transpose {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    }
}

impl Blas {
    fn open(backend: &CudaBackend) -> Result<Blas> {
        // SAFETY: only tries to open the library.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err(Error::CudaUnavailable {
                reason: format!(
                    "cuBLAS could not be loaded ({} or a similar name): install the CUDA \
                     toolkit's cuBLAS and put its lib directory on LD_LIBRARY_PATH",
                    library_name("cublas")
                ),
            });
        }
        let device = device_name(backend);
        let ctx = backend.context().clone();
        ctx.bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", &device, e))?;
        let handle = blas_result::create_handle()
            .map_err(|e| cublas_error("cublasCreate", &device, "cublasCreate", e))?;
        let blas = Blas {
            handle,
            ctx,
            device,
        };
        let fail = |call: &'static str, e| cublas_error(call, &blas.device, call, e);
        // SAFETY: the handle is live; the null stream is the legacy default stream.
        unsafe { blas_result::set_stream(blas.handle, std::ptr::null_mut()) }
            .map_err(|e| fail("cublasSetStream", e))?;
        // Default math: no TF32 for f32 (sgemm keeps full f32 products); f16/bf16 GemmEx with
        // 32F compute may use tensor cores, which multiply exactly and accumulate in f32, and may
        // split k and add the partial products in f16/bf16. That is torch 2.15's default too:
        // `allow_fp16_reduced_precision_reduction` and `allow_bf16_reduced_precision_reduction`
        // are (True, True) (reduced precision, split-K allowed), so torch adds no
        // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION; tests/ops_gemm.rs bounds the error.
        // SAFETY: the handle is live.
        unsafe {
            blas_sys::cublasSetMathMode(blas.handle, blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
        }
        .result()
        .map_err(|e| fail("cublasSetMathMode", e))?;
        Ok(blas)
    }

    /// Queues one GEMM on the legacy default stream and checks cuBLAS's status.
    ///
    /// # Safety
    /// `a`, `b`, `c` are live device buffers of this device holding the matrices the sizes and
    /// leading dimensions describe, in the element types named; `c` overlaps neither input.
    pub(crate) unsafe fn gemm(&self, op: &'static str, g: &ColumnMajorGemm) -> Result<()> {
        let fail = |call: &str, e| cublas_error(op, &self.device, call, e);
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error(op, &self.device, e))?;
        let (alpha, beta) = (g.alpha, g.beta);
        if g.input == DType::F32 && g.output == DType::F32 {
            // SAFETY: the caller's contract; alpha and beta are host values (the default pointer
            // mode), read before the call returns.
            unsafe {
                blas_result::sgemm(
                    self.handle,
                    blas_op(g.transa),
                    blas_op(g.transb),
                    g.m,
                    g.n,
                    g.k,
                    &alpha,
                    g.a as usize as *const f32,
                    g.lda,
                    g.b as usize as *const f32,
                    g.ldb,
                    &beta,
                    g.c as usize as *mut f32,
                    g.ldc,
                )
            }
            .map_err(|e| fail("cublasSgemm", e))?;
        } else {
            // SAFETY: as above; with CUBLAS_COMPUTE_32F alpha and beta are f32.
            unsafe {
                blas_result::gemm_ex(
                    self.handle,
                    blas_op(g.transa),
                    blas_op(g.transb),
                    g.m,
                    g.n,
                    g.k,
                    (&alpha as *const f32).cast(),
                    g.a as usize as *const c_void,
                    blas_type(g.input),
                    g.lda,
                    g.b as usize as *const c_void,
                    blas_type(g.input),
                    g.ldb,
                    (&beta as *const f32).cast(),
                    g.c as usize as *mut c_void,
                    blas_type(g.output),
                    g.ldc,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| fail("cublasGemmEx", e))?;
        }
        finish(op, &self.device)
    }
}

/// One entry per device ordinal: the handle, or why it could not be made.
type BlasCache = Mutex<HashMap<usize, std::result::Result<Arc<Mutex<Blas>>, SetupFailure>>>;

/// The device's cuBLAS handle, made at first use.
pub(crate) fn blas(backend: &CudaBackend) -> Result<Arc<Mutex<Blas>>> {
    static CACHE: OnceLock<BlasCache> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let entry = cache.entry(backend.ordinal()).or_insert_with(|| {
        Blas::open(backend)
            .map(|b| Arc::new(Mutex::new(b)))
            .map_err(|e| SetupFailure::keep(e, &device_name(backend)))
    });
    entry.clone().map_err(|failure| failure.error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_has_a_unique_name() {
        let (src, names) = kernel_source();
        // kernels.cu's, then attention.cu's: 13 per element type and the dropout mask.
        assert_eq!(names.len(), 22 * 3 + 3 * 9 + 13 * 3 + 1);
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        for name in &names {
            assert!(src.contains(&format!("void {name}(")), "{name}");
        }
    }

    // Every kernel compiled for several architectures, and ptxas's report: tests/kernels_compile.rs.

    #[test]
    fn a_compile_error_carries_nvrtc_log_and_what_to_do() {
        // SAFETY: only tries to open the library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            let err = compile_kernels(KernelTarget::Ptx(None)).unwrap_err();
            assert!(matches!(err, Error::CudaUnavailable { .. }), "{err}");
            assert!(err.to_string().contains("LD_LIBRARY_PATH"), "{err}");
            return;
        }
        let src = "extern \"C\" __global__ void broken() { undeclared_name = 1; }";
        let err = compile_source(src, KernelTarget::Ptx(None)).unwrap_err();
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
        assert!(text.contains("NVRTC_ERROR_COMPILATION"), "{text}");
        assert!(text.contains("undeclared_name"), "{text}");
        // An architecture NVRTC does not know is an invalid option, named with its target.
        let err = compile_source(src, KernelTarget::Cubin(1, 0)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("failed on sm_10"), "{text}");
        assert!(text.contains("NVRTC_ERROR_INVALID_OPTION"), "{text}");
        assert!(text.contains("workbook doctor"), "{text}");
    }
}
