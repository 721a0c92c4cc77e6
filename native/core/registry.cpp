#include "mpsx/registry.h"

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "mpsx/errors.h"
#include "mpsx/primitive.h"

namespace mpsx {

uint64_t next_primitive_identity() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace mpsx

namespace mpsx::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::pair<std::string, std::string>, ErasedMaker> makers;  // (family, backend kind)
};

// Backend libraries register while they load, in any order of static
// initialization: the registry exists from its first use.
Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

}  // namespace

void register_primitive(const char* family, const char* backend_kind, ErasedMaker maker) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.makers[{family, backend_kind}] = maker;
}

ErasedMaker find_primitive(const char* family, const Backend& backend) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.makers.find({family, backend.kind()});
  if (it == r.makers.end())
    fail<Error>("the ", backend.kind(), " backend (device ", backend.device_name(), ") has no ", family,
                " kernels");
  return it->second;
}

}  // namespace mpsx::detail

namespace mpsx {

void unregister_primitive(const char* family, const char* backend_kind) {
  detail::Registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.makers.erase({family, backend_kind});
}

}  // namespace mpsx
