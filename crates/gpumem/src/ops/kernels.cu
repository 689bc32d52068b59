// The element-wise kernels of `gpumem::ops`, compiled at run time by NVRTC (once per device).
//
// No headers are included, so nothing depends on where the CUDA toolkit lives: half-precision values
// travel as 16-bit patterns and are converted with PTX `cvt` (f16) or bit arithmetic (bf16), both
// rounding to nearest even as the `half` crate does on the host. Arithmetic is float with explicit
// `_rn` intrinsics, so no multiply and add are fused into one FMA and every result is rounded exactly
// as the cpu device rounds it. Sums accumulate in double.
//
// Every kernel walks its elements with a grid-stride loop and is launched with 256 threads per block
// (the reductions rely on that). The `extern "C"` entry points, one per element type, are appended
// by `ops/cuda.rs`.

typedef unsigned short gm_u16;
typedef unsigned int gm_u32;
typedef unsigned long long gm_u64;

// Storage types: the kernels compute in float and store in these.
struct gm_f16 { gm_u16 bits; };
struct gm_bf16 { gm_u16 bits; };

__device__ __forceinline__ float gm_load(const float* p, gm_u64 i) { return p[i]; }

__device__ __forceinline__ float gm_load(const gm_f16* p, gm_u64 i) {
    float f;
    gm_u16 h = p[i].bits;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float gm_load(const gm_bf16* p, gm_u64 i) {
    return __uint_as_float(((gm_u32)p[i].bits) << 16);
}

__device__ __forceinline__ void gm_store(float* p, gm_u64 i, float v) { p[i] = v; }

__device__ __forceinline__ void gm_store(gm_f16* p, gm_u64 i, float v) {
    gm_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    p[i].bits = h;
}

__device__ __forceinline__ void gm_store(gm_bf16* p, gm_u64 i, float v) {
    gm_u32 u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        p[i].bits = (gm_u16)((u >> 16) | 0x40u);  // NaN stays NaN (quiet)
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    p[i].bits = (gm_u16)(u >> 16);
}

__device__ __forceinline__ bool gm_finite(float v) {
    return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

// Double-precision atomic add through compare-and-swap: works on every architecture NVRTC targets.
__device__ __forceinline__ void gm_atomic_add(double* addr, double v) {
    gm_u64* word = (gm_u64*)addr;
    gm_u64 old = *word;
    gm_u64 assumed;
    do {
        assumed = old;
        double next = __longlong_as_double((long long)assumed) + v;
        old = atomicCAS(word, assumed, (gm_u64)__double_as_longlong(next));
    } while (assumed != old);
}

#define GM_THREADS 256

#define GM_FOR_EACH(i, n)                                                         \
    for (gm_u64 i = (gm_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);       \
         i += (gm_u64)gridDim.x * blockDim.x)

// Adds this block's partial sums (one per thread, in `part`) into `*out`.
__device__ __forceinline__ void gm_block_sum_into(double* part, double* out) {
    __syncthreads();
    for (gm_u32 w = GM_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) gm_atomic_add(out, part[0]);
}

template <typename T>
__device__ __forceinline__ void gm_scale(T* x, float s, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(x, i, __fmul_rn(gm_load(x, i), s));
}

template <typename X, typename Y>
__device__ __forceinline__ void gm_axpy(float a, const X* x, Y* y, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(y, i, __fadd_rn(__fmul_rn(a, gm_load(x, i)), gm_load(y, i)));
}

template <typename T>
__device__ __forceinline__ void gm_relu(const T* x, T* y, gm_u64 n) {
    GM_FOR_EACH(i, n) {
        float v = gm_load(x, i);
        gm_store(y, i, (v > 0.0f || v != v) ? v : 0.0f);  // NaN passes through, -0 becomes 0
    }
}

template <typename T>
__device__ __forceinline__ void gm_relu_backward(const T* g, const T* out, T* dx, gm_u64 n) {
    GM_FOR_EACH(i, n) {
        float o = gm_load(out, i);
        gm_store(dx, i, o <= 0.0f ? 0.0f : gm_load(g, i));
    }
}

template <typename S, typename D>
__device__ __forceinline__ void gm_cast(const S* x, D* y, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(y, i, gm_load(x, i));
}

template <typename T, typename B>
__device__ __forceinline__ void gm_add_bias(T* x, const B* b, gm_u64 rows, gm_u64 cols) {
    gm_u64 n = rows * cols;
    GM_FOR_EACH(i, n) gm_store(x, i, __fadd_rn(gm_load(x, i), gm_load(b, i % cols)));
}

// torch's _amp_foreach_non_finite_check_and_unscale_: the check looks at the value before unscaling.
template <typename T>
__device__ __forceinline__ void gm_unscale_check(T* x, float inv, gm_u64 n, gm_u32* found) {
    GM_FOR_EACH(i, n) {
        float v = gm_load(x, i);
        if (!gm_finite(v)) *found = 1u;
        if (inv != 1.0f) gm_store(x, i, __fmul_rn(v, inv));
    }
}

template <typename T>
__device__ __forceinline__ void gm_mse_grad(const T* p, const T* t, T* g, float c, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(g, i, __fmul_rn(c, __fsub_rn(gm_load(p, i), gm_load(t, i))));
}

// One thread per column; rows in order, so the result is the cpu device's to the last bit.
template <typename T>
__device__ __forceinline__ void gm_col_sum(const T* x, gm_u64 rows, gm_u64 cols, float* out,
                                           gm_u32 accumulate) {
    GM_FOR_EACH(c, cols) {
        double s = 0.0;
        for (gm_u64 r = 0; r < rows; ++r) s += (double)gm_load(x, r * cols + c);
        out[c] = accumulate ? (float)((double)out[c] + s) : (float)s;
    }
}

template <typename T>
__device__ __forceinline__ void gm_sum(const T* x, gm_u64 n, double* out) {
    __shared__ double part[GM_THREADS];
    double s = 0.0;
    GM_FOR_EACH(i, n) s += (double)gm_load(x, i);
    part[threadIdx.x] = s;
    gm_block_sum_into(part, out);
}

template <typename T>
__device__ __forceinline__ void gm_sq_diff_sum(const T* a, const T* b, gm_u64 n, double* out) {
    __shared__ double part[GM_THREADS];
    double s = 0.0;
    GM_FOR_EACH(i, n) {
        double d = (double)gm_load(a, i) - (double)gm_load(b, i);
        s = __dadd_rn(s, __dmul_rn(d, d));
    }
    part[threadIdx.x] = s;
    gm_block_sum_into(part, out);
}

// ---- Kernels of the autograd's ops (`ops/grad.rs`). ----

template <typename T>
__device__ __forceinline__ void gm_fill(T* x, float v, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(x, i, v);
}

template <typename T>
__device__ __forceinline__ void gm_mul(const T* a, const T* b, T* y, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(y, i, __fmul_rn(gm_load(a, i), gm_load(b, i)));
}

// x[i] <- x[i] * s[0]: a gradient times an upstream scalar gradient that lives on the device.
template <typename T>
__device__ __forceinline__ void gm_scale_by(T* x, const T* s, gm_u64 n) {
    float f = gm_load(s, 0);
    GM_FOR_EACH(i, n) gm_store(x, i, __fmul_rn(gm_load(x, i), f));
}

// y[0] <- s[0] / d: a sum accumulated in double, divided (1 for a sum, n for a mean), rounded once.
template <typename T>
__device__ __forceinline__ void gm_f64_div(const double* s, gm_u64 d, T* y) {
    if (blockIdx.x == 0 && threadIdx.x == 0) gm_store(y, 0, (float)(s[0] / (double)d));
}

// GELU, tanh approximation (torch's approximate="tanh").
#define GM_GELU_K 0.7978845608028654f
#define GM_GELU_C 0.044715f

template <typename T>
__device__ __forceinline__ void gm_gelu(const T* x, T* y, gm_u64 n) {
    GM_FOR_EACH(i, n) {
        float v = gm_load(x, i);
        float inner = __fmul_rn(GM_GELU_K, __fadd_rn(v, __fmul_rn(GM_GELU_C, __fmul_rn(v, __fmul_rn(v, v)))));
        float t = tanhf(inner);
        gm_store(y, i, __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, t)));
    }
}

template <typename T>
__device__ __forceinline__ void gm_gelu_backward(const T* g, const T* x, T* dx, gm_u64 n) {
    GM_FOR_EACH(i, n) {
        float v = gm_load(x, i);
        float v2 = __fmul_rn(v, v);
        float inner = __fmul_rn(GM_GELU_K, __fadd_rn(v, __fmul_rn(GM_GELU_C, __fmul_rn(v, v2))));
        float t = tanhf(inner);
        float d_inner = __fmul_rn(GM_GELU_K, __fadd_rn(1.0f, __fmul_rn(3.0f * GM_GELU_C, v2)));
        float left = __fmul_rn(0.5f, __fadd_rn(1.0f, t));
        float right = __fmul_rn(__fmul_rn(0.5f, v), __fmul_rn(__fsub_rn(1.0f, __fmul_rn(t, t)), d_inner));
        gm_store(dx, i, __fmul_rn(gm_load(g, i), __fadd_rn(left, right)));
    }
}

// One thread per row: y = x - max - log(sum(exp(x - max))), the sum in double.
template <typename T>
__device__ __forceinline__ void gm_log_softmax(const T* x, T* y, gm_u64 rows, gm_u64 cols) {
    GM_FOR_EACH(r, rows) {
        float m = __int_as_float(0xff800000);
        for (gm_u64 c = 0; c < cols; ++c) m = fmaxf(m, gm_load(x, r * cols + c));
        double s = 0.0;
        for (gm_u64 c = 0; c < cols; ++c) s += exp((double)__fsub_rn(gm_load(x, r * cols + c), m));
        float lse = __fadd_rn(m, (float)log(s));
        for (gm_u64 c = 0; c < cols; ++c)
            gm_store(y, r * cols + c, __fsub_rn(gm_load(x, r * cols + c), lse));
    }
}

// One thread per row: dx = g - exp(y) * sum(g), the sum in double.
template <typename T>
__device__ __forceinline__ void gm_log_softmax_backward(const T* g, const T* y, T* dx, gm_u64 rows,
                                                        gm_u64 cols) {
    GM_FOR_EACH(r, rows) {
        double s = 0.0;
        for (gm_u64 c = 0; c < cols; ++c) s += (double)gm_load(g, r * cols + c);
        float sf = (float)s;
        for (gm_u64 c = 0; c < cols; ++c) {
            gm_u64 i = r * cols + c;
            gm_store(dx, i, __fsub_rn(gm_load(g, i), __fmul_rn((float)exp((double)gm_load(y, i)), sf)));
        }
    }
}

// Adds -sum over rows of logp[r, target[r]] into *out (targets checked on the host).
template <typename T>
__device__ __forceinline__ void gm_nll_sum(const T* logp, const long long* t, gm_u64 rows,
                                           gm_u64 cols, double* out) {
    __shared__ double part[GM_THREADS];
    double s = 0.0;
    GM_FOR_EACH(r, rows) s -= (double)gm_load(logp, r * cols + (gm_u64)t[r]);
    part[threadIdx.x] = s;
    gm_block_sum_into(part, out);
}

// dx[r, target[r]] = -g[0] / rows; dx is zeroed by the caller.
template <typename T>
__device__ __forceinline__ void gm_nll_backward(const T* g, const long long* t, T* dx, gm_u64 rows,
                                                gm_u64 cols) {
    float v = __fdiv_rn(-gm_load(g, 0), (float)rows);
    GM_FOR_EACH(r, rows) gm_store(dx, r * cols + (gm_u64)t[r], v);
}

// Optimizer steps and in-place ops (gpumem::optim, Tensor::add_ ...). Each thread reads and writes
// only element i, so an output may be one of the inputs.
template <typename T>
__device__ __forceinline__ void gm_sqrt(const T* x, T* y, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(y, i, __fsqrt_rn(gm_load(x, i)));
}

template <typename T>
__device__ __forceinline__ void gm_add_scalar(T* x, float s, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(x, i, __fadd_rn(gm_load(x, i), s));
}

// x[i] <- x[i] + v * a[i] * b[i] (torch's addcmul_).
template <typename T>
__device__ __forceinline__ void gm_addcmul(T* x, float v, const T* a, const T* b, gm_u64 n) {
    GM_FOR_EACH(i, n) {
        float p = __fmul_rn(__fmul_rn(v, gm_load(a, i)), gm_load(b, i));
        gm_store(x, i, __fadd_rn(gm_load(x, i), p));
    }
}

// x[i] <- x[i] + v * a[i] / b[i] (torch's addcdiv_).
template <typename T>
__device__ __forceinline__ void gm_addcdiv(T* x, float v, const T* a, const T* b, gm_u64 n) {
    GM_FOR_EACH(i, n) {
        float q = __fmul_rn(v, __fdiv_rn(gm_load(a, i), gm_load(b, i)));
        gm_store(x, i, __fadd_rn(gm_load(x, i), q));
    }
}
