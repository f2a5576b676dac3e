#include "profiles/csv.h"

namespace ampcheck::profiles {

bool CsvReader::more() {
  if (at_ < block_.size()) return true;
  block_ = source_.next();
  at_ = 0;
  return !block_.empty();
}

bool CsvReader::next(std::vector<std::string>& fields) {
  fields.clear();
  if (!more()) return false;
  line_ = next_line_;
  std::string field;
  bool quoted = false, was_quoted = false;
  while (more()) {
    const char c = block_[at_++];
    if (quoted) {
      if (c == '"') {
        if (more() && block_[at_] == '"') {
          field += '"';
          ++at_;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++next_line_;
        field += c;
      }
      continue;
    }
    if (c == '"' && field.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else if (c == '\n') {
      ++next_line_;
      break;
    } else if (c != '\r') {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return true;
}

}  // namespace ampcheck::profiles
