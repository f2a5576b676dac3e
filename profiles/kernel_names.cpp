#include "profiles/kernel_names.h"

#include <vector>

namespace ampcheck::profiles {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool digit(char c) { return c >= '0' && c <= '9'; }

// Where the parameter list starts: the first '(' outside <...> that opens neither an
// anonymous namespace nor a cast "(int)"; the end where there is none.
std::size_t parameters_at(std::string_view s) {
  int depth = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++depth;
    else if (c == '>' && depth > 0) --depth;
    else if (c == '(' && depth == 0) {
      if (s.substr(i, 21) == "(anonymous namespace)") {
        i += 20;
        continue;
      }
      // A return type such as enable_if<(((8)>(0)))...>::type keeps its parentheses inside <>.
      return i;
    }
  }
  return s.size();
}

}  // namespace

std::string kernel_name_key(std::string_view name) {
  const std::string_view s = name.substr(0, parameters_at(name));
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '(') {  // a cast of a literal: "(int)", "(unsigned long)", "(bool)"
      const std::size_t close = s.find(')', i);
      if (close != std::string_view::npos && close + 1 < s.size() &&
          (digit(s[close + 1]) || s[close + 1] == '-')) {
        i = close + 1;
        continue;
      }
      ++i;
      continue;
    }
    if (!word_char(s[i])) {
      ++i;
      continue;
    }
    std::size_t e = i;
    while (e < s.size() && word_char(s[e])) ++e;
    std::string w(s.substr(i, e - i));
    const bool qualifier = e + 1 < s.size() && s[e] == ':' && s[e + 1] == ':';
    if (!w.empty() && digit(w[0])) {  // 3ul, 2u, 128l: the number alone
      std::size_t d = 0;
      while (d < w.size() && digit(w[d])) ++d;
      w.resize(d);
    }
    i = e;
    if (qualifier || w == "anonymous" || w == "namespace" || w == "unnamed" || w == "void" || w == "const" ||
        w == "struct" || w == "class")
      continue;
    words.push_back(std::move(w));
  }
  std::string key;
  for (const std::string& w : words) key += (key.empty() ? "" : " ") + w;
  return key;
}

}  // namespace ampcheck::profiles
