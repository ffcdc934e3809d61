// SPDX-License-Identifier: Apache-2.0
// Throughput of the CPU attention kernels on full 1024 x 1024 tiles next to the machine's FP32
// FMA peak and cblas_sgemm on the same products, as GFLOP/s and ratios.
//
// Usage: dcp_kernel_bench [repetitions]   (median of the repetitions after one warm-up run)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dcp/core/rng.h"
#include "dcp/core/timing.h"

#include "dcp/kernels/attention_kernels.h"
#include "dcp/kernels/cpu/cpu_attention.h"
#include "dcp/kernels/cpu/vector_math.h"

#include "bench/bench_stats.h"
#include <cblas.h>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers self-initialise their "undefined" vectors, which -Wuninitialized
// reports at the header's lines once inlined (GCC bug 105593); silence it for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace {

using dcp::kernels::AttentionParams;
using dcp::kernels::ElementType;

constexpr int kTokens = 1024;
constexpr int kHeadDim = 128;
int g_repetitions = 7;

// Seconds of fn over the repetitions after one warm-up call: the median, and the fastest run
// (the better estimate of what the code can do on a machine shared with other work).
struct Timing {
  double median, best;
};

Timing time_runs(const std::function<void()>& fn) {
  fn();
  std::vector<double> seconds;
  for (int i = 0; i < g_repetitions; ++i) {
    const auto start = dcp::Clock::now();
    fn();
    seconds.push_back(dcp::ms_since(start) / 1000.0);
  }
  return {dcp::bench::median(seconds), *std::min_element(seconds.begin(), seconds.end())};
}

// GFLOP/s from a flop count and a timing.
struct Rate {
  double median, best;
};
Rate rate(double flops, Timing t) { return {flops / t.median * 1e-9, flops / t.best * 1e-9}; }

// Runs body(t) on `threads` threads (the caller is thread 0) and joins them.
void run_threads(int threads, const std::function<void(int)>& body) {
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back(body, t);
  body(0);
  for (auto& t : others) t.join();
}

// ---- FP32 FMA peak: independent register-only FMA chains, enough of them to cover the FMA
// latency times the number of FMA pipes. ----

constexpr long kFmaIterations = 20'000'000;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_loop_avx512(long iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  return lanes[0] + lanes[7];
}
#endif

// GFLOP/s of the FMA loops on `threads` threads, with the ISA it used.
std::pair<Rate, std::string> fma_peak(int threads) {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512 || avx2) {
    const int lanes = avx512 ? 16 : 8;
    std::vector<float> sink(static_cast<std::size_t>(threads));
    const Timing timing = time_runs([&] {
      run_threads(threads, [&](int t) {
        sink[static_cast<std::size_t>(t)] =
            avx512 ? fma_loop_avx512(kFmaIterations) : fma_loop_avx2(kFmaIterations);
      });
    });
    if (sink[0] == 12345.0f) std::puts("");  // keep the results alive
    const double flops = 2.0 * lanes * 12.0 * static_cast<double>(kFmaIterations) * threads;
    return {rate(flops, timing), avx512 ? "avx512" : "avx2"};
  }
#endif
  return {{0.0, 0.0}, "none"};
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  dcp::Rng rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

// ---- sgemm on the kernels' products at full size: forward QK^T (L x L x d) and PV
// (L x d x L); backward QK^T, dO V^T, P^T dO, dS^T Q and dS K. Each thread takes its share of
// the heads (or of the query rows for a single head). ----

Rate sgemm_gflops(int heads, int threads, bool backward) {
  const int L = kTokens, d = kHeadDim;
  struct Buffers {
    std::vector<float> q, k, s, o;
  };
  std::vector<Buffers> buf(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    auto& b = buf[static_cast<std::size_t>(t)];
    b.q = random_floats(static_cast<std::size_t>(L) * d, 1);
    b.k = random_floats(static_cast<std::size_t>(L) * d, 2);
    b.s.assign(static_cast<std::size_t>(L) * L, 0.01f);
    b.o.assign(static_cast<std::size_t>(L) * d, 0.0f);
  }
  // Work units: heads, each split into `split` row blocks so that every thread has work.
  const int split = heads >= threads ? 1 : threads;
  const int units = heads * split;
  const int rows = L / split;
  const Timing timing = time_runs([&] {
    run_threads(threads, [&](int t) {
      auto& b = buf[static_cast<std::size_t>(t)];
      for (int u = t; u < units; u += threads) {
        // rows x L x d: S = Q K^T (and dP = dO V^T).
        for (int rep = 0; rep < (backward ? 2 : 1); ++rep) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L, d, 1.0f, b.q.data(), d,
                      b.k.data(), d, 0.0f, b.s.data(), L);
        }
        // rows x d x L: O = P V (and dQ = dS K).
        for (int rep = 0; rep < (backward ? 2 : 1); ++rep) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, L, 1.0f, b.s.data(), L,
                      b.k.data(), d, 1.0f, b.o.data(), d);
        }
        // Backward only: L x d x rows: dV = P^T dO, dK = dS^T Q (here: the first L rows of k).
        if (backward) {
          for (int rep = 0; rep < 2; ++rep) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, d, rows, 1.0f, b.s.data(), L,
                        b.q.data(), d, 1.0f, b.k.data(), d);
          }
        }
      }
    });
  });
  const double flops = (backward ? 10.0 : 4.0) * L * L * static_cast<double>(d) * heads;
  return rate(flops, timing);
}

struct KernelResult {
  Rate forward, backward;
};

// CpuKernels on one row of one full (or causal) L x L tile.
KernelResult kernel_gflops(int q_heads, int kv_heads, ElementType storage, int threads,
                           bool causal) {
  const int L = kTokens, d = kHeadDim;
  const AttentionParams p = dcp::kernels::attention_params(q_heads, kv_heads, d, storage);
  const auto nq = static_cast<std::size_t>(L * q_heads * d);
  const auto nk = static_cast<std::size_t>(L * kv_heads * d);
  const std::size_t es = dcp::kernels::element_size(storage);
  auto stored = [&](std::size_t n, std::uint64_t seed) {
    const auto f = random_floats(n, seed);
    std::vector<unsigned char> bytes(n * es);
    dcp::kernels::from_float(storage, f.data(), bytes.data(), n);
    return bytes;
  };
  const auto q = stored(nq, 3), k = stored(nk, 4), v = stored(nk, 5), dout = stored(nq, 6);
  std::vector<std::int32_t> offsets, intervals;
  if (causal) {
    for (int r = 0; r <= L; ++r) offsets.push_back(r);
    for (int r = 0; r < L; ++r) intervals.insert(intervals.end(), {0, r + 1});
  }
  dcp::kernels::TileMaskView mask;
  if (causal) mask = {offsets.data(), intervals.data()};
  std::vector<float> o(nq), lse(static_cast<std::size_t>(L * q_heads)), delta(lse.size());
  std::vector<float> dq(nq), dk(nk), dv(nk);
  dcp::kernels::CpuKernels cpu(threads);
  const dcp::kernels::ForwardTile ftile{k.data(), v.data(), L, mask};
  dcp::kernels::ForwardRow frow;
  frow.q = q.data();
  frow.q_tokens = L;
  frow.tiles = {&ftile, 1};
  frow.o = o.data();
  frow.lse = lse.data();
  const Timing fwd = time_runs([&] { cpu.forward(p, {&frow, 1}); });

  // delta from o rounded to storage, as the runtime would hand it over.
  std::vector<unsigned char> o_stored(nq * es);
  dcp::kernels::from_float(storage, o.data(), o_stored.data(), nq);
  cpu.delta(storage, o_stored.data(), dout.data(), L, q_heads, d, delta.data());
  dcp::kernels::BackwardTile btile;
  btile.k = k.data();
  btile.v = v.data();
  btile.kv_tokens = L;
  btile.mask = mask;
  btile.dk = dk.data();
  btile.dv = dv.data();
  dcp::kernels::BackwardRow brow;
  brow.q = q.data();
  brow.dout = dout.data();
  brow.lse = lse.data();
  brow.delta = delta.data();
  brow.q_tokens = L;
  brow.tiles = {&btile, 1};
  brow.dq = dq.data();
  const Timing bwd = time_runs([&] { cpu.backward(p, {&brow, 1}); });

  // Useful flops: the attended fraction of the tile (causal: (L + 1) / 2L).
  const double fraction = causal ? (L + 1.0) / (2.0 * L) : 1.0;
  const double base = static_cast<double>(L) * L * d * q_heads * fraction;
  return {rate(4.0 * base, fwd), rate(10.0 * base, bwd)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_repetitions = std::max(1, std::atoi(argv[1]));
  openblas_set_num_threads(1);  // dcp threads itself; so does this benchmark
  std::printf("# dcp_kernel_bench: L = %d, head_dim = %d, median of %d runs\n", kTokens, kHeadDim,
              g_repetitions);
  std::printf("# openblas core: %s; softmax loops: %s\n", openblas_get_corename(),
              std::string(dcp::kernels::vector_math().isa).c_str());
  std::printf("# flops: forward 4 L^2 d per q head, backward 10 L^2 d (causal: attended part)\n");
  std::printf(
      "# columns: GFLOP/s as median / best run; ratios of the medians, then of the bests\n");
  std::printf("%-8s %-5s %-4s %-6s %-3s %13s %13s %13s %11s %11s\n", "pass", "heads", "type",
              "mask", "thr", "kernel", "sgemm", "fma_peak", "k/sgemm", "k/peak");
  const auto line = [](const char* pass, const std::string& heads, const char* type,
                       const char* mask, int threads, Rate k, Rate sg, Rate peak) {
    std::printf(
        "%-8s %-5s %-4s %-6s %-3d %6.1f/%6.1f %6.1f/%6.1f %6.1f/%6.1f %5.2f/%5.2f %5.2f/%5.2f\n",
        pass, heads.c_str(), type, mask, threads, k.median, k.best, sg.median, sg.best, peak.median,
        peak.best, k.median / sg.median, k.best / sg.best, k.median / peak.median,
        k.best / peak.best);
  };
  for (int threads : {1, 2}) {
    const auto [peak, isa] = fma_peak(threads);
    std::printf("# fp32 FMA peak on %d thread(s) (%s): %.1f GFLOP/s median, %.1f best\n", threads,
                isa.c_str(), peak.median, peak.best);
    for (auto [qh, kvh] : {std::pair{1, 1}, std::pair{8, 2}}) {
      const Rate sg_fwd = sgemm_gflops(qh, threads, false);
      const Rate sg_bwd = sgemm_gflops(qh, threads, true);
      for (ElementType type : {ElementType::kFp32, ElementType::kBf16}) {
        for (bool causal : {false, true}) {
          if (causal && type != ElementType::kFp32) continue;
          const KernelResult r = kernel_gflops(qh, kvh, type, threads, causal);
          const std::string heads = std::to_string(qh) + "/" + std::to_string(kvh);
          const char* type_name = type == ElementType::kFp32 ? "fp32" : "bf16";
          const char* mask = causal ? "causal" : "full";
          line("forward", heads, type_name, mask, threads, r.forward, sg_fwd, peak);
          line("backward", heads, type_name, mask, threads, r.backward, sg_bwd, peak);
        }
      }
    }
  }
  return 0;
}
