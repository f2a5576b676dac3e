// The bytes of a profile, read a block at a time: a plain file, a gzip file (decompressed
// on the fly, every member of a multi-member stream), or bytes already in memory (a tar
// member). Nothing is read whole, and the total is bounded: a profile larger than
// `max_bytes` of text is refused with a message rather than read until memory runs out.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ampcheck::profiles {

// The default bound on a profile's text (decompressed): a reader keeps about half of it.
inline constexpr std::uint64_t kDefaultMaxBytes = std::uint64_t{2} << 30;

// "2.0 GB", "512 MB", "3.4 KB", "12 bytes".
std::string byte_size_text(std::uint64_t bytes);

class ByteSource {
 public:
  // Opens `path`; throws ProfileError naming it when it cannot be opened, is a directory,
  // or is larger than `max_bytes`.
  ByteSource(const std::string& path, std::uint64_t max_bytes);
  // Bytes in memory, named `label` in messages.
  ByteSource(std::string label, std::string data, std::uint64_t max_bytes);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Up to `n` bytes from the current position, not consumed (fewer at the end).
  std::string_view peek(std::size_t n);
  // The next block of bytes; empty at the end. Valid until the next call.
  std::string_view next();
  bool gzipped() const { return gzipped_; }
  const std::string& label() const { return label_; }
  std::uint64_t consumed() const { return consumed_; }  // text bytes handed out so far
  std::uint64_t file_size() const { return file_size_; }  // on disk (compressed), or the memory's

 private:
  bool fill();  // appends decoded bytes after end_; false at the end
  std::size_t read_raw(char* to, std::size_t n);
  void start_gzip();
  std::size_t inflate_into(char* to, std::size_t n);

  std::string label_;
  std::FILE* file_ = nullptr;
  std::string memory_;
  std::size_t memory_pos_ = 0;
  std::uint64_t file_size_ = 0;
  std::uint64_t max_bytes_;
  bool gzipped_ = false;
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;
  std::vector<char> buf_;
  std::size_t pos_ = 0, end_ = 0;
  std::uint64_t produced_ = 0;  // text bytes decoded
  std::uint64_t consumed_ = 0;
  bool eof_ = false;
};

}  // namespace ampcheck::profiles
