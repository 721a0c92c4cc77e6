"""Ctrl-C latency of each blocking wait: SIGINT to the process 0.2 s into the wait, the time until
KeyboardInterrupt is caught; median and max over TRIALS trials.

    PYTHONPATH=build/dev/stage python tools/ctrl_c_latency.py [DEVICE] [TRIALS]
"""

import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import mpsx  # noqa: E402
from test_signals import interrupted_within, long_convolutions, slow_relu  # noqa: E402


def main():
    device = mpsx.Device(sys.argv[1] if len(sys.argv) > 1 else None)
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rng = np.random.default_rng(0)

    def handler_wait(kind):
        # A command buffer whose completed handler sleeps 1 s; its waits wait for the handler.
        cb = slow_relu(device, rng, sleep=1.0)[0]
        if kind == "with block":
            def wait():
                with cb:
                    pass
        else:
            cb.commit()
            wait = cb.wait_until_completed if kind == "wait_until_completed" else device.command_queue.wait_until_idle
        latency = interrupted_within(wait)
        cb.wait_until_completed()
        return latency

    def kernels_wait(kind):
        # Convolutions that run about 0.8 s on the device.
        cb, _, _, _, destination = long_convolutions(device, rng, seconds=0.8)
        latency = interrupted_within(cb.wait_until_completed if kind == "kernels" else destination.__dlpack__)
        cb.wait_until_completed()
        return latency

    kinds = [("wait_until_completed", handler_wait), ("wait_until_idle", handler_wait), ("with block", handler_wait),
             ("kernels", kernels_wait)]
    if device.backend == "cpu":
        kinds.append(("DLPack export", kernels_wait))
    for kind, measure in kinds:
        ms = [measure(kind) * 1e3 for _ in range(trials)]
        print(f"{device.name} {kind:22s} median {statistics.median(ms):6.2f} ms  max {max(ms):6.2f} ms  "
              f"({trials} trials)", flush=True)


if __name__ == "__main__":
    main()
