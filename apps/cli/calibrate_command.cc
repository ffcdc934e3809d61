// SPDX-License-Identifier: Apache-2.0
// `dcp calibrate`: measures the cost model's constants for the cpu kernels and local ranks on this
// machine and prints (or writes) the `cpu-local` cluster file.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "dcp/core/npy.h"
#include "dcp/core/parse.h"

#include "dcp/model/cluster.h"

#include "dcp/runtime/calibration.h"

#include "apps/cli/args.h"
#include "apps/cli/command_table.h"

namespace dcp::cli {
namespace {

constexpr FlagSpec kFlags[] = {
    {"--devices", "N", "ranks (threads) measured at the same time, one per core [2]"},
    {"--repeats", "R", "repeats of each timing; the median is kept [5]"},
    {"--tile-tokens", "T", "q tokens of the big tiles; full tiles have 2T keys [512]"},
    {"--copy-bytes", "B", "bytes each rank copies for the memory bandwidth [67108864]"},
    {"--message-bytes", "B",
     "bytes each rank sends (and receives) for the link bandwidth "
     "[16777216]"},
    {"--out", "FILE", "also write the cluster file (dcp plan --cluster FILE reads it)", "-o"},
    {"--help", "", "show this help"},
};

void print_table(std::ostream& out, const runtime::CalibrationReport& report) {
  char line[256];
  std::snprintf(line, sizeof line, "%-46s %12s  %-22s %12s\n", "measurement", "seconds", "constant",
                "value");
  out << line;
  for (const runtime::CalibrationMeasurement& m : report.measurements) {
    std::snprintf(line, sizeof line, "%-46s %12.4e  %-22s %12.4g %s\n", m.name.c_str(), m.seconds,
                  m.derives.c_str(), m.value, m.unit.c_str());
    out << line;
  }
}

}  // namespace

int run_calibrate(std::span<const std::string> argv, std::ostream& out) {
  const Args args(kFlags, argv);
  if (args.flag("--help")) {
    out << format_help(
        "dcp calibrate [flags]",
        "Measures the simulator's cost-model constants for the cpu kernels and local ranks on "
        "this machine: kernel launch and sub-tile overheads, forward and backward rates, the "
        "softmax share, the cost of masked sub-tiles, fp32 over bf16, memory bandwidth and the "
        "local communicator's latency and bandwidth. Every timing runs on --devices threads at "
        "once. Prints a table of the measurements and the resulting `cpu-local` cluster file; "
        "progress goes to stderr. Build with the release preset for meaningful numbers.",
        kFlags);
    return 0;
  }
  runtime::CalibrationOptions options;
  options.devices = static_cast<std::int32_t>(args.get_int("--devices", options.devices, 1, 256));
  options.repeats = static_cast<std::int32_t>(args.get_int("--repeats", options.repeats, 1, 1000));
  options.tile_tokens =
      static_cast<std::int32_t>(args.get_int("--tile-tokens", options.tile_tokens, 64, 16384));
  options.copy_bytes = args.get_int("--copy-bytes", options.copy_bytes, std::int64_t{4} << 10,
                                    std::int64_t{4} << 30);
  options.message_bytes = args.get_int("--message-bytes", options.message_bytes,
                                       std::int64_t{4} << 10, std::int64_t{4} << 30);
  const std::optional<std::string> path = args.get("--out");
  if (path) {
    // Fail before minutes of measuring, not after.
    const std::filesystem::path parent = std::filesystem::path(*path).parent_path();
    if (path->empty() || std::filesystem::is_directory(*path) ||
        (!parent.empty() && !std::filesystem::is_directory(parent))) {
      throw UsageError("--out " + dcp::quoted(*path) + ": not a file in an existing directory");
    }
  }
  options.progress = [](std::string_view line) { std::cerr << "dcp calibrate: " << line << "\n"; };

  const runtime::CalibrationReport report = runtime::calibrate_cpu_local(options);
  const std::string text = to_cluster_text(report.spec);
  if (path) {
    with_flag("--out " + dcp::quoted(*path), [&] { write_file_atomically(*path, text); });
  }
  print_table(out, report);
  out << "\n# cluster file";
  if (path) out << " (written to " << *path << ")";
  out << "\n" << text;
  return 0;
}

}  // namespace dcp::cli
