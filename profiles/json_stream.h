// A pull reader of JSON text from a ByteSource: the caller walks the document value by
// value and keeps what it wants; nothing is built that it did not ask for. A Chrome
// trace of 100 MB is read at the speed of the disk and held in what the caller keeps,
// where a DOM (nlohmann::json, Python's json.load) holds it several times over.
//
// Lenient where profilers are sloppy and strict where a file is broken: a comma before a
// closing bracket (Paddle ends its event list with "{}") and a missing comma are let go;
// text that ends inside a value, or a character that cannot start one, is an error
// naming the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "profiles/byte_source.h"

namespace ampcheck::profiles {

class JsonStream {
 public:
  enum class Type { object, array, string, number, boolean, null, end };

  explicit JsonStream(ByteSource& source);

  Type peek();  // the type of the next value (white space skipped); end at the end of the text
  void begin_object();
  // The next member's key into `key` (the ':' consumed); false at the object's '}' (consumed).
  bool next_key(std::string& key);
  void begin_array();
  // Whether another item follows; false at the array's ']' (consumed).
  bool next_item();
  void read_string(std::string& out);
  // A number's text ("12", "-0.5", "1.2e3"); valid until the next call.
  std::string_view read_number();
  // A number or a string holding one, as a signed integer; false (value consumed) when
  // it is something else.
  bool read_int(std::int64_t& out);
  // A time in microseconds ("1623142623531625", "1419247333430.849") as integer
  // nanoseconds, exact (a double cannot hold 1.4e18 ns); false when not a number.
  bool read_micros_as_ns(std::int64_t& out);
  bool read_bool();
  void read_null();
  void skip();                   // the next value, whatever it is
  void raw(std::string& out);    // the next value's text, white space outside strings dropped

  std::uint64_t offset() const { return base_ + static_cast<std::uint64_t>(p_ - begin_); }
  [[noreturn]] void fail(std::string_view what) const;

 private:
  bool refill();  // false at the end of the text
  char peek_char();  // after white space; 0 at the end
  char get();
  void expect(char c);
  void skip_string(std::string* out);
  void skip_number(std::string* out);
  void skip_word(std::string* out);

  ByteSource& source_;
  const char* begin_ = nullptr;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  std::uint64_t base_ = 0;
  std::string number_;
  // How deep skip() and raw() have gone into nested values: bounded (kMaxDepth), so that a
  // file of a million '[' is an error, not a stack overflow.
  int depth_ = 0;
  static constexpr int kMaxDepth = 512;
  struct Nested {
    JsonStream& s;
    explicit Nested(JsonStream& stream);
    ~Nested() { --s.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;
  };
};

}  // namespace ampcheck::profiles
