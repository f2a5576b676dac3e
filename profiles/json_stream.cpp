#include "profiles/json_stream.h"

#include <charconv>
#include <cmath>
#include <cstring>  // std::memchr

#include "profiles/profile_error.h"

namespace ampcheck::profiles {
namespace {

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

JsonStream::JsonStream(ByteSource& source) : source_(source) {}

void JsonStream::fail(std::string_view what) const {
  throw ProfileError(source_.label() + ": not valid JSON at byte " + std::to_string(offset()) + ": " +
                     std::string(what));
}

bool JsonStream::refill() {
  base_ += static_cast<std::uint64_t>(end_ - begin_);
  const std::string_view block = source_.next();
  begin_ = p_ = block.data();
  end_ = block.data() + block.size();
  return !block.empty();
}

char JsonStream::peek_char() {
  for (;;) {
    while (p_ < end_ && space(*p_)) ++p_;
    if (p_ < end_) return *p_;
    if (!refill()) return 0;
  }
}

char JsonStream::get() {
  if (p_ == end_ && !refill())
    fail("the text ends inside a value: the file is truncated (was the profiler stopped before it finished "
         "writing?)");
  return *p_++;
}

void JsonStream::expect(char c) {
  const char got = peek_char();
  if (got == 0)
    fail(std::string("the text ends where '") + c +
         "' was due: the file is truncated (was the profiler stopped before it finished writing?)");
  if (got != c) fail(std::string("expected '") + c + "', found '" + got + "'");
  ++p_;
}

JsonStream::Type JsonStream::peek() {
  switch (peek_char()) {
    case 0: return Type::end;
    case '{': return Type::object;
    case '[': return Type::array;
    case '"': return Type::string;
    case 't':
    case 'f': return Type::boolean;
    case 'n': return Type::null;
    default: {
      const char c = *p_;
      if (c == '-' || (c >= '0' && c <= '9')) return Type::number;
      fail(std::string("'") + c + "' cannot start a JSON value");
    }
  }
}

void JsonStream::begin_object() { expect('{'); }
void JsonStream::begin_array() { expect('['); }

bool JsonStream::next_key(std::string& key) {
  char c = peek_char();
  if (c == ',') {
    ++p_;
    c = peek_char();
  }
  if (c == '}') {
    ++p_;
    return false;
  }
  if (c == 0) fail("the text ends inside an object: the file is truncated (was the profiler stopped before it "
                   "finished writing?)");
  if (c != '"') fail(std::string("expected a key in double quotes, found '") + c + "'");
  key.clear();
  skip_string(&key);
  expect(':');
  return true;
}

bool JsonStream::next_item() {
  char c = peek_char();
  if (c == ',') {
    ++p_;
    c = peek_char();
  }
  if (c == ']') {
    ++p_;
    return false;
  }
  if (c == 0) fail("the text ends inside a list: the file is truncated (was the profiler stopped before it "
                   "finished writing?)");
  return true;
}

// Strings are copied a run at a time between quotes and backslashes.
void JsonStream::skip_string(std::string* out) {
  if (peek_char() != '"') fail("expected a string");
  ++p_;
  for (;;) {
    if (p_ == end_ && !refill())
      fail("the text ends inside a string: the file is truncated (was the profiler stopped before it finished "
           "writing?)");
    const char* stop = p_;
    while (stop < end_ && *stop != '"' && *stop != '\\') ++stop;
    if (out != nullptr) out->append(p_, stop);
    p_ = stop;
    if (p_ == end_) continue;
    if (*p_ == '"') {
      ++p_;
      return;
    }
    ++p_;  // the backslash
    const char e = get();
    if (out == nullptr) {
      if (e == 'u')
        for (int i = 0; i < 4; ++i) get();
      continue;
    }
    switch (e) {
      case '"': *out += '"'; break;
      case '\\': *out += '\\'; break;
      case '/': *out += '/'; break;
      case 'b': *out += '\b'; break;
      case 'f': *out += '\f'; break;
      case 'n': *out += '\n'; break;
      case 'r': *out += '\r'; break;
      case 't': *out += '\t'; break;
      case 'u': {
        std::uint32_t cp = 0;
        for (int i = 0; i < 4; ++i) {
          const int h = hex(get());
          if (h < 0) fail("a \\u escape without four hex digits");
          cp = cp * 16 + static_cast<std::uint32_t>(h);
        }
        append_utf8(*out, cp);
        break;
      }
      default: fail(std::string("an unknown escape '\\") + e + "' in a string");
    }
  }
}

void JsonStream::skip_number(std::string* out) {
  peek_char();
  for (;;) {
    if (p_ == end_ && !refill()) return;
    const char c = *p_;
    if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
      if (out != nullptr) *out += c;
      ++p_;
    } else {
      return;
    }
  }
}

void JsonStream::skip_word(std::string* out) {
  std::string word;
  for (;;) {
    if (p_ == end_ && !refill()) break;
    const char c = *p_;
    if (c < 'a' || c > 'z') break;
    word += c;
    ++p_;
  }
  if (word != "true" && word != "false" && word != "null") fail("the bare word \"" + word + "\" is not a JSON value");
  if (out != nullptr) *out += word;
}

void JsonStream::read_string(std::string& out) {
  out.clear();
  skip_string(&out);
}

std::string_view JsonStream::read_number() {
  number_.clear();
  skip_number(&number_);
  return number_;
}

bool JsonStream::read_int(std::int64_t& out) {
  const Type t = peek();
  if (t == Type::number) {
    const std::string_view n = read_number();
    const auto r = std::from_chars(n.data(), n.data() + n.size(), out);
    if (r.ec == std::errc() && r.ptr == n.data() + n.size()) return true;
    double d = 0;
    const auto rd = std::from_chars(n.data(), n.data() + n.size(), d);
    // A number written with a fraction or an exponent: an integer only within int64's range
    // (2^63 is the first double beyond it; converting one there is undefined).
    if (rd.ec != std::errc() || !(d > -9223372036854775808.0 && d < 9223372036854775808.0)) return false;
    out = static_cast<std::int64_t>(d);
    return true;
  }
  if (t == Type::string) {
    read_string(number_);
    const auto r = std::from_chars(number_.data(), number_.data() + number_.size(), out);
    return r.ec == std::errc() && r.ptr == number_.data() + number_.size();
  }
  skip();
  return false;
}

bool JsonStream::read_micros_as_ns(std::int64_t& out) {
  if (peek() != Type::number) {
    skip();
    return false;
  }
  const std::string_view n = read_number();
  // Integer microseconds, then up to three decimals (nanoseconds); an exponent or more
  // decimals go through a double, which is exact enough for a duration.
  std::size_t i = 0;
  const bool negative = i < n.size() && n[i] == '-';
  if (negative) ++i;
  std::int64_t micros = 0;
  std::size_t digits = 0;
  // (More than 16 digits go through the double below: not accumulated past int64's range.)
  for (; i < n.size() && n[i] >= '0' && n[i] <= '9'; ++i, ++digits)
    if (digits < 17) micros = micros * 10 + (n[i] - '0');
  std::int64_t nanos = 0;
  if (i < n.size() && n[i] == '.') {
    ++i;
    int decimals = 0;
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9'; ++i) {
      if (decimals < 3) nanos = nanos * 10 + (n[i] - '0');
      else if (decimals == 3 && n[i] >= '5') ++nanos;  // rounds the fourth decimal
      ++decimals;
    }
    for (; decimals < 3; ++decimals) nanos *= 10;
  }
  if (digits == 0 || digits > 16 || i != n.size()) {
    double d = 0;
    const auto r = std::from_chars(n.data(), n.data() + n.size(), d);
    if (r.ec != std::errc() || !std::isfinite(d) || std::fabs(d) > 9e15) return false;
    out = static_cast<std::int64_t>(std::llround(d * 1000.0));
    return true;
  }
  out = micros * 1000 + nanos;
  if (negative) out = -out;
  return true;
}

bool JsonStream::read_bool() {
  std::string w;
  skip_word(&w);
  return w == "true";
}

void JsonStream::read_null() { skip_word(nullptr); }

JsonStream::Nested::Nested(JsonStream& stream) : s(stream) {
  if (++s.depth_ > kMaxDepth) {
    --s.depth_;
    s.fail("values nested more than " + std::to_string(kMaxDepth) + " deep: this is not a profile (or it is corrupt)");
  }
}

void JsonStream::skip() {
  const Nested nested(*this);
  std::string* none = nullptr;
  switch (peek()) {
    case Type::object: {
      begin_object();
      std::string key;
      while (next_key(key)) skip();
      return;
    }
    case Type::array:
      begin_array();
      while (next_item()) skip();
      return;
    case Type::string: skip_string(none); return;
    case Type::number: skip_number(none); return;
    case Type::boolean:
    case Type::null: skip_word(none); return;
    case Type::end: fail("the text ends where a value was due: the file is truncated");
  }
}

void JsonStream::raw(std::string& out) {
  const Nested nested(*this);
  switch (peek()) {
    case Type::object: {
      begin_object();
      out += '{';
      std::string key;
      bool first = true;
      while (next_key(key)) {
        if (!first) out += ',';
        first = false;
        out += '"';
        out += key;
        out += "\":";
        raw(out);
      }
      out += '}';
      return;
    }
    case Type::array: {
      begin_array();
      out += '[';
      bool first = true;
      while (next_item()) {
        if (!first) out += ',';
        first = false;
        raw(out);
      }
      out += ']';
      return;
    }
    case Type::string: {
      std::string s;
      skip_string(&s);
      out += '"';
      for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      out += '"';
      return;
    }
    case Type::number: skip_number(&out); return;
    case Type::boolean:
    case Type::null: skip_word(&out); return;
    case Type::end: fail("the text ends where a value was due: the file is truncated");
  }
}

}  // namespace ampcheck::profiles
