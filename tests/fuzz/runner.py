"""The parent loop: runs batches of cases in child processes on every core, and starts a new child after a
crash or a hang."""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import mpsx

from .config import ASAN, BATCH, RESTART_SECONDS, STARTUP_TIMEOUT, TIMEOUT


class HarnessError(Exception):
    """The fuzzer itself failed (not a finding)."""

def child_environment():
    """The parent's environment, with its import path (so that the child imports the
    same mpsx), one thread per library and, under AddressSanitizer, an allocation limit."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(mpsx.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [os.path.abspath(p) for p in sys.path if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if ASAN:
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "allocator_may_return_null=1",
                                                     "max_allocation_size_mb=4096"]))
    return env


def stderr_tail(text, case_id, lines=40):
    """What the child wrote to stderr while running case_id (faulthandler's stacks, sanitizer reports)."""
    marker = f"\n=== fuzz case {case_id}\n"
    start = text.rfind(marker)
    return "\n".join((text[start + len(marker):] if start >= 0 else text).splitlines()[-lines:])


# The child's program: fuzz.child.child_main(cases file, fd), with tests/ first on its path, as a script there.
CHILD = (f"import sys; sys.path[0] = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r}; "
         "from fuzz.child import child_main; child_main(sys.argv[1], int(sys.argv[2]))")


def run_child(cases, workdir, timeout):
    """Runs cases in one child process until they are done or one crashes or hangs.
    Returns {id: outcome} of the cases it finished, and (id, finding) of one that
    crashed or hung, or None."""
    token = f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    cases_path, stderr_path = Path(workdir) / f"cases-{token}.json", Path(workdir) / f"stderr-{token}.txt"
    cases_path.write_text(json.dumps(cases))
    read_end, write_end = os.pipe()
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-c", CHILD, str(cases_path), str(write_end)], cwd=workdir,
                                   env=child_environment(), stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                   pass_fds=(write_end,), start_new_session=True)
    os.close(write_end)
    messages = queue.Queue()

    def read():
        with os.fdopen(read_end) as stream:
            for line in stream:
                messages.put(json.loads(line))
        messages.put(None)

    threading.Thread(target=read, daemon=True).start()
    outcomes, current, phase, code, failure = {}, None, "start", None, None
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        try:
            message = messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            process.send_signal(signal.SIGUSR1)  # faulthandler dumps every thread's stack
            time.sleep(1)
            os.killpg(process.pid, signal.SIGKILL)
            failure = dict(kind="hang", what=f"no progress in {timeout:g} s", phase=phase, code=code)
            break
        if message is None:
            break
        if "harness_error" in message:
            os.killpg(process.pid, signal.SIGKILL)
            raise HarnessError(message["harness_error"])
        if "start" in message:
            current, phase, code, deadline = message["start"], "setup", None, time.monotonic() + timeout
        elif "phase" in message:
            phase, code = message["phase"], message.get("code", code)
        elif "done" in message:
            outcomes[message["done"]] = {"findings": message["findings"], "probe": message["probe"]}
            current, phase, deadline = None, "exit", time.monotonic() + timeout
    returncode = process.wait()
    text = stderr_path.read_text(errors="replace")
    cases_path.unlink()
    stderr_path.unlink()
    if failure is None and returncode != 0:
        what = f"signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit status {returncode}"
        failure = dict(kind="crash", what=what, phase=phase, code=code)
    if failure is None:
        return outcomes, None
    if current is None and not outcomes:
        raise HarnessError(f"a fuzz child failed before its first case ({failure['what']}):\n{text[-3000:]}")
    if current is None:  # after its last case: pinned on that one
        current = list(outcomes)[-1]
    failure["detail"] = stderr_tail(text, current)
    sanitizer = re.search(r"ERROR: (AddressSanitizer: [\w-]+)|runtime error: ([^\n]*)", failure["detail"])
    if sanitizer and failure["kind"] == "crash":  # a sanitizer's report, then its exit status
        failure["what"] = sanitizer.group(1) or f"UndefinedBehaviorSanitizer: {sanitizer.group(2).split(' of type')[0]}"
    return outcomes, (current, failure)


def shard_key(case):
    return zlib.crc32(case["key"].encode())


def run_cases(cases, workdir, timeout=TIMEOUT, jobs=None, progress=None, budget=None, deadline=None):
    """Runs cases in `jobs` child processes at a time (default: one more than the cores,
    as hangs and child start-ups leave a core idle); returns {id: outcome}. The cases
    of one target run in one worker in id order, and once one of them crashed or hung
    the target's later cases are skipped (outcome None): each crash costs a new child.
    Once crashes and hangs cost more than `budget` restarts (a hang costs its timeout),
    the cases not started yet are left out (no outcome), as they are once time.monotonic()
    passed `deadline`."""
    jobs = jobs or min(len(os.sched_getaffinity(0)), 8) + 1
    shards = [[] for _ in range(jobs)]
    for case in cases:
        shards[shard_key(case) % jobs].append(case)
    outcomes, errors, lock, spent = {}, [], threading.Lock(), [0.0]

    def run_shard(shard):
        failed, pending = set(), list(shard)
        try:
            while pending and (budget is None or spent[0] <= budget) and (deadline is None
                                                                           or time.monotonic() < deadline):
                batch = []
                while pending and len(batch) < BATCH:
                    case = pending.pop(0)
                    if case["key"] in failed:
                        outcomes[case["id"]] = None
                    else:
                        batch.append(case)
                if not batch:
                    break
                finished, failure = run_child(batch, workdir, timeout)
                outcomes.update(finished)
                if failure is not None:
                    case_id, finding = failure
                    index = [c["id"] for c in batch].index(case_id)
                    failed.add(batch[index]["key"])
                    outcomes.setdefault(case_id, {"findings": [], "probe": None})["findings"].append(finding)
                    pending = batch[index + 1:] + pending
                    with lock:
                        spent[0] += 1 if finding["kind"] == "crash" else timeout / RESTART_SECONDS
                if progress:
                    with lock:
                        progress(len(outcomes), len(cases))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run_shard, args=(shard,)) for shard in shards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return outcomes
