// CUPTI in a build without CUDA: there is none. The tracer asks missing() first and so
// never calls the rest; each says the same if something does.
#include "inspector/cupti_activity.h"

namespace ampcheck::inspector::cupti {
namespace {
constexpr std::string_view kNone =
    "this build has no CUDA, so no CUPTI (reconfigure with -DAMPCHECK_CUDA=ON on a machine with "
    "the CUDA toolkit)";
std::string none() { return std::string(kNone); }
}  // namespace

std::string_view missing() { return kNone; }
std::string enable(BufferSink&) { return none(); }
std::string disable() { return {}; }
void release_sink() {}
std::string push(std::uint64_t) { return none(); }
std::string pop() { return none(); }
std::string flush(bool) { return none(); }
ActivityBatch parse(std::uint8_t*, std::size_t, std::vector<std::string>&) { return {}; }
std::uint64_t timestamp() { return 0; }
std::uint64_t calls() { return 0; }
void translate(const void*, ActivityBatch& batch) { ++batch.other; }

}  // namespace ampcheck::inspector::cupti
