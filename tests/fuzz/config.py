"""The fuzzer's knobs: the environment variables MPSX_FUZZ_CASES, MPSX_FUZZ_SEED and MPSX_FUZZ_TIMEOUT, and
the limits of its child processes."""

import os

CASES = int(os.environ.get("MPSX_FUZZ_CASES", "6000"))
SEED = int(os.environ.get("MPSX_FUZZ_SEED", "1"))
ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
TIMEOUT = float(os.environ.get("MPSX_FUZZ_TIMEOUT", "20" if ASAN else "5"))
STARTUP_TIMEOUT = 120  # seconds a child may take to start
BATCH = 40  # cases per child process
RESTART_SECONDS = 0.5  # what starting a new child after a crash costs, about
MEMORY_LIMIT = 8 << 30  # address space of a child, so that a huge allocation fails cleanly
