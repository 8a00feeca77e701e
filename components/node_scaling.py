"""How a node group's size is steered from outside EKS, for ``components/node_group.py``:

- the Auto Scaling group tags the Cluster Autoscaler builds a node of a group at zero nodes from
  (its labels, taints and extended resources), and the names of their ``aws.autoscaling.Tag``
  resources, never two alike;
- a capacity block's window at the program's ``now`` (``BlockPlan``): the group's starting size,
  the scheduled actions still to come, whether the program sets the desired size itself and whether
  changes EKS would apply by upgrading the group are held back; ``utc_now`` is the one clock.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from facts.catalog import CAPACITY_BLOCK_DRAIN

NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"


def autoscaler_template_tags(
    labels: dict[str, str], taints: list[dict[str, str]], resources: dict[str, str], discovery_tag: str
) -> dict[str, str]:
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
            candidates = [f"{part}-{digest[:n]}" for n in (8, 16, 64)] + [
                f"{part}-{digest}-{i}" for i in range(len(keys) + 1)
            ]
            part = next(c for c in candidates if c not in taken)
        taken.add(part)
        out[key] = part
    return out


def _config_order(
    tags: dict[str, str], labels: dict[str, str], taints: list[dict[str, str]], resources: dict[str, str]
) -> list[str]:
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


def utc_now() -> datetime.datetime:
    """The time the program (and preflight, and the offline plan) runs at: the one clock every
    capacity-block decision reads, so tests fix it here."""
    return datetime.datetime.now(datetime.UTC)


# How far ahead of the program's `now` a scheduled action must be to be registered, and how long
# before the scale-down the stack stops raising the group itself. Auto Scaling refuses a one-time
# action whose start time has passed when PutScheduledUpdateGroupAction is called, and that call
# comes after the program ran: on a first `up`, after the network, the cluster (about 10 minutes)
# and the node group (3-5) are created, about 17 minutes (infra/critical_path.py's table). A
# day-two `up` reaches it in a minute or two.
SCHEDULE_LEAD = datetime.timedelta(minutes=20)
SCHEDULE_LEAD_TEXT = "20 minutes"

# The node group inputs EKS applies by upgrading the group (UpdateNodegroupVersion: the Kubernetes
# version, the AMI release, the launch template's version, which carries the disk size, the user
# data and the instances' and volumes' tags) or by replacing it (a new group: new nodes). EKS
# upgrades a capacity-block group only at desired size 0, and either would take the nodes of the
# paid block away, so while its window is open they keep the values in the state (ignoreChanges;
# Pulumi has no wildcard for "every input", so they are named). Left to apply in the window: what
# UpdateNodegroupConfig changes with the group running (labels, taints, minSize/maxSize, the update
# and repair settings) and the group's own tags (TagResource).
HELD_BACK = (
    "amiType",
    "capacityType",
    "instanceTypes",
    "launchTemplate",
    "nodeRoleArn",
    "releaseVersion",
    "subnetIds",
    "version",
)
HELD_BACK_TEXT = (
    "the Kubernetes version, the launch template (disk size, user data, instance and volume tags), the AMI, the "
    "instance type, the subnet and the node role"
)

Phase = Literal["before", "open", "closing", "draining", "over"]


@dataclass(frozen=True)
class BlockPlan:
    """What the program does with a capacity block's group at ``now``.

    - ``before`` (more than SCHEDULE_LEAD before the start): the group is created at 0 and both
      scheduled actions are registered; Pulumi ignores its desired size (the actions set it).
    - ``open`` (from SCHEDULE_LEAD before the start to SCHEDULE_LEAD before the scale-down): the
      start action is not registered (it could be refused, or has run), and the program sets the
      desired size to ``size`` on every `up` (not ignored; `refresh: always` reads the running size,
      so an `up` sends UpdateNodegroupConfig only when the group is short). Before the start, EKS's
      documented behaviour applies: the launches fail until the block is active, then succeed.
    - ``closing`` (the last SCHEDULE_LEAD before the scale-down): the group is left as it is and
      the scale-down action stays registered (one already in the state is not called again), so an
      `up` whose call would land after the scale-down never raises the group again.
    - ``draining`` (from the scale-down to the end) and ``over`` (after it): no action; the program
      sets the desired size to 0 on every `up`, whatever ran before.
    From ``open`` to the end, ``held``: the inputs of ``HELD_BACK`` keep their state values."""

    start: datetime.datetime
    end: datetime.datetime
    size: int
    now: datetime.datetime

    @property
    def down(self) -> datetime.datetime:
        """When the group scales to zero: ``CAPACITY_BLOCK_DRAIN`` before the end."""
        return self.end - CAPACITY_BLOCK_DRAIN

    @property
    def phase(self) -> Phase:
        if self.now < self.start - SCHEDULE_LEAD:
            return "before"
        if self.now < self.down - SCHEDULE_LEAD:
            return "open"
        if self.now < self.down:
            return "closing"
        return "draining" if self.now < self.end else "over"

    @property
    def desired(self) -> int:
        """The desired size the program sends: on create, and on every `up` when ``steered``."""
        return self.size if self.phase == "open" else 0

    @property
    def steered(self) -> bool:
        """Whether the program's desired size is sent on every `up` (else Pulumi ignores it)."""
        return self.phase in ("open", "draining", "over")

    @property
    def held(self) -> bool:
        """Whether changes EKS would apply by upgrading or replacing the group are held back."""
        return self.phase in ("open", "closing", "draining")

    @property
    def actions(self) -> tuple[ScheduledSize, ...]:
        """The one-time actions registered: the start only while it is more than SCHEDULE_LEAD
        ahead; the scale-down while it is ahead (within SCHEDULE_LEAD only one already made
        stays quiet: a new one could be refused if its call came after it)."""
        out = []
        if self.phase == "before":
            out.append(ScheduledSize("block-start", self.start, self.size))
        if self.down > self.now:
            out.append(ScheduledSize("block-end", self.down, 0))
        return tuple(out)

    def ignored(self) -> list[str]:
        """The node group inputs Pulumi keeps from the state (``ignoreChanges``)."""
        return ([] if self.steered else ["scalingConfig.desiredSize"]) + (list(HELD_BACK) if self.held else [])


def capacity_block_plan(
    start: datetime.datetime, end: datetime.datetime, size: int, now: datetime.datetime | None = None
) -> BlockPlan:
    """The plan of a group of ``size`` nodes following the block ``start``..``end`` at ``now``
    (default: ``utc_now()``)."""
    return BlockPlan(start, end, size, now if now is not None else utc_now())


def utc_text(when: datetime.datetime) -> str:
    """``YYYY-MM-DD hh:mm UTC``, how the stack's messages give a time."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def held_back_text(plan: BlockPlan) -> str:
    """What an `up` does to the group while its window is open, in words (the preview's warning,
    preflight and the plan summary)."""
    steer = {
        "open": f"each `pulumi up` brings the group to {plan.size} nodes (maxSize) if it has fewer, until "
        f"{utc_text(plan.down - SCHEDULE_LEAD)}"
        + (" (launches fail until the block is active, then succeed)" if plan.now < plan.start else ""),
        "closing": f"the group is left at its size until its scale-down at {utc_text(plan.down)}",
        "draining": "each `pulumi up` brings the group to 0 if the scale-down has not",
    }[str(plan.phase)]
    opens = "opens" if plan.now < plan.start else "is open"
    return (
        f"its capacity block's window {opens} ({utc_text(plan.start)} to {utc_text(plan.end)}): {steer}; changes to "
        f"{HELD_BACK_TEXT} are held back until {utc_text(plan.end)} (EKS upgrades a capacity-block group only at "
        "desired size 0, and replacing it would end the block's nodes); the first `pulumi up` after that applies them"
    )


def _utc_text(when: datetime.datetime) -> str:
    """``YYYY-MM-DDThh:mm:ssZ``, the one format PutScheduledUpdateGroupAction takes."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
