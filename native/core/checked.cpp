#include "mpsx/checked.h"

#include <cmath>
#include <cstring>

namespace mpsx {

namespace {

// The parameters that may be infinite, by name, and the infinities each takes.
struct InfiniteParameter {
  const char* name;
  bool positive, negative;
  const char* expected;
};
constexpr InfiniteParameter kInfiniteParameters[] = {
    {"maximum_value", true, false, "finite or +inf (no upper bound)"},
    {"gradient_clip_max", true, false, "finite or +inf (no upper bound)"},
    {"minimum_value", false, true, "finite or -inf (no lower bound)"},
    {"gradient_clip_min", false, true, "finite or -inf (no lower bound)"},
    {"threshold", true, true, "a number"},
};

}  // namespace

float checked_parameter(float value, const char* owner, const char* name) {
  if (std::isfinite(value)) return value;
  const char* expected = "finite";
  for (const InfiniteParameter& p : kInfiniteParameters)
    if (std::strcmp(p.name, name) == 0) {
      if (value > 0 ? p.positive : value < 0 && p.negative) return value;
      expected = p.expected;
    }
  fail<ArgumentError>(owner, *owner ? ": " : "", name, " must be ", expected, ", given ", value);
}

}  // namespace mpsx
