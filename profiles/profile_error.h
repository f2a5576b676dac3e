// A profile that cannot be read: what() is the whole message, the file first, then what is
// wrong with it and what would fix it ("trace.json.gz: the gzip stream ends before its
// end marker: the file was cut short; copy it again"). The CLI prints it and exits 2.
#pragma once

#include <stdexcept>
#include <string>

namespace ampcheck::profiles {

class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ampcheck::profiles
