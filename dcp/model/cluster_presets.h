// SPDX-License-Identifier: Apache-2.0
// The cluster presets (a100-p4de, h100-dgx, cpu-local) and the default cluster.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/cluster.h"

namespace dcp {

// The cluster a plan is priced on when none is named (the command line's and Python's default):
// the DCP paper's testbed.
inline constexpr std::string_view kDefaultCluster = "a100-p4de";

// Preset names, in the order `dcp plan --help` lists them, and the same joined by ", ".
std::vector<std::string> cluster_presets();
std::string cluster_preset_list();
bool is_cluster_preset(std::string_view name);
// The preset of that name with its own shape (nodes, devices per node). Throws InvalidInput
// naming the name and listing the presets if there is none.
ClusterSpec cluster_preset(std::string_view name);

}  // namespace dcp
