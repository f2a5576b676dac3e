#include "models/arrays.h"

#include <zip.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "engine/dtype/convert.h"
#include "engine/memory_budget.h"  // over_budget, human_bytes: sizes a file claims
#include "models/onnx_file.h"

namespace ampcheck::models {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& msg) { throw ArrayError(source + ": " + msg); }

std::string read_bytes(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ArrayError(what + " \"" + path + "\" cannot be read; check the path");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- the .npy header: a Python dict literal with 'descr', 'fortran_order', 'shape' ----

std::string header_value(const std::string& header, const std::string& key, const std::string& source) {
  const std::size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) fail(source, "the .npy header has no '" + key + "': not a numpy array file");
  std::size_t v = header.find(':', k);
  if (v == std::string::npos) fail(source, "the .npy header is malformed near '" + key + "'");
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  if (v >= header.size()) fail(source, "the .npy header is malformed near '" + key + "'");
  const char open = header[v];
  if (open == '\'' || open == '"') {
    const std::size_t end = header.find(open, v + 1);
    if (end == std::string::npos) fail(source, "the .npy header is malformed near '" + key + "'");
    return header.substr(v + 1, end - v - 1);
  }
  if (open == '(') {
    const std::size_t end = header.find(')', v);
    if (end == std::string::npos) fail(source, "the .npy header is malformed near '" + key + "'");
    return header.substr(v, end - v + 1);
  }
  std::size_t end = v;
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  std::string s = header.substr(v, end - v);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

Shape parse_shape(const std::string& tuple, const std::string& source) {
  Shape shape;
  std::string number;
  if (tuple.size() < 2 || tuple.front() != '(' || tuple.back() != ')')
    fail(source, "the .npy shape '" + tuple + "' is not a tuple of sizes such as (64, 16)");
  for (char c : tuple.substr(1)) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      number += c;
    } else if (c == ',' || c == ')') {
      if (!number.empty()) {
        try {
          shape.push_back(std::stoll(number));
        } catch (const std::exception&) {
          fail(source, "the .npy shape " + tuple + " has a size out of range");
        }
      }
      number.clear();
    } else if (c != ' ' && c != 'L') {
      fail(source, "the .npy shape " + tuple + " is not a tuple of sizes");
    }
  }
  return shape;
}

struct ElementType {
  DType dtype;
  std::string stored;
  int bytes;
  char kind;  // 'f' float, 'i' signed, 'u' unsigned, 'b' bool
};

ElementType element_type(const std::string& descr, const std::string& source) {
  if (descr.size() < 3) fail(source, "unsupported .npy dtype '" + descr + "'");
  const char kind = descr[1];
  int bytes = 0;
  try {
    bytes = std::stoi(descr.substr(2));
  } catch (const std::exception&) {
    fail(source, "unsupported .npy dtype '" + descr + "'");
  }
  const std::string unsupported = "unsupported .npy dtype '" + descr +
                                  "': save the array as float16/32/64, bool or a signed or unsigned integer (arr.astype(np.float32))";
  if (kind == 'f') {
    if (bytes == 2) return {DType::f16, "float16", 2, 'f'};
    if (bytes == 4) return {DType::f32, "float32", 4, 'f'};
    if (bytes == 8) return {DType::f64, "float64", 8, 'f'};
    fail(source, unsupported);
  }
  if (kind == 'i' || kind == 'u') {
    if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) fail(source, unsupported);
    return {DType::i64, std::string(kind == 'i' ? "int" : "uint") + std::to_string(bytes * 8), bytes, kind};
  }
  if (kind != 'b' || bytes != 1) fail(source, unsupported);
  return {DType::i64, "bool", 1, 'b'};
}

// One little- or big-endian element of `bytes` bytes at p.
std::uint64_t load_bits(const unsigned char* p, int bytes, bool big) {
  std::uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) {
    const unsigned char byte = big ? p[bytes - 1 - b] : p[b];
    v |= static_cast<std::uint64_t>(byte) << (8 * b);
  }
  return v;
}

std::string npy_header(const std::string& descr, const Shape& shape) {
  std::string dims;
  for (std::int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  else if (shape.size() == 1) dims.pop_back();  // "(3,)"
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Padded with spaces and a newline so that the data starts on a multiple of 64 bytes.
  const std::size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  return h;
}

}  // namespace

double Array::at(std::int64_t k) const {
  const auto u = static_cast<std::size_t>(k);
  return integer() ? static_cast<double>(i.at(u)) : f.at(u);
}

std::int64_t Array::int_at(std::int64_t k) const {
  const auto u = static_cast<std::size_t>(k);
  if (integer()) return i.at(u);
  const double v = f.at(u);
  if (std::isnan(v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

Tensor Array::to_tensor() const {
  if (integer()) return Tensor::from(i, shape);
  return Tensor::from(f, shape, dtype);
}

Array Array::of_tensor(const Tensor& t, std::string name) {
  Array a;
  a.name = std::move(name);
  a.shape = t.shape();
  a.dtype = t.dtype();
  if (t.dtype() == DType::i64) {
    a.stored = "int64";
    a.i = t.to_i64();
  } else {
    a.stored = std::string(info(t.dtype()).long_name);
    a.f = t.to_f64();
  }
  return a;
}

Array Array::floats(Shape shape, std::vector<double> values, DType dtype) {
  Array a;
  a.shape = std::move(shape);
  a.dtype = dtype;
  a.stored = std::string(info(dtype).long_name);
  a.f = std::move(values);
  return a;
}

Array Array::ints(Shape shape, std::vector<std::int64_t> values) {
  Array a;
  a.shape = std::move(shape);
  a.dtype = DType::i64;
  a.stored = "int64";
  a.i = std::move(values);
  return a;
}

Array parse_npy(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    fail(source, "not a numpy .npy file (no \\x93NUMPY magic): save it with np.save");
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  const int major = u[6];
  std::size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = u[8] | (static_cast<std::size_t>(u[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(source, "the .npy file is truncated in its header");
    header_len = load_bits(u + 8, 4, false);
    start = 12;
  } else {
    fail(source, ".npy format version " + std::to_string(major) + " is not supported (1, 2 and 3 are)");
  }
  if (start + header_len > bytes.size()) fail(source, "the .npy file is truncated in its header");
  const std::string header = bytes.substr(start, header_len);
  const std::string descr = header_value(header, "descr", source);
  if (header_value(header, "fortran_order", source) != "False")
    fail(source, "the array is in Fortran order: save np.ascontiguousarray(a) instead");
  Array a;
  a.shape = parse_shape(header_value(header, "shape", source), source);
  const std::optional<std::int64_t> count = checked_numel(a.shape);
  if (!count) fail(source, "the .npy header claims the shape " + to_string(a.shape) + ", which no array has: the file is corrupt");
  const ElementType t = element_type(descr, source);
  a.dtype = t.dtype;
  a.stored = t.stored;
  const bool big = descr[0] == '>';
  const std::size_t data = start + header_len;
  const std::int64_t n = *count;
  if (static_cast<double>(n) * t.bytes > static_cast<double>(bytes.size() - data))
    fail(source, "the .npy file is truncated: its shape " + to_string(a.shape) + " needs " +
                     human_bytes(static_cast<double>(n) * t.bytes) + " of " + t.stored + ", it has " +
                     std::to_string(bytes.size() - data) + " bytes");
  // Read as 8-byte values whatever the file stores.
  if (const auto why = over_budget(static_cast<std::uint64_t>(n) * 8))
    fail(source, "the array " + to_string(a.shape) + " " + *why + "; give ampcheck less data at once");
  const unsigned char* p = u + data;
  if (t.dtype == DType::i64) a.i.resize(static_cast<std::size_t>(n));
  else a.f.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k, p += t.bytes) {
    const std::uint64_t bits = load_bits(p, t.bytes, big);
    const auto ku = static_cast<std::size_t>(k);
    switch (t.kind) {
      case 'f':
        a.f[ku] = t.bytes == 2 ? decode(bits, DType::f16)
                  : t.bytes == 4 ? static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)))
                                 : std::bit_cast<double>(bits);
        break;
      case 'i': {
        const int shift = 64 - 8 * t.bytes;
        a.i[ku] = static_cast<std::int64_t>(bits << shift) >> shift;  // sign-extended
        break;
      }
      case 'u':
        if (t.bytes == 8 && bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          fail(source, "uint64 value " + std::to_string(bits) + " does not fit int64");
        a.i[ku] = static_cast<std::int64_t>(bits);
        break;
      default:
        a.i[ku] = bits != 0;
    }
  }
  return a;
}

Array read_npy(const std::string& path) {
  Array a = parse_npy(read_bytes(path, ".npy file"), path);
  a.name = std::filesystem::path(path).stem().string();
  return a;
}

std::vector<Array> read_npz(const std::string& path) {
  int code = 0;
  std::unique_ptr<zip_t, int (*)(zip_t*)> archive(zip_open(path.c_str(), ZIP_RDONLY, &code), zip_close);
  if (!archive) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    if (!std::filesystem::exists(path)) throw ArrayError(".npz file \"" + path + "\" cannot be read; check the path");
    fail(path, "not a readable .npz (zip) archive: " + why + "; save it with np.savez");
  }
  std::vector<Array> out;
  std::error_code size_error;
  const std::uint64_t archive_bytes = std::filesystem::file_size(path, size_error);
  const zip_int64_t count = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t k = 0; k < count; ++k) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(k), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
        !(st.valid & ZIP_STAT_NAME))
      fail(path, "member " + std::to_string(k) + " of the archive cannot be read");
    const std::string member = st.name;
    // What a member may claim: a stored one its compressed bytes, a deflated one at most
    // deflate's ratio (1032:1) of them, and those bytes come from the archive itself.
    if (!(st.valid & ZIP_STAT_COMP_SIZE) || st.comp_size > archive_bytes)
      fail(path, "member \"" + member + "\" claims " + std::to_string(st.comp_size) +
                     " compressed bytes in an archive of " + std::to_string(archive_bytes) + ": the archive is corrupt");
    const std::uint64_t most = st.comp_method == ZIP_CM_STORE ? st.comp_size : st.comp_size * 1032 + 1024;
    if (st.size > most)
      fail(path, "member \"" + member + "\" claims " + human_bytes(static_cast<double>(st.size)) + " from " +
                     std::to_string(st.comp_size) + " compressed bytes, more than any zip compression gives: the archive is corrupt");
    if (const auto why = over_budget(st.size))
      fail(path, "member \"" + member + "\" " + *why + "; give ampcheck less data at once");
    std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> file(zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(k), 0),
                                                           zip_fclose);
    if (!file) fail(path, "member \"" + member + "\" cannot be opened: " + zip_strerror(archive.get()));
    std::string bytes(static_cast<std::size_t>(st.size), '\0');
    if (zip_fread(file.get(), bytes.data(), st.size) != static_cast<zip_int64_t>(st.size))
      fail(path, "member \"" + member + "\" is truncated or corrupt");
    Array a = parse_npy(bytes, path + ":" + member);
    a.name = ends_with(member, ".npy") ? member.substr(0, member.size() - 4) : member;
    out.push_back(std::move(a));
  }
  if (out.empty()) fail(path, "the archive holds no arrays");
  return out;
}

std::string npy_bytes(const Array& a) {
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const char* descr = a.integer() ? "<i8" : a.dtype == DType::f64 ? "<f8" : "<f4";
  const std::string header = npy_header(descr, a.shape);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  auto put = [&out](std::uint64_t bits, int bytes) {
    for (int b = 0; b < bytes; ++b) out += static_cast<char>((bits >> (8 * b)) & 0xff);
  };
  for (std::int64_t k = 0; k < a.numel(); ++k) {
    const auto u = static_cast<std::size_t>(k);
    if (a.integer()) put(static_cast<std::uint64_t>(a.i[u]), 8);
    else if (a.dtype == DType::f64) put(std::bit_cast<std::uint64_t>(a.f[u]), 8);
    else put(std::bit_cast<std::uint32_t>(static_cast<float>(a.f[u])), 4);
  }
  return out;
}

std::vector<Array> read_arrays(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".npy" || e.path().extension() == ".pb") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw ArrayError(path + ": the folder holds no .npy or .pb files");
    std::vector<Array> out;
    for (const fs::path& f : files) out.push_back(read_arrays(f.string()).front());
    return out;
  }
  if (ends_with(path, ".npz")) return read_npz(path);
  if (ends_with(path, ".npy")) return {read_npy(path)};
  if (ends_with(path, ".pb")) {
    Array a = read_tensor_proto_file(path);
    a.name = fs::path(path).stem().string();
    return {a};
  }
  throw ArrayError("data \"" + path + "\": use an .npz with the arrays \"input\" and \"labels\", an .npy, an ONNX "
                   "TensorProto .pb, or a folder of .npy/.pb files");
}

Dataset dataset_of(const std::vector<Array>& arrays, const std::string& source, const std::string& input_name,
                   bool need_labels) {
  auto find = [&](const std::string& name) -> const Array* {
    for (const Array& a : arrays)
      if (a.name == name) return &a;
    return nullptr;
  };
  std::string names;
  for (const Array& a : arrays) names += (names.empty() ? "" : ", ") + ("\"" + a.name + "\" " + to_string(a.shape));
  const Array* x = find(input_name);
  if (!x) x = find("input");
  if (!x) x = find("input_0");
  if (!x) {
    std::vector<const Array*> others;
    for (const Array& a : arrays)
      if (a.name != "labels") others.push_back(&a);
    if (others.size() == 1) x = others.front();
  }
  if (!x)
    fail(source, "no inputs: name the array \"input\" (or \"" + input_name + "\", the model's input); it holds " + names);
  if (x->shape.empty() || x->shape[0] < 1) fail(source, "the inputs \"" + x->name + "\" need a leading batch dimension, got " + to_string(x->shape));
  Dataset d;
  d.x = x->to_tensor();
  const Array* y = find("labels");
  if (!y) {
    if (need_labels)
      fail(source, "no labels: training needs an int array \"labels\" [N] beside the inputs (np.savez(path, input=x, "
                   "labels=y)); it holds " + names);
    d.y = Tensor::zeros({x->shape[0]}, DType::i64);
    return d;
  }
  if (!y->integer() || y->stored == "bool")
    fail(source, "the labels must be integers (class indices), got " + y->stored);
  if (y->shape.size() != 1 || y->shape[0] != x->shape[0])
    fail(source, "the labels must be [N] with N = " + std::to_string(x->shape[0]) + " (the inputs' rows), got " +
                     to_string(y->shape));
  for (std::int64_t v : y->i)
    if (v < 0) fail(source, "label " + std::to_string(v) + " is negative: labels are class indices >= 0");
  d.y = y->to_tensor();
  return d;
}

Dataset dataset_of(const std::vector<Array>& arrays, const std::string& source, const std::vector<std::string>& input_names,
                   bool need_labels) {
  if (input_names.empty()) fail(source, "the model takes no inputs");
  Dataset d = dataset_of(arrays, source, input_names[0], need_labels);
  for (std::size_t k = 1; k < input_names.size(); ++k) {
    const std::string& name = input_names[k];
    auto it = std::find_if(arrays.begin(), arrays.end(), [&](const Array& a) {
      return a.name == name || a.name == "input_" + std::to_string(k);
    });
    if (it == arrays.end())
      fail(source, "the model takes " + std::to_string(input_names.size()) + " inputs; no array named \"" + name +
                       "\" (or \"input_" + std::to_string(k) + "\")");
    if (it->shape.empty() || it->shape[0] != d.x.size(0))
      fail(source, "\"" + it->name + "\" " + to_string(it->shape) + " needs the inputs' leading dimension, " +
                       std::to_string(d.x.size(0)));
    d.more.push_back(it->to_tensor());
  }
  return d;
}

}  // namespace ampcheck::models
