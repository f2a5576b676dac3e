#include "reports/atomic_file.h"

#include <unistd.h>  // getpid, access

#include <cerrno>
#include <cstdio>
#include <cstring>  // std::strerror
#include <string>
#include <system_error>

namespace ampcheck::reports {

void check_writable_target(const std::filesystem::path& path) {
  // A directory is never the target: checked before anything is created, since the
  // temporary file would go into the directory's parent, outside the target.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw WriteError("cannot write " + path.string() + ": it is a directory; give the path of a file to write " +
                     "(a new name inside " + path.string() + ", for example)");
  if (!path.has_filename())
    throw WriteError("cannot write " + path.string() + ": the path ends with '/', so it names a directory; " +
                     "give the path of a file to write");
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir, ec))
    throw WriteError("cannot write " + path.string() + ": " +
                     (std::filesystem::exists(dir, ec) ? dir.string() + " is not a directory; give a path in one"
                                                       : "directory " + dir.string() +
                                                             " does not exist (create it first)"));
  if (::access(dir.c_str(), W_OK) != 0)
    throw WriteError("cannot write " + path.string() + ": directory " + dir.string() + " is not writable: " +
                     std::strerror(errno));
}

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  check_writable_target(path);
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::filesystem::path tmp =
      dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()));
  auto fail = [&](const std::string& what) -> WriteError {
    const std::string reason = std::strerror(errno);
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return WriteError("cannot write " + path.string() + ": " + what + ": " + reason);
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw fail("creating " + tmp.string());
  const bool wrote = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  // No fsync: the rename is what makes the write all-or-nothing for every reader, and
  // ext4, XFS and btrfs flush a file renamed over another before the rename commits. An
  // fsync waits behind every other writer's dirty data on the disk: measured 0.3-0.8 s
  // per report here while another process wrote gigabytes (a package install beside a
  // CI's tests), once per run of a check that writes dozens.
  const bool flushed = std::fflush(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !flushed || !closed) throw fail("writing " + tmp.string());
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw fail("renaming " + tmp.string() + " into place");
}

}  // namespace ampcheck::reports
