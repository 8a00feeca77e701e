"""The critical path follows resource references wherever they sit in a resource's inputs (its own walk,
``infra/critical_path._references``, instead of a generator per level): deep in maps and lists, and
only strings that are references."""

from __future__ import annotations

import dataclasses

from infra import critical_path


def test_a_reference_deep_in_the_inputs_orders_the_chain(prod_plan):
    records = prod_plan.records  # (changed below in copies: dataclasses.replace)
    fs = next(r for r in records if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem")
    cluster = next(r for r in records if r.type == "eks:index:Cluster")
    assert fs.name not in [s.name for s in critical_path.estimate(records).chain]  # (beside the cluster)
    reference = f"resource:{cluster.type}::{cluster.name}"
    for inputs in (
        {**fs.inputs, "x": {"y": [1, None, {"z": [reference]}]}},
        {**fs.inputs, "x": [[reference]]},
    ):
        changed = [dataclasses.replace(r, inputs=inputs) if r is fs else r for r in records]
        chain = [s.name for s in critical_path.estimate(changed).chain]
        assert chain.index(cluster.name) < chain.index(fs.name), chain
    not_one = {**fs.inputs, "x": {f"resource:{cluster.type}::{cluster.name}": "a key", "y": f" {reference}"}}
    changed = [dataclasses.replace(r, inputs=not_one) if r is fs else r for r in records]
    assert fs.name not in [s.name for s in critical_path.estimate(changed).chain]
