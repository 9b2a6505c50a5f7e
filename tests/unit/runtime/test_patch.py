"""runtime.patch: pointer escaping and an RFC 6902 applier that agrees with the jsonpatch library."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import patch


@pytest.mark.parametrize(("token", "escaped"), [
    ("plain", "plain"),
    ("sidecar.istio.io/inject", "sidecar.istio.io~1inject"),
    ("a~b", "a~0b"),
    ("~/", "~0~1"),
    ("~1", "~01"),
    ("/~", "~1~0"),
    ("", ""),
    (3, "3"),
])
def test_escape(token, escaped):
    assert patch.escape(token) == escaped


@pytest.mark.parametrize(("tokens", "pointer"), [
    ((), ""),
    (("metadata", "annotations", "a/b"), "/metadata/annotations/a~1b"),
    (("spec", "containers", 2, "env", "-"), "/spec/containers/2/env/-"),
    (("",), "/"),
])
def test_pointer(tokens, pointer):
    assert patch.pointer(*tokens) == pointer


@given(st.lists(st.text()))
def test_tokens_inverts_pointer(tokens):
    assert patch.tokens(patch.pointer(*tokens)) == tokens


@pytest.mark.parametrize("bad", ["a", "/a~", "/a~2", "/~x"])
def test_tokens_rejects_malformed_pointers(bad):
    with pytest.raises(patch.PatchError):
        patch.tokens(bad)


# Cases in the manner of RFC 6902 Appendix A: (document, patch, result).
APPLIES = [
    ({"foo": "bar"}, [patch.add("/baz", "qux")], {"foo": "bar", "baz": "qux"}),
    ({"foo": ["bar", "baz"]}, [patch.add("/foo/1", "qux")], {"foo": ["bar", "qux", "baz"]}),
    ({"foo": ["bar"]}, [patch.add("/foo/1", "qux")], {"foo": ["bar", "qux"]}),
    ({"foo": ["bar"]}, [patch.add("/foo/-", "qux")], {"foo": ["bar", "qux"]}),
    ({"foo": "bar", "baz": "qux"}, [patch.remove("/baz")], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [patch.remove("/foo/1")], {"foo": ["bar", "baz"]}),
    ({"foo": "bar", "baz": "qux"}, [patch.replace("/baz", "boo")], {"foo": "bar", "baz": "boo"}),
    ({"foo": {"bar": "baz"}}, [patch.add("/foo/child", {"g": "h"})],
     {"foo": {"bar": "baz", "child": {"g": "h"}}}),
    ({"foo": "bar"}, [patch.add("/foo", ["x"])], {"foo": ["x"]}),          # add replaces a member
    ({"a/b": 1, "m~n": 2}, [patch.test("/a~1b", 1), patch.test("/m~0n", 2)], {"a/b": 1, "m~n": 2}),
    ({"baz": "qux", "foo": ["a", 2, "c"]},
     [patch.test("/baz", "qux"), patch.test("/foo/1", 2)], {"baz": "qux", "foo": ["a", 2, "c"]}),
    ({"n": 1}, [patch.test("/n", 1.0)], {"n": 1}),                      # numbers compare by value
    ({"x": 1}, [patch.add("", {"y": 2})], {"y": 2}),                     # the root itself
    ({"": 1}, [patch.replace("/", 2)], {"": 2}),                        # the empty key
    ({"a": None}, [patch.add("/a", {})], {"a": {}}),
]


@pytest.mark.parametrize(("doc", "ops", "result"), APPLIES)
def test_apply(doc, ops, result):
    before = copy.deepcopy(doc)
    assert patch.apply(doc, ops) == result
    assert doc == before, "apply must not modify its input"
    assert jsonpatch.apply_patch(doc, ops) == result


FAILS = [
    ({"foo": "bar"}, [patch.add("/baz/bat", "qux")], "no member 'baz'"),
    ({"foo": "bar"}, [patch.remove("/baz")], "no member 'baz' to remove"),
    ({"foo": "bar"}, [patch.replace("/baz", 1)], "no member 'baz' to replace"),
    ({"foo": ["bar"]}, [patch.add("/foo/2", 1)], "out of range"),
    ({"foo": ["bar"]}, [patch.remove("/foo/1")], "out of range"),
    ({"foo": ["bar"]}, [patch.remove("/foo/-")], "not an array index"),
    ({"foo": ["bar", "baz"]}, [patch.add("/foo/01", 1)], "not an array index"),
    ({"foo": ["bar"]}, [patch.add("/foo/-1", 1)], "not an array index"),
    ({"foo": "bar"}, [patch.add("/foo/x", 1)], "not an object or array"),
    ({"baz": "qux"}, [patch.test("/baz", "bar")], "test failed"),
    ({"b": True}, [patch.test("/b", 1)], "test failed"),                 # true is not 1
    ({"b": 1}, [patch.test("/b", True)], "test failed"),
    ({"a": [1]}, [patch.test("/a", [1, 2])], "test failed"),
    ({"a": {}}, [patch.test("/a", {"k": None})], "test failed"),
    ({"a": 1}, [patch.test("/b", 1)], "no member 'b'"),
    ({"a": 1}, [{"op": "move", "from": "/a", "path": "/b"}], "unsupported op 'move'"),
    ({"a": 1}, [{"op": "add", "path": "/b"}], "needs a 'value'"),
    ({"a": 1}, [{"op": "remove", "path": 3}], "'path' must be a string"),
    ({"a": 1}, [patch.remove("")], "cannot remove the whole document"),
    ({"a": 1}, ["add"], "must be an object"),
]


@pytest.mark.parametrize(("doc", "ops", "message"), FAILS)
def test_apply_fails_exactly(doc, ops, message):
    with pytest.raises(patch.PatchError, match=message) as info:
        patch.apply(doc, ops)
    assert str(info.value).startswith("op 0 ")


def test_failure_names_the_op_number():
    with pytest.raises(patch.PatchError, match=r"^op 1 \(remove '/b'\): "):
        patch.apply({"a": 1}, [patch.remove("/a"), patch.remove("/b")])


def test_inserted_values_are_copies():
    value = {"k": []}
    result = patch.apply({}, [patch.add("/v", value)])
    result["v"]["k"].append(1)
    assert value == {"k": []}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, prefix + (i,))


@st.composite
def doc_and_ops(draw):
    doc = draw(st.dictionaries(st.text(max_size=3), json_values, max_size=4))
    existing = list(_paths(doc))
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        base = draw(st.sampled_from(existing))
        tail = draw(st.sampled_from([(), ("-",), ("new/~",), (0,), (1,)]))
        path = patch.pointer(*(base + tail))
        name = draw(st.sampled_from(["add", "replace", "remove"]))
        ops.append({"op": name, "path": path} if name == "remove"
                   else {"op": name, "path": path, "value": draw(json_values)})
    return doc, ops


@settings(max_examples=300)
@given(doc_and_ops())
def test_agrees_with_jsonpatch_and_modifies_nothing(case):
    doc, ops = case
    before, ops_before = copy.deepcopy(doc), copy.deepcopy(ops)
    try:
        expected = jsonpatch.apply_patch(doc, ops)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        with pytest.raises(patch.PatchError):
            patch.apply(doc, ops)
    else:
        assert patch.apply(doc, ops) == expected
    assert doc == before and ops == ops_before


# Ops that write into a container an earlier op reached, after something above or beside it
# moved or was replaced.
@pytest.mark.parametrize("doc, ops", [
    ({"a": [{"k": 0}, {"k": 1}]}, [patch.add("/a/0/x", 1), patch.add("/a/0", {"k": 9}),
                                   patch.add("/a/0/y", 2), patch.add("/a/1/z", 3)]),
    ({"a": [{"k": 0}, {"k": 1}]}, [patch.add("/a/1/x", 1), patch.remove("/a/0"),
                                   patch.add("/a/0/y", 2)]),
    ({"m": {"x": 0}}, [patch.add("/m/x", 1), patch.replace("/m", {"y": 2}), patch.add("/m/z", 3)]),
    ({"m": {"n": {}}}, [patch.add("/m/n/x", 1), patch.add("/m/n", {"w": 0}),
                        patch.add("/m/n/y", 2)]),
    ({"m": {"n": {}}}, [patch.add("/m/n/x", 1), patch.remove("/m"), patch.add("/m", {"n": []}),
                        patch.add("/m/n/-", 2)]),
    ({"l": [[0], [1]]}, [patch.add("/l/1/-", 5), patch.replace("/l/1", [7]), patch.add("/l/1/-", 8)]),
    ({"l": [1]}, [patch.add("/l/-", 2), patch.remove("/l/0"), patch.add("/l/-", 3)]),
    ({"r": {}}, [patch.add("/r/x", 1), patch.replace("", {"r": {"q": 0}}), patch.add("/r/y", 2)]),
    ({"m": {"n": {}}}, [patch.add("/m/n/x", 1), patch.remove("/m"), patch.add("/m/n/y", 2)]),
])
def test_containers_written_before_are_forgotten_when_they_move(doc, ops):
    try:
        expected = jsonpatch.apply_patch(doc, ops)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        with pytest.raises(patch.PatchError):
            patch.apply(doc, ops)
    else:
        assert patch.apply(doc, ops) == expected


# -- RFC 6902 `test` equality, case by case ---------------------------------------------------------

@pytest.mark.parametrize(("a", "b", "same"), [
    ("1", 1, False), (1, "1", False), ("a", "a", True), ("a", "b", False),
    (None, None, True), (None, 0, False), (0, None, False), (None, False, False),
    (True, True, True), (False, False, True), (True, False, False), (False, 0, False),
    (0, False, False), (1, True, False), (2, 2.0, True), (2.5, 2.5, True), (2, 3, False),
    ({"a": 1}, {"a": 1.0}, True), ({"a": 1}, {"b": 1}, False), ({"a": 1}, {"a": 2}, False),
    ({"a": 1}, {"a": 1, "b": 2}, False), ({}, [], False), ([], {}, False), ([], [], True),
    ([1, True], [1.0, True], True), ([True], [1], False), ([1], [1, 1], False), ([1, 2], [2, 1], False),
    ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}, True), ([1], 1, False), (1, [1], False),
])
def test_equal_is_json_equality(a, b, same):
    assert patch.equal(a, b) is same
    assert patch.equal(b, a) is same


@pytest.mark.parametrize("token", ["0", "1", "10"])
def test_array_indexes_that_read(token):
    assert patch.apply({"l": list(range(11))}, [patch.remove(f"/l/{token}")])["l"] == \
        [n for n in range(11) if n != int(token)]


@pytest.mark.parametrize("token", ["00", "+1", "1.0", "٣", "１", "", " 1"])
def test_array_indexes_that_do_not(token):
    with pytest.raises(patch.PatchError, match="not an array index"):
        patch.apply({"l": [0, 1, 2, 3]}, [patch.remove(f"/l/{token}")])


def test_a_test_op_reads_through_arrays_and_fails_on_scalars():
    doc = {"a": [{"b": 1}]}
    assert patch.apply(doc, [patch.test("/a/0/b", 1)]) == doc
    with pytest.raises(patch.PatchError, match="cannot descend into a int with 'c'"):
        patch.apply(doc, [patch.test("/a/0/b/c", 1)])
    with pytest.raises(patch.PatchError, match="out of range"):
        patch.apply(doc, [patch.test("/a/1", 1)])
    assert patch.apply(doc, [patch.test("", doc)]) == doc


def test_a_replace_at_an_index_replaces_and_an_add_at_the_end_appends():
    assert patch.apply({"l": [0, 1]}, [patch.replace("/l/1", 9)]) == {"l": [0, 9]}
    assert patch.apply({"l": [0, 1]}, [patch.add("/l/2", 9)]) == {"l": [0, 1, 9]}
    with pytest.raises(patch.PatchError, match="out of range"):
        patch.apply({"l": [0, 1]}, [patch.replace("/l/2", 9)])
    with pytest.raises(patch.PatchError, match="not an array index"):
        patch.apply({"l": [0, 1]}, [patch.replace("/l/-", 9)])


def test_a_failure_names_the_op_even_when_it_is_not_an_object():
    with pytest.raises(patch.PatchError, match=r"^op 0 \('add'\): an operation must be an object$"):
        patch.apply({}, ["add"])
    with pytest.raises(patch.PatchError, match=r"^op 0 \(move '/b'\): unsupported op 'move'$"):
        patch.apply({"a": 1}, [{"op": "move", "from": "/a", "path": "/b"}])


@pytest.mark.parametrize("name", ["replace", "test"])
def test_replace_and_test_need_a_value(name):
    with pytest.raises(patch.PatchError, match=f"'{name}' needs a 'value'"):
        patch.apply({"a": 1}, [{"op": name, "path": "/a"}])


def test_a_remove_needs_no_value_and_a_root_replace_is_the_value():
    assert patch.apply({"a": 1, "b": 2}, [{"op": "remove", "path": "/a"}]) == {"b": 2}
    assert patch.apply({"a": 1}, [patch.replace("", [1])]) == [1]


@pytest.mark.parametrize(("path", "parts"), [
    ("/a/b", ["a", "b"]), ("/a~1b/c~0d", ["a/b", "c~d"]), ("/~01", ["~1"]), ("/a//b", ["a", "", "b"]),
    ("/x~0", ["x~"]),
])
def test_tokens(path, parts):
    assert patch.tokens(path) == parts


@pytest.mark.parametrize("bad", ["/a~/b", "/~", "/a/b~"])
def test_a_tilde_before_a_slash_or_at_the_end_is_malformed(bad):
    with pytest.raises(patch.PatchError, match="invalid '~' escape"):
        patch.tokens(bad)
    with pytest.raises(patch.PatchError, match="does not start with '/'"):
        patch.tokens("a/b")


def test_a_path_that_is_not_a_string_is_said_so_exactly():
    with pytest.raises(patch.PatchError, match=r"^op 0 \(remove 3\): 'path' must be a string$"):
        patch.apply({"a": 1}, [{"op": "remove", "path": 3}])


@pytest.mark.parametrize(("doc", "op", "message"), [
    ({"a": 1}, patch.remove(""), "cannot remove the whole document"),
    ({"a": 1}, {"op": "add", "path": "/b"}, "'add' needs a 'value'"),
    ({"a": 1}, patch.test("/a", 2), "test failed: value differs"),
    ({"a": 1}, patch.replace("/b", 2), "no member 'b' to replace"),
    ({"a": 1}, patch.add("/a/b", 2), "parent of '/a/b' is not an object or array"),
    ({"l": [1]}, patch.remove("/l/x"), "'x' is not an array index"),
    ({"l": [1]}, patch.remove("/l/1"), "array index 1 out of range"),
    ({"a": 1}, patch.add("/b/c", 2), "no member 'b'"),
    ({"a": 1}, patch.test("/a/b", 2), "cannot descend into a int with 'b'"),
    ({"a": 1}, patch.add("a", 2), "pointer 'a' does not start with '/'"),
    ({"a": 1}, patch.add("/a~2", 2), "pointer '/a~2' has an invalid '~' escape"),
])
def test_each_failure_says_exactly_what(doc, op, message):
    with pytest.raises(patch.PatchError) as info:
        patch.apply(doc, [op])
    assert str(info.value).split("): ", 1)[1] == message
