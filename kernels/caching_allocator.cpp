// The caching allocator's bookkeeping (kernels/caching_allocator.h). Everything here is
// plain C++: the device is reached only through DeviceMemory.
#include "kernels/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>

namespace ampcheck::kernels {
namespace {

// "20.00 MiB (20971520 bytes)": the rounded figure to read, the exact one to compare.
std::string bytes_text(std::size_t n) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%zu bytes", n);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s (%zu bytes)", v, kUnits[unit], n);
  }
  return buf;
}

std::string pointer_text(const void* ptr) {
  std::ostringstream os;
  os << ptr;
  return os.str();
}

// Above this a request cannot be rounded to a segment size without overflow; no device
// has that much memory anyway.
constexpr std::size_t kLargestRequest = std::numeric_limits<std::size_t>::max() / 2;

}  // namespace

char* CachingAllocator::Block::ptr() const { return segment->base + offset; }

CachingAllocator::Segment::~Segment() {
  while (first != nullptr) {
    Block* next = first->next;
    delete first;
    first = next;
  }
}

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  // A search key has no segment: it sorts before every block of its stream and size.
  const std::uint64_t sa = a->segment != nullptr ? a->segment->id : 0;
  const std::uint64_t sb = b->segment != nullptr ? b->segment->id : 0;
  return std::tie(a->stream, a->size, sa, a->offset) < std::tie(b->stream, b->size, sb, b->offset);
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> device) : device_(std::move(device)) {
  if (!device_) throw std::invalid_argument("CachingAllocator needs a DeviceMemory (got none)");
}

CachingAllocator::~CachingAllocator() {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    synchronize_events();
    release_unused_segments();
  } catch (...) {
    // The runtime may already be shutting down at process exit; the memory goes with it.
  }
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes < kRound) return kRound;
  return (bytes + kRound - 1) / kRound * kRound;
}

std::size_t CachingAllocator::segment_size(std::size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kLargeDirect) return kLargeSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void CachingAllocator::add(AllocatorStat& stat, std::uint64_t amount) {
  stat.current += amount;
  stat.peak = std::max(stat.peak, stat.current);
}

void CachingAllocator::sub(AllocatorStat& stat, std::uint64_t amount) { stat.current -= amount; }

void* CachingAllocator::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > kLargestRequest) {
    ++stats_.oom_errors;
    throw OutOfMemoryError(out_of_memory_text(bytes, 0, "no device has that much memory"), bytes,
                           stats_.allocated_bytes.current, stats_.reserved_bytes.current);
  }
  const std::size_t rounded = round_size(bytes);
  const bool small_pool = rounded <= kSmallRequest;
  process_events();
  Block* block = find_free(small_pool, rounded, stream);
  if (block != nullptr) {
    ++stats_.cache_hits;
    pool_of(small_pool).erase(block);
  } else {
    ++stats_.cache_misses;
    block = take_segment(rounded, bytes, stream);
  }
  split(block, rounded);
  block->allocated = true;
  block->requested = bytes;
  live_.emplace(block->ptr(), block);
  add(stats_.allocated_bytes, block->size);
  add(stats_.requested_bytes, bytes);
  add(stats_.active_blocks, 1);
  return block->ptr();
}

CachingAllocator::Block* CachingAllocator::find_free(bool small_pool, std::size_t rounded, Stream stream) {
  FreeList& pool = pool_of(small_pool);
  Block key;
  key.stream = stream;
  key.size = rounded;
  const auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  return *it;
}

CachingAllocator::Block* CachingAllocator::take_segment(std::size_t rounded, std::size_t requested,
                                                        Stream stream) {
  const std::size_t size = segment_size(rounded);
  std::string why_not;
  void* base = device_->raw_alloc(size, why_not);
  if (base == nullptr) {
    // What the cache holds unused may be what the device lacks: give it all back, once.
    ++stats_.oom_retries;
    synchronize_events();
    release_unused_segments();
    why_not.clear();
    base = device_->raw_alloc(size, why_not);
  }
  if (base == nullptr) {
    ++stats_.oom_errors;
    throw OutOfMemoryError(out_of_memory_text(requested, size, why_not), requested,
                           stats_.allocated_bytes.current, stats_.reserved_bytes.current);
  }
  ++stats_.raw_allocs;
  add(stats_.reserved_bytes, size);
  add(stats_.segments, 1);
  auto segment = std::make_unique<Segment>();
  segment->id = next_segment_id_++;
  segment->base = static_cast<char*>(base);
  segment->size = size;
  segment->small_pool = rounded <= kSmallRequest;
  segment->stream = stream;
  segment->first = new Block;
  segment->first->segment = segment.get();
  segment->first->size = size;
  segment->first->stream = stream;
  Block* block = segment->first;
  segments_.emplace(segment->id, std::move(segment));
  return block;
}

std::string CachingAllocator::out_of_memory_text(std::size_t requested, std::size_t segment,
                                                 const std::string& why) const {
  std::string text = device_->name() + ": out of memory allocating " + bytes_text(requested);
  if (segment != 0) text += " (a new segment of " + bytes_text(segment) + ")";
  text += ", with " + bytes_text(stats_.allocated_bytes.current) + " allocated and " +
          bytes_text(stats_.reserved_bytes.current) +
          " reserved by this allocator after giving every unused cached segment back; the device says: " +
          (why.empty() ? std::string("nothing more") : why) +
          ". Free tensors that are no longer needed or use a smaller batch.";
  return text;
}

void CachingAllocator::split(Block* block, std::size_t rounded) {
  const std::size_t rest = block->size - rounded;
  // A small remainder is worth keeping from one minimum block up; a large one only if it
  // could serve a large request, so the large pool does not fill with slivers.
  const bool keep = block->segment->small_pool ? rest >= kRound : rest > kSmallRequest;
  if (!keep) return;
  auto* remainder = new Block;
  remainder->segment = block->segment;
  remainder->offset = block->offset + rounded;
  remainder->size = rest;
  remainder->stream = block->stream;
  remainder->prev = block;
  remainder->next = block->next;
  if (block->next != nullptr) block->next->prev = remainder;
  block->next = remainder;
  block->size = rounded;
  // The block came out of the free list or a new segment, so its right neighbour is not
  // free: the remainder has nothing to merge with.
  pool_of(block->segment->small_pool).insert(remainder);
}

CachingAllocator::Block* CachingAllocator::live_block(void* ptr, const char* what) const {
  const auto it = live_.find(ptr);
  if (it == live_.end())
    throw std::invalid_argument(std::string(what) + " of pointer " + pointer_text(ptr) + " that " +
                                device_->name() +
                                "'s caching allocator has not handed out (freed already, never allocated, "
                                "or from another allocator)");
  return it->second;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = live_block(ptr, "free");
  // Other streams may still be using it: it waits for what they have queued so far. The
  // events come first, so that a failure leaves the block live and the books unchanged.
  std::vector<Event> events;
  try {
    for (const Stream use : block->stream_uses) events.push_back(device_->record(use));
  } catch (...) {
    for (const Event e : events) device_->release(e);
    throw;
  }
  live_.erase(ptr);
  block->allocated = false;
  sub(stats_.allocated_bytes, block->size);
  sub(stats_.requested_bytes, block->requested);
  sub(stats_.active_blocks, 1);
  block->requested = 0;
  block->stream_uses.clear();
  if (events.empty()) {
    free_block(block);
    return;
  }
  ++stats_.pending_blocks;
  for (const Event e : events) pending_.push_back({e, block});
  block->pending_events = events.size();
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = live_block(ptr, "record_stream");
  if (stream != block->stream) block->stream_uses.insert(stream);
}

void CachingAllocator::free_block(Block* block) {
  FreeList& pool = pool_of(block->segment->small_pool);
  const auto is_free = [](const Block* b) { return b != nullptr && !b->allocated && b->pending_events == 0; };
  if (Block* prev = block->prev; is_free(prev)) {
    pool.erase(prev);
    block->offset = prev->offset;
    block->size += prev->size;
    block->prev = prev->prev;
    if (prev->prev != nullptr) prev->prev->next = block;
    if (block->segment->first == prev) block->segment->first = block;
    delete prev;
  }
  if (Block* next = block->next; is_free(next)) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void CachingAllocator::process_events() {
  std::vector<PendingEvent> waiting;
  for (const PendingEvent& p : pending_) {
    if (!device_->done(p.event)) {
      waiting.push_back(p);
      continue;
    }
    device_->release(p.event);
    if (--p.block->pending_events == 0) {
      --stats_.pending_blocks;
      free_block(p.block);
    }
  }
  pending_ = std::move(waiting);
}

void CachingAllocator::synchronize_events() {
  while (!pending_.empty()) {
    const PendingEvent p = pending_.front();
    device_->synchronize(p.event);
    device_->release(p.event);
    pending_.erase(pending_.begin());
    if (--p.block->pending_events == 0) {
      --stats_.pending_blocks;
      free_block(p.block);
    }
  }
}

void CachingAllocator::release_unused_segments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment& segment = *it->second;
    Block* only = segment.first;
    if (only->next != nullptr || only->allocated || only->pending_events != 0) {
      ++it;
      continue;
    }
    device_->raw_free(segment.base);
    ++stats_.raw_frees;
    sub(stats_.reserved_bytes, segment.size);
    sub(stats_.segments, 1);
    pool_of(segment.small_pool).erase(only);
    it = segments_.erase(it);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  synchronize_events();
  release_unused_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (AllocatorStat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.reserved_bytes,
                           &stats_.active_blocks, &stats_.segments})
    s->peak = s->current;
}

std::vector<SegmentSnapshot> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SegmentSnapshot> out;
  for (const auto& [id, segment] : segments_) {
    SegmentSnapshot s;
    s.id = id;
    s.base = segment->base;
    s.size = segment->size;
    s.small_pool = segment->small_pool;
    s.stream = segment->stream;
    for (const Block* b = segment->first; b != nullptr; b = b->next) {
      using State = SegmentSnapshot::Block::State;
      const State state = b->allocated ? State::allocated : b->pending_events != 0 ? State::pending : State::free;
      s.blocks.push_back({b->offset, b->size, state});
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string CachingAllocator::device_name() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return device_->name();
}

}  // namespace ampcheck::kernels
