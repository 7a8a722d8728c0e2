"""A value derived from a list of tensors, kept while the list holds the same tensor objects.

A training loop whose gradients are the same tensors every iteration (a captured network hands
each parameter its recording's own gradient) makes the step derive the same things from the
same tensors every iteration: which parameters have gradients, the gradients' kinds, the
padded stacks' layout, a recording's key. Each derivation walks every tensor in Python (a
YOLO26 model has 366 parameters); the profile of a YOLO26n iteration on the H100 host put those
walks at about 0.8 ms of its host time (WP-024). :class:`SameTensors` remembers the last list by
its objects' ids and derives again only when the list changes.

Ids alone are not identity: a freed tensor's id may be given to the next. So the remembered
tensors are watched through weak references (which keep nothing alive: a gradient dropped by
``zero_grad`` is freed as before), and the death of any of them forgets the value. Ids equal
and every remembered tensor alive is identity: two live objects never share an id.

What is derived must depend only on which objects the list holds and on what cannot change
while they live without a new object (a tensor's shape, strides and dtype do not change in a
training step; ``p.data = x``, which does change them under the same object, is why parameters'
storage keys are not derived through it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from torch import Tensor

T = TypeVar("T")


class _Watch:
    """One remembered list's liveness: cleared by the first of its tensors to be freed."""

    __slots__ = ("alive", "refs")

    def __init__(self, tensors: Sequence[Tensor | None]) -> None:
        self.alive = True
        # The references are kept so that their callbacks stay armed (a dropped weak reference
        # calls nothing); None entries (parameters without a gradient) cannot die.
        self.refs = [weakref.ref(t, self._died) for t in tensors if t is not None]

    def _died(self, _ref: weakref.ref[Tensor]) -> None:
        self.alive = False


class SameTensors(Generic[T]):
    """The value last derived from a list of tensors (None entries allowed), derived again only
    when the list holds other objects than last time."""

    __slots__ = ("_ids", "_value", "_watch")

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._value: T | None = None
        self._watch: _Watch | None = None

    def get(self, tensors: Sequence[Tensor | None], derive: Callable[[], T]) -> T:
        """``derive()``, or the value it gave for the same objects last time."""
        ids = list(map(id, tensors))
        watch = self._watch
        if watch is not None and watch.alive and ids == self._ids:
            return self._value  # type: ignore[return-value]  # set with the watch
        value = derive()
        self._ids, self._value, self._watch = ids, value, _Watch(tensors)
        return value
