// Aligned plain-text tables for the summaries ampcheck prints.
#pragma once

#include <string>
#include <vector>

namespace ampcheck::reports {

class TextTable {
 public:
  enum class Align { left, right };
  // One header per column; columns are right-aligned unless told otherwise.
  explicit TextTable(std::vector<std::string> headers);
  TextTable& align(std::size_t column, Align a);
  TextTable& add_row(std::vector<std::string> cells);  // must have one cell per column
  TextTable& add_separator();  // a blank line between groups of rows
  std::string render(std::string_view indent = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> aligns_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

}  // namespace ampcheck::reports
