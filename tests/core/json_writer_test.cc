// SPDX-License-Identifier: Apache-2.0
// The JSON writer nests, separates and escapes correctly.
#include "dcp/core/json_writer.h"

#include <cmath>

#include <gtest/gtest.h>

namespace dcp {
namespace {

TEST(JsonWriter, WritesNestedObjectsAndArraysCompactly) {
  JsonWriter json(0);
  json.begin_object();
  json.field("a", std::int64_t{1});
  json.key("list")
      .begin_array()
      .value(std::int64_t{2})
      .value("x")
      .begin_object()
      .end_object()
      .end_array();
  json.field("ok", true);
  json.key("none").null();
  json.key("empty").begin_array().end_array();
  json.end_object();
  EXPECT_EQ(json.str(), R"({"a":1,"list":[2,"x",{}],"ok":true,"none":null,"empty":[]})");
}

TEST(JsonWriter, EscapesStringsAndWritesNonFiniteAsNull) {
  EXPECT_EQ(json_quote("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
  JsonWriter json(0);
  json.begin_array().value(0.5).value(std::nan("")).value(-INFINITY).end_array();
  EXPECT_EQ(json.str(), "[0.5,null,null]");
}

TEST(JsonWriter, WritesAnInlineScopeOnOneLine) {
  JsonWriter json(2);
  json.begin_object().key("rows").begin_array();
  for (int i = 0; i < 2; ++i) {
    JsonWriter::Inline one_line(json);
    json.begin_array().value(std::int64_t{i}).value(std::int64_t{i + 1}).end_array();
  }
  json.end_array().end_object();
  EXPECT_EQ(json.str(), "{\n  \"rows\": [\n    [ 0, 1 ],\n    [ 1, 2 ]\n  ]\n}");
}

TEST(JsonWriter, IndentsWhenAsked) {
  JsonWriter json(2);
  json.begin_object().field("k", std::int64_t{3}).end_object();
  EXPECT_EQ(json.str(), "{\n  \"k\": 3\n}");
}

}  // namespace
}  // namespace dcp
