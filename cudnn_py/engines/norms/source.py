"""The CUDA source of the norm forward kernels: one header-free template, specialised by ``-D`` macros.

The wheels carry no CUDA headers, so the source includes none: 16-bit floats are structs of their bits, converted
with PTX ``cvt`` (every target is sm_80 or newer), and the few intrinsics used (``__shfl_xor_sync``, ``rsqrtf``,
``__expf``) are NVRTC built-ins.

One kernel, ``norm_fwd``, computes per row (the normalized axes, ``n`` elements, contiguous):
``h = x (+ r)`` (the residual add, its sum written when asked), ``mean = sum(h) / n`` (0 for RMSNorm),
``var = sum((h - mean)^2) / n`` (two passes over the row held in registers, never ``E[h^2] - E[h]^2``),
``y = (h - mean) * rsqrt(var + eps) * w (+ b)``, then ``z = y * sigmoid(beta * y)`` for a fused SiLU / swish.
Everything is accumulated in fp32; the statistics are written as fp32 in training.

Compile-time layout (``variants.py`` picks it): ``VEC`` elements per access (16 bytes of X where every pointer and
the row width allow, else 1), ``TPR`` threads per row (a power of two; rows reduce by warp shuffles, across warps
through shared memory), ``RPC`` rows per CTA, ``ITERS`` accesses per thread per row (the row lives in
``ITERS * VEC`` registers per thread), or ``LOOPED`` (rows too wide for registers: three passes over global
memory, the second and third served by L2), and ``HINTS`` (the streamed tensors read around L1 and written
evict-first, on the 16-byte path). The grid strides over groups of ``RPC`` rows; the engine launches one CTA per
group (measured faster than a grid capped at what the GPU holds at once, with or without prefetching the next
rows: ``benchmarks/norm_sweep.py``), so the loop runs once except past the grid's limit.

:data:`VERSION` is a hash of :data:`SOURCE`: it changes whenever the kernel does, and it is part of every plan's
identity and of every compiled-module key.
"""
from __future__ import annotations

import hashlib

SOURCE = r"""
typedef unsigned short u16;
struct bf16_t { u16 x; };
struct f16_t { u16 x; };

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16_t v) { return __uint_as_float(((unsigned)v.x) << 16); }
__device__ __forceinline__ float to_f(f16_t v) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f;
}
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16_t from_f<bf16_t>(float v) {
  bf16_t r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v)); return r;
}
template <> __device__ __forceinline__ f16_t from_f<f16_t>(float v) {
  f16_t r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v)); return r;
}

// aligned to its size up to 16 bytes (a wider pack, fp32 beside a 16-bit X, is two 16-byte accesses)
template <typename T, int N> struct __align__(sizeof(T) * N > 16 ? 16 : sizeof(T) * N) Pack { T v[N]; };

// 16 bytes of a streamed tensor (X, the residual; Y, the sum, the SiLU output): with HINTS, read through the
// non-coherent path without allocating in L1 and written evict-first, so the rows streaming through do not push the
// scale and bias (read by every row) out of the caches
struct __align__(16) U4 { unsigned a, b, c, d; };
template <typename P> __device__ __forceinline__ P ld_stream(const P* a) {
#if HINTS
  if (sizeof(P) == 16) {
    U4 u;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(u.a), "=r"(u.b), "=r"(u.c), "=r"(u.d) : "l"(a));
    return *reinterpret_cast<const P*>(&u);
  }
#endif
  return *a;
}
template <typename P> __device__ __forceinline__ void st_stream(P* a, const P& v) {
#if HINTS
  if (sizeof(P) == 16) {
    const U4 u = *reinterpret_cast<const U4*>(&v);
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(a), "r"(u.a), "r"(u.b), "r"(u.c), "r"(u.d)
                 : "memory");
    return;
  }
#endif
  *a = v;
}

template <typename T> __device__ __forceinline__ void load(const void* base, long long i, float (&out)[VEC]) {
  const Pack<T, VEC> p = ld_stream(reinterpret_cast<const Pack<T, VEC>*>(reinterpret_cast<const T*>(base) + i));
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = to_f(p.v[k]);
}
// the scale and bias: the same columns for every row, so cached
template <typename T> __device__ __forceinline__ void load_param(const void* base, long long i, float (&out)[VEC]) {
  const Pack<T, VEC> p = *reinterpret_cast<const Pack<T, VEC>*>(reinterpret_cast<const T*>(base) + i);
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = to_f(p.v[k]);
}
template <typename T> __device__ __forceinline__ void store(void* base, long long i, const float (&in)[VEC]) {
  Pack<T, VEC> p;
#pragma unroll
  for (int k = 0; k < VEC; ++k) p.v[k] = from_f<T>(in[k]);
  st_stream(reinterpret_cast<Pack<T, VEC>*>(reinterpret_cast<T*>(base) + i), p);
}

struct Params {
  const void* x; const void* r; void* s; const void* w; const void* b;
  void* y; void* z; float* mean; float* rstd; const float* eps_ptr;
  float eps; float beta; float inv_n; int n; long long rows;
};

#define THREADS (TPR * RPC)
#define WARPS_PER_ROW (TPR > 32 ? TPR / 32 : 1)
// at most 128 registers a thread (64 spilled at 512 threads; more would cost occupancy)
#define MIN_BLOCKS (THREADS >= 512 ? 1 : 512 / THREADS)

__device__ __forceinline__ float row_sum(float v, float* buf, int tid) {
#pragma unroll
  for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
#if TPR > 32
  if ((tid & 31) == 0) buf[tid >> 5] = v;
  __syncthreads();
  v = 0.f;
#pragma unroll
  for (int i = 0; i < WARPS_PER_ROW; ++i) v += buf[i];
#endif
  return v;
}

// h = x (+ r); writes the sum when asked
__device__ __forceinline__ void load_h(const Params& p, long long off, float (&h)[VEC]) {
  load<TX>(p.x, off, h);
#if HAS_RES
  float r[VEC];
  load<TR>(p.r, off, r);
#pragma unroll
  for (int k = 0; k < VEC; ++k) h[k] += r[k];
#endif
}

__device__ __forceinline__ void finish(const Params& p, long long off, int col, float mean, float rstd,
                                       const float (&h)[VEC]) {
  float w[VEC], o[VEC];
  load_param<TW>(p.w, col, w);
#if HAS_BIAS
  float b[VEC];
  load_param<TB>(p.b, col, b);
#endif
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    o[k] = (h[k] - mean) * rstd * w[k];
#if HAS_BIAS
    o[k] += b[k];
#endif
  }
#if WRITE_Y
  store<TY>(p.y, off, o);
#endif
#if SILU
#pragma unroll
  for (int k = 0; k < VEC; ++k) o[k] = o[k] / (1.f + __expf(-p.beta * o[k]));
  store<TZ>(p.z, off, o);
#endif
}

// X (+ R) of one row into registers; zeros past the row's end and for rows past the last
__device__ __forceinline__ void load_row(const Params& p, long long row, int tid, float (&h)[ITERS][VEC]) {
  const bool valid = row < p.rows;
  const long long roff = row * (long long)p.n;
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int col = (it * TPR + tid) * VEC;
    if (valid && col < p.n) {
      load_h(p, roff + col, h[it]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) h[it][k] = 0.f;
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) norm_fwd(const Params p) {
  __shared__ float red[2][RPC][WARPS_PER_ROW];
  const int tid = threadIdx.x % TPR, sub = threadIdx.x / TPR;
  const int n = p.n;
  const float eps = p.eps_ptr ? *p.eps_ptr : p.eps;
  const long long stride = (long long)gridDim.x * RPC;
  for (long long base = (long long)blockIdx.x * RPC; base < p.rows; base += stride) {
    const long long row = base + sub;
    const bool valid = row < p.rows;
    const long long roff = row * (long long)n;
    float sum = 0.f, sq = 0.f, mean = 0.f;
#if !LOOPED
    float h[ITERS][VEC];
    load_row(p, row, tid, h);
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum += h[it][k];
#if WRITE_SUM
      const int col = (it * TPR + tid) * VEC;
      if (valid && col < n) store<TS>(p.s, roff + col, h[it]);
#endif
    }
#if !RMS
    mean = row_sum(sum, red[0][sub], tid) * p.inv_n;
#endif
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int col = (it * TPR + tid) * VEC;
      if (col < n) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) { const float d = h[it][k] - mean; sq += d * d; }
      }
    }
    const float rstd = rsqrtf(row_sum(sq, red[1][sub], tid) * p.inv_n + eps);
    if (valid) {
#pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const int col = (it * TPR + tid) * VEC;
        if (col < n) finish(p, roff + col, col, mean, rstd, h[it]);
      }
    }
#else
    float h[VEC];
    for (int col = tid * VEC; valid && col < n; col += TPR * VEC) {
      load_h(p, roff + col, h);
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum += h[k];
#if WRITE_SUM
      store<TS>(p.s, roff + col, h);
#endif
    }
#if !RMS
    mean = row_sum(sum, red[0][sub], tid) * p.inv_n;
#endif
    for (int col = tid * VEC; valid && col < n; col += TPR * VEC) {
      load_h(p, roff + col, h);
#pragma unroll
      for (int k = 0; k < VEC; ++k) { const float d = h[k] - mean; sq += d * d; }
    }
    const float rstd = rsqrtf(row_sum(sq, red[1][sub], tid) * p.inv_n + eps);
    for (int col = tid * VEC; valid && col < n; col += TPR * VEC) {
      load_h(p, roff + col, h);
      finish(p, roff + col, col, mean, rstd, h);
    }
#endif
#if TRAIN
    if (valid && tid == 0) {
#if !RMS
      p.mean[row] = mean;
#endif
      p.rstd[row] = rstd;
    }
#endif
  }
}
"""

KERNEL_NAME = "norm_fwd"

VERSION = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
