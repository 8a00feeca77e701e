"""One signal line of a running job's checks (facts/job_signals.py: the contract, read by the alarms' metric
filters). Standard library only; shipped in the job's guard ConfigMap next to ``job_signals.py`` (the contract
module itself, copied whole by jobs/resilience.py), so the pod and the repository format the same line.

    print(signal_line("slow_node", job="bert", namespace="ml", value=1.8, node="ip-10-0-1-2", reason="..."))
"""

from __future__ import annotations

import json
import sys

try:  # in the pod: the contract shipped beside this file
    import job_signals as contract  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # in the repository: the contract in its layer
    from facts import job_signals as contract  # type: ignore[no-redef,unused-ignore]


def signal_line(name: str, job: str, namespace: str, value: float, **fields: object) -> str:
    """The JSON line of signal ``name`` (one of the contract's SIGNALS) with its dimensions, value and extras."""
    if name not in contract.SIGNALS:
        raise ValueError(f"{name!r} is not a signal of facts/job_signals.py: {', '.join(contract.SIGNALS)}")
    record: dict[str, object] = {contract.SIGNAL_KEY: name, "job": job, "namespace": namespace, "value": value}
    for key, extra in fields.items():
        if extra is not None:
            record[key] = extra
    return json.dumps(record, sort_keys=False)


def emit(name: str, job: str, namespace: str, value: float, **fields: object) -> None:
    """Print the signal line on stdout (the container's log, where the metric filters read it), whole."""
    sys.stdout.write(signal_line(name, job, namespace, value, **fields) + "\n")
    sys.stdout.flush()
