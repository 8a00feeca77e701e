"""Start-up of one member of the stack's etcd StatefulSet: the init container runs this before etcd.

Members keep their data in an emptyDir, so a member whose pod is replaced (a node-group update drains
its node, node repair, a StatefulSet rolling update) comes back empty under the same name. Started as
`new` it would exit with "member ... has already been bootstrapped" and block the next drain. So this
script decides how the member starts and writes etcd's config file (``--config-file``):

- data on disk (the container restarted, the node rebooted): start as it is;
- no data, and a healthy peer answers: the member rejoins. It removes its stale entry (the same name or
  peer URL) through that peer, adds itself back (``member add``), and starts with
  ``initial-cluster-state: existing`` and the member list the peer returned; it then copies the data
  from the leader;
- no data and no healthy peer after ``--wait-for-peers`` seconds (the first start of the cluster, or a
  single member): start as ``new`` with the static member list.

Usage (the StatefulSet's init container; the etcd flags after ``--`` become the config file's keys):

    etcd_member.py --config-file PATH --peer-client-urls NAME=URL,... [--wait-for-peers S] -- --name=... --data-dir=... ...

Standard library only: it runs in a plain Python image (the etcd image has no shell since 3.5.7).
The etcd v3 JSON gateway (``/v3/cluster/member/*``) is etcd's own HTTP form of ``etcdctl member``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Optional

HTTP_TIMEOUT = 5.0


def log(message: str) -> None:
    print(f"etcd-member: {message}", file=sys.stderr, flush=True)


def parse_etcd_flags(flags: list[str]) -> dict[str, Any]:
    """``--key=value`` / ``--key`` flags as etcd config-file keys (etcd names both alike)."""
    config: dict[str, Any] = {}
    for flag in flags:
        if not flag.startswith("--"):
            raise SystemExit(f"etcd-member: expected an etcd flag --key[=value], got {flag!r}")
        key, sep, value = flag[2:].partition("=")
        if not sep:
            config[key] = True
        elif value in ("true", "false"):
            config[key] = value == "true"
        elif value.isdigit():
            config[key] = int(value)
        else:
            config[key] = value
    return config


def urls_map(text: str) -> dict[str, list[str]]:
    """``a=u1,a=u2,b=u3`` as {a: [u1, u2], b: [u3]} (etcd's --initial-cluster format)."""
    out: dict[str, list[str]] = {}
    for item in filter(None, text.split(",")):
        name, _, url = item.partition("=")
        out.setdefault(name, []).append(url)
    return out


def has_data(data_dir: str) -> bool:
    """Whether the member has data: etcd itself starts from its write-ahead log when one exists."""
    wal = os.path.join(data_dir, "member", "wal")
    return os.path.isdir(wal) and any(f.endswith(".wal") for f in os.listdir(wal))


def _open(request: urllib.request.Request) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # in-cluster: never a proxy
    with opener.open(request, timeout=HTTP_TIMEOUT) as resp:
        return json.loads(resp.read().decode() or "{}")


def call(client_url: str, path: str, body: dict[str, Any]) -> Any:
    """POST to etcd's v3 JSON gateway (``etcdctl member ...`` over HTTP)."""
    data = json.dumps(body).encode()
    return _open(urllib.request.Request(client_url.rstrip("/") + path, data=data, method="POST", headers={"Content-Type": "application/json"}))


def healthy(client_url: str) -> bool:
    """etcd's /health: true when that member is part of a cluster with a leader (a quorum)."""
    try:
        answer = _open(urllib.request.Request(client_url.rstrip("/") + "/health"))
    except (OSError, ValueError):
        return False
    return str(answer.get("health")) == "true"


def find_healthy_peer(client_urls: list[str], wait: float) -> Optional[str]:
    """The client URL of a healthy peer, trying for ``wait`` seconds (DNS of a new pod, a slow peer)."""
    deadline = time.monotonic() + wait
    while True:
        for url in client_urls:
            if healthy(url):
                return url
        if time.monotonic() >= deadline:
            return None
        time.sleep(2)


def rejoin(peer: str, name: str, peer_urls: list[str], static: dict[str, list[str]]) -> str:
    """Replace this member's stale entry through ``peer``; the ``initial-cluster`` to start with."""
    members = call(peer, "/v3/cluster/member/list", {}).get("members", [])
    for m in members:
        if m.get("name") == name or set(m.get("peerURLs", [])) & set(peer_urls):
            log(f"removing stale member {m.get('name') or '(not started)'} {m['ID']} {m.get('peerURLs')}")
            call(peer, "/v3/cluster/member/remove", {"ID": m["ID"]})
    added = call(peer, "/v3/cluster/member/add", {"peerURLs": peer_urls})
    new_id = added["member"]["ID"]
    log(f"added {name} as member {new_id}")
    by_url = {url: n for n, urls in static.items() for url in urls}
    parts = []
    for m in added.get("members", []):
        # A member that has not started yet has no name: take it from the static list by its URL.
        member_name = name if m["ID"] == new_id else (m.get("name") or by_url.get((m.get("peerURLs") or [""])[0], m["ID"]))
        parts += [f"{member_name}={url}" for url in m.get("peerURLs", [])]
    return ",".join(parts)


def member_config(args: argparse.Namespace) -> dict[str, Any]:
    config = parse_etcd_flags(args.etcd_flags)
    name, data_dir = str(config["name"]), str(config["data-dir"])
    if has_data(data_dir):
        log(f"{name} has data in {data_dir}: starting as it is")
        return config
    static = urls_map(str(config["initial-cluster"]))
    peer_urls = [u for u in str(config["initial-advertise-peer-urls"]).split(",") if u]
    others = [url for n, urls in urls_map(args.peer_client_urls).items() if n != name for url in urls]
    peer = find_healthy_peer(others, args.wait_for_peers) if others else None
    if peer is None:
        log(f"{name} has no data and no healthy peer: starting a new cluster ({', '.join(static)})")
        config["initial-cluster-state"] = "new"
        return config
    deadline = time.monotonic() + args.rejoin_timeout
    while True:
        try:
            config["initial-cluster"] = rejoin(peer, name, peer_urls, static)
            config["initial-cluster-state"] = "existing"
            log(f"{name} rejoins the cluster through {peer}: {config['initial-cluster']}")
            return config
        except (OSError, ValueError, KeyError) as err:
            # etcd refuses a change that would cost the quorum, or another member is changing too.
            if time.monotonic() >= deadline:
                raise SystemExit(f"etcd-member: {name} could not rejoin through {peer}: {err}") from err
            log(f"rejoin through {peer} failed ({err}); retrying")
            time.sleep(3)
            peer = find_healthy_peer(others, args.wait_for_peers) or peer


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-file", required=True, help="where to write etcd's config file")
    parser.add_argument("--peer-client-urls", required=True, help="NAME=CLIENT_URL,... of every member")
    parser.add_argument("--wait-for-peers", type=float, default=15.0, help="seconds to look for a healthy peer before starting a new cluster")
    parser.add_argument("--rejoin-timeout", type=float, default=120.0, help="seconds to retry the member change before giving up")
    parser.add_argument("etcd_flags", nargs="*", help="the etcd flags, after --")
    args = parser.parse_args(argv)
    config = member_config(args)
    os.makedirs(os.path.dirname(args.config_file) or ".", exist_ok=True)
    tmp = args.config_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)  # JSON is YAML: etcd reads it as its config file
    os.replace(tmp, args.config_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
