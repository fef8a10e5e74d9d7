// The Gibbs sweep's per-row Gram matrices on the CPU, as an XLA FFI custom call:
//
//   out[c, i] = sum_{p in row i} F[c, index[p]] F[c, index[p]]^T      (C, m, K, K)
//   Gp[c, i] = its upper triangle, row by row (C, m, K(K+1)/2), when Gp has that shape
//              ((C, m, 0): not written)
//   S[c, i, q] = sum_{p in row i} w[c, index[p], q] F[c, index[p]]     (C, m, Q, K)
//   Sw[c, i, q] = sum_{p in row i} w[c, index[p], q]                   (C, m, Q)
//
// for a CSR pattern (indptr, index), the other factor F (C, m_other, K) and Q per-row
// weights w (C, m_other, Q) of it (Q may be 0; the biases' sums take Q = 2).  With
// per-rating weights rw (C, n) (else (C, 0)) every term of rating p is multiplied by
// rw[c, p] (a scale mixture's weights): its gathered row is scaled by sqrt(rw[c, p]), and
// so are its weights in the weighted sums, whose own sums take rw[c, p] itself.  The sparse
// product of the pattern with the K(K+1)/2 packed outer products (bmczoo.linalg) moves
// K(K+1)/2 numbers per rating through the caches; here each row's factor rows are
// gathered into a small buffer that stays in L1 and multiplied as a symmetric rank-n
// update, K numbers per rating moved and the upper triangle accumulated in registers
// (blocks of R rows by NB vectors).  The result is symmetric (both triangles written).
//
// The rows are split in chunks taken by the calling thread and by tasks on XLA's
// intra-op thread pool (each task takes chunks until none is left; the call returns when
// every chunk is done, so a task that starts late finds nothing to do).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kVecBytes = 32;

// The register-blocked kernels, compiled once per instruction set: ATTR is empty for the
// baseline and the AVX2+FMA target on x86-64 (chosen at run time).
#define BMCZOO_GRAM_KERNELS(NS, ATTR)                                                      \
  namespace NS {                                                                           \
  /* out[r0 + a, (cv0 + b) V ...] += sum_p coef[p * cs + r0 + a] buf[p, (cv0 + b) V ...] for */ \
  /* R rows from r0 and NB vectors from cv0, accumulated in registers; the Gram matrix */  \
  /* takes its coefficients from buf itself (cs = Kp), the weighted sums from w (cs = Q) */ \
  template <typename T, int R, int NB>                                                     \
  ATTR void block(const T* buf, const T* coef, int cs, int64_t n, int Kp, int r0, int cv0, \
                  T* out) {                                                                \
    typedef T vec __attribute__((vector_size(kVecBytes)));                                 \
    typedef T uvec __attribute__((vector_size(kVecBytes), aligned(sizeof(T)), may_alias)); \
    constexpr int V = kVecBytes / sizeof(T);                                               \
    vec acc[R][NB];                                                                        \
    for (int a = 0; a < R; ++a)                                                            \
      for (int b = 0; b < NB; ++b)                                                         \
        acc[a][b] = *reinterpret_cast<const uvec*>(out + (r0 + a) * Kp + (cv0 + b) * V);   \
    for (int64_t p = 0; p < n; ++p) {                                                      \
      vec x[NB];                                                                           \
      for (int b = 0; b < NB; ++b)                                                         \
        x[b] = *reinterpret_cast<const uvec*>(buf + p * Kp + (cv0 + b) * V);               \
      for (int a = 0; a < R; ++a) {                                                        \
        const T c = coef[p * cs + r0 + a];                                                 \
        for (int b = 0; b < NB; ++b) acc[a][b] += c * x[b];                                \
      }                                                                                    \
    }                                                                                      \
    for (int a = 0; a < R; ++a)                                                            \
      for (int b = 0; b < NB; ++b)                                                         \
        *reinterpret_cast<uvec*>(out + (r0 + a) * Kp + (cv0 + b) * V) = acc[a][b];         \
  }                                                                                        \
  template <typename T, int NB>                                                            \
  ATTR void rows_of(const T* buf, int64_t n, int Kp, int k0, int rows, int cv0, T* acc) {  \
    constexpr int R = NB == 4 ? 3 : NB == 3 ? 4 : NB == 2 ? 6 : 8;                         \
    for (; rows >= R; rows -= R, k0 += R) block<T, R, NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); \
    switch (rows) {                                                                        \
      case 7: block<T, (7 < R ? 7 : 1), NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;     \
      case 6: block<T, (6 < R ? 6 : 1), NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;     \
      case 5: block<T, (5 < R ? 5 : 1), NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;     \
      case 4: block<T, (4 < R ? 4 : 1), NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;     \
      case 3: block<T, (3 < R ? 3 : 1), NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;     \
      case 2: block<T, (2 < R ? 2 : 1), NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;     \
      case 1: block<T, 1, NB>(buf, buf, Kp, n, Kp, k0, cv0, acc); break;                   \
      default: break;                                                                      \
    }                                                                                      \
  }                                                                                        \
  /* acc (Kp x Kp, row-major) += the upper blocks of buf^T buf, buf (n x Kp) */            \
  template <typename T>                                                                    \
  ATTR void gram_upper(const T* buf, int64_t n, int K, int Kp, T* acc) {                   \
    constexpr int V = kVecBytes / sizeof(T);                                               \
    const int nv = Kp / V;                                                                 \
    /* row band [V*q, V*q + V) needs the column vectors q .. nv - 1 */                     \
    for (int q = 0; q < nv; ++q) {                                                         \
      const int k0 = q * V, rows = std::min(V, K - k0);                                    \
      for (int cv = q; cv < nv; cv += 4) {                                                 \
        switch (std::min(4, nv - cv)) {                                                    \
          case 4: rows_of<T, 4>(buf, n, Kp, k0, rows, cv, acc); break;                     \
          case 3: rows_of<T, 3>(buf, n, Kp, k0, rows, cv, acc); break;                     \
          case 2: rows_of<T, 2>(buf, n, Kp, k0, rows, cv, acc); break;                     \
          default: rows_of<T, 1>(buf, n, Kp, k0, rows, cv, acc); break;                    \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  template <typename T>                                                                    \
  ATTR void weighted_sums(const T* buf, const T* w, int64_t n, int Q, int Kp, T* s) {      \
    constexpr int V = kVecBytes / sizeof(T);                                               \
    const int nv = Kp / V;                                                                 \
    for (int q = 0; q < Q; q += 2)                                                         \
      for (int cv = 0; cv < nv; cv += 4) {                                                 \
        const int nb = std::min(4, nv - cv);                                               \
        if (Q - q >= 2) {                                                                  \
          if (nb == 4) block<T, 2, 4>(buf, w, Q, n, Kp, q, cv, s);                         \
          else if (nb == 3) block<T, 2, 3>(buf, w, Q, n, Kp, q, cv, s);                    \
          else if (nb == 2) block<T, 2, 2>(buf, w, Q, n, Kp, q, cv, s);                    \
          else block<T, 2, 1>(buf, w, Q, n, Kp, q, cv, s);                                 \
        } else {                                                                           \
          if (nb == 4) block<T, 1, 4>(buf, w, Q, n, Kp, q, cv, s);                         \
          else if (nb == 3) block<T, 1, 3>(buf, w, Q, n, Kp, q, cv, s);                    \
          else if (nb == 2) block<T, 1, 2>(buf, w, Q, n, Kp, q, cv, s);                    \
          else block<T, 1, 1>(buf, w, Q, n, Kp, q, cv, s);                                 \
        }                                                                                  \
      }                                                                                    \
  }                                                                                        \
  }

BMCZOO_GRAM_KERNELS(base, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BMCZOO_X86 1
BMCZOO_GRAM_KERNELS(avx2, __attribute__((target("avx2,fma"))))
#endif

template <typename T>
struct Kernels {
  void (*gram)(const T*, int64_t, int, int, T*);
  void (*sums)(const T*, const T*, int64_t, int, int, T*);
};

template <typename T>
Kernels<T> pick_kernels() {
#ifdef BMCZOO_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return {&avx2::gram_upper<T>, &avx2::weighted_sums<T>};
#endif
  return {&base::gram_upper<T>, &base::weighted_sums<T>};
}

// Chunks of rows shared by the calling thread and the pool's tasks.
struct Work {
  int64_t chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> bad_index{false};
  std::mutex mu;
  std::condition_variable cv;
};

template <typename T>
struct Problem {
  const int32_t* indptr;
  const int32_t* index;
  const T* F;
  const T* w;  // (C, m_other, Q) weights of the weighted sums
  const T* rw;  // (C, n) per-rating weights, or nullptr
  int64_t n;    // the number of ratings (rw's stride)
  T* out;      // (C, m, K, K)
  T* Gp;       // (C, m, K(K+1)/2) or nullptr
  T* S;        // (C, m, Q, K): sum_j w[j, q] F_j
  T* Sw;       // (C, m, Q): sum_j w[j, q]
  int64_t C, m, m_other;
  int K, Kp, Q;
  int64_t ratings_per_pass;  // the gathered buffer's rows (it stays in L1)
  Kernels<T> kernels;
};

// false when a column index is out of range (the rows from there on are left as they are)
template <typename T>
bool run_rows(const Problem<T>& P, int64_t i0, int64_t i1) {
  const int K = P.K, Kp = P.Kp, Q = P.Q;
  std::vector<T> buf(static_cast<size_t>(P.ratings_per_pass) * Kp, T(0));
  std::vector<T> wbuf(static_cast<size_t>(P.ratings_per_pass) * Q);
  std::vector<T> acc(static_cast<size_t>(Kp) * Kp);
  std::vector<T> sacc(static_cast<size_t>(Q) * Kp);
  std::vector<T> wacc(Q);
  for (int64_t c = 0; c < P.C; ++c) {
    const T* F = P.F + c * P.m_other * K;
    const T* w = P.w + c * P.m_other * Q;
    const T* rw = P.rw == nullptr ? nullptr : P.rw + c * P.n;
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(sacc.begin(), sacc.end(), T(0));
      std::fill(wacc.begin(), wacc.end(), T(0));
      for (int64_t p0 = P.indptr[i]; p0 < P.indptr[i + 1]; p0 += P.ratings_per_pass) {
        const int64_t n = std::min<int64_t>(P.ratings_per_pass, P.indptr[i + 1] - p0);
        for (int64_t p = 0; p < n; ++p) {
          const int32_t j = P.index[p0 + p];
          if (j < 0 || j >= P.m_other) return false;
          T* row = buf.data() + p * Kp;
          if (rw == nullptr) {
            std::memcpy(row, F + int64_t(j) * K, K * sizeof(T));
            for (int q = 0; q < Q; ++q) wacc[q] += wbuf[p * Q + q] = w[int64_t(j) * Q + q];
          } else {
            const T r = rw[p0 + p], s = std::sqrt(r);
            for (int k = 0; k < K; ++k) row[k] = s * F[int64_t(j) * K + k];
            for (int q = 0; q < Q; ++q) {
              const T wq = w[int64_t(j) * Q + q];
              wbuf[p * Q + q] = s * wq;
              wacc[q] += r * wq;
            }
          }
        }
        P.kernels.gram(buf.data(), n, K, Kp, acc.data());
        if (Q > 0) P.kernels.sums(buf.data(), wbuf.data(), n, Q, Kp, sacc.data());
      }
      T* o = P.out + (c * P.m + i) * K * K;
      for (int k = 0; k < K; ++k)
        for (int l = k; l < K; ++l) o[k * K + l] = o[l * K + k] = acc[k * Kp + l];
      if (P.Gp != nullptr) {
        T* g = P.Gp + (c * P.m + i) * (K * (K + 1) / 2);
        for (int k = 0; k < K; ++k)
          for (int l = k; l < K; ++l) *g++ = acc[k * Kp + l];
      }
      for (int q = 0; q < Q; ++q) {
        std::memcpy(P.S + ((c * P.m + i) * Q + q) * K, sacc.data() + q * Kp, K * sizeof(T));
        P.Sw[(c * P.m + i) * Q + q] = wacc[q];
      }
    }
  }
  return true;
}

template <typename T>
ffi::Error gram_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> indptr,
                     ffi::Buffer<ffi::S32> index, ffi::AnyBuffer F, ffi::AnyBuffer w,
                     ffi::AnyBuffer rw, ffi::Result<ffi::AnyBuffer> out,
                     ffi::Result<ffi::AnyBuffer> Gp, ffi::Result<ffi::AnyBuffer> S,
                     ffi::Result<ffi::AnyBuffer> Sw) {
  const auto fd = F.dimensions();
  if (fd.size() != 3) return ffi::Error::InvalidArgument("gram: F must be (C, m_other, K)");
  Problem<T> P;
  P.C = fd[0];
  P.m_other = fd[1];
  P.K = static_cast<int>(fd[2]);
  P.m = indptr.element_count() - 1;
  constexpr int V = kVecBytes / sizeof(T);
  P.Kp = std::max(V, (P.K + V - 1) / V * V);  // at least one vector: K = 0 gives only Sw
  P.ratings_per_pass = std::max<int64_t>(8, (16 << 10) / (P.Kp * int64_t(sizeof(T))));
  P.indptr = indptr.typed_data();
  P.index = index.typed_data();
  P.F = F.typed_data<T>();
  P.out = out->typed_data<T>();
  P.w = w.typed_data<T>();
  P.S = S->typed_data<T>();
  P.Sw = Sw->typed_data<T>();
  P.kernels = pick_kernels<T>();
  const auto wd = w.dimensions();
  if (wd.size() != 3 || wd[0] != P.C || wd[1] != P.m_other)
    return ffi::Error::InvalidArgument("gram: the weights must be (C, m_other, Q)");
  P.Q = static_cast<int>(wd[2]);
  const auto od = out->dimensions(), sd = S->dimensions(), swd = Sw->dimensions();
  const auto pd = Gp->dimensions();
  if (od.size() != 4 || od[0] != P.C || od[1] != P.m || od[2] != P.K || od[3] != P.K)
    return ffi::Error::InvalidArgument("gram: the output must be (C, m, K, K)");
  const int64_t npacked = int64_t(P.K) * (P.K + 1) / 2;
  if (pd.size() != 3 || pd[0] != P.C || pd[1] != P.m || (pd[2] != npacked && pd[2] != 0))
    return ffi::Error::InvalidArgument("gram: the packed output must be (C, m, K(K+1)/2) or (C, m, 0)");
  P.Gp = pd[2] == npacked && npacked > 0 ? Gp->typed_data<T>() : nullptr;
  if (sd.size() != 4 || sd[0] != P.C || sd[1] != P.m || sd[2] != P.Q || sd[3] != P.K ||
      swd.size() != 3 || swd[0] != P.C || swd[1] != P.m || swd[2] != P.Q)
    return ffi::Error::InvalidArgument("gram: the sums must be (C, m, Q, K) and (C, m, Q)");
  const int64_t n = index.element_count();
  const auto rd = rw.dimensions();
  if (rd.size() != 2 || rd[0] != P.C || (rd[1] != n && rd[1] != 0))
    return ffi::Error::InvalidArgument("gram: the rating weights must be (C, n) or (C, 0)");
  P.n = n;
  P.rw = rd[1] == n && n > 0 ? rw.typed_data<T>() : nullptr;
  if (P.m < 0 || P.indptr[0] != 0 || P.indptr[P.m] > n)
    return ffi::Error::InvalidArgument("gram: indptr does not describe the index");
  for (int64_t i = 0; i < P.m; ++i)
    if (P.indptr[i + 1] < P.indptr[i]) return ffi::Error::InvalidArgument("gram: indptr decreases");
  if (P.m == 0) return ffi::Error::Success();
  // chunks of about 2^15 multiply-adds or more, at least one per row band of 16 rows
  const int64_t per_row = std::max<int64_t>(1, P.indptr[P.m] / P.m) * P.C * P.K * P.K / 2;
  const int64_t rows_per_chunk = std::clamp<int64_t>((1 << 18) / std::max<int64_t>(1, per_row), 1, 256);
  auto work = std::make_shared<Work>();
  work->chunks = (P.m + rows_per_chunk - 1) / rows_per_chunk;
  auto take = [P, work, rows_per_chunk]() {
    for (;;) {
      const int64_t k = work->next.fetch_add(1);
      if (k >= work->chunks) return;
      const int64_t i0 = k * rows_per_chunk;
      if (!run_rows<T>(P, i0, std::min(P.m, i0 + rows_per_chunk))) work->bad_index = true;
      if (work->done.fetch_add(1) + 1 == work->chunks) {
        std::lock_guard<std::mutex> lock(work->mu);
        work->cv.notify_all();
      }
    }
  };
  // as many participants as cores: XLA's pool may hold more threads than the machine has cores
  const int64_t cores = std::thread::hardware_concurrency();
  const int64_t threads = cores > 0 ? std::min<int64_t>(cores, pool.num_threads()) : pool.num_threads();
  const int64_t helpers = std::clamp<int64_t>(threads - 1, 0, work->chunks - 1);
  for (int64_t t = 0; t < helpers; ++t) {
    auto task = take;
    pool.Schedule(std::move(task));
  }
  take();
  {
    std::unique_lock<std::mutex> lock(work->mu);
    work->cv.wait(lock, [&] { return work->done.load() == work->chunks; });
  }
  if (work->bad_index) return ffi::Error::InvalidArgument("gram: a column index is out of range");
  return ffi::Error::Success();
}

ffi::Error gram(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> index,
                ffi::AnyBuffer F, ffi::AnyBuffer w, ffi::AnyBuffer rw,
                ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> Gp,
                ffi::Result<ffi::AnyBuffer> S, ffi::Result<ffi::AnyBuffer> Sw) {
  const auto dt = F.element_type();
  if (w.element_type() != dt || rw.element_type() != dt || out->element_type() != dt || Gp->element_type() != dt ||
      S->element_type() != dt || Sw->element_type() != dt)
    return ffi::Error::InvalidArgument("gram: the weights' and outputs' dtype must be F's");
  switch (dt) {
    case ffi::DataType::F32:
      return gram_impl<float>(pool, indptr, index, F, w, rw, out, Gp, S, Sw);
    case ffi::DataType::F64:
      return gram_impl<double>(pool, indptr, index, F, w, rw, out, Gp, S, Sw);
    default:
      return ffi::Error::InvalidArgument("gram: F must be float32 or float64");
  }
}

}  // namespace

// the FFI handler (jax.ffi.register_ffi_target("bmczoo_gram", ..., platform="cpu")); the only
// exported symbol of the library
#pragma GCC visibility push(default)
XLA_FFI_DEFINE_HANDLER_SYMBOL(BmczooGram, gram,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
#pragma GCC visibility pop
