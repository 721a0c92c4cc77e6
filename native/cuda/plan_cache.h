// The engine choices of timed cuDNN passes (cudnn_plan.h), kept across
// processes in a file.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace mpsx::cuda {

// Which engine configuration timing chose for a pass: the heuristics mode
// that listed it, its place in their list, and its engine's global index (a
// check that the list is still the one timed).
struct EngineChoice {
  int64_t mode = 0, position = 0, engine = 0;
};

// The engine choices of timed passes, kept across processes in a file, as
// cuDNN's frontend and PyTorch's benchmark mode keep theirs within one:
// MPSX_PLAN_CACHE names it (empty: no file), by default
// $XDG_CACHE_HOME/mpsx/cudnn-plans.txt (~/.cache/...). A line per choice,
// "key<TAB>mode position engine", appended in one write so that processes
// sharing the file do not interleave lines; lines that do not parse are
// ignored, and a later line for a key wins. A process with a tool injected
// into CUDA (CUDA_INJECTION64_PATH: profilers; compute-sanitizer's
// NV_SANITIZER_INJECTION_* settings), which slows kernels unevenly, reads the
// file but appends nothing. Guarded by the query handles' mutex
// (cudnn_plan.h).
class PlanCache {
 public:
  static PlanCache& instance();

  const EngineChoice* find(const std::string& key);
  void store(const std::string& key, const EngineChoice& choice);

 private:
  void load();

  bool loaded_ = false, injected_ = false;
  std::string path_;
  std::unordered_map<std::string, EngineChoice> entries_;
};

}  // namespace mpsx::cuda
