#include "models/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "engine/random.h"

#include <nlohmann/json.hpp>

namespace ampcheck::models {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

std::size_t usize(std::int64_t n) { return static_cast<std::size_t>(n); }

// An index in [0, m) from a uniform draw in [0, 1).
std::int64_t pick(double u, std::int64_t m) {
  return std::min(m - 1, static_cast<std::int64_t>(u * static_cast<double>(m)));
}

// Draws in f64, so the host values are exactly the generator's.
std::vector<double> uniform_values(const Shape& shape, Generator& gen) {
  return Tensor::uniform(shape, gen, 0.0, 1.0, DType::f64).to_f64();
}
std::vector<double> normal_values(const Shape& shape, Generator& gen, double stddev) {
  return Tensor::randn(shape, gen, DType::f64, 0.0, stddev).to_f64();
}

std::vector<std::int64_t> interleaved_labels(std::int64_t n, std::int64_t classes) {
  std::vector<std::int64_t> y(usize(n));
  for (std::int64_t i = 0; i < n; ++i) y[usize(i)] = i % classes;
  return y;
}

}  // namespace

Dataset batch(const Dataset& data, std::int64_t start, std::int64_t count) {
  const std::int64_t n = data.size();
  require(start >= 0 && start < n && count > 0,
          "batch: rows [" + std::to_string(start) + ", +" + std::to_string(count) +
              ") is outside a data set of " + std::to_string(n) + " rows");
  count = std::min(count, n - start);
  Dataset b{data.x.rows(start, count), data.y.rows(start, count), {}};
  for (const Tensor& t : data.more) b.more.push_back(t.rows(start, count));
  return b;
}

Tensor rows_around(const Tensor& t, std::int64_t start, std::int64_t count) {
  const std::int64_t n = t.dim() > 0 ? t.size(0) : 0;
  require(start >= 0 && start < n && count > 0 && count <= n,
          "batch: " + std::to_string(count) + " rows from row " + std::to_string(start) + " of " + std::to_string(n) +
              " rows");
  if (start + count <= n) return t.rows(start, count);
  const std::int64_t head = n - start;
  Shape shape = t.shape();
  shape[0] = count;
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  out.rows(0, head).copy_from(t.rows(start, head));
  out.rows(head, count - head).copy_from(t.rows(0, count - head));
  return out;
}

Dataset batch_around(const Dataset& data, std::int64_t start, std::int64_t count) {
  Dataset b{rows_around(data.x, start, count), rows_around(data.y, start, count), {}};
  for (const Tensor& t : data.more) b.more.push_back(rows_around(t, start, count));
  return b;
}

Dataset spiral(std::int64_t n_per_class, std::int64_t classes, double noise, std::uint64_t seed) {
  require(n_per_class >= 1 && classes >= 1,
          "spiral: expects n_per_class >= 1 and classes >= 1, got " + std::to_string(n_per_class) +
              " and " + std::to_string(classes));
  require(noise >= 0, "spiral: noise must be >= 0");
  Generator gen(seed);
  const std::int64_t n = n_per_class * classes;
  const std::vector<double> eps = normal_values({n}, gen, 1.0);
  std::vector<float> x(usize(2 * n));
  // Row i is point i / classes along arm i % classes.
  const double last = static_cast<double>(std::max<std::int64_t>(n_per_class - 1, 1));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto arm = static_cast<double>(i % classes);
    const double r = static_cast<double>(i / classes) / last;  // linspace(0, 1)
    const double theta = 4.0 * arm + 4.0 * r + noise * eps[usize(i)];
    x[usize(2 * i)] = static_cast<float>(r * std::sin(theta));
    x[usize(2 * i + 1)] = static_cast<float>(r * std::cos(theta));
  }
  return {Tensor::from(x, {n, 2}), Tensor::from(interleaved_labels(n, classes), {n})};
}

Dataset blobs(std::int64_t n_per_class, std::int64_t classes, std::int64_t dims, double spread,
              std::uint64_t seed) {
  require(n_per_class >= 1 && classes >= 1 && dims >= 1,
          "blobs: expects n_per_class, classes and dims >= 1, got " + std::to_string(n_per_class) + ", " +
              std::to_string(classes) + " and " + std::to_string(dims));
  require(spread > 0, "blobs: spread must be > 0");
  Generator gen(seed);
  const std::int64_t n = n_per_class * classes;
  const std::vector<double> centres = uniform_values({classes, dims}, gen);
  const std::vector<double> eps = normal_values({n, dims}, gen, spread);
  std::vector<float> x(usize(n * dims));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t d = 0; d < dims; ++d) {
      const double centre = -4.0 + 8.0 * centres[usize((i % classes) * dims + d)];
      x[usize(i * dims + d)] = static_cast<float>(centre + eps[usize(i * dims + d)]);
    }
  return {Tensor::from(x, {n, dims}), Tensor::from(interleaved_labels(n, classes), {n})};
}

Dataset images(std::int64_t n, std::int64_t classes, std::int64_t channels, std::int64_t size,
               std::uint64_t seed) {
  require(n >= 1 && classes >= 1 && channels >= 1 && size >= 8,
          "images: expects n, classes, channels >= 1 and size >= 8, got n " + std::to_string(n) +
              ", classes " + std::to_string(classes) + ", channels " + std::to_string(channels) +
              ", size " + std::to_string(size));
  Generator gen(seed);
  constexpr std::int64_t kDraws = 4;  // phase, centre y, centre x, amplitude; then gains
  const std::int64_t per_sample = kDraws + channels;
  const std::vector<double> u = uniform_values({n, per_sample}, gen);
  const std::vector<double> noise = normal_values({n, channels, size, size}, gen, 0.3);
  const double pi = std::numbers::pi;
  const double freq = 2.0 * pi / 4.0;  // period 4 px: resolvable by 3x3 kernels at every angle
  const double sigma = static_cast<double>(size) / 5.0;
  const double lo = static_cast<double>(size) / 4.0, span = static_cast<double>(size) / 2.0;
  std::vector<float> x(usize(n * channels * size * size));
  for (std::int64_t s = 0; s < n; ++s) {
    const double* d = u.data() + s * per_sample;
    const double angle = pi * static_cast<double>(s % classes) / static_cast<double>(classes);
    const double c = std::cos(angle), sn = std::sin(angle);
    const double phase = 2.0 * pi * d[0];
    const double cy = lo + span * d[1], cx = lo + span * d[2];
    const double amplitude = 0.5 + d[3];
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      const double gain = amplitude * (0.5 + 0.5 * d[kDraws + ch]);
      for (std::int64_t i = 0; i < size; ++i) {
        for (std::int64_t j = 0; j < size; ++j) {
          const double dy = static_cast<double>(i) - cy, dx = static_cast<double>(j) - cx;
          const double window = std::exp(-(dx * dx + dy * dy) / (2.0 * sigma * sigma));
          const std::size_t at = usize(((s * channels + ch) * size + i) * size + j);
          x[at] = static_cast<float>(gain * window * std::cos(freq * (dx * c + dy * sn) + phase) +
                                     noise[at]);
        }
      }
    }
  }
  return {Tensor::from(x, {n, channels, size, size}),
          Tensor::from(interleaved_labels(n, classes), {n})};
}

Dataset sequences(std::int64_t n, std::int64_t length, std::int64_t vocab, std::uint64_t seed) {
  require(n >= 1 && length >= 2 && vocab >= 2,
          "sequences: expects n >= 1, length >= 2 and vocab >= 2, got n " + std::to_string(n) +
              ", length " + std::to_string(length) + ", vocab " + std::to_string(vocab));
  Generator gen(seed);
  // Per row: the first token, the other positions, and where the repeat goes.
  const std::int64_t per_row = length + 1;
  const std::vector<double> u = uniform_values({n, per_row}, gen);
  std::vector<std::int64_t> x(usize(n * length));
  const std::vector<std::int64_t> y = interleaved_labels(n, 2);
  for (std::int64_t r = 0; r < n; ++r) {
    const double* d = u.data() + r * per_row;
    std::int64_t* row = x.data() + r * length;
    const std::int64_t first = pick(d[0], vocab);
    row[0] = first;
    for (std::int64_t t = 1; t < length; ++t)  // any token but the first
      row[t] = (first + 1 + pick(d[t], vocab - 1)) % vocab;
    if (y[usize(r)] == 1) row[1 + pick(d[length], length - 1)] = first;
  }
  return {Tensor::from(x, {n, length}), Tensor::from(y, {n})};
}

namespace {

// The shape of one sample's nested arrays, read along the first elements.
Shape sample_shape(const nlohmann::json& v) {
  Shape shape;
  for (const nlohmann::json* p = &v; p->is_array() && !p->empty(); p = &(*p)[0])
    shape.push_back(static_cast<std::int64_t>(p->size()));
  return shape;
}

// Appends the numbers of one sample to `out`, checking it has `shape`.
void flatten_sample(const nlohmann::json& v, const Shape& shape, std::size_t depth, std::vector<double>& out,
                    const std::string& where) {
  if (depth == shape.size()) {
    // A scalar is quoted; an array or object is named, not dumped (it may be nested deep).
    require(v.is_number(), where + ": expects a number at depth " + std::to_string(depth + 1) + ", got " +
                               (v.is_structured() ? std::string("an ") + v.type_name() : v.dump()));
    out.push_back(v.get<double>());
    return;
  }
  require(v.is_array() && static_cast<std::int64_t>(v.size()) == shape[depth],
          where + ": does not have the shape of sample 1, " + to_string(shape));
  for (const auto& e : v) flatten_sample(e, shape, depth + 1, out, where);
}

}  // namespace

Dataset load_samples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "data file \"" + path + "\" cannot be read; check the path");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string where = "data file \"" + path + "\"";
  return samples_from_json(parse_json_text(text.str(), where), where);  // JsonTextError is an invalid_argument
}

Dataset samples_from_json(const nlohmann::json& doc, const std::string& where) {
  require(doc.is_object() && doc.contains("x") && doc.contains("y") && doc["x"].is_array() && doc["y"].is_array(),
          where + ": expects {\"x\": [one array per sample], \"y\": [one label per sample]}");
  const std::string dtype = doc.value("dtype", std::string("float32"));
  require(dtype == "float32" || dtype == "int64", where + ": \"dtype\" is float32 or int64, got \"" + dtype + "\"");
  const auto& xs = doc["x"];
  const auto& ys = doc["y"];
  require(!xs.empty() && xs.size() == ys.size(), where + ": \"x\" has " + std::to_string(xs.size()) +
                                                     " samples and \"y\" " + std::to_string(ys.size()) + " labels");
  const Shape shape = sample_shape(xs[0]);
  // Samples are images or sequences at most: a deeper nesting is not data (and is not
  // walked, recursively, to find out).
  require(shape.size() <= 6, where + ": sample 1 is nested " + std::to_string(shape.size()) +
                                 " arrays deep; a sample has at most 6 dimensions (an image is 3: [C, H, W])");
  std::vector<double> values;
  for (std::size_t i = 0; i < xs.size(); ++i)
    flatten_sample(xs[i], shape, 0, values, where + ": sample " + std::to_string(i + 1));
  std::vector<std::int64_t> labels;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    require(ys[i].is_number_integer() && ys[i].get<std::int64_t>() >= 0,
            where + ": label " + std::to_string(i + 1) + " is " + ys[i].dump() + "; labels are integers >= 0");
    labels.push_back(ys[i].get<std::int64_t>());
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  Shape full{n};
  full.insert(full.end(), shape.begin(), shape.end());
  if (dtype == "int64") {
    std::vector<std::int64_t> idx;
    for (double v : values) {
      require(v == std::floor(v) && v >= 0, where + ": int64 samples hold integers >= 0");
      idx.push_back(static_cast<std::int64_t>(v));
    }
    return {Tensor::from(idx, full), Tensor::from(labels, {n})};
  }
  return {Tensor::from(values, full, DType::f32), Tensor::from(labels, {n})};
}

}  // namespace ampcheck::models
