// The per-device caching allocator: device memory is taken from the device in segments,
// cut into blocks, and handed out again from size-ordered free lists, so the device's own
// allocator (cudaMalloc) runs only when the cache has nothing that fits. Pure bookkeeping
// in the spirit of PyTorch's CUDA caching allocator; it reaches the device only through
// DeviceMemory, so it is compiled (and tested, against a fake device) in every build.
// docs/cuda-allocator.md explains the design and the statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace ampcheck::kernels {

// Opaque handles of the device: a stream (on CUDA, the cudaStream_t's value; 0 is the
// default stream) and an event recorded on one.
enum class Stream : std::uintptr_t {};
enum class Event : std::uintptr_t {};

// What the allocator needs of a device. Calls come with the allocator's mutex held.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A fresh region of `bytes`; nullptr when the device is out of memory, with the
  // device's own account of it in `why_not`. Any other failure throws.
  virtual void* raw_alloc(std::size_t bytes, std::string& why_not) = 0;
  virtual void raw_free(void* ptr) = 0;
  // An event recorded now on `stream`; it is done once the stream has finished the work
  // queued on it so far. The allocator gives each event back with release().
  virtual Event record(Stream stream) = 0;
  virtual bool done(Event event) = 0;
  virtual void synchronize(Event event) = 0;  // waits until done(event)
  virtual void release(Event event) = 0;
  // The device, for messages: "cuda:0".
  virtual std::string name() const = 0;
};

// Thrown when a request cannot be met even after every unused cached segment has been
// given back to the device.
class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(const std::string& what, std::size_t requested, std::size_t allocated,
                   std::size_t reserved)
      : std::runtime_error(what), requested_(requested), allocated_(allocated), reserved_(reserved) {}
  std::size_t requested() const { return requested_; }
  std::size_t allocated() const { return allocated_; }  // bytes in live blocks then
  std::size_t reserved() const { return reserved_; }    // bytes in segments then
 private:
  std::size_t requested_, allocated_, reserved_;
};

struct AllocatorStat {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;
};

struct AllocatorStats {
  AllocatorStat allocated_bytes;  // rounded sizes of the blocks handed out and not yet freed
  AllocatorStat requested_bytes;  // the sizes the callers asked for, of those same blocks
  AllocatorStat reserved_bytes;   // segments taken from the device and not given back
  AllocatorStat active_blocks;    // blocks handed out and not yet freed
  AllocatorStat segments;         // segments taken from the device and not given back
  std::uint64_t pending_blocks = 0;  // freed, waiting for events of other streams
  std::uint64_t raw_allocs = 0;      // successful DeviceMemory::raw_alloc calls
  std::uint64_t raw_frees = 0;       // DeviceMemory::raw_free calls
  std::uint64_t cache_hits = 0;      // requests met from the cache
  std::uint64_t cache_misses = 0;    // requests that needed a new segment
  std::uint64_t oom_retries = 0;     // times the device said no and the cache was emptied
  std::uint64_t oom_errors = 0;      // OutOfMemoryError thrown
};

// One segment as it stands, for tests and memory reports: its blocks in address order.
struct SegmentSnapshot {
  struct Block {
    std::size_t offset = 0, size = 0;
    enum class State { free, allocated, pending } state = State::free;
  };
  std::uint64_t id = 0;  // in the order the segments were taken from the device
  void* base = nullptr;
  std::size_t size = 0;
  bool small_pool = false;
  Stream stream{};
  std::vector<Block> blocks;
};

class CachingAllocator {
 public:
  // Sizes are rounded up to kRound. Requests up to kSmallRequest come from the small
  // pool, carved from kSmallSegment segments; larger ones from the large pool, whose
  // segments are kLargeSegment for requests under kLargeDirect and the request rounded
  // up to kLargeRound from there.
  static constexpr std::size_t kRound = 512;
  static constexpr std::size_t kSmallRequest = std::size_t{1} << 20;
  static constexpr std::size_t kSmallSegment = std::size_t{2} << 20;
  static constexpr std::size_t kLargeSegment = std::size_t{20} << 20;
  static constexpr std::size_t kLargeDirect = std::size_t{10} << 20;
  static constexpr std::size_t kLargeRound = std::size_t{2} << 20;

  explicit CachingAllocator(std::unique_ptr<DeviceMemory> device);
  // Waits for pending events and gives every segment without live blocks back; segments
  // that still hold live blocks are left to the process's end. Never throws.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for work ordered on `stream`; nullptr for 0 bytes.
  // Throws OutOfMemoryError when the device cannot give it even with the cache emptied.
  void* allocate(std::size_t bytes, Stream stream = Stream{0});
  // Gives the block back to the cache (not to the device); nullptr is ignored. Throws
  // std::invalid_argument for a pointer this allocator did not hand out.
  void free(void* ptr);
  // Work on `stream` uses the live block at `ptr`: once freed, the block is handed out
  // again only after the work queued on `stream` by then has finished.
  void record_stream(void* ptr, Stream stream);
  // Gives every segment that holds no live or pending block back to the device, after
  // waiting for pending events.
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peak();  // every peak becomes its current value
  std::vector<SegmentSnapshot> snapshot() const;
  std::string device_name() const;

  // The size a request is rounded to, and the segment a miss takes from the device (for
  // requests up to half the address space; allocate() refuses larger ones).
  static std::size_t round_size(std::size_t bytes);
  static std::size_t segment_size(std::size_t rounded);

 private:
  struct Segment;
  struct Block {
    Segment* segment = nullptr;
    std::size_t offset = 0, size = 0, requested = 0;
    Stream stream{};
    bool allocated = false;
    std::size_t pending_events = 0;
    Block* prev = nullptr;  // neighbours in the segment, in address order
    Block* next = nullptr;
    std::set<Stream> stream_uses;  // other streams recorded with record_stream
    char* ptr() const;
  };
  struct Segment {
    std::uint64_t id = 0;
    char* base = nullptr;
    std::size_t size = 0;
    bool small_pool = false;
    Stream stream{};
    Block* first = nullptr;  // owns the chain of its blocks
    Segment() = default;
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;
    ~Segment();
  };
  // Free blocks by stream, then size, then position: best fit, deterministic whatever
  // addresses the device returns (address order only inside one segment).
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeList = std::set<Block*, BySize>;

  FreeList& pool_of(bool small_pool) { return small_pool ? small_free_ : large_free_; }
  void process_events();
  void synchronize_events();
  void release_unused_segments();
  Block* find_free(bool small_pool, std::size_t rounded, Stream stream);
  Block* take_segment(std::size_t rounded, std::size_t requested, Stream stream);
  std::string out_of_memory_text(std::size_t requested, std::size_t segment, const std::string& why) const;
  void free_block(Block* block);  // into the free list, merged with free neighbours
  void split(Block* block, std::size_t rounded);
  Block* live_block(void* ptr, const char* what) const;
  static void add(AllocatorStat& stat, std::uint64_t amount);
  static void sub(AllocatorStat& stat, std::uint64_t amount);

  mutable std::mutex mutex_;
  std::unique_ptr<DeviceMemory> device_;
  std::map<std::uint64_t, std::unique_ptr<Segment>> segments_;  // by id
  FreeList small_free_, large_free_;
  std::unordered_map<void*, Block*> live_;  // handed out, by pointer: lookup only
  struct PendingEvent {
    Event event;
    Block* block;
  };
  std::vector<PendingEvent> pending_;  // in the order they were recorded
  std::uint64_t next_segment_id_ = 1;
  AllocatorStats stats_;
};

}  // namespace ampcheck::kernels
