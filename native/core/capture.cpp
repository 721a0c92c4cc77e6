#include "mpsx/capture.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mpsx {

namespace {
thread_local bool recording_capture = false;
std::atomic<uint64_t> generation{1};
}  // namespace

CaptureRecording::CaptureRecording() : previous_(recording_capture) { recording_capture = true; }
CaptureRecording::~CaptureRecording() { recording_capture = previous_; }

void check_not_capturing(const char* what) {
  if (recording_capture) throw NotCapturable{what};
}

bool capture_encodes_by_default() {
  static const bool on = [] {
    const char* value = std::getenv("MPSX_CAPTURE_ENCODES");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return on;
}

uint64_t capture_generation() { return generation.load(std::memory_order_acquire); }
void invalidate_captures() { generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace mpsx
