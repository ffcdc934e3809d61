// SPDX-License-Identifier: Apache-2.0
// A small streaming JSON writer.
#include "dcp/core/json_writer.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace dcp {

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(kHex[(c >> 4) & 0xF]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

void JsonWriter::newline() {
  if (indent_ <= 0) return;
  if (inline_from_ >= 0 && static_cast<std::ptrdiff_t>(stack_.size()) > inline_from_) {
    out_.push_back(' ');
    return;
  }
  out_.push_back('\n');
  out_.append(stack_.size() * static_cast<std::size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  assert(!stack_.back().is_object && "a value inside an object needs a key");
  if (!stack_.back().empty) out_.push_back(',');
  stack_.back().empty = false;
  newline();
}

JsonWriter& JsonWriter::key(std::string_view name) {
  assert(!stack_.empty() && stack_.back().is_object && !after_key_);
  if (!stack_.back().empty) out_.push_back(',');
  stack_.back().empty = false;
  newline();
  out_ += json_quote(name);
  out_ += indent_ > 0 ? ": " : ":";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_.push_back('{');
  stack_.push_back({true, true});
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_.push_back('[');
  stack_.push_back({false, true});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  assert(!stack_.empty() && stack_.back().is_object && !after_key_);
  const bool empty = stack_.back().empty;
  const bool in_line =
      inline_from_ >= 0 && static_cast<std::ptrdiff_t>(stack_.size()) > inline_from_;
  stack_.pop_back();
  if (!empty) {
    if (in_line) {
      out_.push_back(' ');
    } else {
      newline();
    }
  }
  out_.push_back('}');
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  assert(!stack_.empty() && !stack_.back().is_object);
  const bool empty = stack_.back().empty;
  const bool in_line =
      inline_from_ >= 0 && static_cast<std::ptrdiff_t>(stack_.size()) > inline_from_;
  stack_.pop_back();
  if (!empty) {
    if (in_line) {
      out_.push_back(' ');
    } else {
      newline();
    }
  }
  out_.push_back(']');
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  out_ += json_quote(text);
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  before_value();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  before_value();
  if (!std::isfinite(number)) {
    out_ += "null";
    return *this;
  }
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), number);
  out_.append(buffer, result.ptr);
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  return *this;
}

}  // namespace dcp
