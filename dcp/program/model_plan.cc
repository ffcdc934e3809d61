// SPDX-License-Identifier: Apache-2.0
#include "dcp/program/model_plan.h"

#include <algorithm>
#include <set>

#include "dcp/core/error.h"

#include "dcp/program/plan_file/plan_checks.h"

namespace dcp {
namespace {

const BlockInfo* find_block(const Program& program, BlockId id) {
  const auto it = std::lower_bound(program.blocks.begin(), program.blocks.end(), id,
                                   [](const BlockInfo& b, BlockId value) { return b.id < value; });
  return it != program.blocks.end() && it->id == id ? &*it : nullptr;
}

}  // namespace

const KindPlan& ModelPlan::kind(std::string_view name) const {
  return kinds[kind_index(names(), name)];
}

std::vector<std::string> ModelPlan::names() const {
  std::vector<std::string> result;
  for (const KindPlan& kind : kinds) result.push_back(kind.name);
  return result;
}

bool ModelPlan::is_single_plan() const {
  return kinds.size() == 1 && kinds.front().name == kDefaultKindName && kinds.front().layers == 1;
}

ModelPlan single_kind(Plan plan) {
  ModelPlan result;
  result.kinds.push_back({std::string(kDefaultKindName), 1, std::move(plan)});
  return result;
}

void check_model_plan(const ModelPlan& plan, std::string_view origin) {
  const std::string at = origin_prefix(origin);
  if (plan.kinds.empty() || plan.kinds.size() > kMaxKinds) {
    throw InvalidInput(at + std::to_string(plan.kinds.size()) +
                       " attention kinds; a plan has 1 to " + std::to_string(kMaxKinds));
  }
  std::set<std::string, std::less<>> seen;
  for (const KindPlan& kind : plan.kinds) {
    try {
      validate_kind_name(kind.name);
    } catch (const InvalidInput& e) {
      throw InvalidInput(at + e.what());
    }
    const std::string name = at + "kind '" + kind.name + "': ";
    if (!seen.insert(kind.name).second) throw InvalidInput(name + "given twice");
    if (kind.layers < 1 || kind.layers > kMaxKindLayers) {
      throw InvalidInput(name + std::to_string(kind.layers) + " layers; a kind has 1 to " +
                         std::to_string(kMaxKindLayers));
    }
    check_plan(kind.plan, std::string(origin.empty() ? "" : std::string(origin) + ": ") + "kind '" +
                              kind.name + "'");
  }
  if (const auto fault = kinds_disagreement(plan)) throw InvalidInput(at + *fault);
}

std::optional<std::string> kinds_disagreement(const ModelPlan& plan) {
  const KindPlan& first = plan.kinds.front();
  const PlanHeader& a = first.plan.header;
  for (const KindPlan& kind : plan.kinds) {
    const PlanHeader& b = kind.plan.header;
    const auto differ = [&](const std::string& field) {
      return "kinds '" + first.name + "' and '" + kind.name + "' differ in " + field +
             "; every kind plans the same batch on the same devices";
    };
    if (a.cluster.nodes != b.cluster.nodes ||
        a.cluster.devices_per_node != b.cluster.devices_per_node) {
      return differ("cluster shape");
    }
    if (a.q_heads != b.q_heads || a.kv_heads != b.kv_heads || a.head_dim != b.head_dim ||
        a.head_block_size != b.head_block_size || a.kv_heads_per_block != b.kv_heads_per_block) {
      return differ("attention shape");
    }
    if (a.dtype != b.dtype) return differ("dtype");
    if (a.softmax_scale != b.softmax_scale) return differ("softmax scale");
    if (a.total_tokens != b.total_tokens || a.sequences != b.sequences ||
        a.token_blocks != b.token_blocks) {
      return differ("batch (tokens, sequences or token blocks)");
    }
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      for (std::size_t d = 0; d < kind.plan.programs(pass).size(); ++d) {
        const Program& mine = kind.plan.programs(pass)[d];
        const Program& theirs = first.plan.forward[d];
        bool same = mine.owned == theirs.owned;
        for (std::size_t i = 0; same && i < mine.owned.size(); ++i) {
          const BlockInfo* x = find_block(mine, mine.owned[i]);
          const BlockInfo* y = find_block(theirs, theirs.owned[i]);
          same = x != nullptr && y != nullptr && *x == *y;
        }
        if (!same) {
          return "kind '" + kind.name + "': " + program_name(pass, static_cast<std::int32_t>(d)) +
                 " owns other token blocks than kind '" + first.name + "' gives device " +
                 std::to_string(d) + "; kinds share one token placement";
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace dcp
