"""`rulec test --format junit`: suite results as JUnit XML, the test report CI systems read
(GitLab, Jenkins, the test-report actions of GitHub).

One `<testsuite>` per suite file, one `<testcase>` per case run; a failing case carries its
diff (or the error that stopped it) as the text of its `<failure>`, a case whose inputs cannot
be used an `<error>`. A suite file that cannot be loaded is one test case with an `<error>`, so
that a report does not silently lose it.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Sequence

from rulec.commands.suite import Outcome

# Characters XML 1.0 cannot carry, even escaped.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class SuiteRun:
    path: str
    cases: tuple[tuple[Outcome, float], ...]  # each case run, with its time in seconds
    error: str | None = None                   # why the suite could not be loaded


def render(runs: Sequence[SuiteRun]) -> str:
    root = ET.Element("testsuites", name="rulec test")
    for run in runs:
        suite = ET.SubElement(root, "testsuite", name=_text(run.path))
        if run.error is not None:
            case = ET.SubElement(suite, "testcase", name="(loading the suite)",
                                 classname=_text(run.path), time="0")
            ET.SubElement(case, "error", message=_text(run.error), type="InputError")
        for outcome, seconds in run.cases:
            case = ET.SubElement(suite, "testcase", name=_text(outcome.case),
                                 classname=_text(run.path), time=f"{seconds:.3f}")
            if outcome.error:
                ET.SubElement(case, "error", message=_text(outcome.error), type="InputError")
            elif not outcome.passed:
                report = _text(outcome.report)
                failure = ET.SubElement(case, "failure", type="mismatch",
                                        message=report.split("\n", 1)[0] or "failed")
                failure.text = report
        errors = sum(bool(o.error) for o, _ in run.cases)
        _count(suite, len(run.cases) + (run.error is not None),
               sum(not o.passed for o, _ in run.cases) - errors,
               errors + (run.error is not None), sum(s for _, s in run.cases))
    _count(root, *(sum(float(s.get(k, 0)) for s in root) for k in ("tests", "failures",
                                                                    "errors", "time")))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _count(element: ET.Element, tests: float, failures: float, errors: float,
           seconds: float) -> None:
    element.set("tests", str(int(tests)))
    element.set("failures", str(int(failures)))
    element.set("errors", str(int(errors)))
    element.set("time", f"{seconds:.3f}")


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)
