"""How a node group's size is steered from outside EKS, for ``components/node_group.py``:

- the Auto Scaling group tags the Cluster Autoscaler builds a node of a group at zero nodes from
  (its labels, taints and extended resources), and the names of their ``aws.autoscaling.Tag``
  resources, never two alike;
- a capacity block's window as the group's starting size and the scheduled actions still to come.
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass
from typing import Sequence

from facts.catalog import CAPACITY_BLOCK_DRAIN

NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"


def autoscaler_template_tags(labels: dict[str, str], taints: list[dict[str, str]], resources: dict[str, str], discovery_tag: str) -> dict[str, str]:
    """The ASG tags the Cluster Autoscaler reads for a group at zero nodes: its node labels, taints
    ("value:Effect") and extended resources, plus the discovery tag. EKS does not copy node-group
    labels or tags to the ASG, so without these a pod that needs EFA or huge pages never triggers a
    scale-up from zero."""
    tags = {discovery_tag: "true"}
    tags.update({f"{NODE_TEMPLATE}/label/{k}": v for k, v in sorted(labels.items())})
    tags.update({f"{NODE_TEMPLATE}/taint/{t['key']}": f"{t.get('value', '')}:{t['effect']}" for t in taints})
    tags.update({f"{NODE_TEMPLATE}/resources/{k}": v for k, v in sorted(resources.items())})
    return tags


def _slug(key: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in key.removeprefix(NODE_TEMPLATE + "/")).strip("-")


def tag_resource_parts(keys: Sequence[str]) -> dict[str, str]:
    """The name part of each ASG tag resource (``<group>-asg-<part>``): one per key, never two alike.

    A key's part is its slug (every character but letters and digits made '-'), the name each tag
    has had in every stack so far. Slugs can collide: labels ``team.name`` and ``team-name`` (or
    ``team/name``) are two keys with one slug, and two resources of one name stop `pulumi up` on a
    duplicate URN. So the first key of ``keys`` with a slug keeps it, and each later key whose slug
    is taken gets the first hex digits of its sha256 appended: a key whose slug no other key shares
    keeps its name (no replacement in a stack that has it), and adding a colliding label after an
    existing one (``keys`` in the order the config lists them) leaves the existing tag's resource
    alone; a new name is only ever given to a key that had none."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for key in keys:
        part = _slug(key)
        if part in taken:
            digest = hashlib.sha256(key.encode()).hexdigest()
            candidates = [f"{part}-{digest[:n]}" for n in (8, 16, 64)] + [f"{part}-{digest}-{i}" for i in range(len(keys) + 1)]
            part = next(c for c in candidates if c not in taken)
        taken.add(part)
        out[key] = part
    return out


def _config_order(tags: dict[str, str], labels: dict[str, str], taints: list[dict[str, str]], resources: dict[str, str]) -> list[str]:
    """The keys of ``autoscaler_template_tags`` in the order the config lists their labels, taints
    and resources (that function sorts labels and resources: its order is the registration order)."""
    listed = [
        *(f"{NODE_TEMPLATE}/label/{k}" for k in labels),
        *(f"{NODE_TEMPLATE}/taint/{t['key']}" for t in taints),
        *(f"{NODE_TEMPLATE}/resources/{k}" for k in resources),
    ]
    first = [k for k in tags if k not in listed]
    return first + list(dict.fromkeys(k for k in listed if k in tags))


@dataclass(frozen=True)
class ScheduledSize:
    """One scheduled action of a capacity block's group: at ``at``, desired capacity ``size``."""

    suffix: str  # "block-start" or "block-end": the action's name after the node group's
    at: datetime.datetime
    size: int


def capacity_block_schedule(start: datetime.datetime, end: datetime.datetime, size: int, now: datetime.datetime) -> tuple[int, tuple[ScheduledSize, ...]]:
    """The desired size a capacity block's group is created with, and the scheduled actions that
    are still to come at ``now``: ``size`` nodes at the start, none ``CAPACITY_BLOCK_DRAIN`` before
    the end. An action whose time has passed is left out: EC2 Auto Scaling deletes a one-time
    action once it has run, and refuses to create one in the past. A group created inside the
    window starts at ``size``; outside it, at 0."""
    down = end - CAPACITY_BLOCK_DRAIN
    actions = []
    if start > now:
        actions.append(ScheduledSize("block-start", start, size))
    if down > now:
        actions.append(ScheduledSize("block-end", down, 0))
    return (size if start <= now < down else 0), tuple(actions)


def _utc_text(when: datetime.datetime) -> str:
    """``YYYY-MM-DDThh:mm:ssZ``, the one format PutScheduledUpdateGroupAction takes."""
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
