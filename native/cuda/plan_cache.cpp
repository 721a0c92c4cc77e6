#include "plan_cache.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace mpsx::cuda {
namespace {

// Whether a tool is injected into CUDA (a profiler, compute-sanitizer).
bool tool_injected() {
  for (const char* name : {"CUDA_INJECTION64_PATH", "NV_SANITIZER_INJECTION_PORT_BASE"})
    if (const char* value = std::getenv(name); value && *value) return true;
  return false;
}

// The file's path as the environment gives it; empty: no file.
std::string cache_path() {
  if (const char* given = std::getenv("MPSX_PLAN_CACHE")) return given;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return std::string(cache) + "/mpsx/cudnn-plans.txt";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/mpsx/cudnn-plans.txt";
  return {};
}

// A line's key and choice; false where the line does not parse.
bool parse(const std::string& line, std::string& key, EngineChoice& choice) {
  const size_t tab = line.rfind('\t');
  if (tab == std::string::npos) return false;
  std::istringstream fields(line.substr(tab + 1));
  std::string rest;
  if (!(fields >> choice.mode >> choice.position >> choice.engine) || (fields >> rest) || choice.position < 0)
    return false;
  key = line.substr(0, tab);
  return true;
}

}  // namespace

PlanCache& PlanCache::instance() {
  static PlanCache* cache = new PlanCache;
  return *cache;
}

const EngineChoice* PlanCache::find(const std::string& key) {
  load();
  auto found = entries_.find(key);
  return found == entries_.end() ? nullptr : &found->second;
}

void PlanCache::store(const std::string& key, const EngineChoice& choice) {
  load();
  entries_[key] = choice;
  if (path_.empty() || injected_) return;
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ignored);
  const std::string line = key + "\t" + std::to_string(choice.mode) + " " + std::to_string(choice.position) + " " +
                           std::to_string(choice.engine) + "\n";
  if (FILE* file = std::fopen(path_.c_str(), "a")) {
    std::setvbuf(file, nullptr, _IONBF, 0);  // the line in one write
    std::fwrite(line.data(), 1, line.size(), file);
    std::fclose(file);
  }
}

void PlanCache::load() {
  if (loaded_) return;
  loaded_ = true;
  injected_ = tool_injected();
  path_ = cache_path();
  if (path_.empty()) return;
  std::ifstream file(path_);
  std::string line, key;
  EngineChoice choice;
  while (std::getline(file, line))
    if (parse(line, key, choice)) entries_[key] = choice;
}

}  // namespace mpsx::cuda
