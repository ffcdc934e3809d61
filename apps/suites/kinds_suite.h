// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite kinds`: hybrid-attention models (sliding-window and full layers) under the
// simulator: dcp's plan of every kind on one token placement against the ways others run such
// models, on the micro-benchmark's batches.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/cluster.h"
#include "dcp/model/mask_spec.h"
#include "dcp/model/tensor.h"

#include "dcp/data/length_distribution.h"

#include "dcp/program/program.h"

namespace dcp::suites {

// A model's attention: its kinds (name and mask) and the kind of each layer, in order.
struct KindModel {
  std::string name;
  std::vector<std::string> kind_names;
  std::vector<MaskSpec> kind_masks;
  std::vector<std::int32_t> layer_kinds;     // index into the kinds, one per layer
  std::vector<std::int32_t> layers() const;  // per kind, how many layers use it
  // Consecutive layers of different kinds (a placement per kind re-dispatches tokens there).
  std::int32_t kind_changes() const;
};

// The models the suite runs by default: 48 layers each. "gemma3-w1024" and "gemma3-w4096": five
// sliding-window layers (window 1024 or 4096) per full causal layer, as Gemma 3 interleaves them;
// "alternating-w128": sliding (window 128) and full layers one after the other.
std::vector<KindModel> default_kind_models();

struct KindsOptions {
  std::vector<LengthDistributionKind> datasets;
  std::vector<double> scales;
  std::vector<KindModel> models;
  std::int32_t batches = 3;
  TokenCount tokens = 131072;
  ClusterSpec cluster;
  AttentionShape shape;
  std::uint64_t seed = 0;
  int threads = 1;
};

// One model on one batch: simulated attention per training step (the sum over layers of forward
// and backward), in milliseconds, of dcp and of each baseline:
//   redispatch   a placement per kind (dcp's plan of each kind's mask alone), the tokens'
//                hidden states moved between placements by all-to-all wherever consecutive
//                layers change kind, forward and backward (as re-dispatching per mask does)
//   one_mask     dcp planned for the first kind's mask (the full layers') alone, its token
//                placement and, where a tile is also the other kind's, its work placement run for
//                every layer (as balancing on one representative mask does)
//   static       the fastest static strategy run for every layer (TransformerEngine runs sliding
//                windows with all-to-all only, which is ulysses here)
struct KindsRecord {
  std::string model;
  std::string dataset;
  double scale = 1;
  std::int32_t batch = 0;
  std::int32_t sequences = 0;
  double dcp_ms = 0;
  std::string dcp_kept;  // the candidate dcp kept
  double redispatch_ms = 0;
  double redispatch_moves_ms = 0;  // of which moving tokens between placements
  double one_mask_ms = 0;
  double static_ms = 0;
  std::string static_strategy;
  double plan_ms = 0;           // dcp's plan of every kind (one thread)
  double one_mask_plan_ms = 0;  // dcp's plan of the same batch under the first kind's mask alone
  double best_baseline_ms() const;
  std::string best_baseline() const;
};

// Every model on every batch, in (model, dataset, scale, batch) order; progress to `progress`.
std::vector<KindsRecord> run_kinds_suite(const KindsOptions& options, std::ostream& progress);

std::string kinds_records_json(const std::vector<KindsRecord>& records);
// Per model and (dataset, scale): dcp's step and each baseline's, dcp's speedup over the best
// baseline (median and minimum over batches) and planning time over the one-mask plan's; then the
// targets, each met or missed with its figure.
std::string kinds_markdown(const KindsOptions& options, const std::vector<KindsRecord>& records,
                           const std::string& command);

// --- The baselines' pieces, for tests ---------------------------------------------------------

// The device of every token of the batch (packed order) under a plan's token placement.
std::vector<DeviceId> token_devices(const Plan& plan);
// Seconds to move `bytes_per_token` of every token whose device differs between `from` and `to`,
// all at once: an all-to-all, one launch on every device, priced by the simulator's network as
// dcp's own transfers are (sim::exchange_seconds: set-up, latency, links shared, each message at
// most its stream bandwidth and at the efficiency of its size). Throws InvalidInput if the two
// placements differ in length or name a device outside the cluster.
double redistribution_seconds(const std::vector<DeviceId>& from, const std::vector<DeviceId>& to,
                              std::int64_t bytes_per_token, const ClusterSpec& cluster);

}  // namespace dcp::suites
