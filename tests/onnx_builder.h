// Small ONNX models for the importer's tests, written with the ONNX library's protobuf
// types (as an exporter writes them), saved to a temporary file.
#pragma once

#include <onnx/onnx_pb.h>

#include <unistd.h>  // getpid

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <system_error>
#include <vector>

namespace ampcheck::testing {

// A file in this process's own temporary folder (ctest runs each test as a process of its
// own, two at a time: a folder shared between them let one test read a data file while
// another rewrote it). Removed when the process exits.
inline std::string temp_path(const std::string& name) {
  static const struct Dir {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("ampcheck-onnx-tests." + std::to_string(::getpid()));
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } dir;
  std::filesystem::create_directories(dir.path);
  return (dir.path / name).string();
}

class OnnxBuilder {
 public:
  explicit OnnxBuilder(std::int64_t opset = 17, std::string producer = "pytorch") {
    m_.set_ir_version(8);
    m_.set_producer_name(producer);
    m_.set_producer_version("2.15.0");
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m_.mutable_graph()->set_name("test_graph");
  }

  // A float32 tensor input or output; -1 for a symbolic dim ("batch").
  OnnxBuilder& input(const std::string& name, std::vector<std::int64_t> dims, int elem = onnx::TensorProto::FLOAT) {
    value(m_.mutable_graph()->add_input(), name, dims, elem);
    return *this;
  }
  OnnxBuilder& output(const std::string& name, std::vector<std::int64_t> dims, int elem = onnx::TensorProto::FLOAT) {
    value(m_.mutable_graph()->add_output(), name, dims, elem);
    return *this;
  }
  OnnxBuilder& init(const std::string& name, std::vector<std::int64_t> dims, const std::vector<float>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  OnnxBuilder& init_i64(const std::string& name, std::vector<std::int64_t> dims, const std::vector<std::int64_t>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto v : values) t->add_int64_data(v);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::string& name, std::initializer_list<std::string> in,
                        std::initializer_list<std::string> out) {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return *n;
  }
  static void attr(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, const std::vector<std::string>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const auto& x : v) a->add_strings(x);
  }
  static void attr(onnx::NodeProto& n, const std::string& name, std::vector<std::int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }

  // Writes the model to a file named `name` in the test's temporary folder; returns its path.
  std::string save(const std::string& name) const {
    const auto path = temp_path(name);
    std::ofstream f(path, std::ios::binary);
    m_.SerializeToOstream(&f);
    return path;
  }
  onnx::ModelProto& proto() { return m_; }

 private:
  static void value(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::int64_t>& dims, int elem) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (auto d : dims) {
      auto* dim = shape->add_dim();
      if (d < 0) dim->set_dim_param("batch");
      else dim->set_dim_value(d);
    }
  }
  onnx::ModelProto m_;
};

// An .npy of float32 or int64 values, written by the product's own writer (read back by
// numpy-written fixtures' reader in the arrays tests).

}  // namespace ampcheck::testing
