#include "kernels/kernel_note.h"

namespace ampcheck::kernels {
namespace {
thread_local std::string t_notes;
thread_local bool t_noting = false;
}  // namespace

bool noting() { return t_noting; }
void set_noting(bool on) { t_noting = on; }

void note_kernel(std::string_view note) {
  if (!t_noting) return;
  if (!t_notes.empty()) t_notes += "; ";
  t_notes += note;
}

std::string take_kernel_notes() {
  std::string out;
  out.swap(t_notes);
  return out;
}

}  // namespace ampcheck::kernels
