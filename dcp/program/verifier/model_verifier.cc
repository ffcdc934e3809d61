// SPDX-License-Identifier: Apache-2.0
// The verifier over a model plan's kinds.
#include "dcp/program/plan_file/plan_checks.h"
#include "dcp/program/verifier/verifier.h"

namespace dcp {

ModelVerifyReport verify(const ModelPlan& plan) {
  ModelVerifyReport result;
  for (const KindPlan& kind : plan.kinds) {
    KindVerifyReport entry{kind.name, kind.layers, verify(kind.plan)};
    if (!entry.report.ok && result.ok) {
      result.ok = false;
      result.first = entry.report.first;
      result.first_kind = kind.name;
    }
    result.kinds.push_back(std::move(entry));
  }
  if (result.ok && !plan.kinds.empty()) {
    if (const auto fault = kinds_disagreement(plan)) {
      result.ok = false;
      result.first = Violation{-1, Pass::kForward, -1, "kind-placement", *fault};
    }
  }
  return result;
}

std::string describe(const ModelVerifyReport& report) {
  std::string text;
  for (const KindVerifyReport& kind : report.kinds) {
    if (!text.empty()) text += "\n";
    text += "kind '" + kind.name + "' (" + std::to_string(kind.layers) +
            (kind.layers == 1 ? " layer): " : " layers): ") + describe(kind.report);
  }
  if (report.first && report.first_kind.empty()) text += "\n" + describe(*report.first);
  return text;
}

}  // namespace dcp
