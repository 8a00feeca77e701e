"""What a changed path held before and holds after, as a reviewer reads it in the diff: ``old → new``.

Secrets never reach the comment: the offline plan already writes every Pulumi secret as ``[secret]``
(infra/offline/monitor.py), a value that still carries Pulumi's secret signature (the key
``4dabf18193072939515e22adb298388d``, pulumi/pulumi sdk/go/common/resource/sig/sig.go ``Secret``) is
masked here too, and so is every string under a key that names a secret (password, token, ...) and
everything under a Kubernetes Secret's ``data`` and ``stringData``. Long texts (user data, scripts,
YAML in a string) are summarised: their first line, how many lines, a short sha256, and the first line
that differs.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

MASK = "(secret)"
PLAN_SECRET = "[secret]"  # how the offline plan writes a secret (infra/offline/monitor.py)
SECRET_SIG = "4dabf18193072939515e22adb298388d"
ABSENT = object()

# A key that names a secret value; names *of* secrets (secretName, a key's id or ARN) are not.
_SECRET_KEY = re.compile(r"(?i)(password|passwd|passphrase|token|secret|credential|private_?key|api_?key)")
_SECRET_NAME = re.compile(r"(?i)(name|names|ref|arn|id|ids|path|namespace|expirationseconds|audience)$")
_SECRET_DATA = ("data", "stringData")
SHORT = 60  # characters of a line shown in a summary
WHOLE = 100  # a one-line value up to this long is shown whole (an ARN, say)


def _key_is_secret(key: str) -> bool:
    return bool(_SECRET_KEY.search(key)) and not _SECRET_NAME.search(key)


def _last_key(path: str) -> str:
    return re.split(r"[.\[]", path.rstrip("]"))[-1]


def _names_a_secret(item: Any) -> bool:
    """A ``{name, value}`` pair whose name names a secret: a container's env var (Kubernetes EnvVar) such
    as ``{name: HF_TOKEN, value: hf_...}``, masked like a map key of that name (SageMaker's Environment)."""
    return (
        isinstance(item, dict)
        and "value" in item
        and isinstance(item.get("name"), str)
        and _key_is_secret(item["name"])
    )


def _in_secret_pair(tree: Any, path: str) -> bool:
    """``path`` is the ``value`` of a ``{name, value}`` pair that names a secret (``env[5].value``)."""
    return path.endswith(".value") and _names_a_secret(get(tree, path[: -len(".value")]))


def masked(value: Any, path: str = "", secret_data: bool = False) -> Any:
    """``value`` with every secret in it replaced by ``(secret)``. ``path``: where it is (its last key
    decides); ``secret_data``: the value belongs to a Kubernetes Secret (its data is secret)."""
    if secret_data and path.split(".")[0].split("[")[0] in _SECRET_DATA:
        return MASK
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return MASK
        if _names_a_secret(value):  # an env var {name: HF_TOKEN, value: ...}: its value is the secret
            value = {**value, "value": MASK}
        return {k: masked(v, f"{path}.{k}" if path else str(k), secret_data) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, f"{path}[{i}]", secret_data) for i, v in enumerate(value)]
    if value == PLAN_SECRET or (
        isinstance(value, str | int | float)
        and not isinstance(value, bool)
        and path
        and _key_is_secret(_last_key(path))
    ):
        return MASK
    return value


def get(tree: Any, path: str) -> Any:
    """The value at a dotted path (``a.b[2].c``) of a tree; ABSENT when there is none."""
    value = tree
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            i = int(part[1:-1])
            if not isinstance(value, list) or i >= len(value):
                return ABSENT
            value = value[i]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return ABSENT
    return value


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _text(value: Any) -> str:
    if value is ABSENT:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _short(text: str) -> str:
    return text if len(text) <= SHORT else text[: SHORT - 1] + "…"


def summary(value: Any) -> str:
    """One value, shown whole when short and on one line, else summarised."""
    text = _text(value)
    if value is ABSENT or value == MASK:
        return text
    lines = text.splitlines() or [""]
    if len(lines) == 1 and len(text) <= WHOLE:
        return json.dumps(value) if isinstance(value, str) and value.strip() != value else text
    extra = f", {len(lines)} lines" if len(lines) > 1 else f", {len(text)} characters"
    return f"{_short(lines[0])} (sha256 {_digest(text)}{extra})"


def first_difference(old: Any, new: Any) -> str:
    """Where two long texts first differ, as ``line N: old → new`` ('' when they are short or not both text)."""
    if not (isinstance(old, str) and isinstance(new, str)) or MASK in (old, new):
        return ""
    a, b = old.splitlines(), new.splitlines()
    if len(a) <= 1 and len(b) <= 1:
        return ""
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return f"line {i + 1}: {_short(x.strip()) if x is not None else '(none)'} → " + (
                _short(y.strip()) if y is not None else "(none)"
            )
    return ""


def change(old_tree: Any, new_tree: Any, path: str, secret_data: bool = False) -> tuple[str, str, str]:
    """(old, new, where the texts first differ) of ``path`` between two trees, masked and summarised."""
    raw_old, raw_new = (get(old_tree, path), get(new_tree, path)) if path else (old_tree, new_tree)
    old, new = masked(raw_old, path, secret_data), masked(raw_new, path, secret_data)
    old = MASK if old is not ABSENT and path and _in_secret_pair(old_tree, path) else old
    new = MASK if new is not ABSENT and path and _in_secret_pair(new_tree, path) else new
    if old == MASK or new == MASK:  # one side secret: both are (the other is shown only when it is absent)
        return summary(MASK if old is not ABSENT else old), summary(MASK if new is not ABSENT else new), ""
    return summary(old), summary(new), first_difference(old, new)
