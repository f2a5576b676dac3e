#include "models/onnx_file.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <google/protobuf/io/coded_stream.h>  // a parse with our own nesting limit

#include <algorithm>
#include <bit>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "engine/util/strings.h"  // one_line
#include "engine/dtype/convert.h"

namespace ampcheck::models::onnx_file {
namespace {

// One line, whatever the library's message held (the checker's node dumps span several).
[[noreturn]] void fail(const std::string& where, const std::string& msg) { throw OnnxError(where + ": " + one_line(msg)); }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw OnnxError("ONNX file \"" + path + "\" cannot be read; check the path");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Little-endian raw_data, `bytes` per element.
std::uint64_t raw_bits(const std::string& raw, std::size_t k, int bytes) {
  std::uint64_t v = 0;
  for (int b = 0; b < bytes; ++b)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(raw[k * static_cast<std::size_t>(bytes) + static_cast<std::size_t>(b)]))
         << (8 * b);
  return v;
}

int elem_bytes(int t) {
  switch (t) {
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8: return 1;
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: return 2;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::FLOAT: return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::DOUBLE: return 8;
    default: return 0;
  }
}

// Element k of a typed TensorProto as raw bits of its type (sign-extended integers as int64
// bits), from raw_data or the repeated field the type lives in.
Array convert(const onnx::TensorProto& t, const std::string& where) {
  const int type = t.data_type();
  Array a;
  a.name = t.name();
  a.stored = elem_type_name(type);
  double count = 1;
  for (std::int64_t d : t.dims()) {
    if (d < 0) fail(where, "tensor \"" + t.name() + "\" has a negative size");
    a.shape.push_back(d);
    count *= static_cast<double>(d);
  }
  // (A zero among the dims makes the tensor empty whatever the others: numel() says 0.)
  if (count > 1e11) fail(where, "tensor \"" + t.name() + "\" claims " + to_string(a.shape) + " elements: the file is corrupt");
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    fail(where, "tensor \"" + t.name() + "\" keeps its data in an external file: ampcheck reads self-contained models; "
                "save with onnx.save_model(model, path, save_as_external_data=False)");
  if (t.has_segment()) fail(where, "tensor \"" + t.name() + "\" is segmented (or not a tensor): not supported");
  const int bytes = elem_bytes(type);
  if (bytes == 0)
    fail(where, "tensor \"" + t.name() + "\" has data type " + a.stored +
                    ": not supported (ampcheck reads float16/32/64, bfloat16, bool and integer tensors)");
  const std::int64_t n = a.numel();
  const bool floating = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE ||
                        type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16;
  a.dtype = type == onnx::TensorProto::FLOAT     ? DType::f32
            : type == onnx::TensorProto::DOUBLE  ? DType::f64
            : type == onnx::TensorProto::FLOAT16 ? DType::f16
            : type == onnx::TensorProto::BFLOAT16 ? DType::bf16
                                                  : DType::i64;
  const bool raw = t.has_raw_data();
  std::int64_t available = 0;
  if (raw) {
    available = static_cast<std::int64_t>(t.raw_data().size()) / bytes;
  } else {
    switch (type) {
      case onnx::TensorProto::FLOAT: available = t.float_data_size(); break;
      case onnx::TensorProto::DOUBLE: available = t.double_data_size(); break;
      case onnx::TensorProto::INT64: available = t.int64_data_size(); break;
      case onnx::TensorProto::UINT32:
      case onnx::TensorProto::UINT64: available = t.uint64_data_size(); break;
      default: available = t.int32_data_size();
    }
  }
  if (available != n)
    fail(where, "tensor \"" + t.name() + "\" has " + std::to_string(available) + " values for its shape " +
                    to_string(a.shape) + " (" + std::to_string(n) + "): the file is corrupt");
  if (floating) a.f.resize(static_cast<std::size_t>(n));
  else a.i.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    const auto u = static_cast<std::size_t>(k);
    const int ki = static_cast<int>(k);
    if (raw) {
      const std::uint64_t bits = raw_bits(t.raw_data(), u, bytes);
      switch (type) {
        case onnx::TensorProto::FLOAT: a.f[u] = std::bit_cast<float>(static_cast<std::uint32_t>(bits)); break;
        case onnx::TensorProto::DOUBLE: a.f[u] = std::bit_cast<double>(bits); break;
        case onnx::TensorProto::FLOAT16: a.f[u] = decode(bits, DType::f16); break;
        case onnx::TensorProto::BFLOAT16: a.f[u] = decode(bits, DType::bf16); break;
        case onnx::TensorProto::INT8: a.i[u] = static_cast<std::int8_t>(bits); break;
        case onnx::TensorProto::INT16: a.i[u] = static_cast<std::int16_t>(bits); break;
        case onnx::TensorProto::INT32: a.i[u] = static_cast<std::int32_t>(bits); break;
        case onnx::TensorProto::INT64: a.i[u] = static_cast<std::int64_t>(bits); break;
        case onnx::TensorProto::UINT64:
          if (bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            fail(where, "tensor \"" + t.name() + "\" holds a uint64 beyond int64");
          a.i[u] = static_cast<std::int64_t>(bits);
          break;
        case onnx::TensorProto::BOOL: a.i[u] = bits != 0; break;
        default: a.i[u] = static_cast<std::int64_t>(bits);  // uint8, uint16, uint32
      }
    } else {
      switch (type) {
        case onnx::TensorProto::FLOAT: a.f[u] = t.float_data(ki); break;
        case onnx::TensorProto::DOUBLE: a.f[u] = t.double_data(ki); break;
        case onnx::TensorProto::FLOAT16: a.f[u] = decode(static_cast<std::uint16_t>(t.int32_data(ki)), DType::f16); break;
        case onnx::TensorProto::BFLOAT16: a.f[u] = decode(static_cast<std::uint16_t>(t.int32_data(ki)), DType::bf16); break;
        case onnx::TensorProto::INT64: a.i[u] = t.int64_data(ki); break;
        case onnx::TensorProto::UINT32:
        case onnx::TensorProto::UINT64:
          if (t.uint64_data(ki) > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            fail(where, "tensor \"" + t.name() + "\" holds a uint64 beyond int64");
          a.i[u] = static_cast<std::int64_t>(t.uint64_data(ki));
          break;
        case onnx::TensorProto::BOOL: a.i[u] = t.int32_data(ki) != 0; break;
        default: a.i[u] = t.int32_data(ki);
      }
    }
  }
  return a;
}

ValueInfo value_info(const onnx::ValueInfoProto& v) {
  ValueInfo out;
  out.name = v.name();
  if (v.has_type() && v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    out.elem_type = elem_type_name(tt.elem_type());
    if (tt.has_shape()) {
      Shape s;
      for (const auto& d : tt.shape().dim()) s.push_back(d.has_dim_value() ? d.dim_value() : -1);
      out.shape = s;
    }
  }
  return out;
}

Attribute attribute(const onnx::AttributeProto& p, const std::string& where) {
  Attribute a;
  switch (p.type()) {
    case onnx::AttributeProto::FLOAT: a.kind = Attribute::Kind::f; a.f = p.f(); break;
    case onnx::AttributeProto::INT: a.kind = Attribute::Kind::i; a.i = p.i(); break;
    case onnx::AttributeProto::STRING: a.kind = Attribute::Kind::s; a.s = p.s(); break;
    case onnx::AttributeProto::TENSOR: a.kind = Attribute::Kind::t; a.t = convert(p.t(), where); break;
    case onnx::AttributeProto::FLOATS:
      a.kind = Attribute::Kind::floats;
      a.floats.assign(p.floats().begin(), p.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      a.kind = Attribute::Kind::ints;
      a.ints.assign(p.ints().begin(), p.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      a.kind = Attribute::Kind::strings;
      a.strings.assign(p.strings().begin(), p.strings().end());
      break;
    default:
      a.kind = Attribute::Kind::other;
      a.type_name = onnx::AttributeProto::AttributeType_Name(p.type());
  }
  return a;
}

// ---- what ampcheck checks before the ONNX library sees a file ---------------------------
// The library's checker and shape inference do arithmetic on attributes and constants
// (a convolution's output size divides by its strides) and stat() external data paths;
// given a hostile file they divide by zero or probe the machine. So the graph is walked
// first, and what the library would compute on is checked here.

constexpr int kMaxGraphNesting = 32;  // subgraphs in If/Loop/Scan, nested

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

// The positive ints a convolution or pooling attribute must hold, of the spatial rank.
void check_window_attributes(const onnx::NodeProto& n, const std::string& where) {
  std::int64_t rank = -1;
  const auto ints = [&](const char* name, bool positive, int per_axis) {
    const onnx::AttributeProto* a = find_attribute(n, name);
    if (!a) return;
    if (a->type() != onnx::AttributeProto::INTS)
      fail(where, std::string("attribute \"") + name + "\" must be a list of ints");
    for (std::int64_t v : a->ints())
      if (positive ? v <= 0 : v < 0)
        fail(where, std::string("attribute \"") + name + "\" holds " + std::to_string(v) + ": every value must be " +
                        (positive ? "at least 1" : "0 or more") + " (the file is malformed; re-export the model)");
    if (a->ints_size() % per_axis != 0)
      fail(where, std::string("attribute \"") + name + "\" has " + std::to_string(a->ints_size()) +
                      " values: it needs " + std::to_string(per_axis) + " per spatial axis");
    const std::int64_t axes = a->ints_size() / per_axis;
    if (rank >= 0 && axes != rank)
      fail(where, std::string("attribute \"") + name + "\" describes " + std::to_string(axes) +
                      " spatial axes, another attribute " + std::to_string(rank) + ": they must agree");
    rank = axes;
  };
  ints("kernel_shape", true, 1);
  ints("strides", true, 1);
  ints("dilations", true, 1);
  ints("pads", false, 2);
  ints("output_padding", false, 1);
  ints("output_shape", true, 1);
}

// A tensor's raw_data must hold its dims' worth of its type's bytes: the ONNX library's
// shape inference copies it as whole elements without checking (ParseData: 4 bytes for an
// int64 scalar wrote through a null pointer). Strings and packed 4-bit types, which have
// no byte size per element, and data kept in typed fields or external files are not judged
// here, nor types newer than the ONNX library here (its inference does not parse them).
void check_raw_data(const onnx::TensorProto& t, const std::string& where) {
  if (t.raw_data().empty()) return;
  // The types ampcheck reads, and the complex ones the library's inference also copies.
  const int bytes = t.data_type() == onnx::TensorProto::COMPLEX64    ? 8
                    : t.data_type() == onnx::TensorProto::COMPLEX128 ? 16
                                                                      : elem_bytes(t.data_type());
  if (bytes == 0) return;
  std::uint64_t n = 1;
  bool overflow = false;
  for (const std::int64_t d : t.dims()) {
    if (d < 0) fail(where, "tensor \"" + t.name() + "\" has a negative dimension (" + std::to_string(d) + ")");
    overflow = overflow || (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d));
    n *= static_cast<std::uint64_t>(d);
  }
  if (overflow || n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(bytes) ||
      n * static_cast<std::uint64_t>(bytes) != t.raw_data().size())
    fail(where, "tensor \"" + t.name() + "\" holds " + std::to_string(t.raw_data().size()) + " bytes of raw_data for " +
                    (overflow ? std::string("dims whose product overflows")
                              : std::to_string(n) + (n == 1 ? " value" : " values") + " of " + std::to_string(bytes) + " bytes") +
                    ": the file is truncated or malformed");
}

// Every node of `graph` and of the graphs nested in its attributes.
void precheck_graph(const onnx::GraphProto& graph, const std::string& path, int depth) {
  if (depth > kMaxGraphNesting)
    fail(path, "subgraphs (If, Loop, Scan) are nested more than " + std::to_string(kMaxGraphNesting) +
                   " deep: the file is malformed or hostile");
  int index = 0;
  for (const onnx::NodeProto& n : graph.node()) {
    const std::string where = path + ": node \"" + (n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name()) +
                              "\" (" + n.op_type() + ")";
    ++index;
    const std::string& op = n.op_type();
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (default_domain && (op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv" ||
                           op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "MaxUnpool" ||
                           op == "MaxRoiPool" || op == "Col2Im" || op == "DeformConv"))
      check_window_attributes(n, where);
    if (default_domain && (op == "DepthToSpace" || op == "SpaceToDepth"))
      if (const onnx::AttributeProto* b = find_attribute(n, "blocksize"); b && b->i() <= 0)
        fail(where, "attribute \"blocksize\" is " + std::to_string(b->i()) + ": it must be at least 1");
    for (const auto& a : n.attribute()) {
      if (a.has_g()) precheck_graph(a.g(), path, depth + 1);
      for (const auto& g : a.graphs()) precheck_graph(g, path, depth + 1);
      if (a.has_t()) check_raw_data(a.t(), where);
      for (const auto& t : a.tensors()) check_raw_data(t, where);
      if (a.has_sparse_tensor()) {
        check_raw_data(a.sparse_tensor().values(), where);
        check_raw_data(a.sparse_tensor().indices(), where);
      }
    }
  }
  for (const onnx::TensorProto& t : graph.initializer()) check_raw_data(t, path + ": initializer");
  for (const onnx::SparseTensorProto& t : graph.sparse_initializer()) {
    check_raw_data(t.values(), path + ": sparse initializer");
    check_raw_data(t.indices(), path + ": sparse initializer");
  }
}

// External data (onnx.save_model(..., save_as_external_data=True)): the bytes of a tensor
// in a file beside the model. Read here, into the tensor, before the library sees the
// model (its checker would stat() the location, resolved against the current folder). A
// location must be a relative path that stays in the model's folder or below it; anything
// else gets the same message whether or not it exists, so a model cannot probe the
// machine's files.
void inline_external_data(onnx::TensorProto& t, const std::string& path) {
  const std::string what = path + ": tensor \"" + t.name() + "\" keeps its data in an external file";
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    const auto number = [&](const std::string& v) {
      std::int64_t x = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (ec != std::errc() || end != v.data() + v.size() || x < 0)
        throw OnnxError(what + " whose \"" + kv.key() + "\" is not a size (\"" + v.substr(0, 40) + "\")");
      return x;
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number(kv.value());
    else if (kv.key() == "length") length = number(kv.value());
  }
  const std::filesystem::path rel(location);
  bool inside = !location.empty() && rel.is_relative() && !rel.has_root_name() && location.find('\0') == std::string::npos;
  for (const auto& part : rel.lexically_normal())
    inside = inside && part != "..";
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  const std::string refused = what + " at \"" + location.substr(0, 200) +
                              "\", which is not a path inside the model's folder: ampcheck reads external data only "
                              "from files beside the model or below it (save with onnx.save_model(model, path, "
                              "save_as_external_data=True, location=\"NAME.data\"))";
  if (!inside) throw OnnxError(refused);
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::weakly_canonical(folder.empty() ? "." : folder, ec);
  const std::filesystem::path file = std::filesystem::weakly_canonical(base / rel.lexically_normal(), ec);
  const auto [b, f] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
  if (ec || b != base.end()) throw OnnxError(refused);  // a link that leads out of the folder
  std::ifstream in(file, std::ios::binary);
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (!in || ec) throw OnnxError(what + " \"" + location + "\" beside the model, which cannot be read: copy it next to " + path);
  if (static_cast<std::uintmax_t>(offset) > size || (length >= 0 && static_cast<std::uintmax_t>(length) > size - static_cast<std::uintmax_t>(offset)))
    throw OnnxError(what + " \"" + location + "\" of " + std::to_string(size) + " bytes, but asks for bytes " +
                    std::to_string(offset) + " to " + std::to_string(offset + std::max<std::int64_t>(length, 0)) +
                    ": the data file is truncated or not this model's");
  const std::uintmax_t n = length >= 0 ? static_cast<std::uintmax_t>(length) : size - static_cast<std::uintmax_t>(offset);
  std::string bytes(static_cast<std::size_t>(n), '\0');
  in.seekg(offset);
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  if (!in) throw OnnxError(what + " \"" + location + "\" that could not be read whole");
  t.set_raw_data(std::move(bytes));
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::DEFAULT);
}

}  // namespace

std::string elem_type_name(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return "float32";
    case onnx::TensorProto::UINT8: return "uint8";
    case onnx::TensorProto::INT8: return "int8";
    case onnx::TensorProto::UINT16: return "uint16";
    case onnx::TensorProto::INT16: return "int16";
    case onnx::TensorProto::INT32: return "int32";
    case onnx::TensorProto::INT64: return "int64";
    case onnx::TensorProto::STRING: return "string";
    case onnx::TensorProto::BOOL: return "bool";
    case onnx::TensorProto::FLOAT16: return "float16";
    case onnx::TensorProto::DOUBLE: return "float64";
    case onnx::TensorProto::UINT32: return "uint32";
    case onnx::TensorProto::UINT64: return "uint64";
    case onnx::TensorProto::BFLOAT16: return "bfloat16";
    default: return "type " + std::to_string(t);
  }
}

std::string Node::label() const {
  return "node \"" + name + "\" (" + op_type + (domain.empty() ? "" : " of domain " + domain) + ", opset " +
         std::to_string(opset) + ")";
}

Graph load(const std::string& path) {
  const std::string bytes = read_all(path);
  onnx::ModelProto model;
  {
    // protobuf's own nesting limit (100) would call a deeply nested file "not an ONNX
    // model"; its depth is judged by precheck_graph instead, which says so.
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                              static_cast<int>(std::min<std::size_t>(bytes.size(), INT32_MAX)));
    in.SetRecursionLimit(4 * kMaxGraphNesting + 64);
    if (bytes.empty() || bytes.size() > INT32_MAX || !model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
      fail(path, "not an ONNX model (protobuf ModelProto), or nested deeper than " + std::to_string(kMaxGraphNesting) +
                     " subgraphs: export it with torch.onnx.export or paddle2onnx");
  }
  if (!model.has_graph() || model.graph().node_size() == 0) fail(path, "the model has no graph nodes");
  precheck_graph(model.graph(), path, 0);
  for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      inline_external_data(t, path);
      check_raw_data(t, path + ": initializer");
    }
  for (onnx::NodeProto& n : *model.mutable_graph()->mutable_node())
    for (onnx::AttributeProto& a : *n.mutable_attribute())
      if (a.has_t() && a.t().data_location() == onnx::TensorProto::EXTERNAL) inline_external_data(*a.mutable_t(), path);
  Graph g;
  g.path = path;
  g.producer = model.producer_name();
  g.producer_version = model.producer_version();
  g.ir_version = model.ir_version();
  g.graph_name = model.graph().name();
  std::map<std::string, std::int64_t> opsets;
  for (const auto& o : model.opset_import()) {
    const std::string domain = o.domain() == "ai.onnx" ? "" : o.domain();
    opsets[domain] = o.version();
  }
  if (!opsets.count("")) opsets[""] = 1;
  g.opset = opsets[""];

  // The ONNX library checks what it knows: a newer opset than this library's is read with
  // ampcheck's own checks of each node it imports (their attributes, inputs and shapes).
  const auto& known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const int library_max = known.count("") ? known.at("").second : 0;
  if (g.opset > library_max) {
    g.check_note = "the model imports ONNX opset " + std::to_string(g.opset) + "; the ONNX library here knows opsets up to " +
                   std::to_string(library_max) +
                   ", so its checker and shape inference were skipped and ampcheck checked each node it imports itself";
  } else if (g.ir_version > onnx::IR_VERSION) {
    // A newer file format (onnx.helper writes its own latest): the same, for the IR version.
    g.check_note = "the file is ONNX IR version " + std::to_string(g.ir_version) + "; the ONNX library here reads up to " +
                   std::to_string(static_cast<int>(onnx::IR_VERSION)) +
                   ", so its checker and shape inference were skipped and ampcheck checked each node it imports itself";
  } else {
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      fail(path, std::string("the ONNX checker rejects the model: ") + e.what());
    }
    try {
      onnx::ShapeInferenceOptions options(true, 1, false);
      onnx::ModelProto strict = model;
      onnx::shape_inference::InferShapes(strict, onnx::OpSchemaRegistry::Instance(), options);
      model = std::move(strict);
    } catch (const std::exception& strict_error) {
      // Old exporters wrote graphs that strict inference rejects on a type constraint of
      // their time (an int64 Constant at opset 1): inference without type checks, with a
      // note. A shape that does not fit is still caught when the model first runs.
      try {
        onnx::ShapeInferenceOptions lenient(false, 0, false);
        onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), lenient);
        g.check_note = std::string("strict ONNX shape inference objects: ") + strict_error.what();
      } catch (const std::exception& e) {
        fail(path, std::string("ONNX shape inference fails: ") + e.what());
      }
    }
  }

  const onnx::GraphProto& graph = model.graph();
  for (const onnx::TensorProto& t : graph.initializer()) {
    if (g.initializers.count(t.name())) fail(path, "initializer \"" + t.name() + "\" is defined twice");
    g.initializers[t.name()] = convert(t, path);
    g.initializer_order.push_back(t.name());
  }
  if (graph.sparse_initializer_size() > 0) fail(path, "sparse initializers are not supported");
  for (const auto& v : graph.input())
    if (!g.initializers.count(v.name())) g.inputs.push_back(value_info(v));
  for (const auto& v : graph.output()) g.outputs.push_back(value_info(v));
  for (const auto* list : {&graph.input(), &graph.output()})
    for (const auto& v : *list)
      if (v.has_type() && !v.type().has_tensor_type())
        fail(path, "graph value \"" + v.name() + "\" is a sequence, map or optional: not supported (ampcheck reads tensors)");
  for (const auto& v : graph.value_info()) g.value_info[v.name()] = value_info(v);
  for (const auto& v : graph.input()) g.value_info[v.name()] = value_info(v);
  for (const auto& v : graph.output()) g.value_info[v.name()] = value_info(v);

  std::set<std::string> defined(g.initializer_order.begin(), g.initializer_order.end());
  for (const ValueInfo& v : g.inputs) defined.insert(v.name);
  int index = 0;
  for (const onnx::NodeProto& p : graph.node()) {
    Node n;
    n.name = p.name().empty() ? p.op_type() + "_" + std::to_string(index) : p.name();
    n.op_type = p.op_type();
    n.domain = p.domain() == "ai.onnx" ? "" : p.domain();
    n.opset = opsets.count(n.domain) ? opsets[n.domain] : 0;
    n.inputs.assign(p.input().begin(), p.input().end());
    n.outputs.assign(p.output().begin(), p.output().end());
    for (const auto& a : p.attribute()) n.attributes[a.name()] = attribute(a, path + ": " + n.label());
    for (const std::string& in : n.inputs)
      if (!in.empty() && !defined.count(in))
        fail(path, n.label() + " reads \"" + in + "\", which no earlier node, input or initializer defines "
                   "(the nodes must be in topological order)");
    for (const std::string& out : n.outputs)
      if (!out.empty()) defined.insert(out);
    g.nodes.push_back(std::move(n));
    ++index;
  }
  for (const ValueInfo& o : g.outputs)
    if (!defined.count(o.name)) fail(path, "graph output \"" + o.name + "\" is not computed by any node");
  return g;
}

}  // namespace ampcheck::models::onnx_file

namespace ampcheck::models {

Array read_tensor_proto_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ArrayError("TensorProto file \"" + path + "\" cannot be read; check the path");
  std::ostringstream s;
  s << in.rdbuf();
  onnx::TensorProto t;
  if (!t.ParseFromString(s.str()))
    throw ArrayError(path + ": not an ONNX TensorProto (.pb): write it with onnx.numpy_helper.from_array(a).SerializeToString()");
  try {
    return onnx_file::convert(t, path);
  } catch (const onnx_file::OnnxError& e) {
    throw ArrayError(e.what());
  }
}

}  // namespace ampcheck::models
