// SPDX-License-Identifier: Apache-2.0
// A model's plan: one Plan per attention kind, all over one placement of the token blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/attention_kind.h"

#include "dcp/program/program.h"

namespace dcp {

struct KindPlan {
  std::string name = std::string(kDefaultKindName);
  std::int32_t layers = 1;  // layers of the model that run this kind's Programs
  Plan plan;
  friend bool operator==(const KindPlan&, const KindPlan&) = default;
};

// Every kind's Plan has the same cluster, attention shape, dtypes, batch and token blocks, and
// every device owns the same blocks, in the same order, in every kind's Programs: a device's
// local q, k, v and o tensors serve every layer, and no token moves between layers. The kinds
// differ in their masks, so in their work, its placement, schedules and Programs.
struct ModelPlan {
  std::vector<KindPlan> kinds;

  // The kind called `name`; throws InvalidInput naming it and the kinds there are.
  const KindPlan& kind(std::string_view name) const;
  std::vector<std::string> names() const;
  // A plan of one mask: a single kind with the default name and one layer (its file is a plain
  // plan file, byte for byte).
  bool is_single_plan() const;
  friend bool operator==(const ModelPlan&, const ModelPlan&) = default;
};

// A ModelPlan of one kind (the default name, one layer) holding `plan`.
ModelPlan single_kind(Plan plan);

// The checks a reader applies (check_plan per kind, then the kinds together), for ModelPlans built
// in memory too. Throws InvalidInput naming `origin` (omitted when empty), the kind and the field:
// no kinds or more than kMaxKinds, a name invalid or given twice, layers outside
// [1, kMaxKindLayers], kinds whose headers differ in anything but strategy, seed, partial dtype
// and work units, or whose Programs give a device other blocks (owned, or their BlockInfo).
void check_model_plan(const ModelPlan& plan, std::string_view origin);

// Where the kinds of a plan disagree (their headers, or the blocks a device owns), as one line;
// nothing where they agree. Requires every kind's plan to pass check_plan.
std::optional<std::string> kinds_disagreement(const ModelPlan& plan);

}  // namespace dcp
