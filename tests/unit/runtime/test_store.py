"""runtime.store: projected objects kept as bytes, ordered by resourceVersion, indexed, and a
relist that reports what disappeared."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime import store


def obj(name: str, rv: int, namespace: str = "ns", owner: str | None = None,
        **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": str(rv),
                            "labels": labels, "managedFields": [{"big": "x" * 100}]}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True}]
    return {"metadata": meta, "status": {"phase": "Running"}}


def cut(o: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in o["metadata"].items() if k != "managedFields"}
    return {**o, "metadata": meta}


def without_version(o: dict[str, Any]) -> dict[str, Any]:
    return {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "resourceVersion"}}


def make() -> store.Store:
    return store.Store(cut, without_version, {"owner": store.controller_uid,
                                              "label": store.label_values("app")})


def test_objects_are_kept_projected_and_read_back() -> None:
    s = make()
    change = s.put(obj("a", 1))
    assert change is not None and change.matters and change.old is None
    assert s.get(("ns", "a")) == cut(obj("a", 1))
    assert s.bytes == len(s._items[("ns", "a")].data) and len(s) == 1


def test_an_older_version_never_replaces_a_newer_one() -> None:
    s = make()
    s.put(obj("a", 5))
    assert s.put(obj("a", 4)) is None and s.rv(("ns", "a")) == 5
    assert s.put(obj("a", 5)) is None           # the same again: nothing changed
    assert s.put(obj("a", 6)) is None           # only the version moved: nothing to tell,
    assert s.rv(("ns", "a")) == 6 and s.get(("ns", "a")) == cut(obj("a", 6))   # but it moved
    later = obj("a", 7)
    later["status"]["phase"] = "Failed"
    assert s.put(later).matters                   # type: ignore[union-attr]


def test_a_version_held_is_that_version_whatever_else_comes_with_it() -> None:
    """The watch event echoing our own write comes after its answer was stored: same version,
    same object, not projected again."""
    s = make()
    s.put(obj("a", 5))
    echoed = obj("a", 5)
    echoed["status"] = None   # projected and stored, it would be news
    assert s.put(echoed) is None and s.get(("ns", "a")) == cut(obj("a", 5))
    unversioned = obj("b", 0)
    s.put(unversioned)
    unversioned = obj("b", 0)
    unversioned["status"]["phase"] = "Failed"
    change = s.put(unversioned)                 # no version: compared by content
    assert change is not None and change.matters


def test_indexes_follow_changes() -> None:
    s = make()
    s.put(obj("a", 1, owner="u1", app="x"))
    s.put(obj("b", 1, owner="u1", app="y"))
    assert [o["metadata"]["name"] for o in s.lookup("owner", "u1")] in (["a", "b"], ["b", "a"])
    assert s.lookup_keys("label", ("ns", "x")) == [("ns", "a")]
    s.put(obj("a", 2, owner="u2", app="y"))
    assert s.lookup_keys("owner", "u1") == [("ns", "b")]
    assert s.lookup_keys("label", ("ns", "y")) == [("ns", "a"), ("ns", "b")]
    s.delete(("ns", "b"))
    assert s.lookup_keys("owner", "u1") == [] and s.lookup_keys("label", ("ns", "y")) == [("ns", "a")]


def test_a_relist_reports_what_disappeared() -> None:
    s = make()
    for name in "abc":
        s.put(obj(name, 1))
    s.put(obj("z", 1, namespace="other"))
    changes = list(s.replace([obj("a", 1), obj("b", 2)], namespace="ns"))
    gone = [c.key for c in changes if c.obj is None]
    assert gone == [("ns", "c")]          # the other namespace is not this list's
    assert sorted(s.keys()) == [("ns", "a"), ("ns", "b"), ("other", "z")]
    assert [c.key for c in s.replace([])] == [("ns", "a"), ("ns", "b"), ("other", "z")]


def test_a_list_is_put_as_it_is_read_and_deletes_only_once_it_ends() -> None:
    s = make()
    s.put(obj("old", 1))

    def pages():
        yield obj("a", 1)
        assert s.get(("ns", "a")) is not None    # put before the next object is read
        yield obj("b", 2)
        raise RuntimeError("the list failed")

    with pytest.raises(RuntimeError):
        list(s.replace(pages(), namespace="ns"))
    assert sorted(s.keys()) == [("ns", "a"), ("ns", "b"), ("ns", "old")]   # nothing deleted


def test_concurrent_puts_keep_the_newest() -> None:
    s = make()

    def writer(start: int) -> None:
        for rv in range(start, 2000, 4):
            s.put(obj("a", rv))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.rv(("ns", "a")) == 1999


def test_resource_versions_compare_as_numbers() -> None:
    assert store.resource_version({"metadata": {"resourceVersion": "10"}}) > \
        store.resource_version({"metadata": {"resourceVersion": "9"}})
    assert store.resource_version({"metadata": {}}) == 0
    assert store.resource_version({"metadata": {"resourceVersion": "x"}}) == 0


def test_each_object_is_kept_deflated_and_read_back_whole() -> None:
    """The oracle is the projection itself: every object read back (get, lookup, the old object
    of a change) equals the projection of what was put, while the bytes kept are a fraction of
    its JSON."""
    import orjson

    s = make()
    put = [obj(f"p-{i}", i + 1, owner=f"job-{i % 3}", app=f"train-{i % 3}", index=str(i))
           for i in range(60)]
    for o in put:
        s.put(o)
    for o in put:
        assert s.get(("ns", o["metadata"]["name"])) == cut(o)
    for j in range(3):
        assert sorted(s.lookup("owner", f"job-{j}"), key=str) == \
            sorted((cut(o) for o in put if o["metadata"]["ownerReferences"][0]["uid"] == f"job-{j}"),
                   key=str)
    changed = obj("p-7", 100, owner="job-1", app="train-1", index="7")
    changed["status"]["phase"] = "Failed"
    change = s.put(changed)
    assert change is not None and change.old == cut(put[7]) and change.obj == cut(changed)
    gone = s.delete(("ns", "p-8"))
    assert gone is not None and gone.old == cut(put[8])
    json_bytes = sum(len(orjson.dumps(cut(o))) for o in put[1:])
    kept = sum(len(e.data) for k, e in s._items.items() if k != ("ns", "p-0"))
    assert kept * 3 < json_bytes, (kept, json_bytes)
    assert s.bytes == sum(len(e.data) for e in s._items.values())


def test_the_objects_of_one_owner_share_their_index_terms() -> None:
    s = make()
    for i in range(10):
        s.put(obj(f"p-{i}", i + 1, owner="job-uid", app="train"))
    terms = [s._items[("ns", f"p-{i}")].terms for i in range(10)]
    assert all(t[0] is terms[0][0] and t[1] is terms[0][1] for t in terms)
    for i in range(10):
        s.delete(("ns", f"p-{i}"))
    assert s._terms == {} and s._by == {}


def test_objects_read_again_are_inflated_once_and_never_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's pods are read at each of its reconciles: each is inflated once, until it changes
    (then the new version is read, never the one kept), is deleted, or falls out of the last
    KEEP_TEXTS read. Every read is a decoded object of the reader's own."""
    s = make()
    for name in "abc":
        s.put(obj(name, 1, owner="u"))
    s._texts.clear()   # as if read long ago
    inflated: list[bytes] = []
    real = s._text
    monkeypatch.setattr(s, "_text", lambda data: inflated.append(data) or real(data))

    def names() -> list[str]:
        return sorted(o["metadata"]["name"] for o in s.lookup("owner", "u"))

    assert names() == ["a", "b", "c"] and len(inflated) == 3
    assert names() == ["a", "b", "c"] and len(inflated) == 3       # kept
    first, again = s.lookup("owner", "u"), s.lookup("owner", "u")
    assert first == again and all(x is not y for x, y in zip(first, again))
    first[0]["status"]["phase"] = "Scribbled"   # a reader's own object: no other reader sees it
    assert s.lookup("owner", "u") == again
    assert s.get(("ns", "a")) == cut(obj("a", 1, owner="u")) and len(inflated) == 3
    changed = obj("b", 2, owner="u")
    changed["status"]["phase"] = "Failed"
    assert s.put(changed).old == cut(obj("b", 1, owner="u"))   # type: ignore[union-attr]
    assert {o["metadata"]["name"]: o["status"]["phase"] for o in s.lookup("owner", "u")} == {
        "a": "Running", "b": "Failed", "c": "Running"}
    assert len(inflated) == 4                     # only the new "b"
    moved = obj("b", 3, owner="u")
    moved["status"]["phase"] = "Failed"
    assert s.put(moved) is None                   # the version alone moved: the text is kept
    assert s.get(("ns", "b"))["metadata"]["resourceVersion"] == "3"   # type: ignore[index]
    assert len(inflated) == 4
    s.delete(("ns", "c"))
    assert names() == ["a", "b"] and len(inflated) == 4 and ("ns", "c") not in s._texts
    older = s._items[("ns", "a")]
    newer = obj("a", 4, owner="u")
    newer["status"]["phase"] = "Failed"
    s.put(newer)   # between a reader's look-up of "a" and its reading of the text
    assert s.get(("ns", "a"))["status"]["phase"] == "Failed"   # type: ignore[index]
    assert s._decode(older, s._held_text(("ns", "a"), older))["status"]["phase"] == "Running"
    inflated.clear()
    monkeypatch.setattr(store, "KEEP_TEXTS", 1)
    s.put(obj("d", 1, owner="u"))
    assert names() == ["a", "b", "d"]             # each inflated; only the last one kept
    before = len(inflated)
    assert names() == ["a", "b", "d"] and len(inflated) == before + 2   # only one kept
    monkeypatch.setattr(store, "KEEP_TEXTS", 2)
    s.get(("ns", "a")), s.get(("ns", "b")), s.get(("ns", "a"))   # "b" is now the least recent
    s.get(("ns", "d"))
    before = len(inflated)
    s.get(("ns", "a"))
    assert len(inflated) == before and ("ns", "b") not in s._texts
    s.put(obj("e", 1, owner="v"))
    s._texts.clear()
    s.lookup("owner", "v"), s.get(("ns", "a")), s.lookup("owner", "v")   # "a" the least recent
    s.get(("ns", "b"))
    assert list(s._texts) == [("ns", "e"), ("ns", "b")]
    changed = obj("a", 5, owner="u")
    changed["status"]["phase"] = "Pending"
    s.put(changed)   # "a", not kept, is inflated to compare: nothing kept is pushed out
    assert list(s._texts) == [("ns", "e"), ("ns", "b")]


def test_an_object_changed_while_it_was_inflated_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A put between a reader's look-up and the end of its inflating: the reader gets what it
    looked up, and the next reader the new version."""
    s = make()
    s.put(obj("a", 1, owner="u"))
    s._texts.clear()
    real = s._text
    newer = obj("a", 2, owner="u")
    newer["status"]["phase"] = "Failed"

    def inflate_while_it_changes(data: bytes) -> bytes:
        monkeypatch.setattr(s, "_text", real)
        s._texts.clear()   # so that the put inflates nothing itself
        s.put(newer)
        s._texts.clear()   # and the next reader finds nothing kept but what the first kept
        return real(data)

    monkeypatch.setattr(s, "_text", inflate_while_it_changes)
    assert [o["status"]["phase"] for o in s.lookup("owner", "u")] == ["Running"]
    assert [o["status"]["phase"] for o in s.lookup("owner", "u")] == ["Failed"]


def test_a_new_version_of_the_same_projection_moves_the_version_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Most events change what the projection drops (a finalizer, managed fields, a Job's
    `status.ready`): the entry's version moves, and every read gives the new one, without
    encoding the object again."""
    s = make()
    s.put(obj("a", 5, owner="u"))
    assert s.lookup("owner", "u")[0]["metadata"]["resourceVersion"] == "5"   # kept decoded
    encoded: list[bytes] = []
    real = s._encode
    monkeypatch.setattr(s, "_encode", lambda text: encoded.append(text) or real(text))
    later = obj("a", 6, owner="u")
    later["metadata"]["managedFields"] = [{"big": "y" * 100}]
    bytes_before = s.bytes
    assert s.put(later) is None and encoded == [] and s.bytes == bytes_before
    assert s.rv(("ns", "a")) == 6 and s.get(("ns", "a")) == cut(later)
    assert [o["metadata"]["resourceVersion"] for o in s.lookup("owner", "u")] == ["6"]
    assert s.put(obj("a", 6, owner="u")) is None       # that version is held
    changed = obj("a", 7, owner="u")
    changed["status"]["phase"] = "Failed"
    change = s.put(changed)
    assert change is not None and change.matters and len(encoded) == 1
    assert change.old == cut(later)                   # the change says what it was before
    assert s.get(("ns", "a")) == cut(changed)


def test_a_change_says_what_the_object_was_though_nothing_read_it() -> None:
    """The old object of a change comes from the entry held (no decoded copy kept): its
    version, its content."""
    s = make()
    first = obj("a", 5, owner="u")
    s.put(first)
    changed = obj("a", 7, owner="u")
    changed["status"]["phase"] = "Failed"
    change = s.put(changed)
    assert change is not None and change.old == cut(first) and change.obj == cut(changed)


def test_a_version_that_is_not_a_plain_number_is_kept_as_it_came() -> None:
    s = make()
    for name, rv in (("a", "007"), ("b", "x")):
        o = obj(name, 0)
        o["metadata"]["resourceVersion"] = rv
        s.put(o)
        assert s.get(("ns", name))["metadata"]["resourceVersion"] == rv   # type: ignore[index]


def test_an_object_larger_than_the_deflate_window_is_read_back_whole() -> None:
    s = make()
    s.put(obj("a", 1))
    big = obj("b", 2, **{f"k{i}": f"{i * 7919:x}" * 8 for i in range(3000)})
    assert len(str(big)) > 8 * (1 << store.WINDOW_BITS)
    s.put(big)
    assert s.get(("ns", "b")) == cut(big)


def test_a_dictionary_larger_than_the_deflate_window_reads_back_what_follows() -> None:
    """The first object put is the dictionary: the next, which repeats its start and its end,
    reads back whole although only its last window's worth can be referred to."""
    s = make()
    labels = {f"k{i}": f"{i * 7919:x}" * 8 for i in range(3000)}
    s.put(obj("first", 1, **labels))
    assert len(str(labels)) > 4 * (1 << store.WINDOW_BITS)
    after = obj("after", 2, **labels)
    s.put(after)
    assert s.get(("ns", "after")) == cut(after) and s.get(("ns", "first")) == cut(obj("first", 1, **labels))
