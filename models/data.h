// Deterministic synthetic data sets for the sample models, generated from a seed through
// the engine's counter-based Generator: the same seed gives the same tensors on every
// machine and for every thread count.
//
// Rows interleave the classes (row i has label i % classes), so any contiguous range of
// rows — a mini-batch taken with batch() — is close to balanced without shuffling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/tensor.h"

namespace ampcheck::models {

struct Dataset {
  Tensor x;  // inputs, leading dim N
  Tensor y;  // i64 labels [N]
  // A model's further inputs, leading dim N (an imported graph's attention mask, token
  // types), in the order the model takes them after x; batch() takes the same rows.
  std::vector<Tensor> more = {};
  std::int64_t size() const { return y.defined() ? y.size(0) : 0; }
};

// Rows [start, start + count) of x and y as views (no copy); count is clipped at the end.
Dataset batch(const Dataset& data, std::int64_t start, std::int64_t count);
// Exactly `count` rows from `start` on, going on from row 0 past the end (a copy where it
// wraps): the batches of a model whose export fixed the batch size. count <= size().
Dataset batch_around(const Dataset& data, std::int64_t start, std::int64_t count);
// The same for one tensor's leading dimension.
Tensor rows_around(const Tensor& t, std::int64_t start, std::int64_t count);

// The classic spiral (CS231n): `classes` arms of n_per_class points each, arm k at
// radius r = linspace(0, 1) and angle theta = linspace(4k, 4(k+1)) + noise * N(0, 1),
// point (r sin theta, r cos theta). x f32 [N, 2], y i64 [N], N = n_per_class * classes.
Dataset spiral(std::int64_t n_per_class, std::int64_t classes = 3, double noise = 0.2,
               std::uint64_t seed = 0);

// Gaussian blobs: `classes` centres drawn uniformly in [-4, 4]^dims, n_per_class points
// around each at N(0, spread^2) per coordinate. x f32 [N, dims], y i64 [N].
Dataset blobs(std::int64_t n_per_class, std::int64_t classes = 3, std::int64_t dims = 2,
              double spread = 1.0, std::uint64_t seed = 0);

// Oriented stripe patches: class k is a grating at angle pi * k / classes (period 4 px)
// under a Gaussian window of width size / 5, at a random position, with random phase,
// amplitude and per-channel gain, plus N(0, 0.3) noise. The random phase makes every
// class's mean image nearly zero: a linear model on the pixels can only memorise a small
// training set (it stays at chance on fresh samples), while a convolution + ReLU +
// global pooling reads the orientation and generalises.
// x f32 [N, channels, size, size], y i64 [N]. Needs size >= 8.
Dataset images(std::int64_t n, std::int64_t classes = 4, std::int64_t channels = 3,
               std::int64_t size = 16, std::uint64_t seed = 0);

// "Does the first token occur again?": tokens in [0, vocab), label 1 when x[0] recurs at
// some later position (exactly once) and 0 when it does not occur again; the other
// positions are uniform over the remaining vocab - 1 tokens (and may repeat among
// themselves), and the labels alternate 0, 1. Mean-pooled token embeddings lose which
// token came first and per-position features see one token, so without attention a
// model can only memorise the training rows; with it, each position compares its token
// with position 0's. x i64 [N, length], y i64 [N].
// Needs length >= 2 and vocab >= 2.
Dataset sequences(std::int64_t n, std::int64_t length = 8, std::int64_t vocab = 8,
                  std::uint64_t seed = 0);

// A data file: a JSON object {"x": [...], "y": [...]} where x holds one (nested) array
// per sample, all of one shape, and y one integer label per sample in [0, classes).
// Optional "dtype": "float32" (default) or "int64" (token indices, for an embedding).
// Throws std::invalid_argument naming the file and what is wrong.
Dataset load_samples(const std::string& path);
// The same object, already read (a model file's inline "data"); `where` names it in errors.
Dataset samples_from_json(const nlohmann::json& doc, const std::string& where);

}  // namespace ampcheck::models
