// SPDX-License-Identifier: Apache-2.0
// A small streaming JSON writer: objects, arrays, strings, integers, doubles and booleans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dcp {

// Writes one JSON document into a string. Calls must nest correctly (begin/end pairs, a key
// before every value inside an object); misuse is a programming error and aborts via assert.
// Doubles are printed with the shortest representation that round-trips; non-finite doubles
// become null, since JSON has no NaN or infinity.
class JsonWriter {
 public:
  // indent = 0 writes everything on one line.
  explicit JsonWriter(int indent = 2) : indent_(indent) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(std::int32_t number) { return value(static_cast<std::int64_t>(number)); }
  JsonWriter& value(double number);
  JsonWriter& value(bool flag);
  JsonWriter& null();
  // A complete JSON document written by another writer, inserted as one value (not re-indented).
  JsonWriter& raw(std::string_view json);

  // Shorthand for key(name).value(v).
  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  // While alive, the next value is written on one line (e.g. one row of a long table), whatever
  // the indent. Scopes do not nest.
  class Inline {
   public:
    explicit Inline(JsonWriter& writer) : writer_(writer) {
      writer_.inline_from_ = static_cast<std::ptrdiff_t>(writer_.stack_.size());
    }
    ~Inline() { writer_.inline_from_ = -1; }
    Inline(const Inline&) = delete;
    Inline& operator=(const Inline&) = delete;

   private:
    JsonWriter& writer_;
  };

  // The document so far; complete once every begin has its end.
  const std::string& str() const { return out_; }

 private:
  void before_value();
  void newline();

  struct Level {
    bool is_object;
    bool empty;
  };
  int indent_;
  std::string out_;
  std::vector<Level> stack_;
  bool after_key_ = false;
  std::ptrdiff_t inline_from_ = -1;  // nesting depth below which newlines are suppressed
};

// Escapes a string as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

}  // namespace dcp
