"""musgd._identity: a value derived again only for other tensor objects, none kept alive."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import musgd._identity as identity
from musgd._identity import SameTensors


def test_the_same_objects_derive_once_and_other_objects_derive_again() -> None:
    calls: list[int] = []
    memo: SameTensors[int] = SameTensors()
    a, b = torch.zeros(2), torch.zeros(3)

    def derive() -> int:
        calls.append(1)
        return len(calls)

    assert memo.get([a, b], derive) == 1
    a.add_(1)  # new values in the same objects: the same objects
    assert memo.get([a, b], derive) == 1
    assert memo.get([a, None, b], derive) == 2  # a None entry is a different list
    assert memo.get([a, None, b], derive) == 2
    assert memo.get([b, None, a], derive) == 3  # order counts
    assert memo.get([b, None, a.clone()], derive) == 4
    assert memo.get([], derive) == 5
    assert memo.get([], derive) == 5


def test_the_remembered_tensors_are_not_kept_alive() -> None:
    memo: SameTensors[str] = SameTensors()
    grad = torch.zeros(1000)
    watched = weakref.ref(grad)
    memo.get([grad], lambda: "value")
    del grad
    gc.collect()
    assert watched() is None


def test_a_freed_tensors_id_given_to_another_derives_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids are reused after a free: the death of a remembered tensor forgets the value, so a new
    tensor that gets the dead one's id is not taken for it."""
    memo: SameTensors[tuple[int, ...]] = SameTensors()
    kept, freed = torch.zeros(2), torch.zeros(4)
    reused = id(freed)
    assert memo.get([kept, freed], lambda: (2, 4)) == (2, 4)
    del freed
    gc.collect()
    newcomer = torch.zeros(8)
    # Make the newcomer's id the freed tensor's, as the allocator may.
    real_id = id
    monkeypatch.setattr(
        identity, "id", lambda t: reused if t is newcomer else real_id(t), raising=False
    )
    assert memo.get([kept, newcomer], lambda: (2, 8)) == (2, 8)


def test_a_derivation_that_raises_remembers_nothing() -> None:
    memo: SameTensors[int] = SameTensors()
    a = torch.zeros(1)

    def fail() -> int:
        raise RuntimeError("bad gradient")

    with pytest.raises(RuntimeError, match="bad gradient"):
        memo.get([a], fail)
    assert memo.get([a], lambda: 7) == 7
