// SPDX-License-Identifier: Apache-2.0
// Softmax loops for AVX-512, AVX2+FMA and portable C++, compiled with per-function target
// attributes so that the default build runs on any x86-64 and only uses what cpuid reports.
#include "dcp/kernels/cpu/vector_math.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "dcp/kernels/attention_kernels.h"

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
#define DCP_KERNELS_X86 1
#endif

namespace dcp::kernels {
namespace {

// exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 in [-ln2/2, ln2/2]; ln 2 is
// split into a high part with trailing zero bits (n * kLn2Hi is exact) and a low correction.
// exp(r) is its Taylor polynomial to degree 7 (truncation error < 6e-9 relative on that range).
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.42860682030941723e-6f;
constexpr float kC2 = 1.0f / 2, kC3 = 1.0f / 6, kC4 = 1.0f / 24, kC5 = 1.0f / 120, kC6 = 1.0f / 720,
                kC7 = 1.0f / 5040;
// Below this the result is flushed to 0 (exp(-87) ~ 1.6e-38 is the edge of the normal range,
// so 2^n stays a normal number); above kExpMax it would overflow.
constexpr float kExpMin = -87.0f;
constexpr float kExpMax = 88.0f;
// Adding and subtracting 1.5 * 2^23 rounds |y| < 2^22 to the nearest integer (ties to even) in
// the default rounding mode: the sum's ulp is 1.
constexpr float kRoundMagic = 12582912.0f;

float exp_portable(float x) {
  if (!(x >= kExpMin)) return 0.0f;  // -inf and deep underflow
  x = std::min(x, kExpMax);
  const float n = std::nearbyint(x * kLog2e);
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kC7;
  p = p * r + kC6;
  p = p * r + kC5;
  p = p * r + kC4;
  p = p * r + kC3;
  p = p * r + kC2;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto e = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

float max_portable(const float* x, std::size_t n) {
  float m = kNegInf;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float exp_shift_sum_portable(float* x, std::size_t n, float shift) {
  float sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = exp_portable(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

void softmax_grad_portable(float* ds, const float* p, std::size_t n, float delta) {
  for (std::size_t i = 0; i < n; ++i) ds[i] = p[i] * (ds[i] - delta);
}

constexpr VectorMath kPortable{"portable", max_portable, exp_shift_sum_portable,
                               softmax_grad_portable};

#ifdef DCP_KERNELS_X86

// ---- AVX-512 ----

__attribute__((target("avx512f"))) __m512 exp512(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_LT_OQ);
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kExpMax)), _mm512_set1_ps(kExpMin));
  const __m512 magic = _mm512_set1_ps(kRoundMagic);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), magic), magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kC7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow),
                             _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

__attribute__((target("avx512f"))) __mmask16 tail_mask(std::size_t remaining) {
  return static_cast<__mmask16>((1u << remaining) - 1u);
}

__attribute__((target("avx512f"))) float max_avx512(const float* x, std::size_t n) {
  __m512 m0 = _mm512_set1_ps(kNegInf), m1 = m0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(m1, tail_mask(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

__attribute__((target("avx512f"))) float exp_shift_sum_avx512(float* x, std::size_t n,
                                                              float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    const __m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), s));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(x + i, e0);
    sum0 = _mm512_add_ps(sum0, e0);
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e0 = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), s));
    _mm512_mask_storeu_ps(x + i, k, e0);
    sum1 = _mm512_add_ps(sum1, _mm512_maskz_mov_ps(k, e0));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

__attribute__((target("avx512f"))) void softmax_grad_avx512(float* ds, const float* p,
                                                            std::size_t n, float delta) {
  const __m512 dl = _mm512_set1_ps(delta);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(
        ds + i, _mm512_mul_ps(_mm512_loadu_ps(p + i), _mm512_sub_ps(_mm512_loadu_ps(ds + i), dl)));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i),
                                   _mm512_sub_ps(_mm512_maskz_loadu_ps(k, ds + i), dl));
    _mm512_mask_storeu_ps(ds + i, k, v);
  }
}

constexpr VectorMath kAvx512{"avx512", max_avx512, exp_shift_sum_avx512, softmax_grad_avx512};

// ---- AVX2 + FMA ----

__attribute__((target("avx2,fma"))) __m256 exp256(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kExpMax)), _mm256_set1_ps(kExpMin));
  const __m256 magic = _mm256_set1_ps(kRoundMagic);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), magic), magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kC7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

__attribute__((target("avx2,fma"))) float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) float hmax256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) float max_avx2(const float* x, std::size_t n) {
  __m256 m0 = _mm256_set1_ps(kNegInf), m1 = m0;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
  return std::max(hmax256(_mm256_max_ps(m0, m1)), max_portable(x + i, n - i));
}

__attribute__((target("avx2,fma"))) float exp_shift_sum_avx2(float* x, std::size_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum0 = _mm256_setzero_ps(), sum1 = sum0;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    const __m256 e1 = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s));
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    sum0 = _mm256_add_ps(sum0, e0);
    sum1 = _mm256_add_ps(sum1, e1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 e0 = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e0);
    sum0 = _mm256_add_ps(sum0, e0);
  }
  return hsum256(_mm256_add_ps(sum0, sum1)) + exp_shift_sum_portable(x + i, n - i, shift);
}

__attribute__((target("avx2,fma"))) void softmax_grad_avx2(float* ds, const float* p, std::size_t n,
                                                           float delta) {
  const __m256 dl = _mm256_set1_ps(delta);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(
        ds + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_sub_ps(_mm256_loadu_ps(ds + i), dl)));
  }
  softmax_grad_portable(ds + i, p + i, n - i, delta);
}

constexpr VectorMath kAvx2{"avx2", max_avx2, exp_shift_sum_avx2, softmax_grad_avx2};

bool has_avx512() { return __builtin_cpu_supports("avx512f"); }
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

#endif  // DCP_KERNELS_X86

const VectorMath& select_vector_math() {
#ifdef DCP_KERNELS_X86
  if (has_avx512()) return kAvx512;
  if (has_avx2()) return kAvx2;
#endif
  return kPortable;
}

}  // namespace

const VectorMath& vector_math() {
  static const VectorMath& selected = select_vector_math();
  return selected;
}

std::vector<const VectorMath*> supported_vector_math() {
  std::vector<const VectorMath*> result{&kPortable};
#ifdef DCP_KERNELS_X86
  if (has_avx2()) result.push_back(&kAvx2);
  if (has_avx512()) result.push_back(&kAvx512);
#endif
  return result;
}

}  // namespace dcp::kernels
