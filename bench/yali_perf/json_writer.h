// A small streaming JSON writer (no external dependency). It places commas and indentation; the
// caller keeps keys and values in the order of the schema. Host-only.
#ifndef YALI_PERF_JSON_WRITER_H_
#define YALI_PERF_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace yali_perf {

class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Inside an object, Key() comes before every value.
  void Key(const std::string& key);
  void String(const std::string& value);
  void Int(int64_t value);
  void UInt(uint64_t value);
  // Non-finite numbers (NaN, inf) are written as null: JSON has no spelling for them.
  void Double(double value);
  void Bool(bool value);
  void Null();
  // Arrays of numbers are written on one line, to keep samples_us readable.
  void DoubleArray(const std::vector<double>& values);

  const std::string& text() const { return out_; }

  static std::string Escape(const std::string& text);

 private:
  struct Level {
    bool is_object;
    int items;
  };
  void BeforeValue();
  void Newline();

  std::string out_;
  std::vector<Level> stack_;
  bool after_key_ = false;
};

}  // namespace yali_perf

#endif  // YALI_PERF_JSON_WRITER_H_
