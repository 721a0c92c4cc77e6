"""A whole run: probe the factories, generate and run the cases, report; and the command line
(python tests/test_fuzz.py --help)."""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import mpsx
from fuzz.factories import FACTORIES

from .catalog import Catalog
from .child import finish_code
from .config import CASES, SEED, TIMEOUT
from .generator import Generator
from .report import Report
from .runner import run_cases
from .snippets import prelude


def probe_cases(catalog, device):
    """One case per factory, describing what it makes."""
    return [{"id": f"probe {cls}#{i}", "kind": "probe", "key": f"probe {cls}#{i}", "class": cls, "device": device,
             "setup": prelude(device, code) + code, "action": "", "cbs": ["cb"], "must_raise": None,
             "properties": [m.name for m in catalog.members[cls] if m.kind == "property"],
             "data_source_bases": catalog.data_source_bases}
            for cls in sorted(FACTORIES) if cls in catalog.classes for i, code in enumerate(FACTORIES[cls])]


def fuzz(device, cases, seed, workdir, only=None, timeout=TIMEOUT, jobs=None, progress=None, first_case=0,
         time_limit=None):
    """Probes the factories, then runs the generated cases first_case .. first_case + cases - 1 on the
    device, starting none once `time_limit` seconds have passed; returns the Report and the Generator."""
    deadline = time.monotonic() + time_limit if time_limit else None
    catalog = Catalog()
    probing = probe_cases(catalog, device)
    outcomes = run_cases(probing, workdir, timeout, jobs)
    probes = {c["id"].split()[1]: outcomes[c["id"]]["probe"] for c in probing
              if outcomes.get(c["id"]) and outcomes[c["id"]]["probe"]}
    generator = Generator(catalog, probes, device, [d.name for d in mpsx.devices()], seed, only)
    problems = catalog.coverage_problems() + [
        f"every factory of mpsx.{c} failed (see the factory findings), so the fuzzer cannot drive it"
        for c in catalog.drivable if c in FACTORIES and c not in generator.factories]
    # Without a working factory there is nothing to fuzz: the problems say why.
    generated = [generator.case(i) for i in range(first_case, first_case + cases)] if generator.factories else []
    outcomes.update(run_cases(generated, workdir, timeout, jobs, progress, budget=max(100, cases // 20),
                              deadline=deadline))
    out_of_time = deadline is not None and time.monotonic() >= deadline
    report = Report(device, seed, probing + generated, outcomes, problems, generator.undriven, out_of_time)
    report.shrink(workdir, timeout, jobs)
    return report, generator


def main():
    parser = argparse.ArgumentParser(description=sys.modules[__package__].__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=CASES)
    parser.add_argument("--first-case", type=int, default=0, help="the id of the first case (a long run in parts)")
    parser.add_argument("--time-limit", type=float, help="seconds after which no case starts; the report counts "
                        "the cases left out")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--device", action="append", help="a device name (default: every device)")
    parser.add_argument("--only", help="comma-separated public names to target")
    parser.add_argument("--timeout", type=float, default=TIMEOUT)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--show", help="print the reproducer of this case id instead of running")
    parser.add_argument("--report", help="folder for the findings files (default: a new temporary one)")
    args = parser.parse_args()
    workdir = Path(args.report or tempfile.mkdtemp(prefix="mpsx-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    only = args.only.split(",") if args.only else None
    failed = False
    for device in args.device or [d.name for d in mpsx.devices()]:
        if args.show is not None:
            _, generator = fuzz(device, 0, args.seed, workdir, only, args.timeout, args.jobs)
            case = generator.case(int(args.show))
            print(f"# case {args.show}: {case['key']}\n{case['setup']}{case['action']}\n"
                  f"{finish_code(case['cbs'], True)}")
            continue
        start = time.monotonic()
        report, _ = fuzz(device, args.cases, args.seed, workdir, only, args.timeout, args.jobs,
                         lambda done, total: print(f"\r{done}/{total} cases", end="", file=sys.stderr, flush=True),
                         args.first_case, args.time_limit)
        path = workdir / f"fuzz-findings-{device.replace(':', '-')}-{args.seed}.txt"
        report.write(path)
        print(f"\n{report.render(path)}\n({time.monotonic() - start:.0f} s)")
        failed |= bool(report.findings)
    return 1 if failed else 0
