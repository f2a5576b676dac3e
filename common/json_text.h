// JSON text from a named file (a config, a model file, a report, a rules file), parsed
// with every failure turned into one plain sentence: the file, the line and column, what
// is wrong and the fix. nlohmann's own messages ("[json.exception.parse_error.101] ...",
// "[json.exception.out_of_range.406] number overflow parsing '1e999'") name neither the
// file nor the fix, and the overflow not even the place.
//
// Header-only and free of project types, so that every room may include it without a
// link dependency: engine/ and samples/ read configs and model files, reports/ (which
// depends on nothing of the project) reads reports and rules files.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace ampcheck {

// A JSON text that cannot be read; what() is the whole message, source first.
class JsonTextError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace json_text_detail {

struct Position {
  std::size_t line = 1, column = 1;
};

// The line and column (1-based, in bytes) of the byte at `index` (0-based).
inline Position position_at(std::string_view text, std::size_t index) {
  Position p;
  for (std::size_t i = 0; i < index && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

inline std::string where(std::string_view source, Position p) {
  return std::string(source) + ": line " + std::to_string(p.line) + ", column " + std::to_string(p.column);
}

// Whether a JSON number literal lies beyond the doubles. An underflow is not an error:
// nlohmann reads it as 0 or a subnormal. std::from_chars reports both directions as out
// of range; the decimal order of magnitude of the first significant digit plus the
// exponent tells which (positive: too large).
inline bool overflows_double(std::string_view number) {
  double value = 0;
  const auto result = std::from_chars(number.data(), number.data() + number.size(), value);
  if (result.ec == std::errc()) return std::isinf(value);
  if (result.ec != std::errc::result_out_of_range) return false;
  const auto digit = [&number](std::size_t i) { return i < number.size() && number[i] >= '0' && number[i] <= '9'; };
  std::size_t i = !number.empty() && number[0] == '-' ? 1 : 0;
  bool significant = false;
  std::int64_t order = 0;  // "123" -> 2, "0.05" -> -2
  for (; digit(i); ++i) {
    if (significant) ++order;
    else significant = number[i] != '0';
  }
  if (i < number.size() && number[i] == '.') {
    for (std::int64_t zeros = 1; digit(++i);) {
      if (significant) continue;
      if (number[i] == '0') ++zeros;
      else significant = true, order = -zeros;
    }
  }
  if (!significant) return false;  // zero
  std::int64_t exponent = 0;
  if (i < number.size() && (number[i] == 'e' || number[i] == 'E')) {
    const bool negative = i + 1 < number.size() && number[i + 1] == '-';
    if (i + 1 < number.size() && (number[i + 1] == '-' || number[i + 1] == '+')) ++i;
    for (++i; digit(i) && exponent < 1000000; ++i) exponent = exponent * 10 + (number[i] - '0');
    if (negative) exponent = -exponent;
  }
  return order + exponent > 0;
}

struct Token {
  std::size_t index;  // 0-based, of its first byte
  std::string text;
};

// The first number literal (outside strings) that overflows a double: the one nlohmann's
// out_of_range.406 is about, since it stops at the first.
inline std::optional<Token> first_overflowing_number(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      ++i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      std::size_t end = i + 1;
      while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                                   text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-'))
        ++end;
      const std::string_view number = text.substr(i, end - i);
      if (overflows_double(number)) return Token{i, std::string(number)};
      i = end;
    } else {
      ++i;
    }
  }
  return std::nullopt;
}

struct Word {
  std::size_t begin = 0;  // 0-based
  std::string text;       // empty: none
};

// The run of letters at (or just before) `index`: the word a literal error is about
// (nlohmann stops inside or after it: at the 'o' of "not", matching "null").
inline Word word_at(std::string_view text, std::size_t index) {
  const auto letter = [&](std::size_t i) { return i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])); };
  std::size_t begin = index;
  if (!letter(begin)) {
    if (begin == 0 || !letter(begin - 1)) return {};
    --begin;
  }
  while (begin > 0 && letter(begin - 1)) --begin;
  std::size_t end = begin;
  while (letter(end)) ++end;
  return {begin, std::string(text.substr(begin, end - begin))};
}

// The last character before `index` that is not white space, or 0.
inline char previous_char(std::string_view text, std::size_t index) {
  while (index > 0) {
    const char c = text[--index];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c;
  }
  return 0;
}

struct Plain {
  std::string what, fix;
  std::optional<std::size_t> at = std::nullopt;  // where the problem starts, when not where the parser stopped
};

constexpr std::string_view kNumberFix =
    "write numbers as JSON does: 12, -0.5, 1e-3 (no leading '+' or '.', no leading zeros, digits after '.' "
    "and after 'e')";

// nlohmann's syntax error (`detail`: its message after "parse error at ...: ") in plain
// words, from the message and the text around `index`, the last byte the parser read.
inline Plain plain_syntax_error(std::string_view text, std::size_t index, const std::string& detail) {
  const auto has = [&detail](std::string_view s) { return detail.find(s) != std::string::npos; };
  const char at = index < text.size() ? text[index] : 0;
  const Word w = word_at(text, index);
  const std::string& word = w.text;
  const bool literal = has("invalid literal") || has("invalid number");
  if (literal &&
      (word == "NaN" || word == "nan" || word == "Infinity" || word == "inf" || word == "Inf" || word == "infinity"))
    return {"\"" + word + "\" is not a JSON number (JSON has no NaN or Infinity)", "write a finite number",
            w.begin > 0 && text[w.begin - 1] == '-' ? w.begin - 1 : w.begin};
  if (has("empty input") ||
      (has("unexpected end of input") && text.find_first_not_of(" \t\r\n") == std::string_view::npos))
    return {"the text is empty", "write the JSON document into it (an object { ... })"};
  if (has("missing closing quote"))
    return {"a string is not closed", "end it with a double quote (\")"};
  if (has("control character"))
    return {"a string holds a raw line break or control character",
            "close the string before the line ends, or write the character as \\n, \\t or \\u00XX"};
  if (has("ill-formed UTF-8")) return {"the text is not UTF-8", "save the file as UTF-8"};
  if (has("invalid string"))
    return {"a string holds an invalid escape",
            "JSON's escapes are \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX; write a backslash as \\\\"};
  if (has("unexpected end of input"))
    return {"the text ends before the JSON is complete", "close every '{' with '}' and every '[' with ']'"};
  if (has("invalid number")) return {"a malformed number", std::string(kNumberFix)};
  // "01": nlohmann reads the 0 as a number and stops at the 1.
  if (has("unexpected number literal") && index >= 1 && text[index - 1] == '0' &&
      (index < 2 || !(std::isdigit(static_cast<unsigned char>(text[index - 2])) || text[index - 2] == '.')))
    return {"a number with a leading zero", std::string(kNumberFix)};
  if (has("invalid literal")) {
    if (at == '\'') return {"a single quote", "JSON keys and strings take double quotes (\")"};
    if (at == '/' || at == '#') return {"a comment", "JSON has no comments: remove it"};
    if (at == '+' || at == '.') return {"a malformed number", std::string(kNumberFix)};
    if (word == "True" || word == "False" || word == "None" || word == "TRUE" || word == "FALSE" || word == "NULL" ||
        word == "Null")
      return {"\"" + word + "\" is not JSON's spelling", "write true, false or null, in lower case", w.begin};
    if (!word.empty())
      return {"the bare word \"" + word + "\" is not a JSON value",
              "put keys and strings in double quotes; the only bare words are true, false and null", w.begin};
    return {std::string("the character '") + at + "' cannot start a JSON value",
            "write a string in double quotes, a number, true, false, null, an object or an array"};
  }
  const bool closing = has("unexpected '}'") || has("unexpected ']'");
  if (closing && previous_char(text, index) == ',')
    return {std::string("a comma before the closing '") + at + "'",
            "JSON allows no comma after the last item: remove it"};
  if (has("while parsing array") && has("unexpected '}'"))
    return {"an array opened with '[' is closed with '}'", "close it with ']'"};
  if (has("while parsing object") && !has("object key") && !has("object separator") && has("unexpected ']'"))
    return {"an object opened with '{' is closed with ']'", "close it with '}'"};
  if (closing && previous_char(text, index) == ':')
    return {"a key has no value", "write the value after the ':'"};
  if (has("expected end of input"))
    return {"more text after the end of the JSON value",
            "a file holds one JSON value: remove what follows, or put the values in a list [ ... ]"};
  if (has("object separator")) return {"a key is not followed by ':'", "write \"key\": value"};
  if (has("object key")) return {"an object key is not a string", "put the key in double quotes"};
  if (has("while parsing object")) return {"a comma is missing between two members", "add a ','"};
  if (has("while parsing array")) return {"a comma is missing between two items", "add a ','"};
  return {detail, "check the JSON syntax there"};
}

// Duplicate keys are an error: a JSON parser silently keeps only one of them. The path of
// each value being read, for the message ("amp_configs.decr_ratio", "nodes[2].name").
class DuplicateKeys {
 public:
  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        frames_.push_back({event == E::array_start, 0, {}, {}});
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        next_item();
        break;
      case E::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.seen.insert(f.key).second && duplicate_.empty()) duplicate_ = path();
        break;
      }
      case E::value:
        next_item();
        break;
    }
    return true;  // keep parsing: a syntax error later in the text is reported first
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool array;
    std::size_t index;
    std::string key;
    std::set<std::string> seen;
  };
  void next_item() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_)
      p += f.array ? "[" + std::to_string(f.index) + "]" : (p.empty() ? "" : ".") + f.key;
    return p;
  }
  std::vector<Frame> frames_;
  std::string duplicate_;
};

}  // namespace json_text_detail

// Parses `text`, read from `source` (a path, or a name such as "sample mlp"). Throws
// JsonTextError "SOURCE: line L, column C: WHAT; FIX" for a syntax error or a number
// beyond a double, and "SOURCE: duplicate key \"a.b\" ..." for a key given twice.
inline nlohmann::json parse_json_text(std::string_view text, std::string_view source) {
  namespace d = json_text_detail;
  d::DuplicateKeys keys;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text, [&keys](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      return keys(depth, event, parsed);
    });
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the bytes read, the last one included: index e.byte - 1.
    const std::size_t index = e.byte == 0 ? 0 : e.byte - 1;
    std::string detail = e.what();
    if (const auto colon = detail.find(": "); colon != std::string::npos) detail.erase(0, colon + 2);
    const d::Plain plain = d::plain_syntax_error(text, index, detail);
    throw JsonTextError(d::where(source, d::position_at(text, plain.at.value_or(index))) + ": not valid JSON: " +
                        plain.what + "; " + plain.fix);
  } catch (const nlohmann::json::out_of_range& e) {
    if (e.id != 406) throw;
    const auto number = d::first_overflowing_number(text);
    const std::string at = number ? d::where(source, d::position_at(text, number->index)) : std::string(source);
    throw JsonTextError(at + ": the number " + (number ? number->text + " " : "") +
                        "is too large for a double (the largest is about 1.8e308); write a finite number of "
                        "at most that magnitude");
  }
  if (!keys.duplicate().empty())
    throw JsonTextError(std::string(source) + ": duplicate key \"" + keys.duplicate() +
                        "\"; JSON keeps only one of them: remove the other");
  return doc;
}

}  // namespace ampcheck
