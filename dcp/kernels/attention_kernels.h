// SPDX-License-Identifier: Apache-2.0
// The kernel set interface: blockwise attention forward and backward over interval-masked tiles,
// the log-sum-exp merge of partial outputs, gradient sums and the backward's delta.
//
// A kernel sees plain pointers and shapes (a POD per call), never a Program or a tensor class, so
// the same runtime can drive the fp64 reference, the CPU kernels and later CUDA kernels.
//
// Layouts (row-major, heads inside tokens, as in the Program's slots):
//   q, o, do, dq   [tokens][q_heads][head_dim]
//   k, v, dk, dv   [tokens][kv_heads][head_dim]
//   lse, delta     [q_heads][tokens]                      always fp32
// q, k, v and do are in the storage element type; o, dq, dk and dv written by the kernels are
// fp32 partials. q head j reads kv head j / (q_heads / kv_heads).
//
// Numerics (docs/runtime.md): s = softmax_scale * q.k; lse = log(sum over unmasked keys of
// exp(s)) with the natural log; o = sum exp(s - lse) v. A row with no unmasked key has lse = -inf
// and o = 0, and contributes zero gradients; no kernel ever produces NaN from it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

namespace dcp::kernels {

// The lse of a row that sees no key, and a row's running maximum before its first key.
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

enum class ElementType : std::uint8_t { kFp32, kBf16, kFp16 };
std::string_view to_string(ElementType type);
std::size_t element_size(ElementType type);

// Converts n elements; from_float rounds to nearest even.
void to_float(ElementType type, const void* src, float* dst, std::size_t n);
void from_float(ElementType type, const float* src, void* dst, std::size_t n);

// What every tile of one call shares.
struct AttentionParams {
  std::int32_t q_heads = 1;
  std::int32_t kv_heads = 1;  // divides q_heads
  std::int32_t head_dim = 1;
  ElementType storage = ElementType::kFp32;
  float softmax_scale = 1;
};

// The parameters of q_heads, kv_heads and head_dim in `storage`, with the usual softmax scale
// 1 / sqrt(head_dim).
inline AttentionParams attention_params(std::int32_t q_heads, std::int32_t kv_heads,
                                        std::int32_t head_dim,
                                        ElementType storage = ElementType::kFp32) {
  return {q_heads, kv_heads, head_dim, storage, 1.0f / std::sqrt(static_cast<float>(head_dim))};
}

// Which keys each query row of a tile attends to, relative to the tile. row_offsets == nullptr
// means every key (a full tile: no per-element mask). Otherwise row r attends to the keys
// [intervals[2i], intervals[2i + 1]) for i in [row_offsets[r], row_offsets[r + 1]); a row's
// intervals are sorted, disjoint, non-empty and inside [0, kv_tokens).
struct TileMaskView {
  const std::int32_t* row_offsets = nullptr;
  const std::int32_t* intervals = nullptr;
  bool full() const { return row_offsets == nullptr; }
};

struct ForwardTile {
  const void* k = nullptr;
  const void* v = nullptr;
  std::int32_t kv_tokens = 0;
  TileMaskView mask;
};

// One q value against a list of kv values: o, lse over the union of the tiles' keys.
struct ForwardRow {
  const void* q = nullptr;
  std::int32_t q_tokens = 0;
  std::span<const ForwardTile> tiles;
  float* o = nullptr;
  float* lse = nullptr;
  // Merge the result by log-sum-exp into the partial o, lse already there (over other keys),
  // instead of overwriting it. With no tiles, an overwriting row writes o = 0, lse = -inf.
  bool accumulate = false;
};

struct BackwardTile {
  const void* k = nullptr;
  const void* v = nullptr;
  std::int32_t kv_tokens = 0;
  TileMaskView mask;
  float* dk = nullptr;
  float* dv = nullptr;
  bool accumulate = false;  // add to dk, dv, else overwrite them
};

// One q value's backward against a list of kv values, from the final lse and
// delta = rowsum(do * o) of the whole row.
struct BackwardRow {
  const void* q = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  const float* delta = nullptr;
  std::int32_t q_tokens = 0;
  std::span<const BackwardTile> tiles;
  float* dq = nullptr;
  bool accumulate = false;  // add to dq, else overwrite it
};

// A set of kernels. Contract of forward and backward: the rows of one call are independent; the
// caller guarantees that no two rows write the same memory (o and lse; dq; and the dk, dv of any
// two tiles of the whole call are distinct), and that nothing a row writes is read by another.
// The kernel may run rows and tiles in any order and on any number of threads; results do not
// depend on the thread count beyond fp32 rounding of sums (the cpu kernels are deterministic for a
// given thread count: o, lse, dk and dv are bit-identical across thread counts, dq only for the
// same count). One kernel object runs one call at a time; calls from several threads on the same
// object are safe but run one after another.
class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  virtual std::string_view name() const = 0;

  virtual void forward(const AttentionParams& params, std::span<const ForwardRow> rows) = 0;
  virtual void backward(const AttentionParams& params, std::span<const BackwardRow> rows) = 0;

  // dst = log-sum-exp merge of two partials over disjoint key sets, in place; o [tokens][heads][d],
  // lse [heads][tokens]. -inf on both sides gives o = 0, lse = -inf.
  virtual void merge(float* o_dst, float* lse_dst, const float* o_src, const float* lse_src,
                     std::int32_t tokens, std::int32_t heads, std::int32_t head_dim) = 0;
  // dst[i] += src[i].
  virtual void add(float* dst, const float* src, std::size_t n) = 0;
  // delta[h][t] = sum over d of o[t][h][d] * dout[t][h][d], in fp32 from storage-type inputs:
  // o is the output as the caller holds it (rounded to the storage type), as in FlashAttention.
  virtual void delta(ElementType storage, const void* o, const void* dout, std::int32_t tokens,
                     std::int32_t heads, std::int32_t head_dim, float* delta) = 0;
};

enum class KernelKind : std::uint8_t { kReference, kCpu };
std::string_view to_string(KernelKind kind);
// Accepts "reference" and "cpu"; throws InvalidInput naming the text otherwise.
KernelKind parse_kernel_kind(std::string_view name);

// `threads` worker threads for the cpu kernels (at least 1); the reference kernels use one.
std::unique_ptr<AttentionKernels> make_kernels(KernelKind kind, int threads);

}  // namespace dcp::kernels
