/* The kernel math that every backend compiles, written once (issue 30):
 * lpk_formats.h (SPEC 2's number formats), lpk_quant.h (the block quantizer
 * steps, Philox stochastic rounding), lpk_softmax.h (the online-softmax row
 * state). Host C++ (the CPU backend) includes them at file scope; the GPU
 * kernels (backends/gpu/kernels/lp_gpu.cuh) inside their namespace, so the
 * same names live once per backend. LPK_FN is each compiler's spelling of a
 * small inline function. Built without fast-math and FMA contraction: every
 * step is one IEEE f32 operation, bit-exact with core/formats.c. */
#ifndef LPK_FN_H
#define LPK_FN_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(LPATTN_HIP)
#define LPK_FN static __host__ __device__ inline
#elif defined(__CUDACC__)
#define LPK_FN static __host__ __device__ __forceinline__
#else
#define LPK_FN static inline
#endif
#endif
