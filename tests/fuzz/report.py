"""Findings: their reproducers, pruned to the shortest, and the report of a run."""

import ast
import collections
import re

from .config import RESTART_SECONDS, TIMEOUT
from .generator import indent
from .runner import run_cases

# Kinds of finding: the title of their group in the report.
TITLES = {
    "crash": "crash", "hang": "hang", "exception": "unexpected exception", "message": "exception without a message",
    "accepted": "bad input accepted", "enqueued": "raised after encoding",
    "quote": "load error quoting the file at length",
    "roundtrip": "setter refuses what its getter returned", "factory": "factory failed",
    "coverage": "class the fuzzer cannot drive", "budget": "run stopped early",
}


def reproducer(case, finding):
    """The code that shows a finding: the case up to the phase it happened in."""
    phase = finding.get("phase", "")
    parts = [case["setup"].rstrip()]
    if phase.startswith(("get ", "set ")):
        name = phase.split()[1]
        parts.append(f"obj.{name}" if phase.startswith("get") else f"obj.{name} = obj.{name}")
    elif phase != "setup":
        parts.append(case["action"].strip())
    if phase in ("finish", "cleanup", "callback", "exit") and finding.get("code"):
        parts.append(finding["code"])
    return "\n".join(p for p in parts if p) + "\n"


def pruned(setup, rest):
    """setup less its top-level statements that only bind names nothing else reads
    (repeatedly): a shorter reproducer, if running it shows the same finding."""
    statements = ast.parse(setup).body
    reads = [{n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
             for s in statements]
    later = {n.id for n in ast.walk(ast.parse(rest)) if isinstance(n, ast.Name)}

    def binds(node):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return {node.name}
        if isinstance(node, ast.Import):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
        targets = [n for t in getattr(node, "targets", []) for n in ast.walk(t)]
        if isinstance(node, ast.Assign) and all(isinstance(n, (ast.Name, ast.Tuple, ast.Store)) for n in targets):
            return {n.id for n in targets if isinstance(n, ast.Name)}
        return set()

    kept = set(range(len(statements)))
    changed = True
    while changed:
        changed = False
        for i in sorted(kept):
            names = binds(statements[i])
            if names and not names & later and not any(names & reads[j] for j in kept if j != i):
                kept.discard(i)
                changed = True
    lines = setup.split("\n")
    return "\n".join("\n".join(lines[s.lineno - 1:s.end_lineno]) for i, s in enumerate(statements) if i in kept) + "\n"


def failing_statement(setup, finding):
    """(the code before, the code of) the top-level statement of setup in which the
    finding happened, from the line its traceback names; None where it names none."""
    line = re.findall(r'File "<case [^>]* setup>", line (\d+),? in <module>', finding.get("detail") or "")
    if not line:
        return None
    failing = next(s for s in ast.parse(setup).body if s.lineno <= int(line[0]) <= s.end_lineno)
    lines = setup.split("\n")
    return "\n".join(lines[:failing.lineno - 1]), "\n".join(lines[failing.lineno - 1:failing.end_lineno]) + "\n"


class Report:
    """The findings of one run and how to read them."""

    def __init__(self, device, seed, cases, outcomes, problems=(), undriven=(), out_of_time=False):
        self.device, self.seed, self.undriven = device, seed, undriven
        generated = [c for c in cases if c["kind"] != "probe"]
        self.probes = len(cases) - len(generated)
        self.tried = sum(1 for c in generated if outcomes.get(c["id"]) is not None)
        self.skipped = sum(1 for c in generated if c["id"] in outcomes and outcomes[c["id"]] is None)
        self.findings = [dict(kind="coverage", what=p, id="-", target="catalog", reproducer="") for p in problems]
        left_out = sum(1 for c in generated if c["id"] not in outcomes)
        # Cases the time limit left out are no finding: the summary counts them.
        self.unrun = left_out if out_of_time else 0
        if left_out and not out_of_time:
            self.findings.append(dict(kind="budget", id="-", target="run", reproducer="",
                                      what=f"{left_out} cases were left out: crashes and hangs used up the run's "
                                           f"restart budget (a new child costs about {RESTART_SECONDS} s, a hang "
                                           f"its timeout)"))
        for case in cases:
            for finding in (outcomes.get(case["id"]) or {}).get("findings", []):
                target = case["key"] + (f".{case['member']}" if case.get("member") else "")
                self.findings.append(dict(finding, id=case["id"], target=target, case=case,
                                          reproducer=reproducer(case, finding)))

    @staticmethod
    def group(finding):
        kind = finding["kind"]
        if kind == "crash":
            bare = finding["target"].startswith("bare ") or finding["target"].endswith("[__new__]")
            return f"crash ({finding['what']})" + (" with an object made by cls.__new__(cls)" if bare else "")
        if kind == "exception":
            return f"unexpected {finding['error']}"
        return TITLES[kind]

    def representatives(self):
        """The finding of each group with the shortest reproducer."""
        groups = collections.defaultdict(list)
        for finding in self.findings:
            groups[self.group(finding)].append(finding)
        return {g: min(f, key=lambda f: len(f["reproducer"])) for g, f in groups.items()}

    def shrink(self, workdir, timeout=TIMEOUT, jobs=None):
        """Prunes the reproducer of each group's representative where the pruned code
        still shows a finding of the group."""
        candidates = {}
        for group, finding in self.representatives().items():
            case = finding.get("case")
            if case is None:
                continue
            setup, rest = case["setup"], reproducer(case, finding)[len(case["setup"].rstrip()):]
            failing = failing_statement(setup, finding) if finding["phase"] == "setup" else None
            setup = pruned(failing[0], failing[1]) + failing[1] if failing else pruned(setup, rest)
            shrunk = dict(case, id=f"shrink {case['id']}", key=f"shrink {case['id']}", setup=setup)
            candidates[shrunk["id"]] = (group, finding, shrunk)
        outcomes = run_cases([c for _, _, c in candidates.values()], workdir, timeout, jobs)
        for case_id, (group, finding, shrunk) in candidates.items():
            for found in (outcomes.get(case_id) or {}).get("findings", []):
                code = reproducer(shrunk, found)
                if self.group(dict(found, target=finding["target"])) == group:
                    finding["reproducer"] = code
                    break

    def summary(self):
        groups = collections.Counter(self.group(f) for f in self.findings)
        found = ", ".join(f"{n} {g}" for g, n in groups.most_common()) or "none"
        unrun = f", {self.unrun} not run within the time limit" if self.unrun else ""
        return (f"mpsx fuzz on {self.device}, seed {self.seed}: {self.tried} cases tried (and {self.probes} factory "
                f"probes), {self.skipped} skipped after their target crashed or hung{unrun}; "
                f"{len(self.findings)} findings: {found}")

    def render(self, path=None):
        """Every finding, one line each, grouped by kind, with the shortest reproducer of each group."""
        out = [self.summary()]
        if path:
            out.append(f"every finding with its reproducer and what the child printed: {path}")
        if self.undriven:
            out.append(f"methods only ever given hostile arguments (no factory has valid ones): "
                       f"{', '.join(self.undriven)}")
        by_group = collections.defaultdict(list)
        for finding in self.findings:
            by_group[self.group(finding)].append(finding)
        for title, findings in sorted(by_group.items(), key=lambda item: -len(item[1])):
            out.append(f"\n== {title}: {len(findings)} finding(s)")
            lines = collections.defaultdict(list)
            for f in findings:
                lines[(f["target"], f["what"], f.get("phase", ""))].append(f["id"])
            for (target, what, phase), ids in sorted(lines.items()):
                more = f" (+{len(ids) - 1}: {', '.join(ids[1:4])}{'...' * (len(ids) > 4)})" if len(ids) > 1 else ""
                out.append(f"  #{ids[0]}{more} {target}: {what}" + (f" [in {phase}]" if phase else ""))
            shortest = self.representatives()[title]
            if shortest["reproducer"]:
                out.append(f"  reproducer of #{shortest['id']}:\n{indent(shortest['reproducer'], '    ')}")
        return "\n".join(out)

    def write(self, path):
        with open(path, "w") as out:
            out.write(self.summary() + "\n")
            out.write(f"methods only ever given hostile arguments: {', '.join(self.undriven) or 'none'}\n")
            for f in self.findings:
                out.write(f"\n==== #{f['id']} {f['target']}: {f['what']} [{f.get('phase', '')}]\n"
                          f"{f['reproducer']}\n---- detail\n{f.get('detail') or ''}\n")
