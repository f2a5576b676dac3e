// Bad usage or input found after parsing: reported as "ampcheck: <message>", exit 2.
#pragma once

#include <stdexcept>

namespace ampcheck::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ampcheck::cli
