// AMP config import: every sample in samples/configs/ against the values each framework
// documents (defaults cited from its source, not read back from ours), every bad config
// in tests/data/bad_configs/ against the key its message must name, and the round trip
// through ampcheck's own JSON form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "engine/amp/config.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"

namespace ampcheck::amp {
namespace {

const std::string kRoot = AMPCHECK_SOURCE_DIR;

Config sample(const std::string& name) { return load_config(kRoot + "/samples/configs/" + name); }

// The ConfigError's message, or a failure if none was thrown.
std::string error_of(const std::string& json_text) {
  try {
    parse_config(json_text, "test");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for " << json_text;
  return {};
}

bool has_note(const Config& c, const std::string& part) {
  for (const std::string& n : c.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.style, b.style);
  ASSERT_EQ(a.fp8.has_value(), b.fp8.has_value());
  if (a.fp8) {
    EXPECT_EQ(a.fp8->recipe, b.fp8->recipe);
    EXPECT_EQ(a.fp8->keep, b.fp8->keep);
  }
  EXPECT_EQ(a.amp.level, b.amp.level);
  EXPECT_EQ(a.amp.dtype, b.amp.dtype);
  EXPECT_EQ(a.amp.custom_white_list, b.amp.custom_white_list);
  EXPECT_EQ(a.amp.custom_black_list, b.amp.custom_black_list);
  EXPECT_EQ(a.amp.keep_norm_fp32, b.amp.keep_norm_fp32);
  EXPECT_EQ(a.amp.master_weight, b.amp.master_weight);
  EXPECT_EQ(a.notes, b.notes);
  ASSERT_EQ(a.scaling.index(), b.scaling.index());
  if (const auto* x = std::get_if<StaticScaling>(&a.scaling)) {
    EXPECT_EQ(x->scale, std::get<StaticScaling>(b.scaling).scale);
    EXPECT_EQ(x->skip_nonfinite, std::get<StaticScaling>(b.scaling).skip_nonfinite);
  } else if (const auto* t = std::get_if<TorchScaling>(&a.scaling)) {
    const auto& u = std::get<TorchScaling>(b.scaling);
    EXPECT_EQ(t->init_scale, u.init_scale);
    EXPECT_EQ(t->growth_factor, u.growth_factor);
    EXPECT_EQ(t->backoff_factor, u.backoff_factor);
    EXPECT_EQ(t->growth_interval, u.growth_interval);
  } else if (const auto* p = std::get_if<PaddleScaling>(&a.scaling)) {
    const auto& q = std::get<PaddleScaling>(b.scaling);
    EXPECT_EQ(p->init_loss_scaling, q.init_loss_scaling);
    EXPECT_EQ(p->incr_ratio, q.incr_ratio);
    EXPECT_EQ(p->decr_ratio, q.decr_ratio);
    EXPECT_EQ(p->incr_every_n_steps, q.incr_every_n_steps);
    EXPECT_EQ(p->decr_every_n_nan_or_inf, q.decr_every_n_nan_or_inf);
    EXPECT_EQ(p->use_dynamic_loss_scaling, q.use_dynamic_loss_scaling);
  } else if (const auto* d = std::get_if<DeepSpeedScaling>(&a.scaling)) {
    const auto& e = std::get<DeepSpeedScaling>(b.scaling);
    EXPECT_EQ(d->initial_scale_power, e.initial_scale_power);
    EXPECT_EQ(d->loss_scale_window, e.loss_scale_window);
    EXPECT_EQ(d->hysteresis, e.hysteresis);
    EXPECT_EQ(d->min_loss_scale, e.min_loss_scale);
    EXPECT_EQ(d->consecutive_hysteresis, e.consecutive_hysteresis);
    EXPECT_EQ(d->raise_error_at_min_scale, e.raise_error_at_min_scale);
  } else {
    const auto& m = std::get<ApexScaling>(a.scaling);
    const auto& n = std::get<ApexScaling>(b.scaling);
    EXPECT_EQ(m.dynamic, n.dynamic);
    EXPECT_EQ(m.loss_scale, n.loss_scale);
    EXPECT_EQ(m.min_loss_scale, n.min_loss_scale);
    EXPECT_EQ(m.max_loss_scale, n.max_loss_scale);
    EXPECT_EQ(m.scale_window, n.scale_window);
  }
}

const std::vector<std::string> kSamples = {
    "paddle_amp_configs.json", "paddle_strategy.json", "pytorch.json",
    "deepspeed.json",          "apex_o2.json",         "ampcheck_o2.json"};

using Strings = std::vector<std::string>;

// ---- the samples ---------------------------------------------------------------------

TEST(AmpConfigSamples, PaddleAmpConfigs) {
  const Config c = sample("paddle_amp_configs.json");
  EXPECT_EQ(c.style, ConfigStyle::paddle);
  // No use_pure_fp16: fleet's static AMP O1 in float16.
  EXPECT_EQ(c.amp.level, Level::O1);
  EXPECT_EQ(c.amp.dtype, DType::f16);
  // Paddle's kernel names: matmul_v2 and elementwise_add, reduce_mean.
  EXPECT_EQ(c.amp.custom_white_list, (Strings{"matmul", "add"}));
  EXPECT_EQ(c.amp.custom_black_list, (Strings{"mean", "softmax"}));
  const auto& s = std::get<PaddleScaling>(c.scaling);
  EXPECT_EQ(s.init_loss_scaling, 32768.0);
  EXPECT_EQ(s.incr_every_n_steps, 1000);
  EXPECT_EQ(s.decr_every_n_nan_or_inf, 2);
  EXPECT_EQ(s.incr_ratio, 2.0);
  EXPECT_EQ(s.decr_ratio, 0.5);
  EXPECT_TRUE(s.use_dynamic_loss_scaling);
}

TEST(AmpConfigSamples, PaddleStrategy) {
  const Config c = sample("paddle_strategy.json");
  EXPECT_EQ(c.style, ConfigStyle::paddle);
  EXPECT_EQ(c.amp.level, Level::O2);  // use_pure_fp16
  EXPECT_EQ(c.amp.dtype, DType::f16);
  EXPECT_TRUE(c.amp.custom_white_list.empty());
  EXPECT_EQ(c.amp.custom_black_list, (Strings{"layer_norm"}));
  EXPECT_TRUE(c.amp.keep_norm_fp32);
  EXPECT_TRUE(c.amp.master_weight);
  const auto& s = std::get<PaddleScaling>(c.scaling);
  EXPECT_EQ(s.init_loss_scaling, 65536.0);  // given
  EXPECT_EQ(s.incr_every_n_steps, 2000);    // given
  // Not given: distributed_strategy.proto's AMPConfig defaults.
  EXPECT_EQ(s.decr_every_n_nan_or_inf, 2);
  EXPECT_EQ(s.incr_ratio, 2.0);
  EXPECT_EQ(s.decr_ratio, 0.8);
  EXPECT_TRUE(s.use_dynamic_loss_scaling);
  EXPECT_TRUE(has_note(c, "\"sharding_configs\""));  // the strategy's other fields: named, ignored
}

TEST(AmpConfigSamples, PyTorch) {
  const Config c = sample("pytorch.json");
  EXPECT_EQ(c.style, ConfigStyle::pytorch);
  EXPECT_EQ(c.amp.level, Level::O1);
  EXPECT_EQ(c.amp.dtype, DType::f16);
  const auto& s = std::get<TorchScaling>(c.scaling);
  EXPECT_EQ(s.init_scale, 1024.0);
  EXPECT_EQ(s.growth_factor, 2.0);
  EXPECT_EQ(s.backoff_factor, 0.5);
  EXPECT_EQ(s.growth_interval, 500);
}

TEST(AmpConfigSamples, DeepSpeed) {
  const Config c = sample("deepspeed.json");
  EXPECT_EQ(c.style, ConfigStyle::deepspeed);
  // fp16 mode: module.half() (norms too), fp32 masters in DeepSpeed's fp16 optimizer.
  EXPECT_EQ(c.amp.level, Level::O2);
  EXPECT_EQ(c.amp.dtype, DType::f16);
  EXPECT_FALSE(c.amp.keep_norm_fp32);
  EXPECT_TRUE(c.amp.master_weight);
  const auto& s = std::get<DeepSpeedScaling>(c.scaling);
  EXPECT_EQ(s.initial_scale_power, 12);
  EXPECT_EQ(s.loss_scale_window, 500);
  EXPECT_EQ(s.hysteresis, 2);
  EXPECT_EQ(s.min_loss_scale, 1.0);
  EXPECT_FALSE(s.consecutive_hysteresis);  // DeepSpeedFP16Config default
  EXPECT_TRUE(has_note(c, "\"train_batch_size\""));
}

TEST(AmpConfigSamples, ApexO2) {
  const Config c = sample("apex_o2.json");
  EXPECT_EQ(c.style, ConfigStyle::apex);
  EXPECT_EQ(c.amp.level, Level::O2);
  EXPECT_EQ(c.amp.dtype, DType::f16);  // apex O2: cast_model_type torch.float16
  EXPECT_TRUE(c.amp.keep_norm_fp32);
  EXPECT_TRUE(c.amp.master_weight);  // apex O2 properties: master_weights True
  const auto& s = std::get<ApexScaling>(c.scaling);
  EXPECT_TRUE(s.dynamic);
  EXPECT_EQ(s.loss_scale, 65536.0);  // apex/amp/scaler.py init_scale=2.**16
  EXPECT_EQ(s.min_loss_scale, 1.0);
  EXPECT_EQ(s.max_loss_scale, 16777216.0);
  EXPECT_EQ(s.scale_window, 2000);
}

TEST(AmpConfigSamples, AmpcheckO2) {
  const Config c = sample("ampcheck_o2.json");
  EXPECT_EQ(c.style, ConfigStyle::ampcheck);
  EXPECT_EQ(c.amp.level, Level::O2);
  EXPECT_EQ(c.amp.dtype, DType::bf16);
  EXPECT_EQ(c.amp.custom_black_list, (Strings{"softmax", "cross_entropy"}));
  EXPECT_EQ(std::get<StaticScaling>(c.scaling).scale, 1.0);
}

TEST(AmpConfigSamples, EveryOneBuildsAPolicyAndAScaler) {
  for (const std::string& name : kSamples) {
    SCOPED_TRACE(name);
    const Config c = sample(name);
    EXPECT_NO_THROW(Policy{c.amp});
    EXPECT_NO_THROW(GradScaler{c.scaling});
    const std::string text = explain(c);
    EXPECT_NE(text.find(std::string("style:         ") + std::string(style_name(c.style))), std::string::npos)
        << text;
    EXPECT_NE(text.find(behaviour_name(c.scaling)), std::string::npos) << text;
  }
}

TEST(AmpConfigSamples, RoundTripThroughAmpcheckForm) {
  for (const std::string& name : kSamples) {
    SCOPED_TRACE(name);
    const Config c = sample(name);
    const std::string json = to_json(c);
    const Config back = parse_config(json, name + " as json");
    expect_same(c, back);
    EXPECT_EQ(to_json(back), json);
  }
}

// ---- each framework's defaults, from its source ----------------------------------------

TEST(AmpConfigPaddle, FleetDefaults) {
  // distributed_strategy.proto, message AMPConfig.
  const Config c = parse_config(R"({"amp": true})");
  EXPECT_EQ(c.amp.level, Level::O1);
  const auto& s = std::get<PaddleScaling>(c.scaling);
  EXPECT_EQ(s.init_loss_scaling, 32768.0);
  EXPECT_EQ(s.incr_every_n_steps, 1000);
  EXPECT_EQ(s.decr_every_n_nan_or_inf, 2);
  EXPECT_EQ(s.incr_ratio, 2.0);
  EXPECT_EQ(s.decr_ratio, 0.8);
  EXPECT_TRUE(s.use_dynamic_loss_scaling);
}

TEST(AmpConfigPaddle, AmpFalseIsFp32) {
  const Config c = parse_config(R"({"amp": false, "amp_configs": {"use_pure_fp16": true}})");
  EXPECT_EQ(c.amp.level, Level::O0);
  EXPECT_EQ(std::get<StaticScaling>(c.scaling).scale, 1.0);
}

TEST(AmpConfigPaddle, PureBf16HasNoLossScaling) {
  const Config c = parse_config(R"({"use_pure_bf16": true, "init_loss_scaling": 1024})");
  EXPECT_EQ(c.amp.level, Level::O2);
  EXPECT_EQ(c.amp.dtype, DType::bf16);
  EXPECT_EQ(std::get<StaticScaling>(c.scaling).scale, 1.0);
}

TEST(AmpConfigPaddle, DygraphGradScalerDefaults) {
  // python/paddle/amp/grad_scaler.py GradScaler.__init__ (Paddle >= 2.5).
  const Config c = parse_config(R"({"auto_cast": {"level": "O2"}, "decorate": {"level": "O2"}})");
  EXPECT_EQ(c.amp.level, Level::O2);
  EXPECT_EQ(c.amp.dtype, DType::f16);
  const auto& s = std::get<PaddleScaling>(c.scaling);
  EXPECT_EQ(s.init_loss_scaling, 65536.0);
  EXPECT_EQ(s.incr_ratio, 2.0);
  EXPECT_EQ(s.decr_ratio, 0.5);
  EXPECT_EQ(s.incr_every_n_steps, 2000);
  EXPECT_EQ(s.decr_every_n_nan_or_inf, 1);
}

TEST(AmpConfigPaddle, DygraphBf16AndDisabled) {
  const Config bf =
      parse_config(R"({"auto_cast": {"dtype": "bfloat16"}, "grad_scaler": {"init_loss_scaling": 8}})");
  EXPECT_EQ(bf.amp.level, Level::O1);
  EXPECT_EQ(bf.amp.dtype, DType::bf16);
  EXPECT_EQ(std::get<StaticScaling>(bf.scaling).scale, 1.0);
  const Config off = parse_config(R"({"auto_cast": {"enable": false}})");
  EXPECT_EQ(off.amp.level, Level::O0);
  const Config no_masters =
      parse_config(R"({"auto_cast": {"level": "O2"}, "decorate": {"level": "O2", "master_weight": false}})");
  EXPECT_FALSE(no_masters.amp.master_weight);
}

TEST(AmpConfigPaddle, LegacyMulIsNotedAndAliasesMeetInBothLists) {
  const Config c = parse_config(R"({"custom_white_list": ["mul"]})");
  EXPECT_EQ(c.amp.custom_white_list, (Strings{"mul"}));
  EXPECT_TRUE(has_note(c, "legacy \"mul\""));
  const std::string e = error_of(R"({"amp": true, "amp_configs": {"custom_white_list": ["matmul_v2"],
                                    "custom_black_list": ["matmul"]}})");
  EXPECT_NE(e.find("amp_configs.custom_white_list"), std::string::npos) << e;
  EXPECT_NE(e.find("amp_configs.custom_black_list"), std::string::npos) << e;
  EXPECT_NE(e.find("\"matmul_v2\""), std::string::npos) << e;
}

TEST(AmpConfigPyTorch, DefaultsFollowTheDevice) {
  // aten/src/ATen/autocast_mode.cpp: autocast_dtype is bfloat16 for CPU, float16 for CUDA.
  const Config cpu = parse_config(R"({"autocast": {"device_type": "cpu"}})");
  EXPECT_EQ(cpu.amp.level, Level::O1);
  EXPECT_EQ(cpu.amp.dtype, DType::bf16);
  EXPECT_EQ(std::get<StaticScaling>(cpu.scaling).scale, 1.0);
  // torch/amp/grad_scaler.py: init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
  // growth_interval=2000.
  const Config cuda = parse_config(R"({"autocast": {"device_type": "cuda"}})");
  EXPECT_EQ(cuda.amp.dtype, DType::f16);
  const auto& s = std::get<TorchScaling>(cuda.scaling);
  EXPECT_EQ(s.init_scale, 65536.0);
  EXPECT_EQ(s.growth_factor, 2.0);
  EXPECT_EQ(s.backoff_factor, 0.5);
  EXPECT_EQ(s.growth_interval, 2000);
}

TEST(AmpConfigPyTorch, DisabledPieces) {
  const Config c = parse_config(R"({"autocast": {"device_type": "cuda", "enabled": false},
                                    "grad_scaler": {"enabled": false}})");
  EXPECT_EQ(c.amp.level, Level::O0);
  EXPECT_EQ(std::get<StaticScaling>(c.scaling).scale, 1.0);
  const Config scaler_only = parse_config(R"({"grad_scaler": {"init_scale": 256}})");
  EXPECT_EQ(scaler_only.style, ConfigStyle::pytorch);
  EXPECT_EQ(scaler_only.amp.level, Level::O0);  // no autocast: the model runs in fp32
  EXPECT_EQ(std::get<TorchScaling>(scaler_only.scaling).init_scale, 256.0);
}

TEST(AmpConfigPyTorch, GradScalerArgumentsWrittenFlat) {
  // GradScaler(init_scale=1024, growth_factor=3, backoff_factor=0.25, growth_interval=7,
  // enabled=True) as a user pastes its arguments: the keys are PyTorch's alone.
  const Config c = parse_config(
      R"({"init_scale": 1024, "growth_factor": 3, "backoff_factor": 0.25, "growth_interval": 7, "enabled": true})");
  EXPECT_EQ(c.style, ConfigStyle::pytorch);
  EXPECT_EQ(c.amp.level, Level::O0);  // a scaler alone: no autocast, the model runs in fp32
  const auto& s = std::get<TorchScaling>(c.scaling);
  EXPECT_EQ(s.init_scale, 1024.0);
  EXPECT_EQ(s.growth_factor, 3.0);
  EXPECT_EQ(s.backoff_factor, 0.25);
  EXPECT_EQ(s.growth_interval, 7);
  // Keys not given take torch/amp/grad_scaler.py's defaults.
  const Config partial = parse_config(R"({"init_scale": 8, "device": "cpu"})");
  const auto& d = std::get<TorchScaling>(partial.scaling);
  EXPECT_EQ(d.init_scale, 8.0);
  EXPECT_EQ(d.growth_factor, 2.0);
  EXPECT_EQ(d.backoff_factor, 0.5);
  EXPECT_EQ(d.growth_interval, 2000);
  // enabled=False: GradScaler's methods are no-ops, the scale stays 1.
  const Config off = parse_config(R"({"init_scale": 8, "enabled": false})");
  EXPECT_EQ(std::get<StaticScaling>(off.scaling).scale, 1.0);
  EXPECT_TRUE(has_note(off, "enabled is false")) << off.notes.front();
  // Values are checked as in the block form, and a typo gets a did-you-mean.
  const std::string bad = error_of(R"({"init_scale": 8, "backoff_factor": 1.5})");
  EXPECT_NE(bad.find("test: backoff_factor: 1.5 is not a number in (0, 1)"), std::string::npos) << bad;
  const std::string typo = error_of(R"({"init_scale": 8, "growth_intervl": 5})");
  EXPECT_NE(typo.find("did you mean \"growth_interval\""), std::string::npos) << typo;
  // Flat and block forms at once: which did the user mean?
  const std::string both = error_of(R"({"init_scale": 8, "autocast": {"device_type": "cuda"}})");
  EXPECT_NE(both.find("\"init_scale\""), std::string::npos) << both;
  EXPECT_NE(both.find("\"autocast\""), std::string::npos) << both;
}

TEST(AmpConfigDeepSpeed, InitialScalePowerKeepsTheScaleAFiniteFloat32) {
  // The scaled loss is a float32 tensor times 2^power: the power must keep that scale a
  // positive finite float32, from the smallest subnormal to the largest power of two.
  const int lo = std::numeric_limits<float>::min_exponent - std::numeric_limits<float>::digits;  // -149
  const int hi = std::numeric_limits<float>::max_exponent - 1;                                  // 127
  ASSERT_EQ(std::ldexp(1.0f, lo), std::numeric_limits<float>::denorm_min());
  ASSERT_TRUE(std::isinf(std::ldexp(1.0f, hi + 1)));
  for (int power : {lo, 0, 16, hi}) {
    const Config c = parse_config(R"({"fp16": {"enabled": true, "initial_scale_power": )" + std::to_string(power) + "}}");
    EXPECT_EQ(std::get<DeepSpeedScaling>(c.scaling).initial_scale_power, power);
  }
  for (int power : {lo - 1, hi + 1, 200}) {
    const std::string e =
        error_of(R"({"fp16": {"enabled": true, "initial_scale_power": )" + std::to_string(power) + "}}");
    EXPECT_NE(e.find("fp16.initial_scale_power: " + std::to_string(power) + " is not an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]"),
              std::string::npos)
        << e;
  }
}

TEST(AmpConfigDeepSpeed, Fp16Defaults) {
  // deepspeed/runtime/precision_config.py, DeepSpeedFP16Config.
  const Config c = parse_config(R"({"fp16": {"enabled": true}})");
  const auto& s = std::get<DeepSpeedScaling>(c.scaling);
  EXPECT_EQ(s.initial_scale_power, 16);
  EXPECT_EQ(s.loss_scale_window, 1000);
  EXPECT_EQ(s.hysteresis, 2);
  EXPECT_EQ(s.min_loss_scale, 1.0);
  EXPECT_FALSE(s.consecutive_hysteresis);
  EXPECT_TRUE(s.raise_error_at_min_scale);  // DynamicLossScaler(raise_error_at_min_scale=True)
}

TEST(AmpConfigDeepSpeed, StaticBf16AndOff) {
  const Config st = parse_config(R"({"fp16": {"enabled": true, "loss_scale": 128}})");
  EXPECT_EQ(std::get<StaticScaling>(st.scaling).scale, 128.0);
  const Config bf = parse_config(R"({"bf16": {"enabled": true}, "fp16": {"enabled": false}})");
  EXPECT_EQ(bf.amp.level, Level::O2);
  EXPECT_EQ(bf.amp.dtype, DType::bf16);
  EXPECT_TRUE(bf.amp.master_weight);
  EXPECT_EQ(std::get<StaticScaling>(bf.scaling).scale, 1.0);
  const Config masters_off =
      parse_config(R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})");
  EXPECT_FALSE(masters_off.amp.master_weight);
  const Config off = parse_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})");
  EXPECT_EQ(off.style, ConfigStyle::deepspeed);
  EXPECT_EQ(off.amp.level, Level::O0);
}

TEST(AmpConfigDeepSpeed, AmpBlockIsApexAndModesExcludeEachOther) {
  const Config c = parse_config(R"({"train_batch_size": 8, "amp": {"enabled": true, "opt_level": "O1"}})");
  EXPECT_EQ(c.style, ConfigStyle::apex);
  EXPECT_EQ(c.amp.level, Level::O1);
  EXPECT_TRUE(std::get<ApexScaling>(c.scaling).dynamic);
  const std::string e = error_of(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  EXPECT_NE(e.find("fp16.enabled"), std::string::npos) << e;
  EXPECT_NE(e.find("bf16.enabled"), std::string::npos) << e;
  // A bad value in a block that is off is still an error.
  const std::string off = error_of(R"({"fp16": {"enabled": false, "hysteresis": 0}})");
  EXPECT_NE(off.find("fp16.hysteresis"), std::string::npos) << off;
}

TEST(AmpConfigApex, OptLevelProperties) {
  // apex/amp/frontend.py, classes O0..O3.
  const Config o0 = parse_config(R"({"opt_level": "O0"})");
  EXPECT_EQ(o0.amp.level, Level::O0);
  EXPECT_FALSE(std::get<ApexScaling>(o0.scaling).dynamic);
  EXPECT_EQ(std::get<ApexScaling>(o0.scaling).loss_scale, 1.0);
  const Config o1 = parse_config(R"({"opt_level": "O1"})");
  EXPECT_EQ(o1.amp.level, Level::O1);
  EXPECT_TRUE(std::get<ApexScaling>(o1.scaling).dynamic);
  const Config o3 = parse_config(R"({"opt_level": "O3"})");
  EXPECT_EQ(o3.amp.level, Level::O3);
  EXPECT_FALSE(o3.amp.keep_norm_fp32);
  EXPECT_FALSE(o3.amp.master_weight);
  EXPECT_FALSE(std::get<ApexScaling>(o3.scaling).dynamic);  // O3: loss_scale 1.0
  const Config o2 =
      parse_config(R"({"opt_level": "O2", "keep_batchnorm_fp32": "False", "loss_scale": "128.0"})");
  EXPECT_FALSE(o2.amp.keep_norm_fp32);
  EXPECT_FALSE(std::get<ApexScaling>(o2.scaling).dynamic);
  EXPECT_EQ(std::get<ApexScaling>(o2.scaling).loss_scale, 128.0);
  const Config off = parse_config(R"({"opt_level": "O2", "enabled": false})");
  EXPECT_EQ(off.amp.level, Level::O0);
}

TEST(AmpConfigApex, WhatAmpcheckCannotHoldIsAnError) {
  const std::string e = error_of(R"({"opt_level": "O3", "keep_batchnorm_fp32": true})");
  EXPECT_NE(e.find("keep_batchnorm_fp32"), std::string::npos) << e;
  const std::string m = error_of(R"({"opt_level": "O2", "min_loss_scale": 1024, "max_loss_scale": 16})");
  EXPECT_NE(m.find("min_loss_scale"), std::string::npos) << m;
}

TEST(AmpConfigAmpcheck, Defaults) {
  const Config c = parse_config(R"({"framework": "ampcheck"})");
  EXPECT_EQ(c.amp.level, Level::O1);
  EXPECT_EQ(c.amp.dtype, DType::f16);
  EXPECT_TRUE(std::holds_alternative<TorchScaling>(c.scaling));
  const Config ds = parse_config(R"({"framework": "ampcheck", "loss_scaling": {"behaviour": "deepspeed"}})");
  EXPECT_EQ(std::get<DeepSpeedScaling>(ds.scaling).initial_scale_power, 16);
}

TEST(AmpConfigAmpcheck, Fp32ModulesAreReadWrittenAndChecked) {
  const Config c = parse_config(R"({"framework": "ampcheck", "level": "O2", "fp32_modules": ["fc1", "blocks.0.attn"]})");
  EXPECT_EQ(c.amp.fp32_modules, (std::vector<std::string>{"fc1", "blocks.0.attn"}));
  EXPECT_EQ(parse_config(to_json(c)).amp.fp32_modules, c.amp.fp32_modules);
  EXPECT_NE(explain(c).find("fp32 modules:  fc1, blocks.0.attn"), std::string::npos) << explain(c);
  for (const char* bad : {R"({"framework": "ampcheck", "fp32_modules": "fc1"})",
                          R"({"framework": "ampcheck", "fp32_modules": [""]})"}) {
    try {
      parse_config(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("fp32_modules"), std::string::npos) << e.what();
    }
  }
}

// "fp8": TransformerEngine's recipe as the script writes it, beside PyTorch's blocks or in
// ampcheck's form; written back with every keyword given (TE's defaults:
// transformer_engine/common/recipe/__init__.py), the kept layers with it.
TEST(AmpConfigFp8, TheRecipeIsReadBesideTorchsBlocksAndInAmpchecksForm) {
  const Config te = sample("transformer_engine.json");
  EXPECT_EQ(te.style, ConfigStyle::pytorch);
  EXPECT_EQ(te.amp.level, Level::O1);
  EXPECT_EQ(te.amp.dtype, DType::bf16);
  ASSERT_TRUE(te.fp8.has_value());
  EXPECT_EQ(te.fp8->recipe, "DelayedScaling(margin=0, fp8_format=Format.HYBRID, amax_history_len=16, "
                            "amax_compute_algo=\"max\", reduce_amax=True)");
  EXPECT_EQ(te.fp8->keep, std::vector<std::string>{"head"});
  EXPECT_NE(explain(te).find("fp8:           DelayedScaling(margin=0"), std::string::npos) << explain(te);
  const Config own = parse_config(R"json({"level": "O1", "dtype": "bf16", "fp8": "Float8CurrentScaling()"})json");
  EXPECT_EQ(own.style, ConfigStyle::ampcheck);
  ASSERT_TRUE(own.fp8.has_value());
  EXPECT_EQ(own.fp8->recipe.rfind("Float8CurrentScaling(fp8_format=Format.HYBRID", 0), 0u) << own.fp8->recipe;
  EXPECT_TRUE(own.fp8->keep.empty());
  for (const Config& c : {te, own}) expect_same(parse_config(to_json(c)), Config{c});
  for (const char* off : {R"json({"level": "O1", "fp8": false})json", R"json({"level": "O1", "fp8": null})json"})
    EXPECT_FALSE(parse_config(off).fp8.has_value()) << off;
}

TEST(AmpConfigFp8, BadFp8BlocksNameTheKeyAndWhatIsAccepted) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"json({"level": "O1", "fp8": 3})json", "fp8: 3 is not a TransformerEngine recipe as your script constructs it"},
      {R"json({"level": "O1", "fp8": {"keep": ["head"]}})json", "\"recipe\" is missing"},
      {R"json({"level": "O1", "fp8": {"recipe": "DelayedScaling()", "kep": []}})json", "kep"},
      {R"json({"level": "O1", "fp8": {"recipe": "DelayedScaling()", "keep": "head"}})json", "fp8.keep"},
      {R"json({"level": "O1", "fp8": {"recipe": "DelayedScaling()", "keep": [""]}})json", "fp8.keep[0]"},
      {R"json({"level": "O1", "fp8": "NVFP4BlockScaling()"})json", "fp8: fp8 recipe 'NVFP4BlockScaling()': NVFP4BlockScaling is "
                                                          "not a recipe ampcheck runs"},
      {R"json({"level": "O1", "fp8": {"recipe": "DelayedScaling(margin=x)"}})json", "fp8.recipe: DelayedScaling: margin must be"},
  };
  for (const auto& [text, says] : cases) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find(says), std::string::npos) << text << " -> " << e;
  }
}

// ---- detection and plain JSON errors ---------------------------------------------------

TEST(AmpConfigErrors, DetectionAndJson) {
  EXPECT_NE(error_of("{}").find("cannot tell which framework"), std::string::npos);
  const std::string mixed = error_of(R"({"fp16": {"enabled": true}, "amp_configs": {}})");
  EXPECT_NE(mixed.find("\"fp16\""), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("\"amp_configs\""), std::string::npos) << mixed;
  const std::string fw = error_of(R"({"framework": "deepspeeed"})");
  EXPECT_NE(fw.find("did you mean \"deepspeed\""), std::string::npos) << fw;
  const std::string dup = error_of(R"({"amp": true, "amp_configs": {"decr_ratio": 0.5, "decr_ratio": 0.9}})");
  EXPECT_NE(dup.find("duplicate key \"amp_configs.decr_ratio\""), std::string::npos) << dup;
  const std::string bad = error_of("{\n  \"opt_level\": \"O1\",\n}");
  EXPECT_NE(bad.find("line 3"), std::string::npos) << bad;
  EXPECT_NE(error_of("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_THROW(load_config(kRoot + "/samples/configs/no_such_file.json"), ConfigError);
}

// A framework is told by the keys only it uses, where they sit: top level or in a block.
TEST(AmpConfigErrors, DetectionFromKeysOnlyOneFrameworkUses) {
  struct Case {
    const char* json;
    ConfigStyle style;
    const char* key;  // the key the detection names
  };
  const Case cases[] = {
      {R"({"growth_interval": 10})", ConfigStyle::pytorch, "growth_interval"},
      {R"({"enabled": true, "backoff_factor": 0.5})", ConfigStyle::pytorch, "backoff_factor"},
      {R"({"grad_scaler": {"enabled": true}})", ConfigStyle::pytorch, "grad_scaler.enabled"},  // Paddle: enable
      {R"({"grad_scaler": {"enable": true}})", ConfigStyle::paddle, "grad_scaler.enable"},
      {R"({"grad_scaler": {"incr_ratio": 2}})", ConfigStyle::paddle, "grad_scaler.incr_ratio"},
      {R"({"amp": {"enabled": false, "opt_level": "O2"}})", ConfigStyle::deepspeed, "amp"},  // Apex in DeepSpeed
      {R"({"optimizer": {"type": "Adam"}})", ConfigStyle::deepspeed, "optimizer"},
      {R"({"sharding": true})", ConfigStyle::paddle, "sharding"},  // a DistributedStrategy field
      {R"({"enabled": true, "opt_level": "O1"})", ConfigStyle::apex, "opt_level"},
      {R"({"level": "O2"})", ConfigStyle::ampcheck, "level"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.json);
    const Config c = parse_config(k.json);
    ASSERT_FALSE(c.notes.empty());
    EXPECT_EQ(c.notes.front(), "semantics: " + std::string(style_name(k.style)) + ", detected from the key \"" +
                                   k.key + "\"");
  }
  // A strategy naming nothing of AMP trains in fp32, as fleet's default amp=false does.
  EXPECT_EQ(parse_config(R"({"sharding": true})").amp.level, Level::O0);

  // The truly ambiguous: "enabled" alone is amp.initialize's and GradScaler's.
  const std::string alone = error_of(R"({"enabled": true})");
  EXPECT_NE(alone.find("cannot tell which framework"), std::string::npos) << alone;
  EXPECT_NE(alone.find("\"enabled\" (a key of pytorch and apex)"), std::string::npos) << alone;
  // Keys of two frameworks: both named.
  const std::string two = error_of(R"({"init_scale": 1024, "opt_level": "O1"})");
  EXPECT_NE(two.find("\"init_scale\" (pytorch)"), std::string::npos) << two;
  EXPECT_NE(two.find("\"opt_level\" (apex)"), std::string::npos) << two;
  const std::string nested = error_of(R"({"grad_scaler": {"init_scale": 8, "incr_ratio": 2}})");
  EXPECT_NE(nested.find("\"grad_scaler.init_scale\" (pytorch)"), std::string::npos) << nested;
  EXPECT_NE(nested.find("\"grad_scaler.incr_ratio\" (paddle)"), std::string::npos) << nested;
}

// Numbers beyond a double and syntax errors: the source, the line and column, the fix.
TEST(AmpConfigErrors, BadJsonNamesThePositionAndTheFix) {
  for (const std::string number : {"1e999", "-1e400", "2e308"}) {
    const std::string text = "{\n  \"amp\": true,\n  \"amp_configs\": {\"init_loss_scaling\": " + number + "}\n}";
    const std::size_t at = text.find(number);
    const std::size_t line_start = text.rfind('\n', at) + 1;
    const std::string e = error_of(text);
    EXPECT_EQ(e.rfind("test: line 3, column " + std::to_string(at - line_start + 1) + ": the number " + number, 0), 0u)
        << e;
    EXPECT_NE(e.find("1.8e308"), std::string::npos) << e;
  }
  const std::string bad_comma = "{\"amp\": true,\n \"amp_configs\": {\"incr_ratio\": 2,}\n}";
  const std::size_t brace = bad_comma.find(",}") + 1, line2 = bad_comma.find('\n') + 1;
  const std::string comma = error_of(bad_comma);
  EXPECT_EQ(comma.rfind("test: line 2, column " + std::to_string(brace - line2 + 1) +
                            ": not valid JSON: a comma before the closing '}'",
                        0),
            0u)
      << comma;
  EXPECT_NE(comma.find("remove it"), std::string::npos) << comma;
  const std::string quote = error_of("{'amp': true}");
  EXPECT_EQ(quote.rfind("test: line 1, column 2: not valid JSON: a single quote", 0), 0u) << quote;
  EXPECT_NE(quote.find("double quotes"), std::string::npos) << quote;
  EXPECT_EQ(error_of("").rfind("test: line 1, column 1: not valid JSON: the text is empty", 0), 0u);
  EXPECT_EQ(error_of("{\"amp\": True}").rfind("test: line 1, column 9: not valid JSON: \"True\"", 0), 0u);
}

TEST(AmpConfigErrors, EveryBadConfigNamesItsKey) {
  const std::string dir = kRoot + "/tests/data/bad_configs/";
  std::ifstream list(dir + "expected.tsv");
  ASSERT_TRUE(list) << dir << "expected.tsv";
  std::set<std::string> listed;
  std::string line;
  while (std::getline(list, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string file = line.substr(0, tab), key = line.substr(tab + 1);
    listed.insert(file);
    SCOPED_TRACE(file);
    try {
      load_config(dir + file);
      ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(key), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind(dir + file + ": ", 0), 0u) << msg;  // names the file first
    }
  }
  // One per style at least, and none left untested.
  for (const std::string style : {"paddle_", "pytorch_", "deepspeed_", "apex_", "ampcheck_"})
    EXPECT_TRUE(std::any_of(listed.begin(), listed.end(), [&](const std::string& f) {
      return f.rfind(style, 0) == 0;
    })) << style;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_TRUE(listed.count(entry.path().filename().string())) << entry.path() << " is not in expected.tsv";
  }
}

}  // namespace
}  // namespace ampcheck::amp
