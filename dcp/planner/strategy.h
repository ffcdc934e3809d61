// SPDX-License-Identifier: Apache-2.0
// The top of every plan request: which strategy plans the batch (dcp's search, dcp's own plan, or
// one of the static systems it is compared with).
#pragma once

#include <string_view>

namespace dcp {

// kDcp: dcp's plan, or the best static plan when the simulator finds one faster (build_plan,
// dcp/selection/plan_search.h); kDcpPure: dcp's own placement always.
enum class Strategy { kDcp, kDcpPure, kRing, kZigzag, kUlysses, kHybrid, kTe, kLoongTrain };
std::string_view to_string(Strategy strategy);
bool is_dcp(Strategy strategy);
// The static strategies, in the order plans and tables list them.
inline constexpr Strategy kStaticStrategies[] = {Strategy::kRing,    Strategy::kZigzag,
                                                 Strategy::kUlysses, Strategy::kHybrid,
                                                 Strategy::kTe,      Strategy::kLoongTrain};
// Accepts dcp, dcp-pure, ring, zigzag, ulysses, hybrid, te, loongtrain. Throws InvalidInput naming
// the text otherwise.
Strategy parse_strategy(std::string_view name);

}  // namespace dcp
