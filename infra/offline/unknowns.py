"""The SDK's test for unknown values, without its garbage (``unknowns_walked_flat``).

The SDK asks ``rpc.contains_unknowns(value)`` of every output's value as the output settles, thousands of
times a plan, and some values are whole CRD schemas. Its implementation defines a recursive closure per
call; each call leaves a cycle behind (the function, its cell, its annotations with a fresh ``set[int]``),
about half of the cyclic garbage of a plan, which the collector must find. ``contains_unknowns`` here
gives the same answer by a flat walk; while the offline engine runs it stands in for the SDK's.

The answer, as the SDK's (pulumi/runtime/rpc.py): whether an ``Unknown`` is reached from the value through
dicts (their subclasses included, read by their own ``__iter__`` and ``__getitem__``, as the SDK reads them)
and lists, each object walked once. Tuples, sets and other objects are not looked into.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pulumi.output import Unknown
from pulumi.runtime import rpc


def _items(value: dict[Any, Any] | list[Any]) -> Any:
    if type(value) is dict:
        return value.values()
    if isinstance(value, dict):  # (an output type: its own keys and lookups; `.values` may be a property)
        return (value[key] for key in value)
    return value


def contains_unknowns(val: Any) -> bool:
    """Whether ``val`` holds an unknown, as the SDK's ``rpc.contains_unknowns`` answers (its parameter's name too)."""
    if isinstance(val, Unknown):
        return True
    if not isinstance(val, (dict, list)):
        return False
    seen = {id(val)}
    pending = [val]
    while pending:
        for item in _items(pending.pop()):
            if isinstance(item, Unknown):
                return True
            if isinstance(item, (dict, list)) and id(item) not in seen:
                seen.add(id(item))
                pending.append(item)
    return False


@contextmanager
def unknowns_walked_flat() -> Iterator[None]:
    """While inside, the SDK's ``rpc.contains_unknowns`` is ``contains_unknowns`` (the SDK's modules call it
    through ``rpc``)."""
    original = rpc.contains_unknowns
    rpc.contains_unknowns = contains_unknowns
    try:
        yield
    finally:
        rpc.contains_unknowns = original
