// SPDX-License-Identifier: Apache-2.0
#include "dcp/planner/partition/hmetis_format.h"

#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp {
namespace {

Hypergraph three_vertices(Weight first_net_weight) {
  Hypergraph::Builder builder;
  builder.add_vertex({5, 0});
  builder.add_vertex({0, 700});
  builder.add_vertex({2, 1});
  const std::vector<VertexId> a{0, 1, 2};
  const std::vector<VertexId> b{2, 0};
  const std::vector<VertexId> lonely{1};
  builder.add_net(first_net_weight, a);
  builder.add_net(3, b);
  builder.add_net(9, lonely);
  return std::move(builder).build();
}

TEST(HmetisFormat, WritesNetWeightsAndOneBasedPins) {
  std::ostringstream out;
  write_hmetis(three_vertices(40), out);
  EXPECT_EQ(out.str(), "3 3 1\n40 1 2 3\n3 3 1\n9 2\n");
  std::ostringstream weights;
  write_vertex_weights(three_vertices(40), weights);
  EXPECT_EQ(weights.str(), "5 0\n0 700\n2 1\n");
}

TEST(HmetisFormat, RejectsNetWeightsAnHmetisReaderCannotHold) {
  std::ostringstream out;
  EXPECT_THROW(write_hmetis(three_vertices(0), out), InvalidInput);
  EXPECT_THROW(write_hmetis(three_vertices(Weight{1} << 31), out), InvalidInput);
  EXPECT_NO_THROW(write_hmetis(three_vertices((Weight{1} << 31) - 1), out));
}

}  // namespace
}  // namespace dcp
