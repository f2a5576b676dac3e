#include "engine/amp/fp8_scale_fn.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "kernels/fp_bits.h"  // f64_to_f32

namespace ampcheck::amp {

using kernels::f64_to_f32;

// ---- values: PyTorch's one-element float32 tensors and Python's numbers
namespace {

struct Value {
  enum Kind { tensor, tensor_bool, py_float, py_int, py_bool, none } kind = none;
  double x = 0;  // a tensor's float32 value, exactly; a bool's 0 or 1
  bool is_tensor() const { return kind == tensor || kind == tensor_bool; }
  bool is_bool() const { return kind == tensor_bool || kind == py_bool; }
};

Value tensor_of(double x) { return {Value::tensor, static_cast<double>(f64_to_f32(x))}; }
Value py_float(double x) { return {Value::py_float, x}; }
Value py_int(double x) { return {Value::py_int, x}; }

// The kind of a binary arithmetic result, and its operands as the operation sees them: with
// a tensor operand both become float32 (a Python number meets a float32 tensor as float32;
// a bool tensor as 0/1), and the result is rounded to float32.
Value arithmetic(const Value& a, const Value& b, double (*op)(double, double)) {
  if (a.kind == Value::none || b.kind == Value::none) throw std::domain_error("None in arithmetic");
  if (a.is_tensor() || b.is_tensor()) {
    const double fa = f64_to_f32(a.x), fb = f64_to_f32(b.x);
    return tensor_of(f64_to_f32(op(fa, fb)));
  }
  const bool ints = (a.kind == Value::py_int || a.kind == Value::py_bool) && (b.kind == Value::py_int || b.kind == Value::py_bool);
  const double r = op(a.x, b.x);
  return ints && std::isfinite(r) && r == std::floor(r) ? py_int(r) : py_float(r);
}

Value compare(const Value& a, const Value& b, bool (*op)(double, double)) {
  if (a.kind == Value::none || b.kind == Value::none) throw std::domain_error("None in a comparison");
  if (a.is_tensor() || b.is_tensor()) {
    const double fa = f64_to_f32(a.x), fb = f64_to_f32(b.x);
    return {Value::tensor_bool, op(fa, fb) ? 1.0 : 0.0};
  }
  return {Value::py_bool, op(a.x, b.x) ? 1.0 : 0.0};
}

bool truth(const Value& v) { return v.kind != Value::none && v.x != 0; }  // NaN is true, as in Python

}  // namespace

// ---- the syntax tree
struct Fp8ScaleFunction::Node {
  enum Kind { parameter, constant, unary_minus, binary, comparison, ternary, boolean_and, boolean_or,
              boolean_not, call } kind = constant;
  double value = 0;            // number / constant
  Value::Kind value_kind = Value::py_float;
  int parameter_index = 0;     // 0 amax, 1 scale, 2 fp8_max, 3 recipe (only through its attributes)
  std::string op;              // binary / comparison operator, or the function's name
  std::vector<std::shared_ptr<const Node>> args;
  std::map<std::string, std::shared_ptr<const Node>> kwargs;
};

namespace {

using NodePtr = std::shared_ptr<const Fp8ScaleFunction::Node>;
using Node = Fp8ScaleFunction::Node;

struct Token {
  enum Kind { number, name, string, op, end } kind = end;
  std::string text;
  std::size_t at = 0;
};

// The functions a scaling function may call: name -> (positional arguments min, max).
const std::map<std::string, std::pair<int, int>>& functions() {
  static const std::map<std::string, std::pair<int, int>> f = {
      {"torch.where", {3, 3}},      {"torch.isfinite", {1, 1}},  {"torch.isinf", {1, 1}},     {"torch.isnan", {1, 1}},
      {"torch.clamp", {1, 3}},      {"torch.clamp_min", {2, 2}}, {"torch.clamp_max", {2, 2}}, {"torch.maximum", {2, 2}},
      {"torch.minimum", {2, 2}},    {"torch.fmax", {2, 2}},      {"torch.fmin", {2, 2}},      {"torch.max", {1, 2}},
      {"torch.min", {1, 2}},        {"torch.abs", {1, 1}},       {"torch.floor", {1, 1}},     {"torch.ceil", {1, 1}},
      {"torch.round", {1, 1}},      {"torch.trunc", {1, 1}},     {"torch.log2", {1, 1}},      {"torch.log", {1, 1}},
      {"torch.exp", {1, 1}},        {"torch.exp2", {1, 1}},      {"torch.sqrt", {1, 1}},      {"torch.rsqrt", {1, 1}},
      {"torch.reciprocal", {1, 1}}, {"torch.pow", {2, 2}},       {"torch.full_like", {2, 2}}, {"torch.ones_like", {1, 1}},
      {"torch.zeros_like", {1, 1}}, {"torch.tensor", {1, 1}},    {"torch.finfo", {1, 1}},     {"abs", {1, 1}},
      {"min", {2, 2}},              {"max", {2, 2}},             {"float", {1, 1}},           {"pow", {2, 2}},
      {"math.log2", {1, 1}},        {"math.floor", {1, 1}},      {"math.ceil", {1, 1}},       {"math.pow", {2, 2}},
      {"math.sqrt", {1, 1}},        {"math.exp", {1, 1}},        {"math.isfinite", {1, 1}},   {"math.isinf", {1, 1}},
  };
  return f;
}

std::string function_list() {
  std::string out;
  for (const auto& [name, arity] : functions())
    if (name != "torch.finfo") out += (out.empty() ? "" : ", ") + name;
  return out + ", torch.finfo(torch.float32).max (and .tiny, .eps)";
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {
    lex();
    // A scaling function is a line: bounded, so that neither the parser nor the evaluation
    // (both recursive) can be driven through the stack by a hostile recipe.
    if (tokens_.size() > kMaxTokens)
      fail(tokens_[kMaxTokens], "the function is longer than " + std::to_string(kMaxTokens) +
                                    " tokens; a scaling function is one expression of a line");
  }

  NodePtr parse_lambda() {
    expect_name("lambda", "a scaling function is a lambda: lambda amax, scale, fp8_max, recipe: ...");
    for (int i = 0; i < 4; ++i) {
      if (i > 0) expect_op(",", "TransformerEngine calls it with four arguments: (amax, scale, fp8_max, recipe)");
      if (peek().kind != Token::name || keyword(peek().text))
        fail(peek(), "expected a parameter name (TransformerEngine calls it with (amax, scale, fp8_max, recipe))");
      params_.push_back(next().text);
    }
    expect_op(":", "TransformerEngine calls it with four arguments: (amax, scale, fp8_max, recipe)");
    NodePtr body = expr();
    if (peek().kind != Token::end) fail(peek(), "unexpected '" + peek().text + "' after the function's body");
    return body;
  }

 private:
  static bool keyword(const std::string& w) {
    return w == "lambda" || w == "if" || w == "else" || w == "and" || w == "or" || w == "not" || w == "True" ||
           w == "False" || w == "None";
  }
  [[noreturn]] void fail(const Token& t, const std::string& why) const {
    throw std::invalid_argument("scaling_factor_compute_algo " + quoted_source(s_) + ": at '" +
                                std::string(s_.substr(t.at, 16)) + "': " + why);
  }
  void lex() {
    std::size_t i = 0;
    while (i < s_.size()) {
      const char c = s_[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
        continue;
      }
      Token t;
      t.at = i;
      if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i + 1])))) {
        std::size_t j = i;
        while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '.' || s_[j] == '_' ||
                                 ((s_[j] == '-' || s_[j] == '+') && (s_[j - 1] == 'e' || s_[j - 1] == 'E'))))
          ++j;
        t.kind = Token::number;
        t.text = std::string(s_.substr(i, j - i));
        i = j;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t j = i;
        while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_')) ++j;
        t.kind = Token::name;
        t.text = std::string(s_.substr(i, j - i));
        i = j;
      } else if (c == '"' || c == '\'') {
        const std::size_t end = s_.find(c, i + 1);
        if (end == std::string_view::npos) fail(t, "a string is not closed");
        t.kind = Token::string;
        t.text = std::string(s_.substr(i + 1, end - i - 1));
        i = end + 1;
      } else {
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        t.kind = Token::op;
        for (const char* o : two)
          if (s_.substr(i, 2) == o) t.text = o;
        if (t.text.empty()) {
          if (std::string_view("+-*/()<>,:.=%[]&|").find(c) == std::string_view::npos) fail(t, "unexpected character");
          t.text = std::string(1, c);
        }
        i += t.text.size();
      }
      tokens_.push_back(t);
    }
    Token end;
    end.at = s_.size();
    tokens_.push_back(end);
  }
  const Token& peek() const { return tokens_[pos_]; }
  Token next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool at_op(const char* o) const { return peek().kind == Token::op && peek().text == o; }
  bool at_name(const char* n) const { return peek().kind == Token::name && peek().text == n; }
  bool eat_op(const char* o) {
    if (!at_op(o)) return false;
    ++pos_;
    return true;
  }
  void expect_op(const char* o, const std::string& why) {
    if (!eat_op(o)) fail(peek(), "expected '" + std::string(o) + "': " + why);
  }
  void expect_name(const char* n, const std::string& why) {
    if (!at_name(n)) fail(peek(), why);
    ++pos_;
  }
  static NodePtr make(Node n) { return std::make_shared<const Node>(std::move(n)); }

  static constexpr std::size_t kMaxTokens = 1000;
  static constexpr int kMaxDepth = 64;
  // Nesting (parentheses, calls, unary operators) deeper than kMaxDepth is refused.
  struct Nested {
    Parser& p;
    explicit Nested(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(p.peek(), "nested more than " + std::to_string(kMaxDepth) + " deep");
    }
    ~Nested() { --p.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;
  };

  NodePtr expr() {
    const Nested nested(*this);
    NodePtr body = or_test();
    if (!at_name("if")) return body;
    ++pos_;
    NodePtr cond = or_test();
    expect_name("else", "expected 'else' in 'a if condition else b'");
    NodePtr other = expr();
    Node n;
    n.kind = Node::ternary;
    n.args = {cond, body, other};
    return make(n);
  }
  NodePtr or_test() {
    NodePtr a = and_test();
    while (at_name("or")) {
      ++pos_;
      Node n;
      n.kind = Node::boolean_or;
      n.args = {a, and_test()};
      a = make(n);
    }
    return a;
  }
  NodePtr and_test() {
    NodePtr a = not_test();
    while (at_name("and")) {
      ++pos_;
      Node n;
      n.kind = Node::boolean_and;
      n.args = {a, not_test()};
      a = make(n);
    }
    return a;
  }
  NodePtr not_test() {
    const Nested nested(*this);
    if (!at_name("not")) return comparison();
    ++pos_;
    Node n;
    n.kind = Node::boolean_not;
    n.args = {not_test()};
    return make(n);
  }
  // A left-associative run of binary operators of one precedence: `operand (op operand)*`.
  NodePtr left_assoc(std::initializer_list<const char*> ops, NodePtr (Parser::*operand)()) {
    NodePtr a = (this->*operand)();
    for (;;) {
      const char* found = nullptr;
      for (const char* o : ops)
        if (at_op(o)) found = o;
      if (found == nullptr) return a;
      ++pos_;
      Node n;
      n.kind = Node::binary;
      n.op = found;
      n.args = {a, (this->*operand)()};
      a = make(n);
    }
  }
  // Python's precedence: comparisons bind looser than | and &, which bind looser than + -.
  NodePtr bitwise_or() { return left_assoc({"|"}, &Parser::bitwise_and); }
  NodePtr bitwise_and() { return left_assoc({"&"}, &Parser::arith); }
  NodePtr comparison() {
    NodePtr a = bitwise_or();
    NodePtr result;
    for (;;) {
      std::string o;
      for (const char* c : {"==", "!=", "<=", ">=", "<", ">"})
        if (at_op(c)) o = c;
      if (o.empty()) break;
      ++pos_;
      NodePtr b = bitwise_or();
      Node n;
      n.kind = Node::comparison;
      n.op = o;
      n.args = {a, b};
      NodePtr c = make(n);
      if (result) {  // a < b < c is (a < b) and (b < c)
        Node both;
        both.kind = Node::boolean_and;
        both.args = {result, c};
        result = make(both);
      } else {
        result = c;
      }
      a = b;
    }
    return result ? result : a;
  }
  NodePtr arith() { return left_assoc({"+", "-"}, &Parser::term); }
  NodePtr term() {
    NodePtr a = left_assoc({"*", "/", "//"}, &Parser::factor);
    if (at_op("%")) fail(peek(), "'%' is not supported in a scaling function");
    return a;
  }
  NodePtr factor() {
    const Nested nested(*this);
    if (eat_op("+")) return factor();
    if (eat_op("-")) {
      Node n;
      n.kind = Node::unary_minus;
      n.args = {factor()};
      return make(n);
    }
    return power();
  }
  NodePtr power() {
    NodePtr base = primary();
    if (!eat_op("**")) return base;
    Node n;
    n.kind = Node::binary;
    n.op = "**";
    n.args = {base, factor()};  // right-associative, and binds tighter than a unary minus on its left
    return make(n);
  }
  static Node constant(double x, Value::Kind kind) {
    Node n;
    n.kind = Node::constant;
    n.value = x;
    n.value_kind = kind;
    return n;
  }
  // A float type's limits, as torch.finfo gives them (Python floats).
  NodePtr finfo(const Token& at, const std::string& dtype, const std::string& field) {
    struct Limits {
      double max, tiny, eps;
    };
    static const std::map<std::string, Limits> types = {
        {"torch.float32", {3.4028234663852886e38, 1.1754943508222875e-38, 1.1920928955078125e-07}},
        {"torch.float", {3.4028234663852886e38, 1.1754943508222875e-38, 1.1920928955078125e-07}},
        {"torch.float16", {65504.0, 6.103515625e-05, 0.0009765625}},
        {"torch.half", {65504.0, 6.103515625e-05, 0.0009765625}},
        {"torch.bfloat16", {3.3895313892515355e38, 1.1754943508222875e-38, 0.0078125}},
        {"torch.float8_e4m3fn", {448.0, 0.015625, 0.125}},
        {"torch.float8_e5m2", {57344.0, 6.103515625e-05, 0.25}},
    };
    const auto t = types.find(dtype);
    if (t == types.end())
      fail(at, "torch.finfo of " + dtype + ": use torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn or torch.float8_e5m2");
    if (field == "max") return make(constant(t->second.max, Value::py_float));
    if (field == "min") return make(constant(-t->second.max, Value::py_float));
    if (field == "tiny" || field == "smallest_normal") return make(constant(t->second.tiny, Value::py_float));
    if (field == "eps") return make(constant(t->second.eps, Value::py_float));
    fail(at, "torch.finfo(...)." + field + ": use .max, .min, .tiny, .smallest_normal or .eps");
  }
  NodePtr primary() {
    const Token t = next();
    if (t.kind == Token::number) {
      std::istringstream in(t.text);
      in.imbue(std::locale::classic());
      double x = 0;
      if (!(in >> x) || in.peek() != std::char_traits<char>::eof()) fail(t, "'" + t.text + "' is not a number");
      const bool integer = t.text.find_first_of(".eE") == std::string::npos;
      return make(constant(x, integer ? Value::py_int : Value::py_float));
    }
    if (t.kind == Token::op && t.text == "(") {
      NodePtr inner = expr();
      expect_op(")", "a parenthesis is not closed");
      return inner;
    }
    if (t.kind == Token::string) fail(t, "a string is only an argument of float(), as float('inf')");
    if (t.kind != Token::name) fail(t, t.kind == Token::end ? "the function ends where a value is expected" : "expected a value");
    if (t.text == "True" || t.text == "False") return make(constant(t.text == "True" ? 1 : 0, Value::py_bool));
    if (t.text == "None") return make(constant(0, Value::none));
    if (keyword(t.text)) fail(t, "'" + t.text + "' cannot start a value");
    std::string path = t.text;
    while (at_op(".")) {
      ++pos_;
      if (peek().kind != Token::name) fail(peek(), "expected a name after '" + path + ".'");
      path += "." + next().text;
    }
    // A parameter: amax, scale and fp8_max as they are; the recipe through its fields.
    const std::string head = path.substr(0, path.find('.'));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (params_[i] != head) continue;
      if (i < 3) {
        if (path != head) fail(t, "'" + path + "': methods and attributes of " + head + " are not supported; use the torch.* functions");
        Node n;
        n.kind = Node::parameter;
        n.parameter_index = static_cast<int>(i);
        return make(n);
      }
      if (path == head + ".margin") {
        Node n;
        n.kind = Node::parameter;
        n.parameter_index = 3;
        return make(n);
      }
      if (path == head + ".amax_history_len") {
        Node n;
        n.kind = Node::parameter;
        n.parameter_index = 4;
        return make(n);
      }
      fail(t, "'" + path + "': the recipe's fields a scaling function may read are " + head + ".margin and " + head +
                  ".amax_history_len");
    }
    if (path == "torch.inf" || path == "math.inf") return make(constant(std::numeric_limits<double>::infinity(), Value::py_float));
    if (path == "torch.nan" || path == "math.nan") return make(constant(std::numeric_limits<double>::quiet_NaN(), Value::py_float));
    if (path == "math.pi" || path == "torch.pi") return make(constant(3.141592653589793, Value::py_float));
    if (!at_op("(")) fail(t, "'" + path + "' is not a parameter (" + params_list() + ") or a constant (torch.inf, math.inf, torch.nan)");
    ++pos_;
    const auto f = functions().find(path);
    if (f == functions().end()) fail(t, "'" + path + "' is not a function a scaling function may call here: " + function_list());
    Node n;
    n.kind = Node::call;
    n.op = path;
    if (path == "float" && peek().kind == Token::string) {  // float('inf'), float("-inf"), float('nan')
      const Token s = next();
      expect_op(")", "float() takes one argument");
      std::string w = s.text;
      for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (w == "inf" || w == "+inf" || w == "infinity") return make(constant(std::numeric_limits<double>::infinity(), Value::py_float));
      if (w == "-inf" || w == "-infinity") return make(constant(-std::numeric_limits<double>::infinity(), Value::py_float));
      if (w == "nan") return make(constant(std::numeric_limits<double>::quiet_NaN(), Value::py_float));
      fail(s, "float('" + s.text + "'): use 'inf', '-inf' or 'nan'");
    }
    if (path == "torch.finfo") {
      std::string dtype;
      if (peek().kind != Token::name) fail(peek(), "torch.finfo takes a dtype, as torch.finfo(torch.float32)");
      dtype = next().text;
      while (eat_op(".")) dtype += "." + next().text;
      expect_op(")", "torch.finfo takes one dtype");
      expect_op(".", "torch.finfo(...) is read through a field: .max, .tiny or .eps");
      if (peek().kind != Token::name) fail(peek(), "expected a field of torch.finfo(...)");
      return finfo(t, dtype, next().text);
    }
    if (!eat_op(")")) {
      do {
        if (peek().kind == Token::name && tokens_[pos_ + 1].kind == Token::op && tokens_[pos_ + 1].text == "=") {
          const Token key = next();
          ++pos_;
          const bool clamp = path == "torch.clamp" && (key.text == "min" || key.text == "max");
          if (!clamp) fail(key, path + " takes no keyword '" + key.text + "' here (torch.clamp takes min= and max=)");
          if (!n.kwargs.emplace(key.text, expr()).second) fail(key, key.text + " is given twice");
        } else {
          if (!n.kwargs.empty()) fail(peek(), "a positional argument after a keyword argument");
          n.args.push_back(expr());
        }
      } while (eat_op(","));
      expect_op(")", "expected ',' or ')' in the arguments of " + path);
    }
    const int count = static_cast<int>(n.args.size());
    if (count < f->second.first || count > f->second.second)
      fail(t, path + " takes " + std::to_string(f->second.first) +
                  (f->second.second != f->second.first ? " to " + std::to_string(f->second.second) : "") +
                  " positional argument(s), not " + std::to_string(count));
    if (at_op(".")) fail(peek(), "methods of a function's result are not supported; use the torch.* functions");
    return make(n);
  }
  std::string params_list() const {
    std::string out;
    for (std::size_t i = 0; i < params_.size(); ++i)
      out += (i ? ", " : "") + params_[i] + (i == 3 ? ".margin" : "");
    return out;
  }

  std::string_view s_;
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  std::vector<std::string> params_;
  int depth_ = 0;
};

struct Args {
  float amax, scale, fp8_max;
  int margin;
  std::int64_t history;
};

double py_floordiv(double a, double b) { return std::floor(a / b); }

Value eval(const Node& n, const Args& a);

Value call(const Node& n, const Args& a) {
  std::vector<Value> v;
  for (const NodePtr& arg : n.args) v.push_back(eval(*arg, a));
  const std::string& f = n.op;
  const auto f32 = [](const Value& x) { return static_cast<double>(f64_to_f32(x.x)); };
  if (f == "torch.where") {
    if (!v[0].is_bool()) throw std::domain_error("torch.where's condition is not a boolean");
    return tensor_of(truth(v[0]) ? v[1].x : v[2].x);
  }
  if (f == "torch.isfinite" || f == "math.isfinite") return {f[0] == 't' ? Value::tensor_bool : Value::py_bool, std::isfinite(v[0].x) ? 1.0 : 0.0};
  if (f == "torch.isinf" || f == "math.isinf") return {f[0] == 't' ? Value::tensor_bool : Value::py_bool, std::isinf(v[0].x) ? 1.0 : 0.0};
  if (f == "torch.isnan") return {Value::tensor_bool, std::isnan(v[0].x) ? 1.0 : 0.0};
  if (f == "torch.clamp" || f == "torch.clamp_min" || f == "torch.clamp_max") {
    std::optional<Value> lo, hi;
    if (f == "torch.clamp_min") lo = v[1];
    if (f == "torch.clamp_max") hi = v[1];
    if (f == "torch.clamp") {
      if (v.size() > 1) lo = v[1];
      if (v.size() > 2) hi = v[2];
      if (auto it = n.kwargs.find("min"); it != n.kwargs.end()) lo = eval(*it->second, a);
      if (auto it = n.kwargs.find("max"); it != n.kwargs.end()) hi = eval(*it->second, a);
    }
    double x = f32(v[0]);
    if (std::isnan(x)) return tensor_of(x);  // clamp propagates NaN
    if (lo && lo->kind != Value::none) x = std::isnan(f32(*lo)) ? f32(*lo) : std::max(x, f32(*lo));
    if (hi && hi->kind != Value::none) x = std::isnan(f32(*hi)) ? f32(*hi) : std::min(x, f32(*hi));
    return tensor_of(x);
  }
  if (f == "torch.maximum" || f == "torch.minimum" || ((f == "torch.max" || f == "torch.min") && v.size() == 2)) {
    const double x = f32(v[0]), y = f32(v[1]);
    if (std::isnan(x) || std::isnan(y)) return tensor_of(std::numeric_limits<double>::quiet_NaN());  // propagates NaN
    return tensor_of(f == "torch.maximum" || f == "torch.max" ? std::max(x, y) : std::min(x, y));
  }
  if (f == "torch.max" || f == "torch.min") return tensor_of(v[0].x);  // over one element
  if (f == "torch.fmax") return tensor_of(std::fmax(f32(v[0]), f32(v[1])));
  if (f == "torch.fmin") return tensor_of(std::fmin(f32(v[0]), f32(v[1])));
  if (f == "torch.abs") return tensor_of(std::fabs(f32(v[0])));
  if (f == "torch.floor") return tensor_of(std::floor(f32(v[0])));
  if (f == "torch.ceil") return tensor_of(std::ceil(f32(v[0])));
  if (f == "torch.round") return tensor_of(std::nearbyint(f32(v[0])));  // half to even, as torch.round
  if (f == "torch.trunc") return tensor_of(std::trunc(f32(v[0])));
  if (f == "torch.log2") return tensor_of(std::log2(f64_to_f32(v[0].x)));
  if (f == "torch.log") return tensor_of(std::log(f64_to_f32(v[0].x)));
  if (f == "torch.exp") return tensor_of(std::exp(f64_to_f32(v[0].x)));
  if (f == "torch.exp2") return tensor_of(std::exp2(f64_to_f32(v[0].x)));
  if (f == "torch.sqrt") return tensor_of(std::sqrt(f64_to_f32(v[0].x)));
  if (f == "torch.rsqrt") return tensor_of(1.0f / std::sqrt(f64_to_f32(v[0].x)));
  if (f == "torch.reciprocal") return tensor_of(1.0f / f64_to_f32(v[0].x));
  if (f == "torch.pow") return tensor_of(std::pow(f64_to_f32(v[0].x), f64_to_f32(v[1].x)));
  if (f == "torch.full_like") return tensor_of(v[1].x);
  if (f == "torch.ones_like") return tensor_of(1.0);
  if (f == "torch.zeros_like") return tensor_of(0.0);
  if (f == "torch.tensor") return tensor_of(v[0].x);
  if (f == "abs") return v[0].is_tensor() ? tensor_of(std::fabs(v[0].x)) : Value{v[0].kind, std::fabs(v[0].x)};
  if (f == "min" || f == "max") {  // Python's: the first unless the second compares beyond it
    const bool second = f == "max" ? truth(compare(v[1], v[0], [](double x, double y) { return x > y; }))
                                   : truth(compare(v[1], v[0], [](double x, double y) { return x < y; }));
    return second ? v[1] : v[0];
  }
  if (f == "float") return py_float(v[0].is_tensor() ? f64_to_f32(v[0].x) : v[0].x);
  if (f == "pow" || f == "math.pow") {
    if (f == "math.pow") return py_float(std::pow(v[0].x, v[1].x));
    return arithmetic(v[0], v[1], [](double x, double y) { return std::pow(x, y); });
  }
  if (f == "math.log2") return py_float(std::log2(v[0].x));
  if (f == "math.floor") return py_int(std::floor(v[0].x));
  if (f == "math.ceil") return py_int(std::ceil(v[0].x));
  if (f == "math.sqrt") return py_float(std::sqrt(v[0].x));
  if (f == "math.exp") return py_float(std::exp(v[0].x));
  throw std::logic_error("scaling function: no evaluation for " + f);
}

Value eval(const Node& n, const Args& a) {
  switch (n.kind) {
    case Node::constant: return {n.value_kind, n.value};
    case Node::parameter:
      switch (n.parameter_index) {
        case 0: return {Value::tensor, a.amax};
        case 1: return {Value::tensor, a.scale};
        case 2: return py_float(a.fp8_max);
        case 3: return py_int(a.margin);
        default: return py_int(static_cast<double>(a.history));
      }
    case Node::unary_minus: {
      Value v = eval(*n.args[0], a);
      if (v.kind == Value::none) throw std::domain_error("-None");
      if (v.kind == Value::tensor_bool) throw std::domain_error("negation of a boolean tensor (PyTorch refuses it)");
      if (v.kind == Value::py_bool) v.kind = Value::py_int;
      v.x = -v.x;
      return v;
    }
    case Node::binary: {
      const Value x = eval(*n.args[0], a), y = eval(*n.args[1], a);
      if (n.op == "&" || n.op == "|") {  // on booleans (a mask of comparisons), as PyTorch's logical & and |
        if (!x.is_bool() || !y.is_bool()) throw std::domain_error("& and | join booleans (comparisons, torch.isfinite) here");
        const bool r = n.op == "&" ? truth(x) && truth(y) : truth(x) || truth(y);
        return {x.is_tensor() || y.is_tensor() ? Value::tensor_bool : Value::py_bool, r ? 1.0 : 0.0};
      }
      if (n.op == "+") return arithmetic(x, y, [](double p, double q) { return p + q; });
      if (n.op == "-") return arithmetic(x, y, [](double p, double q) { return p - q; });
      if (n.op == "*") return arithmetic(x, y, [](double p, double q) { return p * q; });
      if (n.op == "//") return arithmetic(x, y, py_floordiv);
      if (n.op == "/") {
        if (!x.is_tensor() && !y.is_tensor() && y.x == 0) throw std::domain_error("division by zero (Python numbers)");
        // A Python number over a tensor is Tensor.__rtruediv__, self.reciprocal() * other
        // (torch/_tensor.py): two roundings in float32, not one division.
        if (!x.is_tensor() && y.is_tensor() && x.kind != Value::none)
          return tensor_of(f64_to_f32(1.0f / f64_to_f32(y.x)) * f64_to_f32(x.x));
        Value r = arithmetic(x, y, [](double p, double q) { return p / q; });
        if (r.kind == Value::py_int) r.kind = Value::py_float;  // true division
        return r;
      }
      // **: with a tensor operand, powf; between Python numbers, Python's (int ** negative int is a float)
      if (x.is_tensor() || y.is_tensor())
        return tensor_of(std::pow(f64_to_f32(x.x), f64_to_f32(y.x)));
      Value r = arithmetic(x, y, [](double p, double q) { return std::pow(p, q); });
      if (y.x < 0 && r.kind == Value::py_int) r.kind = Value::py_float;
      return r;
    }
    case Node::comparison: {
      const Value x = eval(*n.args[0], a), y = eval(*n.args[1], a);
      if (n.op == "==") return compare(x, y, [](double p, double q) { return p == q; });
      if (n.op == "!=") return compare(x, y, [](double p, double q) { return p != q; });
      if (n.op == "<=") return compare(x, y, [](double p, double q) { return p <= q; });
      if (n.op == ">=") return compare(x, y, [](double p, double q) { return p >= q; });
      if (n.op == "<") return compare(x, y, [](double p, double q) { return p < q; });
      return compare(x, y, [](double p, double q) { return p > q; });
    }
    case Node::ternary: return truth(eval(*n.args[0], a)) ? eval(*n.args[1], a) : eval(*n.args[2], a);
    case Node::boolean_and: {  // Python's: the first operand when false, else the second
      const Value x = eval(*n.args[0], a);
      return truth(x) ? eval(*n.args[1], a) : x;
    }
    case Node::boolean_or: {
      const Value x = eval(*n.args[0], a);
      return truth(x) ? x : eval(*n.args[1], a);
    }
    case Node::boolean_not: return {Value::py_bool, truth(eval(*n.args[0], a)) ? 0.0 : 1.0};
    case Node::call: return call(n, a);
  }
  throw std::logic_error("scaling function: unknown node");
}

}  // namespace

std::string quoted_source(std::string_view text) {
  if (text.size() <= 200) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, 100)) + "...' (" + std::to_string(text.size()) + " characters)";
}

Fp8ScaleFunction Fp8ScaleFunction::parse(std::string_view text) {
  Fp8ScaleFunction f;
  f.text_ = std::string(text);
  f.body_ = Parser(text).parse_lambda();
  // A function that cannot give a number (a boolean, None) is refused now, not mid-run.
  try {
    (void)f(1.0f, 1.0f, 448.0f, 0, 1024);
  } catch (const std::domain_error& e) {
    throw std::invalid_argument("scaling_factor_compute_algo " + quoted_source(f.text_) + ": " + e.what());
  }
  return f;
}

float Fp8ScaleFunction::operator()(float amax, float scale, float fp8_max, int margin, std::int64_t amax_history_len) const {
  const Value v = eval(*body_, Args{amax, scale, fp8_max, margin, amax_history_len});
  if (v.kind == Value::none || v.is_bool()) throw std::domain_error("it returned a boolean or None, not a scale");
  return f64_to_f32(v.x);
}

}  // namespace ampcheck::amp
