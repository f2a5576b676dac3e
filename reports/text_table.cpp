#include "reports/text_table.h"

#include <algorithm>
#include <stdexcept>

namespace ampcheck::reports {

TextTable::TextTable(std::vector<std::string> headers)
    : headers_(std::move(headers)), aligns_(headers_.size(), Align::right) {}

TextTable& TextTable::align(std::size_t column, Align a) {
  aligns_.at(column) = a;
  return *this;
}

TextTable& TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != headers_.size())
    throw std::invalid_argument("TextTable row has " + std::to_string(cells.size()) +
                                " cells for " + std::to_string(headers_.size()) + " columns");
  rows_.push_back(std::move(cells));
  return *this;
}

TextTable& TextTable::add_separator() {
  if (!rows_.empty() && !rows_.back().empty()) rows_.emplace_back();
  return *this;
}

std::string TextTable::render(std::string_view indent) const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());

  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s(indent);
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) s += "  ";
      s += aligns_[c] == Align::right ? pad + cells[c] : cells[c] + pad;
    }
    s.erase(s.find_last_not_of(' ') + 1);
    out += s + '\n';
  };
  line(headers_);
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    if (!rows_[r].empty())
      line(rows_[r]);
    else if (r + 1 < rows_.size())  // a separator closing the table adds nothing
      out += '\n';
  }
  return out;
}

}  // namespace ampcheck::reports
