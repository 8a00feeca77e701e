"""Whole-stack invariants: what must hold of a planned stack whatever features it combines.

Each feature of the stack has its own checks; these are the rules that only show when features meet
(queues with Capacity Blocks, teams with the admission policy, ProvisioningRequests with Kueue's
start-up). They read the plan as `pulumi up` would get it (the registered resources, their inputs
and dependencies) and the validated config, and each rule is one function returning what breaks it:

- ``quota_within_supply``: no flavor's quotas add up to more than its group's nodes can hold, the
  nodes counted from the plan's AWS side (autoscaled: ``maxSize``; a capacity block's scheduled size;
  else the desired size);
- ``jobs_admissible``: every queued job fits, whole, in what its ClusterQueue can ever hold;
- ``pods_fit_their_nodes``: every pod the stack emits for a node group fits one of its nodes:
  requests within what a node leaves for pods, node selector matched, taints tolerated (with the
  flavor's tolerations Kueue adds at admission);
- ``admission_checks_have_their_api``: a ProvisioningRequest check has the API, Kueue starts after
  it, and the autoscaler serves it for every flavor it runs on;
- ``team_namespaces_under_policy``: every team namespace is bound to a denying admission policy;
- ``created_after_what_they_need``: every custom object comes after the CRD (or Helm release) that
  defines its kind, every object after the namespace it lives in, every queued job after its
  LocalQueue and Kueue's webhooks.

``python -m infra plan`` runs them on every plan; the tests run them on every plan they make,
including a pairwise-covering set of feature combinations (tests/test_combinations.py).
"""

from infra.invariants.rules import RULES, check
from infra.invariants.view import CRD, RELEASE, StackView, Violation, selects, tolerates, view

__all__ = ["CRD", "RELEASE", "RULES", "StackView", "Violation", "check", "selects", "tolerates", "view"]
