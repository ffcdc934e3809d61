// SPDX-License-Identifier: Apache-2.0
// Strategy names.
#include "dcp/planner/strategy.h"

#include <string>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp {

std::string_view to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kDcp:
      return "dcp";
    case Strategy::kDcpPure:
      return "dcp-pure";
    case Strategy::kRing:
      return "ring";
    case Strategy::kZigzag:
      return "zigzag";
    case Strategy::kUlysses:
      return "ulysses";
    case Strategy::kHybrid:
      return "hybrid";
    case Strategy::kTe:
      return "te";
    case Strategy::kLoongTrain:
      return "loongtrain";
  }
  return "?";
}

Strategy parse_strategy(std::string_view name) {
  for (const Strategy s :
       {Strategy::kDcp, Strategy::kDcpPure, Strategy::kRing, Strategy::kZigzag, Strategy::kUlysses,
        Strategy::kHybrid, Strategy::kTe, Strategy::kLoongTrain}) {
    if (name == to_string(s)) return s;
  }
  throw InvalidInput("unknown strategy " + quoted(name) +
                     " (strategies: dcp, dcp-pure, ring, zigzag, ulysses, hybrid, te, loongtrain)");
}

bool is_dcp(Strategy strategy) {
  return strategy == Strategy::kDcp || strategy == Strategy::kDcpPure;
}

}  // namespace dcp
