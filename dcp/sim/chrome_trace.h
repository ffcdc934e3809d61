// SPDX-License-Identifier: Apache-2.0
// The simulated timelines as a Chrome trace (JSON Trace Event Format), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open.
#pragma once

#include <string>

#include "dcp/program/program.h"
#include "dcp/sim/simulator.h"

namespace dcp::sim {

// One process per node and two threads per device: its compute stream (one slice per
// instruction that takes time: loads, stores, attention, merges, sums, and Waits that held it)
// and its communication (one async slice per transfer it sends, from posted to done, with its
// bytes). The backward pass follows the forward pass on the same time axis. Times in
// microseconds.
std::string chrome_trace(const Plan& plan, const PlanSimulation& simulation);

}  // namespace dcp::sim
