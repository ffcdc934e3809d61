// SPDX-License-Identifier: Apache-2.0
// The pieces of the dcp._core module, each bound in its own file.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "dcp/planner/model_plan_builder.h"
#include "dcp/program/model_plan.h"
#include "dcp/program/program.h"

#include <nanobind/nanobind.h>

namespace dcp::python {

// A plan as Python holds it: shared by the loader, executors and user code, never copied. A
// handle holds a whole model plan (every attention kind), or one kind of it (Plan.kind(name)),
// sharing the model plan's memory.
struct PlanHandle {
  std::shared_ptr<const BuiltModelPlan> built;  // set when planned here
  std::shared_ptr<const ModelPlan> loaded;      // set when read from a file or bytes
  std::optional<std::size_t> kind;              // set for a handle of one kind

  const ModelPlan& model() const { return built ? built->plan : *loaded; }
  // The Plan the shared attributes are read from: its kind's, or the first kind's (every kind of
  // a model plan has the same header but for strategy, seed, partial dtype and work units).
  const Plan& plan() const { return model().kinds[kind.value_or(0)].plan; }
  // The model plan this handle stands for: the whole one, or a ModelPlan of its one kind alone,
  // copied into `storage`.
  const ModelPlan& held(ModelPlan& storage) const {
    if (!kind) return model();
    storage.kinds = {model().kinds[*kind]};
    return storage;
  }
};

void bind_planning(nanobind::module_& m);
void bind_executor(nanobind::module_& m);
void bind_calibration(nanobind::module_& m);

}  // namespace dcp::python
