#include "engine/hooks.h"

#include <algorithm>
#include <atomic>

namespace ampcheck {
namespace {

std::vector<Observer*>& observers() {
  static std::vector<Observer*> list;
  return list;
}
std::atomic<bool> g_observed{false};
std::atomic<std::uint64_t> g_sequence{0};
std::atomic<std::int64_t> g_step{0};
thread_local Phase t_phase = Phase::forward;
thread_local std::vector<std::string> t_modules;
thread_local bool t_inserting = false;
const std::string kNoModule;

}  // namespace

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

void add_observer(Observer* o) {
  if (o != nullptr && std::find(observers().begin(), observers().end(), o) == observers().end())
    observers().push_back(o);
  g_observed = !observers().empty();
}
void remove_observer(Observer* o) {
  observers().erase(std::remove(observers().begin(), observers().end(), o), observers().end());
  g_observed = !observers().empty();
}
bool observed() { return g_observed.load(std::memory_order_relaxed); }

namespace hooks {
void op_begin(const OpEvent& e) {
  for (Observer* o : observers()) o->on_op_begin(e);
}
void op_end(const OpEvent& e) {
  for (Observer* o : observers()) o->on_op_end(e);
}
void param_update(const ParamUpdate& u) {
  for (Observer* o : observers()) o->on_param_update(u);
}
void scaler_update(const amp::ScalerEvent& e) {
  for (Observer* o : observers()) o->on_scaler_update(e);
}

void data_parallel_step(const DataParallelStep& e) {
  for (Observer* o : observers()) o->on_data_parallel_step(e);
}
std::uint64_t next_sequence() { return ++g_sequence; }
}  // namespace hooks

void begin_step() { begin_step(g_step.load() + 1); }
void begin_step(std::int64_t step) {
  g_step = step;
  for (Observer* o : observers()) o->on_step_begin(step);
}
void end_step() {
  for (Observer* o : observers()) o->on_step_end(g_step.load());
}
std::int64_t current_step() { return g_step.load(); }

PhaseScope::PhaseScope(Phase p) : previous_(t_phase) { t_phase = p; }
PhaseScope::~PhaseScope() { t_phase = previous_; }
Phase current_phase() { return t_phase; }

ModuleScope::ModuleScope(const std::string& path) : pushed_(observed()) {
  if (pushed_) t_modules.push_back(path);
}
ModuleScope::~ModuleScope() {
  if (pushed_ && !t_modules.empty()) t_modules.pop_back();
}
const std::string& current_module() { return t_modules.empty() ? kNoModule : t_modules.back(); }

InsertedCastScope::InsertedCastScope() : previous_(t_inserting) { t_inserting = true; }
InsertedCastScope::~InsertedCastScope() { t_inserting = previous_; }
bool inserting_cast() { return t_inserting; }

}  // namespace ampcheck
