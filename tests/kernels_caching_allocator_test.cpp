// The caching allocator (kernels/caching_allocator.h) against a fake device whose
// addresses, capacity and events the test controls, and against an independent ledger
// of what a caller holds; then, where a GPU is usable, through cudaMalloc itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/caching_allocator.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/device_memory.h"

namespace ampcheck {
namespace {

using kernels::CachingAllocator;
using kernels::DeviceMemory;
using kernels::Event;
using kernels::OutOfMemoryError;
using kernels::SegmentSnapshot;
using kernels::Stream;
using State = SegmentSnapshot::Block::State;

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;
const Stream kS0{0}, kS1{1}, kS2{2};

// What the fake device knows; the test keeps it after the allocator takes the device.
struct FakeState {
  std::size_t capacity = SIZE_MAX;  // bytes in use above which raw_alloc says no
  bool descending = false;          // hand out addresses downward instead of upward
  std::uintptr_t next = 0x100000000;
  std::size_t in_use = 0;
  std::map<std::uintptr_t, std::size_t> regions;  // live raw regions: base -> size
  std::vector<std::size_t> alloc_sizes;            // every successful raw_alloc, in order
  std::vector<std::uintptr_t> alloc_bases;
  int raw_allocs = 0, raw_frees = 0, failed_allocs = 0, synchronizes = 0, bad_calls = 0;
  struct EventState {
    Stream stream;
    bool done = false, released = false;
  };
  std::vector<EventState> events;  // Event{i + 1} is events[i]

  void complete(Stream s) {
    for (EventState& e : events)
      if (e.stream == s) e.done = true;
  }
  int unreleased_events() const {
    return static_cast<int>(
        std::count_if(events.begin(), events.end(), [](const EventState& e) { return !e.released; }));
  }
  // Which raw region holds [p, p + n), as its index in alloc order; -1 when none does.
  int region_of(const void* p, std::size_t n) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = regions.upper_bound(a);
    if (it == regions.begin()) return -1;
    --it;
    if (a + n > it->first + it->second) return -1;
    const auto idx = std::find(alloc_bases.begin(), alloc_bases.end(), it->first) - alloc_bases.begin();
    return static_cast<int>(idx);
  }
};

class FakeDevice final : public DeviceMemory {
 public:
  explicit FakeDevice(std::shared_ptr<FakeState> state) : s_(std::move(state)) {}
  void* raw_alloc(std::size_t bytes, std::string& why_not) override {
    if (bytes > s_->capacity - s_->in_use) {
      ++s_->failed_allocs;
      why_not = "fake device full: " + std::to_string(s_->in_use) + " of " + std::to_string(s_->capacity) +
                " bytes in use";
      return nullptr;
    }
    std::uintptr_t base;
    if (s_->descending) {
      s_->next -= bytes + 4096;
      base = s_->next;
    } else {
      base = s_->next;
      s_->next += bytes + 4096;  // a gap: neighbouring segments are never contiguous
    }
    s_->regions[base] = bytes;
    s_->in_use += bytes;
    s_->alloc_sizes.push_back(bytes);
    s_->alloc_bases.push_back(base);
    ++s_->raw_allocs;
    return reinterpret_cast<void*>(base);
  }
  void raw_free(void* ptr) override {
    const auto it = s_->regions.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == s_->regions.end()) {
      ++s_->bad_calls;
      return;
    }
    s_->in_use -= it->second;
    s_->regions.erase(it);
    ++s_->raw_frees;
  }
  Event record(Stream stream) override {
    s_->events.push_back({stream});
    return Event{s_->events.size()};
  }
  bool done(Event e) override { return at(e).done; }
  void synchronize(Event e) override {
    ++s_->synchronizes;
    at(e).done = true;
  }
  void release(Event e) override {
    if (at(e).released) ++s_->bad_calls;
    at(e).released = true;
  }
  std::string name() const override { return "fake:0"; }

 private:
  FakeState::EventState& at(Event e) {
    const auto i = static_cast<std::size_t>(e);
    if (i == 0 || i > s_->events.size()) throw std::logic_error("fake device: unknown event");
    return s_->events[i - 1];
  }
  std::shared_ptr<FakeState> s_;
};

struct Fixture {
  std::shared_ptr<FakeState> state = std::make_shared<FakeState>();
  std::unique_ptr<CachingAllocator> alloc;
  explicit Fixture(std::size_t capacity = SIZE_MAX, bool descending = false) {
    state->capacity = capacity;
    state->descending = descending;
    if (descending) state->next = std::uintptr_t{1} << 46;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<FakeDevice>(state));
  }
  std::ptrdiff_t offset(const void* p) const {
    const int r = state->region_of(p, 1);
    return r < 0 ? -1 : static_cast<const char*>(p) - reinterpret_cast<const char*>(state->alloc_bases[r]);
  }
};

TEST(CachingAllocator, RoundsSizesUpTo512Bytes) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(MiB + 1), MiB + 512);
  Fixture f;
  void* a = f.alloc->allocate(1);
  void* b = f.alloc->allocate(513);
  void* c = f.alloc->allocate(0);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(f.offset(a), 0);
  EXPECT_EQ(f.offset(b), 512);  // the first block took exactly 512 bytes of the segment
  const auto st = f.alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 512u + 1024u);
  EXPECT_EQ(st.requested_bytes.current, 1u + 513u);
  EXPECT_EQ(st.active_blocks.current, 2u);
  f.alloc->free(c);  // nullptr: nothing
  f.alloc->free(a);
  f.alloc->free(b);
  EXPECT_EQ(f.alloc->stats().allocated_bytes.current, 0u);
}

TEST(CachingAllocator, SmallAndLargePoolsTakeSegmentsOfTheirOwnSizes) {
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB), 12 * MiB);
  Fixture f;
  void* small = f.alloc->allocate(MiB);
  void* large = f.alloc->allocate(MiB + 1);
  void* big = f.alloc->allocate(25 * MiB);  // more than the 20 MiB segment has left
  EXPECT_EQ(f.state->alloc_sizes, (std::vector<std::size_t>{2 * MiB, 20 * MiB, 26 * MiB}));
  // A large request is not carved from the small segment's free megabyte, nor a small
  // one from the large segment's free 19 MiB.
  void* small2 = f.alloc->allocate(4 * KiB);
  EXPECT_EQ(f.state->region_of(small2, 4 * KiB), 0);
  void* large2 = f.alloc->allocate(2 * MiB);
  EXPECT_EQ(f.state->region_of(large2, 2 * MiB), 1);
  const auto snap = f.alloc->snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_TRUE(snap[0].small_pool);
  EXPECT_FALSE(snap[1].small_pool);
  EXPECT_FALSE(snap[2].small_pool);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.current, 48 * MiB);
  for (void* p : {small, large, big, small2, large2}) f.alloc->free(p);
}

TEST(CachingAllocator, CacheHitAfterFreeTakesNothingFromTheDevice) {
  Fixture f;
  void* a = f.alloc->allocate(4000);
  f.alloc->free(a);
  void* b = f.alloc->allocate(4000);
  EXPECT_EQ(b, a);
  f.alloc->free(b);
  void* c = f.alloc->allocate(100 * KiB);  // any size the cached segment can hold
  EXPECT_EQ(c, a);
  f.alloc->free(c);
  void* l = f.alloc->allocate(5 * MiB);
  f.alloc->free(l);
  void* l2 = f.alloc->allocate(3 * MiB);
  EXPECT_EQ(l2, l);
  const auto st = f.alloc->stats();
  EXPECT_EQ(f.state->raw_allocs, 2);
  EXPECT_EQ(st.raw_allocs, 2u);
  EXPECT_EQ(st.cache_misses, 2u);
  EXPECT_EQ(st.cache_hits, 3u);
  f.alloc->free(l2);
}

std::vector<std::pair<std::size_t, State>> layout(const SegmentSnapshot& s) {
  std::vector<std::pair<std::size_t, State>> out;
  for (const auto& b : s.blocks) out.emplace_back(b.size, b.state);
  return out;
}

TEST(CachingAllocator, SplitsBlocksAndMergesFreeNeighbours) {
  Fixture f;
  void* a = f.alloc->allocate(4 * KiB);
  void* b = f.alloc->allocate(4 * KiB);
  void* c = f.alloc->allocate(4 * KiB);
  EXPECT_EQ(f.offset(a), 0);
  EXPECT_EQ(f.offset(b), 4 * 1024);
  EXPECT_EQ(f.offset(c), 8 * 1024);
  using L = std::vector<std::pair<std::size_t, State>>;
  const std::size_t rest = 2 * MiB - 12 * KiB;
  EXPECT_EQ(layout(f.alloc->snapshot()[0]),
            (L{{4 * KiB, State::allocated}, {4 * KiB, State::allocated}, {4 * KiB, State::allocated},
               {rest, State::free}}));
  f.alloc->free(b);
  EXPECT_EQ(layout(f.alloc->snapshot()[0]),
            (L{{4 * KiB, State::allocated}, {4 * KiB, State::free}, {4 * KiB, State::allocated}, {rest, State::free}}));
  f.alloc->free(a);  // merges with b on its right
  EXPECT_EQ(layout(f.alloc->snapshot()[0]),
            (L{{8 * KiB, State::free}, {4 * KiB, State::allocated}, {rest, State::free}}));
  // Best fit: 6 KiB goes to the 8 KiB hole, not the big remainder.
  void* d = f.alloc->allocate(6 * KiB);
  EXPECT_EQ(d, a);
  EXPECT_EQ(layout(f.alloc->snapshot()[0]),
            (L{{6 * KiB, State::allocated}, {2 * KiB, State::free}, {4 * KiB, State::allocated}, {rest, State::free}}));
  f.alloc->empty_cache();  // live blocks: the segment stays
  EXPECT_EQ(f.state->raw_frees, 0);
  f.alloc->free(c);  // merges with both neighbours
  EXPECT_EQ(layout(f.alloc->snapshot()[0]), (L{{6 * KiB, State::allocated}, {2 * MiB - 6 * KiB, State::free}}));
  f.alloc->free(d);
  EXPECT_EQ(layout(f.alloc->snapshot()[0]), (L{{2 * MiB, State::free}}));
  EXPECT_EQ(f.alloc->stats().reserved_bytes.current, 2 * MiB);
  f.alloc->empty_cache();
  EXPECT_EQ(f.state->raw_frees, 1);
  EXPECT_TRUE(f.state->regions.empty());
  EXPECT_TRUE(f.alloc->snapshot().empty());
  const auto st = f.alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, 0u);
  EXPECT_EQ(st.segments.current, 0u);
  EXPECT_EQ(st.raw_frees, 1u);
}

TEST(CachingAllocator, SplitsOnlyRemaindersWorthKeeping) {
  Fixture f;
  // Small pool: a remainder of one 512-byte block is kept.
  void* a = f.alloc->allocate(MiB);
  void* b = f.alloc->allocate(MiB - 512);
  void* c = f.alloc->allocate(512);
  EXPECT_EQ(f.state->raw_allocs, 1);
  EXPECT_EQ(f.offset(c), static_cast<std::ptrdiff_t>(2 * MiB - 512));
  // Large pool: a remainder of 1 MiB or less stays with the block (and counts as allocated).
  void* d = f.alloc->allocate(19 * MiB + 512);  // a 20 MiB segment, 1 MiB - 512 left
  EXPECT_EQ(f.alloc->stats().allocated_bytes.current, 2 * MiB + 20 * MiB);
  void* e = f.alloc->allocate(18 * MiB + 512);  // a 20 MiB segment, 2 MiB - 512 left: split
  EXPECT_EQ(f.alloc->stats().allocated_bytes.current, 2 * MiB + 20 * MiB + 18 * MiB + 512);
  const auto snap = f.alloc->snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[1].blocks.size(), 1u);
  EXPECT_EQ(snap[2].blocks.size(), 2u);
  void* g = f.alloc->allocate(1536 * KiB);  // fits the 2 MiB - 512 remainder
  EXPECT_EQ(f.state->raw_allocs, 3);
  EXPECT_EQ(f.offset(g), static_cast<std::ptrdiff_t>(18 * MiB + 512));
  for (void* p : {a, b, c, d, e, g}) f.alloc->free(p);
  f.alloc->empty_cache();
  EXPECT_TRUE(f.state->regions.empty());
}

TEST(CachingAllocator, BlocksFreedOnOneStreamAreNotHandedToAnother) {
  Fixture f;
  void* a = f.alloc->allocate(4 * KiB, kS1);
  f.alloc->free(a);
  void* b = f.alloc->allocate(4 * KiB, kS2);
  EXPECT_NE(b, a);
  EXPECT_EQ(f.state->raw_allocs, 2);  // the S1 segment is not S2's
  EXPECT_EQ(f.state->region_of(b, 4 * KiB), 1);
  void* c = f.alloc->allocate(4 * KiB, kS1);
  EXPECT_EQ(c, a);
  f.alloc->free(b);
  void* d = f.alloc->allocate(4 * KiB, kS0);  // neither S1's nor S2's free blocks
  EXPECT_EQ(f.state->region_of(d, 4 * KiB), 2);
  const auto snap = f.alloc->snapshot();
  EXPECT_EQ(snap[0].stream, kS1);
  EXPECT_EQ(snap[1].stream, kS2);
  EXPECT_EQ(snap[2].stream, kS0);
  f.alloc->free(c);
  f.alloc->free(d);
}

TEST(CachingAllocator, RecordStreamHoldsTheBlockUntilThatStreamsEventIsDone) {
  Fixture f;
  void* a = f.alloc->allocate(4 * KiB, kS1);
  f.alloc->record_stream(a, kS1);  // its own stream: nothing to wait for
  f.alloc->record_stream(a, kS2);
  f.alloc->record_stream(a, kS2);  // once per stream
  f.alloc->free(a);
  ASSERT_EQ(f.state->events.size(), 1u);
  EXPECT_EQ(f.state->events[0].stream, kS2);
  EXPECT_EQ(f.alloc->stats().pending_blocks, 1u);
  EXPECT_EQ(f.alloc->stats().allocated_bytes.current, 0u);  // the caller gave it back
  EXPECT_EQ(f.alloc->snapshot()[0].blocks[0].state, State::pending);
  void* b = f.alloc->allocate(4 * KiB, kS1);
  EXPECT_NE(b, a);  // S2 may still be reading a
  EXPECT_EQ(f.offset(b), 4 * 1024);
  f.state->complete(kS2);
  void* c = f.alloc->allocate(4 * KiB, kS1);
  EXPECT_EQ(c, a);  // the event was seen done at this allocation
  EXPECT_EQ(f.alloc->stats().pending_blocks, 0u);
  EXPECT_EQ(f.state->unreleased_events(), 0);
  EXPECT_EQ(f.state->synchronizes, 0);
  // empty_cache waits for what is pending, then gives the segment back.
  f.alloc->record_stream(c, kS0);
  f.alloc->record_stream(c, kS2);
  f.alloc->free(c);
  f.alloc->free(b);
  EXPECT_EQ(f.state->events.size(), 3u);
  f.alloc->empty_cache();
  EXPECT_EQ(f.state->synchronizes, 2);
  EXPECT_EQ(f.state->unreleased_events(), 0);
  EXPECT_EQ(f.state->raw_frees, 1);
  EXPECT_EQ(f.state->bad_calls, 0);
}

TEST(CachingAllocator, OutOfMemoryReleasesUnusedSegmentsRetriesThenSaysWhy) {
  Fixture f(24 * MiB);
  void* s = f.alloc->allocate(4 * KiB);                 // a cached 2 MiB segment whose block
  f.alloc->record_stream(s, kS2);                       // waits for S2
  f.alloc->free(s);
  f.alloc->free(f.alloc->allocate(1536 * KiB));         // a cached 20 MiB segment
  void* keep = f.alloc->allocate(22 * MiB);             // 22 + 22 > 24: both released, retried
  EXPECT_NE(keep, nullptr);
  auto st = f.alloc->stats();
  EXPECT_EQ(st.oom_retries, 1u);
  EXPECT_EQ(st.raw_frees, 2u);
  EXPECT_EQ(st.raw_allocs, 3u);
  EXPECT_EQ(st.reserved_bytes.current, 22 * MiB);
  EXPECT_EQ(f.state->failed_allocs, 1);
  EXPECT_EQ(f.state->synchronizes, 1);  // the retry waited for S2 to release the small segment
  try {
    f.alloc->allocate(13 * MiB);  // 22 + 14 > 24, and nothing cached to give back
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.requested(), 13 * MiB);
    EXPECT_EQ(e.allocated(), 22 * MiB);
    EXPECT_EQ(e.reserved(), 22 * MiB);
    EXPECT_NE(msg.find("fake:0: out of memory allocating 13.00 MiB (13631488 bytes)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(a new segment of 14.00 MiB (14680064 bytes))"), std::string::npos) << msg;
    EXPECT_NE(msg.find("22.00 MiB (23068672 bytes) allocated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("22.00 MiB (23068672 bytes) reserved"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fake device full: 23068672 of 25165824 bytes in use"), std::string::npos) << msg;
  }
  st = f.alloc->stats();
  EXPECT_EQ(st.oom_retries, 2u);
  EXPECT_EQ(st.oom_errors, 1u);
  EXPECT_EQ(st.allocated_bytes.current, 22 * MiB);
  EXPECT_EQ(f.state->regions.size(), 1u);  // the live segment was never given back
  static_assert(std::is_base_of_v<std::runtime_error, OutOfMemoryError>);
  EXPECT_THROW(f.alloc->allocate(SIZE_MAX), OutOfMemoryError);
  f.alloc->free(keep);
}

TEST(CachingAllocator, FreeingAnUnknownPointerNamesIt) {
  Fixture f;
  void* a = f.alloc->allocate(4 * KiB);
  void* bogus = reinterpret_cast<void*>(std::uintptr_t{0x1234});
  for (void* p : {bogus, static_cast<void*>(static_cast<char*>(a) + 512)}) {
    try {
      f.alloc->free(p);
      FAIL() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("free of pointer 0x"), std::string::npos) << msg;
      EXPECT_NE(msg.find("fake:0"), std::string::npos) << msg;
    }
  }
  f.alloc->free(a);
  EXPECT_THROW(f.alloc->free(a), std::invalid_argument);  // twice
  EXPECT_THROW(f.alloc->record_stream(a, kS1), std::invalid_argument);
  EXPECT_EQ(f.alloc->stats().active_blocks.current, 0u);
}

TEST(CachingAllocator, StatisticsAndResetPeak) {
  Fixture f;
  void* a = f.alloc->allocate(1000);  // 1024
  void* b = f.alloc->allocate(3000);  // 3072
  f.alloc->free(a);
  auto st = f.alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 3072u);
  EXPECT_EQ(st.allocated_bytes.peak, 4096u);
  EXPECT_EQ(st.requested_bytes.current, 3000u);
  EXPECT_EQ(st.requested_bytes.peak, 4000u);
  EXPECT_EQ(st.active_blocks.current, 1u);
  EXPECT_EQ(st.active_blocks.peak, 2u);
  EXPECT_EQ(st.reserved_bytes.current, 2 * MiB);
  f.alloc->reset_peak();
  st = f.alloc->stats();
  EXPECT_EQ(st.allocated_bytes.peak, 3072u);
  EXPECT_EQ(st.requested_bytes.peak, 3000u);
  EXPECT_EQ(st.active_blocks.peak, 1u);
  EXPECT_EQ(st.reserved_bytes.peak, 2 * MiB);
  f.alloc->free(b);
  f.alloc->empty_cache();
  st = f.alloc->stats();
  EXPECT_EQ(st.reserved_bytes.current, 0u);
  EXPECT_EQ(st.reserved_bytes.peak, 2 * MiB);
  EXPECT_EQ(st.segments.peak, 1u);
  EXPECT_EQ(st.raw_allocs, 1u);
  EXPECT_EQ(st.raw_frees, 1u);
  EXPECT_EQ(st.cache_misses, 1u);
  EXPECT_EQ(st.cache_hits, 1u);
}

// The caller's side of a random workload, kept independently of the allocator: what is
// live, what was freed but may still be used by another stream, and the expected totals.
struct Ledger {
  struct Live {
    std::uintptr_t ptr;
    std::size_t size;
    Stream stream;
  };
  struct Held {  // freed after record_stream: busy until the test completes that stream
    std::uintptr_t ptr;
    std::size_t size;
    Stream other;
    int freed_at;
  };
  std::map<std::uint64_t, Live> live;  // by allocation number: the test's choices never depend on addresses
  std::uint64_t next_number = 0;
  std::vector<Held> held;
  std::map<Stream, int> completed_at;  // the last step the test completed each stream's work
  bool busy(const Held& h) const {
    const auto it = completed_at.find(h.other);
    return it == completed_at.end() || it->second < h.freed_at;
  }
  std::uint64_t requested = 0, requested_peak = 0, rounded = 0, rounded_peak = 0, blocks_peak = 0;
  std::uint64_t large_live = 0;  // large blocks may carry up to 1 MiB unsplit remainder

  void note_peaks() {
    requested_peak = std::max(requested_peak, requested);
    rounded_peak = std::max(rounded_peak, rounded);
    blocks_peak = std::max<std::uint64_t>(blocks_peak, live.size());
  }
};

struct WorkloadResult {
  std::vector<std::pair<int, std::ptrdiff_t>> placements;  // (raw region, offset) of each allocation
  int ooms = 0;
  std::uint64_t most_pending = 0;  // the workload did exercise each path
  kernels::AllocatorStats last;
};

// `small_only`: every request <= 1 MiB, where a block's size is exactly its rounded
// request, so allocated bytes are checked exactly; otherwise within the 1 MiB a large
// block may keep.
void run_workload(std::uint64_t seed, bool small_only, bool descending, std::size_t capacity,
                  WorkloadResult& result) {
  Fixture f(capacity, descending);
  Ledger L;
  std::mt19937_64 rng(seed);
  const auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const Stream streams[] = {kS0, kS1, kS2};
  const auto busy_overlap = [&](std::uintptr_t p, std::size_t n) {
    for (const auto& [number, live] : L.live)
      if (p < live.ptr + live.size && live.ptr < p + n) return true;
    for (const Ledger::Held& h : L.held)
      if (L.busy(h) && p < h.ptr + h.size && h.ptr < p + n) return true;
    return false;
  };
  for (int step = 0; step < 10000; ++step) {
    const std::uint64_t op = uniform(0, 99);
    if (op < 45 || L.live.empty()) {
      std::size_t n;
      const std::uint64_t kind = small_only ? 0 : uniform(0, 9);
      if (kind < 7) n = static_cast<std::size_t>(uniform(1, MiB));
      else if (kind < 9) n = static_cast<std::size_t>(uniform(MiB + 1, 12 * MiB));
      else n = static_cast<std::size_t>(uniform(12 * MiB, 40 * MiB));
      const Stream s = streams[uniform(0, 2)];
      void* p = nullptr;
      const int failed_before = f.state->failed_allocs;
      try {
        p = f.alloc->allocate(n, s);
      } catch (const OutOfMemoryError& e) {
        ++result.ooms;
        EXPECT_EQ(e.requested(), n);
        EXPECT_GE(e.allocated(), L.rounded);
      }
      if (f.state->failed_allocs > failed_before) {
        // The device said no: the allocator waited for every stream before retrying.
        for (const Stream t : streams) L.completed_at[t] = step;
        L.held.clear();
      }
      if (p != nullptr) {
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        const int region = f.state->region_of(p, n);
        ASSERT_GE(region, 0) << "step " << step << ": block outside every segment the device gave";
        ASSERT_FALSE(busy_overlap(a, n)) << "step " << step << ": block overlaps one still in use";
        result.placements.emplace_back(region, f.offset(p));
        L.live[L.next_number++] = {a, n, s};
        L.requested += n;
        L.rounded += CachingAllocator::round_size(n);
        L.large_live += n > MiB;
        L.note_peaks();
      }
    } else if (op < 90) {
      auto it = L.live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(uniform(0, L.live.size() - 1)));
      void* p = reinterpret_cast<void*>(it->second.ptr);
      if (uniform(0, 4) == 0) {
        const Stream other = streams[uniform(0, 2)];
        f.alloc->record_stream(p, other);
        if (other != it->second.stream) L.held.push_back({it->second.ptr, it->second.size, other, step});
      }
      f.alloc->free(p);
      L.requested -= it->second.size;
      L.rounded -= CachingAllocator::round_size(it->second.size);
      L.large_live -= it->second.size > MiB;
      L.live.erase(it);
    } else if (op < 97) {
      const Stream s = streams[uniform(0, 2)];
      f.state->complete(s);
      L.completed_at[s] = step;
      std::erase_if(L.held, [&](const Ledger::Held& h) { return !L.busy(h); });
    } else if (op < 99) {
      f.alloc->empty_cache();  // waits for every stream: nothing is held after it
      for (const Stream s : streams) L.completed_at[s] = step;
      L.held.clear();
    } else {
      f.alloc->reset_peak();
      L.requested_peak = L.requested;
      L.rounded_peak = L.rounded;
      L.blocks_peak = L.live.size();
    }
    const auto st = f.alloc->stats();
    result.most_pending = std::max(result.most_pending, st.pending_blocks);
    ASSERT_EQ(st.requested_bytes.current, L.requested) << "step " << step;
    ASSERT_EQ(st.requested_bytes.peak, L.requested_peak) << "step " << step;
    ASSERT_EQ(st.active_blocks.current, L.live.size()) << "step " << step;
    ASSERT_EQ(st.active_blocks.peak, L.blocks_peak) << "step " << step;
    if (small_only) {
      ASSERT_EQ(st.allocated_bytes.current, L.rounded) << "step " << step;
      ASSERT_EQ(st.allocated_bytes.peak, L.rounded_peak) << "step " << step;
    } else {
      ASSERT_GE(st.allocated_bytes.current, L.rounded) << "step " << step;
      ASSERT_LE(st.allocated_bytes.current, L.rounded + L.large_live * MiB) << "step " << step;
    }
    ASSERT_EQ(st.reserved_bytes.current, f.state->in_use) << "step " << step;
    ASSERT_EQ(st.segments.current, f.state->regions.size()) << "step " << step;
    ASSERT_LE(st.allocated_bytes.current, st.reserved_bytes.current) << "step " << step;
    ASSERT_EQ(st.raw_allocs, static_cast<std::uint64_t>(f.state->raw_allocs)) << "step " << step;
    ASSERT_EQ(st.raw_frees, static_cast<std::uint64_t>(f.state->raw_frees)) << "step " << step;
  }
  result.last = f.alloc->stats();
  for (const auto& [number, live] : L.live) f.alloc->free(reinterpret_cast<void*>(live.ptr));
  f.alloc->empty_cache();
  const auto st = f.alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 0u);
  EXPECT_EQ(st.requested_bytes.current, 0u);
  EXPECT_EQ(st.reserved_bytes.current, 0u);
  EXPECT_EQ(st.pending_blocks, 0u);
  EXPECT_TRUE(f.state->regions.empty());
  EXPECT_EQ(f.state->raw_allocs, f.state->raw_frees);
  EXPECT_EQ(f.state->unreleased_events(), 0);
  EXPECT_EQ(f.state->bad_calls, 0);
  EXPECT_EQ(st.cache_hits + st.cache_misses, result.placements.size() + static_cast<std::size_t>(result.ooms));
}

TEST(CachingAllocator, RandomSmallWorkloadMatchesTheLedgerExactly) {
  WorkloadResult r;
  run_workload(1, true, false, SIZE_MAX, r);
  EXPECT_GT(r.placements.size(), 4000u);
  EXPECT_GT(r.most_pending, 0u);
  EXPECT_GT(r.last.cache_hits, 10 * r.last.cache_misses);
}

TEST(CachingAllocator, RandomMixedWorkloadMatchesTheLedger) {
  WorkloadResult r;
  run_workload(2, false, false, SIZE_MAX, r);
  EXPECT_EQ(r.ooms, 0);
  EXPECT_GT(r.most_pending, 0u);
  EXPECT_GT(r.last.raw_frees, 0u);  // the occasional empty_cache
}

TEST(CachingAllocator, RandomWorkloadUnderMemoryPressure) {
  WorkloadResult r;
  run_workload(3, false, false, 512 * MiB, r);
  EXPECT_GT(r.ooms, 0) << "the capacity should bite";
  EXPECT_GT(r.last.oom_retries, static_cast<std::uint64_t>(r.ooms)) << "some retries should succeed";
}

TEST(CachingAllocator, PlacementDoesNotDependOnDeviceAddresses) {
  WorkloadResult up, down;
  run_workload(4, false, false, 512 * MiB, up);
  ASSERT_FALSE(HasFatalFailure());
  run_workload(4, false, true, 512 * MiB, down);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_GT(up.placements.size(), 4000u);
  EXPECT_EQ(up.placements, down.placements);
  EXPECT_EQ(up.ooms, down.ooms);
}

TEST(CachingAllocator, ThreadsSharingOneAllocatorKeepTheBooks) {
  Fixture f;
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&f, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      std::vector<void*> mine;
      for (int i = 0; i < kRounds; ++i) {
        if (mine.size() < 8 && rng() % 2 == 0) {
          mine.push_back(f.alloc->allocate(static_cast<std::size_t>(rng() % (2 * MiB) + 1), Stream{rng() % 3}));
        } else if (!mine.empty()) {
          f.alloc->free(mine.back());
          mine.pop_back();
        }
      }
      for (void* p : mine) f.alloc->free(p);
    });
  for (std::thread& t : threads) t.join();
  const auto st = f.alloc->stats();
  EXPECT_EQ(st.allocated_bytes.current, 0u);
  EXPECT_EQ(st.requested_bytes.current, 0u);
  EXPECT_EQ(st.active_blocks.current, 0u);
  EXPECT_LE(st.active_blocks.peak, static_cast<std::uint64_t>(8 * kThreads));
  f.alloc->empty_cache();
  EXPECT_TRUE(f.state->regions.empty());
  EXPECT_EQ(f.alloc->stats().reserved_bytes.current, 0u);
}

TEST(CachingAllocator, CudaDeviceMemoryOfAMissingGpuSaysSo) {
  const int count = kernels::cuda::probe().device_count;
  try {
    kernels::cuda::cuda_device_memory(count);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda_device_memory"), std::string::npos) << msg;
  }
}

// Through cudaMalloc on GPU 0, where one is usable.
class CachingAllocatorGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::cuda::Probe& p = kernels::cuda::probe();
    if (p.device_count == 0) GTEST_SKIP() << "no usable GPU: " << p.why_none;
  }
};

TEST_F(CachingAllocatorGpu, AllocatesCachesAndReleasesThroughCudaMalloc) {
  CachingAllocator alloc(kernels::cuda::cuda_device_memory(0));
  EXPECT_EQ(alloc.device_name(), "cuda:0");
  void* a = alloc.allocate(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  alloc.free(a);
  void* b = alloc.allocate(1000);
  EXPECT_EQ(b, a);
  void* big = alloc.allocate(64 * MiB);
  ASSERT_NE(big, nullptr);
  // cudaStreamPerThread is the handle 0x2; an event recorded there with no work queued
  // completes, and empty_cache waits for it in any case.
  const Stream per_thread{2};
  alloc.record_stream(b, per_thread);
  alloc.free(b);
  alloc.free(big);
  try {
    alloc.allocate(std::size_t{1} << 50);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0: out of memory allocating"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaMalloc("), std::string::npos) << msg;
  }
  void* c = alloc.allocate(1000);  // the failed cudaMalloc left no error behind
  ASSERT_NE(c, nullptr);
  alloc.free(c);
  alloc.empty_cache();
  const auto st = alloc.stats();
  EXPECT_EQ(st.reserved_bytes.current, 0u);
  EXPECT_EQ(st.raw_allocs, st.raw_frees);
  EXPECT_EQ(st.oom_errors, 1u);
  EXPECT_EQ(st.pending_blocks, 0u);
}

}  // namespace
}  // namespace ampcheck
