"""The controller's cache of one watched resource: projected objects kept as compact bytes.

Each watch (a kind's jobs, or the pods under one label key) fills one Store. Objects are cut to
their projection (runtime.projection) and kept as JSON bytes, so memory grows with what the plan
reads rather than with object size, and the cyclic garbage collector has nothing to walk.
Readers decode the few objects a reconcile needs, each reader its own. The last `KEEP_TEXTS`
objects read stay inflated (their JSON text): a job's pods are read again at each of
its reconciles (every change of any of its pods), and inflating is a call into zlib that lets
go of the GIL, which costs a hand-off between threads whenever another one is runnable (with 4
workers reading pods, inflating cost 4 times the CPU per pod; decoding, which holds the GIL,
the same: bench/RESULTS.md, "Scale curve"). Texts rather than decoded objects, because a
decoded pod takes about four times the memory of its text.

The bytes are deflated with a preset dictionary, the first object the store projected: the
objects of one watch share their field names, label keys and most values, so a pod's 1.2 KB of
JSON keeps about a tenth of that, for some 10 us more on a put and 1.5 us on a read
(bench/RESULTS.md, "Scale curve"). The index terms an object is listed under are shared with
the index itself, so the pods of one job hold one copy of their owner's uid between them.

Writes are ordered by resourceVersion: an older version never replaces a newer one, so the
response to our own PATCH (written through at once) is not undone by the watch event that
follows it. The version is kept beside the bytes, not in them, and put back on reading: a new
version whose projection is unchanged (a pod's finalizer removed, a Job's `status.ready` or
managed fields written: most events a cache sees) moves the entry's version and nothing else,
for a projection and one comparison, without encoding, digesting or indexing it again. A
relist replaces the whole set and reports what disappeared, so a deletion missed while the
watch was down is still seen.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

Key = tuple[str, str]   # (namespace, name); namespace "" for cluster-scoped objects
IndexFn = Callable[[Mapping[str, Any]], Iterable[Any]]
KEEP_TEXTS = 16384   # objects a store keeps inflated (a projected pod: 0.6 to 1 KB of JSON)
# Deflate's window and memory level for an object: an 8 KiB window and a 4,096-entry hash
# rather than zlib's largest (32 KiB, 65,536 entries) gave the same bytes for the bench's jobs
# and pods, whole (4 to 5 KB) or projected (1.1 to 1.3 KB), and each put no longer allocates
# 384 KiB and clears 128 KiB of it (zlib and that clearing were a fifth of the controller's
# instructions per pod failure under callgrind, which counts each byte cleared as one).
WINDOW_BITS, MEM_LEVEL = 13, 5


@dataclass(frozen=True, slots=True)
class Entry:
    rv: int
    data: bytes          # the projected object, JSON deflated with the store's dictionary
    digest: int          # of the parts that matter to a reconcile (see Store)
    terms: tuple[tuple[str, Any], ...]   # (index name, value) pairs it is listed under
    bare: bool = False   # `data` is without metadata.resourceVersion: reading puts `rv` back


@dataclass(frozen=True, slots=True)
class Change:
    """What a put or delete did: whether the object is new, changed in a way that matters, or
    gone, and the object itself (decoded) for the event handlers."""

    key: Key
    obj: Mapping[str, Any] | None
    old: Mapping[str, Any] | None
    matters: bool


def resource_version(obj: Mapping[str, Any]) -> int:
    """An object's resourceVersion as a number (Kubernetes compares them as integers)."""
    meta = obj.get("metadata")
    raw = meta.get("resourceVersion") if isinstance(meta, dict) else None
    try:
        return int(raw) if raw is not None else 0
    except (TypeError, ValueError):
        return 0


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Store:
    """Projected objects of one resource, by (namespace, name), with secondary indexes.

    `project` cuts an object down; `significant` cuts it further to what should wake a
    reconcile (a job without our own annotations and condition), whose digest tells a change
    worth handling from one we caused. `indexes` name functions giving the values an object is
    listed under (e.g. its controller owner's uid).
    """

    def __init__(self, project: Callable[[Any], Any],
                 significant: Callable[[Any], Any] | None = None,
                 indexes: Mapping[str, IndexFn] | None = None) -> None:
        self._project = project
        self._significant = significant
        self._indexes = dict(indexes or {})
        self._items: dict[Key, Entry] = {}
        self._by: dict[tuple[str, Any], set[Key]] = {}
        self._terms: dict[tuple[str, Any], tuple[str, Any]] = {}   # each term, shared
        self._lock = threading.Lock()
        self._dictionary: bytes | None = None
        # a compressor that has read the dictionary: each put copies it (a few memcpys, where
        # setting the dictionary again hashed each of its bytes: bench/RESULTS.md, Controller)
        self._deflate: Any = None
        # key -> its entry's JSON text, least recently used first: every put and delete
        # replaces or drops it, under the lock, so a text here is always the entry's
        self._texts: OrderedDict[Key, bytes] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Key) -> dict[str, Any] | None:
        entry = self._items.get(key)
        return None if entry is None else self._decode(entry, self._held_text(key, entry))

    def rv(self, key: Key) -> int | None:
        entry = self._items.get(key)
        return None if entry is None else entry.rv

    def keys(self) -> list[Key]:
        with self._lock:
            return list(self._items)

    def lookup(self, index: str, value: Any) -> list[dict[str, Any]]:
        """The objects listed under `value` in `index`, decoded."""
        found: list[tuple[Key, Entry, bytes | None]] = []   # the text, when kept
        with self._lock:
            for key in self._by.get((index, value), ()):
                text = self._texts.get(key)
                if text is not None:
                    self._texts.move_to_end(key)
                found.append((key, self._items[key], text))
        texts = [held if held is not None else _exact(self._text(entry.data))
                 for _, entry, held in found]
        missed = [(key, entry, text) for (key, entry, held), text in zip(found, texts)
                  if held is None]
        if missed:
            with self._lock:
                for key, entry, text in missed:
                    self._keep(key, entry, text)
        return [self._decode(entry, text) for (_, entry, _), text in zip(found, texts)]

    def _held_text(self, key: Key, entry: Entry, keep: bool = True) -> bytes:
        """The entry's JSON text: kept from an earlier read, else inflated (and kept, if
        `keep`)."""
        with self._lock:
            held = self._texts.get(key) if self._items.get(key) is entry else None
            if held is not None:
                self._texts.move_to_end(key)
                return held
        text = self._text(entry.data)
        if keep:
            text = _exact(text)
            with self._lock:
                self._keep(key, entry, text)
        return text

    def _keep(self, key: Key, entry: Entry, text: bytes) -> None:
        """Keep `text` as the key's if `entry` is still its entry (a put may have come while
        it was inflated); the least recently used go beyond KEEP_TEXTS. Called with the lock
        held."""
        if self._items.get(key) is entry:
            self._texts[key] = text
            self._texts.move_to_end(key)
            while len(self._texts) > KEEP_TEXTS:
                self._texts.popitem(last=False)

    def lookup_keys(self, index: str, value: Any) -> list[Key]:
        with self._lock:
            return sorted(self._by.get((index, value), ()))

    def put(self, obj: Mapping[str, Any]) -> Change | None:
        """Store an object (whole, as the API server sent it); None when it is not newer than
        what is stored or nothing stored but its version changed.

        A version already held is not projected again: the watch event that echoes our own
        write (its answer was put first) costs a look-up, not a projection. Kubernetes gives
        every change a new resourceVersion, so one version is one content; objects without a
        version (0) are compared by content."""
        key = key_of(obj)
        rv = resource_version(obj)
        held = self._items.get(key)
        if held is not None and (rv < held.rv or rv == held.rv > 0):
            return None
        projected = self._project(obj)
        bare = _unversioned(projected, rv)
        text = orjson.dumps(bare if bare is not None else projected)
        # the held text, inflated once: compared here, and parsed below as the change's `old`
        held_text = self._held_text(key, held, keep=False) \
            if held is not None and held.bare == (bare is not None) else None
        if held is not None and held_text == text:
            with self._lock:   # only the version moved (unless another put came meanwhile)
                if self._items.get(key) is held:
                    # the same text, whether kept or not: the version is kept apart
                    self._items[key] = Entry(rv, held.data, held.digest, held.terms, held.bare)
                    return None
        significant = self._significant
        digest = hash(orjson.dumps(significant(bare if bare is not None else projected))
                      if significant else text)
        data = self._encode(text)
        found = tuple((name, value) for name, fn in self._indexes.items()
                      for value in fn(projected))
        with self._lock:
            old = self._items.get(key)
            if old is not None and (rv < old.rv or (rv == old.rv and old.data == data)):
                return None
            self._unindex(key, old)
            terms = tuple(self._terms.setdefault(term, term) for term in found)
            self._items[key] = Entry(rv, data, digest, terms, bare is not None)
            self._texts.pop(key, None)
            for term in terms:
                self._by.setdefault(term, set()).add(key)
            self.bytes += len(data) - (len(old.data) if old else 0)
        previous = None if old is None else self._decode(old, held_text if old is held else None)
        return Change(key, projected, previous, old is None or old.digest != digest)

    def delete(self, key: Key) -> Change | None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is None:
                return None
            self._unindex(key, old)
            kept = self._texts.pop(key, None)
            self.bytes -= len(old.data)
        previous = self._decode(old, kept)
        return Change(key, None, previous, True)

    def replace(self, objs: Iterable[Mapping[str, Any]],
                namespace: str | None = None) -> Iterator[Change]:
        """The whole set (of one namespace, when given) after a (re)list: what changed, as each
        object is put, then a deletion for every object that is no longer there. Lazy, so a
        list read page by page is projected page by page: the whole list is never held
        decoded (10,000 pods decoded at once are about 100 MB, which the heap keeps). Nothing
        is deleted unless `objs` runs to its end."""
        seen: set[Key] = set()
        for obj in objs:
            change = self.put(obj)
            seen.add(key_of(obj) if change is None else change.key)
            if change is not None:
                yield change
        for key in self.keys():
            if key not in seen and (namespace is None or key[0] == namespace):
                gone = self.delete(key)
                if gone is not None:
                    yield gone

    def _encode(self, text: bytes) -> bytes:
        """`text` deflated with the store's dictionary (the first text encoded). Deflate is
        deterministic, so equal texts give equal bytes."""
        if self._deflate is None:
            with self._lock:
                if self._deflate is None:
                    self._dictionary = bytes(text)
                    self._deflate = zlib.compressobj(6, zlib.DEFLATED, -WINDOW_BITS, MEM_LEVEL,
                                                     zlib.Z_DEFAULT_STRATEGY, self._dictionary)
        deflate = self._deflate.copy()
        return deflate.compress(text) + deflate.flush()

    def _text(self, data: bytes) -> bytes:
        """The JSON text `data` was encoded from.

        One call into zlib: `data` is a whole stream, so `decompress` returns all of it and a
        `flush` would add nothing. Each call lets go of the GIL, and with other threads
        runnable (the workers reading a 400-pod job's pods) taking it back costs a hand-off:
        4 threads inflating a pod each spend 4 times the CPU one does."""
        assert self._dictionary is not None    # set by the first put, before any entry
        return zlib.decompressobj(-WINDOW_BITS, self._dictionary).decompress(data)

    def _decode(self, entry: Entry, text: bytes | None = None) -> dict[str, Any]:
        """The entry's object (`text`: its JSON text, when already inflated)."""
        decoded: dict[str, Any] = orjson.loads(self._text(entry.data) if text is None else text)
        if entry.bare:
            decoded["metadata"]["resourceVersion"] = str(entry.rv)
        return decoded

    def _unindex(self, key: Key, entry: Entry | None) -> None:
        if entry is None:
            return
        for term in entry.terms:
            keys = self._by.get(term)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by[term]
                    del self._terms[term]


def _exact(text: bytes) -> bytes:
    """`text` in a buffer of its own size: orjson's and zlib's outputs keep a larger one, and
    texts held that way took 2.4 times their size in RSS."""
    return bytes(memoryview(text))


def _unversioned(projected: Any, rv: int) -> dict[str, Any] | None:
    """The projected object without its resourceVersion, where that reads back from `rv` (the
    entry keeps it); None where it would not (no version, or one that is not a plain number)."""
    meta = projected.get("metadata") if isinstance(projected, dict) else None
    if rv <= 0 or not isinstance(meta, dict) or meta.get("resourceVersion") != str(rv):
        return None
    return {**projected, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}


def controller_uid(obj: Mapping[str, Any]) -> list[str]:
    """The uid of the object's controlling owner, if it has one (an index function)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return []
    return [r["uid"] for r in refs if isinstance(r, dict) and r.get("controller") is True
            and isinstance(r.get("uid"), str)]


def owner_uids(obj: Mapping[str, Any]) -> list[str]:
    """The uids of all the object's owners (`pods owned` is any owner reference)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return []
    return sorted({r["uid"] for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)})


def label_values(key: str) -> IndexFn:
    """An index function: (namespace, the value of label `key`), for objects that have it."""
    def values(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        value = labels.get(key) if isinstance(labels, dict) else None
        return [(key_of(obj)[0], value)] if isinstance(value, str) else []
    return values
