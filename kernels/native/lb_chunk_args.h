// The checks of a one-device chunk's FFI arguments, shared by the CPU kernel's LbInplace
// (lb_inplace.cc) and the CUDA kernel's LbGpuChunk (lb_gpu.cu), which take the same arguments:
// populations (q, *shape) of the library's storage type S, solid (*shape) bool, link slots
// (links, 2) int64 and their Ladd terms (links,), forces (steps, 3).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

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

}  // namespace
