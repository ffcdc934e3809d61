// SPDX-License-Identifier: Apache-2.0
// The pieces of the dcp._core module, each bound in its own file.
#pragma once

#include <memory>

#include "dcp/dcp.h"

#include <nanobind/nanobind.h>

namespace dcp::python {

// A plan as Python holds it: shared by the loader, executors and user code, never copied.
struct PlanHandle {
  std::shared_ptr<const BuiltPlan> built;  // set when planned here
  std::shared_ptr<const Plan> loaded;      // set when read from a file or bytes

  const Plan& plan() const { return built ? built->plan : *loaded; }
};

void bind_planning(nanobind::module_& m);
void bind_executor(nanobind::module_& m);
void bind_calibration(nanobind::module_& m);

}  // namespace dcp::python
