// The CUPTI tracer's worker (inspector/cupti_worker.h) on buffers built by hand: a fake
// CUPTI lends its buffers, writes synthetic records into them and completes them out of
// order, on threads of its own or inside the worker's flush, while the test thread plays
// the training thread (op begins and ends, step ends). The join must come out as the
// correlator's (inspector/kernel_trace.h) fed the same records on one thread: same
// records on the same op instances, in the same order. Nothing here needs a GPU; the
// last test walks a buffer of CUPTI's own record structs, and with CUPTI's walker only
// where a GPU is seen.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/hooks.h"
#include "inspector/cupti_activity.h"
#include "inspector/cupti_worker.h"
#include "inspector/kernel_trace.h"
#include "kernels/cuda/cuda.h"

#if AMPCHECK_HAVE_CUDA
#include <cupti.h>  // CUPTI's own record structs, for the last test
#endif

namespace ampcheck::inspector {
namespace {

// A record as the fake CUPTI writes it into a buffer: fixed size, so the fake walk
// needs no CUPTI.
struct FakeRecord {
  enum class Kind : std::uint32_t { kernel, memcpy, correlation };
  Kind kind = Kind::kernel;
  std::uint32_t correlation = 0;
  std::uint64_t external = 0;  // correlation records
  std::uint64_t start = 0, end = 0;
  std::uint32_t name = 0;  // into kNames
  std::uint32_t stream = 7;
};

// The second is CUPTI's mangled name of a C++ kernel: the worker demangles it.
const std::vector<std::string> kNames = {"sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_cublas",
                                         "_Z5scaleIfEvPT_i", "nchwToNhwcKernel"};
const std::vector<std::string> kDemangled = {kNames[0], "void scale<float>(float*, int)", kNames[2]};

FakeRecord kernel(std::uint32_t correlation, std::uint64_t start, std::uint32_t name = 0) {
  return {FakeRecord::Kind::kernel, correlation, 0, start, start + 500, name};
}
FakeRecord copy(std::uint32_t correlation, std::uint64_t start) {
  return {FakeRecord::Kind::memcpy, correlation, 0, start, start + 50};
}
FakeRecord correlation(std::uint64_t external, std::uint32_t correlation_id) {
  return {FakeRecord::Kind::correlation, correlation_id, external};
}

// The records as the correlator gets them, names already demangled.
ActivityBatch to_batch(const std::vector<FakeRecord>& records, bool demangled) {
  ActivityBatch b;
  for (const FakeRecord& r : records) {
    switch (r.kind) {
      case FakeRecord::Kind::kernel: {
        KernelRecord k;
        k.name = (demangled ? kDemangled : kNames).at(r.name);
        k.start_ns = r.start;
        k.end_ns = r.end;
        k.stream = r.stream;
        k.correlation = r.correlation;
        b.kernels.push_back(std::move(k));
        break;
      }
      case FakeRecord::Kind::memcpy:
        b.memcpys.push_back({MemcpyKind::device_to_host, 64, r.start, r.end, 0, r.stream, r.correlation});
        break;
      case FakeRecord::Kind::correlation: b.correlations.push_back({r.external, r.correlation}); break;
    }
  }
  return b;
}

ActivityBatch fake_parse(std::uint8_t* buffer, std::size_t valid, std::vector<std::string>&) {
  std::vector<FakeRecord> records(valid / sizeof(FakeRecord));
  if (!records.empty()) std::memcpy(records.data(), buffer, records.size() * sizeof(FakeRecord));  // none: no pointer
  return to_batch(records, false);
}

// What CUPTI does with the worker as its sink: buffers lent and filled, then completed
// at once on another thread, or held until the worker's next flush asks for them.
class FakeCupti {
 public:
  // Records written into a buffer the worker lent, ready to hand back.
  cupti::CompletedBuffer filled(const std::vector<FakeRecord>& records) {
    std::size_t bytes = 0;
    std::uint8_t* p = worker->lend(bytes);
    EXPECT_NE(p, nullptr);
    EXPECT_GE(bytes, records.size() * sizeof(FakeRecord));
    if (p != nullptr) std::memcpy(p, records.data(), records.size() * sizeof(FakeRecord));
    return {p, records.size() * sizeof(FakeRecord), 0, {}};
  }
  // Records into a buffer of the worker's, held until the next flush.
  void hold(const std::vector<FakeRecord>& records) {
    cupti::CompletedBuffer b = filled(records);
    std::lock_guard lock(mutex_);
    held_.push_back(std::move(b));
  }
  // Records into buffers of the worker's, one per group, completed in the given order
  // from a thread of their own (CUPTI's), which is joined before this returns.
  void complete_on_another_thread(const std::vector<std::vector<FakeRecord>>& groups,
                                  const std::vector<std::size_t>& order) {
    std::vector<cupti::CompletedBuffer> buffers;
    for (const std::vector<FakeRecord>& g : groups) buffers.push_back(filled(g));
    std::thread cupti_thread([&] {
      for (const std::size_t i : order) worker->completed(std::move(buffers.at(i)));
    });
    cupti_thread.join();
  }
  // The worker's flush hook: hands back what is held, last held first.
  std::string flush(bool forced) {
    std::vector<cupti::CompletedBuffer> out;
    {
      std::lock_guard lock(mutex_);
      out.swap(held_);
      ++flushes;
      forced_flushes += forced ? 1 : 0;
      flush_thread = std::this_thread::get_id();
    }
    std::reverse(out.begin(), out.end());
    for (cupti::CompletedBuffer& b : out) worker->completed(std::move(b));
    return {};
  }
  ActivityWorkerHooks hooks() {
    return {[this](bool forced) { return flush(forced); }, fake_parse};
  }

  ActivityWorker* worker = nullptr;
  int flushes = 0, forced_flushes = 0;
  std::thread::id flush_thread;

 private:
  std::mutex mutex_;
  std::vector<cupti::CompletedBuffer> held_;
};

OpInstance op(std::uint64_t sequence, std::int64_t step, Op o, std::string module) {
  OpInstance i;
  i.sequence = sequence;
  i.step = step;
  i.op = o;
  i.module = std::move(module);
  return i;
}

cupti::BufferSettings small_buffers(std::size_t max_buffers = 64) { return {4096, max_buffers}; }

// Three steps of three ops each, every op launching a kernel and the middle one a copy
// too; each step's records split into three buffers that complete in a shuffled order
// (a kernel before its correlation record, a correlation record a step late, kernels
// that start in another order than they launched), and the same records fed to a
// correlator on this thread as the join's reference.
TEST(ActivityWorker, JoinsBuffersCompletedOutOfOrderOnAnotherThreadAsTheCorrelatorDoes) {
  FakeCupti cupti;
  KernelCorrelatorOptions options;
  options.ends_told = true;
  ActivityWorker worker(options, small_buffers(), cupti.hooks());
  cupti.worker = &worker;
  KernelCorrelator reference(options);

  std::mt19937 rng(7);
  std::uint32_t next_correlation = 100;
  std::uint64_t sequence = 0;
  std::vector<FakeRecord> late;  // correlation records that come with the next step's buffers
  for (std::int64_t step = 1; step <= 3; ++step) {
    std::vector<FakeRecord> records;
    for (int i = 0; i < 3; ++i) {
      const OpInstance instance = op(++sequence, step, i == 1 ? Op::matmul : Op::relu, "layers." + std::to_string(i));
      const std::uint64_t external = worker.begin_op(instance);
      EXPECT_EQ(reference.begin_op(instance), external);
      const std::uint32_t c = next_correlation++;
      // Later ops' kernels start earlier: the order out is by start time, not arrival.
      const std::uint64_t start = static_cast<std::uint64_t>(step) * 10'000 + static_cast<std::uint64_t>(3 - i) * 1'000;
      records.push_back(kernel(c, start, static_cast<std::uint32_t>(i)));
      if (i == 1) {
        const std::uint32_t c2 = next_correlation++;
        records.push_back(copy(c2, start + 600));
        records.push_back(correlation(external, c2));
      }
      if (step == 2 && i == 2) {
        late.push_back(correlation(external, c));
      } else {
        records.push_back(correlation(external, c));
      }
      worker.end_op(external);
      reference.end_op(external);
    }
    if (step == 3) records.insert(records.end(), late.begin(), late.end());
    std::vector<FakeRecord> shuffled = records;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const std::size_t third = shuffled.size() / 3;
    std::vector<std::vector<FakeRecord>> groups = {
        {shuffled.begin(), shuffled.begin() + static_cast<std::ptrdiff_t>(third)},
        {shuffled.begin() + static_cast<std::ptrdiff_t>(third), shuffled.begin() + static_cast<std::ptrdiff_t>(2 * third)},
        {shuffled.begin() + static_cast<std::ptrdiff_t>(2 * third), shuffled.end()}};
    cupti.complete_on_another_thread(groups, {2, 0, 1});
    worker.join_now(step);
    for (const std::vector<FakeRecord>& g : groups) reference.add(to_batch(g, true));
    reference.flush(step);
  }
  worker.finish();
  reference.finish();

  const ActivityResults got = worker.take();
  EXPECT_TRUE(got.errors.empty());
  EXPECT_EQ(got.stats, reference.stats());
  EXPECT_EQ(got.waiting, 0u);
  EXPECT_EQ(got.stats.attributed, 12u);  // 9 kernels and 3 copies
  EXPECT_EQ(got.stats.unattributed(), 0u);
  ASSERT_EQ(got.flushes.size(), 3u);  // the last step's late record came with step 3; finish had nothing new

  // Each op's own records, demangled, and within a flush the ops by sequence.
  std::uint64_t seen = 0;
  for (const KernelFlush& f : got.flushes) {
    for (std::size_t i = 1; i < f.ops.size(); ++i) EXPECT_LT(f.ops[i - 1].op.sequence, f.ops[i].op.sequence);
    for (const OpActivity& a : f.ops) {
      ++seen;
      const auto index = static_cast<std::size_t>((a.op.sequence - 1) % 3);
      EXPECT_EQ(a.op.module, "layers." + std::to_string(index));
      ASSERT_EQ(a.kernels.size(), 1u);
      EXPECT_EQ(a.kernels[0].name, kDemangled[index]);
      EXPECT_EQ(a.kernels[0].start_ns, static_cast<std::uint64_t>(a.op.step) * 10'000 + (3 - index) * 1'000);
      EXPECT_EQ(a.memcpys.size(), index == 1 ? 1u : 0u);
    }
  }
  EXPECT_EQ(seen, 9u);
  // The op whose correlation record came a step late is joined in step 3's flush.
  EXPECT_EQ(got.flushes[1].ops.size(), 2u);
  EXPECT_EQ(got.flushes[2].ops.size(), 4u);
}

// The same run fed to the worker and to the correlator gives equal flushes, one for one,
// whatever order the buffers completed in.
TEST(ActivityWorker, FlushesEqualTheCorrelatorsForEveryCompletionOrder) {
  KernelCorrelatorOptions options;
  options.ends_told = true;
  const std::vector<std::vector<std::size_t>> orders = {{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}};
  std::vector<KernelFlush> first;
  for (const std::vector<std::size_t>& order : orders) {
    FakeCupti cupti;
    ActivityWorker worker(options, small_buffers(), cupti.hooks());
    cupti.worker = &worker;
    KernelCorrelator reference(options);
    std::vector<KernelFlush> want;
    for (std::int64_t step = 1; step <= 2; ++step) {
      std::vector<std::vector<FakeRecord>> groups(4);
      for (std::uint32_t i = 0; i < 4; ++i) {
        const OpInstance instance = op(static_cast<std::uint64_t>(step) * 10 + i, step, Op::matmul, "m");
        const std::uint64_t external = worker.begin_op(instance);
        reference.begin_op(instance);
        const std::uint32_t c = static_cast<std::uint32_t>(step) * 100 + i;
        // Two kernels per op, equal in start time: the order out still is one.
        groups[i].push_back(kernel(c, 5'000, 0));
        groups[(i + 1) % 4].push_back(kernel(c, 5'000, 2));
        groups[(i + 2) % 4].push_back(correlation(external, c));
        worker.end_op(external);
        reference.end_op(external);
      }
      cupti.complete_on_another_thread(groups, order);
      worker.join_now(step);
      for (const std::vector<FakeRecord>& g : groups) reference.add(to_batch(g, true));
      want.push_back(reference.flush(step));
    }
    worker.finish();
    const ActivityResults got = worker.take();
    EXPECT_EQ(got.flushes, want);
    EXPECT_EQ(got.stats, reference.stats());
    if (first.empty()) {
      first = got.flushes;
    } else {
      EXPECT_EQ(got.flushes, first);
    }
  }
}

// A step end's ask returns while the worker's flush is still under way (CUPTI's flush
// runs on the worker, not on the asking thread), asks made meanwhile are served by one
// more join, labelled with the latest step, and buffers CUPTI completes inside a flush
// are in that flush's join.
TEST(ActivityWorker, AsksReturnAtOnceAndAsksMadeDuringAJoinShareTheNext) {
  std::mutex m;
  std::condition_variable cv;
  bool in_flush = false, release = false;
  int flushes = 0;
  std::thread::id flush_thread;
  std::vector<cupti::CompletedBuffer> per_flush[2];  // what CUPTI hands back in each
  ActivityWorker* w = nullptr;
  FakeCupti cupti;
  ActivityWorkerHooks hooks = cupti.hooks();
  hooks.flush = [&](bool) {
    std::unique_lock lock(m);
    const int n = flushes++;
    flush_thread = std::this_thread::get_id();
    if (n == 0) {
      in_flush = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    lock.unlock();
    for (cupti::CompletedBuffer& b : per_flush[std::min(n, 1)]) w->completed(std::move(b));
    per_flush[std::min(n, 1)].clear();
    return std::string();
  };
  ActivityWorker worker({}, small_buffers(), hooks);
  w = &worker;
  cupti.worker = &worker;
  const std::uint64_t a = worker.begin_op(op(1, 1, Op::relu, "a"));
  const std::uint64_t b = worker.begin_op(op(2, 4, Op::relu, "b"));
  per_flush[0].push_back(cupti.filled({kernel(1, 100), correlation(a, 1)}));
  per_flush[1].push_back(cupti.filled({kernel(2, 200), correlation(b, 2)}));

  const std::uint64_t first = worker.ask(1);
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return in_flush; });
  }
  // The worker is inside the flush: nothing joined yet, and more asks do not wait.
  EXPECT_TRUE(worker.take().flushes.empty());
  worker.ask(2);
  worker.ask(3);
  const std::uint64_t last = worker.ask(4);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  worker.wait(first);
  worker.wait(last);
  {
    std::lock_guard lock(m);
    EXPECT_EQ(flushes, 2);  // one for the first ask, one for the three made during it
    EXPECT_NE(flush_thread, std::this_thread::get_id());
  }
  const ActivityResults got = worker.take();
  ASSERT_EQ(got.flushes.size(), 2u);
  EXPECT_EQ(got.flushes[0].step, 1);
  ASSERT_EQ(got.flushes[0].ops.size(), 1u);
  EXPECT_EQ(got.flushes[0].ops[0].op.module, "a");
  EXPECT_EQ(got.flushes[1].step, 4);
  ASSERT_EQ(got.flushes[1].ops.size(), 1u);
  EXPECT_EQ(got.flushes[1].ops[0].op.module, "b");
}

// finish() (the tracer's stop) forces CUPTI's last buffers out and joins everything:
// records never asked for, a kernel whose correlation never came, an op never ended.
TEST(ActivityWorker, FinishForcesTheLastBuffersOutAndDrainsEverything) {
  FakeCupti cupti;
  KernelCorrelatorOptions options;
  options.ends_told = true;
  ActivityWorker worker(options, small_buffers(), cupti.hooks());
  cupti.worker = &worker;
  const std::uint64_t a = worker.begin_op(op(1, 1, Op::matmul, "a"));
  worker.end_op(a);
  const std::uint64_t b = worker.begin_op(op(2, 1, Op::relu, "b"));  // never ends
  cupti.complete_on_another_thread({{kernel(1, 100), correlation(a, 1)}}, {0});
  cupti.hold({kernel(2, 300), correlation(b, 2), kernel(3, 200)});
  worker.finish();
  EXPECT_EQ(cupti.forced_flushes, 1);

  const ActivityResults got = worker.take();
  ASSERT_EQ(got.flushes.size(), 1u);
  const KernelFlush& f = got.flushes[0];
  ASSERT_EQ(f.ops.size(), 2u);
  EXPECT_EQ(f.ops[0].op.module, "a");
  EXPECT_EQ(f.ops[1].op.module, "b");
  ASSERT_EQ(f.unattributed.kernels.size(), 1u);
  EXPECT_EQ(f.unattributed.kernels[0].correlation, 3u);
  EXPECT_EQ(got.stats.attributed, 2u);
  EXPECT_EQ(got.stats.no_correlation, 1u);
  EXPECT_EQ(got.waiting, 0u);

  // Nothing is joined after the last join.
  cupti.complete_on_another_thread({{kernel(4, 400)}}, {0});
  worker.join_now(2);
  EXPECT_TRUE(worker.take().flushes.empty());
}

// Buffers come back to a free list and are lent again; no more than max_buffers are out
// at once, counting those waiting to be walked.
TEST(ActivityWorker, LendsFromItsFreeListAndCapsTheBuffersOut) {
  FakeCupti cupti;
  ActivityWorker worker({}, {1001, 2}, cupti.hooks());
  cupti.worker = &worker;
  std::size_t bytes = 0;
  std::uint8_t* first = worker.lend(bytes);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(bytes, 1008u);  // rounded up to CUPTI's 8-byte record alignment
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 8, 0u);
  std::uint8_t* second = worker.lend(bytes);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(worker.lend(bytes), nullptr);  // CUPTI drops records and counts them
  worker.completed({first, 0, 0, {}});
  worker.join_now(1);  // walked and given back by now
  EXPECT_EQ(worker.lend(bytes), first);
  worker.completed({first, 0, 0, {}});
  worker.completed({second, 0, 0, {}});
  worker.join_now(2);
}

// What CUPTI's callbacks and the walk report comes out with the joins: the dropped
// count in the flush and the stats, the failed calls as errors.
TEST(ActivityWorker, DroppedRecordsAndErrorsComeOutWithTheJoin) {
  FakeCupti cupti;
  ActivityWorkerHooks hooks = cupti.hooks();
  hooks.parse = [](std::uint8_t* buffer, std::size_t valid, std::vector<std::string>& errors) {
    ActivityBatch b = fake_parse(buffer, valid, errors);
    errors.push_back("cuptiActivityGetNextRecord failed: CUPTI_ERROR_UNKNOWN (CUptiResult 999)");
    ++b.invalid;
    return b;
  };
  ActivityWorker worker({}, small_buffers(), hooks);
  cupti.worker = &worker;
  std::size_t bytes = 0;
  std::uint8_t* p = worker.lend(bytes);
  worker.completed({p, 0, 3, "cuptiActivityGetNumDroppedRecords failed: CUPTI_ERROR_UNKNOWN (CUptiResult 999)"});
  worker.join_now(1);
  const ActivityResults got = worker.take();
  ASSERT_EQ(got.flushes.size(), 1u);
  EXPECT_EQ(got.flushes[0].dropped, 3u);
  EXPECT_EQ(got.flushes[0].invalid, 1u);
  EXPECT_EQ(got.stats.dropped, 3u);
  ASSERT_EQ(got.errors.size(), 2u);
  EXPECT_TRUE(got.errors[0].starts_with("cuptiActivityGetNumDroppedRecords failed"));
  EXPECT_TRUE(got.errors[1].starts_with("cuptiActivityGetNextRecord failed"));
}

// The training thread's side (op begins and ends, step-end asks, as the tracer makes
// them) racing CUPTI's thread completing buffers and the worker walking them: every
// record ends on its op instance.
TEST(ActivityWorker, RecordsCompletedWhileOpsRunAllEndOnTheirOps) {
  FakeCupti cupti;
  KernelCorrelatorOptions options;
  options.ends_told = true;
  options.late_flushes = 1'000;  // the race decides which join a record is in, not whether it is joined
  ActivityWorker worker(options, small_buffers(), cupti.hooks());
  cupti.worker = &worker;

  constexpr int kSteps = 50, kOps = 20;
  std::mutex m;
  std::vector<std::vector<FakeRecord>> to_complete;  // filled by the training thread
  bool done = false;
  std::condition_variable cv;
  std::thread cupti_thread([&] {
    for (;;) {
      std::vector<std::vector<FakeRecord>> batch;
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return done || !to_complete.empty(); });
        batch.swap(to_complete);
        if (batch.empty() && done) return;
      }
      std::vector<std::size_t> order(batch.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
      cupti.complete_on_another_thread(batch, order);
    }
  });
  std::uint32_t c = 0;
  std::uint64_t ticket = 0;
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<FakeRecord> records;
    for (int i = 0; i < kOps; ++i) {
      const std::uint64_t external =
          worker.begin_op(op(static_cast<std::uint64_t>(step * kOps + i), step, Op::relu, "r"));
      ++c;
      records.push_back(kernel(c, c * 10ull));
      records.push_back(correlation(external, c));
      worker.end_op(external);
    }
    {
      std::lock_guard lock(m);
      to_complete.push_back(std::move(records));
    }
    cv.notify_one();
    const std::uint64_t next = worker.ask(step);
    worker.wait(std::exchange(ticket, next));
  }
  {
    std::lock_guard lock(m);
    done = true;
  }
  cv.notify_one();
  cupti_thread.join();
  worker.finish();
  const ActivityResults got = worker.take();
  EXPECT_EQ(got.stats.kernels, static_cast<std::uint64_t>(kSteps * kOps));
  EXPECT_EQ(got.stats.attributed, static_cast<std::uint64_t>(kSteps * kOps));
  EXPECT_EQ(got.stats.op_instances, static_cast<std::uint64_t>(kSteps * kOps));
  std::uint64_t kernels = 0;
  for (const KernelFlush& f : got.flushes)
    for (const OpActivity& a : f.ops) {
      ASSERT_EQ(a.kernels.size(), 1u);
      // The op of sequence step*kOps+i launched kernel (step-1)*kOps+i+1.
      const std::uint64_t launched = a.op.sequence - kOps + 1;
      EXPECT_EQ(a.kernels[0].correlation, launched);
      ++kernels;
    }
  EXPECT_EQ(kernels, static_cast<std::uint64_t>(kSteps * kOps));
}

#if AMPCHECK_HAVE_CUDA
// A buffer as CUPTI writes it: its own record structs, each at an 8-byte boundary.
struct CuptiBuffer {
  alignas(8) std::uint8_t bytes[4096] = {};
  std::size_t valid = 0;
  std::vector<std::size_t> sizes;  // of each record, as written
  template <class R>
  void put(const R& r) {
    std::memcpy(bytes + valid, &r, sizeof r);
    sizes.push_back(sizeof r);
    valid += (sizeof r + 7) / 8 * 8;
  }
};

CuptiBuffer cupti_records(std::uint64_t external) {
  CuptiBuffer b;
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "_Z5scaleIfEvPT_i";
  k.start = 1'000, k.end = 2'000;
  k.streamId = 7;
  k.gridX = k.gridY = k.gridZ = 1;
  k.blockX = 256, k.blockY = k.blockZ = 1;
  k.correlationId = 41;
  b.put(k);
  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 64;
  m.start = 2'100, m.end = 2'200;
  m.correlationId = 42;
  b.put(m);
  for (const std::uint32_t c : {41u, 42u}) {
    CUpti_ActivityExternalCorrelation e{};
    e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    e.externalId = external;
    e.correlationId = c;
    b.put(e);
  }
  return b;
}

// CUPTI's records walked on the worker and translated (cupti::translate): without a GPU
// the walk is the test's own, since CUPTI's library is opened only where a GPU is seen
// (kernels/cuda/gpu_libraries.h); with one, it is CUPTI's (cupti::parse), which must
// read the buffer the same.
TEST(ActivityWorker, JoinsABufferOfCuptisOwnRecords) {
  const bool gpu = kernels::cuda::probe().device_count > 0;
  ActivityWorkerHooks hooks;
  hooks.flush = [](bool) { return std::string(); };
  std::vector<std::size_t> sizes;
  hooks.parse = [&](std::uint8_t* buffer, std::size_t valid, std::vector<std::string>& errors) {
    if (gpu) return cupti::parse(buffer, valid, errors);
    ActivityBatch batch;
    std::size_t at = 0;
    for (const std::size_t size : sizes) {
      cupti::translate(buffer + at, batch);
      at += (size + 7) / 8 * 8;
    }
    EXPECT_EQ(at, valid);
    return batch;
  };
  ActivityWorker worker({}, {sizeof(CuptiBuffer), 4}, hooks);
  const std::uint64_t external = worker.begin_op(op(1, 1, Op::conv2d, "stem"));
  const CuptiBuffer records = cupti_records(external);
  sizes = records.sizes;
  std::size_t bytes = 0;
  std::uint8_t* p = worker.lend(bytes);
  ASSERT_NE(p, nullptr);
  std::memcpy(p, records.bytes, records.valid);
  std::thread cupti_thread([&] { worker.completed({p, records.valid, 0, {}}); });
  cupti_thread.join();
  worker.finish();
  const ActivityResults got = worker.take();
  EXPECT_TRUE(got.errors.empty()) << got.errors.front();
  ASSERT_EQ(got.flushes.size(), 1u);
  ASSERT_EQ(got.flushes[0].ops.size(), 1u);
  const OpActivity& a = got.flushes[0].ops[0];
  EXPECT_EQ(a.op.module, "stem");
  ASSERT_EQ(a.kernels.size(), 1u);
  EXPECT_EQ(a.kernels[0].name, "void scale<float>(float*, int)");
  EXPECT_EQ(a.kernels[0].block, (Dim3{256, 1, 1}));
  ASSERT_EQ(a.memcpys.size(), 1u);
  EXPECT_EQ(a.memcpys[0].kind, MemcpyKind::device_to_host);
}
#endif

}  // namespace
}  // namespace ampcheck::inspector
