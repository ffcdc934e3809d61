// SPDX-License-Identifier: Apache-2.0
// `dcp workload`: build the block model of one batch and summarise it (text or JSON).
#include <cstdio>
#include <string>
#include <vector>

#include "dcp/core/ids.h"
#include "dcp/core/json_writer.h"
#include "dcp/core/timing.h"

#include "dcp/model/block_size_heuristic.h"
#include "dcp/model/tensor.h"
#include "dcp/model/workload.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/workload_builder.h"

#include "apps/cli/command_table.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {
namespace {

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

// 1234567 -> "1.23 M"; keeps the text summary readable across 10 orders of magnitude.
std::string human(double value) {
  const char* units[] = {"", " K", " M", " G", " T", " P", " E"};
  int unit = 0;
  while (value >= 1000.0 && unit < 6) {
    value /= 1000.0;
    ++unit;
  }
  return (unit == 0 ? fixed(value, 0) : fixed(value, 2)) + units[unit];
}

struct SequenceStats {
  TileId tiles = 0;
  TileId full_tiles = 0;
};

std::vector<SequenceStats> sequence_stats(const Workload& workload) {
  std::vector<SequenceStats> stats(static_cast<std::size_t>(workload.batch().size()));
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) {
    for (const Tile& tile : workload.tiles_of(seq)) {
      ++stats[static_cast<std::size_t>(seq)].tiles;
      stats[static_cast<std::size_t>(seq)].full_tiles += tile.kind == TileKind::kFull ? 1 : 0;
    }
  }
  return stats;
}

std::string workload_json(const BuiltWorkload& built, const MaskSource& mask, double build_ms) {
  const Workload& w = built.workload;
  const HeadBlockIndex head_blocks = w.heads().count();
  JsonWriter json;
  json.begin_object();
  json.field("sequences", std::int64_t{w.batch().size()});
  json.field("tokens", w.batch().total_tokens());
  json.key("shape").begin_object();
  json.field("q_heads", w.shape().q_heads);
  json.field("kv_heads", w.shape().kv_heads);
  json.field("head_dim", w.shape().head_dim);
  json.field("dtype", to_string(w.shape().dtype));
  json.field("softmax_scale", w.shape().effective_scale());
  json.end_object();
  json.field("mask", mask.describe());
  json.field("block_size", w.blocks().block_size());
  json.field("block_size_source", built.block_size_choice ? "heuristic" : "user");
  if (built.block_size_choice) {
    const BlockSizeChoice& c = *built.block_size_choice;
    json.key("block_size_heuristic").begin_object();
    json.field("memory_imbalance", c.memory_imbalance);
    json.field("compute_imbalance", c.compute_imbalance);
    json.field("meets_targets", c.meets_targets);
    json.end_object();
  }
  json.field("head_block_size", w.heads().head_block_size());
  json.field("head_blocks", std::int64_t{head_blocks});
  json.field("token_blocks", std::int64_t{w.blocks().block_count()});
  json.field("tiles", std::int64_t{w.tile_count()});
  json.field("work_units", w.work_unit_count());
  json.field("full_work_units", std::int64_t{w.full_tile_count()} * head_blocks);
  json.field("partial_work_units",
             std::int64_t{w.tile_count() - w.full_tile_count()} * head_blocks);
  json.field("unmasked_pairs", w.unmasked_pairs());
  json.field("flops_forward", w.forward_flops());
  json.field("flops_backward", w.backward_flops());
  json.key("bytes_per_token").begin_object();
  for (const TensorKind kind : all_tensor_kinds()) {
    json.field(to_string(kind), bytes_per_token_all_heads(kind, w.shape(), w.heads()));
  }
  json.end_object();
  json.key("per_sequence").begin_array();
  const auto stats = sequence_stats(w);
  for (SeqIndex seq = 0; seq < w.batch().size(); ++seq) {
    json.begin_object();
    json.field("length", w.batch().length(seq));
    json.field("unmasked_pairs", w.sequence_pairs(seq));
    json.field("density", w.density(seq));
    json.field("token_blocks", std::int64_t{w.blocks().blocks_in(seq)});
    json.field("work_units",
               std::int64_t{stats[static_cast<std::size_t>(seq)].tiles} * head_blocks);
    json.end_object();
  }
  json.end_array();
  json.key("timing_ms").begin_object();
  json.field("workload", build_ms);
  json.end_object();
  json.end_object();
  return json.str();
}

void write_text(const BuiltWorkload& built, const MaskSource& mask, double build_ms,
                std::ostream& out) {
  const Workload& w = built.workload;
  const HeadBlockIndex head_blocks = w.heads().count();
  const double pairs = static_cast<double>(w.unmasked_pairs());
  double dense = 0;
  for (const TokenCount length : w.batch().lengths())
    dense += static_cast<double>(length) * static_cast<double>(length);
  out << "batch        " << w.batch().size() << " sequences, " << w.batch().total_tokens()
      << " tokens (longest " << w.batch().max_length() << ")\n";
  out << "shape        " << to_string(w.shape()) << ", softmax scale "
      << fixed(w.shape().effective_scale(), 6) << "\n";
  out << "mask         " << mask.describe() << "\n";
  out << "token blocks " << w.blocks().block_count() << " of B = " << w.blocks().block_size();
  if (built.block_size_choice) {
    const BlockSizeChoice& c = *built.block_size_choice;
    out << " (chosen: LPT imbalance memory " << fixed(c.memory_imbalance, 3) << ", compute "
        << fixed(c.compute_imbalance, 3)
        << (c.meets_targets ? ", within targets" : ", best reachable") << ")";
  } else {
    out << " (given)";
  }
  out << "\n";
  out << "head blocks  " << head_blocks << " of " << w.heads().head_block_size() << " q heads\n";
  out << "work units   " << w.work_unit_count() << " ("
      << std::int64_t{w.full_tile_count()} * head_blocks << " full, "
      << std::int64_t{w.tile_count() - w.full_tile_count()} * head_blocks << " partial) from "
      << w.tile_count() << " tiles\n";
  out << "pairs        " << w.unmasked_pairs() << " per head, density " << fixed(pairs / dense, 4)
      << "\n";
  out << "flops        forward " << human(w.forward_flops()) << ", backward "
      << human(w.backward_flops()) << "\n";
  out << "bytes/token ";
  for (const TensorKind kind : all_tensor_kinds()) {
    out << " " << to_string(kind) << " " << bytes_per_token_all_heads(kind, w.shape(), w.heads());
  }
  out << "\nbuilt in     " << fixed(build_ms, 2) << " ms\n\n";

  const auto stats = sequence_stats(w);
  char line[160];
  std::snprintf(line, sizeof(line), "%6s %10s %8s %12s %16s %9s\n", "seq", "length", "blocks",
                "work units", "pairs", "density");
  out << line;
  for (SeqIndex seq = 0; seq < w.batch().size(); ++seq) {
    std::snprintf(line, sizeof(line), "%6d %10lld %8d %12lld %16lld %9.4f\n", seq,
                  static_cast<long long>(w.batch().length(seq)), w.blocks().blocks_in(seq),
                  static_cast<long long>(stats[static_cast<std::size_t>(seq)].tiles) * head_blocks,
                  static_cast<long long>(w.sequence_pairs(seq)), w.density(seq));
    out << line;
  }
}

}  // namespace

int run_workload(std::span<const std::string> argv, std::ostream& out) {
  std::vector<FlagSpec> specs = workload_flags();
  specs.push_back({"--json", "", "print one JSON object instead of the summary"});
  specs.push_back({"--help", "", "show this help"});
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help("dcp workload (--seqlens L,... | --seqlens-file F | --dist NAME) [flags]",
                       "Builds the block model of one batch (token blocks, head blocks, work units "
                       "with exact unmasked pair counts) and prints its size and costs; with "
                       "attention kinds (--mask KIND=SPEC), one per kind, on the same blocks.",
                       specs);
    return 0;
  }
  const auto masks = kind_masks_from_flags(args);
  const auto start = Clock::now();
  const BuiltKinds built = kinds_from_flags(args);
  const double build_ms = ms_since(start);
  if (built.single()) {
    const BuiltWorkload one{built.kinds.front().workload, built.block_size_choice};
    if (args.flag("--json")) {
      out << workload_json(one, masks.front().second, build_ms) << "\n";
    } else {
      write_text(one, masks.front().second, build_ms, out);
    }
    return 0;
  }
  // Attention kinds: one block model per kind, all cut into the same blocks.
  JsonWriter json;
  json.begin_object();
  json.key("kinds").begin_array();
  for (std::size_t k = 0; k < built.kinds.size(); ++k) {
    const KindWorkload& kind = built.kinds[k];
    const BuiltWorkload one{kind.workload, k == 0 ? built.block_size_choice : std::nullopt};
    if (args.flag("--json")) {
      json.begin_object();
      json.field("name", std::string_view(kind.name));
      json.field("layers", std::int64_t{kind.layers});
      json.key("workload").raw(workload_json(one, masks[k].second, build_ms));
      json.end_object();
      continue;
    }
    out << (k == 0 ? "" : "\n") << "== kind '" << kind.name << "' (" << kind.layers
        << (kind.layers == 1 ? " layer)\n" : " layers)\n");
    write_text(one, masks[k].second, build_ms, out);
  }
  json.end_array();
  json.end_object();
  if (args.flag("--json")) out << json.str() << "\n";
  return 0;
}

}  // namespace dcp::cli
