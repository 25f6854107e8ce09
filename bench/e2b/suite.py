"""E2B's own code-interpreter tests against Cellmate: `python -m bench e2b --suite PATH`.

PATH is the `python/tests` folder of https://github.com/e2b-dev/code-interpreter (kept
outside this repository). The suite runs as it is, conftest and markers included, in a pytest
subprocess whose `sys.path` starts with bench/e2b/shim: its `e2b_code_interpreter` and `e2b`
are the adapter in bench/e2b, on Cellmate's executor with real sandboxes. Nothing is skipped
that E2B's own markers do not skip: tests of E2B's servers (systemd, the sandbox URL, the
HTTP client's timeouts) count as failures here. Prints passed/failed/skipped/errors of the
total, per file, the failed tests with their first line, the machine and the settings, and
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench.e2b.sandbox import FEATURES
from bench.executor_bench import machine
from executor import default_tag

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(__file__).resolve().parent / "shim"
OUTCOMES = ("passed", "failed", "skipped", "errors")


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    outcome: str
    message: str = ""


def cases_of(report: ElementTree.Element, suite: Path) -> list[Case]:
    """Each test case of a junit report (pytest's xunit1: with its file) and its outcome:
    a failure, an error (collection, fixture), a skip, or a pass."""
    found = []
    for case in report.iter("testcase"):
        file = case.get("file") or (case.get("classname") or "").replace(".", "/") + ".py"
        with_path = Path(file)
        if with_path.is_absolute():
            with_path = (
                with_path.relative_to(suite) if with_path.is_relative_to(suite) else with_path
            )
        outcome, message = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            element = case.find(tag)
            if element is not None:
                outcome = name
                message = (element.get("message") or element.text or "").strip()
                break
        first = message.splitlines()[0] if message else ""
        found.append(Case(str(with_path), case.get("name", ""), outcome, first))
    return found


def counts(cases: list[Case]) -> dict[str, int]:
    tally = Counter(case.outcome for case in cases)
    return {outcome: tally.get(outcome, 0) for outcome in OUTCOMES} | {"total": len(cases)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench e2b")
    parser.add_argument("--suite", required=True, help="code-interpreter's python/tests folder")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (default 1)")
    parser.add_argument("--pool", type=int, default=1, help="ready sandboxes per worker")
    parser.add_argument("--max-live", type=int, default=4, help="sandboxes at once per worker")
    parser.add_argument("--runtime", choices=["runc", "runsc"], default="runc")
    parser.add_argument("--test-timeout", type=int, default=240, help="seconds per test")
    parser.add_argument("--cap", type=int, default=3600, help="seconds for the whole suite")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, to run a part")
    args = parser.parse_args(argv)
    suite = Path(args.suite).resolve()
    if not (suite / "conftest.py").is_file():
        raise SystemExit(f"{suite} is not E2B's python/tests (no conftest.py)")
    report_file = Path(tempfile.mkdtemp(prefix="e2b-suite-")) / "junit.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "bench.e2b.plugin",
        f"--numprocesses={args.workers}",
        f"--timeout={args.test_timeout}",
        f"--junitxml={report_file}",
        "-o",
        "junit_family=xunit1",
    ] + (["-k", args.keyword] if args.keyword else [])
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("E2B_")
    } | {
        "PYTHONPATH": os.pathsep.join([str(SHIM), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "CELLMATE_E2B_RUNTIME": args.runtime,
        "CELLMATE_E2B_POOL": str(args.pool),
        "CELLMATE_E2B_MAX_LIVE": str(args.max_live),
    }
    print(f"machine: {machine()}")
    print(
        f"settings: runtime {args.runtime}, {args.workers} worker(s), pool {args.pool} ready, "
        f"at most {args.max_live} sandboxes per worker, {args.test_timeout} s per test, "
        f"image {default_tag()}, Session.run takes: {', '.join(sorted(FEATURES)) or 'code only'}"
    )
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=report_file.parent,  # not the suite's parent: E2B's own package lies there
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=args.cap)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)  # pytest writes its report on an interrupt
        try:
            output, _ = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        print(f"the suite was cut at the cap ({args.cap} s)")
    seconds = time.monotonic() - started
    if not report_file.is_file():
        print(output[-6000:])
        raise SystemExit(f"pytest wrote no report (exit {process.returncode})")
    report = ElementTree.parse(report_file).getroot()  # noqa: S314 (pytest's, just written)
    cases = cases_of(report, suite)
    total = counts(cases)
    print(
        f"E2B suite: {total['passed']} passed, {total['failed']} failed, "
        f"{total['skipped']} skipped, {total['errors']} errors of {total['total']} "
        f"in {seconds:.0f} s"
    )
    by_file: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_file[case.file].append(case)
    width = max([len(name) for name in by_file] + [4])
    print(f"{'file':{width}} {'pass':>5} {'fail':>5} {'skip':>5} {'err':>5} {'of':>5}")
    for name in sorted(by_file):
        row = counts(by_file[name])
        print(
            f"{name:{width}} {row['passed']:5} {row['failed']:5} {row['skipped']:5} "
            f"{row['errors']:5} {row['total']:5}"
        )
    print("not passed:")
    for case in sorted(cases, key=lambda c: (c.file, c.name)):
        if case.outcome in ("failed", "errors"):
            print(f"  {case.file}::{case.name} [{case.outcome}] {case.message[:110]}")
    summary = {"e2b_suite": total, "seconds": round(seconds), "features": sorted(FEATURES)}
    print(json.dumps(summary))
    return 0
