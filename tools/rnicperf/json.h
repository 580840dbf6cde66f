// SPDX-License-Identifier: BSD-3-Clause
// A small JSON writer: strings are escaped (RFC 8259 §7), non-finite numbers become null,
// and commas are placed by the writer, so the output is valid JSON by construction (perftest
// wrote unquoted keys and stray commas; its issue #216).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rnicperf {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);  // inside an object, before each value

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(double d);
  JsonWriter& value(uint64_t u);
  JsonWriter& value(int64_t i);
  JsonWriter& value(uint32_t u) { return value(static_cast<uint64_t>(u)); }
  JsonWriter& value(int i) { return value(static_cast<int64_t>(i)); }
  JsonWriter& value(bool b);
  JsonWriter& null();

  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  // The document; complete once every object and array is closed.
  const std::string& str() const { return out_; }
  bool complete() const { return stack_.empty() && !out_.empty(); }

  static std::string escape(std::string_view s);

 private:
  void before_value();
  void newline();
  std::string out_;
  struct Level {
    bool is_object;
    bool empty = true;
  };
  std::vector<Level> stack_;
  bool after_key_ = false;
};

}  // namespace rnicperf
