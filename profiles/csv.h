// CSV rows from a ByteSource (RFC 4180: fields in double quotes may hold commas, quotes
// doubled, line breaks), as Nsight Systems' and Nsight Compute's --csv write them.
#pragma once

#include <string>
#include <vector>

#include "profiles/byte_source.h"

namespace ampcheck::profiles {

class CsvReader {
 public:
  explicit CsvReader(ByteSource& source) : source_(source) {}
  // The next row's fields; false at the end of the text. A blank line is a row of one
  // empty field.
  bool next(std::vector<std::string>& fields);
  std::uint64_t line() const { return line_; }  // of the row last returned, from 1

 private:
  bool more();
  ByteSource& source_;
  std::string_view block_;
  std::size_t at_ = 0;
  std::uint64_t line_ = 0, next_line_ = 1;
};

}  // namespace ampcheck::profiles
