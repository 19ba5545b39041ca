// A one-device chunk's FFI arguments, shared by the CPU kernel's LbInplace (lb_inplace.cc) and
// the CUDA kernel's LbGpuChunk (lb_gpu.cu), which take the same ones: populations (q, *shape) of
// the library's storage type S [aliased to the result], solid (*shape) bool, link slots
// (links, 2) int64 and their Ladd terms (links,), forces (steps, 3); the attributes steps,
// omega_plus, omega_minus (= omega_plus for BGK), walls (0 none, 1 solid nodes), force (0/1),
// les_scale (18 sqrt(2) C_s^2 of the Smagorinsky model; 0 without it), trt_magic (Lambda; < 0
// for BGK), shift (rows per direction of rotated planes; 0: the natural layout). The binding
// (LB_CHUNK_BINDING, after ffi::Ffi::Bind() and any context) and the checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

#define LB_CHUNK_BINDING                                                                      \
  .Arg<xla::ffi::AnyBuffer>()                                                                 \
      .Arg<xla::ffi::AnyBuffer>()                                                             \
      .Arg<xla::ffi::AnyBuffer>()                                                             \
      .Arg<xla::ffi::AnyBuffer>()                                                             \
      .Arg<xla::ffi::AnyBuffer>()                                                             \
      .Ret<xla::ffi::AnyBuffer>()                                                             \
      .Attr<int64_t>("steps")                                                                 \
      .Attr<double>("omega_plus")                                                             \
      .Attr<double>("omega_minus")                                                            \
      .Attr<int64_t>("walls")                                                                 \
      .Attr<int64_t>("force")                                                                 \
      .Attr<double>("les_scale")                                                              \
      .Attr<double>("trt_magic")                                                              \
      .Attr<int64_t>("shift")

namespace {

template <class L, class S>
xla::ffi::Error check_chunk_args(const xla::ffi::AnyBuffer& populations,
                                 const xla::ffi::AnyBuffer& solid,
                                 const xla::ffi::AnyBuffer& slots,
                                 const xla::ffi::AnyBuffer& ladd,
                                 const xla::ffi::AnyBuffer& forces, int64_t n, int64_t steps,
                                 int64_t walls, int64_t force) {
  using xla::ffi::Error;
  if (populations.size_bytes() != static_cast<size_t>(L::Q * n) * sizeof(S)) {
    return Error::InvalidArgument("populations are not of the library's storage type");
  }
  const size_t links = ladd.element_count();
  if (walls && solid.element_count() != static_cast<size_t>(n)) {
    return Error::InvalidArgument("solid must be (*shape) bool");
  }
  if (walls && slots.size_bytes() != 2 * links * sizeof(int64_t)) {
    return Error::InvalidArgument("link slots must hold (links, 2) int64");
  }
  if (force && forces.element_count() < static_cast<size_t>(3 * steps)) {
    return Error::InvalidArgument("forces must be (steps, 3)");
  }
  return Error::Success();
}

// The geometry and forcing arguments as the kernels read them, untyped: the dummies of unused
// arguments may have any dtype; a bool is one byte 0/1
template <class T>
struct ChunkInputs {
  const uint8_t* solid;
  const int64_t* slots;
  const T* ladd;
  const T* forces;
  int64_t links;
};

template <class T>
ChunkInputs<T> chunk_inputs(const xla::ffi::AnyBuffer& solid, const xla::ffi::AnyBuffer& slots,
                            const xla::ffi::AnyBuffer& ladd, const xla::ffi::AnyBuffer& forces) {
  return ChunkInputs<T>{static_cast<const uint8_t*>(solid.untyped_data()),
                        static_cast<const int64_t*>(slots.untyped_data()),
                        static_cast<const T*>(ladd.untyped_data()),
                        static_cast<const T*>(forces.untyped_data()),
                        static_cast<int64_t>(ladd.element_count())};
}

}  // namespace
