// The rigid-body chunk of a scene of plain spheres (every sphere its own body), n steps in one
// call, as an XLA FFI handler for the CPU (``bodies.kernel=native``, solver/bodies/native_step.py).
//
// One step is the XLA step's (solver/bodies/step.py, body_step), operation for operation:
//   1. kick by the forces of the last step (dt/2) and drift (dt): x += v dt, the orientation by
//      the Dullweber-Leimkuhler-McLachlan splitting of the free rotor (kernels/rigid_body.py),
//      kinematic bodies by the exact rotation about their prescribed angular velocity;
//   2. the Verlet pair table: kept until a sphere has moved sqrt(rebuild2) since it was built,
//      then rebuilt from a cell list (kernels/neighbor_search.py: the 27 cells in the same order,
//      a cell's lowest `capacity` spheres, a row's first `width` partners, rows ascending), the
//      tangential springs of persisting pairs carried over, the real pairs and the sphere-plane
//      pairs within reach compacted into the state's slot lists (ActiveSlots);
//   3. Hertz-Mindlin or linear spring-dashpot contacts with a tangential spring per pair and
//      rolling resistance (kernels/contact.py, kernels/contact_models.py) over the slot lists,
//      plus gravity;
//   4. kick by the new forces (dt/2).
// Each formula keeps the reference's order of operations (sums of three components left to
// right, the same products), and the forces on a sphere are summed in the order of the XLA
// scatter: its pairs as i in list order, then as j in list order, then its planes. With
// -ffp-contract=off the two paths then differ only where XLA contracts or rounds a
// transcendental differently, i.e. to round-off.
//
// Work split: one scene runs its phases over OpenMP threads (pairs, spheres); a batch of scenes
// (an ensemble under vmap, leading batch axis) runs one scene per thread at a time.
//
// Layout: the state arrays as BodyState holds them ((n, 3) rows, C order), per scene; a leading
// batch axis of B scenes multiplies every array (vmap_method="broadcast_all").

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using idx = std::ptrdiff_t;
using T = DEM_REAL;  // float or double, set by the build (one library each)

namespace {

// Arguments and results, in the order solver/bodies/native_step.py passes them (its ALIASES
// pairs the state's).
enum Arg : int {
  kPosition, kOrientation, kVelocity, kAngularMomentum, kPrescribed, kInverseMass,
  kInverseInertia, kKinematic, kForce, kTorque, kPartners, kHistory, kPlaneHistory, kReference,
  kPairSlots, kPairCount, kPlaneSlots, kPlaneCount, kTime, kRebuilds, kOverflow, kSpheres,
  kPlanes, kGravity, kArgs
};
enum Ret : int {
  rPosition, rOrientation, rVelocity, rAngularMomentum, rForce, rTorque, rPartners, rHistory,
  rPlaneHistory, rReference, rPairSlots, rPairCount, rPlaneSlots, rPlaneCount, rRebuilds,
  rOverflow, rContactCount, rElastic, rDiagnostics, rContacts, rSampled, kRets
};
// result <- argument it updates in place (input_output_aliases)
constexpr int kAliased[][2] = {
    {rPosition, kPosition}, {rOrientation, kOrientation}, {rVelocity, kVelocity},
    {rAngularMomentum, kAngularMomentum}, {rForce, kForce}, {rTorque, kTorque},
    {rPartners, kPartners}, {rHistory, kHistory}, {rPlaneHistory, kPlaneHistory},
    {rReference, kReference}, {rPairSlots, kPairSlots}, {rPairCount, kPairCount},
    {rPlaneSlots, kPlaneSlots}, {rPlaneCount, kPlaneCount}, {rRebuilds, kRebuilds},
    {rOverflow, kOverflow}};
constexpr int kSphereColumns = 7;   // radius, young, poisson, beta, friction, rolling, stiffness
constexpr int kPlaneColumns = 15;   // point 3, normal 3, velocity 3, then the sphere columns 1..6
constexpr int kDiagnostics = 9;     // kinetic, potential, momentum 3, angular momentum 3, elastic
// kernels/neighbor_search.py NEIGHBOR_OFFSETS: itertools.product((-1, 0, 1), repeat=3)
constexpr int kOffsets = 27;

// ---------------------------------------------------------------------------------------------
// Static description of the scene (attributes) and constants of the formulas, in T.

struct Scene {
  idx n = 0, width = 0, planes = 0;  // spheres (= bodies), pair-table width K, planes p
  int64_t steps = 0, every = 1;
  bool hertz = true, rolling = false, all_pairs = false;
  T dt = 0, half_dt = 0, skin = 0, rebuild2 = 0;
  T rotor[5] = {0, 0, 0, 0, 0};  // fraction * dt of the DLM sub-rotations
  T lower[3] = {0, 0, 0};
  T cell_size = 1;
  int64_t shape[3] = {1, 1, 1};
  int64_t capacity = 1;
  // the constants of kernels/contact_models.py, rounded to T as XLA rounds a Python float
  T dashpot = T(-2.0 * std::sqrt(5.0 / 6.0));
  T four_thirds = T(4.0 / 3.0), eight_fifteenths = T(8.0 / 15.0), two_sevenths = T(2.0 / 7.0);
};
constexpr int kRotorAxis[5] = {0, 1, 2, 1, 0};
constexpr double kRotorFraction[5] = {0.5, 0.5, 1.0, 0.5, 0.5};

// One scene's buffers: the state (updated in place) and its read-only parameters.
struct Member {
  T *x, *q, *v, *L, *force, *torque, *history, *plane_history, *reference;
  int32_t *partners, *pair_slots, *pair_count, *plane_slots, *plane_count, *rebuilds, *overflow;
  int32_t *contact_count, *contacts;
  T *elastic, *diagnostics;
  uint8_t* sampled;
  const T *prescribed, *inverse_mass, *inverse_inertia, *spheres, *planes, *gravity;
  const uint8_t* kinematic;
  int32_t time;
};

// Scratch of one scene (reused across the batch by each thread).
struct Work {
  std::vector<T> omega, a_sphere, g_sphere, a_plane, g_plane;
  std::vector<int32_t> cell_of, cell_start, cell_list, row_count;
  std::vector<idx> row_start, j_start, j_list, plane_start;
  std::vector<int32_t> pair_sphere, plane_sphere, plane_index;  // i; b and k of each list entry
  std::vector<T> pair_law, plane_law;  // kLaw mixed material values per list entry
  std::vector<T> pair_force, pair_torque_i, pair_torque_j, pair_energy;
  std::vector<uint8_t> pair_active;
  std::vector<T> plane_force, plane_torque, plane_energy, span_energy;
  std::vector<uint8_t> plane_active;
};

// ---------------------------------------------------------------------------------------------
// Loops: over threads for one scene (PAR), plainly inside a scene of a batch.

// Dynamic chunks of 32 items (blocks of lanes, or spheres): on a machine shared with other jobs
// a thread that loses its core leaves its share to the others (each item writes its own
// outputs, so the result does not depend on which thread ran it).
constexpr idx kBlock = 32;

template <bool PAR, class F>
inline void for_each(idx count, F&& body) {
  if constexpr (PAR) {
#pragma omp parallel for schedule(dynamic, kBlock)
    for (idx k = 0; k < count; ++k) body(k);
  } else {
    for (idx k = 0; k < count; ++k) body(k);
  }
}

// two independent loops in one parallel region, item by item (an item is a span of pairs)
template <bool PAR, class F, class G>
inline void for_each2(idx count, F&& body, idx count2, G&& body2) {
  if constexpr (PAR) {
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1) nowait
      for (idx k = 0; k < count; ++k) body(k);
#pragma omp for schedule(dynamic, 1)
      for (idx k = 0; k < count2; ++k) body2(k);
    }
  } else {
    for (idx k = 0; k < count; ++k) body(k);
    for (idx k = 0; k < count2; ++k) body2(k);
  }
}

// the largest body(k) over [0, count) (a max: exact in any order)
template <bool PAR, class F>
inline T max_over(idx count, F&& body) {
  T out = 0;
  if constexpr (PAR) {
#pragma omp parallel for schedule(dynamic, kBlock) reduction(max : out)
    for (idx k = 0; k < count; ++k) out = std::max(out, body(k));
  } else {
    for (idx k = 0; k < count; ++k) out = std::max(out, body(k));
  }
  return out;
}

// body(begin, end, partial) over static blocks; the blocks' partials (N values each) are
// combined in block order by `combine`, so the result does not depend on timing.
template <bool PAR, int N, class F, class C>
inline std::array<T, N> reduce(idx count, F&& body, C&& combine) {
  std::array<T, N> out{};
  if constexpr (PAR) {
    const int threads = omp_get_max_threads();
    std::vector<std::array<T, N>> part(threads, std::array<T, N>{});
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      body(count * t / nt, count * (t + 1) / nt, part[t]);
    }
    for (int t = 0; t < threads; ++t) combine(out, part[t]);
  } else {
    body(0, count, out);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Vectors and quaternions, component by component as kernels/contact.py and kernels/quaternion.py.
// The forms on scalars are the ones the lane loops below use (GCC vectorises loops over scalars,
// not over small arrays or structs); the array forms serve the scalar paths.

inline T dot(T ax, T ay, T az, T bx, T by, T bz) { return ax * bx + ay * by + az * bz; }

inline void cross(T ax, T ay, T az, T bx, T by, T bz, T& cx, T& cy, T& cz) {
  cx = ay * bz - az * by;
  cy = az * bx - ax * bz;
  cz = ax * by - ay * bx;
}

// v/|v|, zero where v = 0 (safe_normalize); the quotients are formed unconditionally so that
// the select vectorises
inline void unit(T x, T y, T z, T& ux, T& uy, T& uz) {
  const T norm2 = dot(x, y, z, x, y, z);
  const T length = std::sqrt(norm2);
  const T qx = x / length, qy = y / length, qz = z / length;
  const bool positive = norm2 > T(0);
  ux = positive ? qx : T(0);
  uy = positive ? qy : T(0);
  uz = positive ? qz : T(0);
}

// q v q* for q = (w, u): t = 2 u x v, v' = v + w t + u x t
inline void rotate(T w, T ux, T uy, T uz, T vx, T vy, T vz, T& ox, T& oy, T& oz) {
  T cx, cy, cz, sx, sy, sz;
  cross(ux, uy, uz, vx, vy, vz, cx, cy, cz);
  const T tx = T(2) * cx, ty = T(2) * cy, tz = T(2) * cz;
  cross(ux, uy, uz, tx, ty, tz, sx, sy, sz);
  ox = vx + w * tx + sx;
  oy = vy + w * ty + sy;
  oz = vz + w * tz + sz;
}

inline T dot3(const T* a, const T* b) { return dot(a[0], a[1], a[2], b[0], b[1], b[2]); }

inline void cross3(const T* a, const T* b, T* c) {
  cross(a[0], a[1], a[2], b[0], b[1], b[2], c[0], c[1], c[2]);
}

inline void rotate(const T* q, const T* v, T* out) {
  rotate(q[0], q[1], q[2], q[3], v[0], v[1], v[2], out[0], out[1], out[2]);
}

// q* v q: the rotation by the conjugate
inline void rotate_inverse(const T* q, const T* v, T* out) {
  rotate(q[0], -q[1], -q[2], -q[3], v[0], v[1], v[2], out[0], out[1], out[2]);
}

// Hamilton product p q
inline void multiply(const T* p, const T* q, T* out) {
  T c[3];
  cross3(p + 1, q + 1, c);
  out[0] = p[0] * q[0] - (p[1] * q[1] + p[2] * q[2] + p[3] * q[3]);
  for (int k = 0; k < 3; ++k) out[k + 1] = p[0] * q[k + 1] + q[0] * p[k + 1] + c[k];
}

// sin and cos of h by their Taylor series to h^9 and h^10: exact in double for |h| <= 1/32
// (the next terms are below 1e-22 of the sum), a tenth of libm's cost, and vectorisable. A
// drift turns a body by |omega| dt/2 per sub-rotation, far below 1/32 rad; larger angles take
// libm.
constexpr double kSeriesLimit = 0.03125;

inline void sin_cos_series(T h, T& s, T& c) {
  const T h2 = h * h;
  s = h * (T(1) - h2 * T(1.0 / 6) *
                      (T(1) - h2 * T(1.0 / 20) *
                                  (T(1) - h2 * T(1.0 / 42) * (T(1) - h2 * T(1.0 / 72)))));
  c = T(1) - h2 * T(0.5) *
                 (T(1) - h2 * T(1.0 / 12) *
                             (T(1) - h2 * T(1.0 / 30) *
                                         (T(1) - h2 * T(1.0 / 56) * (T(1) - h2 * T(1.0 / 90)))));
}

inline void sin_cos(T h, T& s, T& c) {
  if (std::fabs(h) <= T(kSeriesLimit)) {
    sin_cos_series(h, s, c);
  } else {
    s = std::sin(h);
    c = std::cos(h);
  }
}

// ---------------------------------------------------------------------------------------------
// Lanes: W bodies or W pairs advance together, each formula a loop over the lanes, so that the
// long dependency chains of a drift or a contact law (square roots, divisions, five
// sub-rotations) of different bodies run side by side in SIMD registers.

constexpr int W = 8;
#define LANES _Pragma("omp simd") for (int l = 0; l < W; ++l)
using Lane = T[W];

// blocks of W lanes over count items, and the lanes in use in block k
inline idx blocks(idx count) { return (count + W - 1) / W; }
inline int lanes(idx count, idx k) { return static_cast<int>(std::min<idx>(W, count - k * W)); }

// ---------------------------------------------------------------------------------------------
// Integration (kernels/rigid_body.py): kick, drift, the world angular velocity.

// The closing kick of one body: v += F/m dt/2, L += tau dt/2 (not for kinematic bodies).
inline void kick(const Scene& sc, const Member& m, idx b, const T* force, const T* torque) {
  if (m.kinematic[b]) return;
  const T im = m.inverse_mass[b];
  const T* ii = m.inverse_inertia + 3 * b;
  if (im > T(0)) {
    const T scale = im * sc.half_dt;
    for (int k = 0; k < 3; ++k) m.v[3 * b + k] = m.v[3 * b + k] + force[k] * scale;
  }
  if (ii[0] > T(0) || ii[1] > T(0) || ii[2] > T(0)) {
    for (int k = 0; k < 3; ++k) m.L[3 * b + k] = m.L[3 * b + k] + torque[k] * sc.half_dt;
  }
}

// One sub-rotation of the DLM splitting about body axis A by the step (c, s e_A) of half-angle
// rotor I_A Pi_A / 2: q <- multiply(q, step), Pi <- rotate_inverse(step, Pi), with the products
// by the step's zeros left out (they add only signed zeros: the sums round as the general
// forms do).
template <int A>
inline void sub_rotation(T rotor, const Lane* ii, Lane* q, Lane* pi) {
  constexpr int B = (A + 1) % 3, C = (A + 2) % 3;
  alignas(64) Lane h, s, c;
  int large = 0;
#pragma omp simd reduction(| : large)
  for (int l = 0; l < W; ++l) {
    h[l] = T(0.5) * (rotor * ii[A][l] * pi[A][l]);
    sin_cos_series(h[l], s[l], c[l]);
    large |= !(std::fabs(h[l]) <= T(kSeriesLimit));
  }
  for (int l = 0; large && l < W; ++l) sin_cos(h[l], s[l], c[l]);
  LANES {
    const T w = q[0][l], qa = q[1 + A][l], qb = q[1 + B][l], qc = q[1 + C][l];
    q[0][l] = w * c[l] - qa * s[l];
    q[1 + A][l] = w * s[l] + c[l] * qa;
    q[1 + B][l] = c[l] * qb + qc * s[l];
    q[1 + C][l] = c[l] * qc - qb * s[l];
    const T tb = T(2) * (s[l] * pi[C][l]), tc = -(T(2) * (s[l] * pi[B][l]));
    const T pb = pi[B][l] + c[l] * tb + s[l] * tc, pc = pi[C][l] + c[l] * tc - s[l] * tb;
    pi[B][l] = pb;
    pi[C][l] = pc;
  }
}

// A kinematic body turns by the exact rotation about its prescribed angular velocity
// (quaternion.from_rotation_vector, then multiply(step, q)).
inline void turn_kinematic(const Scene& sc, const T* prescribed, const T* q, T* out) {
  T phi[3];
  for (int k = 0; k < 3; ++k) phi[k] = prescribed[k] * sc.dt;
  const T angle = std::sqrt(dot3(phi, phi));
  T s, c;
  sin_cos(T(0.5) * angle, s, c);
  // sin(a/2)/a by its series below 1e-8
  const T scale = angle < T(1e-8) ? T(0.5) - angle * angle / T(48) : s / angle;
  const T step[4] = {c, scale * phi[0], scale * phi[1], scale * phi[2]};
  multiply(step, q, out);
}

// Bodies b0 .. b0 + count - 1 (count <= W): kick by the stored forces (dt/2), drift (dt), and
// the world angular velocity R diag(1/I) R^T L of the drifted body.
// Returns the largest squared distance of a drifted body from its reference position (the
// Verlet rebuild criterion; 0 for a table of every pair, which has no reference).
T integrate_block(const Scene& sc, const Member& m, Work& w, idx b0, int count) {
  alignas(64) Lane x[3], v[3], L[3], q[4], start[4], ii[3], f[3], tq[3], pi[3], omega[3];
  alignas(64) Lane im, moves, turns;
  bool kinematic[W];
  for (int l = 0; l < W; ++l) {  // lanes past count: a body at rest that does not turn
    const idx b = b0 + l;
    const bool real = l < count;
    for (int k = 0; k < 3; ++k) {
      x[k][l] = real ? m.x[3 * b + k] : T(0);
      v[k][l] = real ? m.v[3 * b + k] : T(0);
      L[k][l] = real ? m.L[3 * b + k] : T(0);
      ii[k][l] = real ? m.inverse_inertia[3 * b + k] : T(0);
      f[k][l] = real ? m.force[3 * b + k] : T(0);
      tq[k][l] = real ? m.torque[3 * b + k] : T(0);
    }
    for (int k = 0; k < 4; ++k) start[k][l] = q[k][l] = real ? m.q[4 * b + k] : T(k == 0);
    im[l] = real ? m.inverse_mass[b] : T(0);
    kinematic[l] = real && m.kinematic[b];
    moves[l] = !kinematic[l] && im[l] > T(0);
    turns[l] = !kinematic[l] && (ii[0][l] > T(0) || ii[1][l] > T(0) || ii[2][l] > T(0));
  }
  LANES {  // kick, then Pi = R^T L
    const T scale = im[l] * sc.half_dt;
    v[0][l] = moves[l] != T(0) ? v[0][l] + f[0][l] * scale : v[0][l];
    v[1][l] = moves[l] != T(0) ? v[1][l] + f[1][l] * scale : v[1][l];
    v[2][l] = moves[l] != T(0) ? v[2][l] + f[2][l] * scale : v[2][l];
    L[0][l] = turns[l] != T(0) ? L[0][l] + tq[0][l] * sc.half_dt : L[0][l];
    L[1][l] = turns[l] != T(0) ? L[1][l] + tq[1][l] * sc.half_dt : L[1][l];
    L[2][l] = turns[l] != T(0) ? L[2][l] + tq[2][l] * sc.half_dt : L[2][l];
    rotate(q[0][l], -q[1][l], -q[2][l], -q[3][l], L[0][l], L[1][l], L[2][l], pi[0][l], pi[1][l],
           pi[2][l]);
  }
  // the DLM splitting x(dt/2) y(dt/2) z(dt) y(dt/2) x(dt/2) of the free rotor
  sub_rotation<0>(sc.rotor[0], ii, q, pi);
  sub_rotation<1>(sc.rotor[1], ii, q, pi);
  sub_rotation<2>(sc.rotor[2], ii, q, pi);
  sub_rotation<1>(sc.rotor[3], ii, q, pi);
  sub_rotation<0>(sc.rotor[4], ii, q, pi);
  for (int l = 0; l < count; ++l) {
    if (!kinematic[l]) continue;
    const T from[4] = {start[0][l], start[1][l], start[2][l], start[3][l]};
    T to[4];
    turn_kinematic(sc, m.prescribed + 3 * (b0 + l), from, to);
    for (int k = 0; k < 4; ++k) q[k][l] = to[k];
  }
  LANES {  // normalise, move, and omega = R diag(1/I) R^T L
    const T length = std::sqrt(q[0][l] * q[0][l] + q[1][l] * q[1][l] + q[2][l] * q[2][l] +
                               q[3][l] * q[3][l]);
    const T qw = q[0][l] / length, qx = q[1][l] / length, qy = q[2][l] / length,
            qz = q[3][l] / length;
    q[0][l] = qw;
    q[1][l] = qx;
    q[2][l] = qy;
    q[3][l] = qz;
    x[0][l] = x[0][l] + v[0][l] * sc.dt;
    x[1][l] = x[1][l] + v[1][l] * sc.dt;
    x[2][l] = x[2][l] + v[2][l] * sc.dt;
    T bx, by, bz;
    rotate(qw, -qx, -qy, -qz, L[0][l], L[1][l], L[2][l], bx, by, bz);
    rotate(qw, qx, qy, qz, ii[0][l] * bx, ii[1][l] * by, ii[2][l] * bz, omega[0][l], omega[1][l],
           omega[2][l]);
  }
  for (int l = 0; l < count; ++l) {
    const idx b = b0 + l;
    if (kinematic[l]) {  // its prescribed angular velocity, through the body frame
      const T qq[4] = {q[0][l], q[1][l], q[2][l], q[3][l]};
      T body[3], out[3];
      rotate_inverse(qq, m.prescribed + 3 * b, body);
      rotate(qq, body, out);
      for (int k = 0; k < 3; ++k) omega[k][l] = out[k];
    }
    for (int k = 0; k < 3; ++k) {
      m.x[3 * b + k] = x[k][l];
      m.v[3 * b + k] = v[k][l];
      m.L[3 * b + k] = L[k][l];
      w.omega[3 * b + k] = omega[k][l];
    }
    for (int k = 0; k < 4; ++k) m.q[4 * b + k] = q[k][l];
  }
  T moved = 0;
  for (int l = 0; !sc.all_pairs && l < count; ++l) {
    T d[3];
    for (int k = 0; k < 3; ++k) d[k] = x[k][l] - m.reference[3 * (b0 + l) + k];
    moved = std::max(moved, d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  }
  return moved;
}

// ---------------------------------------------------------------------------------------------
// Contacts (kernels/contact.py, kernels/contact_models.py), lane by lane without branches: a
// lane that does not touch computes with zero overlap, and its results are stored as zeros.

// The inputs of the contact laws of W pairs; i is the sphere, j the partner sphere or plane.
struct PairLanes {
  alignas(64) Lane xi[3], xj[3], vi[3], vj[3], wi[3], wj[3], normal[3], spring[3];
  alignas(64) Lane radius, overlap, mass, E, G, R, root_r, k, beta, mu, mu_r;
  alignas(64) Lane active;  // 1 where the pair touches, else 0 (a number: it vectorises)
};

// The mixed material of a pair (mix_materials): E*, G*, R*, sqrt(R*), m*, the linear spring k,
// beta, mu, mu_r.
constexpr int kLaw = 9;

inline void load_law(const T* law, PairLanes& in, int l) {
  in.E[l] = law[0];
  in.G[l] = law[1];
  in.R[l] = law[2];
  in.root_r[l] = law[3];
  in.mass[l] = law[4];
  in.k[l] = law[5];
  in.beta[l] = law[6];
  in.mu[l] = law[7];
  in.mu_r[l] = law[8];
}

// The outputs: force on i, torques on i (about x_i) and on j (about x_j), spring, energy.
struct PairResults {
  alignas(64) Lane force[3], torque_i[3], torque_j[3], spring[3];
  alignas(64) Lane energy;
};

// For every lane: the contact point, the relative motion there, the normal force (Hertz with
// Tsuji's damping, or the linear spring-dashpot), the tangential spring (Luding 2008: turned
// into the tangent plane, stretched by v_t dt, capped at mu F_n) and the rolling torque (Ai et
// al. 2011, model A), in the order of operations of the XLA step.
template <bool HERTZ, bool ROLLING>
void contact_lanes(const Scene& sc, const PairLanes& in, PairResults& out) {
  LANES {
    const T d = in.active[l] != T(0) ? in.overlap[l] : T(0);
    const T nx = in.normal[0][l], ny = in.normal[1][l], nz = in.normal[2][l];
    // contact point c = x_i - (r_i - d/2) n; arms c - x_i and c - x_j
    const T reach = in.radius[l] - T(0.5) * d;
    const T cx = in.xi[0][l] - reach * nx, cy = in.xi[1][l] - reach * ny,
            cz = in.xi[2][l] - reach * nz;
    const T aix = cx - in.xi[0][l], aiy = cy - in.xi[1][l], aiz = cz - in.xi[2][l];
    const T ajx = cx - in.xj[0][l], ajy = cy - in.xj[1][l], ajz = cz - in.xj[2][l];
    T six, siy, siz, sjx, sjy, sjz;
    cross(in.wi[0][l], in.wi[1][l], in.wi[2][l], aix, aiy, aiz, six, siy, siz);
    cross(in.wj[0][l], in.wj[1][l], in.wj[2][l], ajx, ajy, ajz, sjx, sjy, sjz);
    const T rx = (in.vi[0][l] + six) - (in.vj[0][l] + sjx);
    const T ry = (in.vi[1][l] + siy) - (in.vj[1][l] + sjy);
    const T rz = (in.vi[2][l] + siz) - (in.vj[2][l] + sjz);
    const T vn = dot(rx, ry, rz, nx, ny, nz);
    const T tx = rx - vn * nx, ty = ry - vn * ny, tz = rz - vn * nz;
    const T E = in.E[l], mass = in.mass[l], beta = in.beta[l], R = in.R[l];
    T fn, kt, eta_t, energy;
    if constexpr (HERTZ) {
      const T root_r = in.root_r[l], root_d = std::sqrt(d), root_rd = std::sqrt(R * d);
      const T elastic = sc.four_thirds * E * root_r * (d * root_d);
      const T eta_n = sc.dashpot * beta * std::sqrt(T(2) * E * root_rd * mass);
      fn = std::max(elastic - eta_n * vn, T(0));
      kt = T(8) * in.G[l] * root_rd;
      eta_t = sc.dashpot * beta * std::sqrt(kt * mass);
      energy = sc.eight_fifteenths * E * root_r * (d * d * root_d);
    } else {
      const T k = in.k[l];
      const T eta_n = T(-2) * beta * std::sqrt(mass * k);
      fn = std::max(k * d - eta_n * vn, T(0));
      kt = sc.two_sevenths * k;
      eta_t = T(-2) * beta * std::sqrt(mass * kt);
      energy = T(0.5) * k * (d * d);
    }
    const T hx = in.spring[0][l], hy = in.spring[1][l], hz = in.spring[2][l];
    const T length = std::sqrt(dot(hx, hy, hz, hx, hy, hz));
    const T along = dot(hx, hy, hz, nx, ny, nz);
    T dx, dy, dz;
    unit(hx - along * nx, hy - along * ny, hz - along * nz, dx, dy, dz);
    const T sx = length * dx + tx * sc.dt, sy = length * dy + ty * sc.dt,
            sz = length * dz + tz * sc.dt;
    const T px = -kt * sx - eta_t * tx, py = -kt * sy - eta_t * ty, pz = -kt * sz - eta_t * tz;
    const T limit = in.mu[l] * fn;
    const bool slip = std::sqrt(dot(px, py, pz, px, py, pz)) > limit;
    T ux, uy, uz;
    unit(px, py, pz, ux, uy, uz);
    const T lx = limit * ux, ly = limit * uy, lz = limit * uz;
    const T safe_k = kt > T(0) ? kt : T(1);
    const T slipped_x = -(lx + eta_t * tx) / safe_k, slipped_y = -(ly + eta_t * ty) / safe_k,
            slipped_z = -(lz + eta_t * tz) / safe_k;
    out.spring[0][l] = slip ? slipped_x : sx;
    out.spring[1][l] = slip ? slipped_y : sy;
    out.spring[2][l] = slip ? slipped_z : sz;
    const T fx = fn * nx + (slip ? lx : px), fy = fn * ny + (slip ? ly : py),
            fz = fn * nz + (slip ? lz : pz);
    T mx = T(0), my = T(0), mz = T(0);
    if constexpr (ROLLING) {
      const T wx = in.wi[0][l] - in.wj[0][l], wy = in.wi[1][l] - in.wj[1][l],
              wz = in.wi[2][l] - in.wj[2][l];
      const T twist = dot(wx, wy, wz, nx, ny, nz);
      T ox, oy, oz;
      unit(wx - twist * nx, wy - twist * ny, wz - twist * nz, ox, oy, oz);
      const T size = -(in.mu_r[l] * R * fn);
      mx = size * ox;
      my = size * oy;
      mz = size * oz;
    }
    T qx, qy, qz, gx, gy, gz;
    cross(aix, aiy, aiz, fx, fy, fz, qx, qy, qz);
    cross(ajx, ajy, ajz, -fx, -fy, -fz, gx, gy, gz);
    out.force[0][l] = fx;
    out.force[1][l] = fy;
    out.force[2][l] = fz;
    out.torque_i[0][l] = qx + mx;
    out.torque_i[1][l] = qy + my;
    out.torque_i[2][l] = qz + mz;
    out.torque_j[0][l] = gx + -mx;
    out.torque_j[1][l] = gy + -my;
    out.torque_j[2][l] = gz + -mz;
    out.energy[l] = energy;
  }
}

// The touching pairs at positions list[0 .. count - 1] (count <= W) of the sphere-sphere slot
// list (span finds them): force on i, the torques on i and j, the spring and the normal energy.
template <bool HERTZ, bool ROLLING>
void pair_block(const Scene& sc, const Member& m, Work& w, const idx* list, int count) {
  PairLanes in;
  idx I[W], J[W], entry[W];
  alignas(64) Lane distance, rj;
  for (int l = 0; l < W; ++l) {  // lanes past count: sphere 0 against itself, never touching
    entry[l] = l < count ? m.pair_slots[list[l]] : 0;
    I[l] = l < count ? w.pair_sphere[list[l]] : 0;
    J[l] = l < count ? m.partners[entry[l]] : 0;
    for (int a = 0; a < 3; ++a) {
      in.xi[a][l] = m.x[3 * I[l] + a];
      in.xj[a][l] = m.x[3 * J[l] + a];
    }
    in.radius[l] = m.spheres[kSphereColumns * I[l]];
    rj[l] = m.spheres[kSphereColumns * J[l]];
  }
  LANES {  // sphere_sphere: n from j to i, overlap r_i + r_j - |x_i - x_j|
    const T ox = in.xi[0][l] - in.xj[0][l], oy = in.xi[1][l] - in.xj[1][l],
            oz = in.xi[2][l] - in.xj[2][l];
    distance[l] = std::sqrt(dot(ox, oy, oz, ox, oy, oz));
    in.overlap[l] = in.radius[l] + rj[l] - distance[l];
    in.active[l] = in.overlap[l] > T(0) && distance[l] > T(0) ? T(1) : T(0);
    unit(ox, oy, oz, in.normal[0][l], in.normal[1][l], in.normal[2][l]);
  }
  for (int l = 0; l < W; ++l) {
    const idx i = I[l], j = J[l];
    for (int a = 0; a < 3; ++a) {
      in.vi[a][l] = m.v[3 * i + a];
      in.vj[a][l] = m.v[3 * j + a];
      in.wi[a][l] = w.omega[3 * i + a];
      in.wj[a][l] = w.omega[3 * j + a];
      in.spring[a][l] = in.active[l] != T(0) ? m.history[3 * entry[l] + a] : T(0);
    }
    load_law(w.pair_law.data() + kLaw * (l < count ? list[l] : 0), in, l);
  }
  PairResults out;
  contact_lanes<HERTZ, ROLLING>(sc, in, out);
  for (int l = 0; l < count; ++l) {
    const bool on = in.active[l] != T(0);
    const idx p = list[l];
    for (int a = 0; a < 3; ++a) {
      m.history[3 * entry[l] + a] = on ? out.spring[a][l] : T(0);
      w.pair_force[3 * p + a] = on ? out.force[a][l] : T(0);
      w.pair_torque_i[3 * p + a] = on ? out.torque_i[a][l] : T(0);
      w.pair_torque_j[3 * p + a] = on ? out.torque_j[a][l] : T(0);
    }
    w.pair_active[p] = on;
    w.pair_energy[p] = on ? out.energy[l] : T(0);
  }
}

// The touching entries at positions list[0 .. count - 1] (count <= W) of the sphere-plane slot
// list (entry b P + k), as pair_block: the plane is partner j, moving with its velocity, not
// turning, its point of contact the sphere's (sphere_plane).
template <bool HERTZ, bool ROLLING>
void plane_block(const Scene& sc, const Member& m, Work& w, const idx* list, int count) {
  PairLanes in;
  idx B[W], K[W], entry[W];
  for (int l = 0; l < W; ++l) {  // lanes past count: inactive
    entry[l] = l < count ? m.plane_slots[list[l]] : 0;
    B[l] = l < count ? w.plane_sphere[list[l]] : 0;
    K[l] = l < count ? w.plane_index[list[l]] : 0;
    const T* pl = m.planes + kPlaneColumns * K[l];
    T o[3];
    for (int a = 0; a < 3; ++a) {
      in.xi[a][l] = in.xj[a][l] = m.x[3 * B[l] + a];
      in.normal[a][l] = pl[3 + a];
      o[a] = in.xi[a][l] - pl[a];
    }
    in.radius[l] = m.spheres[kSphereColumns * B[l]];
    in.overlap[l] = in.radius[l] - dot3(o, pl + 3);
    in.active[l] = l < count && in.overlap[l] > T(0) ? T(1) : T(0);
    const T* pv = pl + 6;
    for (int a = 0; a < 3; ++a) {
      in.vi[a][l] = m.v[3 * B[l] + a];
      in.vj[a][l] = pv[a];
      in.wi[a][l] = w.omega[3 * B[l] + a];
      in.wj[a][l] = T(0);
      in.spring[a][l] = in.active[l] != T(0) ? m.plane_history[3 * entry[l] + a] : T(0);
    }
    load_law(w.plane_law.data() + kLaw * (l < count ? list[l] : 0), in, l);
  }
  PairResults out;
  contact_lanes<HERTZ, ROLLING>(sc, in, out);
  for (int l = 0; l < count; ++l) {
    const bool on = in.active[l] != T(0);
    const idx p = list[l];
    for (int a = 0; a < 3; ++a) {
      m.plane_history[3 * entry[l] + a] = on ? out.spring[a][l] : T(0);
      w.plane_force[3 * p + a] = on ? out.force[a][l] : T(0);
      w.plane_torque[3 * p + a] = on ? out.torque_i[a][l] : T(0);
    }
    w.plane_active[p] = on;
    w.plane_energy[p] = on ? out.energy[l] : T(0);
  }
}

// Slot-list positions [begin, end) of the pairs (`block` = pair_block) or the sphere-plane
// entries (plane_block): a first pass finds which touch (their distance only) and writes the
// zeros of those that came apart (pairs that stay apart keep them: the list and its results
// persist until the table is rebuilt); the touching ones go through the contact law in full
// lanes (a packing's table holds a third of pairs apart, an ensemble's every pair of a scene,
// most of them apart). Returns the span's normal energy, summed in list order.
constexpr idx kSpan = 256;

template <class Touches, class Block>
T span(idx begin, idx end, Touches&& touches, Block&& block, T* spring, const int32_t* slots,
       uint8_t* active, const T* energy, T* force, T* torque_i, T* torque_j) {
  idx touching[kSpan];
  int count = 0;
  for (idx p0 = begin; p0 < end; p0 += W) {
    const int n = static_cast<int>(std::min<idx>(W, end - p0));
    bool on[W];
    touches(p0, n, on);
    for (int l = 0; l < n; ++l) {
      const idx p = p0 + l;
      touching[count] = p;  // kept when it touches (no branch on a coin flip)
      count += on[l];
      if (!on[l] & (active[p] != 0)) {  // apart since this step: zeros until it touches again
        for (int a = 0; a < 3; ++a) {
          spring[3 * slots[p] + a] = force[3 * p + a] = torque_i[3 * p + a] = T(0);
          if (torque_j != nullptr) torque_j[3 * p + a] = T(0);
        }
        active[p] = 0;
      }
    }
  }
  for (int k = 0; k < count; k += W) block(touching + k, std::min(W, count - k));
  T sum = 0;
  for (int k = 0; k < count; ++k) sum += energy[touching[k]];
  return sum;
}

// Which of the pairs p0 .. p0 + n - 1 (n <= W) of the list touch (sphere_sphere: overlap
// r_i + r_j - |x_i - x_j| > 0), and which sphere-plane entries (r - (x - point) . n > 0):
// pair_block's and plane_block's own test, in lanes.
inline void pair_touches(const Member& m, const Work& w, idx p0, int n, bool* on) {
  alignas(64) Lane dx, dy, dz, reach;
  for (int l = 0; l < W; ++l) {  // lanes past n: sphere 0 against itself
    const idx p = p0 + std::min(l, n - 1);
    const idx i = l < n ? w.pair_sphere[p] : 0, j = l < n ? m.partners[m.pair_slots[p]] : 0;
    dx[l] = m.x[3 * i] - m.x[3 * j];
    dy[l] = m.x[3 * i + 1] - m.x[3 * j + 1];
    dz[l] = m.x[3 * i + 2] - m.x[3 * j + 2];
    reach[l] = m.spheres[kSphereColumns * i] + m.spheres[kSphereColumns * j];
  }
  alignas(64) Lane touching;
  LANES {
    const T distance = std::sqrt(dot(dx[l], dy[l], dz[l], dx[l], dy[l], dz[l]));
    touching[l] = reach[l] - distance > T(0) && distance > T(0) ? T(1) : T(0);
  }
  for (int l = 0; l < n; ++l) on[l] = touching[l] != T(0);
}

inline void plane_touches(const Member& m, const Work& w, idx p0, int n, bool* on) {
  alignas(64) Lane ox, oy, oz, nx, ny, nz, radius, touching;
  for (int l = 0; l < W; ++l) {  // lanes past n: the first entry again
    const idx p = p0 + std::min(l, n - 1);
    const idx b = w.plane_sphere[p];
    const T* pl = m.planes + kPlaneColumns * w.plane_index[p];
    ox[l] = m.x[3 * b] - pl[0];
    oy[l] = m.x[3 * b + 1] - pl[1];
    oz[l] = m.x[3 * b + 2] - pl[2];
    nx[l] = pl[3];
    ny[l] = pl[4];
    nz[l] = pl[5];
    radius[l] = m.spheres[kSphereColumns * b];
  }
  LANES {
    touching[l] = radius[l] - dot(ox[l], oy[l], oz[l], nx[l], ny[l], nz[l]) > T(0) ? T(1) : T(0);
  }
  for (int l = 0; l < n; ++l) on[l] = touching[l] != T(0);
}

// ---------------------------------------------------------------------------------------------
// The pair tables (kernels/neighbor_search.py, solver/bodies/step.py contact_forces' rebuild).

// The mixed material of every listed pair and sphere-plane entry, formed as the XLA step forms
// it at each step (effective_modulus, effective_shear_modulus, effective_radius, the effective
// mass of the bodies' contact masses, mixed_coefficient): the values change only with the
// lists, so they are formed when the lists are, not per step.
void mix_materials(const Scene& sc, const Member& m, Work& w) {
  const idx pairs = *m.pair_count, planes = *m.plane_count;
  auto contact_mass = [&](idx b) { return m.kinematic[b] ? T(0) : m.inverse_mass[b]; };
  w.pair_law.resize(kLaw * std::max<idx>(pairs, 1));
  for (idx p = 0; p < pairs; ++p) {
    const idx i = w.pair_sphere[p], j = m.partners[m.pair_slots[p]];
    const T* si = m.spheres + kSphereColumns * i;
    const T* sj = m.spheres + kSphereColumns * j;
    const T inverse_sum = contact_mass(i) + contact_mass(j);
    const T R = T(1) / (T(1) / si[0] + T(1) / sj[0]);
    T* law = w.pair_law.data() + kLaw * p;
    law[0] = T(1) / (w.a_sphere[i] + w.a_sphere[j]);
    law[1] = T(1) / (w.g_sphere[i] + w.g_sphere[j]);
    law[2] = R;
    law[3] = std::sqrt(R);
    law[4] = T(1) / (inverse_sum > T(0) ? inverse_sum : T(1));
    law[5] = sc.hertz ? T(0) : T(1) / (T(1) / si[6] + T(1) / sj[6]);
    law[6] = std::min(si[3], sj[3]);
    law[7] = std::min(si[4], sj[4]);
    law[8] = std::min(si[5], sj[5]);
  }
  w.plane_law.resize(kLaw * std::max<idx>(planes, 1));
  for (idx p = 0; p < planes; ++p) {
    const idx b = w.plane_sphere[p], k = w.plane_index[p];
    const T* sb = m.spheres + kSphereColumns * b;
    const T* pl = m.planes + kPlaneColumns * k;
    const T inverse = contact_mass(b);
    T* law = w.plane_law.data() + kLaw * p;
    law[0] = T(1) / (w.a_sphere[b] + w.a_plane[k]);
    law[1] = T(1) / (w.g_sphere[b] + w.g_plane[k]);
    law[2] = sb[0];  // R* of a sphere on a plane
    law[3] = std::sqrt(sb[0]);
    law[4] = T(1) / (inverse > T(0) ? inverse : T(1));
    law[5] = sc.hertz ? T(0) : T(1) / (T(1) / sb[6] + T(1) / pl[14]);
    law[6] = std::min(sb[3], pl[11]);
    law[7] = std::min(sb[4], pl[12]);
    law[8] = std::min(sb[5], pl[13]);
  }
}

// Where each sphere's entries sit in the slot lists: its pairs as i (a run, the list ascends),
// as j (pair indices in list order), its planes (a run).
void index_lists(const Scene& sc, const Member& m, Work& w) {
  const idx n = sc.n, pairs = *m.pair_count, planes = *m.plane_count;
  w.row_start.assign(n + 1, 0);
  w.j_start.assign(n + 1, 0);
  for (idx p = 0; p < pairs; ++p) {
    const idx entry = m.pair_slots[p];
    ++w.row_start[entry / sc.width + 1];
    ++w.j_start[m.partners[entry] + 1];
  }
  for (idx b = 0; b < n; ++b) {
    w.row_start[b + 1] += w.row_start[b];
    w.j_start[b + 1] += w.j_start[b];
  }
  w.j_list.resize(std::max<idx>(pairs, 1));
  std::vector<idx> fill(w.j_start.begin(), w.j_start.end() - 1);
  for (idx p = 0; p < pairs; ++p) w.j_list[fill[m.partners[m.pair_slots[p]]]++] = p;
  // the sphere of each entry, once per table rather than an integer division per step
  w.pair_sphere.resize(pairs);
  for (idx b = 0; b < n; ++b) {
    for (idx p = w.row_start[b]; p < w.row_start[b + 1]; ++p) w.pair_sphere[p] = b;
  }
  w.plane_start.assign(n + 1, 0);
  w.plane_sphere.resize(planes);
  w.plane_index.resize(planes);
  if (sc.planes) {
    for (idx p = 0; p < planes; ++p) {
      w.plane_sphere[p] = static_cast<int32_t>(m.plane_slots[p] / sc.planes);
      w.plane_index[p] = static_cast<int32_t>(m.plane_slots[p] % sc.planes);
      ++w.plane_start[w.plane_sphere[p] + 1];
    }
    for (idx b = 0; b < n; ++b) w.plane_start[b + 1] += w.plane_start[b];
  }
  // each entry's results; "active" 1 until the first step has cleared those apart (span)
  w.pair_force.resize(3 * pairs);
  w.pair_torque_i.resize(3 * pairs);
  w.pair_torque_j.resize(3 * pairs);
  w.pair_energy.resize(pairs);
  w.pair_active.assign(pairs, 1);
  w.plane_force.resize(3 * planes);
  w.plane_torque.resize(3 * planes);
  w.plane_energy.resize(planes);
  w.plane_active.assign(planes, 1);
  mix_materials(sc, m, w);
}

inline int64_t cell_axis(const Scene& sc, T position, int a) {
  T scaled = std::floor((position - sc.lower[a]) / sc.cell_size);
  scaled = std::min(std::max(scaled, T(0)), T(sc.shape[a] - 1));
  return std::isnan(scaled) ? 0 : static_cast<int64_t>(scaled);
}

// Overflow record of a rebuild: overflowed, worst cell, its count, worst sphere, its partners.
struct Overflow {
  int32_t overflowed = 0, worst_cell = 0, worst_cell_count = 0, worst_body = 0,
          worst_body_count = 0;
};

// The Verlet table from the cell list, springs carried, slot lists compacted.
template <bool PAR>
Overflow rebuild_cells(const Scene& sc, const Member& m, Work& w) {
  const idx n = sc.n, K = sc.width, P = sc.planes;
  const int64_t ny = sc.shape[1], nz = sc.shape[2];
  const idx cells = sc.shape[0] * ny * nz;
  // cells: counting sort by flat index, ascending sphere index within a cell
  w.cell_of.resize(n);
  w.cell_start.assign(cells + 1, 0);
  w.cell_list.resize(n);
  for (idx b = 0; b < n; ++b) {
    const T* x = m.x + 3 * b;
    const idx c = (cell_axis(sc, x[0], 0) * ny + cell_axis(sc, x[1], 1)) * nz +
                  cell_axis(sc, x[2], 2);
    w.cell_of[b] = static_cast<int32_t>(c);
    ++w.cell_start[c + 1];
  }
  Overflow record;
  for (idx c = 0; c < cells; ++c) {
    const int32_t count = w.cell_start[c + 1];
    if (count > record.worst_cell_count) {
      record.worst_cell_count = count;
      record.worst_cell = static_cast<int32_t>(c);
    }
    w.cell_start[c + 1] += w.cell_start[c];
  }
  {
    std::vector<int32_t> fill(w.cell_start.begin(), w.cell_start.end() - 1);
    for (idx b = 0; b < n; ++b) w.cell_list[fill[w.cell_of[b]]++] = static_cast<int32_t>(b);
  }
  // rows: the 27 cells in NEIGHBOR_OFFSETS order, the first K partners j > i within reach
  w.row_count.resize(n);
  for_each<PAR>(n, [&](idx i) {
    static thread_local std::vector<int32_t> row, old_row;
    static thread_local std::vector<T> carried;
    row.resize(K);
    old_row.assign(m.partners + i * K, m.partners + (i + 1) * K);
    const T* x_i = m.x + 3 * i;
    const T r_i = m.spheres[kSphereColumns * i];
    const int64_t own[3] = {cell_axis(sc, x_i[0], 0), cell_axis(sc, x_i[1], 1),
                            cell_axis(sc, x_i[2], 2)};
    int32_t count = 0;
    for (int o = 0; o < kOffsets; ++o) {
      const int64_t at[3] = {own[0] + o / 9 - 1, own[1] + (o / 3) % 3 - 1, own[2] + o % 3 - 1};
      if (at[0] < 0 || at[1] < 0 || at[2] < 0 || at[0] >= sc.shape[0] || at[1] >= ny ||
          at[2] >= nz) {
        continue;
      }
      const idx c = (at[0] * ny + at[1]) * nz + at[2];
      const idx first = w.cell_start[c];
      const idx last = std::min<idx>(w.cell_start[c + 1], first + sc.capacity);
      for (idx s = first; s < last; ++s) {
        const idx j = w.cell_list[s];
        if (j <= i) continue;
        const T* x_j = m.x + 3 * j;
        T sep[3];
        for (int k = 0; k < 3; ++k) sep[k] = x_j[k] - x_i[k];
        const T distance2 = sep[0] * sep[0] + sep[1] * sep[1] + sep[2] * sep[2];
        const T reach = r_i + m.spheres[kSphereColumns * j] + sc.skin;
        if (distance2 <= reach * reach) {
          if (count < K) row[count] = static_cast<int32_t>(j);
          ++count;
        }
      }
    }
    w.row_count[i] = count;
    const idx kept = std::min<idx>(count, K);
    std::sort(row.begin(), row.begin() + kept);
    // springs of pairs that persist (carry_history), zeros for new pairs and padding
    carried.assign(3 * K, T(0));
    for (idx k = 0; k < kept; ++k) {
      for (idx o = 0; o < K; ++o) {
        if (old_row[o] == row[k]) {
          for (int a = 0; a < 3; ++a) carried[3 * k + a] = m.history[3 * (i * K + o) + a];
        }
      }
    }
    for (idx k = 0; k < K; ++k) m.partners[i * K + k] = k < kept ? row[k] : -1;
    std::copy(carried.begin(), carried.end(), m.history + 3 * i * K);
  });
  for (idx i = 0; i < n; ++i) {
    if (w.row_count[i] > record.worst_body_count) {
      record.worst_body_count = w.row_count[i];
      record.worst_body = static_cast<int32_t>(i);
    }
  }
  record.overflowed = record.worst_cell_count > sc.capacity || record.worst_body_count > K;
  // the slot lists: real pairs i K + k, sphere-plane pairs within reach b P + k, ascending
  idx pairs = 0;
  for (idx i = 0; i < n; ++i) {
    const idx kept = std::min<idx>(w.row_count[i], K);
    for (idx k = 0; k < kept; ++k) m.pair_slots[pairs++] = static_cast<int32_t>(i * K + k);
  }
  std::fill(m.pair_slots + pairs, m.pair_slots + n * K, static_cast<int32_t>(n * K));
  *m.pair_count = static_cast<int32_t>(pairs);
  idx within = 0;
  for (idx b = 0; b < n; ++b) {
    const T* x = m.x + 3 * b;
    for (idx k = 0; k < P; ++k) {
      const T* pl = m.planes + kPlaneColumns * k;
      T offset[3];
      for (int a = 0; a < 3; ++a) offset[a] = x[a] - pl[a];
      const T gap = dot3(offset, pl + 3) - m.spheres[kSphereColumns * b];
      if (gap <= sc.skin) {
        m.plane_slots[within++] = static_cast<int32_t>(b * P + k);
      } else {
        T* xi = m.plane_history + 3 * (b * P + k);
        xi[0] = xi[1] = xi[2] = T(0);
      }
    }
  }
  std::fill(m.plane_slots + within, m.plane_slots + n * P, static_cast<int32_t>(n * P));
  *m.plane_count = static_cast<int32_t>(within);
  std::copy(m.x, m.x + 3 * n, m.reference);
  return record;
}

// the worst of the sticky record and a new one (_merge_overflow)
void merge_overflow(int32_t* seen, const Overflow& now) {
  seen[0] = seen[0] | now.overflowed;
  if (now.worst_cell_count > seen[2]) seen[1] = now.worst_cell;
  seen[2] = std::max(seen[2], now.worst_cell_count);
  if (now.worst_body_count > seen[4]) seen[3] = now.worst_body;
  seen[4] = std::max(seen[4], now.worst_body_count);
}

// ---------------------------------------------------------------------------------------------
// The chunk of one scene.

template <bool PAR, bool HERTZ, bool ROLLING>
void run_scene(const Scene& sc, const Member& m, Work& w) {
  const idx n = sc.n, P = sc.planes;
  w.omega.resize(3 * n);
  // per-sphere and per-plane terms of E* and G* (effective_modulus, effective_shear_modulus)
  auto compliance = [](const T* row, T& a, T& g) {
    const T young = row[0], poisson = row[1];
    a = (T(1) - poisson * poisson) / young;
    g = T(2) * (T(2) - poisson) * (T(1) + poisson) / young;
  };
  w.a_sphere.resize(n);
  w.g_sphere.resize(n);
  for (idx b = 0; b < n; ++b) {
    compliance(m.spheres + kSphereColumns * b + 1, w.a_sphere[b], w.g_sphere[b]);
  }
  w.a_plane.resize(P);
  w.g_plane.resize(P);
  for (idx k = 0; k < P; ++k) compliance(m.planes + kPlaneColumns * k + 9, w.a_plane[k], w.g_plane[k]);
  index_lists(sc, m, w);
  const T* gravity = m.gravity;

  for (int64_t step = 0; step < sc.steps; ++step) {
    const T moved = max_over<PAR>(
        blocks(n), [&](idx k) { return integrate_block(sc, m, w, k * W, lanes(n, k)); });
    // a table of every pair is never rebuilt
    const bool rebuilt = !sc.all_pairs && moved > sc.rebuild2;
    if (rebuilt) {
      merge_overflow(m.overflow, rebuild_cells<PAR>(sc, m, w));
      index_lists(sc, m, w);
      *m.rebuilds += 1;
    }
    const idx pairs = *m.pair_count, planes = *m.plane_count;
    auto pair_lanes = [&](const idx* list, int count) {
      pair_block<HERTZ, ROLLING>(sc, m, w, list, count);
    };
    auto plane_lanes = [&](const idx* list, int count) {
      plane_block<HERTZ, ROLLING>(sc, m, w, list, count);
    };
    auto pair_on = [&](idx p0, int count, bool* on) { pair_touches(m, w, p0, count, on); };
    auto plane_on = [&](idx p0, int count, bool* on) { plane_touches(m, w, p0, count, on); };
    const idx pair_spans = (pairs + kSpan - 1) / kSpan, plane_spans = (planes + kSpan - 1) / kSpan;
    w.span_energy.resize(pair_spans + plane_spans);
    for_each2<PAR>(
        pair_spans,
        [&](idx k) {
          w.span_energy[k] = span(k * kSpan, std::min((k + 1) * kSpan, pairs), pair_on, pair_lanes,
                                  m.history, m.pair_slots, w.pair_active.data(),
                                  w.pair_energy.data(), w.pair_force.data(),
                                  w.pair_torque_i.data(), w.pair_torque_j.data());
        },
        plane_spans,
        [&](idx k) {
          w.span_energy[pair_spans + k] =
              span(k * kSpan, std::min((k + 1) * kSpan, planes), plane_on, plane_lanes, m.plane_history,
                   m.plane_slots, w.plane_active.data(), w.plane_energy.data(),
                   w.plane_force.data(), w.plane_torque.data(), nullptr);
        });
    // forces on the spheres in the XLA scatter's order, gravity, the closing kick. Entries
    // apart add zeros there, which change no sum: a table of every pair (mostly pairs apart)
    // skips them, a Verlet table (mostly touching) adds them rather than branch on each
    const bool sparse = sc.all_pairs;
    for_each<PAR>(n, [&](idx b) {
      T f[3] = {0, 0, 0}, t[3] = {0, 0, 0};
      int32_t touching = 0;
      for (idx p = w.row_start[b]; p < w.row_start[b + 1]; ++p) {
        if (sparse && !w.pair_active[p]) continue;
        for (int k = 0; k < 3; ++k) {
          f[k] += w.pair_force[3 * p + k];
          t[k] += w.pair_torque_i[3 * p + k];
        }
        touching += w.pair_active[p];
      }
      for (idx s = w.j_start[b]; s < w.j_start[b + 1]; ++s) {
        const idx p = w.j_list[s];
        if (sparse && !w.pair_active[p]) continue;
        for (int k = 0; k < 3; ++k) {
          f[k] += -w.pair_force[3 * p + k];
          t[k] += w.pair_torque_j[3 * p + k];
        }
        touching += w.pair_active[p];
      }
      if (P) {
        T fp[3] = {0, 0, 0}, tp[3] = {0, 0, 0};
        for (idx p = w.plane_start[b]; p < w.plane_start[b + 1]; ++p) {
          if (sparse && !w.plane_active[p]) continue;
          for (int k = 0; k < 3; ++k) {
            fp[k] += w.plane_force[3 * p + k];
            tp[k] += w.plane_torque[3 * p + k];
          }
          touching += w.plane_active[p];
        }
        for (int k = 0; k < 3; ++k) {
          f[k] = f[k] + fp[k];
          t[k] = t[k] + tp[k];
        }
      }
      const T im = m.inverse_mass[b];
      const T mass = im > T(0) ? T(1) / im : T(0);
      for (int k = 0; k < 3; ++k) {
        m.force[3 * b + k] = f[k] + mass * gravity[k];
        m.torque[3 * b + k] = t[k];
      }
      m.contact_count[b] = touching;
      kick(sc, m, b, m.force + 3 * b, m.torque + 3 * b);
    });
    T pair_energy = 0, plane_energy = 0;  // by spans, in list order
    for (idx k = 0; k < pair_spans; ++k) pair_energy += w.span_energy[k];
    for (idx k = 0; k < plane_spans; ++k) plane_energy += w.span_energy[pair_spans + k];
    *m.elastic = pair_energy + plane_energy;
    // the totals of solver/bodies/step.py diagnostics() at sampled steps, zeros between
    const int32_t time = m.time + static_cast<int32_t>(step) + 1;
    const bool due = sc.every == 1 || time % sc.every == 0 || step == sc.steps - 1;
    T* row = m.diagnostics + kDiagnostics * step;
    m.sampled[step] = due;
    m.contacts[step] = 0;
    std::fill(row, row + kDiagnostics, T(0));
    if (!due) continue;
    const auto totals = reduce<PAR, kDiagnostics>(
        n,
        [&](idx lo, idx hi, std::array<T, kDiagnostics>& out) {
          for (idx b = lo; b < hi; ++b) {
            if (m.kinematic[b]) continue;
            const T im = m.inverse_mass[b];
            const T mass = im > T(0) ? T(1) / im : T(0);
            const T* v = m.v + 3 * b;
            const T* x = m.x + 3 * b;
            const T* L = m.L + 3 * b;
            const T* ii = m.inverse_inertia + 3 * b;
            T body[3], momentum[3], orbit[3];
            rotate_inverse(m.q + 4 * b, L, body);
            T rotational = 0;
            for (int k = 0; k < 3; ++k) {
              const T omega = ii[k] * body[k];
              const T moment = ii[k] > T(0) ? T(1) / ii[k] : T(0);
              rotational += moment * (omega * omega);
            }
            out[0] += T(0.5) * mass * dot3(v, v) + T(0.5) * rotational;
            for (int k = 0; k < 3; ++k) {
              out[1] += mass * gravity[k] * x[k];
              momentum[k] = mass * v[k];
              out[2 + k] += momentum[k];
            }
            cross3(x, momentum, orbit);
            for (int k = 0; k < 3; ++k) out[5 + k] += orbit[k] + L[k];
          }
        },
        [](std::array<T, kDiagnostics>& out, const std::array<T, kDiagnostics>& part) {
          for (int k = 0; k < kDiagnostics; ++k) out[k] += part[k];
        });
    for (int k = 0; k < 8; ++k) row[k] = totals[k];
    row[1] = -totals[1];
    row[8] = *m.elastic;
    int32_t contacts = 0;
    for (idx b = 0; b < n; ++b) contacts += m.contact_count[b];
    m.contacts[step] = contacts;
  }
}

template <bool PAR>
void run_any(const Scene& sc, const Member& m, Work& w) {
  if (sc.hertz) {
    if (sc.rolling) run_scene<PAR, true, true>(sc, m, w);
    else run_scene<PAR, true, false>(sc, m, w);
  } else {
    if (sc.rolling) run_scene<PAR, false, true>(sc, m, w);
    else run_scene<PAR, false, false>(sc, m, w);
  }
}

// ---------------------------------------------------------------------------------------------
// The handler.

ffi::Error chunk_impl(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t steps,
                      int64_t every, int64_t hertz, int64_t rolling, int64_t all_pairs, double dt, double skin, double rebuild2,
                      ffi::Span<const double> lower, double cell_size,
                      ffi::Span<const int64_t> shape, int64_t capacity,
                      int64_t parallel_spheres) {
  if (args.size() != kArgs || rets.size() != kRets) {
    return ffi::Error::InvalidArgument("dem_spheres: wrong number of arguments or results");
  }
  if (lower.size() != 3 || shape.size() != 3 || every < 1 || steps < 1) {
    return ffi::Error::InvalidArgument("dem_spheres: bad grid or step attributes");
  }
  std::vector<ffi::AnyBuffer> in;
  std::vector<ffi::AnyBuffer> out;
  for (int a = 0; a < kArgs; ++a) {
    auto buffer = args.get<ffi::AnyBuffer>(a);
    if (!buffer.has_value()) return buffer.error();
    in.push_back(*buffer);
  }
  for (int r = 0; r < kRets; ++r) {
    auto buffer = rets.get<ffi::AnyBuffer>(r);
    if (!buffer.has_value()) return buffer.error();
    out.push_back(**buffer);
  }
  const auto position_dims = in[kPosition].dimensions();
  const auto partner_dims = in[kPartners].dimensions();
  const auto history_dims = in[kPlaneHistory].dimensions();
  if (position_dims.size() < 2 || partner_dims.size() < 2 || history_dims.size() < 3) {
    return ffi::Error::InvalidArgument("dem_spheres: state arrays of the wrong rank");
  }
  Scene sc;
  sc.n = position_dims[position_dims.size() - 2];
  sc.width = partner_dims[partner_dims.size() - 1];
  sc.planes = history_dims[history_dims.size() - 2];
  if (sc.n < 1 || sc.width < 1) return ffi::Error::InvalidArgument("dem_spheres: empty scene");
  const idx batch = static_cast<idx>(in[kPosition].element_count()) / (3 * sc.n);
  // every argument holds `batch` scenes of equal size: its per-scene stride in elements
  idx stride_in[kArgs], stride_out[kRets];
  for (int a = 0; a < kArgs; ++a) stride_in[a] = static_cast<idx>(in[a].element_count()) / batch;
  for (int r = 0; r < kRets; ++r) stride_out[r] = static_cast<idx>(out[r].element_count()) / batch;
  const idx n = sc.n, K = sc.width, P = sc.planes;
  const idx expected[kArgs] = {3 * n, 4 * n, 3 * n, 3 * n, 3 * n, n, 3 * n, n, 3 * n, 3 * n,
                               n * K, 3 * n * K, 3 * n * P, 3 * n, n * K, 1, n * P, 1, 1, 1, 5,
                               kSphereColumns * n, kPlaneColumns * P, 3};
  for (int a = 0; a < kArgs; ++a) {
    if (stride_in[a] != expected[a] ||
        static_cast<idx>(in[a].element_count()) != batch * expected[a]) {
      return ffi::Error::InvalidArgument("dem_spheres: argument " + std::to_string(a) +
                                         " does not have the scene's shape");
    }
  }
  if (in[kPosition].size_bytes() != static_cast<size_t>(batch * 3 * n) * sizeof(T)) {
    return ffi::Error::InvalidArgument("dem_spheres: the state is not of the library's type");
  }
  if (stride_out[rDiagnostics] != kDiagnostics * steps) {
    return ffi::Error::InvalidArgument("dem_spheres: diagnostics must be (steps, 9)");
  }
  for (const auto& pair : kAliased) {  // not aliased (XLA copied): start from the input
    void* dst = out[pair[0]].untyped_data();
    const void* src = in[pair[1]].untyped_data();
    if (dst != src) std::memcpy(dst, src, in[pair[1]].size_bytes());
  }
  sc.steps = steps;
  sc.every = every;
  sc.hertz = hertz != 0;
  sc.rolling = rolling != 0;
  sc.all_pairs = all_pairs != 0;
  sc.dt = T(dt);
  sc.half_dt = T(0.5 * dt);
  sc.skin = T(skin);
  sc.rebuild2 = T(rebuild2);
  for (int r = 0; r < 5; ++r) sc.rotor[r] = T(kRotorFraction[r] * dt);
  for (int a = 0; a < 3; ++a) {
    sc.lower[a] = T(lower[a]);
    sc.shape[a] = shape[a];
  }
  sc.cell_size = T(cell_size);
  sc.capacity = capacity;

  auto member = [&](idx s) {
    auto at_in = [&](int a) {
      return static_cast<char*>(in[a].untyped_data()) + s * stride_in[a] * ffi::ByteWidth(in[a].element_type());
    };
    auto at_out = [&](int r) {
      return static_cast<char*>(out[r].untyped_data()) + s * stride_out[r] * ffi::ByteWidth(out[r].element_type());
    };
    Member m;
    m.x = reinterpret_cast<T*>(at_out(rPosition));
    m.q = reinterpret_cast<T*>(at_out(rOrientation));
    m.v = reinterpret_cast<T*>(at_out(rVelocity));
    m.L = reinterpret_cast<T*>(at_out(rAngularMomentum));
    m.force = reinterpret_cast<T*>(at_out(rForce));
    m.torque = reinterpret_cast<T*>(at_out(rTorque));
    m.history = reinterpret_cast<T*>(at_out(rHistory));
    m.plane_history = reinterpret_cast<T*>(at_out(rPlaneHistory));
    m.reference = reinterpret_cast<T*>(at_out(rReference));
    m.partners = reinterpret_cast<int32_t*>(at_out(rPartners));
    m.pair_slots = reinterpret_cast<int32_t*>(at_out(rPairSlots));
    m.pair_count = reinterpret_cast<int32_t*>(at_out(rPairCount));
    m.plane_slots = reinterpret_cast<int32_t*>(at_out(rPlaneSlots));
    m.plane_count = reinterpret_cast<int32_t*>(at_out(rPlaneCount));
    m.rebuilds = reinterpret_cast<int32_t*>(at_out(rRebuilds));
    m.overflow = reinterpret_cast<int32_t*>(at_out(rOverflow));
    m.contact_count = reinterpret_cast<int32_t*>(at_out(rContactCount));
    m.contacts = reinterpret_cast<int32_t*>(at_out(rContacts));
    m.elastic = reinterpret_cast<T*>(at_out(rElastic));
    m.diagnostics = reinterpret_cast<T*>(at_out(rDiagnostics));
    m.sampled = reinterpret_cast<uint8_t*>(at_out(rSampled));
    m.prescribed = reinterpret_cast<const T*>(at_in(kPrescribed));
    m.inverse_mass = reinterpret_cast<const T*>(at_in(kInverseMass));
    m.inverse_inertia = reinterpret_cast<const T*>(at_in(kInverseInertia));
    m.kinematic = reinterpret_cast<const uint8_t*>(at_in(kKinematic));
    m.spheres = reinterpret_cast<const T*>(at_in(kSpheres));
    m.planes = reinterpret_cast<const T*>(at_in(kPlanes));
    m.gravity = reinterpret_cast<const T*>(at_in(kGravity));
    m.time = *reinterpret_cast<const int32_t*>(at_in(kTime));
    return m;
  };
  if (batch == 1) {  // one scene: its phases over the threads when they have work enough
    Work w;
    if (n >= parallel_spheres) {
      run_any<true>(sc, member(0), w);
    } else {
      run_any<false>(sc, member(0), w);
    }
  } else {
#pragma omp parallel
    {
      Work w;
#pragma omp for schedule(dynamic, 8)
      for (idx s = 0; s < batch; ++s) run_any<false>(sc, member(s), w);
    }
  }
  return ffi::Error::Success();
}

}  // namespace

// Arguments and results: see enum Arg and enum Ret (solver/bodies/native_step.py builds them);
// attributes: steps, every (steps between sampled totals), hertz, rolling, all_pairs (0/1),
// dt, skin, rebuild2 (the squared rebuild distance), the grid (lower, cell_size, shape,
// capacity), parallel_spheres (a scene of fewer spheres runs on one thread).
XLA_FFI_DEFINE_HANDLER_SYMBOL(DemSpheres, chunk_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("steps")
                                  .Attr<int64_t>("every")
                                  .Attr<int64_t>("hertz")
                                  .Attr<int64_t>("rolling")
                                  .Attr<int64_t>("all_pairs")
                                  .Attr<double>("dt")
                                  .Attr<double>("skin")
                                  .Attr<double>("rebuild2")
                                  .Attr<ffi::Span<const double>>("lower")
                                  .Attr<double>("cell_size")
                                  .Attr<ffi::Span<const int64_t>>("shape")
                                  .Attr<int64_t>("capacity")
                                  .Attr<int64_t>("parallel_spheres"));
