"""Preflight's check of EKS's nodes-per-managed-node-group quota (Service Quotas eks L-BD136A63,
issue 26 item 4) against every group's maxSize: GetServiceQuota answered by a botocore stub
validated against the service model (tests/aws_stubs.py), as tests/test_preflight.py does for the
EC2 vCPU quotas."""

from __future__ import annotations

import json

import pytest

from infra import preflight
from stacks.config.models import NAMESPACE
from stacks.config.quota_warnings import managed_node_groups, quota_warnings
from tests.aws_stubs import Error, answer, answer_quotas, new_session
from tests.helpers import START, block_group, block_values, by_check, cfg_of, dev_cfg, minimal_values, zulu


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


# EKS's managed node groups per cluster (Service Quotas eks L-6D54EA21, 30 by default, adjustable; issue 37):
# a plan warning above the default (stacks/config/quota_warnings.py), a preflight check against the account.
COUNT_CHECK = "EKS quota L-6D54EA21 (Managed node groups per cluster)"


def many_groups(gpu_groups: int) -> dict:
    groups = [{"name": f"g{i}", "instanceType": "p4d.24xlarge", "maxSize": 1} for i in range(gpu_groups)]
    return minimal_values(gpuNodeGroups=groups)


@pytest.mark.parametrize("gpu_groups, warned", [(29, False), (30, True)])
def test_node_groups_above_the_default_per_cluster_plan_with_a_warning(gpu_groups, warned):
    found = [str(p) for p in quota_warnings(cfg_of(many_groups(gpu_groups))) if "L-6D54EA21" in p.message]
    expected = (
        f"{NAMESPACE}:gpuNodeGroups: 31 managed node groups (the system group and 30 GPU groups) are more than 30, "
        "EKS's default quota of managed node groups per cluster ('Managed node groups per cluster', Service Quotas "
        "eks L-6D54EA21, adjustable): EKS refuses the groups past it unless the account's quota is raised; preflight "
        "reads it (aws service-quotas get-service-quota --service-code eks --quota-code L-6D54EA21)"
    )
    assert found == ([expected] if warned else [])


def test_a_capacity_block_group_without_its_block_is_not_counted():
    waiting = block_group(
        capacityReservationId=None, capacity={"offering": {"durationHours": 24, "earliestStart": zulu(START)}}
    )
    cfg = cfg_of(block_values(waiting, block_group(name="built")))
    assert managed_node_groups(cfg) == ["system", "built"]


def test_more_node_groups_than_the_accounts_quota_fail_with_how_to_raise_it(session):
    answer_quotas(session, {"L-6D54EA21": 30})
    check = by_check(preflight.run_checks(cfg_of(many_groups(30)), session), COUNT_CHECK)
    assert check.status == preflight.FAIL, check.line()
    assert check.detail.startswith(
        "30 managed node groups per cluster (applied), but the stack has 31 (system, g0, g1,"
    ) and check.detail.endswith("g29): EKS refuses the groups past 30")
    assert "--service-code eks --quota-code L-6D54EA21 --desired-value 31" in check.fix


def test_a_raised_node_group_quota_passes(session):
    answer_quotas(session, {"L-6D54EA21": 40})
    check = by_check(preflight.run_checks(cfg_of(many_groups(30)), session), COUNT_CHECK)
    assert check.status == preflight.PASS and check.detail == "40 (applied) hold the stack's 31 managed node groups"


def test_an_unreadable_node_group_count_quota_is_a_skip(session):
    answer_quotas(session, {})
    answer(session, "service-quotas", "GetAWSDefaultServiceQuota", lambda _r: Error("NoSuchResourceException"))
    check = by_check(preflight.run_checks(dev_cfg(), session), COUNT_CHECK)
    assert check.status == preflight.SKIP and "the stack has 3 managed node groups" in check.detail
