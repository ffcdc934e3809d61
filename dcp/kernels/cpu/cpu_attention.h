// SPDX-License-Identifier: Apache-2.0
// CpuKernels: blockwise flash-style attention on the CPU (sgemm sub-tiles, online softmax with a
// vectorised exp, interval masks applied only where a sub-tile is cut), multithreaded.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "dcp/core/thread_pool.h"

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {

// The cpu kernels' sub-tile (q rows x keys) of one pass: tiles are computed in these units, and
// element-wise masking runs only in sub-tiles the mask cuts (the simulator's cost model and the
// cpu-local calibration read it).
struct SubtileShape {
  std::int32_t q = 0;
  std::int32_t kv = 0;
};
SubtileShape cpu_subtile_shape(bool forward);

// Forward: tasks over (row, q chunk, q head), each owning its o and lse rows, scheduled
// dynamically. Backward: tasks over (row, tile, kv chunk, kv head), each owning its dk, dv chunk;
// dq contributions go to one fp32 buffer per bucket of a fixed cost-balanced task assignment and
// are summed in bucket order, so results are deterministic for a given thread count.
// One object runs one call at a time (calls from several threads are serialised by the pool).
class CpuKernels final : public AttentionKernels {
 public:
  explicit CpuKernels(int threads);  // threads >= 1, else InvalidInput
  std::string_view name() const override { return "cpu"; }
  int threads() const { return pool_.threads(); }

  void forward(const AttentionParams& params, std::span<const ForwardRow> rows) override;
  void backward(const AttentionParams& params, std::span<const BackwardRow> rows) override;
  void merge(float* o_dst, float* lse_dst, const float* o_src, const float* lse_src,
             std::int32_t tokens, std::int32_t heads, std::int32_t head_dim) override;
  void add(float* dst, const float* src, std::size_t n) override;
  void delta(ElementType storage, const void* o, const void* dout, std::int32_t tokens,
             std::int32_t heads, std::int32_t head_dim, float* delta) override;

 private:
  ThreadPool pool_;
};

}  // namespace dcp::kernels
