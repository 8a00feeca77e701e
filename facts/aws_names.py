"""The one table of the limits and naming rules of the services the stack passes values on to (AWS,
Kubernetes, container registries), each with its source: checked before anything is created, so no
service refuses a value halfway through `pulumi up` (or takes it, and the job never starts). Each
function returns what is wrong, or None.

Where a service model states a limit, tests/test_limits.py reads it from botocore's model and
compares."""

from __future__ import annotations

import datetime
import ipaddress
import re

from facts.problems import fmt

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
# EKS: "Nodes per managed node group", 450 by default and adjustable (EKS User Guide, "Amazon EKS
# service quotas"), Service Quotas code L-BD136A63 of service code eks: the most a node group's
# scalingConfig.maxSize may be (botocore's eks model, NodegroupScalingConfig.maxSize: "For
# information about the maximum number that you can specify, see Amazon EKS service quotas").
# Adjustable, so the plan warns above the default and preflight reads the account's value.
EKS_NODES_PER_NODEGROUP = ("eks", "L-BD136A63", "Nodes per managed node group")
EKS_NODES_PER_NODEGROUP_DEFAULT = 450
# EKS: "Managed node groups per cluster", 30 by default and adjustable (EKS User Guide, "Amazon EKS
# service quotas", docs.aws.amazon.com/eks/latest/userguide/service-quotas.html), Service Quotas code
# L-6D54EA21 of service code eks. A quota, not a rule of the API's model: the plan warns above the
# default (stacks/config/quota_warnings.py) and preflight reads the account's value (infra/preflight/quotas.py).
EKS_NODEGROUPS_PER_CLUSTER = ("eks", "L-6D54EA21", "Managed node groups per cluster")
EKS_NODEGROUPS_PER_CLUSTER_DEFAULT = 30


def bucket_problem(name: str) -> str | None:
    """Why S3 refuses ``name`` as a bucket name, or None."""
    if not _BUCKET.match(name):
        return (
            "3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit (just the name: "
            "no s3:// and no path)"
        )
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


def tag_key_problem(key: str) -> str | None:
    """Why AWS refuses ``key`` as a tag key, or None."""
    if not 1 <= len(key) <= TAG_KEY_MAX:
        return f"tag keys are 1-{TAG_KEY_MAX} characters"
    if key.lower().startswith("aws:"):
        return "the aws: prefix is reserved for AWS"
    if not _TAG_TEXT.match(key):
        return "tag keys take letters, digits, spaces and _ . : / = + - @"
    return None


def tag_value_problem(value: str) -> str | None:
    """Why AWS refuses ``value`` as a tag value, or None."""
    if len(value) > TAG_VALUE_MAX:
        return f"tag values are at most {TAG_VALUE_MAX} characters"
    if not _TAG_TEXT.match(value):
        return "tag values take letters, digits, spaces and _ . : / = + - @"
    return None


# EKS access entries take an IAM role or user ARN as the principal, never an STS session (an
# assumed role's ARN): EKS User Guide, "Create access entries".
IAM_PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
ASSUMED_ROLE_ARN = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.+$")


def role_arn_problem(arn: str, example: str = "Team") -> str | None:
    """Why ``arn`` cannot be an EKS access entry's principal (an IAM role or user), or None;
    ``example`` names the role of the example ARN in the message."""
    assumed = ASSUMED_ROLE_ARN.match(arn)
    if assumed:
        role = f"arn:{assumed.group(1)}:iam::{assumed.group(2)}:role/{assumed.group(3)}"
        return (
            f"{fmt(arn)} is an STS session, which EKS access entries refuse; give the role itself: {role} (with its "
            "path, if it has one)"
        )
    if not IAM_PRINCIPAL_ARN.match(arn):
        return f"{fmt(arn)} is not an IAM role or user ARN like arn:aws:iam::123456789012:role/{example}"
    return None


# EKS: public endpoint access CIDR ranges per cluster, 40 (quota L-93A74D60, not adjustable; AWS
# General Reference, "Amazon EKS endpoints and quotas"). The ranges are IPv4 on an IPv4 cluster and
# "cannot include reserved addresses" (EKS User Guide, "Cluster API server endpoint").
EKS_PUBLIC_ACCESS_CIDRS_MAX = 40
# EKS: "A maximum of 50 taints are allowed per node group" (EKS User Guide, "Prevent Pods from being
# scheduled on specific nodes", node-taints-managed-node-groups).
EKS_NODEGROUP_TAINTS_MAX = 50

# Ranges that are no source on the internet (IANA IPv4 Special-Purpose Address Registry, RFC 6890),
# so no client reaches the public endpoint from them. The documentation ranges are the
# placeholders below: valid but nobody's address.
NOT_ON_THE_INTERNET = {
    "0.0.0.0/8": "'this network' (RFC 791)",
    "10.0.0.0/8": "private (RFC 1918)",
    "172.16.0.0/12": "private (RFC 1918)",
    "192.168.0.0/16": "private (RFC 1918)",
    "100.64.0.0/10": "shared address space for carrier-grade NAT (RFC 6598)",
    "127.0.0.0/8": "loopback (RFC 1122)",
    "169.254.0.0/16": "link-local (RFC 3927)",
    "192.0.0.0/24": "IETF protocol assignments (RFC 6890)",
    "198.18.0.0/15": "benchmarking (RFC 2544)",
    "224.0.0.0/4": "multicast (RFC 5771)",
    "240.0.0.0/4": "reserved (RFC 1112), with the limited broadcast address",
}


def public_access_cidr_problem(cidr: str) -> str | None:
    """Why ``cidr`` cannot be a source of the cluster's public API endpoint, or None. A valid block
    is written without host bits, is IPv4, and is not inside a range that is no internet source
    (a larger block that merely contains one, like 0.0.0.0/0, is fine)."""
    try:
        net = ipaddress.ip_network(cidr, strict=True)
    except ValueError as err:
        return f"not a valid CIDR block ({err})"
    if net.version != 4:
        return "an IPv6 block: the cluster is IPv4, and EKS takes IPv4 blocks only for its public endpoint"
    for block, what in NOT_ON_THE_INTERNET.items():
        if net.subnet_of(ipaddress.IPv4Network(block)):
            return (
                f"inside {block}, {what}: no client on the internet has such an address, and EKS refuses reserved "
                "ranges"
            )
    return None


# SageMaker CreateTrainingJob (service model sagemaker-2017-07-24, as botocore ships it): at most 20
# input channels (InputDataConfig); S3 URIs of outputs, inputs, checkpoints and TensorBoard output
# at most 1024 characters.
SAGEMAKER_INPUT_CHANNELS_MAX = 20
SAGEMAKER_S3_URI_MAX = 1024
# Local NVMe instance storage of the EC2 type behind each ml. training type, GB (EC2
# DescribeInstanceTypes InstanceStorageInfo.TotalSizeInGB, as moto records it; the test compares).
# SageMaker does not attach EBS to such a type: "Available storage is fixed to the NVMe-type
# instance's storage capacity" (SageMaker API Reference, ResourceConfig.VolumeSizeInGB), so a
# VolumeSizeInGB above it is refused. Types without an entry (ml.p3) use EBS of VolumeSizeInGB.
INSTANCE_NVME_STORAGE_GB = {
    "p3dn.24xlarge": 1800,
    "p4d.24xlarge": 8000,
    "p4de.24xlarge": 8000,
    "p5.4xlarge": 3800,
    "p5.48xlarge": 30400,
    "p5e.48xlarge": 30400,
    "p5en.48xlarge": 30400,
    "p6-b200.48xlarge": 30400,
    "p6-b300.48xlarge": 30400,
}

# Kubernetes API integer fields (backoffLimit, replicas, ttlSecondsAfterFinished, maxRestarts, ...)
# are int32 (format: int32 in the OpenAPI schema), activeDeadlineSeconds int64: the API server
# refuses a larger number.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Image references, as the container runtimes parse them: the grammar of distribution/reference
# (reference.go and regexp.go at v0.6.0; ASCII only, \w is [A-Za-z0-9_]):
#   reference := name [":" tag] ["@" digest];  name := [domain "/"] path-component ["/" path-component]*
#   path-component := [a-z0-9]+ ([._]|__|-+ [a-z0-9]+)*;  tag := [\w][\w.-]{0,127}
#   domain := host [":" port]; host := domain-name | "[" IPv6 "]"
# with a repository path of at most 255 characters and a digest of a registered algorithm
# (go-digest: sha256, sha384, sha512, lower-case hex of 64, 96, 128 digits).
IMAGE_TAG_MAX = 128
IMAGE_PATH_MAX = 255
_W = "A-Za-z0-9_"
_ALPHANUMERIC = "[a-z0-9]+"
_PATH_COMPONENT = f"{_ALPHANUMERIC}(?:(?:[._]|__|[-]+){_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = f"[{_W}][{_W}.-]{{0,{IMAGE_TAG_MAX - 1}}}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?")
_ANCHORED_NAME = re.compile(rf"(?:({_DOMAIN})/)?({_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)")
DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}
_IMAGE_TEXT = re.compile(r"[A-Za-z0-9._\-/:@\[\]]")


def image_reference_problem(ref: str) -> str | None:
    """Why a container runtime cannot parse ``ref`` as an image reference, or None."""
    if not ref:
        return "an empty image reference"
    odd = next((c for c in ref if not _IMAGE_TEXT.fullmatch(c)), None)
    if odd is not None:
        where = ref.index(odd)
        quote = (
            " (a typographic quote pasted with it? write the reference alone)"
            if odd in "\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb\"'`"
            else ""
        )
        return f"{odd!r} (U+{ord(odd):04X}) at position {where + 1} is no part of an image reference{quote}"
    m = _REFERENCE.fullmatch(ref)
    if m is None:
        if _REFERENCE.fullmatch(ref.lower()):
            return "the repository name must be lower-case"
        name, _, tag = ref.rpartition(":") if "@" not in ref else (ref, "", "")
        if name and "/" not in tag and len(tag) > IMAGE_TAG_MAX and _REFERENCE.fullmatch(name):
            return f"the tag is {len(tag)} characters long; tags are at most {IMAGE_TAG_MAX}"
        return (
            "not of the form [registry/]repository[:tag][@digest] (lower-case repository path components separated by "
            "'/', '.', '_' or '-'; a tag of letters, digits, '_', '.' and '-')"
        )
    named = _ANCHORED_NAME.fullmatch(m.group(1))
    path = named.group(2) if named else m.group(1)
    if len(path) > IMAGE_PATH_MAX:
        return f"the repository path is {len(path)} characters long; at most {IMAGE_PATH_MAX}"
    if m.group(3):
        algorithm, _, hex_digits = m.group(3).partition(":")
        want = DIGEST_HEX_LENGTH.get(algorithm)
        if want is None:
            return f"the digest algorithm {algorithm!r} is not one the runtimes know ({', '.join(DIGEST_HEX_LENGTH)})"
        if len(hex_digits) != want or not re.fullmatch("[0-9a-f]+", hex_digits):
            return f"a {algorithm} digest is {want} lower-case hex digits"
    return None


# Placeholders of the documentation that a config copied from an example may still hold: valid
# values that belong to nobody. The IPv4 documentation ranges TEST-NET-1/2/3 (RFC 5737); the example
# account ids of AWS's documentation (and of this project's examples).
DOCUMENTATION_NETWORKS = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
EXAMPLE_ACCOUNT_IDS = ("111122223333", "123456789012")


def documentation_network(cidr: str) -> str | None:
    """The documentation range ``cidr`` lies in (RFC 5737), or None (also for text that is no CIDR)."""
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None
    for block in DOCUMENTATION_NETWORKS:
        doc = ipaddress.IPv4Network(block)
        if net.version == 4 and net.subnet_of(doc):
            return block
    return None


def example_account(text: str) -> str | None:
    """The example account id in an ARN or ECR image reference ``text``, or None."""
    for account in EXAMPLE_ACCOUNT_IDS:
        if re.search(rf"(^|[:/]){account}([:.]|$)", text):
            return account
    return None


# EC2 Capacity Blocks for ML are sold "in 1-day increments up 14 days, and in 7-day increments up to
# 182 days" (botocore's ec2 model, DescribeCapacityBlockOfferings.CapacityDurationHours; EC2 User
# Guide, "Find and purchase Capacity Blocks"): 24-336 hours in steps of 24, then 504-4368 hours in
# steps of 168. No shorter block is sold for any type (only the extension of a block already bought,
# DescribeCapacityBlockExtensionOfferings, is priced by the hour; the stack buys no extensions). "Each
# Capacity Block can have up to 64 instances" (the same operation's InstanceCount);
# tests/test_aws_refusals.py reads both sentences from botocore's model.
CAPACITY_BLOCK_DAYS = tuple(range(1, 15)) + tuple(range(21, 183, 7))
CAPACITY_BLOCK_HOURS = tuple(24 * days for days in CAPACITY_BLOCK_DAYS)
CAPACITY_BLOCK_INSTANCES_MAX = 64
# "All Capacity Blocks end at 11:30AM UTC" (EC2 User Guide, "Find and purchase Capacity Blocks"); a
# block's start is the start of its offering, which may be any time on the day it is bought.
CAPACITY_BLOCK_END_UTC = datetime.time(11, 30)


def capacity_block_duration_problem(hours: int) -> str | None:
    """Why EC2 sells no Capacity Block of ``hours`` hours, with the durations nearest to it, or None."""
    if hours in CAPACITY_BLOCK_HOURS:
        return None
    below = [h for h in CAPACITY_BLOCK_HOURS if h < hours]
    above = [h for h in CAPACITY_BLOCK_HOURS if h > hours]
    nearest = " or ".join(str(h) for h in (below[-1:] + above[:1]))
    return (
        "EC2 sells Capacity Blocks of whole days, 1 to 14 days (24-336 hours in steps of 24), then whole weeks up to "
        f"26 weeks (504-4368 hours in steps of 168); the nearest are {nearest}"
    )
