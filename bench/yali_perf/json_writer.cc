#include "json_writer.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace yali_perf {

std::string JsonWriter::Escape(const std::string& text) {
  std::string escaped = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': escaped += "\\\""; break;
      case '\\': escaped += "\\\\"; break;
      case '\n': escaped += "\\n"; break;
      case '\r': escaped += "\\r"; break;
      case '\t': escaped += "\\t"; break;
      default:
        if (c < 0x20) {
          char code[8];
          std::snprintf(code, sizeof(code), "\\u%04x", c);
          escaped += code;
        } else {
          escaped += static_cast<char>(c);
        }
    }
  }
  return escaped + "\"";
}

void JsonWriter::Newline() {
  out_ += "\n";
  out_.append(2 * stack_.size(), ' ');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!stack_.empty()) {
    if (stack_.back().items++ > 0) out_ += ",";
    Newline();
  }
}

void JsonWriter::Key(const std::string& key) {
  if (stack_.back().items++ > 0) out_ += ",";
  Newline();
  out_ += Escape(key) + ": ";
  after_key_ = true;
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_ += "{";
  stack_.push_back({true, 0});
}

void JsonWriter::EndObject() {
  bool had_items = stack_.back().items > 0;
  stack_.pop_back();
  if (had_items) Newline();
  out_ += "}";
  if (stack_.empty()) out_ += "\n";
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_ += "[";
  stack_.push_back({false, 0});
}

void JsonWriter::EndArray() {
  bool had_items = stack_.back().items > 0;
  stack_.pop_back();
  if (had_items) Newline();
  out_ += "]";
}

void JsonWriter::String(const std::string& value) {
  BeforeValue();
  out_ += Escape(value);
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
}

void JsonWriter::UInt(uint64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
}

static std::string FormatDouble(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void JsonWriter::Double(double value) {
  BeforeValue();
  out_ += FormatDouble(value);
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
}

void JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
}

void JsonWriter::DoubleArray(const std::vector<double>& values) {
  BeforeValue();
  out_ += "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out_ += ", ";
    out_ += FormatDouble(values[i]);
  }
  out_ += "]";
}

}  // namespace yali_perf
