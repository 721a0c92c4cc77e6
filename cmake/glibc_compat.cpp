// For wheels linked against an older glibc (MPSX_GLIBC_STUBS): private
// stand-ins for the symbols of newer glibcs that this compiler's libstdc++
// uses.
#include <pthread.h>
#include <sys/random.h>
#include <time.h>

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

// glibc 2.30. std::condition_variable waits on steady_clock with it; this
// waits until the same moment on the system clock, as libstdc++ does where
// glibc lacks it (the caller checks its own clock again after a timeout).
extern "C" __attribute__((visibility("hidden"))) int pthread_cond_clockwait(pthread_cond_t* condition,
                                                                            pthread_mutex_t* mutex, clockid_t clock,
                                                                            const struct timespec* deadline) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(condition, mutex, deadline);
  timespec now{}, system{};
  clock_gettime(clock, &now);
  clock_gettime(CLOCK_REALTIME, &system);
  long long nanoseconds = (deadline->tv_sec - now.tv_sec) * 1000000000LL + (deadline->tv_nsec - now.tv_nsec) +
                          system.tv_sec * 1000000000LL + system.tv_nsec;
  if (nanoseconds < 0) nanoseconds = 0;
  timespec system_deadline{static_cast<time_t>(nanoseconds / 1000000000LL),
                           static_cast<long>(nanoseconds % 1000000000LL)};
  return pthread_cond_timedwait(condition, mutex, &system_deadline);
}
