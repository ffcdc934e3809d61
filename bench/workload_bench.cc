// SPDX-License-Identifier: Apache-2.0
// Time to build the block model (masks, token blocks, work units) of 131072-token batches.
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/block_size_heuristic.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_batch.h"
#include "dcp/model/workload.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

namespace dcp {
namespace {

constexpr TokenCount kTokens = 131072;

// Batches: one long sequence, and LongDataCollections-like / MagiAttention-like packed batches.
std::vector<TokenCount> batch_for(int which) {
  if (which == 0) return {kTokens};
  PackingOptions packing;
  packing.tokens_per_batch = kTokens;
  const auto kind = which == 1 ? LengthDistributionKind::kLongDataCollections
                               : LengthDistributionKind::kMagiHistogram;
  return sample_batches(kind, 1, packing, 0).front();
}

const char* const kBatchNames[] = {"single", "ldc", "magi"};
const char* const kMasks[] = {"causal", "lambda", "shared_question", "causal_blockwise"};

// Args: block size, batch (0 single, 1 ldc, 2 magi), mask index.
void BM_BuildWorkload(benchmark::State& state) {
  const TokenCount block = state.range(0);
  const SequenceBatch batch(batch_for(static_cast<int>(state.range(1))));
  const MaskSpec spec = parse_mask_spec(kMasks[state.range(2)]);
  AttentionShape shape;  // 8 q heads, 2 kv heads, d = 128, bf16: the paper's micro-benchmark
  WorkUnitId units = 0;
  for (auto _ : state) {
    const Workload workload(shape, batch, build_batch_mask(spec, batch), block, 1);
    units = workload.work_unit_count();
    benchmark::DoNotOptimize(units);
  }
  state.counters["work_units"] = static_cast<double>(units);
  state.counters["sequences"] = static_cast<double>(batch.size());
  state.SetLabel(std::string(kBatchNames[state.range(1)]) + "/" + kMasks[state.range(2)]);
}
BENCHMARK(BM_BuildWorkload)
    ->ArgsProduct({{512, 1024, 2048}, {0, 1, 2}, {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond);

// The automatic block size tries candidates from 4096 down; this is its whole cost.
void BM_ChooseBlockSize(benchmark::State& state) {
  const SequenceBatch batch(batch_for(static_cast<int>(state.range(0))));
  const auto masks = build_batch_mask(MaskSpec{}, batch);
  BlockSizeOptions options;
  options.devices = static_cast<std::int32_t>(state.range(1));
  TokenCount chosen = 0;
  for (auto _ : state) {
    chosen = choose_block_size(AttentionShape{}, batch, masks, 1, options).block_size;
    benchmark::DoNotOptimize(chosen);
  }
  state.counters["block_size"] = static_cast<double>(chosen);
  state.SetLabel(kBatchNames[state.range(0)]);
}
BENCHMARK(BM_ChooseBlockSize)->ArgsProduct({{0, 1, 2}, {8, 32}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dcp

BENCHMARK_MAIN();
