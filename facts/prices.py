"""Prices for the plan's cost estimate: hourly, on-demand, one region, one date. Pinned here so a
plan's cost is reproducible and a pull request shows what it changes.

Region us-west-2, read 2026-07/08. Instances: AWS's on-demand price list as republished by the
SkyPilot public price catalog (skypilot-org/skypilot-catalog commit 00148f2a, catalogs/v8/aws/vms.csv,
the us-west-2 rows' Price column), whose us-east-1 rows match Karpenter's price file of 2026-07-20 and
an AWS Price List read of 2026-07-28; m5.xlarge and m6i.xlarge are derived from their family's
per-vCPU rate. p5.4xlarge, p6-b200.48xlarge and p6-b300.48xlarge are that file's us-west-2 rows too
(p6-b300: us-west-2's only row, usw2-az2). Capacity Blocks are priced per offering (its upfront fee,
which preflight reads from DescribeCapacityBlockOfferings), not here. EKS: $0.10 per cluster hour in
standard support (AWS). The NAT gateway, FSx and EFS storage and EBS gp3 figures come from
third-party copies of AWS's pricing pages and are marked "unverified" below: re-check them with
`aws pricing get-products` before relying on them.
"""

from __future__ import annotations

PRICES_REGION = "us-west-2"
PRICES_DATE = "2026-07"
HOURS_PER_MONTH = 730

# USD per instance hour, on demand. None: no on-demand price (p5e: Capacity Blocks only).
INSTANCE_HOURLY: dict[str, float | None] = {
    "p3.2xlarge": 3.06,
    "p3.8xlarge": 12.24,
    "p3.16xlarge": 24.48,
    "p3dn.24xlarge": 31.212,
    "p4d.24xlarge": 21.95764,
    "p4de.24xlarge": 27.44705,
    "p5.4xlarge": 6.88,
    "p5.48xlarge": 55.04,
    "p5e.48xlarge": None,
    "p5en.48xlarge": 63.296,
    "p6-b200.48xlarge": 113.9328,
    "p6-b300.48xlarge": 142.416,
    "c5.xlarge": 0.17,
    "c5.2xlarge": 0.34,
    "c5.4xlarge": 0.68,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "m5.4xlarge": 0.768,
    "m6i.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
    "m6i.4xlarge": 0.768,
}
EKS_CLUSTER_HOURLY = 0.10  # standard support
NAT_GATEWAY_HOURLY = 0.045  # unverified; plus $0.045 per GB processed (not estimated)
EBS_GP3_GB_MONTH = 0.08  # unverified; node root volumes
# FSx for Lustre per GB-month (SSD): SCRATCH_2 and PERSISTENT_2 at 125 MB/s/TiB from third-party
# copies; the other tiers unverified.
FSX_GB_MONTH: dict[tuple[str, int | None], float] = {
    ("SCRATCH_1", None): 0.140,
    ("SCRATCH_2", None): 0.140,
    ("PERSISTENT_1", 50): 0.140,
    ("PERSISTENT_1", 100): 0.200,
    ("PERSISTENT_1", 200): 0.290,
    ("PERSISTENT_2", 125): 0.145,
    ("PERSISTENT_2", 250): 0.210,
    ("PERSISTENT_2", 500): 0.340,
    ("PERSISTENT_2", 1000): 0.600,
}
# EFS bills what is stored ($0.30 per GB-month, Standard): an empty file system costs nothing.
EFS_GB_MONTH = 0.30
# Every AWS-provided public IPv4 address, in use or idle, NAT gateways' Elastic IPs included: $0.005
# per address-hour since 2024-02-01 (AWS News Blog "New - AWS Public IPv4 Address Charge + Public IP
# Insights", 2023-07-28; Amazon VPC pricing page, "Public IPv4 address"). Each NAT gateway of the
# stack holds one Elastic IP; nothing else the stack makes has one (a job's LoadBalancer Service
# aside, which the estimate leaves out).
PUBLIC_IPV4_HOURLY = 0.005
# A customer managed KMS key: $1 per key-month, prorated hourly, until it is deleted (a key pending
# deletion is free). Automatic rotation, on for every key of the stack, adds $1 per month at each of
# the first two yearly rotations and nothing after (the April 2024 change): $1 in the first year, up
# to $3 from the third. Requests beyond the free 20,000 per month cost $0.03 per 10,000. Source: AWS
# KMS pricing page (aws.amazon.com/kms/pricing), key storage and key rotation sections.
KMS_KEY_MONTH = 1.00
KMS_KEY_MONTH_AFTER_ROTATIONS = 3.00
# CloudWatch, per month: a standard-resolution alarm is billed per metric it reads ($0.10 per alarm
# metric: a metric-math alarm over 6 metrics is 6), a custom dashboard $3.00, a custom metric (a
# metric filter's, per dimension combination that receives data, prorated by the hour) $0.30 for the
# first 10,000. The free tier (per account: 10 alarm metrics, 3 dashboards, 10 metrics) is not
# deducted. Source: Amazon CloudWatch pricing page (aws.amazon.com/cloudwatch/pricing), free tier
# read directly; the paid rates from third-party copies of it: unverified.
CLOUDWATCH_ALARM_METRIC_MONTH = 0.10
CLOUDWATCH_DASHBOARD_MONTH = 3.00
CLOUDWATCH_CUSTOM_METRIC_MONTH = 0.30
