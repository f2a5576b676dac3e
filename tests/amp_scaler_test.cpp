// The loss scaler. Each dynamic behaviour is run against a reference state machine
// written here from that framework's documented rules (never by calling the scaler), on
// 10,000 random found_inf sequences with random parameters, comparing the whole history:
// scale, skipped flag and the framework's own counters, step by step. Then the published
// corner cases, the edges (DeepSpeed's error at the minimum, PyTorch's float32 ceiling),
// option validation, and the tensor path on a tiny model with hand-set gradients.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"

namespace ampcheck::amp {
namespace {

using Counters = std::map<std::string, std::int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();
// The sanitizer build checks the same code for memory and undefined behaviour on a
// quarter of the sequences (its instrumented arithmetic is several times slower).
#if defined(AMPCHECK_SANITIZED)
constexpr int kSequences = 2500;
#else
constexpr int kSequences = 10000;
#endif

// What a reference machine says one update does.
struct Expected {
  double scale = 0;
  bool skipped = false;
  Counters counters;
  bool raises = false;  // the framework stops the run instead of updating
};

// ---------------------------------------------------------------------------------------
// Reference machines, one per framework, each from its documentation and source.
// ---------------------------------------------------------------------------------------

// torch.amp.GradScaler docs: "If infs/NaNs are found, step() skips optimizer.step() and
// update() multiplies the scale by backoff_factor. If growth_interval unskipped iterations
// occur consecutively, update() multiplies the scale by growth_factor." The scale lives in
// a float32 tensor (each product taken in double and stored as float32) and "does not grow
// past fp32 bounds": a growth that would be Inf leaves the scale as it is.
// growth_tracker is the run of clean steps since the last Inf/NaN step or growth.
class TorchReference {
 public:
  explicit TorchReference(const TorchScaling& o) : o_(o), scale_(static_cast<float>(o.init_scale)) {}
  Expected next(bool found_inf) {
    if (found_inf) {
      clean_run_ = 0;
      scale_ = static_cast<float>(o_.backoff_factor * scale_);
    } else {
      clean_run_ += 1;
      if (clean_run_ == o_.growth_interval) {
        clean_run_ = 0;
        const float grown = static_cast<float>(o_.growth_factor * scale_);
        if (grown <= FLT_MAX) scale_ = grown;
      }
    }
    return {scale_, found_inf, {{"growth_tracker", clean_run_}}};
  }

 private:
  TorchScaling o_;
  float scale_;
  std::int64_t clean_run_ = 0;
};

// paddle.amp.GradScaler docs: the scale grows by incr_ratio after incr_every_n_steps
// consecutive finite steps, and shrinks by decr_ratio after decr_every_n_nan_or_inf steps
// with nan/inf; the count of bad steps restarts at every good step and the count of good
// steps at every bad one (AmpScaler._update), so only consecutive bad steps add up. The
// scale is a float32 tensor and `scale * ratio` runs in float32. The dygraph scaler has no
// floor or ceiling. With use_dynamic_loss_scaling=False the scale and counts never move,
// while a step with nan/inf is still skipped (GradScaler.step).
class PaddleReference {
 public:
  explicit PaddleReference(const PaddleScaling& o) : o_(o), scale_(static_cast<float>(o.init_loss_scaling)) {}
  Expected next(bool found_inf) {
    if (o_.use_dynamic_loss_scaling) {
      good_ = found_inf ? 0 : good_ + 1;
      bad_ = found_inf ? bad_ + 1 : 0;
      if (bad_ == o_.decr_every_n_nan_or_inf) {
        bad_ = 0;
        scale_ = scale_ * static_cast<float>(o_.decr_ratio);
      }
      if (good_ == o_.incr_every_n_steps) {
        good_ = 0;
        scale_ = scale_ * static_cast<float>(o_.incr_ratio);
      }
    }
    return {scale_, found_inf, {{"incr_count", good_}, {"decr_count", bad_}}};
  }

 private:
  PaddleScaling o_;
  float scale_;
  std::int64_t good_ = 0, bad_ = 0;
};

// DeepSpeed fp16 (DynamicLossScaler, deepspeed/runtime/fp16/loss_scaler.py): the scale
// starts at 2**initial_scale_power and moves by a factor 2. An overflow step is always
// skipped. It halves the scale (not below min_loss_scale) once the hysteresis budget is
// down to 1, and otherwise spends one unit of the budget; at the minimum with
// raise_error_at_min_scale the run stops instead. Growth: counting the clean steps since
// the last overflow (or since the start) including this one as c, the scale doubles when
// c > 1 and (c - 1) is a multiple of loss_scale_window -- the first growth comes on the
// window+1-th clean step, later ones every window steps. A growth refills the budget;
// with consecutive_hysteresis every clean step refills it instead.
// Counters, in DeepSpeed's names: cur_iter (steps so far), last_overflow_iter (index of
// the last overflow step, -1 before any), cur_hysteresis (the budget).
class DeepSpeedReference {
 public:
  explicit DeepSpeedReference(const DeepSpeedScaling& o)
      : o_(o), scale_(std::pow(2.0, o.initial_scale_power)), budget_(o.hysteresis) {}
  Expected next(bool overflow) {
    const std::int64_t t = steps_;
    if (overflow) {
      const bool shrinks = o_.hysteresis == 1 || budget_ == 1;
      if (shrinks && scale_ == o_.min_loss_scale && o_.raise_error_at_min_scale) {
        Expected e;
        e.raises = true;
        return e;
      }
      if (shrinks) {
        scale_ = scale_ / 2 < o_.min_loss_scale ? o_.min_loss_scale : scale_ / 2;
      } else {
        budget_ -= 1;
      }
      last_overflow_ = t;
    } else {
      const std::int64_t clean = t - last_overflow_;  // this one included
      if (o_.consecutive_hysteresis) budget_ = o_.hysteresis;
      if (clean > 1 && (clean - 1) % o_.loss_scale_window == 0) {
        scale_ *= 2;
        budget_ = o_.hysteresis;
      }
    }
    steps_ = t + 1;
    return {scale_, overflow,
            {{"cur_iter", steps_}, {"last_overflow_iter", last_overflow_}, {"cur_hysteresis", budget_}}};
  }

 private:
  DeepSpeedScaling o_;
  double scale_;
  std::int64_t budget_;
  std::int64_t steps_ = 0, last_overflow_ = -1;
};

// Apex (amp.initialize loss_scale="dynamic" | number, apex/amp/scaler.py): dynamic
// scaling halves the scale on an overflow (not below min_loss_scale when one is given;
// 0 means none) and skips the step; after scale_window consecutive unskipped steps it
// doubles, capped at max_loss_scale. A fixed loss_scale never moves and never skips (the
// overflow check is only made when dynamic), and its unskipped count only grows.
class ApexReference {
 public:
  explicit ApexReference(const ApexScaling& o) : o_(o), scale_(o.loss_scale) {}
  Expected next(bool overflow) {
    const bool skip = overflow && o_.dynamic;
    if (skip) {
      scale_ /= 2;
      if (o_.min_loss_scale > 0 && scale_ < o_.min_loss_scale) scale_ = o_.min_loss_scale;
      unskipped_ = 0;
    } else {
      unskipped_ += 1;
      if (o_.dynamic && unskipped_ == o_.scale_window) {
        scale_ = scale_ * 2 > o_.max_loss_scale ? o_.max_loss_scale : scale_ * 2;
        unskipped_ = 0;
      }
    }
    return {scale_, skip, {{"unskipped", unskipped_}}};
  }

 private:
  ApexScaling o_;
  double scale_;
  std::int64_t unskipped_ = 0;
};

// A fixed scale: never moves, a non-finite step is skipped.
class StaticReference {
 public:
  explicit StaticReference(const StaticScaling& o) : scale_(o.scale) {}
  Expected next(bool found_inf) { return {scale_, found_inf, {}}; }

 private:
  double scale_;
};

// ---------------------------------------------------------------------------------------
// Random parameters and sequences.
// ---------------------------------------------------------------------------------------

class Random {
 public:
  explicit Random(std::uint64_t seed) : rng_(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  std::int64_t integer(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return uniform(0, 1) < p; }
  // A power of two half the time, else an arbitrary value spread over the same octaves.
  double scale(int lo_exp, int hi_exp) {
    const int e = static_cast<int>(integer(lo_exp, hi_exp));
    return chance(0.5) ? std::ldexp(1.0, e) : std::ldexp(uniform(1, 2), e);
  }
  // Sequences from almost always clean to almost always overflowing, 1 to 250 steps.
  std::vector<bool> flags() {
    static constexpr double kRates[] = {0.0, 0.02, 0.08, 0.2, 0.4, 0.7, 0.95};
    const double p = kRates[integer(0, 6)];
    std::vector<bool> f(static_cast<std::size_t>(integer(1, 250)));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = chance(p);
    return f;
  }

 private:
  std::mt19937_64 rng_;
};

template <typename T>
std::string text(const T& v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}
std::string describe(const TorchScaling& o) {
  return "pytorch init_scale=" + text(o.init_scale) + " growth_factor=" + text(o.growth_factor) +
         " backoff_factor=" + text(o.backoff_factor) + " growth_interval=" + text(o.growth_interval);
}
std::string describe(const PaddleScaling& o) {
  return "paddle init_loss_scaling=" + text(o.init_loss_scaling) + " incr_ratio=" + text(o.incr_ratio) +
         " decr_ratio=" + text(o.decr_ratio) + " incr_every_n_steps=" + text(o.incr_every_n_steps) +
         " decr_every_n_nan_or_inf=" + text(o.decr_every_n_nan_or_inf) +
         " use_dynamic_loss_scaling=" + text(o.use_dynamic_loss_scaling);
}
std::string describe(const DeepSpeedScaling& o) {
  return "deepspeed initial_scale_power=" + text(o.initial_scale_power) + " loss_scale_window=" +
         text(o.loss_scale_window) + " hysteresis=" + text(o.hysteresis) + " min_loss_scale=" +
         text(o.min_loss_scale) + " consecutive_hysteresis=" + text(o.consecutive_hysteresis) +
         " raise_error_at_min_scale=" + text(o.raise_error_at_min_scale);
}
std::string describe(const ApexScaling& o) {
  return "apex dynamic=" + text(o.dynamic) + " loss_scale=" + text(o.loss_scale) + " min_loss_scale=" +
         text(o.min_loss_scale) + " max_loss_scale=" + text(o.max_loss_scale) + " scale_window=" +
         text(o.scale_window);
}
std::string describe(const StaticScaling& o) { return "static scale=" + text(o.scale); }
std::string describe(const std::vector<bool>& flags) {
  std::string s;
  for (bool f : flags) s += f ? '1' : '0';
  return s;
}

// What one random batch of sequences exercised, so a vacuous run cannot pass.
struct Coverage {
  std::int64_t sequences = 0, steps = 0, grew = 0, shrank = 0, held_on_inf = 0, raised = 0;
};

// Runs one sequence through the scaler's state machine and the reference; compares every
// event (scale before/after, found_inf, skipped, counters, step number), then the whole
// recorded history against the reference's. Returns false, with a message, on the first
// difference.
template <typename Options, typename Reference>
bool conforms(const Options& options, const std::vector<bool>& flags, Coverage& cov) {
  Reference ref(options);
  GradScaler scaler(options);
  std::vector<Expected> want;
  const auto where = [&](std::size_t t) {
    return describe(options) + " flags=" + describe(flags) + " at step " + std::to_string(t + 1) + ": ";
  };
  ++cov.sequences;
  for (std::size_t t = 0; t < flags.size(); ++t) {
    const Expected e = ref.next(flags[t]);
    const double before = scaler.scale();
    if (e.raises) {
      bool threw = false;
      try {
        scaler.update(flags[t]);
      } catch (const ScaleAtMinimumError&) {
        threw = true;
      }
      if (!threw || scaler.scale() != before || scaler.history().size() != t) {
        ADD_FAILURE() << where(t) << "DeepSpeed stops the run here (scale at min_loss_scale); the scaler "
                      << (threw ? "changed its state" : "did not throw ScaleAtMinimumError");
        return false;
      }
      ++cov.raised;
      break;
    }
    const ScalerEvent got = scaler.update(flags[t]);
    ++cov.steps;
    cov.grew += got.scale_after > before;
    cov.shrank += got.scale_after < before;
    cov.held_on_inf += flags[t] && got.scale_after == before;
    if (got.scale_after != e.scale || got.skipped != e.skipped || got.counters != e.counters ||
        got.found_inf != flags[t] || got.scale_before != before ||
        got.step != static_cast<std::int64_t>(t + 1)) {
      std::string want_counters, got_counters;
      for (const auto& [k, v] : e.counters) want_counters += " " + k + "=" + std::to_string(v);
      for (const auto& [k, v] : got.counters) got_counters += " " + k + "=" + std::to_string(v);
      ADD_FAILURE() << where(t) << "reference scale " << text(e.scale) << " skipped " << e.skipped << want_counters
                    << "; scaler scale " << text(got.scale_after) << " skipped " << got.skipped << got_counters
                    << " (before " << text(got.scale_before) << ", step " << got.step << ")";
      return false;
    }
    want.push_back(e);
  }
  const auto& history = scaler.history();
  if (history.size() != want.size()) {
    ADD_FAILURE() << describe(options) << ": history has " << history.size() << " events, expected " << want.size();
    return false;
  }
  for (std::size_t t = 0; t < want.size(); ++t) {
    if (history[t].scale_after != want[t].scale || history[t].skipped != want[t].skipped ||
        history[t].counters != want[t].counters) {
      ADD_FAILURE() << where(t) << "the recorded history differs from the events returned";
      return false;
    }
  }
  return true;
}

template <typename Reference, typename Make>
Coverage run_random(std::uint64_t seed, Make make_options) {
  Random r(seed);
  Coverage cov;
  int failures = 0;
  for (int i = 0; i < kSequences && failures < 3; ++i) {
    const auto options = make_options(r);
    const std::vector<bool> flags = r.flags();
    failures += !conforms<decltype(options), Reference>(options, flags, cov);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(cov.sequences, kSequences);
  return cov;
}

// ---------------------------------------------------------------------------------------
// Conformance on random sequences
// ---------------------------------------------------------------------------------------

TEST(ScalerConformance, PyTorchRandomSequences) {
  const Coverage cov = run_random<TorchReference>(0x7079746f726368, [](Random& r) {
    TorchScaling o;
    // Now and then near the top of the float32 range, where growth must stop.
    o.init_scale = r.chance(0.1) ? r.scale(120, 127) : r.scale(-20, 40);
    o.growth_factor = r.chance(0.5) ? 2.0 : r.uniform(1.01, 4.0);
    o.backoff_factor = r.chance(0.5) ? 0.5 : r.uniform(0.05, 0.99);
    o.growth_interval = r.integer(1, 10);
    return o;
  });
  EXPECT_GT(cov.grew, kSequences);
  EXPECT_GT(cov.shrank, kSequences);
}

TEST(ScalerConformance, PaddleRandomSequences) {
  const Coverage cov = run_random<PaddleReference>(0x706164646c65, [](Random& r) {
    PaddleScaling o;
    o.init_loss_scaling = r.chance(0.1) ? r.scale(120, 127) : r.scale(-20, 40);
    o.incr_ratio = r.chance(0.5) ? 2.0 : r.uniform(1.01, 4.0);
    o.decr_ratio = r.chance(0.5) ? 0.5 : r.uniform(0.05, 0.99);
    o.incr_every_n_steps = r.integer(1, 10);
    o.decr_every_n_nan_or_inf = r.integer(1, 4);
    o.use_dynamic_loss_scaling = !r.chance(0.1);
    return o;
  });
  EXPECT_GT(cov.grew, kSequences);
  EXPECT_GT(cov.shrank, kSequences);
  EXPECT_GT(cov.held_on_inf, kSequences);  // decr_every_n_nan_or_inf > 1 and static runs
}

TEST(ScalerConformance, DeepSpeedRandomSequences) {
  const Coverage cov = run_random<DeepSpeedReference>(0x6465657073706564, [](Random& r) {
    DeepSpeedScaling o;
    o.initial_scale_power = static_cast<int>(r.integer(-2, 24));
    o.loss_scale_window = r.integer(1, 10);
    o.hysteresis = r.integer(1, 4);
    o.min_loss_scale = r.chance(0.7) ? std::ldexp(1.0, static_cast<int>(r.integer(-3, 12))) : r.uniform(0.01, 64);
    o.consecutive_hysteresis = r.chance(0.5);
    o.raise_error_at_min_scale = r.chance(0.5);
    return o;
  });
  EXPECT_GT(cov.grew, kSequences);
  EXPECT_GT(cov.shrank, kSequences);
  EXPECT_GT(cov.held_on_inf, kSequences);  // hysteresis and the floor
  EXPECT_GT(cov.raised, kSequences / 20);
}

TEST(ScalerConformance, ApexRandomSequences) {
  const Coverage cov = run_random<ApexReference>(0x61706578, [](Random& r) {
    ApexScaling o;
    o.dynamic = !r.chance(0.1);
    o.loss_scale = r.scale(-4, 30);
    const double min_scale = r.chance(0.7) ? std::ldexp(1.0, static_cast<int>(r.integer(-3, 12))) : r.uniform(0.01, 64);
    o.min_loss_scale = r.chance(0.4) ? 0.0 : min_scale;  // 0: no minimum
    o.max_loss_scale = r.chance(0.5) ? 16777216.0 : r.scale(0, 30);
    o.scale_window = r.integer(1, 10);
    return o;
  });
  EXPECT_GT(cov.grew, kSequences);
  EXPECT_GT(cov.shrank, kSequences);
}

TEST(ScalerConformance, StaticRandomSequences) {
  const Coverage cov = run_random<StaticReference>(0x737461746963, [](Random& r) {
    return StaticScaling{r.scale(-10, 30)};
  });
  EXPECT_EQ(cov.grew + cov.shrank, 0);
}

// ---------------------------------------------------------------------------------------
// The published corner cases: interval 3, flags 0,0,0,1,0,0,0,0.
// ---------------------------------------------------------------------------------------

const std::vector<bool> kCornerFlags = {false, false, false, true, false, false, false, false};

double final_scale_ratio(const ScalingOptions& options) {
  GradScaler scaler(options);
  const double start = scaler.scale();
  for (bool f : kCornerFlags) scaler.update(f);
  return scaler.scale() / start;
}
template <typename Reference, typename Options>
double reference_ratio(const Options& o, double start) {
  Reference ref(o);
  double scale = start;
  for (bool f : kCornerFlags) scale = ref.next(f).scale;
  return scale / start;
}

TEST(ScalerCornerCases, PyTorchInterval3EndsAtTwiceTheStart) {
  const TorchScaling o{1024, 2.0, 0.5, 3};
  EXPECT_EQ(final_scale_ratio(o), 2.0);
  EXPECT_EQ(reference_ratio<TorchReference>(o, 1024), 2.0);
}

TEST(ScalerCornerCases, PaddleDecrEvery1EndsAtTwiceTheStart) {
  const PaddleScaling o{1024, 2.0, 0.5, 3, 1, true};
  EXPECT_EQ(final_scale_ratio(o), 2.0);
  EXPECT_EQ(reference_ratio<PaddleReference>(o, 1024), 2.0);
}

TEST(ScalerCornerCases, PaddleDecrEvery2EndsAtFourTimesTheStart) {
  const PaddleScaling o{1024, 2.0, 0.5, 3, 2, true};
  EXPECT_EQ(final_scale_ratio(o), 4.0);
  EXPECT_EQ(reference_ratio<PaddleReference>(o, 1024), 4.0);
}

TEST(ScalerCornerCases, DeepSpeedHysteresis1EndsAtTheStart) {
  DeepSpeedScaling o;
  o.initial_scale_power = 10;
  o.loss_scale_window = 3;
  o.hysteresis = 1;
  EXPECT_EQ(final_scale_ratio(o), 1.0);
  EXPECT_EQ(reference_ratio<DeepSpeedReference>(o, 1024), 1.0);
}

TEST(ScalerCornerCases, DeepSpeedHysteresis2EndsAtTwiceTheStart) {
  DeepSpeedScaling o;
  o.initial_scale_power = 10;
  o.loss_scale_window = 3;
  o.hysteresis = 2;
  EXPECT_EQ(final_scale_ratio(o), 2.0);
  EXPECT_EQ(reference_ratio<DeepSpeedReference>(o, 1024), 2.0);
}

// ---------------------------------------------------------------------------------------
// Edges, one framework at a time
// ---------------------------------------------------------------------------------------

std::vector<double> scales_after(GradScaler& scaler, const std::vector<bool>& flags) {
  std::vector<double> s;
  for (bool f : flags) s.push_back(scaler.update(f).scale_after);
  return s;
}

TEST(ScalerPyTorch, DoesNotGrowPastTheFloat32Range) {
  GradScaler at_top(TorchScaling{std::ldexp(1.0, 127), 2.0, 0.5, 1});
  const double top = std::ldexp(1.0, 127);
  EXPECT_EQ(scales_after(at_top, {false, false, false}), (std::vector<double>{top, top, top}));
  EXPECT_EQ(at_top.state().counters.at("growth_tracker"), 0);  // the interval still restarts
  EXPECT_EQ(at_top.update(true).scale_after, top / 2);

  GradScaler at_max(TorchScaling{FLT_MAX, 1.5, 0.5, 2});
  EXPECT_EQ(scales_after(at_max, {false, false, false, false}), (std::vector<double>(4, FLT_MAX)));

  // Below the ceiling a growth that stays finite is taken, rounded to float32.
  GradScaler near(TorchScaling{std::ldexp(1.0, 126), 1.5, 0.5, 1});
  EXPECT_EQ(near.update(false).scale_after, static_cast<double>(static_cast<float>(1.5 * std::ldexp(1.0, 126))));
}

TEST(ScalerPyTorch, ScaleIsAFloat32Value) {
  GradScaler scaler(TorchScaling{0.1, 2.0, 0.3, 5});
  EXPECT_EQ(scaler.scale(), static_cast<double>(0.1f));
  EXPECT_EQ(scaler.update(true).scale_after, static_cast<double>(static_cast<float>(0.3 * static_cast<double>(0.1f))));
}

TEST(ScalerPaddle, DecrCountOnlyAddsUpConsecutiveBadSteps) {
  // decr_every_n_nan_or_inf 2: bad, good, bad never decreases; bad, bad does.
  GradScaler scaler(PaddleScaling{1024, 2.0, 0.5, 100, 2, true});
  EXPECT_EQ(scales_after(scaler, {true, false, true, false, true}), (std::vector<double>(5, 1024)));
  EXPECT_EQ(scaler.state().counters.at("decr_count"), 1);
  EXPECT_EQ(scaler.update(true).scale_after, 512);
  EXPECT_EQ(scaler.state().counters.at("decr_count"), 0);
  // A bad step restarts the good count.
  EXPECT_EQ(scales_after(scaler, {false, false}), (std::vector<double>{512, 512}));
  EXPECT_EQ(scaler.state().counters.at("incr_count"), 2);
  scaler.update(true);
  EXPECT_EQ(scaler.state().counters.at("incr_count"), 0);
}

TEST(ScalerPaddle, DygraphGradScalerHasNoFloorAtOne) {
  // paddle.amp.GradScaler multiplies by decr_ratio without a floor (the floor of 1 is the
  // static-graph update_loss_scaling kernel's).
  GradScaler scaler(PaddleScaling{1, 2.0, 0.5, 1000, 1, true});
  EXPECT_EQ(scales_after(scaler, {true, true}), (std::vector<double>{0.5, 0.25}));
}

TEST(ScalerPaddle, FixedScalingKeepsScaleAndCountsButSkips) {
  GradScaler scaler(PaddleScaling{128, 2.0, 0.5, 1, 1, false});
  for (bool f : {true, false, false, true}) {
    const ScalerEvent e = scaler.update(f);
    EXPECT_EQ(e.scale_after, 128);
    EXPECT_EQ(e.skipped, f);
  }
  EXPECT_EQ(scaler.state().counters, (Counters{{"incr_count", 0}, {"decr_count", 0}}));
}

DeepSpeedScaling deepspeed(int power, std::int64_t window, std::int64_t hysteresis, double min_scale,
                           bool consecutive = false, bool raise = true) {
  DeepSpeedScaling o;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  o.min_loss_scale = min_scale;
  o.consecutive_hysteresis = consecutive;
  o.raise_error_at_min_scale = raise;
  return o;
}

TEST(ScalerDeepSpeed, FirstGrowthOnTheWindowPlusOneThCleanStep) {
  GradScaler scaler(deepspeed(4, 3, 2, 1));
  // 16 for three clean steps, doubled on the 4th, then every 3 steps.
  EXPECT_EQ(scales_after(scaler, std::vector<bool>(10, false)),
            (std::vector<double>{16, 16, 16, 32, 32, 32, 64, 64, 64, 128}));
  // After an overflow (absorbed by hysteresis), again window+1 clean steps.
  EXPECT_EQ(scales_after(scaler, {true, false, false, false, false}), (std::vector<double>{128, 128, 128, 128, 256}));
}

TEST(ScalerDeepSpeed, RaisesWhenTheScaleIsAlreadyAtTheMinimum) {
  GradScaler scaler(deepspeed(1, 1000, 1, 1));
  EXPECT_EQ(scaler.update(true).scale_after, 1);
  try {
    scaler.update(true);
    FAIL() << "expected ScaleAtMinimumError";
  } catch (const ScaleAtMinimumError& e) {
    EXPECT_NE(std::string(e.what()).find("Current loss scale already at minimum - cannot decrease scale anymore"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(scaler.scale(), 1);
  EXPECT_EQ(scaler.history().size(), 1u);
  EXPECT_EQ(scaler.state().counters.at("cur_iter"), 1);
}

TEST(ScalerDeepSpeed, HysteresisDelaysTheErrorAtTheMinimum) {
  GradScaler scaler(deepspeed(0, 1000, 2, 1));
  EXPECT_EQ(scaler.update(true).scale_after, 1);  // spends the budget
  EXPECT_THROW(scaler.update(true), ScaleAtMinimumError);
}

TEST(ScalerDeepSpeed, WithoutRaiseTheScaleStaysAtTheMinimum) {
  GradScaler scaler(deepspeed(2, 1000, 1, 1, false, false));
  EXPECT_EQ(scales_after(scaler, {true, true, true, true}), (std::vector<double>{2, 1, 1, 1}));
  EXPECT_TRUE(scaler.history().back().skipped);
}

TEST(ScalerDeepSpeed, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  // hysteresis 2: overflows separated by a clean step never shrink with consecutive
  // hysteresis, and do without it (the budget only refills at a growth).
  const std::vector<bool> flags = {true, false, true, false, true, false, true};
  GradScaler consecutive(deepspeed(10, 1000, 2, 1, true));
  EXPECT_EQ(consecutive.update(true).counters.at("cur_hysteresis"), 1);
  EXPECT_EQ(consecutive.update(false).counters.at("cur_hysteresis"), 2);
  for (bool f : flags) consecutive.update(f);
  EXPECT_EQ(consecutive.scale(), 1024);
  GradScaler plain(deepspeed(10, 1000, 2, 1, false));
  EXPECT_EQ(scales_after(plain, flags), (std::vector<double>{1024, 1024, 512, 512, 256, 256, 128}));
}

TEST(ScalerApex, DynamicScalingHonoursMinAndMax) {
  ApexScaling o;
  o.loss_scale = 8;
  o.min_loss_scale = 2;
  o.max_loss_scale = 16;
  o.scale_window = 2;
  GradScaler scaler(o);
  EXPECT_EQ(scales_after(scaler, {true, true, true, false, false, false, false, false, false}),
            (std::vector<double>{4, 2, 2, 2, 4, 4, 8, 8, 16}));
  EXPECT_EQ(scales_after(scaler, {false, false}), (std::vector<double>{16, 16}));  // capped
  EXPECT_EQ(ApexScaling{}.max_loss_scale, std::ldexp(1.0, 24));
}

TEST(ScalerApex, FixedLossScaleNeverMovesNorSkips) {
  ApexScaling o;
  o.dynamic = false;
  o.loss_scale = 128;
  o.scale_window = 2;
  GradScaler scaler(o);
  for (bool f : {true, false, false, true, false}) {
    const ScalerEvent e = scaler.update(f);
    EXPECT_EQ(e.scale_after, 128);
    EXPECT_FALSE(e.skipped);
  }
  EXPECT_EQ(scaler.state().counters.at("unskipped"), 5);
}

TEST(ScalerOptions, BehaviourNames) {
  EXPECT_EQ(behaviour_name(StaticScaling{}), "static");
  EXPECT_EQ(behaviour_name(TorchScaling{}), "pytorch");
  EXPECT_EQ(behaviour_name(PaddleScaling{}), "paddle");
  EXPECT_EQ(behaviour_name(DeepSpeedScaling{}), "deepspeed");
  EXPECT_EQ(behaviour_name(ApexScaling{}), "apex");
}

TEST(ScalerOptions, DefaultsAreTheFrameworksDefaults) {
  EXPECT_EQ(GradScaler().scale(), 65536);
  EXPECT_EQ(GradScaler(DeepSpeedScaling{}).scale(), 65536);  // 2**16
  EXPECT_EQ(GradScaler(ApexScaling{}).scale(), 65536);
  EXPECT_EQ(GradScaler(DeepSpeedScaling{}).state().counters,
            (Counters{{"cur_iter", 0}, {"last_overflow_iter", -1}, {"cur_hysteresis", 2}}));
}

// Each invalid field is rejected by name.
void expect_rejected(const ScalingOptions& options, const std::string& field) {
  try {
    GradScaler scaler(options);
    ADD_FAILURE() << "accepted an invalid " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(ScalerOptions, InvalidValuesAreRejectedByName) {
  expect_rejected(StaticScaling{0}, "scale");
  expect_rejected(StaticScaling{kInf}, "scale");
  expect_rejected(TorchScaling{-1, 2, 0.5, 10}, "init_scale");
  expect_rejected(TorchScaling{1e39, 2, 0.5, 10}, "init_scale");  // Inf as float32
  expect_rejected(TorchScaling{1024, 1.0, 0.5, 10}, "growth_factor");
  expect_rejected(TorchScaling{1024, 2, 1.0, 10}, "backoff_factor");
  expect_rejected(TorchScaling{1024, 2, 0.0, 10}, "backoff_factor");
  expect_rejected(TorchScaling{1024, 2, 0.5, 0}, "growth_interval");
  expect_rejected(PaddleScaling{std::nan(""), 2, 0.5, 10, 2, true}, "init_loss_scaling");
  expect_rejected(PaddleScaling{1024, 0.9, 0.5, 10, 2, true}, "incr_ratio");
  expect_rejected(PaddleScaling{1024, 2, 1.5, 10, 2, true}, "decr_ratio");
  expect_rejected(PaddleScaling{1024, 2, 0.5, 0, 2, true}, "incr_every_n_steps");
  expect_rejected(PaddleScaling{1024, 2, 0.5, 10, 0, true}, "decr_every_n_nan_or_inf");
  expect_rejected(deepspeed(2000, 10, 2, 1), "initial_scale_power");
  expect_rejected(deepspeed(16, 0, 2, 1), "loss_scale_window");
  expect_rejected(deepspeed(16, 10, 0, 1), "hysteresis");
  expect_rejected(deepspeed(16, 10, 2, 0), "min_loss_scale");
  ApexScaling apex;
  apex.loss_scale = 0;
  expect_rejected(apex, "loss_scale");
  apex = ApexScaling{};
  apex.min_loss_scale = -1;
  expect_rejected(apex, "min_loss_scale");
  apex = ApexScaling{};
  apex.max_loss_scale = 0;
  expect_rejected(apex, "max_loss_scale");
  apex = ApexScaling{};
  apex.scale_window = 0;
  expect_rejected(apex, "scale_window");
}

// ---------------------------------------------------------------------------------------
// The tensor path: a tiny model with hand-set gradients through scale / unscale_ / step /
// update. Values are dyadic, so every expected number is exact.
// ---------------------------------------------------------------------------------------

struct TinyModel {
  Tensor w16 = Tensor::from(std::vector<double>{1.0, -2.0, 0.5}, {3}, DType::f16).set_requires_grad();
  Tensor b32 = Tensor::from(std::vector<double>{0.25, 4.0}, {2}, DType::f32).set_requires_grad();
  Tensor d64 = Tensor::from(std::vector<double>{3.0}, {1}, DType::f64).set_requires_grad();
  optim::SGD opt{{{"w16", w16}, {"b32", b32}, {"d64", d64}}, 0.5};

  // Gradients as the backward of a loss scaled by `scale` would leave them (true value
  // times the scale, in each parameter's dtype).
  void set_scaled_grads(double scale, std::vector<double> w, std::vector<double> b, std::vector<double> d) {
    opt.zero_grad();
    for (double& v : w) v *= scale;
    for (double& v : b) v *= scale;
    for (double& v : d) v *= scale;
    w16.set_grad(Tensor::from(w, {3}, DType::f16));
    b32.set_grad(Tensor::from(b, {2}, DType::f32));
    d64.set_grad(Tensor::from(d, {1}, DType::f64));
  }
  std::vector<std::vector<double>> values() const { return {w16.to_f64(), b32.to_f64(), d64.to_f64()}; }
};

TEST(ScalerTensorPath, CleanStepsUpdateWithUnscaledGradientsAndBadStepsAreSkipped) {
  TinyModel m;
  GradScaler scaler(TorchScaling{1024, 2.0, 0.5, 2});
  std::vector<ScalerEvent> heard;
  scaler.set_listener([&](const ScalerEvent& e) { heard.push_back(e); });

  // 1: clean. unscale_ gives f32 gradients (f64 stays f64) divided by the scale.
  m.set_scaled_grads(1024, {0.5, -1.0, 2.0}, {0.25, 8.0}, {3.0});
  scaler.unscale_(m.opt);
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_EQ(m.opt.gradient(0).dtype(), DType::f32);
  EXPECT_EQ(m.opt.gradient(1).dtype(), DType::f32);
  EXPECT_EQ(m.opt.gradient(2).dtype(), DType::f64);
  EXPECT_EQ(m.opt.gradient(0).to_f64(), (std::vector<double>{0.5, -1.0, 2.0}));
  EXPECT_EQ(m.opt.gradient(1).to_f64(), (std::vector<double>{0.25, 8.0}));
  EXPECT_EQ(m.opt.gradient(2).to_f64(), (std::vector<double>{3.0}));
  try {
    scaler.unscale_(m.opt);
    ADD_FAILURE() << "a second unscale_ in one step was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unscale_() called twice in one step: ", 0), 0u) << e.what();
  }
  EXPECT_TRUE(scaler.step(m.opt));
  // p -= 0.5 * g
  EXPECT_EQ(m.values(), (std::vector<std::vector<double>>{{0.75, -1.5, -0.5}, {0.125, 0.0}, {1.5}}));
  ScalerEvent e = scaler.update();
  EXPECT_FALSE(e.found_inf);
  EXPECT_FALSE(e.skipped);
  EXPECT_EQ(e.scale_after, 1024);

  // 2: an f16 gradient overflowed to Inf; every parameter is left as it was.
  const auto before = m.values();
  m.set_scaled_grads(1024, {64.0, 1.0, 1.0}, {1.0, 1.0}, {1.0});  // 64 * 1024 > 65504: Inf
  EXPECT_FALSE(scaler.step(m.opt));  // unscales on its own
  EXPECT_TRUE(scaler.found_inf());
  EXPECT_EQ(m.values(), before);
  e = scaler.update();
  EXPECT_TRUE(e.found_inf);
  EXPECT_TRUE(e.skipped);
  EXPECT_EQ(e.scale_after, 512);

  // 3: a NaN in the f32 gradient alone.
  m.set_scaled_grads(512, {1.0, 1.0, 1.0}, {std::nan(""), 1.0}, {1.0});
  EXPECT_FALSE(scaler.step(m.opt));
  EXPECT_EQ(m.values(), before);
  EXPECT_EQ(scaler.update().scale_after, 256);

  // 4 and 5: clean at scale 256; after two clean steps the scale doubles.
  m.set_scaled_grads(256, {1.0, 0.5, -1.0}, {0.25, -2.0}, {1.0});
  EXPECT_TRUE(scaler.step(m.opt));
  EXPECT_EQ(m.values(), (std::vector<std::vector<double>>{{0.25, -1.75, 0.0}, {0.0, 1.0}, {1.0}}));
  EXPECT_EQ(scaler.update().scale_after, 256);
  m.set_scaled_grads(256, {0.5, 0.5, 0.5}, {0.0, 0.0}, {0.0});
  EXPECT_TRUE(scaler.step(m.opt));
  EXPECT_EQ(m.values(), (std::vector<std::vector<double>>{{0.0, -2.0, -0.25}, {0.0, 1.0}, {1.0}}));
  EXPECT_EQ(scaler.update().scale_after, 512);

  ASSERT_EQ(heard.size(), 5u);
  ASSERT_EQ(scaler.history().size(), 5u);
  for (std::size_t i = 0; i < heard.size(); ++i) {
    EXPECT_EQ(heard[i].step, static_cast<std::int64_t>(i + 1));
    EXPECT_EQ(heard[i].scale_after, scaler.history()[i].scale_after);
    EXPECT_EQ(heard[i].skipped, scaler.history()[i].skipped);
  }
}

TEST(ScalerTensorPath, ScaledLossIsRecordedByAutograd) {
  GradScaler scaler(TorchScaling{1024, 2.0, 0.5, 2000});
  Tensor w = Tensor::from(std::vector<double>{1.0, 2.0}, {2}, DType::f32).set_requires_grad();
  const Tensor x = Tensor::from(std::vector<double>{3.0, 4.0}, {2}, DType::f32);
  const Tensor scaled = scaler.scale(sum(mul(w, x)));
  EXPECT_EQ(scaled.item(), 1024 * 11.0);
  scaled.backward();
  EXPECT_EQ(w.grad().to_f64(), (std::vector<double>{3072, 4096}));
  optim::SGD opt({{"w", w}}, 1.0);
  scaler.unscale_(opt);
  EXPECT_EQ(opt.gradient(0).to_f64(), (std::vector<double>{3, 4}));
}

TEST(ScalerTensorPath, StaticScalingStillSkipsNonFiniteSteps) {
  TinyModel m;
  GradScaler scaler(StaticScaling{8});
  const auto before = m.values();
  m.set_scaled_grads(8, {1.0, kInf, 1.0}, {1.0, 1.0}, {1.0});
  EXPECT_FALSE(scaler.step(m.opt));
  EXPECT_EQ(m.values(), before);
  EXPECT_EQ(scaler.update().scale_after, 8);
}

// PyTorch's GradScaler(enabled=False) and Paddle's enable=False: step(opt) is opt.step(),
// so the Inf goes into the weights and no step is skipped.
TEST(ScalerTensorPath, ADisabledScalerStepsOnInf) {
  TinyModel m;
  GradScaler scaler(StaticScaling{1, false});
  m.set_scaled_grads(1, {1.0, kInf, 1.0}, {1.0, 1.0}, {1.0});
  EXPECT_TRUE(scaler.step(m.opt));
  EXPECT_TRUE(std::isinf(m.w16.to_f64()[1]));
  const ScalerEvent e = scaler.update();
  EXPECT_TRUE(e.found_inf);
  EXPECT_FALSE(e.skipped);
  EXPECT_EQ(e.scale_after, 1);
}

TEST(ScalerTensorPath, ApexFixedLossScaleStepsEvenOnOverflow) {
  // As Apex with a numeric loss_scale: no overflow check, so the update goes through.
  TinyModel m;
  ApexScaling o;
  o.dynamic = false;
  o.loss_scale = 8;
  GradScaler scaler(o);
  m.set_scaled_grads(8, {1.0, kInf, 1.0}, {1.0, 1.0}, {1.0});
  EXPECT_TRUE(scaler.step(m.opt));
  EXPECT_TRUE(std::isinf(m.w16.to_f64()[1]));
  const ScalerEvent e = scaler.update();
  EXPECT_TRUE(e.found_inf);
  EXPECT_FALSE(e.skipped);
}

TEST(ScalerTensorPath, StepTwiceAndUnscaleAfterStepThrow) {
  TinyModel m;
  GradScaler scaler(TorchScaling{1024, 2.0, 0.5, 2000});
  m.set_scaled_grads(1024, {1.0, 1.0, 1.0}, {1.0, 1.0}, {1.0});
  EXPECT_TRUE(scaler.step(m.opt));
  EXPECT_THROW(scaler.step(m.opt), std::logic_error);
  EXPECT_THROW(scaler.unscale_(m.opt), std::logic_error);
  scaler.update();
  m.set_scaled_grads(1024, {1.0, 1.0, 1.0}, {1.0, 1.0}, {1.0});
  EXPECT_NO_THROW(scaler.unscale_(m.opt));
}

// State save/load: a scaler restored mid-run continues exactly as the original.
TEST(ScalerState, RoundTripContinuesTheSameHistory) {
  const std::vector<ScalingOptions> all = {
      StaticScaling{4}, TorchScaling{1024, 2.0, 0.5, 3}, PaddleScaling{1024, 2.0, 0.5, 3, 2, true},
      deepspeed(10, 3, 2, 1, false, false), ApexScaling{true, 1024, 1, 1 << 20, 3}};
  Random r(7);
  for (const ScalingOptions& options : all) {
    SCOPED_TRACE(behaviour_name(options));
    GradScaler original(options);
    for (int i = 0; i < 17; ++i) original.update(r.chance(0.3));
    const GradScaler::State saved = original.state();
    GradScaler restored(options);
    restored.load_state(saved);
    EXPECT_EQ(restored.scale(), original.scale());
    EXPECT_EQ(restored.state().step, saved.step);
    EXPECT_EQ(restored.state().counters, saved.counters);
    for (int i = 0; i < 40; ++i) {
      const bool f = r.chance(0.3);
      const ScalerEvent a = original.update(f), b = restored.update(f);
      EXPECT_EQ(a.scale_after, b.scale_after);
      EXPECT_EQ(a.counters, b.counters);
      EXPECT_EQ(a.step, b.step);
    }
  }
}

TEST(ScalerState, LoadRejectsAnotherBehavioursState) {
  GradScaler torch(TorchScaling{});
  GradScaler paddle(PaddleScaling{});
  EXPECT_THROW(torch.load_state(paddle.state()), std::invalid_argument);
  GradScaler::State bad = torch.state();
  bad.scale = -1;
  EXPECT_THROW(torch.load_state(bad), std::invalid_argument);
}

}  // namespace
}  // namespace ampcheck::amp
