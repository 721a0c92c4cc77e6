// What a graph's self-capture (NNGraph, graph/capture.cpp) needs from the
// rest of the runtime: a recording encode learns that its commands would not
// stand for later encodes, and recordings learn that a value they hold changed.
// And the setting graphs and command queues capture by.
#pragma once

#include <cstdint>

namespace mpsx {

// Whether graphs and command queues made now capture themselves: unless the
// environment sets MPSX_CAPTURE_ENCODES=0 (read once).
bool capture_encodes_by_default();

// Thrown while this thread records an encode for a capture, before anything
// resolves a value anew at each encode (Adam's time step, dropout masks) or
// calls back into the program (a Python data source, allocator or padding
// policy, a host step or completed handler): the recording could not stand
// for later encodes, which must see those. The graph drops the recording and
// encodes the step as it is. Not an mpsx::Error: nothing but the graph
// catches it.
struct NotCapturable {
  const char* what;
};

// Marks this thread as recording a capture for its scope.
class CaptureRecording {
 public:
  CaptureRecording();
  ~CaptureRecording();
  CaptureRecording(const CaptureRecording&) = delete;
  CaptureRecording& operator=(const CaptureRecording&) = delete;

 private:
  bool previous_;
};

// Throws NotCapturable{what} while this thread records a capture.
void check_not_capturing(const char* what);

// Changes whenever a value that encodes read and setters change (an
// optimizer's learning rate) changes, so that recordings made before are
// made again.
uint64_t capture_generation();
void invalidate_captures();

}  // namespace mpsx
