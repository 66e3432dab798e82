"""Check results, the JSON report and the JUnit XML."""

from __future__ import annotations

import json
import platform
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class CheckResult:
    name: str
    passed: bool
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self) -> str:
        if self.passed:
            return f"PASS {self.name}"
        return f"FAIL {self.name}: {self.reason}"

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": "pass" if self.passed else "fail",
            "reason": self.reason,
            "details": self.details,
            "seconds": round(self.seconds, 3),
        }


class CheckFailed(Exception):
    """Raised inside a check: a one-line reason (and optional details)."""

    def __init__(self, reason: str, **details):
        super().__init__(" ".join(reason.split()))
        self.details = details


def run_check(name: str, fn, *args, **kwargs) -> CheckResult:
    t0 = time.monotonic()
    try:
        details = fn(*args, **kwargs) or {}
        res = CheckResult(name, True, "", details)
    except CheckFailed as exc:
        res = CheckResult(name, False, str(exc), exc.details)
    except Exception as exc:  # a crash in a check is a failure of that check
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        res = CheckResult(name, False, reason[:500])
    res.seconds = time.monotonic() - t0
    return res


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            return repr(obj)
        return obj
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def write_reports(report_dir: Path, results: list[CheckResult], meta: dict) -> dict:
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    failed = [r.name for r in results if not r.passed]
    report = {
        "schema": 1,
        "suite": "m3_smoke",
        "passed": not failed,
        "failed_checks": failed,
        "checks": [_jsonable(r.to_json()) for r in results],
        "meta": _jsonable({"python": sys.version.split()[0], "host": platform.node(), **meta}),
    }
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")

    suite = ET.Element(
        "testsuite",
        name="m3_smoke",
        tests=str(len(results)),
        failures=str(len(failed)),
        errors="0",
        skipped="0",
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname="m3_smoke", name=r.name, time=f"{r.seconds:.3f}"
        )
        if not r.passed:
            f = ET.SubElement(case, "failure", message=r.reason, type="CheckFailed")
            f.text = json.dumps(_jsonable(r.details), indent=2)
        elif r.details:
            out = ET.SubElement(case, "system-out")
            out.text = json.dumps(_jsonable(r.details), indent=2)
    suites = ET.Element(
        "testsuites", name="m3_smoke", tests=str(len(results)), failures=str(len(failed))
    )
    suites.append(suite)
    ET.ElementTree(suites).write(report_dir / "junit.xml", encoding="utf-8", xml_declaration=True)
    return report
