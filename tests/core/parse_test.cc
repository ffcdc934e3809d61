// SPDX-License-Identifier: Apache-2.0
// Strict number and list parsing.
#include "dcp/core/parse.h"

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp {
namespace {

std::string message_of(std::string_view text) {
  try {
    parse_int(text, "--heads");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ParseInt, AcceptsWholeIntegersOnly) {
  EXPECT_EQ(parse_int("42", "x"), 42);
  EXPECT_EQ(parse_int("-7", "x"), -7);
  EXPECT_EQ(parse_int("+7", "x"), 7);
  EXPECT_EQ(message_of("4x"), "--heads: '4x' is not an integer");
  EXPECT_EQ(message_of(""), "--heads: '' is not an integer");
  EXPECT_EQ(message_of("1.5"), "--heads: '1.5' is not an integer");
  EXPECT_EQ(message_of("99999999999999999999"), "--heads: '99999999999999999999' is out of range");
}

TEST(ParseDouble, RejectsNonFiniteAndTrailingText) {
  EXPECT_DOUBLE_EQ(parse_double("0.25", "x"), 0.25);
  EXPECT_DOUBLE_EQ(parse_double("1e3", "x"), 1000.0);
  EXPECT_THROW(parse_double("inf", "x"), InvalidInput);
  EXPECT_THROW(parse_double("nan", "x"), InvalidInput);
  EXPECT_THROW(parse_double("0.5s", "x"), InvalidInput);
}

TEST(ParseIntList, SplitsOnCommasAndRejectsEmptyItems) {
  EXPECT_EQ(parse_int_list("45613, 9419 ,1", "x"), (std::vector<std::int64_t>{45613, 9419, 1}));
  EXPECT_THROW(parse_int_list("1,,2", "x"), InvalidInput);
  EXPECT_THROW(parse_int_list("", "x"), InvalidInput);
  EXPECT_THROW(parse_int_list("1,a", "x"), InvalidInput);
}

}  // namespace
}  // namespace dcp
