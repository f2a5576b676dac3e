#include "profiles/byte_source.h"

#include <zlib.h>  // inflate: gzip members, with their header and trailer checked

#include <cerrno>
#include <cstring>  // std::strerror, std::memmove
#include <filesystem>
#include <system_error>

#include "profiles/profile_error.h"

namespace ampcheck::profiles {
namespace {

constexpr std::size_t kBlock = std::size_t{1} << 20;  // decoded bytes per block
constexpr std::size_t kInput = std::size_t{256} << 10;  // compressed bytes per read

std::string fix_for_size(std::uint64_t max_bytes) {
  return "a profile of a few steps is tens of MB: record fewer steps (torch.profiler's schedule(wait=1, warmup=1, "
         "active=1)) or raise the bound with --max-size (now " +
         byte_size_text(max_bytes) + ")";
}

}  // namespace

std::string byte_size_text(std::uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) std::snprintf(text, sizeof text, "%.1f GB", b / double(1 << 30));
  else if (bytes >= (std::uint64_t{1} << 20)) std::snprintf(text, sizeof text, "%.1f MB", b / double(1 << 20));
  else if (bytes >= 1024) std::snprintf(text, sizeof text, "%.1f KB", b / 1024.0);
  else std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  return text;
}

struct ByteSource::Inflater {
  z_stream z{};
  std::vector<unsigned char> in = std::vector<unsigned char>(kInput);
  bool member_done = false;  // the last member ended; more input may start another
  bool live = false;
  ~Inflater() {
    if (live) inflateEnd(&z);
  }
};

ByteSource::ByteSource(const std::string& path, std::uint64_t max_bytes) : label_(path), max_bytes_(max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ProfileError(path + ": is a directory, not a profile file");
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr)
    throw ProfileError(path + ": cannot be opened: " + std::strerror(errno) +
                       (errno == ENOENT ? " (check the path)" : ""));
  const auto size = std::filesystem::file_size(path, ec);
  file_size_ = ec ? 0 : size;
  if (file_size_ > max_bytes_)
    throw ProfileError(path + ": " + byte_size_text(file_size_) + ", more than the " + byte_size_text(max_bytes_) +
                       " a profile is read up to; " + fix_for_size(max_bytes_));
  buf_.resize(kBlock * 2);
  start_gzip();
}

ByteSource::ByteSource(std::string label, std::string data, std::uint64_t max_bytes)
    : label_(std::move(label)), memory_(std::move(data)), file_size_(memory_.size()), max_bytes_(max_bytes) {
  buf_.resize(kBlock * 2);
  start_gzip();
}

ByteSource::~ByteSource() {
  if (file_ != nullptr) std::fclose(file_);
}

std::size_t ByteSource::read_raw(char* to, std::size_t n) {
  if (file_ != nullptr) {
    const std::size_t got = std::fread(to, 1, n, file_);
    if (got < n && std::ferror(file_))
      throw ProfileError(label_ + ": read error: " + std::strerror(errno));
    return got;
  }
  const std::size_t got = std::min(n, memory_.size() - memory_pos_);
  std::memcpy(to, memory_.data() + memory_pos_, got);
  memory_pos_ += got;
  return got;
}

// gzip is recognised by its two magic bytes (RFC 1952), never by the file's name.
void ByteSource::start_gzip() {
  char head[2];
  const std::size_t got = read_raw(head, 2);
  if (got == 2 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b) {
    gzipped_ = true;
    inflater_ = std::make_unique<Inflater>();
    Inflater& f = *inflater_;
    f.in[0] = 0x1f;
    f.in[1] = 0x8b;
    f.z.next_in = f.in.data();
    f.z.avail_in = 2;
    if (inflateInit2(&f.z, 16 + MAX_WBITS) != Z_OK) throw ProfileError(label_ + ": zlib could not start");
    f.live = true;
    return;
  }
  std::memcpy(buf_.data(), head, got);
  end_ = got;
  produced_ = got;
}

std::size_t ByteSource::inflate_into(char* to, std::size_t n) {
  Inflater& f = *inflater_;
  f.z.next_out = reinterpret_cast<unsigned char*>(to);
  f.z.avail_out = static_cast<uInt>(n);
  while (f.z.avail_out > 0) {
    if (f.z.avail_in == 0) {
      const std::size_t got = read_raw(reinterpret_cast<char*>(f.in.data()), f.in.size());
      if (got == 0) {
        if (f.member_done) break;  // the end, after a complete member
        throw ProfileError(label_ + ": the gzip stream ends before its end marker: the file was cut short (" +
                           byte_size_text(produced_ + (n - f.z.avail_out)) +
                           " of text came out of it); copy it again, or let the profiler finish writing it");
      }
      f.z.next_in = f.in.data();
      f.z.avail_in = static_cast<uInt>(got);
    }
    if (f.member_done) {  // another member follows (`cat a.gz b.gz` is valid gzip)
      inflateReset(&f.z);
      f.member_done = false;
    }
    const int rc = inflate(&f.z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      f.member_done = true;
      continue;
    }
    if (rc == Z_BUF_ERROR) continue;  // needs more input
    if (rc != Z_OK)
      throw ProfileError(label_ + ": not valid gzip data (zlib: " + (f.z.msg ? f.z.msg : "error " + std::to_string(rc)) +
                         ") after " + byte_size_text(produced_ + (n - f.z.avail_out)) +
                         " of text: the file is damaged; copy it again");
  }
  return n - f.z.avail_out;
}

bool ByteSource::fill() {
  if (eof_) return false;
  if (pos_ > 0 && pos_ == end_) pos_ = end_ = 0;
  if (end_ + kBlock > buf_.size()) {  // make room: move what is left to the front
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  const std::size_t want = std::min(kBlock, buf_.size() - end_);
  const std::size_t got = gzipped_ ? inflate_into(buf_.data() + end_, want) : read_raw(buf_.data() + end_, want);
  if (got == 0) {
    eof_ = true;
    return false;
  }
  end_ += got;
  produced_ += got;
  if (produced_ > max_bytes_)
    throw ProfileError(label_ + ": more than " + byte_size_text(max_bytes_) + " of profile text" +
                       (gzipped_ ? " once decompressed" : "") + "; " + fix_for_size(max_bytes_));
  return true;
}

std::string_view ByteSource::peek(std::size_t n) {
  while (end_ - pos_ < n && fill()) {
  }
  return std::string_view(buf_.data() + pos_, std::min(n, end_ - pos_));
}

std::string_view ByteSource::next() {
  if (pos_ == end_ && !fill()) return {};
  const std::string_view out(buf_.data() + pos_, end_ - pos_);
  consumed_ += out.size();
  pos_ = end_;
  return out;
}

}  // namespace ampcheck::profiles
