"""`# rulec: allow NAME` comments (rulec/checker.py): which warnings each one silences (its
line, the next line when it stands alone, the whole verdict or policy that line is part of, in
its own file only) and what it says about names it cannot allow."""
from __future__ import annotations

from tests.unit.rulec.said import job, said

NO_BUDGET = ["R402 `restart pod` has no budget and may repeat forever",
             "  help: add `max N`, e.g. `restart pod max 3 then fail job`"]
EXIT_ZERO = ["R302 exit 0 in a filter on a failure never matches",
             "  help: on a failure only containers that exited non-zero are read; match the code "
             "they exit with"]
ALLOW = "# rulec: allow restart-without-budget"


def test_an_allow_covers_the_whole_policy_its_line_is_part_of() -> None:
    text = job(f"    on pod failed  {ALLOW}\n        -> restart pod\n"          # first line
               f"    on pod evicted\n        -> restart pod  {ALLOW}\n"         # last line
               f"    {ALLOW}\n    on pod pending\n        -> restart pod\n"    # alone, before
               f"    {ALLOW}\n\n    on pod running -> restart pod")          # not the next line
    assert said(text) == [f"t.rules:12:23 {NO_BUDGET[0]}", NO_BUDGET[1]]


def test_an_allow_covers_the_whole_verdict_its_line_is_part_of() -> None:
    allow = "# rulec: allow exit-zero-on-failure"
    text = job(f"    failed when any pod failed with exit in [0, 1]  {allow}\n"
               "    failed when any pod failed\n"
               f"        with exit in [0, 2]  {allow}\n"
               f"    failed when any pod failed {allow}\n"      # another verdict's line
               "    failed when any pod failed with exit in [0, 3]\n"
               "    failed when any pod failed with exit in [0, 4]\n"
               f"        or any pod evicted  {allow}\n"           # its last line
               "    failed when any pod failed with exit in [0, 5]\n"
               f"        {allow}\n        or any pod evicted\n"      # alone, inside it
               "    failed when any pod failed with exit in [0, 6]\n"
               f"    {allow}\n    succeeded when all pods succeeded")  # alone, before another
    assert said(text) == [f"t.rules:7:46 {EXIT_ZERO[0]}", EXIT_ZERO[1],
                          f"t.rules:13:46 {EXIT_ZERO[0]}", EXIT_ZERO[1]]


def test_an_allow_covers_its_own_file_only() -> None:
    text = job("    on pod failed -> restart pod")
    other = f"\n{ALLOW}\n"   # alone on line 2: it would cover line 3
    assert said(text, other) == [f"t.rules:3:22 {NO_BUDGET[0]}", NO_BUDGET[1]]
    assert said(other, text) == [f"m0.rules:3:22 {NO_BUDGET[0]}", NO_BUDGET[1]]


def test_names_an_allow_cannot_take_are_said() -> None:
    text = job("    on pod failed -> restart pod  "
               "# rulec: allow restart-without-budgt, exit-code-range, nonsense")
    assert said(text) == [
        f"t.rules:3:22 {NO_BUDGET[0]}", NO_BUDGET[1],
        "t.rules:3:35 R901 `exit-code-range` is an error and cannot be allowed",
        "t.rules:3:35 R901 `nonsense` is not a diagnostic name",
        "t.rules:3:35 R901 `restart-without-budgt` is not a diagnostic name",
        "  help: did you mean `restart-without-budget`?"]
