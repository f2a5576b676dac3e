// A user's profile, whatever wrote it: the format is found from the content (gzip, tar,
// SQLite and JSON by their first bytes, the CSVs by their header), never from the file's
// name. A folder, or a tar archive, is read member by member: per-rank traces of one run
// give one Profile each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiles/byte_source.h"
#include "profiles/profile.h"

namespace ampcheck::profiles {

struct ReadOptions {
  std::uint64_t max_bytes = kDefaultMaxBytes;  // per file, of text (decompressed)
};

// One file; the kernels attributed (profiles/attribution.h). Throws ProfileError naming
// the file and what is wrong: not a profile, truncated, a CPU-only profile, a SQLite
// database of another tool, larger than the bound.
Profile read_profile(const std::string& path, const ReadOptions& options = {});

// A file, a folder (every regular file in it that is a profile, by name order; files that
// are not profiles are named in each profile's notes) or a tar archive (plain or gzipped:
// each member that is a profile). Ordered by rank where the profiles record one.
std::vector<Profile> read_profiles(const std::string& path, const ReadOptions& options = {});

}  // namespace ampcheck::profiles
