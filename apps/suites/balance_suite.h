// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite balance`: what dcp's placement trades between bytes and time as its compute
// balance loosens, batch by batch: dcp-pure planned at each balance, its bytes between nodes, its
// compute imbalance and its simulated time.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"

#include "dcp/data/length_distribution.h"

namespace dcp::suites {

struct BalanceOptions {
  std::vector<LengthDistributionKind> datasets;
  std::vector<double> scales;
  std::vector<MaskSpec> masks;
  // Compute balances (PlacementOptions::eps_compute) to plan every batch at; the first is the one
  // the others are compared with.
  std::vector<double> balances;
  std::int32_t batches = 3;  // per (dataset, scale, mask)
  TokenCount tokens = 131072;
  ClusterSpec cluster;
  AttentionShape shape;
  std::uint64_t seed = 0;
  int threads = 1;
};

// dcp-pure's plan of one batch at one balance.
struct BalanceSample {
  std::string dataset;
  double scale = 1;
  std::string mask;
  std::int32_t batch = 0;
  std::int32_t sequences = 0;
  double eps_compute = 0;
  double bytes_inter_node = 0;   // forward plus backward, what the Programs move
  double imbalance_compute = 1;  // busiest device's work over the mean
  double forward_ms = 0;         // simulated
  double backward_ms = 0;
};

// Every batch at every balance, in (dataset, scale, mask, batch, balance) order.
std::vector<BalanceSample> run_balance_suite(const BalanceOptions& options, std::ostream& progress);

std::string balance_samples_json(const std::vector<BalanceSample>& samples);
// Per batch, each balance's bytes, imbalance and time; then per balance, the medians of its bytes
// and time over the first balance's, and on how many batches each balance was the fastest.
std::string balance_markdown(const BalanceOptions& options,
                             const std::vector<BalanceSample>& samples, const std::string& command);

}  // namespace dcp::suites
