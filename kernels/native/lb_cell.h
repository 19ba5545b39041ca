// The per-cell part of the in-place lattice-Boltzmann kernels, shared by the CPU kernel
// (lb_inplace.cc, compiled by g++) and the CUDA kernel (lb_gpu.cu, compiled by nvcc, or by g++
// as its CPU emulation): the relaxation rates, the stored form of a population (float16
// storage) and the collision of one cell. One source, so that the GPU kernel rounds exactly as
// the CPU kernel does (both without contraction: -ffp-contract=off, nvcc --fmad=false).
//
// Lattice tables come from the generated lattices.inc (solver/fluid/native.py): the arrays
// L::c, L::opp, L::w for host-only code, and the accessors L::C(i, a), L::OPP(i), L::W(i) that
// device code can call (nvcc does not let device code index a host constexpr array; in an
// unrolled loop the accessors fold to constants). The shared code below names them through
// LB_C, LB_OPP and LB_W: accessors under nvcc, arrays under g++.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define LB_HD __host__ __device__
#define LB_INLINE __host__ __device__ __forceinline__
#define LB_UNROLL _Pragma("unroll")
#define LB_C(L, i, a) L::C(i, a)
#define LB_OPP(L, i) L::OPP(i)
#define LB_W(L, i) L::W(i)
#else
#define LB_HD
#define LB_INLINE __attribute__((always_inline)) inline
#define LB_UNROLL _Pragma("GCC unroll 32")
// the arrays on the CPU: with the accessors GCC 12 made different (larger) code of the CPU
// kernel's sweeps; with the arrays its machine code is what it was before this header
#define LB_C(L, i, a) L::c[i][a]
#define LB_OPP(L, i) L::opp[i]
#define LB_W(L, i) L::w[i]
#endif

#include "lattices.inc"  // generated from kernels/lattices.py by solver/fluid/native.py

// sqrt for the Smagorinsky rate; the build's -fno-math-errno drops the library call's errno
// branch, which kept GCC from vectorising the cell loop (the argument is never negative); on
// the GPU sqrt is correctly rounded as well (nvcc's default -prec-sqrt=true)
LB_INLINE float root(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return __builtin_sqrtf(x);
#endif
}
LB_INLINE double root(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return __builtin_sqrt(x);
#endif
}

namespace {

// The relaxation rates; with the Smagorinsky model (LES) the even rate is per cell, from tau0,
// tau0^2 (rounded from double as the XLA step's Python scalars are), the model's scale
// 18 sqrt(2) C_s^2 and, for TRT, Lambda (the odd rate follows; BGK: odd = even).
template <class T>
struct Rates {
  T omega_plus, omega_minus;
  T tau0, tau0_squared, les_scale, magic;
  T trt;  // 1 for TRT, 0 for BGK (under LES the odd rate follows the local even one)
};

// IEEE binary16 <-> float32 by integer arithmetic on the bit patterns, branch-free so that GCC
// vectorises it (GCC 12 does not vectorise conversions of _Float16 without AVX512-FP16; with
// _Float16 the float16 kernel ran at 19 MLUPS, scalar). Exact: every half is a float, and
// float -> half rounds to nearest, ties to even, as XLA's conversion does.
LB_INLINE uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
LB_INLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
LB_INLINE float half_to_float(uint16_t h) {
  const uint32_t magnitude = uint32_t(h & 0x7fffu) << 13;   // exponent and mantissa, in place
  // rebias by multiplying with 2^112: normal halves become normal floats, and subnormal
  // halves (exponent 0) come out exact as well
  uint32_t u = float_bits(bits_float(magnitude) * bits_float(0x77800000u));
  u = (h & 0x7c00u) == 0x7c00u ? (magnitude | 0x7f800000u) : u;  // inf and NaN
  return bits_float(u | (uint32_t(h & 0x8000u) << 16));
}
LB_INLINE uint16_t float_to_half(float x) {
  const uint32_t all = float_bits(x);
  const uint32_t sign = (all >> 16) & 0x8000u;
  const uint32_t u = all & 0x7fffffffu;
  // normal halves: rebias the exponent, round the 13 dropped bits to nearest even
  const uint32_t normal = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
  // subnormal halves: let a float addition do the rounding (aligns the mantissa at 2^-24)
  const uint32_t subnormal = float_bits(bits_float(u) + 0.5f) - 0x3f000000u;
  // too large: inf (or a quiet NaN for NaN)
  const uint32_t large = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  uint32_t h = u < 0x38800000u ? subnormal : normal;
  h = u >= 0x47800000u ? large : h;
  return uint16_t(h | sign);
}

// The stored form of one population (kernels/storage.py): f itself when S is the compute type
// T, else (f - w) * 2^15 as a float16 bit pattern S = uint16_t (FP16S-like; the scale is a
// power of two, so decoding is exact and the encode rounds once, as the XLA step's).
template <class S, class T>
struct Codec {
  static constexpr bool shifted = !std::is_same<S, T>::value;
  LB_INLINE static T load(S v, double w) {
    if constexpr (!shifted) {
      return v;
    } else {
      return half_to_float(v) * (T(1) / T(32768)) + T(w);
    }
  }
  LB_INLINE static S store(T f, double w) {
    if constexpr (!shifted) {
      return f;
    } else {
      return float_to_half((f - T(w)) * T(32768));
    }
  }
};

// Collide one cell: f (q values) in, f* out, with the body force F (3 components, 0 in unused
// ones) when FORCE. Formulas and constants as kernels/equilibrium.py and kernels/collision.py.
template <class L, class T, bool FORCE, bool LES>
LB_INLINE void collide(T* f, const T* F, Rates<T> r) {
  constexpr int Q = L::Q;
  T rho = 0, jx = 0, jy = 0, jz = 0;
LB_UNROLL
  for (int i = 0; i < Q; ++i) {
    rho += f[i];
    if (LB_C(L, i, 0)) jx += LB_C(L, i, 0) * f[i];
    if (LB_C(L, i, 1)) jy += LB_C(L, i, 1) * f[i];
    if (LB_C(L, i, 2)) jz += LB_C(L, i, 2) * f[i];
  }
  if (FORCE) {
    jx += T(0.5) * F[0];
    jy += T(0.5) * F[1];
    jz += T(0.5) * F[2];
  }
  const T ux = jx / rho, uy = jy / rho, uz = jz / rho;
  const T usq = ux * ux + uy * uy + uz * uz;
  const T base = T(1) - usq * T(1.5);
  T feq[Q];
LB_UNROLL
  for (int i = 0; i < Q; ++i) {
    const T cu = LB_C(L, i, 0) * ux + LB_C(L, i, 1) * uy + LB_C(L, i, 2) * uz;
    feq[i] = T(LB_W(L, i)) * rho * (base + cu * T(3) + cu * cu * T(4.5));
  }
  T omega_plus = r.omega_plus, omega_minus = r.omega_minus;
  if constexpr (LES) {
    // Smagorinsky (kernels/collision.py smagorinsky_omega, same sums in the same order): the
    // non-equilibrium momentum flux Q_ab with its forcing part, |Q|, and tau from the closed
    // form; a 2D lattice lives on axes (0, 2) of the kernel's grid
    // the six components in one pass over i (each sums over i in the XLA step's order)
    T qxx = 0, qxy = 0, qxz = 0, qyy = 0, qyz = 0, qzz = 0;
LB_UNROLL
    for (int i = 0; i < Q; ++i) {
      const T neq = f[i] - feq[i];
      const int cx = LB_C(L, i, 0), cy = LB_C(L, i, 1), cz = LB_C(L, i, 2);
      if (cx * cx) qxx += T(cx * cx) * neq;
      if (cx * cy) qxy += T(cx * cy) * neq;
      if (cx * cz) qxz += T(cx * cz) * neq;
      if (cy * cy) qyy += T(cy * cy) * neq;
      if (cy * cz) qyz += T(cy * cz) * neq;
      if (cz * cz) qzz += T(cz * cz) * neq;
    }
    T square = 0;
    // flux_ab with its forcing part, weighted 1 on the diagonal and 2 off it, in the order
    // (a, b) = xx, xy, xz, yy, yz, zz of the XLA step (a 2D lattice: xx, xz, zz)
    const auto add = [&](T flux, T fa, T ub, T ua, T fb, T weight) {
      if (FORCE) flux = flux + T(0.5) * (fa * ub + ua * fb);
      square = square + weight * flux * flux;
    };
    add(qxx, F[0], ux, ux, F[0], T(1));
    if (L::D == 3) add(qxy, F[0], uy, ux, F[1], T(2));
    add(qxz, F[0], uz, ux, F[2], T(2));
    if (L::D == 3) add(qyy, F[1], uy, uy, F[1], T(1));
    if (L::D == 3) add(qyz, F[1], uz, uy, F[2], T(2));
    add(qzz, F[2], uz, uz, F[2], T(1));
    const T tau = T(0.5) * (r.tau0 + root(r.tau0_squared + r.les_scale * root(square) / rho));
    omega_plus = T(1) / tau;
    // computed for BGK too and weighted out: a bool select in the loop stopped GCC vectorising it
    const T trt_minus = T(1) / (r.magic / (T(1) / omega_plus - T(0.5)) + T(0.5));
    omega_minus = r.trt * trt_minus + (T(1) - r.trt) * omega_plus;  // r.trt 1 or 0: exact
  }
  // TRT; BGK is the same with omega_minus = omega_plus (equal to round-off, one code path)
  T post[Q];
LB_UNROLL
  for (int i = 0; i < Q; ++i) {
    const int j = LB_OPP(L, i);
    const T ni = f[i] - feq[i], nj = f[j] - feq[j];
    post[i] = f[i] - omega_plus * (T(0.5) * (ni + nj)) - omega_minus * (T(0.5) * (ni - nj));
  }
  if (FORCE) {
    const T uf = ux * F[0] + uy * F[1] + uz * F[2];
    const T even_factor = T(1) - T(0.5) * omega_plus;
    const T odd_factor = T(1) - T(0.5) * omega_minus;
LB_UNROLL
    for (int i = 0; i < Q; ++i) {
      const T cf = LB_C(L, i, 0) * F[0] + LB_C(L, i, 1) * F[1] + LB_C(L, i, 2) * F[2];
      const T cu = LB_C(L, i, 0) * ux + LB_C(L, i, 1) * uy + LB_C(L, i, 2) * uz;
      const T w = T(LB_W(L, i));
      post[i] += even_factor * (w * (cu * cf * T(9) - uf * T(3))) + odd_factor * (w * cf * T(3));
    }
  }
LB_UNROLL
  for (int i = 0; i < Q; ++i) f[i] = post[i];
}

// The rates of one run, from the handler's attributes (trt_magic < 0: BGK).
template <class T>
Rates<T> rates_of(double omega_plus, double omega_minus, double les_scale, double trt_magic) {
  const double tau0 = 1.0 / omega_plus;
  return Rates<T>{T(omega_plus), T(omega_minus), T(tau0), T(tau0 * tau0), T(les_scale),
                  T(trt_magic), T(trt_magic >= 0 ? 1 : 0)};
}

// run(walls, force, les) with each flag as a compile-time constant (std::true_type or
// std::false_type): one instantiation per combination
template <class Run>
void dispatch(bool walls, bool force, bool les, Run run) {
  using yes = std::true_type;
  using no = std::false_type;
  const auto with_les = [&](auto solid_c, auto force_c) {
    les ? run(solid_c, force_c, yes{}) : run(solid_c, force_c, no{});
  };
  const auto with_force = [&](auto solid_c) {
    force ? with_les(solid_c, yes{}) : with_les(solid_c, no{});
  };
  walls ? with_force(yes{}) : with_force(no{});
}

// Lattice weight of direction k, for a k known only at run time (a link's slot): the CPU's array;
// on the GPU a select over the unrolled directions (device code cannot index the host array)
template <class L>
LB_INLINE double weight(int k) {
#if defined(__CUDA_ARCH__)
  double w = 0;
  LB_UNROLL
  for (int j = 0; j < L::Q; ++j) w = j == k ? L::W(j) : w;
  return w;
#else
  return L::w[k];
#endif
}

// Link l from a solid into a fluid node (slots[2 l] = opp(k) n + s, the solid slot;
// slots[2 l + 1] = k n + x, the fluid slot), repaired between sweeps (both kernels): after an
// even sweep the solid slot gets the fluid slot's value plus Ladd's term, after an odd sweep
// (AFTER_ODD) the other way round. Directions k and opp k have one weight; a resting wall's
// link copies the stored value as it is.
template <class L, class S, class T, bool AFTER_ODD>
LB_INLINE void repair_link(S* A, const int64_t* slots, const T* ladd, int64_t l, int64_t n) {
  using C = Codec<S, T>;
  const int64_t solid_slot = slots[2 * l], fluid_slot = slots[2 * l + 1];
  const int64_t from = AFTER_ODD ? solid_slot : fluid_slot;
  const int64_t to = AFTER_ODD ? fluid_slot : solid_slot;
  if (C::shifted && ladd[l] == T(0)) {
    A[to] = A[from];
  } else {
    const double w = weight<L>(int(fluid_slot / n));
    A[to] = C::store(C::load(A[from], w) + ladd[l], w);
  }
}

}  // namespace
