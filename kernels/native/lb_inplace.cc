// In-place lattice-Boltzmann chunk on ONE population buffer (the AA access pattern), as an XLA
// FFI handler for the CPU.
//
// The AA pattern (Bailey et al. 2009, "Accelerating lattice Boltzmann fluid flow simulations
// using graphics processors", ICPP) alternates two kinds of step on a single array A[i][x]:
//   even step: cell x reads f_i = A[i][x], collides, writes f*_i to A[opp(i)][x]   (local);
//   odd step:  cell x reads f_i = A[opp(i)][x - c_i], collides, writes f*_i to A[i][x + c_i].
// In the odd step cell x reads and writes exactly the set {A[i][x + c_i]}; these sets of
// different cells are disjoint, so every cell updates in place without races, and after an
// even + odd pair A is back in the natural layout: A[i][x] = f_i(x), the pre-collision
// populations at the new time (the state the pure-JAX step keeps between chunks).
//
// Half-way bounce-back (derivation in docs/performance.md, "One population buffer"): the
// sweeps treat every node alike, solid ones included (their values are never read by a fluid
// node), and the links from a solid node s = x - c_k into a fluid node x are repaired between
// sweeps from a list made once on the host:
//   after an even sweep: A[opp k][s] = A[k][x] + ladd_k  (the even step left f*_{opp k}(x) in
//                        A[k][x]; the odd sweep of x reads its f_k from A[opp k][s]);
//   after an odd sweep:  A[k][x] = A[opp k][s] + ladd_k  (x pushed its f*_{opp k} into the solid
//                        slot A[opp k][s]; the even sweep of x reads f_k from A[k][x]),
// ladd_k = 6 w_k c_k.u_w(s) being Ladd's moving-wall term (0 on resting walls). Each repaired
// slot belongs to one link, and no sweep of another node touches it in between. Between chunks
// the state is the natural layout with solid nodes at rest (f_i = w_i), exactly as in the
// pure-JAX step: the chunk resets the solid nodes at its end.
//
// Collision: BGK or TRT with Guo's forcing, the same formulas as kernels/collision.py and
// kernels/equilibrium.py (the pure-JAX step is the reference this must equal to round-off).
// The 2D lattice is handled as a 3D grid (nx, 1, ny) with c = (cx, 0, cy).
//
// Layout: A is (q, nx, ny, nz) C-ordered (the solver's (q, *shape)); the innermost loop runs
// over z, contiguous for every direction, and is vectorised (OpenMP simd); rows of (x, y) are
// split over OpenMP threads.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <omp.h>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"
#include "lb_cell.h"  // the rates, the stored form and the collision of one cell
#include "lb_chunk_args.h"  // the checks of LbInplace's arguments (shared with lb_gpu.cu)


namespace ffi = xla::ffi;
using idx = std::ptrdiff_t;

namespace {

struct Grid {
  idx nx, ny, nz, n;  // n = nx * ny * nz cells
  // Rotated planes (one-device chunks, solver/fluid/inplace_step.py plane_shift): direction
  // k's plane holds row r of the grid at row (r + k shift) mod (nx ny), so that the q planes'
  // copies of one cell do not all fall into one cache set when n is a multiple of a large
  // power of two; 0: the natural layout.
  idx shift = 0;
  // the row index x ny + y, both periodic
  idx rindex(idx x, idx y) const {  // x in [-nx, 2 nx), y in [-ny, 2 ny): compares, not modulos
    x = x < 0 ? x + nx : (x >= nx ? x - nx : x);
    y = y < 0 ? y + ny : (y >= ny ? y - ny : y);
    return x * ny + y;
  }
  // the natural offset of row (x, y): cells, solid flags, ghost planes
  idx row(idx x, idx y) const { return rindex(x, y) * nz; }
  // the offset of row r of direction dir's plane within that plane (requires dir shift < nx ny)
  idx prow(int dir, idx r) const {
    if (shift == 0) return r * nz;
    const idx s = r + dir * shift, rows = nx * ny;
    return (s >= rows ? s - rows : s) * nz;
  }
  // Split along x over several devices (docs/performance.md, "The in-place scheme on several
  // devices"): the planes x = -1 and x = nx are ghosts held in a separate buffer G of
  // (2, m, ny, nz), G[0] the directions with c_x = -1 at x = -1 and G[1] those with c_x = +1
  // at x = nx (m of each: the only slots of a ghost plane an odd sweep reads or writes).
  // Without G (nullptr) x wraps around (one device, periodic).
  template <class L, class S>
  S* at(S* A, S* G, int dir, idx x, idx y) const {
    if (G != nullptr && (x < 0 || x >= nx)) {
      y = (y % ny + ny) % ny;
      const int half = x < 0 ? 0 : 1;
      const int slot = half == 0 ? ghost_slot<L>(dir, -1) : ghost_slot<L>(dir, 1);
      return G + ((half * ghost_dirs<L>() + slot) * ny + y) * nz;
    }
    return A + dir * n + prow(dir, rindex(x, y));
  }
  // directions with c_x = sign, counted; and the index of dir among them (-1: not one of them)
  template <class L>
  static constexpr int ghost_dirs() {
    int m = 0;
    for (int k = 0; k < L::Q; ++k) m += L::c[k][0] == 1;
    return m;
  }
  template <class L>
  static constexpr int ghost_slot(int dir, int sign) {
    int j = 0;
    for (int k = 0; k < L::Q; ++k) {
      if (L::c[k][0] != sign) continue;
      if (k == dir) return j;
      ++j;
    }
    return -1;
  }
  // z + dz for |dz| <= 1, periodic: a compare instead of a modulo
  idx stepz(idx z, int dz) const {
    const idx s = z + dz;
    return s < 0 ? s + nz : (s >= nz ? s - nz : s);
  }
};

#if defined(__F16C__)
// float16 storage on a CPU with F16C: eight cells along z at once in AVX registers, converted
// by vcvtph2ps / vcvtps2ph (round to nearest even), with the same collide() instantiated for
// an eight-lane float type. GCC vectorises neither _Float16 conversions nor the intrinsics
// inside the scalar cell loop (the loop stayed scalar, 2x slower than the branch-free pair
// above); here nothing is left to the vectoriser. Same operations in the same order as Codec
// and the scalar collide (IEEE add, sub, mul, div; no contraction), so both paths store the
// same bits.
struct V8 {
  __m256 v;
  V8() = default;
  V8(float s) : v(_mm256_set1_ps(s)) {}  // NOLINT: scalars broadcast, as in collide's T(1.5)
  explicit V8(__m256 x) : v(x) {}
};
inline V8 operator+(V8 a, V8 b) { return V8(_mm256_add_ps(a.v, b.v)); }
inline V8 operator-(V8 a, V8 b) { return V8(_mm256_sub_ps(a.v, b.v)); }
inline V8 operator*(V8 a, V8 b) { return V8(_mm256_mul_ps(a.v, b.v)); }
inline V8 operator/(V8 a, V8 b) { return V8(_mm256_div_ps(a.v, b.v)); }
inline V8& operator+=(V8& a, V8 b) { return a = a + b; }
inline V8 root(V8 a) { return V8(_mm256_sqrt_ps(a.v)); }

// Cells z .. z + 7 of a row (not wrapping); ra, rm, rp as in sweep.
template <class L, bool ODD, bool FORCE, bool LES>
__attribute__((always_inline)) inline void cells8(uint16_t* const* ra, uint16_t* const* rm,
                                                  uint16_t* const* rp, idx z,
                                                  const float* F, Rates<float> r) {
  constexpr int Q = L::Q;
  const V8 unscale(1.0f / 32768.0f), scale(32768.0f);
  V8 f[Q];
#pragma GCC unroll 32
  for (int k = 0; k < Q; ++k) {
    const uint16_t* p = ODD ? rm[k] + z - L::c[k][2] : ra[k] + z;
    const V8 v(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    f[k] = v * unscale + V8(float(L::w[k]));
  }
  const V8 F8[3] = {F[0], F[1], F[2]};
  const Rates<V8> r8{r.omega_plus, r.omega_minus, r.tau0, r.tau0_squared, r.les_scale, r.magic,
                     r.trt};
  collide<L, V8, FORCE, LES>(f, F8, r8);
#pragma GCC unroll 32
  for (int k = 0; k < Q; ++k) {
    const V8 v = (f[k] - V8(float(L::w[k]))) * scale;
    uint16_t* p = ODD ? rp[k] + z + L::c[k][2] : ra[L::opp[k]] + z;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}
#endif

// What a sweep does around each row besides the cells' collision: nothing for the fluid alone;
// bodies in the fluid (lb_psm.inc) collide the row's covered cells before it and write them
// over it after, while the row's populations are in the cache.
struct NoRowHook {
  template <class S>
  __attribute__((always_inline)) void before(idx, idx, S* const*, S* const*) const {}
  template <class S>
  __attribute__((always_inline)) void after(idx, idx, S* const*, S* const*) const {}
};

// One sweep (an even or an odd step) over the grid, every node alike.
template <class L, class S, class T, bool ODD, bool FORCE, bool LES, class Hook = NoRowHook>
void sweep(S* A, const Grid& g, const T* F, Rates<T> r, S* G = nullptr,
           const Hook& hook = Hook{}) {
  using C = Codec<S, T>;
  constexpr int Q = L::Q;
  const idx n = g.n, nz = g.nz;
#pragma omp parallel for collapse(2) schedule(static)
  for (idx x = 0; x < g.nx; ++x) {
    for (idx y = 0; y < g.ny; ++y) {
      // the odd step's rows: A[opp k] at x - c_k (read) and A[k] at x + c_k (written)
      // the even step's: A[k] at (x, y) (read, and written as opp k)
      S* rm[Q];
      S* rp[Q];
      S* ra[Q];
      const idx row = g.rindex(x, y), r0 = row * nz;
      for (int k = 0; k < Q; ++k) {
        if (ODD) {
          rm[k] = g.at<L>(A, G, L::opp[k], x - L::c[k][0], y - L::c[k][1]);
          rp[k] = g.at<L>(A, G, k, x + L::c[k][0], y + L::c[k][1]);
        } else {
          ra[k] = A + k * n + g.prow(k, row);
        }
      }
      hook.before(x, y, ODD ? rm : ra, ODD ? rp : ra);
      // one cell; WRAP: z at an end of the row (periodic index), else plain offsets that the
      // vectoriser sees as contiguous
      auto cell = [&](idx z, auto wrap) __attribute__((always_inline)) {
        constexpr bool WRAP = decltype(wrap)::value;
        T f[Q];
#pragma GCC unroll 32
        for (int k = 0; k < Q; ++k) {
          if (ODD) {
            const idx src = WRAP ? g.stepz(z, -L::c[k][2]) : z - L::c[k][2];
            f[k] = C::load(rm[k][src], L::w[k]);
          } else {
            f[k] = C::load(ra[k][z], L::w[k]);
          }
        }
        collide<L, T, FORCE, LES>(f, F, r);
#pragma GCC unroll 32
        for (int k = 0; k < Q; ++k) {
          if (ODD) {
            const idx dst = WRAP ? g.stepz(z, L::c[k][2]) : z + L::c[k][2];
            rp[k][dst] = C::store(f[k], L::w[k]);
          } else {
            ra[L::opp[k]][z] = C::store(f[k], L::w[k]);
          }
        }
      };
      using yes = std::true_type;
      using no = std::false_type;
      cell(0, yes{});
      idx z = 1;
#if defined(__F16C__)
      if constexpr (C::shifted && std::is_same<T, float>::value) {
        for (; z + 8 <= nz - 1; z += 8) cells8<L, ODD, FORCE, LES>(ra, rm, rp, z, F, r);
      }
#endif
#pragma omp simd
      for (idx zz = z; zz < nz - 1; ++zz) cell(zz, no{});
      if (nz > 1) cell(nz - 1, yes{});
      hook.after(x, y, ODD ? rm : ra, ODD ? rp : ra);
    }
  }
}

// The links from solid into fluid nodes, every one repaired (repair_link, lb_cell.h)
template <class L, class S, class T, bool AFTER_ODD>
void repair_links(S* A, const int64_t* slots, const T* ladd, idx links, idx n) {
#pragma omp parallel for schedule(static)
  for (idx l = 0; l < links; ++l) repair_link<L, S, T, AFTER_ODD>(A, slots, ladd, l, n);
}

template <class L, class S, class T>
void rest_in_solids(S* A, const uint8_t* solid, const Grid& g) {
  using C = Codec<S, T>;
  const idx n = g.n;
#pragma omp parallel for schedule(static)
  for (idx c = 0; c < n; ++c) {
    if (!solid[c]) continue;
    for (int k = 0; k < L::Q; ++k) A[k * n + c] = C::store(T(L::w[k]), L::w[k]);
  }
}

// After an even step (an odd-length chunk): stream in place to the natural layout. The pairs
// (A[k][x], A[opp k][x - c_k]) of fluid nodes swap; a population from a solid node is already
// where the natural layout wants it (the even step's f*_{opp k} in A[k][x]) but for Ladd's
// term, added from the link list.
template <class L, class S, class T, bool SOLID>
void stream_pairs(S* A, const uint8_t* solid, const Grid& g, const int64_t* slots,
                  const T* ladd, idx links) {
  using C = Codec<S, T>;
  constexpr int Q = L::Q;
  const idx n = g.n;
#pragma omp parallel for collapse(2) schedule(static)
  for (idx x = 0; x < g.nx; ++x) {
    for (idx y = 0; y < g.ny; ++y) {
      idx rm[Q];
      for (int k = 0; k < Q; ++k) rm[k] = g.row(x - L::c[k][0], y - L::c[k][1]);
      const idx r0 = g.row(x, y);
      for (idx z = 0; z < g.nz; ++z) {
        const idx here = r0 + z;
        if (SOLID && solid[here]) continue;
        for (int k = 1; k < Q; k += 2) {  // each pair once: from its odd-numbered direction
          const idx src = rm[k] + g.stepz(z, -L::c[k][2]);
          if (SOLID && solid[src]) continue;
          std::swap(A[k * n + here], A[L::opp[k] * n + src]);
        }
      }
    }
  }
  if (SOLID) {
#pragma omp parallel for schedule(static)
    for (idx l = 0; l < links; ++l) {
      if (ladd[l] == T(0)) continue;
      const int64_t slot = slots[2 * l + 1];
      const double w = L::w[slot / n];
      A[slot] = C::store(C::load(A[slot], w) + ladd[l], w);
    }
  }
}

// Plane k moved by k shift rows (in: row r to r + k shift, mod nx ny; out: back), in place
// but for one thread's copy of the rows that wrap around.
template <class L, class S>
void rotate_planes(S* A, const Grid& g, bool in) {
  const idx rows = g.nx * g.ny;
#pragma omp parallel for schedule(dynamic)
  for (int k = 1; k < L::Q; ++k) {
    S* p = A + k * g.n;
    const idx m = ((k * g.shift) % rows) * g.nz;  // the elements that wrap
    if (m == 0) continue;
    std::vector<S> wrapped(m);
    if (in) {
      std::memcpy(wrapped.data(), p + g.n - m, m * sizeof(S));
      std::memmove(p + m, p, (g.n - m) * sizeof(S));
      std::memcpy(p, wrapped.data(), m * sizeof(S));
    } else {
      std::memcpy(wrapped.data(), p, m * sizeof(S));
      std::memmove(p, p + m, (g.n - m) * sizeof(S));
      std::memcpy(p + g.n - m, wrapped.data(), m * sizeof(S));
    }
  }
}

// Slots of the rotated planes (as solver/fluid/inplace_step.py rotated_slots gives the links'
// slots for a chunk on rotated planes) as slots of the natural layout, for the chunk's end.
template <class L>
std::vector<int64_t> natural_slots(const Grid& g, const int64_t* slots, idx links) {
  const idx rows = g.nx * g.ny;
  std::vector<int64_t> out(2 * links);
#pragma omp parallel for schedule(static)
  for (idx i = 0; i < 2 * links; ++i) {
    const int64_t k = slots[i] / g.n, at = slots[i] % g.n;
    const idx r = at / g.nz - (k * g.shift) % rows;
    out[i] = k * g.n + (r < 0 ? r + rows : r) * g.nz + at % g.nz;
  }
  return out;
}

template <class L, class S, class T, bool SOLID, bool FORCE, bool LES>
void run_chunk(S* A, const uint8_t* solid, const int64_t* slots, const T* ladd, idx links,
               const Grid& gr, const T* forces, int64_t steps, Rates<T> r) {
  T zero[3] = {0, 0, 0};
  auto force_at = [&](int64_t s) -> const T* { return FORCE ? forces + 3 * s : zero; };
  // the sweeps on the planes rotated by gr.shift (solver/fluid/inplace_step.py plane_shift;
  // the links' slots come rotated); the chunk's end (stream_pairs, rest_in_solids) on the
  // natural layout g again, which is what it reads and writes
  Grid g = gr;
  g.shift = 0;
  if (gr.shift) rotate_planes<L, S>(A, gr, true);
  int64_t s = 0;
  for (; s + 1 < steps; s += 2) {
    sweep<L, S, T, false, FORCE, LES>(A, gr, force_at(s), r);
    if (SOLID) repair_links<L, S, T, false>(A, slots, ladd, links, g.n);
    sweep<L, S, T, true, FORCE, LES>(A, gr, force_at(s + 1), r);
    if (SOLID) repair_links<L, S, T, true>(A, slots, ladd, links, g.n);
  }
  if (s < steps) sweep<L, S, T, false, FORCE, LES>(A, gr, force_at(s), r);
  if (gr.shift) rotate_planes<L, S>(A, gr, false);
  if (s < steps) {
    std::vector<int64_t> back;
    if (SOLID && gr.shift) {
      back = natural_slots<L>(gr, slots, links);
      slots = back.data();
    }
    stream_pairs<L, S, T, SOLID>(A, solid, g, slots, ladd, links);
  }
  if (SOLID) rest_in_solids<L, S, T>(A, solid, g);
}

// ---- The chunk split over devices along x, one phase per FFI call: the halo exchange runs in
// JAX between the calls (docs/performance.md, "The in-place scheme on several devices").
// Ghost planes live in the exchange buffer G (Grid::at). Link slots index A (below q n) or G
// (q n + the flat index into G); a link whose two slots are equal is padding and skipped.

template <class L>
constexpr int ghost_dir(int sign, int j) {  // the j-th direction with c_x = sign
  for (int k = 0; k < L::Q; ++k) {
    if (L::c[k][0] != sign) continue;
    if (j-- == 0) return k;
  }
  return -1;
}

template <class L, class S>
inline S* slot_at(S* A, S* G, idx n, int64_t slot) {
  return slot < L::Q * n ? A + slot : G + (slot - L::Q * n);
}

template <class L>
inline double slot_weight(idx n, idx plane, int64_t slot) {
  if (slot < L::Q * n) return L::w[slot / n];
  constexpr int m = Grid::ghost_dirs<L>();
  const int64_t row = (slot - L::Q * n) / plane;
  return L::w[ghost_dir<L>(row < m ? -1 : 1, int(row % m))];
}

template <class L, class S, class T, bool AFTER_ODD>
void repair_split(S* A, S* G, const int64_t* slots, const T* ladd, idx links, const Grid& g) {
  using C = Codec<S, T>;
  const idx plane = g.ny * g.nz;
#pragma omp parallel for schedule(static)
  for (idx l = 0; l < links; ++l) {
    const int64_t solid_slot = slots[2 * l], fluid_slot = slots[2 * l + 1];
    if (solid_slot == fluid_slot) continue;  // padding (shards hold different link counts)
    S* from = slot_at<L>(A, G, g.n, AFTER_ODD ? solid_slot : fluid_slot);
    S* to = slot_at<L>(A, G, g.n, AFTER_ODD ? fluid_slot : solid_slot);
    if (C::shifted && ladd[l] == T(0)) {
      *to = *from;
    } else {
      const double w = slot_weight<L>(g.n, plane, fluid_slot);
      *to = C::store(C::load(*from, w) + ladd[l], w);
    }
  }
}

// The x plane x of direction k's plane into (pack) or out of (unpack) ny nz contiguous
// elements at E, row by row: on rotated planes (Grid::shift) its rows lie anywhere in the plane
template <class S>
void copy_plane(S* A, S* E, const Grid& g, int k, idx x, bool out) {
  for (idx y = 0; y < g.ny; ++y) {
    S* row = A + k * g.n + g.prow(k, x * g.ny + y);
    if (out) {
      std::memcpy(E + y * g.nz, row, g.nz * sizeof(S));
    } else {
      std::memcpy(row, E + y * g.nz, g.nz * sizeof(S));
    }
  }
}

// E = the slots the neighbours' odd sweeps read: E[0] my plane nx-1's directions with c_x = -1
// (the high neighbour's G[0]), E[1] my plane 0's with c_x = +1 (the low neighbour's G[1])
template <class L, class S>
void pack(S* A, S* E, const Grid& g) {
  constexpr int m = Grid::ghost_dirs<L>();
  const idx plane = g.ny * g.nz;
  for (int j = 0; j < m; ++j) {
    copy_plane(A, E + j * plane, g, ghost_dir<L>(-1, j), g.nx - 1, true);
    copy_plane(A, E + (m + j) * plane, g, ghost_dir<L>(1, j), 0, true);
  }
}

// R = what the neighbours' odd sweeps pushed into their ghosts, that is into my cells: R[0]
// (the high neighbour's G[0]) into my plane nx-1, R[1] (the low neighbour's G[1]) into plane 0
template <class L, class S>
void unpack(S* A, S* R, const Grid& g) {
  constexpr int m = Grid::ghost_dirs<L>();
  const idx plane = g.ny * g.nz;
  for (int j = 0; j < m; ++j) {
    copy_plane(A, R + j * plane, g, ghost_dir<L>(-1, j), g.nx - 1, false);
    copy_plane(A, R + (m + j) * plane, g, ghost_dir<L>(1, j), 0, false);
  }
}

// The odd chunk's last stream, split: every pair with an end in this block is swapped (both
// shards swap a pair that crosses, on equal copies), after the links were repaired into the
// solid slots (so no pair needs skipping: the swap carries the repaired value to the fluid)
template <class L, class S>
void swap_pairs_split(S* A, S* G, const Grid& g) {
  constexpr int Q = L::Q;
#pragma omp parallel for collapse(2) schedule(static)
  for (idx x = -1; x <= g.nx; ++x) {
    for (idx y = 0; y < g.ny; ++y) {
      const bool here_real = x >= 0 && x < g.nx;
      for (int k = 1; k < Q; k += 2) {  // each pair once: from its odd-numbered direction
        const idx sx = x - L::c[k][0];
        if (!here_real && !(sx >= 0 && sx < g.nx)) continue;
        if (sx < -1 || sx > g.nx) continue;
        S* a = g.at<L>(A, G, k, x, y);
        S* b = g.at<L>(A, G, L::opp[k], sx, y - L::c[k][1]);
        for (idx z = 0; z < g.nz; ++z) std::swap(a[z], b[g.stepz(z, -L::c[k][2])]);
      }
    }
  }
}

// ROTATE: the chunk's start on rotated planes (Grid::shift; solver/fluid/inplace_split.py):
// the planes rotated in, no step. TAIL and FINISH rotate them back first and run on the
// natural layout (their links' slots come natural).
enum Phase : int64_t { EVEN = 0, ODD = 1, TAIL = 2, FINISH = 3, ROTATE = 4 };

// even_sweep(A, g) and odd_sweep(A, g, G): the sweeps (the fluid's, or with bodies in the
// fluid lb_psm.inc's psm_sweep)
template <class L, class S, class T, bool SOLID, class EvenSweep, class OddSweep>
void run_phase(int64_t phase, bool unpack_first, S* A, S* G, S* pushes, const uint8_t* solid,
               const int64_t* own, const T* own_ladd, idx own_links, const int64_t* shared,
               const T* shared_ladd, idx shared_links, Grid g, EvenSweep even_sweep,
               OddSweep odd_sweep) {
  if (phase == ROTATE) {
    if (g.shift) rotate_planes<L, S>(A, g, true);
    return;
  }
  if ((phase == TAIL || phase == FINISH) && g.shift) {
    rotate_planes<L, S>(A, g, false);
    g.shift = 0;
  }
  if (phase == EVEN || phase == FINISH) {
    if (unpack_first) unpack<L, S>(A, G, g);
    // the wall links read what this shard's odd sweep pushed into its ghosts (pushes), not
    // the neighbours' pushes just unpacked (G)
    if (SOLID && unpack_first) {
      repair_split<L, S, T, true>(A, pushes, own, own_ladd, own_links, g);
    }
    if (phase == EVEN) {
      even_sweep(A, g);
      pack<L, S>(A, G, g);
    }
  } else {
    if (SOLID) repair_split<L, S, T, false>(A, G, own, own_ladd, own_links, g);
    if (phase == ODD) {
      odd_sweep(A, g, G);
    } else {
      if (SOLID) repair_split<L, S, T, false>(A, G, shared, shared_ladd, shared_links, g);
      swap_pairs_split<L, S>(A, G, g);
    }
  }
  if (SOLID && (phase == TAIL || phase == FINISH)) rest_in_solids<L, S, T>(A, solid, g);
}

template <class L>
ffi::Error grid_of(const ffi::AnyBuffer& populations, Grid& g) {
  auto dims = populations.dimensions();
  if (dims.size() != static_cast<size_t>(L::D + 1) || dims[0] != L::Q) {
    return ffi::Error::InvalidArgument("populations must be (q, *shape) of the kernel's lattice");
  }
  g.nx = dims[1];
  g.ny = L::D == 3 ? dims[2] : 1;
  g.nz = L::D == 3 ? dims[3] : dims[2];
  g.n = g.nx * g.ny * g.nz;
  return ffi::Error::Success();
}

// The rotated planes' shift (Grid::shift) for g, checked: every direction's rows within the
// plane's rows (Grid::prow wraps once).
template <class L>
ffi::Error shift_of(int64_t shift, Grid& g) {
  if (shift < 0 || (shift > 0 && idx(L::Q) * shift >= g.nx * g.ny)) {
    return ffi::Error::InvalidArgument("shift must be 0, or below nx ny / q rows");
  }
  g.shift = shift;
  return ffi::Error::Success();
}

// The split phase's buffers and settings, read from its FFI arguments and checked
template <class S, class T>
struct PhaseArgs {
  Grid g{};
  S *A = nullptr, *G = nullptr, *P = nullptr;
  const uint8_t* solid = nullptr;
  const int64_t *own = nullptr, *shared = nullptr;
  const T *own_ladd = nullptr, *shared_ladd = nullptr, *F = nullptr;
  idx own_links = 0, shared_links = 0;
  T zero[3] = {0, 0, 0};
};

template <class L, class S, class T>
ffi::Error phase_args(PhaseArgs<S, T>& p, ffi::AnyBuffer populations, ffi::AnyBuffer exchange,
                      ffi::AnyBuffer solid, ffi::AnyBuffer own, ffi::AnyBuffer own_ladd,
                      ffi::AnyBuffer shared, ffi::AnyBuffer shared_ladd, ffi::AnyBuffer force,
                      ffi::AnyBuffer pushed, ffi::Result<ffi::AnyBuffer>& out,
                      ffi::Result<ffi::AnyBuffer>& out_exchange, int64_t phase, int64_t walls,
                      int64_t forced, int64_t shift) {
  Grid& g = p.g;
  if (auto e = grid_of<L>(populations, g); e.failure()) return e;
  if (auto e = shift_of<L>(shift, g); e.failure()) return e;
  constexpr int m = Grid::ghost_dirs<L>();
  if (populations.size_bytes() != static_cast<size_t>(L::Q * g.n) * sizeof(S) ||
      exchange.size_bytes() != static_cast<size_t>(2 * m * g.ny * g.nz) * sizeof(S)) {
    return ffi::Error::InvalidArgument("populations and exchange must be of the storage type, "
                                       "exchange (2, m, plane)");
  }
  if (phase < EVEN || phase > ROTATE) return ffi::Error::InvalidArgument("unknown phase");
  p.A = static_cast<S*>(out->untyped_data());
  p.G = static_cast<S*>(out_exchange->untyped_data());
  const S* A_in = static_cast<const S*>(populations.untyped_data());
  const S* G_in = static_cast<const S*>(exchange.untyped_data());
  if (p.A != A_in) std::memcpy(p.A, A_in, populations.size_bytes());  // not aliased
  if (p.G != G_in) std::memcpy(p.G, G_in, exchange.size_bytes());
  p.own_links = static_cast<idx>(own_ladd.element_count());
  p.shared_links = static_cast<idx>(shared_ladd.element_count());
  if (walls && (solid.element_count() != static_cast<size_t>(g.n) ||
                own.size_bytes() != static_cast<size_t>(2 * p.own_links) * sizeof(int64_t) ||
                shared.size_bytes() != static_cast<size_t>(2 * p.shared_links) * sizeof(int64_t))) {
    return ffi::Error::InvalidArgument("solid must be (*shape) bool, links (links, 2) int64");
  }
  if (forced && force.element_count() < 3) return ffi::Error::InvalidArgument("force is (3,)");
  if (pushed.size_bytes() != exchange.size_bytes()) {
    return ffi::Error::InvalidArgument("pushes must be shaped as exchange");
  }
  // read only: the pushes of the previous odd sweep (EVEN, FINISH)
  p.P = static_cast<S*>(const_cast<void*>(pushed.untyped_data()));
  p.solid = static_cast<const uint8_t*>(solid.untyped_data());
  p.own = static_cast<const int64_t*>(own.untyped_data());
  p.shared = static_cast<const int64_t*>(shared.untyped_data());
  p.own_ladd = static_cast<const T*>(own_ladd.untyped_data());
  p.shared_ladd = static_cast<const T*>(shared_ladd.untyped_data());
  p.F = forced ? static_cast<const T*>(force.untyped_data()) : p.zero;
  return ffi::Error::Success();
}

template <class L, class S, class T>
ffi::Error phase_impl(ffi::AnyBuffer populations, ffi::AnyBuffer exchange, ffi::AnyBuffer solid,
                      ffi::AnyBuffer own, ffi::AnyBuffer own_ladd, ffi::AnyBuffer shared,
                      ffi::AnyBuffer shared_ladd, ffi::AnyBuffer force, ffi::AnyBuffer pushed,
                      ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> out_exchange,
                      int64_t phase, int64_t unpack_first, double omega_plus, double omega_minus,
                      int64_t walls, int64_t forced, double les_scale, double trt_magic,
                      int64_t shift) {
  PhaseArgs<S, T> p;
  if (auto e = phase_args<L, S, T>(p, populations, exchange, solid, own, own_ladd, shared,
                                   shared_ladd, force, pushed, out, out_exchange, phase, walls,
                                   forced, shift);
      e.failure()) {
    return e;
  }
  const T* F = p.F;
  const Rates<T> r = rates_of<T>(omega_plus, omega_minus, les_scale, trt_magic);
  dispatch(walls, forced, les_scale > 0, [&](auto solid_c, auto force_c, auto les_c) {
    constexpr bool FORCE = decltype(force_c)::value, LES = decltype(les_c)::value;
    run_phase<L, S, T, decltype(solid_c)::value>(
        phase, unpack_first != 0, p.A, p.G, p.P, p.solid, p.own, p.own_ladd, p.own_links,
        p.shared, p.shared_ladd, p.shared_links, p.g,
        [&](S* a, const Grid& gr) { sweep<L, S, T, false, FORCE, LES>(a, gr, F, r); },
        [&](S* a, const Grid& gr, S* ghosts) {
          sweep<L, S, T, true, FORCE, LES>(a, gr, F, r, ghosts);
        });
  });
  return ffi::Error::Success();
}

template <class L, class S, class T>
ffi::Error chunk_impl(ffi::AnyBuffer populations, ffi::AnyBuffer solid, ffi::AnyBuffer slots,
                      ffi::AnyBuffer ladd, ffi::AnyBuffer forces, ffi::Result<ffi::AnyBuffer> out,
                      int64_t steps, double omega_plus, double omega_minus, int64_t walls,
                      int64_t force, double les_scale, double trt_magic, int64_t shift) {
  Grid g{};
  if (auto e = grid_of<L>(populations, g); e.failure()) return e;
  if (auto e = shift_of<L>(shift, g); e.failure()) return e;
  if (auto e = check_chunk_args<L, S>(populations, solid, slots, ladd, forces, g.n, steps, walls,
                                      force);
      e.failure()) {
    return e;
  }
  S* A = static_cast<S*>(out->untyped_data());
  const S* in = static_cast<const S*>(populations.untyped_data());
  if (A != in) {  // not aliased (XLA copied): start from the input
    for (idx c = 0; c < L::Q * g.n; ++c) A[c] = in[c];
  }
  const ChunkInputs<T> inputs = chunk_inputs<T>(solid, slots, ladd, forces);
  // tau0 and tau0^2 in double, then rounded once, as the XLA step's Python scalars
  const Rates<T> r = rates_of<T>(omega_plus, omega_minus, les_scale, trt_magic);
  dispatch(walls, force, les_scale > 0, [&](auto solid_c, auto force_c, auto les_c) {
    run_chunk<L, S, T, decltype(solid_c)::value, decltype(force_c)::value,
              decltype(les_c)::value>(A, inputs.solid, inputs.slots, inputs.ladd,
                                      inputs.links, g, inputs.forces, steps, r);
  });
  return ffi::Error::Success();
}

#include "lb_psm.inc"  // bodies in the fluid (PSM) on this kernel

}  // namespace

// One handler per lattice and compute type; arguments and attributes in lb_chunk_args.h (the
// link slots may come in any dtype of those bytes; under LES the odd rate of TRT follows the
// local even rate through Lambda; shift is Grid::shift).
#define LB_HANDLER(NAME, LAT, STORED, TYPE)                                              \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, (chunk_impl<LAT, STORED, TYPE>),                   \
                                ffi::Ffi::Bind() LB_CHUNK_BINDING);

// One library per lattice, storage and compute type (LB_LATTICE, LB_STORAGE, LB_TYPE set by
// the build): each builds in a fraction of the time of all, and a run builds only its own.
LB_HANDLER(LbInplace, LB_LATTICE, LB_STORAGE, LB_TYPE)

// The split phases' arguments (populations (q, *shape), exchange (2, m, plane), solid, own
// links (links, 2) int64 and their Ladd terms, shared links and theirs, this step's body force
// (3,), the last odd sweep's pushes) and attributes, shared by LbPhase and LbPsmPhase
#define LB_SPLIT_PHASE_ARGS                                                                    \
  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()    \
      .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()                      \
      .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
#define LB_SPLIT_PHASE_ATTRS                                                                   \
  .Attr<int64_t>("phase").Attr<int64_t>("unpack").Attr<double>("omega_plus")                  \
      .Attr<double>("omega_minus").Attr<int64_t>("walls").Attr<int64_t>("force")              \
      .Attr<double>("les_scale").Attr<double>("trt_magic").Attr<int64_t>("shift")

XLA_FFI_DEFINE_HANDLER_SYMBOL(LbPhase, (phase_impl<LB_LATTICE, LB_STORAGE, LB_TYPE>),
                              ffi::Ffi::Bind()
                                  LB_SPLIT_PHASE_ARGS
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  LB_SPLIT_PHASE_ATTRS);

XLA_FFI_DEFINE_HANDLER_SYMBOL(LbPsmStep, (psm_impl<LB_LATTICE, LB_STORAGE, LB_TYPE>),
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // populations (q, *shape)
                                  .Arg<ffi::AnyBuffer>()  // solid (*shape)
                                  .Arg<ffi::AnyBuffer>()  // wall links (links, 2) int64
                                  .Arg<ffi::AnyBuffer>()  // their Ladd terms
                                  .Arg<ffi::AnyBuffer>()  // this step's body force (3,)
                                  .Arg<ffi::AnyBuffer>()  // stencil entries' cells (E,) int32
                                  .Arg<ffi::AnyBuffer>()  // their cover rows (E, d + 1)
                                  .Ret<ffi::AnyBuffer>()  // populations
                                  .Ret<ffi::AnyBuffer>()  // per entry: moments, cover (E, 2 (d + 1))
                                  .Attr<int64_t>("phase")
                                  .Attr<double>("omega_plus")
                                  .Attr<double>("omega_minus")
                                  .Attr<int64_t>("walls")
                                  .Attr<int64_t>("force")
                                  .Attr<double>("les_scale")
                                  .Attr<double>("trt_magic")
                                  .Attr<double>("tau")
                                  .Attr<int64_t>("fraction")
                                  .Attr<int64_t>("shift"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(LbPsmPhase, (psm_phase_impl<LB_LATTICE, LB_STORAGE, LB_TYPE>),
                              ffi::Ffi::Bind()
                                  LB_SPLIT_PHASE_ARGS
                                  .Arg<ffi::AnyBuffer>()  // stencil entries' cells (E,) int32
                                  .Arg<ffi::AnyBuffer>()  // their cover rows (E, d + 1)
                                  .Ret<ffi::AnyBuffer>()  // populations
                                  .Ret<ffi::AnyBuffer>()  // exchange
                                  .Ret<ffi::AnyBuffer>()  // per entry: moments, cover
                                  LB_SPLIT_PHASE_ATTRS
                                  .Attr<double>("tau")
                                  .Attr<int64_t>("fraction"));

// The lattice tables the library was built with, for the check against kernels/lattices.py:
// writes q rows of (cx, cy, cz, opposite) and the q weights; returns q (0 for an unknown name).
extern "C" int lb_inplace_lattice(const char* name, int* rows, double* weights) {
  auto fill = [&](auto lat) {
    using L = decltype(lat);
    for (int i = 0; i < L::Q; ++i) {
      for (int a = 0; a < 3; ++a) rows[4 * i + a] = L::c[i][a];
      rows[4 * i + 3] = L::opp[i];
      weights[i] = L::w[i];
    }
    return L::Q;
  };
  const std::string n(name);
  if (n == "D2Q9") return fill(D2Q9{});
  if (n == "D3Q19") return fill(D3Q19{});
  if (n == "D3Q27") return fill(D3Q27{});
  return 0;
}
