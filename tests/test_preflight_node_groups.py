"""Preflight's check of EKS's nodes-per-managed-node-group quota (Service Quotas eks L-BD136A63,
issue 26 item 4) against every group's maxSize: GetServiceQuota answered by a botocore stub
validated against the service model (tests/aws_stubs.py), as tests/test_preflight.py does for the
EC2 vCPU quotas."""

from __future__ import annotations

import json

import pytest

from infra import preflight
from tests.aws_stubs import Error, answer, answer_quotas, new_session
from tests.helpers import by_check, cfg_of, dev_cfg, minimal_values


@pytest.fixture
def session(aws):
    return new_session()


def test_the_node_group_quota_is_read_from_service_quotas(session):
    answer_quotas(session, {"L-BD136A63": 450})
    check = by_check(preflight.run_checks(dev_cfg(), session), "EKS quota L-BD136A63 (Nodes per managed node group)")
    assert (
        check.status == preflight.PASS
        and check.detail == "450 nodes (applied) hold every group's maxSize (the largest: 3)"
    )


def test_a_group_above_the_accounts_quota_fails_with_how_to_raise_it(session):
    seen = answer(
        session,
        "service-quotas",
        "GetServiceQuota",
        lambda request: (
            {"Quota": {"ServiceCode": "eks", "QuotaCode": "L-BD136A63", "Value": 450.0}}
            if json.loads(request["body"]) == {"ServiceCode": "eks", "QuotaCode": "L-BD136A63"}
            else Error("NoSuchResourceException")
        ),
    )
    # 500 x p3.2xlarge (30 addresses each) fit /18 subnets: the plan only warns (stacks/config/quota_warnings.py).
    groups = [
        {"name": "p3", "instanceType": "p3.2xlarge", "maxSize": 500},
        {"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2},
    ]
    cfg = cfg_of(minimal_values(gpuNodeGroups=groups, network={"privateSubnetPrefix": 18}))
    check = by_check(preflight.run_checks(cfg, session), "EKS quota L-BD136A63")
    assert check.status == preflight.FAIL, check.line()
    assert check.detail == "450 nodes (applied) per node group, but p3: maxSize 500: EKS refuses the group"
    assert (
        "--service-code eks --quota-code L-BD136A63 --desired-value 500" in check.fix
        and "lower maxSize in Pulumi.dev.yaml" in check.fix
    )
    assert {"ServiceCode": "eks", "QuotaCode": "L-BD136A63"} in [json.loads(r["body"]) for r in seen]


def test_an_account_with_a_raised_quota_passes(session):
    answer_quotas(session, {"L-BD136A63": 1000})
    cfg = cfg_of(
        minimal_values(
            gpuNodeGroups=[{"name": "p3", "instanceType": "p3.2xlarge", "maxSize": 520}],
            network={"privateSubnetPrefix": 18},
        )
    )
    assert by_check(preflight.run_checks(cfg, session), "EKS quota L-BD136A63").status == preflight.PASS


def test_an_unreadable_node_group_quota_is_a_skip(session):
    answer_quotas(session, {})
    answer(session, "service-quotas", "GetAWSDefaultServiceQuota", lambda _r: Error("NoSuchResourceException"))
    check = by_check(preflight.run_checks(dev_cfg(), session), "EKS quota L-BD136A63")
    assert check.status == preflight.SKIP and "--service-code eks --quota-code L-BD136A63" in check.detail
