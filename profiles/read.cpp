#include "profiles/read.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "profiles/attribution.h"
#include "profiles/chrome_trace.h"
#include "profiles/nsight_csv.h"
#include "profiles/nsys_sqlite.h"
#include "profiles/profile_error.h"

namespace ampcheck::profiles {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSqliteMagic("SQLite format 3\0", 16);
constexpr std::size_t kTarBlock = 512;

bool is_tar(std::string_view head) {
  return head.size() >= 263 && head.substr(257, 5) == "ustar";
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The first bytes, shown in a message about a file that is no profile.
std::string describe_start(std::string_view head) {
  const std::size_t n = std::min<std::size_t>(head.size(), 16);
  bool text = true;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(head[i]);
    if (c < 0x20 && !is_space(head[i])) text = false;
  }
  if (text) {
    std::string s(head.substr(0, std::min<std::size_t>(head.size(), 40)));
    for (char& c : s)
      if (is_space(c)) c = ' ';
    return "it starts with \"" + s + (head.size() > 40 ? "...\"" : "\"");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(head[i]);
    s += kHex[c >> 4];
    s += kHex[c & 15];
    s += ' ';
  }
  std::string what;
  if (head.substr(0, 4) == std::string_view("PK\x03\x04", 4)) what = " (a zip archive)";
  if (head.substr(0, 4) == std::string_view("\x7f" "ELF", 4)) what = " (a program)";
  if (head.substr(0, 4) == std::string_view("\x28\xb5\x2f\xfd", 4)) what = " (zstd-compressed: decompress it first)";
  return "it starts with the bytes " + s.substr(0, s.size() - 1) + what;
}

std::string not_a_profile(const std::string& label, std::string_view head) {
  return label + ": not a profile: " + describe_start(head) +
         "; ampcheck kernels reads PyTorch profiler (Kineto) and PaddlePaddle Chrome traces (.json, .json.gz), "
         "Nsight Systems SQLite exports and cuda_gpu_kern_sum CSVs, and Nsight Compute CSVs";
}

// A text whose first non-blank character opens JSON, or a CSV header.
enum class Kind { json, csv, sqlite, tar, empty, other };

Kind kind_of(std::string_view head) {
  if (head.empty()) return Kind::empty;
  if (head.substr(0, kSqliteMagic.size()) == kSqliteMagic) return Kind::sqlite;
  if (is_tar(head)) return Kind::tar;
  std::size_t i = 0;
  while (i < head.size() && is_space(head[i])) ++i;
  if (i < head.size() && (head[i] == '{' || head[i] == '[')) return Kind::json;
  // CSV: printable text with a header among its first lines (nsys and ncu may print a few
  // lines of their own before it): four columns or more, none longer than a column name.
  const std::size_t n = std::min<std::size_t>(head.size(), 4096);
  bool printable = true, header = false;
  int fields = 1, lines = 0;
  std::size_t field_start = i, longest = 0;
  for (std::size_t j = i; j < n && lines < 20; ++j) {
    const auto c = static_cast<unsigned char>(head[j]);
    if (c < 0x20 && !is_space(head[j])) printable = false;
    if (c == ',' || c == '\n') {
      longest = std::max(longest, j - field_start);
      field_start = j + 1;
    }
    if (c == ',') ++fields;
    if (c == '\n') {
      header = header || (fields >= 4 && longest <= 64);
      fields = 1;
      longest = 0;
      ++lines;
    }
  }
  header = header || (lines < 20 && fields >= 4 && std::max(longest, n - field_start) <= 64);
  if (i == head.size() && printable) return Kind::empty;
  return printable && header ? Kind::csv : Kind::other;
}

Profile from_source(ByteSource& source, Kind kind) {
  switch (kind) {
    case Kind::json: return read_chrome_trace(source);
    case Kind::csv: return read_nsight_csv(source);
    default: break;
  }
  throw ProfileError(not_a_profile(source.label(), source.peek(64)));
}

struct Member {
  std::string name;
  std::string data;
};

// A tar archive (POSIX ustar, GNU long names, pax path records), its regular files.
std::vector<Member> tar_members(ByteSource& source, std::uint64_t max_bytes) {
  std::vector<Member> out;
  std::string pending;  // the bytes read, not yet taken
  auto need = [&](std::size_t n) {
    while (pending.size() < n) {
      const std::string_view block = source.next();
      if (block.empty()) return false;
      pending.append(block);
    }
    return true;
  };
  auto take = [&](std::size_t n) {
    std::string s = pending.substr(0, n);
    pending.erase(0, n);
    return s;
  };
  auto octal = [](std::string_view f) {
    std::uint64_t v = 0;
    for (const char c : f) {
      if (c >= '0' && c <= '7') v = v * 8 + static_cast<std::uint64_t>(c - '0');
      else if (c != ' ' && c != '\0') break;
    }
    return v;
  };
  std::string long_name;
  std::uint64_t total = 0;
  while (need(kTarBlock)) {
    const std::string header = take(kTarBlock);
    if (header.find_first_not_of('\0') == std::string::npos) break;  // the end-of-archive blocks
    const std::uint64_t size = octal(std::string_view(header).substr(124, 12));
    const char type = header[156];
    std::string name(header.c_str(), strnlen(header.c_str(), 100));
    const std::string prefix(header.c_str() + 345, strnlen(header.c_str() + 345, 155));
    if (!prefix.empty()) name = prefix + "/" + name;
    const std::size_t padded = static_cast<std::size_t>((size + kTarBlock - 1) / kTarBlock * kTarBlock);
    total += size;
    if (total > max_bytes)
      throw ProfileError(source.label() + ": the archive holds more than " + byte_size_text(max_bytes) +
                         " of profiles; extract the ones wanted, or raise the bound with --max-size");
    if (!need(padded))
      throw ProfileError(source.label() + ": the tar archive ends inside " + name + ": the file was cut short");
    std::string data = take(padded);
    data.resize(static_cast<std::size_t>(size));
    if (type == 'L') {  // GNU: the next member's long name
      long_name = std::string(data.c_str());
      continue;
    }
    if (type == 'x') {  // pax: "<len> path=<name>\n" records
      const std::size_t at = data.find(" path=");
      if (at != std::string::npos) long_name = data.substr(at + 6, data.find('\n', at) - at - 6);
      continue;
    }
    if (!long_name.empty()) name = std::exchange(long_name, std::string());
    if (type == '0' || type == '\0') out.push_back({name, std::move(data)});
  }
  return out;
}

// Profiles from an archive or folder: each member or file that is one; Nsight Compute's
// CSVs of one run (one kernel per file, as ncu runs once per kernel) become one profile.
std::vector<Profile> gather(std::vector<Profile> found, const std::vector<std::string>& skipped,
                            const std::string& where) {
  std::vector<Profile> out;
  Profile ncu;
  bool have_ncu = false;
  for (Profile& p : found) {
    if (p.format != Format::ncu_csv) {
      out.push_back(std::move(p));
      continue;
    }
    if (!have_ncu) {
      ncu = std::move(p);
      ncu.source = where;
      have_ncu = true;
      continue;
    }
    std::int64_t at = ncu.kernels.empty() ? 0 : ncu.kernels.back().start_ns + std::max<std::int64_t>(ncu.kernels.back().duration_ns, 1);
    for (Kernel k : p.kernels) {
      k.name = ncu.intern(p.str(k.name));
      if (k.counters >= 0) {
        ncu.counters.push_back(p.counters[static_cast<std::size_t>(k.counters)]);
        k.counters = static_cast<std::int32_t>(ncu.counters.size() - 1);
      }
      k.start_ns = at;
      at += std::max<std::int64_t>(k.duration_ns, 1);
      ncu.kernels.push_back(k);
    }
  }
  if (have_ncu) out.push_back(std::move(ncu));
  if (out.empty()) {
    std::string some;
    for (std::size_t i = 0; i < skipped.size() && i < 3; ++i) some += (i ? "; " : "") + skipped[i];
    throw ProfileError(where + ": holds no profile" + (some.empty() ? std::string(" (it is empty)") : ": " + some));
  }
  for (Profile& p : out) {
    for (const std::string& s : skipped) p.notes.push_back("not read: " + s);
  }
  std::stable_sort(out.begin(), out.end(), [](const Profile& a, const Profile& b) {
    return (a.rank < 0 ? INT64_MAX : a.rank) < (b.rank < 0 ? INT64_MAX : b.rank);
  });
  return out;
}

std::vector<Profile> read_archive(ByteSource& source, const ReadOptions& options) {
  std::vector<Profile> found;
  std::vector<std::string> skipped;
  std::vector<Member> members = tar_members(source, options.max_bytes);
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.name < b.name; });
  for (Member& m : members) {
    const std::string label = source.label() + ":" + m.name;
    ByteSource member(label, std::move(m.data), options.max_bytes);
    try {
      const Kind kind = kind_of(member.peek(4096));
      if (kind == Kind::sqlite)
        throw ProfileError(label + ": an SQLite export inside an archive: extract it and read the file");
      if (kind != Kind::json && kind != Kind::csv) {
        skipped.push_back(label + ": not a profile");
        continue;
      }
      found.push_back(from_source(member, kind));
    } catch (const ProfileError& e) {
      skipped.push_back(e.what());
    }
  }
  return gather(std::move(found), skipped, source.label());
}

}  // namespace

// Profiles as read, not attributed yet: a folder's or an archive's are gathered first.
static std::vector<Profile> read_raw(const std::string& path, const ReadOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ProfileError(path + ": no such file or folder (check the path)");
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    std::vector<Profile> found;
    std::vector<std::string> skipped;
    for (const fs::path& f : files) {
      try {
        std::vector<Profile> some = read_raw(f.string(), options);
        for (Profile& p : some) found.push_back(std::move(p));
      } catch (const ProfileError& e) {
        skipped.push_back(e.what());
      }
    }
    return gather(std::move(found), skipped, path);
  }
  ByteSource source(path, options.max_bytes);
  const std::string_view head = source.peek(4096);
  const Kind kind = kind_of(head);
  switch (kind) {
    case Kind::empty:
      throw ProfileError(path + (source.gzipped() ? ": holds no text once decompressed" : ": is empty") +
                         ": not a profile (was the profiler stopped before it wrote anything?)");
    case Kind::sqlite: {
      if (source.gzipped())
        throw ProfileError(path + ": a gzipped SQLite database: decompress it (gunzip) and read the file");
      std::vector<Profile> one;
      one.push_back(read_nsys_sqlite(path, options.max_bytes));
      return one;
    }
    case Kind::tar: return read_archive(source, options);
    case Kind::json:
    case Kind::csv: {
      std::vector<Profile> one;
      one.push_back(from_source(source, kind));
      return one;
    }
    case Kind::other: break;
  }
  throw ProfileError(not_a_profile(path, head));
}

std::vector<Profile> read_profiles(const std::string& path, const ReadOptions& options) {
  std::vector<Profile> all = read_raw(path, options);
  for (Profile& p : all) attribute(p);
  return all;
}

Profile read_profile(const std::string& path, const ReadOptions& options) {
  std::vector<Profile> all = read_profiles(path, options);
  if (all.size() != 1)
    throw ProfileError(path + ": holds " + std::to_string(all.size()) +
                       " profiles (a folder or archive of several ranks' traces); read them with read_profiles");
  return std::move(all.front());
}

}  // namespace ampcheck::profiles
