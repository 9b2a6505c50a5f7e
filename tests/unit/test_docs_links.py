"""The documentation's links lead somewhere: every relative link in README.md and docs/*.md
names a file or folder that exists, and every `#anchor` (on its own or after a Markdown file)
one of that page's headings, as GitHub names them, or an `<a id>` of it."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.M)
ANCHOR_TAG = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"[a-z][a-z0-9+.-]*:", re.I)   # https:, mailto:, ...


def prose(text: str) -> str:
    """The text without code (fenced blocks and inline spans), where nothing is a link."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links by their text, no markup), lower case,
    without punctuation but `-` and `_`, spaces as `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    found: set[str] = set()
    seen: Counter[str] = Counter()
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found | set(ANCHOR_TAG.findall(text))


def links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) + REFERENCE.findall(text) if t and not EXTERNAL.match(t)]


def broken(page: Path) -> list[str]:
    """Each relative link of `page` that leads nowhere, with why."""
    out = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            out.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            out.append(f"{target}: no heading #{anchor} in {where.name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    assert broken(page) == []


def test_the_pages_have_links_to_check() -> None:
    found = {p.name: links(p) for p in PAGES}
    assert "#codes" in found["language.md"] and "plan.md#injection" in found["injection.md"]
    assert "../bench/RESULTS.md#controller-benchcontrollerpy" in found["controller.md"]


@pytest.mark.parametrize("heading, anchor", [
    ("Use in CI and editors", "use-in-ci-and-editors"),
    ("Controller (`bench/controller.py`)", "controller-benchcontrollerpy"),
    ("Kubernetes podFailurePolicy and JobSet's failurePolicy",
     "kubernetes-podfailurepolicy-and-jobsets-failurepolicy"),
    ("Layout (`rulec fmt`)", "layout-rulec-fmt"),
    ("JMESPath functions (`runtime/functions.py`)", "jmespath-functions-runtimefunctionspy"),
    ("The transport (`runtime/controller/kube.py`)", "the-transport-runtimecontrollerkubepy"),
    ("a [link](x.md) and snake_case", "a-link-and-snake_case"),
])
def test_anchors_are_named_as_github_names_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n## Same\n## Same\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("# Page\nSee [a](other.md#same-1), [b](#page), [c](other.md#nope),\n"
                    "[d](missing.md), [e](https://example.com/x), `[f](ignored.md)`,\n"
                    "[g](#nowhere), <a id=\"here\"></a>[h](#here), [k](.).\n"
                    "```\n[i](in-a-block.md)\n```\n[j]: gone.md\n", encoding="utf-8")
    assert broken(page) == ["other.md#nope: no heading #nope in other.md",
                            "missing.md: no such file", "#nowhere: no heading #nowhere in page.md",
                            "gone.md: no such file"]
