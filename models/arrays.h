// Named arrays from the files users bring with an ONNX model: numpy's .npy and .npz, and
// ONNX's own TensorProto .pb (the layout of ONNX's test data: test_data_set_0/input_0.pb).
// Values are kept exactly (every float dtype widens to double without rounding, every
// integer and bool type to int64), so an array can become a tensor of its own dtype.
//
// Every failure is an ArrayError that names the file and what is wrong with it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "models/data.h"

namespace ampcheck::models {

class ArrayError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct Array {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;     // f64, f32, f16, bf16, or i64 for every integer and bool type
  std::string stored = "float32";  // the type as the file stores it ("int32", "bool", "float16")
  std::vector<double> f;         // floating values (dtype is floating)
  std::vector<std::int64_t> i;   // integer values (dtype is i64)

  bool integer() const { return dtype == DType::i64; }
  std::int64_t numel() const { return ampcheck::numel(shape); }
  // Element k as a double / an int64 whatever the kind (integers beyond 2^53 round).
  double at(std::int64_t k) const;
  std::int64_t int_at(std::int64_t k) const;
  // The tensor of this array's dtype on the CPU.
  Tensor to_tensor() const;
  static Array of_tensor(const Tensor& t, std::string name = "");
  static Array floats(Shape shape, std::vector<double> values, DType dtype = DType::f32);
  static Array ints(Shape shape, std::vector<std::int64_t> values);
};

// numpy's format (version 1, 2 or 3 headers; little or big endian; C order; float16,
// float32, float64, bool, int8..int64, uint8..uint64). Fortran order and object arrays are
// errors that say how to re-save the array.
Array parse_npy(const std::string& bytes, const std::string& source);
Array read_npy(const std::string& path);
// Every array of an .npz (np.savez or np.savez_compressed), in the archive's order, each
// named as numpy names it (the member's name without ".npy").
std::vector<Array> read_npz(const std::string& path);
// An .npy file's bytes for the array (float32 for f32, f16 and bf16 values, which it holds
// exactly; float64 for f64; int64 for integers).
std::string npy_bytes(const Array& a);

// The arrays of `path`: an .npz (all of its arrays), an .npy or a TensorProto .pb (one
// array, named after the file), or a folder of .npy and .pb files (one array per file,
// named after it, in name order). ONNX TensorProto parsing is the ONNX library's
// (models/onnx_file.cpp).
std::vector<Array> read_arrays(const std::string& path);

// A training set from arrays: the inputs are the array called `input_name` (the model's
// input), or "input", or "input_0" (ONNX test data), or the only array that is not the
// labels; the labels are "labels" (int [N], >= 0). Throws ArrayError naming what is
// missing and the arrays the file has.
Dataset dataset_of(const std::vector<Array>& arrays, const std::string& source, const std::string& input_name,
                   bool need_labels = true);
// A model of several inputs: each one the array of its name (the first also "input" or
// "input_0", the others "input_<k>"), into x and more. Throws ArrayError naming what is missing.
Dataset dataset_of(const std::vector<Array>& arrays, const std::string& source, const std::vector<std::string>& input_names,
                   bool need_labels = true);

}  // namespace ampcheck::models
