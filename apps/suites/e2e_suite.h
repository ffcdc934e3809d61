// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite e2e`: an estimate of the DCP paper's end-to-end training steps (GPT "8B" on
// 8 x 8 A100, TP 4, the context-parallel group = the 16 tensor-parallel groups), attention from
// the simulator and the rest from the step model, next to the paper's measured iteration times.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/cluster.h"

#include "dcp/sim/step_model.h"

namespace dcp::suites {

// One measured cell of the paper's end-to-end table: mean seconds per iteration.
struct E2eCell {
  std::string dataset;  // "ldc" or "longalign"
  TokenCount max_seq_len = 0;
  std::string mask;
  double mlm_seconds = 0;  // Megatron-LM with TransformerEngine's a2a+p2p context parallelism
  double dcp_seconds = 0;  // the reference DCP
  // The reference DCP's block size in its best configuration at this length.
  TokenCount dcp_block_size = 0;
};
std::vector<E2eCell> e2e_cells();

struct E2eOptions {
  std::int32_t batches = 2;  // per (dataset, max_seq_len)
  // The longest max_seq_len. Below 131072 every length, max_seq_len and block size shrinks by
  // tokens / 131072 (block sizes to at least 64): a miniature for quick runs and tests.
  TokenCount tokens = 131072;
  ClusterSpec gpus;  // the GPUs: a100-p4de at 8 x 8 unless given
  sim::TransformerConfig model = sim::paper_gpt_8b();
  double peak_flops = 312e12;  // the GPUs' dense bf16 peak: the fitted rate's upper bound (A100)
  std::uint64_t seed = 0;
  int threads = 1;
};

// The estimate of one cell for one system: "mlm" (the te strategy computing every tile of a
// sparse mask), "dcp-reference" (dcp's planner at the reference's block size, run by the model of
// the reference's executor) and "dcp" (dcp's own plan and executor).
struct E2eRecord {
  E2eCell cell;
  std::string system;
  double paper_seconds = 0;         // the measured figure it stands next to (dcp: the reference's)
  double attention_forward_ms = 0;  // one layer, mean over batches
  double attention_backward_ms = 0;
  sim::StepTime step;   // mean over batches
  bool fitted = false;  // the step rates were fitted to this cell
  double error() const { return (step.total() - paper_seconds) / paper_seconds; }
};

struct E2eResult {
  sim::StepRates rates;  // fitted to the Megatron causal cells
  std::vector<E2eRecord> records;
};

E2eResult run_e2e_suite(const E2eOptions& options, std::ostream& progress);
std::string e2e_records_json(const E2eResult& result);
std::string e2e_markdown(const E2eOptions& options, const E2eResult& result,
                         const std::string& command);

}  // namespace dcp::suites
