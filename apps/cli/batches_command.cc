// SPDX-License-Identifier: Apache-2.0
// `dcp batches`: sample realistic batches, or pack a dataset's lengths, one batch per line.
#include <string>
#include <vector>

#include "dcp/core/ids.h"
#include "dcp/core/parse.h"

#include "dcp/model/sequence_batch.h"

#include "dcp/data/batch_packing.h"
#include "dcp/data/length_distribution.h"

#include "apps/cli/command_table.h"
#include "apps/cli/workload_flags.h"

namespace dcp::cli {

int run_batches(std::span<const std::string> argv, std::ostream& out) {
  static const std::vector<FlagSpec> specs = {
      {"--dist", "NAME", "length distribution: ldc, longalign, prolong, magi, wlb"},
      {"--lengths-file", "FILE", "pack these lengths (a dataset's) instead of sampling"},
      {"--tokens", "N", "token budget per batch [131072]"},
      {"--count", "N", "batches to print (--dist) or at most (--lengths-file) [10]"},
      {"--seed", "S", "seed of sampling and shuffling [0]"},
      {"--length-scale", "X", "multiply every length by X, as the paper's x0.5..x4 [1]"},
      {"--min-fill", "F", "keep batches at least this full [0.75]"},
      {"--max-length", "N", "drop longer sequences [--tokens]"},
      {"--list", "", "list the distributions and exit"},
      {"--help", "", "show this help"},
  };
  const Args args(specs, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp batches (--dist NAME | --lengths-file F) [flags]",
        "Prints batches of sequence lengths, one batch per line, comma-separated: "
        "lengths shuffled with the seed, packed greedily up to the token budget, and "
        "kept only if at least --min-fill full (the DCP paper's protocol).",
        specs);
    return 0;
  }
  if (args.flag("--list")) {
    for (const LengthDistributionKind kind : all_length_distributions()) {
      out << to_string(kind) << ": " << describe(kind) << "\n";
    }
    return 0;
  }
  if (args.has("--dist") == args.has("--lengths-file")) {
    throw UsageError("give exactly one of --dist and --lengths-file");
  }
  PackingOptions packing;
  packing.tokens_per_batch = args.get_int("--tokens", packing.tokens_per_batch, 1, kMaxBatchTokens);
  packing.scale = args.get_double("--length-scale", 1.0);
  packing.min_fill = args.get_double("--min-fill", packing.min_fill);
  packing.max_length = args.get_int("--max-length", 0, 1);
  with_flag("--tokens/--length-scale/--min-fill/--max-length", [&] { validate(packing); });
  const auto count = static_cast<std::size_t>(args.get_int("--count", 10, 1, 1 << 20));
  const auto seed = static_cast<std::uint64_t>(args.get_int("--seed", 0, 0));

  std::vector<std::vector<TokenCount>> batches;
  if (const auto name = args.get("--dist")) {
    const auto kind = with_flag("--dist", [&] { return parse_length_distribution(*name); });
    batches =
        with_flag("--dist " + *name, [&] { return sample_batches(kind, count, packing, seed); });
  } else {
    const std::string path = *args.get("--lengths-file");
    const auto lengths = with_flag("--lengths-file", [&] { return read_lengths_file(path); });
    batches = with_flag("--lengths-file", [&] { return pack_batches(lengths, packing, seed); });
    if (batches.size() > count) batches.resize(count);
  }
  for (const auto& batch : batches) {
    for (std::size_t i = 0; i < batch.size(); ++i) out << (i ? "," : "") << batch[i];
    out << "\n";
  }
  return 0;
}

}  // namespace dcp::cli
