// In-place lattice-Boltzmann chunk on ONE population buffer for NVIDIA GPUs (fluid.kernel=cuda),
// as an XLA FFI handler that runs a whole chunk on the stream XLA gives it.
//
// The scheme is the CPU kernel's (lb_inplace.cc, whose header comment derives it): the AA access
// pattern (Bailey et al. 2009), an even step that reads and writes a cell's own slots and an odd
// step that reads A[opp i][x - c_i] and writes A[i][x + c_i], and half-way bounce-back by
// repairing the links from solid into fluid nodes between sweeps from a list made once on the
// host (solver/fluid/inplace_step.py solid_links). Only the loops differ: one thread per cell,
// threads along z (contiguous in every direction's plane, so a warp's loads and stores are
// coalesced but at the periodic wrap), blocks of `block` threads along z, the grid's y and x
// over the launch grid's y and z. The per-cell collision and the stored form of a population
// are the CPU kernel's own code (lb_cell.h), compiled without contraction on both (nvcc
// --fmad=false, g++ -ffp-contract=off) and with IEEE division and square root, so the two
// kernels store the same bits (gpu-check compares them).
//
// One source, two builds (solver/fluid/cuda.py):
//   nvcc (__CUDACC__): kernels launched on XLA's stream, registered for the CUDA platform;
//   g++ -x c++ (no __CUDACC__): the same per-cell and per-link functions in (OpenMP) loops,
//     registered for the CPU, so that the CPU test suite checks everything but the launches.
//
// Layout: A is (q, nx, ny, nz) C-ordered (the solver's (q, *shape)); a 2D lattice's (nx, ny)
// grid is (nx, 1, ny) with c = (cx, 0, cy), as in the CPU kernel.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "xla/ffi/api/ffi.h"
#include "lb_cell.h"  // the rates, the stored form and the collision of one cell
#include "lb_chunk_args.h"  // the checks of the arguments, as the CPU kernel's LbInplace

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace ffi = xla::ffi;

namespace lbgpu {

using idx = std::int64_t;

struct Box {
  idx nx, ny, nz, n;  // n = nx ny nz cells
  LB_INLINE idx cell(idx x, idx y, idx z) const { return (x * ny + y) * nz + z; }
};

// A cell and the offsets to its neighbours one step along +-x, +-y, +-z, periodic (a wrap is
// a different offset, chosen once per cell): a neighbour's index is then two additions per
// direction, the direction's (constant) c selecting the offsets, instead of an index rebuilt
// from wrapped coordinates for each of the q directions
struct Around {
  idx here, xp, xm, yp, ym, zp, zm;
  LB_INLINE Around(const Box& g, idx x, idx y, idx z) {
    const idx sx = g.ny * g.nz, sy = g.nz;
    here = g.cell(x, y, z);
    xp = x + 1 < g.nx ? sx : sx - g.n;
    xm = x > 0 ? -sx : g.n - sx;
    yp = y + 1 < g.ny ? sy : sy - g.ny * sy;
    ym = y > 0 ? -sy : g.ny * sy - sy;
    zp = z + 1 < g.nz ? 1 : 1 - g.nz;
    zm = z > 0 ? -1 : g.nz - 1;
  }
  // the cell at here + sign c_k
  template <class L>
  LB_INLINE idx neighbour(int k, int sign) const {
    const int cx = sign * L::C(k, 0), cy = sign * L::C(k, 1), cz = sign * L::C(k, 2);
    return here + (cx > 0 ? xp : (cx < 0 ? xm : 0)) + (cy > 0 ? yp : (cy < 0 ? ym : 0)) +
           (cz > 0 ? zp : (cz < 0 ? zm : 0));
  }
};

// One cell's even (ODD false) or odd step, every node alike (solid ones too: what they compute
// is never read by a fluid node). F: this step's body force (3,) when FORCE.
template <class L, class S, class T, bool ODD, bool FORCE, bool LES>
LB_INLINE void sweep_cell(S* A, const Box& g, idx x, idx y, idx z, const T* F, Rates<T> r) {
  using C = Codec<S, T>;
  constexpr int Q = L::Q;
  const Around at(g, x, y, z);
  const idx here = at.here;
  T f[Q];
  LB_UNROLL
  for (int k = 0; k < Q; ++k) {
    const idx from = ODD ? L::OPP(k) * g.n + at.neighbour<L>(k, -1) : k * g.n + here;
    f[k] = C::load(A[from], L::W(k));
  }
  T force[3] = {T(0), T(0), T(0)};
  if (FORCE) {
    force[0] = F[0];
    force[1] = F[1];
    force[2] = F[2];
  }
  collide<L, T, FORCE, LES>(f, force, r);
  LB_UNROLL
  for (int k = 0; k < Q; ++k) {
    const idx to = ODD ? k * g.n + at.neighbour<L>(k, 1) : L::OPP(k) * g.n + here;
    A[to] = C::store(f[k], L::W(k));
  }
}

// After an even step (an odd-length chunk), the stream to the natural layout at fluid cell x:
// the pairs (A[k][x], A[opp k][x - c_k]) for the odd-numbered k whose upstream node is fluid
// swap. Each slot belongs to one pair, so cells swap independently.
template <class L, class S, bool SOLID>
LB_INLINE void swap_pairs(S* A, const uint8_t* solid, const Box& g, idx x, idx y, idx z) {
  const Around at(g, x, y, z);
  const idx here = at.here;
  if (SOLID && solid[here]) return;
  LB_UNROLL
  for (int k = 1; k < L::Q; k += 2) {
    const idx src = at.neighbour<L>(k, -1);
    if (SOLID && solid[src]) continue;
    const S a = A[k * g.n + here];
    A[k * g.n + here] = A[L::OPP(k) * g.n + src];
    A[L::OPP(k) * g.n + src] = a;
  }
}

// After that stream, link l's population from the solid node gets Ladd's term (moving walls)
template <class L, class S, class T>
LB_INLINE void add_ladd(S* A, const int64_t* slots, const T* ladd, idx l, idx n) {
  using C = Codec<S, T>;
  if (ladd[l] == T(0)) return;
  const int64_t slot = slots[2 * l + 1];
  const double w = weight<L>(int(slot / n));
  A[slot] = C::store(C::load(A[slot], w) + ladd[l], w);
}

// Solid nodes at rest (f = w) at the chunk's end, as the pure-JAX step keeps them
template <class L, class S, class T>
LB_INLINE void rest_cell(S* A, const uint8_t* solid, const Box& g, idx x, idx y, idx z) {
  using C = Codec<S, T>;
  const idx here = g.cell(x, y, z);
  if (!solid[here]) return;
  LB_UNROLL
  for (int k = 0; k < L::Q; ++k) A[k * g.n + here] = C::store(T(L::W(k)), L::W(k));
}

#if defined(__CUDACC__)
template <class Body>
__global__ void cells_kernel(Box g, Body body) {
  const idx z = idx(blockIdx.x) * blockDim.x + threadIdx.x;
  if (z < g.nz) body(idx(blockIdx.z), idx(blockIdx.y), z);
}

template <class Body>
__global__ void items_kernel(idx count, Body body) {
  const idx i = idx(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) body(i);
}

// Launches on XLA's stream: a thread per cell (blocks of `block` along z) or per item
struct Launch {
  cudaStream_t stream;
  int block;
  template <class Body>
  void cells(const Box& g, Body body) const {
    const dim3 grid(unsigned((g.nz + block - 1) / block), unsigned(g.ny), unsigned(g.nx));
    cells_kernel<<<grid, block, 0, stream>>>(g, body);
  }
  template <class Body>
  void items(idx count, Body body) const {
    if (count == 0) return;
    items_kernel<<<unsigned((count + 255) / 256), 256, 0, stream>>>(count, body);
  }
};
#else
// The CPU emulation: the same bodies in loops, each pass finished before the next starts (as
// kernels launched one after another on a stream)
struct Launch {
  int block;
  template <class Body>
  void cells(const Box& g, Body body) const {
#pragma omp parallel for collapse(2) schedule(static)
    for (idx x = 0; x < g.nx; ++x) {
      for (idx y = 0; y < g.ny; ++y) {
        for (idx z = 0; z < g.nz; ++z) body(x, y, z);
      }
    }
  }
  template <class Body>
  void items(idx count, Body body) const {
#pragma omp parallel for schedule(static)
    for (idx i = 0; i < count; ++i) body(i);
  }
};
#endif

// The chunk: pairs of even + odd sweeps with the link repairs after each; an odd-length chunk
// ends with an even sweep and the in-place stream to the natural layout; solid nodes at rest.
template <class L, class S, class T, bool SOLID, bool FORCE, bool LES>
void run_chunk(const Launch& launch, S* A, const uint8_t* solid, const int64_t* slots,
               const T* ladd, idx links, Box g, const T* forces, int64_t steps, Rates<T> r) {
  const idx n = g.n;
  int64_t s = 0;
  for (; s + 1 < steps; s += 2) {
    const T* F0 = FORCE ? forces + 3 * s : forces;
    const T* F1 = FORCE ? forces + 3 * (s + 1) : forces;
    launch.cells(g, [=] LB_HD(idx x, idx y, idx z) {
      sweep_cell<L, S, T, false, FORCE, LES>(A, g, x, y, z, F0, r);
    });
    if (SOLID) {
      launch.items(links, [=] LB_HD(idx l) { repair_link<L, S, T, false>(A, slots, ladd, l, n); });
    }
    launch.cells(g, [=] LB_HD(idx x, idx y, idx z) {
      sweep_cell<L, S, T, true, FORCE, LES>(A, g, x, y, z, F1, r);
    });
    if (SOLID) {
      launch.items(links, [=] LB_HD(idx l) { repair_link<L, S, T, true>(A, slots, ladd, l, n); });
    }
  }
  if (s < steps) {
    const T* F0 = FORCE ? forces + 3 * s : forces;
    launch.cells(g, [=] LB_HD(idx x, idx y, idx z) {
      sweep_cell<L, S, T, false, FORCE, LES>(A, g, x, y, z, F0, r);
    });
    launch.cells(g, [=] LB_HD(idx x, idx y, idx z) { swap_pairs<L, S, SOLID>(A, solid, g, x, y, z); });
    if (SOLID) launch.items(links, [=] LB_HD(idx l) { add_ladd<L, S, T>(A, slots, ladd, l, n); });
  }
  if (SOLID) {
    launch.cells(g, [=] LB_HD(idx x, idx y, idx z) { rest_cell<L, S, T>(A, solid, g, x, y, z); });
  }
}

#if defined(__CUDACC__)
using Stream = cudaStream_t;
#else
struct Stream {};
#endif

// Arguments and attributes as the CPU kernel's LbInplace (solver/fluid/inplace_step.py passes
// both alike), shift 0 (rotated planes are a CPU cache remedy) and `block`, the threads per
// block along z (a multiple of 32, at most 1024).
template <class L, class S, class T>
ffi::Error chunk_impl(Stream stream, ffi::AnyBuffer populations, ffi::AnyBuffer solid,
                      ffi::AnyBuffer slots, ffi::AnyBuffer ladd, ffi::AnyBuffer forces,
                      ffi::Result<ffi::AnyBuffer> out, int64_t steps, double omega_plus,
                      double omega_minus, int64_t walls, int64_t force, double les_scale,
                      double trt_magic, int64_t shift, int64_t block) {
  auto dims = populations.dimensions();
  if (dims.size() != static_cast<size_t>(L::D + 1) || dims[0] != L::Q) {
    return ffi::Error::InvalidArgument("populations must be (q, *shape) of the kernel's lattice");
  }
  Box g{};
  g.nx = dims[1];
  g.ny = L::D == 3 ? dims[2] : 1;
  g.nz = L::D == 3 ? dims[3] : dims[2];
  g.n = g.nx * g.ny * g.nz;
  if (g.nx > 65535 || g.ny > 65535) {
    return ffi::Error::InvalidArgument("the CUDA kernel's launch grid takes nx, ny <= 65535");
  }
  if (shift != 0) return ffi::Error::InvalidArgument("the CUDA kernel takes shift 0");
  if (block < 32 || block > 1024 || block % 32) {
    return ffi::Error::InvalidArgument("block must be a multiple of 32 in [32, 1024]");
  }
  if (auto e = check_chunk_args<L, S>(populations, solid, slots, ladd, forces, g.n, steps, walls,
                                      force);
      e.failure()) {
    return e;
  }
  const size_t bytes = static_cast<size_t>(L::Q * g.n) * sizeof(S);
  S* A = static_cast<S*>(out->untyped_data());
  const S* in = static_cast<const S*>(populations.untyped_data());
#if defined(__CUDACC__)
  const Launch launch{stream, int(block)};
  if (A != in) cudaMemcpyAsync(A, in, bytes, cudaMemcpyDeviceToDevice, stream);
#else
  (void)stream;
  const Launch launch{int(block)};
  if (A != in) std::memcpy(A, in, bytes);
#endif
  const ChunkInputs<T> inputs = chunk_inputs<T>(solid, slots, ladd, forces);
  const Rates<T> r = rates_of<T>(omega_plus, omega_minus, les_scale, trt_magic);
  dispatch(walls, force, les_scale > 0, [&](auto solid_c, auto force_c, auto les_c) {
    run_chunk<L, S, T, decltype(solid_c)::value, decltype(force_c)::value,
              decltype(les_c)::value>(launch, A, inputs.solid, inputs.slots, inputs.ladd,
                                      inputs.links, g, inputs.forces, steps, r);
  });
#if defined(__CUDACC__)
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return ffi::Error::Internal(std::string("the CUDA kernel's launch failed: ") +
                                cudaGetErrorString(e));
  }
#endif
  return ffi::Error::Success();
}

#if defined(__CUDACC__)
#define LB_GPU_CONTEXT .Ctx<ffi::PlatformStream<cudaStream_t>>()
#define LB_GPU_HANDLER chunk_impl
#else
// the emulation's handler: no stream to take
#define LB_GPU_CONTEXT
#define LB_GPU_HANDLER chunk_host
template <class L, class S, class T>
ffi::Error chunk_host(ffi::AnyBuffer populations, ffi::AnyBuffer solid, ffi::AnyBuffer slots,
                      ffi::AnyBuffer ladd, ffi::AnyBuffer forces, ffi::Result<ffi::AnyBuffer> out,
                      int64_t steps, double omega_plus, double omega_minus, int64_t walls,
                      int64_t force, double les_scale, double trt_magic, int64_t shift,
                      int64_t block) {
  return chunk_impl<L, S, T>(Stream{}, populations, solid, slots, ladd, forces, out, steps,
                             omega_plus, omega_minus, walls, force, les_scale, trt_magic, shift,
                             block);
}
#endif

}  // namespace lbgpu

// One library per lattice and storage (LB_LATTICE, LB_STORAGE, LB_TYPE set by the build).
// Arguments and attributes as LbInplace's (lb_chunk_args.h), shift 0, and block.
XLA_FFI_DEFINE_HANDLER_SYMBOL(LbGpuChunk, (lbgpu::LB_GPU_HANDLER<LB_LATTICE, LB_STORAGE, LB_TYPE>),
                              ffi::Ffi::Bind() LB_GPU_CONTEXT LB_CHUNK_BINDING
                                  .Attr<int64_t>("block"));
