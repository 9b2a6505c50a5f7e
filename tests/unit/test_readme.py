"""The README's claims that code can hold: its example is formatted and compiles clean, and
its table of parts names every `rulec` command."""
from __future__ import annotations

import re
from pathlib import Path

from rulec import api, fmt
from rulec.commands import cli
from rulec.source import SourceFile

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_the_example_is_formatted_and_compiles_clean() -> None:
    [example] = re.findall(r"^```\n(job .*?)^```", README, re.S | re.M)
    assert fmt.format_text(example) == example
    build = api.build_sources([SourceFile.from_text("readme.rules", example)])
    assert build.plan is not None and build.diagnostics == ()


def test_the_parts_table_names_every_command() -> None:
    parts = README.split("## The parts", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`rulec ([a-z-]+)`", parts)) | set(re.findall(r"/ `([a-z-]+)`", parts))
    listed = cli._parser(every=True).format_help().split("COMMAND\n", 1)[1].split("\n\n", 1)[0]
    commands = set(re.findall(r"^    ([a-z-]+)", listed, re.M))  # `rulec --help`'s commands
    assert {"check", "eval", "webhook-config"} <= commands
    assert commands <= named, commands - named
