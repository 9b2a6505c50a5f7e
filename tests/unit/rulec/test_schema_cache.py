"""The on-disk cache of indexed CRD files: used when it holds the file, never a cause of errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rulec import schema

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
        description: A thing.
        properties:
          status:
            type: object
            description: What the thing is doing.
            properties:
              phase: {type: string, enum: [Running, Done], description: The phase.}
              count: {type: integer, format: int32}
  - name: v2
"""
API = "example.com/v1"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RULEC_NO_CACHE", raising=False)
    return tmp_path / "xdg" / "jobrules" / "crd-index"


@pytest.fixture
def crd(tmp_path: Path) -> Path:
    path = tmp_path / "things.yaml"
    path.write_text(CRD)
    return path


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json")) if cache.is_dir() else []


def parses(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Record the files `load` parses (rather than takes from the cache)."""
    seen: list[bytes] = []
    real = schema._index_file

    def spy(data: bytes) -> schema._Indexed:
        seen.append(data)
        return real(data)

    monkeypatch.setattr(schema, "_index_file", spy)
    return seen


def load(*paths: Path) -> tuple[schema.SchemaIndex, list[str]]:
    return schema.SchemaIndex.load(paths)


def test_second_load_is_a_hit_with_the_same_result(
    cache: Path, crd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = parses(monkeypatch)
    first = load(crd)
    assert len(seen) == 1 and len(entries(cache)) == 1
    second = load(crd)
    assert len(seen) == 1  # not parsed again
    assert second[0].schemas == first[0].schemas and second[1] == first[1]
    assert second[1] == [f"{crd}: Thing.example.com/v2: no openAPIV3Schema"]
    assert second[0].check_path(API, "Thing", ("status", "phas")) == schema.PathProblem(
        1, "phas", ("count", "phase"), "phase")


def test_entries_are_pruned_json_named_by_content(cache: Path, crd: Path, tmp_path: Path) -> None:
    load(crd)
    [entry] = entries(cache)
    data = json.loads(entry.read_text())
    assert data["problems"] == ["Thing.example.com/v2: no openAPIV3Schema"]
    [[group, version, kind, tree]] = data["entries"]
    assert (group, version, kind) == ("example.com", "v1", "Thing")
    assert "description" not in json.dumps(tree) and "enum" not in json.dumps(tree)
    assert tree["properties"]["status"]["properties"]["count"] == {"type": "integer"}
    copy = tmp_path / "elsewhere.yaml"  # same bytes, another name: the same entry
    copy.write_bytes(crd.read_bytes())
    _, errors = load(copy)
    assert entries(cache) == [entry]
    assert errors == [f"{copy}: Thing.example.com/v2: no openAPIV3Schema"]
    assert not list(cache.glob(".tmp-*"))


def test_a_changed_file_misses(cache: Path, crd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = parses(monkeypatch)
    load(crd)
    crd.write_text(CRD.replace("phase:", "state:"))
    index, _ = load(crd)
    assert len(seen) == 2 and len(entries(cache)) == 2
    assert index.check_path(API, "Thing", ("status", "state")) is None
    assert index.check_path(API, "Thing", ("status", "phase")) is not None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{\"entries\": [",  # cut short
        b"\xff\xfe",
        b"[]",
        b"{\"entries\": [], \"problems\": [1]}",
        b"{\"entries\": [[\"example.com\", \"v1\", \"Thing\"]], \"problems\": []}",
        b"{\"entries\": [[\"example.com\", \"v1\", \"Thing\", []]], \"problems\": []}",
        b"{\"entries\": {}, \"problems\": []}",
    ],
)
def test_a_corrupt_entry_is_ignored_and_replaced(
    cache: Path, crd: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    expected = load(crd)
    [entry] = entries(cache)
    good = entry.read_bytes()
    entry.write_bytes(content)
    seen = parses(monkeypatch)
    index, errors = load(crd)
    assert len(seen) == 1
    assert index.schemas == expected[0].schemas and errors == expected[1]
    assert entry.read_bytes() == good


def test_an_unreadable_entry_is_ignored(cache: Path, crd: Path) -> None:
    expected = load(crd)
    [entry] = entries(cache)
    entry.unlink()
    entry.mkdir()  # reading it fails, and so does writing over it
    index, errors = load(crd)
    assert index.schemas == expected[0].schemas and errors == expected[1]


def test_an_unwritable_cache_is_no_error(
    tmp_path: Path, crd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.delenv("RULEC_NO_CACHE", raising=False)
    index, errors = load(crd)
    assert index.has_kind(API, "Thing")
    assert errors == [f"{crd}: Thing.example.com/v2: no openAPIV3Schema"]


def test_disabled_by_env(cache: Path, crd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULEC_NO_CACHE", "1")
    seen = parses(monkeypatch)
    load(crd)
    load(crd)
    assert len(seen) == 2 and not cache.exists()


def test_default_folder_is_under_home(
    tmp_path: Path, crd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("RULEC_NO_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    load(crd)
    assert len(entries(tmp_path / "home" / ".cache" / "jobrules" / "crd-index")) == 1


def test_files_in_error_are_not_cached(cache: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    _, errors = load(bad)
    assert "invalid YAML" in errors[0] and entries(cache) == []


def test_a_property_named_by_a_yaml_integer_is_its_string_and_kept(cache: Path,
                                                                   tmp_path: Path) -> None:
    """A property named by a YAML integer is the string the API server names it by, so the
    entry holds only what JSON holds: kept, and read back the same."""
    odd = tmp_path / "odd.yaml"
    odd.write_text(CRD.replace("count:", "1:"))
    first = load(odd)
    assert len(entries(cache)) == 1
    status = first[0].schemas[("example.com", "v1", "Thing")]["properties"]["status"]
    assert "1" in status["properties"] and 1 not in status["properties"]
    assert load(odd)[0].schemas == first[0].schemas


def test_files_without_crds_are_cached_with_their_problem(cache: Path, tmp_path: Path) -> None:
    plain = tmp_path / "ns.yaml"
    plain.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    assert load(plain)[1] == [f"{plain}: no CustomResourceDefinition found"]
    assert len(entries(cache)) == 1
    assert load(plain)[1] == [f"{plain}: no CustomResourceDefinition found"]
