"""The Kubernetes API server's own value rules, the ones its OpenAPI schemas do not carry, as small
functions: each takes a value and returns what is wrong with it ([] when nothing), in the API
server's words, and names its source.

Sources (read at the tags, not copied): k8s.io/apimachinery v0.36.3, the library of Kubernetes 1.36
(commit 40bf4b2b): ``pkg/util/validation/validation.go`` (DNS names, port names, env var names,
ConfigMap keys), ``pkg/api/validate/content/kube.go`` (label keys and values: IsQualifiedName is
IsLabelKey), ``pkg/api/validate/content/path.go`` (path segment names),
``pkg/api/validation/objectmeta.go`` (annotations: keys lower-cased, then qualified names;
TotalAnnotationSizeLimitB, 256 KiB), ``pkg/api/validation/generic.go`` (NameIsDNSSubdomain,
NameIsDNSLabel, NameIsDNS1035Label; a namespace name is a DNS label). Kubernetes'
``pkg/apis/core/validation/validation.go`` says which rule a field takes (see kube_objects.py).
"""

from __future__ import annotations

import re

APIMACHINERY = "k8s.io/apimachinery@v0.36.3"
UTIL = f"{APIMACHINERY} pkg/util/validation/validation.go"
CONTENT = f"{APIMACHINERY} pkg/api/validate/content/kube.go"
PATH = f"{APIMACHINERY} pkg/api/validate/content/path.go"
OBJECT_META = f"{APIMACHINERY} pkg/api/validation/objectmeta.go"

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1035_LABEL_RE = re.compile("[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_KEY = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_RE = re.compile(_LABEL_KEY)
_LABEL_VALUE_RE = re.compile(f"({_LABEL_KEY})?")
_PORT_NAME_CHARSET_RE = re.compile("[-a-z0-9]+")
_CONFIG_MAP_KEY_RE = re.compile("[-._a-zA-Z0-9]+")

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_MAX = 63
LABEL_KEY_NAME_MAX = 63
LABEL_VALUE_MAX = 63
PORT_NAME_MAX = 15
TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)


def _max_len(value: str, most: int) -> list[str]:
    """Go's len(): bytes, not characters."""
    return [f"must be no more than {most} characters"] if len(value.encode()) > most else []


def is_dns1123_label(value: str) -> list[str]:
    """IsDNS1123Label: at most 63, lower-case alphanumerics and '-', alphanumeric at both ends."""
    errs = _max_len(value, DNS1123_LABEL_MAX)
    if not _DNS1123_LABEL_RE.fullmatch(value):
        errs.append("a lowercase RFC 1123 label (lower-case letters, digits and '-', alphanumeric at both ends)")
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    """IsDNS1123Subdomain: at most 253, dot-separated DNS-1123 labels."""
    errs = _max_len(value, DNS1123_SUBDOMAIN_MAX)
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(
            "a lowercase RFC 1123 subdomain (lower-case letters, digits, '-' and '.', alphanumeric at both ends)"
        )
    return errs


def is_dns1035_label(value: str) -> list[str]:
    """IsDNS1035Label: at most 63, a DNS-1123 label that starts with a letter."""
    errs = _max_len(value, DNS1035_LABEL_MAX)
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append("a DNS-1035 label (lower-case letters, digits and '-', starting with a letter)")
    return errs


def is_path_segment_name(value: str) -> list[str]:
    """IsPathSegmentName (content/path.go): not '.' or '..', no '/' or '%' (RBAC objects' names)."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def is_qualified_name(value: str) -> list[str]:
    """IsQualifiedName = IsLabelKey (content/kube.go): an optional DNS-1123 subdomain prefix and '/',
    then a name of at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends."""
    parts = value.split("/")
    if len(parts) > 2:
        return ["a qualified name: at most one '/' (an optional DNS subdomain prefix, then a name)"]
    errs = []
    if len(parts) == 2:
        prefix = parts[0]
        errs += (
            ["prefix part must be non-empty"]
            if not prefix
            else [f"prefix part {e}" for e in is_dns1123_subdomain(prefix)]
        )
    name = parts[-1]
    if not name:
        return [*errs, "name part must be non-empty"]
    errs += [f"name part {e}" for e in _max_len(name, LABEL_KEY_NAME_MAX)]
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append("name part: alphanumerics, '-', '_' or '.', alphanumeric at both ends")
    return errs


def is_label_value(value: str) -> list[str]:
    """IsLabelValue (content/kube.go): empty, or at most 63 of a label key's name characters."""
    errs = _max_len(value, LABEL_VALUE_MAX)
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append("a label value: empty or alphanumerics, '-', '_' or '.', alphanumeric at both ends")
    return errs


def is_annotation_key(value: str) -> list[str]:
    """ValidateAnnotations (objectmeta.go): the key lower-cased, then a qualified name."""
    return is_qualified_name(value.lower())


def annotations_size(annotations: dict[str, str]) -> list[str]:
    """ValidateAnnotationsSize (objectmeta.go): keys and values together at most 256 KiB."""
    total = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B:
        return [f"annotations total {total} bytes, more than TotalAnnotationSizeLimitB {TOTAL_ANNOTATION_SIZE_LIMIT_B}"]
    return []


def is_valid_port_name(value: str) -> list[str]:
    """IsValidPortName (an IANA_SVC_NAME): at most 15, [-a-z0-9], a letter, no '--', no '-' at an end."""
    errs = _max_len(value, PORT_NAME_MAX)
    if not _PORT_NAME_CHARSET_RE.fullmatch(value):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", value):
        errs.append("must contain at least one letter (a-z)")
    if "--" in value:
        errs.append("must not contain consecutive hyphens")
    if value.startswith("-") or value.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def is_relaxed_env_var_name(value: str) -> list[str]:
    """IsRelaxedEnvVarName: non-empty, printable ASCII but '='. Kubernetes 1.34 made the
    RelaxedEnvironmentVariableValidation gate GA, locked on (CHANGELOG-1.34, kubernetes#132054):
    1.35 and 1.36, the versions the stack runs, validate env var names by this rule."""
    if not value:
        return ["environment variable name must be non-empty"]
    if any(not (0x20 <= ord(c) <= 0x7E) or c == "=" for c in value):
        return ["a valid environment variable name must consist only of printable ASCII characters other than '='"]
    return []


def is_config_map_key(value: str) -> list[str]:
    """IsConfigMapKey: at most 253 of alphanumerics, '-', '_' or '.'; not '.', '..' or '..'-prefixed."""
    errs = _max_len(value, DNS1123_SUBDOMAIN_MAX)
    if not _CONFIG_MAP_KEY_RE.fullmatch(value):
        errs.append("a valid config key must consist of alphanumeric characters, '-', '_' or '.'")
    if value in (".", "..") or value.startswith(".."):
        errs.append("must not be '.' or '..' or start with '..'")
    return errs
