// SPDX-License-Identifier: Apache-2.0
// Calibration of the cost model's constants for the CPU runtime on this machine (`cpu-local`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/cluster.h"

namespace dcp::runtime {

struct CalibrationOptions {
  std::int32_t devices = 2;  // ranks measured at the same time (one per core), [1, 256]
  std::int32_t repeats = 5;  // median over repeats, [1, 1000]
  // The big tiles' q tokens (kv: 2x for full tiles), [64, 16384]. 512: the size of the token
  // blocks runs on a few ranks use; a 1024-token tile runs ~15 % faster per pair than they do, and
  // the simulator then under-predicts real runs by 20 % (docs/benchmarks.md).
  std::int32_t tile_tokens = 512;
  std::int64_t copy_bytes = std::int64_t{64} << 20;     // memcpy per rank, [4 KiB, 4 GiB]
  std::int64_t message_bytes = std::int64_t{16} << 20;  // message each way, [4 KiB, 4 GiB]
  // Called with one line (no newline) before each measurement; may be empty.
  std::function<void(std::string_view)> progress;
};

// One timing and the constant it gives.
struct CalibrationMeasurement {
  std::string name;     // what was timed, e.g. "forward 1024x2048 d128 bf16"
  double seconds = 0;   // one operation: the median over repeats of the mean over ranks
  std::string derives;  // the cluster-file key it sets, e.g. "forward_tflops"
  double value = 0;     // the constant in the cluster file's unit
  std::string unit;     // "us", "TFLOP/s", "GB/s" or "" (a ratio)
};

struct CalibrationReport {
  ClusterSpec spec;  // "cpu-local", 1 node x devices; passes validate()
  std::vector<CalibrationMeasurement> measurements;
};

// Measures the cost model's constants for the cpu kernels and the local communicator: every
// timing runs on `devices` threads at once, each with its own one-thread cpu kernel set and its
// own buffers (docs/calibration_notes.md gives the method of each constant). The constants are
// rounded to 4 significant digits in the cluster file's units, so that to_cluster_text(spec)
// reads back as the same spec. Throws InvalidInput naming the option for an option out of range.
CalibrationReport calibrate_cpu_local(const CalibrationOptions& options);

}  // namespace dcp::runtime
