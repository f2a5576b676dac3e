#include "profiles/nsys_sqlite.h"

#include <sqlite3.h>  // the SQLite C API: read-only queries over the export

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiles/byte_source.h"
#include "profiles/profile_error.h"

namespace ampcheck::profiles {
namespace {

class Db {
 public:
  explicit Db(const std::string& path) : path_(path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      throw ProfileError(path + ": SQLite cannot open it: " + why);
    }
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  class Query {
   public:
    Query(Db& db, const std::string& sql) : db_(db) {
      if (sqlite3_prepare_v2(db.db_, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
        throw ProfileError(db.path_ + ": SQLite: " + sqlite3_errmsg(db.db_) + " (in: " + sql + ")");
    }
    ~Query() { sqlite3_finalize(stmt_); }
    Query(const Query&) = delete;
    Query& operator=(const Query&) = delete;
    bool step() {
      const int rc = sqlite3_step(stmt_);
      if (rc == SQLITE_ROW) return true;
      if (rc == SQLITE_DONE) return false;
      throw ProfileError(db_.path_ + ": SQLite: " + sqlite3_errmsg(db_.db_) +
                         " (the export is damaged or was cut short: export it again)");
    }
    std::int64_t i64(int c) const { return sqlite3_column_int64(stmt_, c); }
    bool null(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }
    std::string_view text(int c) const {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, c));
      return t ? std::string_view(t, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, c))) : std::string_view();
    }

   private:
    Db& db_;
    sqlite3_stmt* stmt_ = nullptr;
  };

  std::set<std::string> tables() {
    std::set<std::string> out;
    Query q(*this, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')");
    while (q.step()) out.emplace(q.text(0));
    return out;
  }
  std::set<std::string> columns(const std::string& table) {
    std::set<std::string> out;
    Query q(*this, "PRAGMA table_info(" + table + ")");
    while (q.step()) out.emplace(q.text(1));
    return out;
  }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

// The first of `names` the table has, quoted for SQL; "" when none.
std::string pick(const std::set<std::string>& columns, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (columns.count(n)) return std::string("\"") + n + "\"";
  return {};
}

std::string or_null(const std::string& column) { return column.empty() ? "NULL" : column; }

// nsys serializes a thread as one integer: the process id above bit 24, the thread id below.
std::string thread_label(std::int64_t global_tid) {
  return "pid " + std::to_string((global_tid >> 24) & 0xFFFFFF) + " tid " + std::to_string(global_tid & 0xFFFFFF);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// "[[64, 128], [128, 256], []]"
std::vector<std::vector<std::int64_t>> parse_sizes(std::string_view s) {
  std::vector<std::vector<std::int64_t>> out;
  int depth = 0;
  std::int64_t v = 0;
  bool in = false, negative = false;
  for (const char c : s) {
    if (c == '[') {
      ++depth;
      if (depth == 2) out.emplace_back();
    } else if (c == ']') {
      if (in && depth == 2) out.back().push_back(negative ? -v : v);
      in = false, negative = false, v = 0;
      if (--depth == 0) break;
    } else if (is_digit(c)) {
      v = v * 10 + (c - '0');
      in = true;
    } else if (c == '-') {
      negative = true;
    } else if (c == ',') {
      if (in && depth == 2) out.back().push_back(negative ? -v : v);
      in = false, negative = false, v = 0;
    }
  }
  return out;
}

}  // namespace

NvtxOp parse_nvtx_range(std::string_view text) {
  // torch/csrc/profiler: getNvtxStr writes "<name>[, seq = N][, op_id = N][, sizes = [...]][, input_op_ids = ...]".
  NvtxOp o;
  std::size_t cut = text.size();
  for (const std::string_view field : {", seq = ", ", op_id = ", ", sizes = ", ", input_op_ids = "})
    cut = std::min(cut, text.find(field));
  o.name = std::string(text.substr(0, cut));
  if (const auto at = text.find(", seq = "); at != std::string_view::npos) {
    const std::string_view n = text.substr(at + 8);
    std::int64_t seq = 0;
    const auto r = std::from_chars(n.data(), n.data() + n.size(), seq);
    if (r.ec == std::errc()) o.sequence = seq;
  }
  if (const auto at = text.find(", sizes = "); at != std::string_view::npos) o.sizes = parse_sizes(text.substr(at + 10));
  const std::string_view n = o.name;
  std::string_view base = n;
  while (!base.empty() && is_digit(base.back())) base.remove_suffix(1);
  o.framework_op = n.find("::") != std::string_view::npos || base.ends_with("Backward") || cut != text.size();
  return o;
}

Profile read_nsys_sqlite(const std::string& path, std::uint64_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes)
    throw ProfileError(path + ": " + byte_size_text(size) + ", more than the " + byte_size_text(max_bytes) +
                       " a profile is read up to; export fewer seconds (nsys profile --duration, or "
                       "--capture-range=cudaProfilerApi) or raise the bound with --max-size");
  Db db(path);
  const std::set<std::string> tables = db.tables();
  if (!tables.count("CUPTI_ACTIVITY_KIND_KERNEL")) {
    if (tables.count("StringIds") || tables.count("META_DATA_EXPORT") || tables.count("TARGET_INFO_SESSION_START_TIME"))
      throw ProfileError(path + ": an Nsight Systems export with no CUDA kernels (no CUPTI_ACTIVITY_KIND_KERNEL table): "
                                "record with CUDA tracing on (nsys profile --trace=cuda,nvtx ...)");
    std::string some;
    int n = 0;
    for (const std::string& t : tables) {
      if (t.rfind("sqlite_", 0) == 0) continue;
      if (n++ < 6) some += (some.empty() ? "" : ", ") + t;
    }
    throw ProfileError(path + ": a SQLite database, but not an Nsight Systems export (it has no CUPTI_ACTIVITY_KIND_KERNEL "
                              "table" +
                       (some.empty() ? std::string(", and no tables at all") : "; its tables: " + some + (n > 6 ? ", ..." : "")) +
                       "); export the report with `nsys export --type sqlite report.nsys-rep`");
  }

  Profile p;
  p.source = path;
  p.format = Format::nsys_sqlite;
  // Strings are interned as they are met, through their StringIds id.
  std::unordered_map<std::int64_t, std::uint32_t> strings;
  if (tables.count("StringIds")) {
    Db::Query q(db, "SELECT id, value FROM StringIds");
    while (q.step()) strings.emplace(q.i64(0), p.intern(q.text(1)));
  }
  auto string_of = [&](const Db::Query& q, int c) -> std::uint32_t {
    if (q.null(c)) return 0;
    const auto it = strings.find(q.i64(c));
    return it == strings.end() ? 0 : it->second;
  };

  if (tables.count("TARGET_INFO_GPU") && db.columns("TARGET_INFO_GPU").count("name")) {
    Db::Query q(db, "SELECT name FROM TARGET_INFO_GPU");
    while (q.step()) p.devices.emplace_back(q.text(0));
  }

  // Kernels.
  {
    const auto cols = db.columns("CUPTI_ACTIVITY_KIND_KERNEL");
    const std::string name = pick(cols, {"demangledName", "name", "shortName"});
    if (name.empty())
      throw ProfileError(path + ": CUPTI_ACTIVITY_KIND_KERNEL has no kernel name column (demangledName, name or "
                                "shortName): an export of an unknown Nsight Systems version");
    const std::string sql = "SELECT start, \"end\", " + or_null(pick(cols, {"deviceId"})) + ", " +
                            or_null(pick(cols, {"streamId"})) + ", " + or_null(pick(cols, {"correlationId"})) + ", " +
                            name + ", " + or_null(pick(cols, {"gridX"})) + ", " + or_null(pick(cols, {"gridY"})) + ", " +
                            or_null(pick(cols, {"gridZ"})) + ", " + or_null(pick(cols, {"blockX"})) + ", " +
                            or_null(pick(cols, {"blockY"})) + ", " + or_null(pick(cols, {"blockZ"})) +
                            " FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start";
    Db::Query q(db, sql);
    auto u32 = [&](int c) { return q.null(c) ? 0u : static_cast<std::uint32_t>(std::max<std::int64_t>(q.i64(c), 0)); };
    while (q.step()) {
      Kernel k;
      k.start_ns = q.i64(0);
      k.duration_ns = std::max<std::int64_t>(q.i64(1) - q.i64(0), 0);
      k.device = q.null(2) ? -1 : static_cast<std::int32_t>(q.i64(2));
      k.stream = q.null(3) ? -1 : static_cast<std::int32_t>(q.i64(3));
      k.correlation = q.null(4) ? -1 : q.i64(4);
      k.name = string_of(q, 5);
      k.grid = Dim3{u32(6), u32(7), u32(8)};
      k.block = Dim3{u32(9), u32(10), u32(11)};
      p.kernels.push_back(k);
    }
  }
  if (p.kernels.empty())
    throw ProfileError(path + ": the Nsight Systems export holds no kernel: the profiled range launched no GPU work, "
                              "or CUDA tracing was off (nsys profile --trace=cuda,nvtx ...)");

  // Copies and memsets.
  for (const auto& [table, kind] : {std::pair{"CUPTI_ACTIVITY_KIND_MEMCPY", ActivityKind::memcpy},
                                    std::pair{"CUPTI_ACTIVITY_KIND_MEMSET", ActivityKind::memset}}) {
    if (!tables.count(table)) continue;
    const auto cols = db.columns(table);
    Db::Query q(db, "SELECT start, \"end\", " + or_null(pick(cols, {"deviceId"})) + ", " +
                        or_null(pick(cols, {"streamId"})) + ", " + or_null(pick(cols, {"correlationId"})) + " FROM " +
                        table);
    const std::uint32_t name = p.intern(kind == ActivityKind::memcpy ? "Memcpy" : "Memset");
    while (q.step()) {
      Kernel k;
      k.kind = kind;
      k.name = name;
      k.start_ns = q.i64(0);
      k.duration_ns = std::max<std::int64_t>(q.i64(1) - q.i64(0), 0);
      k.device = q.null(2) ? -1 : static_cast<std::int32_t>(q.i64(2));
      k.stream = q.null(3) ? -1 : static_cast<std::int32_t>(q.i64(3));
      k.correlation = q.null(4) ? -1 : q.i64(4);
      p.kernels.push_back(k);
    }
  }
  std::stable_sort(p.kernels.begin(), p.kernels.end(),
                   [](const Kernel& a, const Kernel& b) { return a.start_ns < b.start_ns; });

  // Launches: the runtime API calls (and the driver's, in exports that keep them apart).
  for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"}) {
    if (!tables.count(table)) continue;
    const auto cols = db.columns(table);
    const std::string tid = pick(cols, {"globalTid"});
    const std::string thread = tid.empty() ? or_null(pick(cols, {"threadId"})) : tid;
    Db::Query q(db, "SELECT start, " + or_null(pick(cols, {"correlationId"})) + ", " + thread + ", " +
                        or_null(pick(cols, {"nameId", "name"})) + " FROM " + table);
    while (q.step()) {
      if (q.null(1)) continue;
      Launch l;
      l.ns = q.i64(0);
      l.correlation = q.i64(1);
      l.thread = p.thread_of(tid.empty() ? "tid " + std::to_string(q.i64(2)) : thread_label(q.i64(2)));
      l.name = string_of(q, 3);
      p.launches.push_back(l);
    }
  }
  if (p.launches.empty()) {
    p.links = false;
    p.no_links_why = "the export has no CUDA runtime API calls (CUPTI_ACTIVITY_KIND_RUNTIME): record with "
                     "--trace=cuda so that each kernel's launch, and the op around it, is on record";
  }

  // NVTX ranges: emit_nvtx's ops and the user's own ranges.
  if (tables.count("NVTX_EVENTS")) {
    const auto cols = db.columns("NVTX_EVENTS");
    const std::string text = pick(cols, {"text"}), text_id = pick(cols, {"textId"}), type = pick(cols, {"eventType"});
    const std::string tid = pick(cols, {"globalTid"});
    // 59: a push/pop range, 60: a start/end range (ENUM_NSYS_EVENT_TYPE); marks have no end.
    std::string where = " WHERE \"end\" IS NOT NULL AND \"end\" > start";
    if (!type.empty()) where += " AND " + type + " IN (59, 60)";
    Db::Query q(db, "SELECT start, \"end\", " + or_null(text) + ", " + or_null(text_id) + ", " + or_null(tid) +
                        " FROM NVTX_EVENTS" + where);
    std::string label;
    while (q.step()) {
      std::string_view t = q.text(2);
      if (q.null(2) || t.empty()) t = p.str(string_of(q, 3));
      if (t.empty()) continue;
      const NvtxOp parsed = parse_nvtx_range(t);
      Op op;
      op.kind = parsed.framework_op ? OpKind::op : OpKind::annotation;
      if (parsed.name.rfind("ProfilerStep#", 0) == 0) op.kind = OpKind::step;
      op.name = p.intern(parsed.name);
      op.begin_ns = q.i64(0);
      op.end_ns = q.i64(1);
      op.thread = p.thread_of(q.null(4) ? std::string("(no thread)") : thread_label(q.i64(4)));
      op.sequence = parsed.sequence;
      if (!parsed.sizes.empty()) {
        OpInputs in;
        in.dims = parsed.sizes;
        std::string key;
        for (const auto& s : in.dims) {
          key += '[';
          for (const std::int64_t d : s) key += std::to_string(d) + ',';
          key += ']';
        }
        op.inputs = p.intern_inputs(key, std::move(in));
      }
      p.ops.push_back(op);
    }
  }
  if (p.ops.empty())
    p.notes.push_back("no NVTX ranges: kernels are joined to their launches only; run the training under "
                      "torch.autograd.profiler.emit_nvtx(record_shapes=True) to name the op of each");
  return p;
}

}  // namespace ampcheck::profiles
