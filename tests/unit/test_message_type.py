"""hqueue.Message behaves as the named tuple it was, whichever type it is: the C codec's
``Message`` (one object per scanned message, its id made when first read) where the extension
is built, the named tuple in the pure-Python client. Every check runs on both."""

from __future__ import annotations

import collections.abc
import copy
import gc
import inspect
import pickle
import sys
import warnings
import weakref
from typing import Any

import pytest
from hqueue import Message, MessageID, _fastclient, codec  # type: ignore[attr-defined]
from hqueue.message import TUPLE_MESSAGE, _completed

from gateway.fast import encode_messages_reply

# the C type, given its Python-level part as hqueue.message gives it (HQUEUE_PUREPYTHON=1
# leaves hqueue.Message the named tuple, so it is completed here for the comparison)
C_MESSAGE = _completed(_fastclient.Message, TUPLE_MESSAGE)
TYPES = [C_MESSAGE, TUPLE_MESSAGE]
ID = MessageID(1_700_000_000_000, 7)


@pytest.fixture(params=TYPES, ids=["c", "named-tuple"])
def M(request: Any) -> Any:
    return request.param


def test_hqueue_message_is_the_c_type_where_it_is_built() -> None:
    assert Message is (C_MESSAGE if codec.NATIVE else TUPLE_MESSAGE)
    assert C_MESSAGE.__module__ == TUPLE_MESSAGE.__module__ == "hqueue.message"
    assert C_MESSAGE.__qualname__ == "Message"


def test_fields_by_name_index_and_unpacking(M: Any) -> None:
    m = M(b"t", b"v", 3, ID)
    assert (m.topic, m.value, m.partition, m.id) == (b"t", b"v", 3, ID)
    assert (m[0], m[1], m[2], m[3], m[-1], m[-4]) == (b"t", b"v", 3, ID, ID, b"t")
    assert m[1:3] == (b"v", 3) and m[::-1] == (ID, 3, b"v", b"t")
    topic, value, partition, mid = m
    assert (topic, value, partition, mid) == tuple(m) == (b"t", b"v", 3, ID)
    assert len(m) == 4 and list(m) == [b"t", b"v", 3, ID] and b"v" in m and 4 not in m
    assert m.index(3) == 2 and m.count(b"t") == 1
    assert (m.key, m.properties) == (None, None)
    with pytest.raises(IndexError):
        m[4]
    with pytest.raises(IndexError):
        m[-5]
    with pytest.raises(TypeError):
        m["topic"]


def test_a_sequence_as_a_tuple_is(M: Any) -> None:
    m = M(b"t", b"v", 3, ID)
    match m:
        case (topic, value, partition, mid):
            assert (topic, value, partition, mid) == (b"t", b"v", 3, ID)
        case _:
            pytest.fail("a Message matches a sequence pattern")
    assert isinstance(m, collections.abc.Sequence) and list(reversed(m)) == [ID, 3, b"v", b"t"]
    params = inspect.signature(M).parameters.values()
    assert [(p.name, p.default) for p in params] == [
        ("topic", inspect.Parameter.empty), ("value", inspect.Parameter.empty),
        ("partition", None), ("id", None),
    ]  # fmt: skip


def test_defaults_keywords_and_the_named_tuple_helpers(M: Any) -> None:
    assert tuple(M(b"t", b"v")) == (b"t", b"v", None, None)
    assert M(value=b"v", topic=b"t", id=ID) == (b"t", b"v", None, ID)
    m = M(b"t", b"v", 3, ID)
    assert M._fields == ("topic", "value", "partition", "id") == M.__match_args__
    assert M._field_defaults == {"partition": None, "id": None}
    assert M._make([b"a", b"b", 1, None]) == M(b"a", b"b", 1)
    with pytest.raises(TypeError, match="Expected 4 arguments, got 3"):
        M._make([b"a", b"b", 1])  # as a named tuple's: every field
    assert m._replace(value=b"w") == M(b"t", b"w", 3, ID) and type(m._replace()) is M
    assert m._asdict() == {"topic": b"t", "value": b"v", "partition": 3, "id": ID}
    with pytest.raises(ValueError, match="unexpected field names"):
        m._replace(nope=1)
    with pytest.raises(TypeError):
        M(b"t")
    with pytest.raises(TypeError):
        M(b"t", b"v", 1, ID, b"fifth")
    match m:
        case M(topic, value, partition=p):
            assert (topic, value, p) == (b"t", b"v", 3)
        case _:
            pytest.fail("a Message matches its class pattern")


def test_equality_order_and_hash_are_the_tuples(M: Any) -> None:
    m = M(b"t", b"v", 3, ID)
    as_tuple = (b"t", b"v", 3, (ID.timestamp, ID.sequence))
    assert m == as_tuple and as_tuple == m and not (m != as_tuple)  # noqa: SIM202
    assert hash(m) == hash(as_tuple) and hash(m) == hash(M(b"t", b"v", 3, ID))
    assert m != M(b"t", b"v", 3, MessageID(ID.timestamp, 8)) and m != (b"t",)
    assert m != "not a message" and m != None  # noqa: E711
    assert M(b"a", b"v") < m < M(b"u", b"v")
    assert sorted([m, M(b"a", b"")])[0] == (b"a", b"", None, None)
    assert {m: 1}[M(b"t", b"v", 3, ID)] == 1


def test_immutable_without_a_dict(M: Any) -> None:
    m = M(b"t", b"v")
    with pytest.raises(AttributeError):
        m.topic = b"other"
    with pytest.raises(AttributeError):
        m.note = 1
    assert not hasattr(m, "__dict__")


def test_repr_pickle_and_copy(M: Any) -> None:
    m = M(b"t", b"v", 3, ID)
    assert repr(m) == f"Message(topic=b't', value=b'v', partition=3, id={ID!r})"
    assert copy.copy(m) == m and copy.deepcopy(m) == m
    if M is not Message:
        return  # the other type is not hqueue.message.Message here: pickle cannot find it
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):  # 0 and 1 rebuild a tuple
        back = pickle.loads(pickle.dumps(m, protocol))
        assert back == m and type(back) is Message  # what hqueue.message.Message is here


def test_the_deprecated_tmessage_spelling_warns(M: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert M(b"t", b"v", 5).partitionID == 5
    assert [w.category for w in caught] == [DeprecationWarning]


def test_decoded_messages_make_their_id_once_and_compare_without_it() -> None:
    # the C decoder keeps the id as two integers until it is read, then keeps the MessageID
    data = encode_messages_reply(b"messageScannerGetList", 7, 0,
                                 [(ID.timestamp, i, b"t", b"v") for i in range(3)])  # fmt: skip
    _fastclient.setup(C_MESSAGE, MessageID, codec.InvalidArgument)
    try:
        _, (a, b, c) = _fastclient.decode_list_reply(data)
        _, (a2, _b2, _c2) = _fastclient.decode_list_reply(data)
    finally:
        codec.impl.setup(Message, MessageID, codec.InvalidArgument)
        _fastclient.setup(Message, MessageID, codec.InvalidArgument)
    assert type(a) is C_MESSAGE
    assert a == a2 and a != b and b != c and hash(a) == hash(a2)  # before any id is made
    assert a.id is a.id and a.id == MessageID(ID.timestamp, 0) and type(a.id) is MessageID
    assert c[3] == (ID.timestamp, 2) and a == a2  # one id made, the other not
    assert a == (b"t", b"v", 0, (ID.timestamp, 0))
    assert not gc.is_tracked(a) and not gc.is_tracked(a.id)


def test_built_around_anything_it_is_collected_in_a_cycle() -> None:
    # leaves only: nothing for the collector to follow; anything else is tracked, and a cycle
    # through it is freed
    assert not gc.is_tracked(C_MESSAGE(b"t", "s", 1, ID))

    class Box:
        pass

    box = Box()
    m = C_MESSAGE(b"t", b"v", 1, box)
    assert gc.is_tracked(m)
    box.m = m  # type: ignore[attr-defined]
    gone = weakref.ref(box)
    del box, m
    gc.collect()
    assert gone() is None


class SubOfC(C_MESSAGE):  # type: ignore[misc, valid-type]
    pass


class SubOfTuple(TUPLE_MESSAGE):  # type: ignore[misc, valid-type]
    pass


@pytest.mark.parametrize("Sub", [SubOfC, SubOfTuple], ids=["c", "named-tuple"])
def test_a_subclass_pickles_with_its_attributes(Sub: Any) -> None:
    s = Sub(b"t", b"v", 1, ID)
    s.note = b"kept"
    for back in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert type(back) is Sub and back == s and back.note == b"kept"


def test_messages_and_a_subclass_free_what_they_hold(M: Any) -> None:
    # the C Message's own dealloc (and the named tuple's) must drop what they hold, also for
    # instances of a subclass (the types' own counts: test_fastclient.py,
    # test_freeing_leaves_the_types_counts_as_they_were)
    value = b"w" * 1000
    value_before = sys.getrefcount(value)
    built = [M(b"t", value, 1, MessageID(7, i)) for i in range(500)]
    assert sys.getrefcount(value) == value_before + 500
    del built
    assert sys.getrefcount(value) == value_before

    class Sub(M):  # type: ignore[misc, valid-type]
        pass  # has a __dict__: freed by CPython's subtype_dealloc, then the base's

    subs = [Sub(b"t", value, 2, None) for _ in range(500)]
    for s in subs:
        s.note = value
    assert subs[0] == (b"t", value, 2, None) and subs[0].note is value
    sub_before = sys.getrefcount(Sub)
    assert sys.getrefcount(value) == value_before + 1000
    del subs, s
    assert sys.getrefcount(value) == value_before
    assert sys.getrefcount(Sub) == sub_before - 500
