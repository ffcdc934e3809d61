// SPDX-License-Identifier: Apache-2.0
// Megatron-Core's two schedulers of its dynamic context parallelism example
// (examples/dynamic_context_parallel; megatron/core/datasets/data_schedule.py), as its measured
// iteration runs them: the DP-balanced baseline with a fixed CP group, and dynamic CP's
// packing-aware groups. The pool suite simulates that iteration to compare with Megatron's
// measurement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dcp/core/ids.h"

namespace dcp::suites {

// One CP group of a micro-batch: its devices and its samples (indices into the lengths).
struct DynamicGroup {
  std::int32_t devices = 1;
  std::vector<std::size_t> samples;
};

// `length` rounded up to a multiple of `multiple` (Megatron pads every sequence to 2 x CP).
TokenCount padded(TokenCount length, TokenCount multiple);

// DpBalancedScheduler: the samples in their order packed next-fit into bins of cp x
// device_tokens tokens; while the bin count is not a multiple of `dp`, the last sample of the
// last bin that holds more than one becomes a bin of its own; micro-batch m gives DP rank j bin
// m x dp + j. Per micro-batch, per DP rank, its samples (indices into lengths). It balances
// nothing: the bins' tokens and work follow the arrival order. Throws InvalidInput for cp or dp
// below 1, or too few samples to make a multiple of dp bins.
std::vector<std::vector<std::vector<std::size_t>>> dp_balanced_micro_batches(
    const std::vector<TokenCount>& lengths, std::int32_t cp, std::int32_t dp,
    TokenCount device_tokens);

// DefaultDynamicCPScheduler (next_hdp_group_packing_aware, repeated until every sample is
// placed): samples longest first, each rank's work estimated as length^2 / group size; the
// round's longest sample opens a group of the smallest size that holds it, and every other
// sample tries each power-of-two group size dividing `devices` from the smallest that holds it
// at device_tokens per device, joining a group of that size with room (its tokens / size at
// most device_tokens) or opening one while devices are free, whichever gives the lowest busiest
// rank, within 1.05 x the round's longest sample times device_tokens; what fits nowhere starts
// the next round (micro-batch). Free devices then double the first group of the smallest size
// while they last. Per round, its groups. Throws InvalidInput for a sample longer than the pool
// holds or no devices.
std::vector<std::vector<DynamicGroup>> packing_aware_rounds(const std::vector<TokenCount>& lengths,
                                                            std::int32_t devices,
                                                            TokenCount device_tokens);

}  // namespace dcp::suites
