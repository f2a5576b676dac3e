#include "reports/chrome_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ampcheck::reports {
namespace {

using nlohmann::ordered_json;

constexpr int kPid = 1;

// Track ids are Chrome's thread ids; a span on an unnamed track still shows, as "tid N".
std::string track_name(int track) {
  switch (track) {
    case 0: return "ops";
    case 1: return "GPU kernels";
    default: return "track " + std::to_string(track);
  }
}

ordered_json metadata(const char* what, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::string chrome_trace_json(const std::vector<TraceSpan>& spans, const std::string& process_name) {
  std::vector<const TraceSpan*> order;
  order.reserve(spans.size());
  for (const TraceSpan& s : spans) order.push_back(&s);
  // Stable: equal spans keep the order they were recorded in.
  std::stable_sort(order.begin(), order.end(), [](const TraceSpan* a, const TraceSpan* b) {
    if (a->start_us != b->start_us) return a->start_us < b->start_us;
    return a->duration_us > b->duration_us;
  });

  std::vector<int> tracks{0, 1};
  for (const TraceSpan& s : spans)
    if (std::find(tracks.begin(), tracks.end(), s.track) == tracks.end()) tracks.push_back(s.track);

  ordered_json events = ordered_json::array();
  events.push_back(metadata("process_name", 0, process_name));
  for (int t : tracks) {
    events.push_back(metadata("thread_name", t, track_name(t)));
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", kPid}, {"tid", t},
                      {"args", {{"sort_index", t}}}});
  }
  for (const TraceSpan* s : order) {
    ordered_json args = ordered_json::object();
    for (const auto& [key, value] : s->args) args[key] = value;
    events.push_back({{"name", s->name},
                      {"cat", s->category},
                      {"ph", "X"},
                      {"ts", s->start_us},
                      {"dur", s->duration_us},
                      {"pid", kPid},
                      {"tid", s->track},
                      {"args", args}});
  }
  const ordered_json doc = {{"displayTimeUnit", "ms"}, {"traceEvents", events}};
  return doc.dump(1) + "\n";
}

}  // namespace ampcheck::reports
