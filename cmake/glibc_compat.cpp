// For wheels linked against an older glibc (MPSX_GLIBC_STUBS): private
// stand-ins for the two symbols of newer glibcs that this compiler's
// libstdc++ uses.
#include <sys/random.h>

#include <cerrno>

// glibc 2.32. libstdc++ skips atomic reference counting where it is set;
// zero ("maybe threaded") is correct everywhere, merely never faster.
extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}

// glibc 2.36. std::random_device's "arc4random" source (random.o comes in
// with libstdc++'s strings), from the kernel as glibc's own does.
extern "C" __attribute__((visibility("hidden"))) unsigned arc4random() {
  unsigned value;
  ssize_t got;
  while ((got = getrandom(&value, sizeof value, 0)) != static_cast<ssize_t>(sizeof value))
    if (got >= 0 || errno != EINTR) __builtin_trap();  // no getrandom: kernels before 3.17
  return value;
}
