"""Every custom object of the plan against the CustomResourceDefinition that defines its kind, as the
API server applies one (apiextensions-apiserver at Kubernetes 1.36):

- structural defaulting first: every missing property whose schema has a ``default`` filled in;
- the openAPIV3Schema of the version the object names: types, enums, patterns, lengths, ``maxItems`` /
  ``maxProperties`` (a 65th flavor in a ClusterQueue's resource group), ``format: int32/int64`` as
  ranges, ``x-kubernetes-int-or-string``, ``nullable``, ``x-kubernetes-list-type: set/map`` (no
  duplicate entries or keys);
- the ``x-kubernetes-validations`` CEL rules, evaluated (cel-python), but the transition rules (those
  reading ``oldSelf``, which run on updates only);
- strict: a field the schema does not declare is refused. The API server would prune it without a
  word, so a mistyped field of ours would be lost at `pulumi up`.

The CRDs are those the plan installs (the program's and the Helm releases' CustomResourceDefinitions);
Kueue's vendored CRDs (``versions.KUEUE_CRDS``, equal to its chart's: a test checks) stand in when the
Helm releases were not rendered. Each CRD version is compiled once per process (schema and CEL
programs), keyed by its content: a plan's cost stays linear in its objects.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import lark
import yaml
from celpy.celparser import CELParser

from facts import versions
from facts.aws_names import INT32_MAX, INT64_MAX
from facts.paths import PROJECT_ROOT
from infra import plan_cache
from infra.api_checks.kube_objects import Refusal, object_id, shown

CRD_KIND = "CustomResourceDefinition"
KUEUE_GROUP = "kueue.x-k8s.io"
# The API groups the API server serves itself (no CRD defines their kinds).
BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)
_RANGES = {"int32": (-INT32_MAX - 1, INT32_MAX), "int64": (-INT64_MAX - 1, INT64_MAX)}
_DROPPED = {"description", "example", "externalDocs", "x-kubernetes-validations", "x-kubernetes-map-type"}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


# ---------------------------------------------------------------------------------------------
# The schema as JSON Schema (Draft 4, which OpenAPI 3.0's keywords follow)
# ---------------------------------------------------------------------------------------------


def json_schema(node: Any, strict: bool = True) -> Any:
    """A structural schema node as JSON Schema; ``strict``: undeclared fields refused."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key.startswith("x-kubernetes-") and key != "x-kubernetes-list-type":
            continue
        if key == "properties":
            out[key] = {name: json_schema(sub, strict) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = json_schema(value, strict) if isinstance(value, dict) else value
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [json_schema(sub, strict) for sub in value]
        elif key == "format" and value in _RANGES:
            low, high = _RANGES[value]
            out["minimum"], out["maximum"] = max(low, node.get("minimum", low)), min(high, node.get("maximum", high))
        elif key == "pattern" and value.startswith("^(?i)"):
            out[key] = "(?i)^" + value[len("^(?i)") :]  # Go takes inline flags anywhere, Python at the start only
        elif key == "x-kubernetes-list-type":
            out[key] = {"type": value, "keys": node.get("x-kubernetes-list-map-keys", [])}
        elif key not in ("minimum", "maximum") or "format" not in node or node["format"] not in _RANGES:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    keeps_unknown = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource")
    closed = out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
    if strict and closed and not keeps_unknown:
        out["additionalProperties"] = False
    return out


def _list_type(
    validator: Any, spec: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """x-kubernetes-list-type set (no duplicate items) and map (no duplicate keys)."""
    if not isinstance(instance, list) or spec["type"] not in ("set", "map"):
        return
    seen: list[Any] = []
    for item in instance:
        if spec["type"] == "set":
            key = item
        else:
            key = tuple(item.get(k) for k in spec["keys"]) if isinstance(item, dict) else None
        if key is not None and key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key!r} in a list of type {spec['type']}")
        seen.append(key)


_Validator = jsonschema.validators.extend(jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type})


def apply_defaults(schema: Mapping[str, Any], value: Any) -> None:
    """Fill in every missing property whose schema has a ``default``, depth first, in place."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in props:
                    apply_defaults(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)


# ---------------------------------------------------------------------------------------------
# CEL rules (x-kubernetes-validations)
# ---------------------------------------------------------------------------------------------

# cel-python 0.5.0's parser, as celpy/celparser.py builds it (lark, LALR, from its cel.lark grammar);
# tests/test_api_checks.py checks that both parse every CRD rule of the plan alike.
_PARSER_OPTIONS: dict[str, Any] = {
    "parser": "lalr",
    "start": "expr",
    "debug": True,
    "g_regex_flags": re.M,
    "lexer_callbacks": {"IDENT": CELParser.ambiguous_literals},
    "propagate_positions": True,
    "maybe_placeholders": False,
    "priority": "invert",
    "tree_class": lark.Tree,
}


@cache
def _environment() -> celpy.Environment:
    """cel-python's environment. Building its parser's LALR tables takes about 0.3 s, a sixth of a plan:
    lark keeps them in .cache/cel/ (infra/plan_cache.py) and uses them only while the grammar, the
    options and lark's version are those they were built from (lark checks a hash of them)."""
    folder = plan_cache.folder("cel")
    if folder is not None and CELParser.CEL_PARSER is None:
        folder.mkdir(parents=True, exist_ok=True)
        grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
        CELParser.CEL_PARSER = lark.Lark(grammar, cache=str(folder / "cel-parser.lark"), **_PARSER_OPTIONS)
    return celpy.Environment()


@cache
def _program(rule: str) -> Any:
    """A CEL rule compiled once per process."""
    env = _environment()
    return env.program(env.compile(rule))


@dataclass(frozen=True)
class CelRule:
    path: tuple[str, ...]  # property names, "[]" for a list's items, "{}" for a map's values
    rule: str
    message: str


def cel_rules(node: Any, path: tuple[str, ...] = ()) -> Iterator[CelRule]:
    """The create-time CEL rules of a schema, where they sit (transition rules, on oldSelf, left out)."""
    if not isinstance(node, dict):
        return
    for r in node.get("x-kubernetes-validations") or []:
        if "oldSelf" not in r["rule"]:
            yield CelRule(path, r["rule"], r.get("message") or f"failed rule: {r['rule']}")
    for name, sub in (node.get("properties") or {}).items():
        yield from cel_rules(sub, (*path, name))
    if isinstance(node.get("items"), dict):
        yield from cel_rules(node["items"], (*path, "[]"))
    if isinstance(node.get("additionalProperties"), dict):
        yield from cel_rules(node["additionalProperties"], (*path, "{}"))


def _values_at(value: Any, path: tuple[str, ...], where: str = "") -> Iterator[tuple[str, Any]]:
    """The values at a schema path of an object (a list or map fans out), with their field paths."""
    if not path:
        yield where or "(the object)", value
        return
    step, rest = path[0], path[1:]
    if step == "[]" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _values_at(item, rest, f"{where}[{i}]")
    elif step == "{}" and isinstance(value, dict):
        for key, item in value.items():
            yield from _values_at(item, rest, f"{where}[{key}]")
    elif isinstance(value, dict) and step in value:
        yield from _values_at(value[step], rest, f"{where}.{step}" if where else step)


def _cel_holds(rule: str, value: Any) -> bool:
    """Whether ``rule`` holds for ``self`` = ``value``. cel-python interprets a rule's parse tree (some
    ms a time): a value met again (every flavor's same tolerations) is answered from memory."""
    return _cel_verdict(rule, json.dumps(value, sort_keys=True))


@lru_cache(maxsize=4096)
def _cel_verdict(rule: str, value_json: str) -> bool:
    result = _program(rule).evaluate({"self": celpy.json_to_cel(json.loads(value_json))})
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


# ---------------------------------------------------------------------------------------------
# A CRD version, compiled once
# ---------------------------------------------------------------------------------------------


@dataclass
class CompiledVersion:
    crd: str  # the CRD's name
    version: str
    served: bool
    schema: dict[str, Any]  # the openAPIV3Schema as the CRD has it (for the defaults)
    validator: Any
    rules: list[CelRule] = field(default_factory=list)

    @property
    def source(self) -> str:
        return f"CRD {self.crd} {self.version} openAPIV3Schema"

    def refusals(self, obj: Mapping[str, Any]) -> list[Refusal]:
        """What the API server refuses of ``obj`` (a custom object of this version)."""
        who = object_id(obj)
        body = {k: copy.deepcopy(v) for k, v in obj.items() if k != "metadata"}
        apply_defaults(self.schema, body)
        out = [self._schema_refusal(who, e) for e in self.validator.iter_errors(body)]
        # A rule at the root sees metadata.name and generateName, no other metadata (Kubernetes docs, "Validation
        # rules": "only metadata.name and metadata.generateName are accessible"); Trainer's TrainJob has one.
        meta = obj.get("metadata") or {}
        cel_body = {**body, "metadata": {k: meta[k] for k in ("name", "generateName") if k in meta}}
        for r in self.rules:
            for at, value in _values_at(cel_body, r.path):
                if not _cel_holds(r.rule, value):
                    out.append(
                        Refusal(who, at, shown(value), r.message, f"x-kubernetes-validations {r.rule!r}, {self.source}")
                    )
        if not self.served:
            out.append(Refusal(who, "apiVersion", shown(obj.get("apiVersion")), "not served", self.source))
        return out

    def _schema_refusal(self, who: str, err: jsonschema.ValidationError) -> Refusal:
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".")
        value, rule = shown(err.instance), err.message
        if err.validator in ("maxItems", "minItems", "maxProperties", "minProperties"):
            value = f"{len(err.instance)} {'items' if isinstance(err.instance, list) else 'properties'}"
            rule = f"{err.validator} {err.validator_value}"
        elif err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties") or {}))
            at = ".".join(p for p in (at, extra[0] if len(extra) == 1 else "") if p)
            value, rule = ", ".join(extra), "a field the schema does not declare (the API server would prune it)"
        elif len(rule) > 160:
            rule = rule[:157] + "..."
        return Refusal(who, at or "(the object)", value, rule, f"{err.validator}, {self.source}")


_compiled: dict[str, CompiledVersion] = {}


def compiled(crd: Mapping[str, Any], version: Mapping[str, Any]) -> CompiledVersion:
    """A CRD version's schema and CEL rules, compiled once per process (keyed by their content)."""
    raw = version["schema"]["openAPIV3Schema"]
    key = hashlib.sha256(
        json.dumps([crd["metadata"]["name"], version["name"], raw], sort_keys=True).encode()
    ).hexdigest()
    if key not in _compiled:
        schema = json_schema(raw)
        schema.get("properties", {}).pop("metadata", None)  # the API server's: `type: object` at most in a CRD
        _compiled[key] = CompiledVersion(
            crd=crd["metadata"]["name"],
            version=version["name"],
            served=bool(version.get("served")),
            schema=raw,
            validator=_Validator(schema),
            rules=list(cel_rules(raw)),
        )
    return _compiled[key]


# ---------------------------------------------------------------------------------------------
# The CRDs of a plan
# ---------------------------------------------------------------------------------------------


@cache
def vendored_kueue_crds() -> tuple[dict[str, Any], ...]:
    """Kueue's vendored CRDs (read once per process)."""
    return tuple(
        yaml.load(p.read_text(), Loader=_LOADER) for p in sorted((PROJECT_ROOT / versions.KUEUE_CRDS).glob("*.yaml"))
    )


class CrdIndex:
    """The CRDs of a plan by (group, kind); the vendored Kueue CRDs where the plan has none."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]):
        self.by_kind: dict[tuple[str, str], Mapping[str, Any]] = {}
        # Each CRD version's compiled form, looked up once per plan: ``compiled`` keys by a digest of the
        # whole schema (hundreds of KB of JSON), too dear to take for every custom object.
        self._versions: dict[tuple[int, str], CompiledVersion] = {}
        for o in objects:
            if o.get("kind") == CRD_KIND:
                self.by_kind[(o["spec"]["group"], o["spec"]["names"]["kind"])] = o

    def crd_of(self, group: str, kind: str) -> Mapping[str, Any] | None:
        """The CRD of a kind: the plan's, else (Kueue's chart not rendered) the vendored one."""
        found = self.by_kind.get((group, kind))
        if found is None and group == KUEUE_GROUP:
            found = next((c for c in vendored_kueue_crds() if c["spec"]["names"]["kind"] == kind), None)
        return found

    def refusals(self, obj: Mapping[str, Any]) -> list[Refusal]:
        """What the API server refuses of a custom object by its CRD ([] for a built-in kind)."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        group = group_of(api_version)
        if group in BUILTIN_GROUPS:
            return []
        crd = self.crd_of(group, kind)
        if crd is None:
            return [
                Refusal(
                    object_id(obj),
                    "kind",
                    shown(kind),
                    f"no CustomResourceDefinition of the plan defines {group}/{kind}",
                    "the plan's CRDs",
                )
            ]
        name = api_version.rpartition("/")[2]
        version = next((v for v in crd["spec"]["versions"] if v["name"] == name), None)
        if version is None:
            return [
                Refusal(
                    object_id(obj),
                    "apiVersion",
                    shown(api_version),
                    "a version the CRD does not have",
                    f"CRD {crd['metadata']['name']}",
                )
            ]
        key = (id(crd), name)
        if key not in self._versions:
            self._versions[key] = compiled(crd, version)
        return self._versions[key].refusals(obj)
