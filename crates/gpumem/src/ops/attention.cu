// The kernels of a transformer layer (`gpumem::ops::attention`), appended to `kernels.cu` (whose
// types, loads, stores and GM_FOR_EACH they use). One thread per output element or per row; dot
// products and sums accumulate in double, where the product of two floats is exact, so a fused
// multiply-add changes nothing and the cpu loops give the same values.

// A 64-bit mix (splitmix64's finaliser) of the dropout seed and an element index: counter-based,
// so any element's keep/drop decision can be made again without the mask (what the fused attention
// kernels do in backward).
__device__ __forceinline__ gm_u64 gm_mix(gm_u64 seed, gm_u64 i) {
    gm_u64 z = seed + (i + 1ull) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Whether element i survives dropout with probability p of dropping: 24 random bits against p.
__device__ __forceinline__ bool gm_keep(gm_u64 seed, gm_u64 i, float p) {
    return (float)(gm_mix(seed, i) >> 40) * (1.0f / 16777216.0f) >= p;
}

// C[z] = op(A[z]) · op(B[z]) for z < batch; A is [m, k] (or [k, m] when ta), B is [k, n] (or
// [n, k] when tb), C is [m, n].
template <typename T>
__device__ __forceinline__ void gm_bmm(const T* a, const T* b, T* c, gm_u64 batch, gm_u64 m,
                                       gm_u64 k, gm_u64 n, gm_u32 ta, gm_u32 tb) {
    GM_FOR_EACH(idx, batch * m * n) {
        gm_u64 z = idx / (m * n), i = (idx / n) % m, j = idx % n;
        const T* az = a + z * m * k;
        const T* bz = b + z * k * n;
        double s = 0.0;
        for (gm_u64 l = 0; l < k; ++l) {
            float x = gm_load(az, ta ? l * m + i : i * k + l);
            float y = gm_load(bz, tb ? j * k + l : l * n + j);
            s += (double)x * (double)y;
        }
        gm_store(c, idx, (float)s);
    }
}

// y = x, with `fill` above the diagonal of each [cols, cols] matrix (row r is position r % cols).
template <typename T>
__device__ __forceinline__ void gm_causal_mask(const T* x, T* y, gm_u64 rows, gm_u64 cols,
                                               float fill) {
    GM_FOR_EACH(idx, rows * cols) {
        gm_u64 i = (idx / cols) % cols, j = idx % cols;
        gm_store(y, idx, j > i ? fill : gm_load(x, idx));
    }
}

// One thread per row: y = exp(x - max) / sum, the sum in double.
template <typename T>
__device__ __forceinline__ void gm_softmax(const T* x, T* y, gm_u64 rows, gm_u64 cols) {
    GM_FOR_EACH(r, rows) {
        float m = __int_as_float(0xff800000);
        for (gm_u64 c = 0; c < cols; ++c) m = fmaxf(m, gm_load(x, r * cols + c));
        double s = 0.0;
        for (gm_u64 c = 0; c < cols; ++c) s += exp((double)__fsub_rn(gm_load(x, r * cols + c), m));
        for (gm_u64 c = 0; c < cols; ++c) {
            double e = exp((double)__fsub_rn(gm_load(x, r * cols + c), m));
            gm_store(y, r * cols + c, (float)(e / s));
        }
    }
}

// One thread per row: dx = y * (g - sum(g * y)), the sum in double.
template <typename T>
__device__ __forceinline__ void gm_softmax_backward(const T* g, const T* y, T* dx, gm_u64 rows,
                                                    gm_u64 cols) {
    GM_FOR_EACH(r, rows) {
        double s = 0.0;
        for (gm_u64 c = 0; c < cols; ++c)
            s += (double)gm_load(g, r * cols + c) * (double)gm_load(y, r * cols + c);
        float sf = (float)s;
        for (gm_u64 c = 0; c < cols; ++c) {
            gm_u64 i = r * cols + c;
            gm_store(dx, i, __fmul_rn(gm_load(y, i), __fsub_rn(gm_load(g, i), sf)));
        }
    }
}

// The 1-byte keep mask of dropout (1 keeps, 0 drops).
__device__ __forceinline__ void gm_dropout_mask(unsigned char* mask, gm_u64 n, gm_u64 seed, float p) {
    GM_FOR_EACH(i, n) mask[i] = gm_keep(seed, i, p) ? 1 : 0;
}

// y = x * mask * scale (dropout's forward with scale 1/(1-p), and its backward).
template <typename T>
__device__ __forceinline__ void gm_dropout_apply(const T* x, const unsigned char* mask, T* y,
                                                 float scale, gm_u64 n) {
    GM_FOR_EACH(i, n) gm_store(y, i, mask[i] ? __fmul_rn(gm_load(x, i), scale) : 0.0f);
}

// One thread per row: the mean and 1/sqrt(var + eps) in f32, as torch's CUDA LayerNorm keeps them.
template <typename T>
__device__ __forceinline__ void gm_ln_stats(const T* x, float* mean, float* rstd, gm_u64 rows,
                                            gm_u64 cols, float eps) {
    GM_FOR_EACH(r, rows) {
        double s = 0.0;
        for (gm_u64 c = 0; c < cols; ++c) s += (double)gm_load(x, r * cols + c);
        double mu = s / (double)cols;
        double v = 0.0;
        for (gm_u64 c = 0; c < cols; ++c) {
            double t = (double)gm_load(x, r * cols + c) - mu;
            v += t * t;
        }
        mean[r] = (float)mu;
        rstd[r] = (float)(1.0 / sqrt(v / (double)cols + (double)eps));
    }
}

// y = (x - mean) * rstd * w + b.
template <typename T>
__device__ __forceinline__ void gm_ln_apply(const T* x, const float* mean, const float* rstd,
                                            const T* w, const T* b, T* y, gm_u64 rows, gm_u64 cols) {
    GM_FOR_EACH(idx, rows * cols) {
        gm_u64 r = idx / cols, c = idx % cols;
        float xhat = __fmul_rn(__fsub_rn(gm_load(x, idx), mean[r]), rstd[r]);
        gm_store(y, idx, __fadd_rn(__fmul_rn(xhat, gm_load(w, c)), gm_load(b, c)));
    }
}

// One thread per row: dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), the means in double.
template <typename T>
__device__ __forceinline__ void gm_ln_backward(const T* g, const T* x, const float* mean,
                                               const float* rstd, const T* w, T* dx, gm_u64 rows,
                                               gm_u64 cols) {
    GM_FOR_EACH(r, rows) {
        double s1 = 0.0, s2 = 0.0;
        for (gm_u64 c = 0; c < cols; ++c) {
            gm_u64 i = r * cols + c;
            float gw = __fmul_rn(gm_load(g, i), gm_load(w, c));
            float xhat = __fmul_rn(__fsub_rn(gm_load(x, i), mean[r]), rstd[r]);
            s1 += (double)gw;
            s2 += (double)gw * (double)xhat;
        }
        float m1 = (float)(s1 / (double)cols), m2 = (float)(s2 / (double)cols);
        for (gm_u64 c = 0; c < cols; ++c) {
            gm_u64 i = r * cols + c;
            float gw = __fmul_rn(gm_load(g, i), gm_load(w, c));
            float xhat = __fmul_rn(__fsub_rn(gm_load(x, i), mean[r]), rstd[r]);
            float t = __fsub_rn(__fsub_rn(gw, m1), __fmul_rn(xhat, m2));
            gm_store(dx, i, __fmul_rn(rstd[r], t));
        }
    }
}

// One thread per column: dw = sum over rows of g * xhat, db = sum of g, in double.
template <typename T>
__device__ __forceinline__ void gm_ln_param_grads(const T* g, const T* x, const float* mean,
                                                  const float* rstd, T* dw, T* db, gm_u64 rows,
                                                  gm_u64 cols) {
    GM_FOR_EACH(c, cols) {
        double sw = 0.0, sb = 0.0;
        for (gm_u64 r = 0; r < rows; ++r) {
            gm_u64 i = r * cols + c;
            float xhat = __fmul_rn(__fsub_rn(gm_load(x, i), mean[r]), rstd[r]);
            sw += (double)gm_load(g, i) * (double)xhat;
            sb += (double)gm_load(g, i);
        }
        gm_store(dw, c, (float)sw);
        gm_store(db, c, (float)sb);
    }
}

// Between rows of `stride` elements holding heads at column `offset` ([b, s, .., a*d, ..]) and
// heads laid out [b, a, s, d]: to_heads copies rows into heads, else heads into rows.
template <typename T>
__device__ __forceinline__ void gm_heads(const T* src, T* dst, gm_u64 b, gm_u64 s, gm_u64 a,
                                         gm_u64 d, gm_u64 stride, gm_u64 offset, gm_u32 to_heads) {
    GM_FOR_EACH(idx, b * a * s * d) {
        gm_u64 di = idx % d, si = (idx / d) % s, ai = (idx / (d * s)) % a, bi = idx / (d * s * a);
        gm_u64 row = (bi * s + si) * stride + offset + ai * d + di;
        if (to_heads) gm_store(dst, idx, gm_load(src, row));
        else gm_store(dst, row, gm_load(src, idx));
    }
}

// The score of query i and key j of head z, scaled, in double.
template <typename T>
__device__ __forceinline__ double gm_score(const T* q, const T* k, gm_u64 z, gm_u64 i, gm_u64 j,
                                           gm_u64 s, gm_u64 d, float scale) {
    double dot = 0.0;
    for (gm_u64 l = 0; l < d; ++l)
        dot += (double)gm_load(q, (z * s + i) * d + l) * (double)gm_load(k, (z * s + j) * d + l);
    return dot * (double)scale;
}

// GM_SDPA_TILE (defined by gpumem's kernel_source.rs from `SDPA_TILE`): the output columns one
// thread of the attention kernels computes. Its accumulators are GM_SDPA_TILE doubles, indexed
// only by unrolled loops, so they live in registers: an array indexed at run time would live in
// local memory, and the driver reserves a context's local memory for the largest stack frame of
// any kernel on every thread the device can hold (a 4 KiB frame is about 1 GiB on an H100), outside
// the caching allocator. The threads of one query (one per tile) each recompute the scores.
#define GM_SDPA_UNROLL _Pragma("unroll")

// Where element c of query i of head z sits in the output (and its gradient): [heads, s, d], or
// with `rows` the [b, s, a*d] rows of a layer (z = batch * a + head), as torch's fused kernels
// write it, so that `transpose(1, 2).reshape(b, s, h)` is a view.
__device__ __forceinline__ gm_u64 gm_out_index(gm_u64 z, gm_u64 i, gm_u64 c, gm_u64 s, gm_u64 d,
                                               gm_u64 a, gm_u32 rows) {
    return rows ? (((z / a) * s + i) * a + z % a) * d + c : (z * s + i) * d + c;
}

// Memory-efficient attention, one thread per (head, query, tile of GM_SDPA_TILE columns): two
// passes over the keys (the log-sum-exp, then the output), no s x s matrix in memory; dropout
// decided by gm_keep on the element's index in the [heads, s, s] matrix it never stores.
template <typename T>
__device__ __forceinline__ void gm_sdpa_forward(const T* q, const T* k, const T* v, T* out,
                                                float* lse, gm_u64 heads, gm_u64 s, gm_u64 d,
                                                gm_u64 lse_stride, float scale, gm_u32 causal,
                                                float p, gm_u64 seed, gm_u64 a,
                                                gm_u32 rows) {
    gm_u64 tiles = (d + GM_SDPA_TILE - 1) / GM_SDPA_TILE;
    GM_FOR_EACH(item, heads * s * tiles) {
        gm_u64 row = item / tiles, c0 = (item % tiles) * GM_SDPA_TILE;
        gm_u64 z = row / s, i = row % s, last = causal ? i + 1 : s;
        double m = -1.0e300;
        for (gm_u64 j = 0; j < last; ++j) m = fmax(m, gm_score(q, k, z, i, j, s, d, scale));
        double sum = 0.0;
        for (gm_u64 j = 0; j < last; ++j) sum += exp(gm_score(q, k, z, i, j, s, d, scale) - m);
        double l = m + log(sum);
        if (c0 == 0) lse[z * lse_stride + i] = (float)l;
        double acc[GM_SDPA_TILE];
        GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t) acc[t] = 0.0;
        double keep_scale = 1.0 / (1.0 - (double)p);
        for (gm_u64 j = 0; j < last; ++j) {
            if (p > 0.0f && !gm_keep(seed, row * s + j, p)) continue;
            double w = exp(gm_score(q, k, z, i, j, s, d, scale) - l) * (p > 0.0f ? keep_scale : 1.0);
            GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t)
                if (c0 + t < d) acc[t] += w * (double)gm_load(v, (z * s + j) * d + c0 + t);
        }
        GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t)
            if (c0 + t < d) gm_store(out, gm_out_index(z, i, c0 + t, s, d, a, rows), (float)acc[t]);
    }
}

// dP (after dropout's scaling) of query i and key j: z_ij * (dO_i . v_j).
template <typename T>
__device__ __forceinline__ double gm_sdpa_dp(const T* v, const T* dout, gm_u64 z, gm_u64 i,
                                             gm_u64 j, gm_u64 s, gm_u64 d, float p, gm_u64 seed,
                                             gm_u64 a, gm_u32 rows) {
    if (p > 0.0f && !gm_keep(seed, (z * s + i) * s + j, p)) return 0.0;
    double dot = 0.0;
    for (gm_u64 l = 0; l < d; ++l)
        dot += (double)gm_load(dout, gm_out_index(z, i, l, s, d, a, rows)) *
               (double)gm_load(v, (z * s + j) * d + l);
    return p > 0.0f ? dot / (1.0 - (double)p) : dot;
}

// D_i = dO_i . O_i.
template <typename T>
__device__ __forceinline__ double gm_sdpa_delta(const T* out, const T* dout, gm_u64 z, gm_u64 i,
                                                gm_u64 s, gm_u64 d, gm_u64 a, gm_u32 rows) {
    double dot = 0.0;
    for (gm_u64 l = 0; l < d; ++l) {
        gm_u64 o = gm_out_index(z, i, l, s, d, a, rows);
        dot += (double)gm_load(dout, o) * (double)gm_load(out, o);
    }
    return dot;
}

// One thread per (head, query, tile): dq_i = scale * sum_j P_ij (dP_ij - D_i) k_j.
template <typename T>
__device__ __forceinline__ void gm_sdpa_backward_q(const T* q, const T* k, const T* v, const T* out,
                                                   const T* dout, const float* lse, T* dq,
                                                   gm_u64 heads, gm_u64 s, gm_u64 d,
                                                   gm_u64 lse_stride, float scale, gm_u32 causal,
                                                   float p, gm_u64 seed, gm_u64 a, gm_u32 rows) {
    gm_u64 tiles = (d + GM_SDPA_TILE - 1) / GM_SDPA_TILE;
    GM_FOR_EACH(item, heads * s * tiles) {
        gm_u64 row = item / tiles, c0 = (item % tiles) * GM_SDPA_TILE;
        gm_u64 z = row / s, i = row % s, last = causal ? i + 1 : s;
        double delta = gm_sdpa_delta(out, dout, z, i, s, d, a, rows);
        double l = (double)lse[z * lse_stride + i];
        double acc[GM_SDPA_TILE];
        GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t) acc[t] = 0.0;
        for (gm_u64 j = 0; j < last; ++j) {
            double pij = exp(gm_score(q, k, z, i, j, s, d, scale) - l);
            double ds = pij * (gm_sdpa_dp(v, dout, z, i, j, s, d, p, seed, a, rows) - delta);
            GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t)
                if (c0 + t < d) acc[t] += ds * (double)gm_load(k, (z * s + j) * d + c0 + t);
        }
        GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t)
            if (c0 + t < d) gm_store(dq, row * d + c0 + t, (float)(acc[t] * (double)scale));
    }
}

// One thread per (head, key, tile): dk_j = scale * sum_i dS_ij q_i, dv_j = sum_i z_ij P_ij dO_i.
template <typename T>
__device__ __forceinline__ void gm_sdpa_backward_kv(const T* q, const T* k, const T* v,
                                                    const T* out, const T* dout, const float* lse,
                                                    T* dk, T* dv, gm_u64 heads, gm_u64 s, gm_u64 d,
                                                    gm_u64 lse_stride, float scale, gm_u32 causal,
                                                    float p, gm_u64 seed, gm_u64 a,
                                                    gm_u32 rows) {
    gm_u64 tiles = (d + GM_SDPA_TILE - 1) / GM_SDPA_TILE;
    GM_FOR_EACH(item, heads * s * tiles) {
        gm_u64 row = item / tiles, c0 = (item % tiles) * GM_SDPA_TILE;
        gm_u64 z = row / s, j = row % s, first = causal ? j : 0;
        double ak[GM_SDPA_TILE], av[GM_SDPA_TILE];
        GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t) { ak[t] = 0.0; av[t] = 0.0; }
        for (gm_u64 i = first; i < s; ++i) {
            double pij = exp(gm_score(q, k, z, i, j, s, d, scale) - (double)lse[z * lse_stride + i]);
            double delta = gm_sdpa_delta(out, dout, z, i, s, d, a, rows);
            double ds = pij * (gm_sdpa_dp(v, dout, z, i, j, s, d, p, seed, a, rows) - delta);
            bool kept = !(p > 0.0f) || gm_keep(seed, (z * s + i) * s + j, p);
            double pv = kept ? (p > 0.0f ? pij / (1.0 - (double)p) : pij) : 0.0;
            GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t) {
                if (c0 + t < d) {
                    ak[t] += ds * (double)gm_load(q, (z * s + i) * d + c0 + t);
                    av[t] += pv * (double)gm_load(dout, gm_out_index(z, i, c0 + t, s, d, a, rows));
                }
            }
        }
        GM_SDPA_UNROLL for (int t = 0; t < GM_SDPA_TILE; ++t) {
            if (c0 + t < d) {
                gm_store(dk, row * d + c0 + t, (float)(ak[t] * (double)scale));
                gm_store(dv, row * d + c0 + t, (float)av[t]);
            }
        }
    }
}
