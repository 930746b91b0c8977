"""Tensor uids are ints (issue #37, class 5): a str, a float (once truncated: 5.7 became uid 5) or a bool (True
became uid 1) is refused with a TypeError (cudnn_py's InvalidTypeError), as the official module's int64 parameters
refuse str and float; numpy integer scalars are ints (they have ``__index__``, which pybind11 takes too). A refused
``tensor(uid=...)`` leaves no tensor behind."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.errors import InvalidTypeError, InvalidValueError

WRONG_TYPES = ["5", b"5", 5.7, 5.0, True, False, np.float64(5.0), np.float32(5.0), np.bool_(True), None, [5], 1j]


def _graph():
    return cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT)


def _how(g, how, uid):
    if how == "tensor":
        return g.tensor(dim=[1, 4], uid=uid)
    if how == "detached":
        return cudnn.tensor(dim=[1, 4], uid=uid)
    t = g.tensor(dim=[1, 4])
    if how == "set_uid":
        return t.set_uid(uid)
    t.uid = uid
    return t


@pytest.mark.parametrize("how", ["tensor", "detached", "set_uid", "attribute"])
@pytest.mark.parametrize("uid", WRONG_TYPES, ids=repr)
def test_a_uid_that_is_not_an_int_is_a_type_error(how, uid):
    if uid is None and how in ("tensor", "detached"):
        pytest.skip("tensor(uid=None) is the default: an automatic uid")
    g = _graph()
    before = len(g._tensors)
    with pytest.raises(InvalidTypeError, match="uid needs an int") as e:
        _how(g, how, uid)
    assert isinstance(e.value, TypeError)
    assert len(g._tensors) == before + (how in ("set_uid", "attribute"))  # tensor(uid=...) left nothing behind
    assert all(t.uid != 5 and t.uid != 1 or not t.uid_assigned for t in g._tensors)


@pytest.mark.parametrize("how", ["tensor", "detached", "set_uid", "attribute"])
@pytest.mark.parametrize("uid", [5, np.int64(5), np.int32(5), np.uint8(5)], ids=repr)
def test_int_uids_numpy_ints_included_are_taken(how, uid):
    t = _how(_graph(), how, uid)
    assert t.get_uid() == 5 and type(t.get_uid()) is int and t.uid_assigned


@pytest.mark.parametrize("uid", [-2, 2**63])
def test_a_uid_out_of_range_is_a_value_error(uid):
    with pytest.raises(InvalidValueError, match="uid needs an int in"):
        _graph().tensor(dim=[1], uid=uid)


def test_minus_one_is_an_automatic_uid_and_a_taken_uid_leaves_no_tensor():
    g = _graph()
    a = g.tensor(dim=[1], uid=-1)
    assert not a.uid_assigned and a.uid >= 1
    g.tensor(dim=[1], uid=42, name="first")
    n = len(g._tensors)
    with pytest.raises(InvalidValueError, match="uid 42 is already assigned to tensor 'first'"):
        g.tensor(dim=[1], uid=42, name="second")
    assert len(g._tensors) == n and "second" not in g.tensors


@pytest.mark.parametrize("uid", [True, 7.0, "7"], ids=repr)
def test_query_tensor_attributes_of_uid_takes_ints_only(uid):
    g = _graph()
    g.tensor(dim=[1], uid=7)
    g.tensor(dim=[1], uid=1)
    assert g.query_tensor_attributes_of_uid(7).uid == 7 and g.query_tensor_attributes_of_uid(np.int64(7)).uid == 7
    with pytest.raises(InvalidTypeError):
        g.query_tensor_attributes_of_uid(uid)


def test_a_detached_tensor_keeps_the_uid_it_was_made_with():
    """``cudnn.tensor(uid=5)`` joined a graph with an automatic uid (silently: execute keyed by 5 then missed)."""
    t = cudnn.tensor(dim=[1, 4], stride=[4, 1], uid=5, data_type=cudnn.data_type.FLOAT)
    g = _graph()
    g.relu(t)
    assert t.uid == 5 and t.uid_assigned and g.query_tensor_attributes_of_uid(5).dim == [1, 4]
