"""AWS's rules for names and tags the stack passes on: checked before anything is created, so AWS
never refuses them halfway through `pulumi up`. Each function returns what is wrong, or None."""

from __future__ import annotations

import ipaddress
import re
from typing import Optional

# S3 bucket naming rules (Amazon S3 User Guide, "General purpose bucket naming rules").
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")

# Tags (EC2/IAM/EKS tagging rules): keys 1-128 characters, values up to 256, the aws: prefix is
# AWS's own; letters, digits, spaces and _ . : / = + - @ only (the set every service accepts).
TAG_KEY_MAX = 128
TAG_VALUE_MAX = 256
TAGS_PER_RESOURCE = 50
_TAG_TEXT = re.compile(r"^[\w .:/=+\-@]*$")

# EKS: cluster names 1-100 characters; managed node group names 1-63.
EKS_CLUSTER_NAME_MAX = 100
EKS_NODEGROUP_NAME_MAX = 63


def bucket_problem(name: str) -> Optional[str]:
    """Why S3 refuses ``name`` as a bucket name, or None."""
    if not _BUCKET.match(name):
        return "3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit (just the name: no s3:// and no path)"
    if ".." in name:
        return "two periods next to each other"
    try:
        ipaddress.IPv4Address(name)
        return "formatted as an IP address"
    except ValueError:
        pass
    for prefix in _BUCKET_PREFIXES:
        if name.startswith(prefix):
            return f"starts with the reserved prefix {prefix!r}"
    for suffix in _BUCKET_SUFFIXES:
        if name.endswith(suffix):
            return f"ends with the reserved suffix {suffix!r}"
    return None


def tag_key_problem(key: str) -> Optional[str]:
    """Why AWS refuses ``key`` as a tag key, or None."""
    if not 1 <= len(key) <= TAG_KEY_MAX:
        return f"tag keys are 1-{TAG_KEY_MAX} characters"
    if key.lower().startswith("aws:"):
        return "the aws: prefix is reserved for AWS"
    if not _TAG_TEXT.match(key):
        return "tag keys take letters, digits, spaces and _ . : / = + - @"
    return None


def tag_value_problem(value: str) -> Optional[str]:
    """Why AWS refuses ``value`` as a tag value, or None."""
    if len(value) > TAG_VALUE_MAX:
        return f"tag values are at most {TAG_VALUE_MAX} characters"
    if not _TAG_TEXT.match(value):
        return "tag values take letters, digits, spaces and _ . : / = + - @"
    return None
