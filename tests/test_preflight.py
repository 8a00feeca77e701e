"""`python -m infra preflight`: the checks against moto's recorded AWS data.

moto answers EC2 (AZs, instance type offerings, instance types) from AWS's recorded data. It does
not implement the EC2 Service Quotas codes, DescribeCapacityReservations or EKS
DescribeClusterVersions; tests that need those answer the one call with a botocore
``before-call`` hook (the same path a real response takes through the client), validated against
the operation's output shape in botocore's model (tests/aws_stubs.py).
"""

from __future__ import annotations

import datetime
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import offline, preflight
from infra.__main__ import main
from stacks.config.stackfile import load_yaml
from stacks.placement import choose_gpu_az
from tests.aws_stubs import Error, answer, answer_quotas, new_session
from tests.helpers import NS, ROOT, by_check, cfg_of, clean_aws_env, dev_cfg, dev_values, minimal_values

CR_ID = "cr-0123456789abcdef0"
# The day the checks run on (the support window depends on it): far from any end of support.
TODAY = datetime.date(2026, 11, 24)


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def session(aws):
    return new_session()


def answer_eks_versions(session: Any, versions: dict[str, str], ends: dict[str, str] | None = None) -> None:
    """DescribeClusterVersions; ``ends``: endOfStandardSupportDate per version (ISO dates)."""

    def respond(request: dict):
        wanted = (request.get("query_string") or {}).get("clusterVersions")
        items = [{"clusterVersion": v, "status": s} for v, s in versions.items() if not wanted or v in wanted]
        for item in items:
            if ends and item["clusterVersion"] in ends:
                item["endOfStandardSupportDate"] = ends[item["clusterVersion"]]
        return {"clusterVersions": items}

    answer(session, "eks", "DescribeClusterVersions", respond)


def answer_addons(session: Any, published: dict[str, list[str]] | None = None) -> None:
    """DescribeAddonVersions as EKS answers it: by default every build the stack pins is published."""
    from stacks.addons import addon_pins

    if published is None:
        published = {p.name: [p.version, "v0.0.1-eksbuild.1"] for p in addon_pins(dev_cfg())}

    def respond(request: dict):
        query = request.get("query_string") or {}
        name = query.get("addonName")
        k8s = query.get("kubernetesVersion")
        builds = [
            {"addonVersion": v, "compatibilities": [{"clusterVersion": k8s, "defaultVersion": i == 0}]}
            for i, v in enumerate(published.get(name, []))
        ]
        return {"addons": [{"addonName": name, "addonVersions": builds}] if builds else []}

    answer(session, "eks", "DescribeAddonVersions", respond)
    answer_addon_configuration(session)


def answer_addon_configuration(session: Any) -> None:
    """DescribeAddonConfiguration as EKS answers it for the builds whose schema is vendored: the node
    monitoring agent's (upstream's charts/configuration.schema.json at the build's tag)."""
    from facts import versions

    schemas = {
        ("eks-node-monitoring-agent", build): ROOT / versions.NODE_MONITORING_AGENT_SCHEMA[k8s].file
        for k8s, build in versions.NODE_MONITORING_AGENT_ADDON.items()
    }

    def respond(request: dict):
        query = request.get("query_string") or {}
        key = (query.get("addonName"), query.get("addonVersion"))
        if key not in schemas:
            return Error("ResourceNotFoundException", f"no vendored schema for {key}", 404)
        return {"addonName": key[0], "addonVersion": key[1], "configurationSchema": schemas[key].read_text()}

    answer(session, "eks", "DescribeAddonConfiguration", respond)


def answer_reservation(session: Any, **reservation: Any) -> None:
    cr = {
        "CapacityReservationId": CR_ID,
        "InstanceType": "p4d.24xlarge",
        "AvailabilityZone": "us-west-2a",
        "State": "active",
        "ReservationType": "default",
        "TotalInstanceCount": 2,
        **reservation,
    }
    answer(session, "ec2", "DescribeCapacityReservations", lambda _body: {"CapacityReservations": [cr]})


def statuses(results: list[preflight.CheckResult]) -> set[str]:
    return {r.status for r in results}


def reserved_group(**overrides: Any) -> dict[str, Any]:
    group = {
        "name": "p4d",
        "instanceType": "p4d.24xlarge",
        "minSize": 0,
        "desiredSize": 0,
        "maxSize": 2,
        "capacityReservationId": CR_ID,
    }
    group.update(overrides)
    return group


# ---------------------------------------------------------------------------------------------
# The dev stack
# ---------------------------------------------------------------------------------------------


def test_dev_stack_passes_every_check(session):
    answer_quotas(session, {"L-417A185B": 384, "L-7212CCBC": 384, "L-BD136A63": 450, "L-6D54EA21": 30})
    answer_eks_versions(session, {"1.35": "standard-support", "1.36": "standard-support"})
    answer_addons(session)
    results = preflight.run_checks(dev_cfg(), session, today=TODAY)

    assert statuses(results) == {preflight.PASS}, "\n".join(r.line() for r in results)
    checks = [r.check for r in results]
    for expected in (
        "c5.2xlarge (system nodes)",
        "p4d.24xlarge (GPU group p4d)",
        "p3dn.24xlarge (GPU group p3dn)",
        "GPU AZ",
        "subnet AZs",
    ):
        assert expected in checks
    assert "the group wires 4" in by_check(results, "EFA for GPU group p4d").detail
    assert "the group wires 1" in by_check(results, "EFA for GPU group p3dn").detail
    on_demand = by_check(results, "on-demand vCPU quota L-417A185B")
    assert "384 vCPUs (applied) covers the 192 needed" in on_demand.detail and "p4d: 2 x 96" in on_demand.detail
    spot = by_check(results, "spot vCPU quota L-7212CCBC")
    assert "192 needed" in spot.detail and "p3dn: 2 x 96" in spot.detail
    assert by_check(results, "Kubernetes 1.36").status == preflight.PASS
    out = io.StringIO()
    assert preflight.report(results, out) == 0
    assert out.getvalue().splitlines()[-1].startswith("Ready:")


def test_auto_picks_us_west_2b_for_dev_like_the_program(session, dev_plan):
    results = preflight.run_checks(dev_cfg(), session)
    az = by_check(results, "GPU AZ")
    assert az.status == preflight.PASS
    assert "'auto' picked us-west-2b" in az.detail
    assert f"set {NS}:gpuAvailabilityZone: us-west-2b in Pulumi.dev.yaml" in az.detail
    assert "private subnets in us-west-2a, us-west-2b" in by_check(results, "subnet AZs").detail
    # The Pulumi program (offline engine, same recorded data) placed the GPU groups in the same AZ.
    assert dev_plan.outputs["gpuAvailabilityZone"] == "us-west-2b"


def test_auto_follows_the_offerings(session):
    # p5e.48xlarge is offered only in us-west-2c, so together with p3dn (2b, 2c) auto picks 2c.
    groups = [
        {"name": "h200", "instanceType": "p5e.48xlarge", "maxSize": 1},
        {"name": "v100", "instanceType": "p3dn.24xlarge", "maxSize": 1},
    ]
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=groups)), session)
    assert "'auto' picked us-west-2c" in by_check(results, "GPU AZ").detail
    assert by_check(results, "p5e.48xlarge").detail == "offered in us-west-2c"
    # The same choice as the function the program calls, fed from the same recorded data.
    offered = offline.az_offerings("us-west-2")
    assert (
        choose_gpu_az("auto", offline.region_azs("us-west-2"), offered, ["p3dn.24xlarge", "p5e.48xlarge"])
        == "us-west-2c"
    )


def test_explicit_az_that_does_not_offer_a_type_fails_naming_where_it_is_offered(session):
    results = preflight.run_checks(dev_cfg(gpuAvailabilityZone="us-west-2a"), session)
    az = by_check(results, "GPU AZ")
    assert az.status == preflight.FAIL
    assert "'us-west-2a' does not offer p3dn.24xlarge" in az.detail
    assert "p3dn.24xlarge is offered in us-west-2b, us-west-2c" in az.detail
    assert f"set {NS}:gpuAvailabilityZone to one of us-west-2b, us-west-2c" in az.fix
    assert az.line().startswith("FAIL  GPU AZ: ") and " -> " in az.line()
    assert preflight.report(results, io.StringIO()) == 1


def test_explicit_az_that_offers_every_type_passes(session):
    results = preflight.run_checks(dev_cfg(gpuAvailabilityZone="us-west-2c"), session)
    az = by_check(results, "GPU AZ")
    assert az.status == preflight.PASS and az.detail.startswith("us-west-2c (from config) offers")


def test_type_offered_nowhere_in_the_region_fails(session):
    groups = [{"name": "v100", "instanceType": "p3.2xlarge", "maxSize": 1}]
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=groups)), session)
    line = by_check(results, "p3.2xlarge (GPU group v100)")
    assert line.status == preflight.FAIL and "no AZ of us-west-2 offers p3.2xlarge" in line.detail
    assert by_check(results, "GPU AZ").status == preflight.FAIL
    assert by_check(results, "subnet AZs").status == preflight.SKIP


def test_too_many_subnet_azs_fail(session):
    results = preflight.run_checks(dev_cfg(network={"vpcCidr": "10.20.0.0/16", "availabilityZoneCount": 6}), session)
    subnets = by_check(results, "subnet AZs")
    assert subnets.status == preflight.FAIL and "the region has 4" in subnets.detail


def test_efa_check_compares_the_catalog_with_what_ec2_reports(session):
    real = session.client("ec2").describe_instance_types(InstanceTypes=["p3dn.24xlarge", "p4d.24xlarge"])[
        "InstanceTypes"
    ]
    items = {i["InstanceType"]: i for i in real}
    items["p4d.24xlarge"]["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"] = 2
    items["p3dn.24xlarge"]["NetworkInfo"]["EfaSupported"] = False

    def respond(request: dict):
        name = request["body"]["InstanceType.1"]
        return {"InstanceTypes": [items[name]]}

    answer(session, "ec2", "DescribeInstanceTypes", respond)
    results = preflight.run_checks(dev_cfg(), session)
    p4d = by_check(results, "EFA for GPU group p4d")
    assert (
        p4d.status == preflight.FAIL
        and "the group wires 4 EFA interfaces (instance catalog) but EC2 reports at most 2" in p4d.detail
    )
    p3dn = by_check(results, "EFA for GPU group p3dn")
    assert p3dn.status == preflight.FAIL and "set efa: false for group p3dn" in p3dn.fix


def deploy_gpu_subnet(session: Any, az: str, stack: str = "dev") -> str:
    """A GPU subnet as `pulumi up` of ``stack`` leaves it (the tags the program looks it up by)."""
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    tags = {
        "gputraining/project": "gpu-training",
        "gputraining/stack": stack,
        "gputraining/gpu-az": "true",
        "Name": f"gpu-training-{stack}-private-{az}",
    }
    spec = [{"ResourceType": "subnet", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    return ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.32.0/19", AvailabilityZone=az, TagSpecifications=spec)[
        "Subnet"
    ]["SubnetId"]


def test_auto_keeps_the_az_of_the_deployed_gpu_subnet(session):
    subnet = deploy_gpu_subnet(session, "us-west-2c")  # a new dev stack would go to us-west-2b
    results = preflight.run_checks(dev_cfg(), session)
    az = by_check(results, "GPU AZ")
    assert az.status == preflight.PASS
    assert az.detail.startswith(
        f"'auto' keeps us-west-2c, where this stack already has its GPU subnet ({subnet}), and it offers "
        "p3dn.24xlarge, p4d.24xlarge"
    )
    assert "private subnets in us-west-2a, us-west-2c" in by_check(results, "subnet AZs").detail
    # Another stack's GPU subnet does not count.
    deploy_gpu_subnet(session, "us-west-2d", stack="prod")
    assert by_check(preflight.run_checks(dev_cfg(), session), "GPU AZ").detail.startswith("'auto' keeps us-west-2c")


def test_auto_refuses_a_type_the_deployed_az_lacks(session):
    subnet = deploy_gpu_subnet(session, "us-west-2b")
    groups = [*dev_values()[f"{NS}:gpuNodeGroups"], {"name": "h200", "instanceType": "p5en.48xlarge", "maxSize": 1}]
    results = preflight.run_checks(dev_cfg(gpuNodeGroups=groups), session)
    az = by_check(results, "GPU AZ")
    assert az.status == preflight.FAIL
    assert (
        f"'auto' keeps us-west-2b, where this stack already has its GPU subnet ({subnet}), and us-west-2b does not "
        "offer p5en.48xlarge"
    ) in az.detail
    assert "p5en.48xlarge is offered in us-west-2a, us-west-2c, us-west-2d" in az.detail
    assert az.fix == (
        f"choose GPU types us-west-2b offers, or move the GPU AZ on purpose: set {NS}:gpuAvailabilityZone to one of "
        "us-west-2c in Pulumi.dev.yaml (that replaces the GPU node groups and FSx for Lustre)"
    )


def test_an_explicit_move_of_a_deployed_stack_is_a_warning(session):
    deploy_gpu_subnet(session, "us-west-2b")
    results = preflight.run_checks(dev_cfg(gpuAvailabilityZone="us-west-2c"), session)
    assert by_check(results, "GPU AZ").status == preflight.PASS
    move = by_check(results, "move of the GPU AZ")
    assert move.status == preflight.WARN
    assert move.detail.startswith("the GPU AZ MOVES from us-west-2b (where this stack's GPU subnet is) to us-west-2c")
    assert "private subnets in us-west-2a, us-west-2c" in move.detail
    assert not [
        r
        for r in preflight.run_checks(dev_cfg(gpuAvailabilityZone="us-west-2b"), session)
        if r.check == "move of the GPU AZ"
    ]


def test_a_refused_subnet_lookup_is_its_own_line(session):
    answer(session, "ec2", "DescribeSubnets", lambda _request: Error("UnauthorizedOperation", "not allowed", 403))
    results = preflight.run_checks(dev_cfg(), session)
    lookup = by_check(results, "deployed GPU subnet")
    assert lookup.status == preflight.FAIL and "ec2:DescribeSubnets" in lookup.fix
    assert "could not be looked up" in by_check(results, "GPU AZ").detail


def test_groups_without_efa_get_no_efa_line(session):
    values = dev_values()
    for g in values[f"{NS}:gpuNodeGroups"]:
        g["efa"] = False
    results = preflight.run_checks(cfg_of(values), session)
    assert not [r for r in results if r.check.startswith("EFA")]


# ---------------------------------------------------------------------------------------------
# Quotas
# ---------------------------------------------------------------------------------------------


def test_on_demand_quota_shortfall_says_by_how_much(session):
    answer_quotas(session, {"L-417A185B": 96, "L-7212CCBC": 1000})
    results = preflight.run_checks(dev_cfg(), session)
    quota = by_check(results, "on-demand vCPU quota L-417A185B")
    assert quota.status == preflight.FAIL
    assert "96 vCPUs (applied) but 192 are needed at maxSize (p4d: 2 x 96)" in quota.detail
    assert "short by 96 vCPUs" in quota.detail
    assert "--quota-code L-417A185B --desired-value 192" in quota.fix
    assert by_check(results, "spot vCPU quota L-7212CCBC").status == preflight.PASS


def test_spot_quota_shortfall(session):
    answer_quotas(session, {"L-417A185B": 1000, "L-7212CCBC": 100})
    results = preflight.run_checks(dev_cfg(), session)
    spot = by_check(results, "spot vCPU quota L-7212CCBC")
    assert spot.status == preflight.FAIL and "short by 92 vCPUs" in spot.detail


def test_on_demand_quota_sums_groups_and_leaves_capacity_blocks_out(session):
    groups = [
        {"name": "a100", "instanceType": "p4d.24xlarge", "maxSize": 3},
        {"name": "a100b", "instanceType": "p4de.24xlarge", "maxSize": 1},
        {
            "name": "h100",
            "instanceType": "p5.48xlarge",
            "maxSize": 4,
            "capacityType": "capacity-block",
            "capacityReservationId": CR_ID,
        },
    ]
    answer_quotas(session, {"L-417A185B": 384})
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=groups)), session)
    quota = by_check(results, "on-demand vCPU quota")
    # 3 x 96 + 1 x 96 = 384; the capacity block's 4 x 192 vCPUs do not count.
    assert quota.status == preflight.PASS, quota.line()
    assert "covers the 384 needed at maxSize (a100: 3 x 96, a100b: 1 x 96)" in quota.detail
    assert "capacity-block groups h100 do not count" in quota.detail
    assert not [r for r in results if r.check.startswith("spot vCPU quota")]


def test_unreadable_quota_is_a_skip_not_a_failure(session):
    # moto's Service Quotas has no EC2 codes: GetServiceQuota says NoSuchResource, and it does not
    # implement GetAWSDefaultServiceQuota.
    results = preflight.run_checks(dev_cfg(), session)
    quota = by_check(results, "on-demand vCPU quota L-417A185B")
    assert quota.status == preflight.SKIP
    assert "192 vCPUs needed" in quota.detail and "get-service-quota" in quota.detail


def test_default_quota_is_used_when_no_applied_value(session):
    answer_quotas(session, {})
    answer(
        session,
        "service-quotas",
        "GetAWSDefaultServiceQuota",
        lambda request: {"Quota": {"QuotaCode": json.loads(request["body"])["QuotaCode"], "Value": 0.0}},
    )
    quota = by_check(preflight.run_checks(dev_cfg(), session), "on-demand vCPU quota")
    assert quota.status == preflight.FAIL and "0 vCPUs (AWS default)" in quota.detail and "short by 192" in quota.detail


def test_quota_access_denied_fails_with_the_permission_to_grant(session):
    answer(session, "service-quotas", "GetServiceQuota", lambda _b: Error("AccessDeniedException", "no"))
    quota = by_check(preflight.run_checks(dev_cfg(), session), "on-demand vCPU quota")
    assert quota.status == preflight.FAIL and "servicequotas:GetServiceQuota" in quota.fix


# ---------------------------------------------------------------------------------------------
# Capacity reservations
# ---------------------------------------------------------------------------------------------


def test_reservation_in_the_gpu_az_passes(session):
    answer_reservation(session, AvailabilityZone="us-west-2a")
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=[reserved_group()])), session)
    cr = by_check(results, f"capacity reservation {CR_ID}")
    assert cr.status == preflight.PASS and "in us-west-2a, active" in cr.detail


def test_reservation_in_another_az_fails(session):
    # p4d alone: auto picks us-west-2a; the reservation is in us-west-2c.
    answer_reservation(session, AvailabilityZone="us-west-2c")
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=[reserved_group()])), session)
    cr = by_check(results, f"capacity reservation {CR_ID} (GPU group p4d)")
    assert cr.status == preflight.FAIL
    assert "it is in us-west-2c but the GPU AZ is us-west-2a ('auto' picked)" in cr.detail
    assert f"set {NS}:gpuAvailabilityZone: us-west-2c" in cr.fix


@pytest.mark.parametrize(
    "reservation, group, message",
    [
        ({"InstanceType": "p5.48xlarge"}, {}, "it reserves p5.48xlarge, the group uses p4d.24xlarge"),
        ({"State": "expired"}, {}, "its state is expired"),
        ({"ReservationType": "default"}, {"capacityType": "capacity-block"}, "not a capacity block"),
        ({"ReservationType": "capacity-block", "State": "scheduled"}, {}, "it is a capacity block"),
    ],
)
def test_reservation_mismatches_fail(session, reservation, group, message):
    answer_reservation(session, **reservation)
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=[reserved_group(**group)])), session)
    cr = by_check(results, f"capacity reservation {CR_ID}")
    assert cr.status == preflight.FAIL and message in cr.detail


def test_missing_reservation_fails(session):
    answer(
        session,
        "ec2",
        "DescribeCapacityReservations",
        lambda _b: Error("InvalidCapacityReservationId.NotFound", f"{CR_ID} not found"),
    )
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=[reserved_group()])), session)
    cr = by_check(results, f"capacity reservation {CR_ID}")
    assert cr.status == preflight.FAIL and "does not exist in us-west-2" in cr.detail
    assert "capacityReservationId of group p4d" in cr.fix


def test_reservation_call_unimplemented_by_the_endpoint_is_a_skip(session):
    # moto does not implement DescribeCapacityReservations.
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=[reserved_group()])), session)
    assert by_check(results, f"capacity reservation {CR_ID}").status == preflight.SKIP


def test_reservation_access_denied_fails(session):
    answer(session, "ec2", "DescribeCapacityReservations", lambda _b: Error("UnauthorizedOperation", "no"))
    results = preflight.run_checks(cfg_of(minimal_values(gpuNodeGroups=[reserved_group()])), session)
    cr = by_check(results, f"capacity reservation {CR_ID}")
    assert cr.status == preflight.FAIL and "ec2:DescribeCapacityReservations" in cr.fix


# ---------------------------------------------------------------------------------------------
# Kubernetes version
# ---------------------------------------------------------------------------------------------


def test_kubernetes_version_not_offered_fails(session):
    answer_eks_versions(session, {"1.34": "extended-support", "1.35": "standard-support"})
    k8s = by_check(preflight.run_checks(dev_cfg(), session), "Kubernetes 1.36")
    assert k8s.status == preflight.FAIL and "it offers 1.34, 1.35" in k8s.detail


def test_unsupported_kubernetes_version_fails(session):
    answer_eks_versions(session, {"1.36": "unsupported"})
    k8s = by_check(preflight.run_checks(dev_cfg(), session), "Kubernetes 1.36")
    assert k8s.status == preflight.FAIL and "unsupported" in k8s.detail


def test_kubernetes_check_skips_when_the_endpoint_lacks_the_call(session):
    k8s = by_check(preflight.run_checks(dev_cfg(), session), "Kubernetes 1.36")
    assert k8s.status == preflight.SKIP and "DescribeClusterVersions" in k8s.detail


def test_server_error_pages_become_one_skip_line(session):
    # What an emulator in server mode answers for a call it lacks: HTTP 500 and an HTML page.
    page = "<!doctype html>\n<html>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n</html>"
    answer(session, "eks", "DescribeClusterVersions", lambda _r: Error("500", page, status=500))
    answer(session, "service-quotas", "GetServiceQuota", lambda _r: Error("InternalFailure", "try again", status=500))
    results = preflight.run_checks(dev_cfg(), session)
    k8s = by_check(results, "Kubernetes 1.36")
    assert (
        k8s.status == preflight.SKIP
        and "server error (500: 500 Internal Server Error Internal Server Error)" in k8s.detail
    )
    assert by_check(results, "on-demand vCPU quota").status == preflight.SKIP
    assert all("\n" not in r.line() and "<" not in r.line() for r in results)


def test_standard_support_end_dates_are_pinned_for_every_supported_version():
    from facts import versions

    assert set(versions.KUBERNETES_STANDARD_SUPPORT_ENDS) == set(versions.KUBERNETES_SUPPORTED)
    # The EKS Kubernetes version calendar (checked 2026-11).
    assert versions.KUBERNETES_STANDARD_SUPPORT_ENDS["1.35"] == datetime.date(2027, 3, 27)
    assert versions.KUBERNETES_STANDARD_SUPPORT_ENDS["1.36"] == datetime.date(2027, 8, 2)


@pytest.mark.parametrize(
    "today, status, words",
    [
        (datetime.date(2027, 6, 2), preflight.PASS, "ends 2027-08-02, in 61 days (pinned in facts/versions.py)"),
        (datetime.date(2027, 6, 3), preflight.WARN, "ends 2027-08-02, in 60 days"),
        (datetime.date(2027, 8, 1), preflight.WARN, "in 1 day"),
        (datetime.date(2027, 8, 2), preflight.FAIL, "ended 2027-08-02"),
        (datetime.date(2027, 9, 1), preflight.FAIL, "would try to downgrade it"),
    ],
)
def test_the_end_of_standard_support_warns_60_days_ahead_then_fails(session, today, status, words):
    answer_eks_versions(session, {"1.36": "standard-support"})
    result = by_check(preflight.run_checks(dev_cfg(), session, today=today), "EKS standard support of Kubernetes 1.36")
    assert result.status == status and words in result.detail, result.line()
    if status != preflight.PASS:
        assert "set cluster.kubernetesVersion in Pulumi.dev.yaml to the next minor" in result.line()


def test_a_warning_does_not_block_and_is_counted(session):
    answer_quotas(session, {"L-417A185B": 384, "L-7212CCBC": 384, "L-BD136A63": 450, "L-6D54EA21": 30})
    answer_eks_versions(session, {"1.36": "standard-support"})
    answer_addons(session)
    results = preflight.run_checks(dev_cfg(), session, today=datetime.date(2027, 7, 1))
    assert statuses(results) == {preflight.PASS, preflight.WARN}
    out = io.StringIO()
    assert preflight.report(results, out) == preflight.EXIT_OK
    text = out.getvalue()
    assert "WARN  EKS standard support of Kubernetes 1.36: ends 2027-08-02, in 32 days" in text
    assert text.splitlines()[-1].startswith("Ready:") and "1 warning" in text.splitlines()[-1]


def test_the_date_eks_reports_wins_over_the_pinned_one(session):
    # AWS moved the date (as it can): its answer counts, and the stale pin is named.
    answer_eks_versions(session, {"1.36": "standard-support"}, ends={"1.36": "2027-06-15T00:00:00Z"})
    result = by_check(
        preflight.run_checks(dev_cfg(), session, today=datetime.date(2027, 5, 1)),
        "EKS standard support of Kubernetes 1.36",
    )
    assert result.status == preflight.WARN
    assert "ends 2027-06-15, in 45 days (EKS reports; facts/versions.py pins 2027-08-02: update it)" in result.detail


def test_the_support_window_is_checked_from_the_pin_when_eks_does_not_answer(session):
    # No DescribeClusterVersions (the emulator lacks it): the version check skips, the window does not.
    results = preflight.run_checks(
        dev_cfg(cluster={"kubernetesVersion": "1.35"}), session, today=datetime.date(2027, 3, 1)
    )
    assert by_check(results, "Kubernetes 1.35").status == preflight.SKIP
    window = by_check(results, "EKS standard support of Kubernetes 1.35")
    assert (
        window.status == preflight.WARN and "ends 2027-03-27, in 26 days (pinned in facts/versions.py)" in window.detail
    )


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def preflight_cfg(stack: str):
    from infra.plan import load_config

    return load_config(stack, ROOT)


def _project(tmp_path: Path, stack: str, change: Callable[[dict], None] | None = None, text: str | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    doc = load_yaml((ROOT / "Pulumi.dev.yaml").read_text())
    if change:
        change(doc["config"])
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text if text is not None else yaml.safe_dump(doc))
    return tmp_path


def test_cli_exit_0_for_dev(aws, capsys, monkeypatch):
    monkeypatch.setattr(preflight, "current_date", lambda: TODAY)
    assert main(["preflight", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    # The region is the stack's (us-west-2), not AWS_DEFAULT_REGION (eu-central-1).
    lines = out.splitlines()
    assert lines[0] == "Preflight of gpu-training/dev, region us-west-2"
    assert lines[1].startswith("PASS  placeholders from the examples")  # before any AWS call
    assert lines[2] == "AWS account 123456789012 as arn:aws:sts::123456789012:user/moto"
    assert "PASS  GPU AZ: 'auto' picked us-west-2b" in out
    assert "FAIL" not in out
    assert out.splitlines()[-1].startswith("Ready:")


def test_cli_exit_1_when_a_check_fails(aws, capsys, tmp_path):
    root = _project(tmp_path / "proj", "stage", lambda c: c.update({f"{NS}:gpuAvailabilityZone": "us-west-2d"}))
    assert main(["preflight", "--stack", "stage", "--cwd", str(root)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  GPU AZ: gpu-training:gpuAvailabilityZone: 'us-west-2d' does not offer p3dn.24xlarge" in out
    assert "in Pulumi.stage.yaml" in out
    assert out.splitlines()[-1].startswith("Not ready: 1 check(s) failed")


def test_cli_exit_2_on_bad_config(aws, capsys, tmp_path):
    def bad(c):
        c[f"{NS}:gpuNodeGroups"][0]["maxSize"] = 0
        c[f"{NS}:gpuNodeGroups"][1]["instanceType"] = "p9.mega"

    root = _project(tmp_path / "proj", "broken", bad)
    assert main(["preflight", "--stack", "broken", "--cwd", str(root)]) == 2
    captured = capsys.readouterr()
    assert "invalid stack config (" in captured.err
    assert f"{NS}:gpuNodeGroups[p3dn].instanceType: 'p9.mega' is not a GPU type" in captured.err
    assert "gpuNodeGroups[p4d].maxSize" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_cli_exit_2_on_unknown_stack(aws, capsys):
    assert main(["preflight", "--stack", "no-such-stack"]) == 2
    assert "no stack file Pulumi.no-such-stack.yaml" in capsys.readouterr().err


def test_cli_without_credentials_exits_1_with_one_line(monkeypatch, tmp_path, capsys):
    clean_aws_env(monkeypatch, tmp_path)  # no keys, no profile files, no instance metadata
    assert main(["preflight", "--stack", "dev"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: no AWS credentials found")
    assert "Traceback" not in captured.err
    assert captured.out.splitlines()[1:] == [
        "PASS  placeholders from the examples: none (no documentation CIDR, no example account)"
    ]


def test_cli_without_credentials_still_reports_the_placeholders_first(monkeypatch, tmp_path, capsys):
    """Prod's example values are found before any AWS call, so a newcomer without an account sees them."""
    from stacks.config.placeholders import placeholders

    clean_aws_env(monkeypatch, tmp_path)
    expected = placeholders(preflight_cfg("prod"))
    assert expected, "prod carries the examples' placeholders"
    assert main(["preflight", "--stack", "prod"]) == 1
    captured = capsys.readouterr()
    fails = [line for line in captured.out.splitlines() if line.startswith("FAIL  placeholders from the examples")]
    assert [p.key for p in expected] == [p.key for p in expected if any(p.key in line for line in fails)]
    assert len(fails) == len(expected)
    assert f"({len(expected)} checks above failed already)" in captured.err and "Traceback" not in captured.err


# ---------------------------------------------------------------------------------------------
# Managed add-on builds
# ---------------------------------------------------------------------------------------------


def test_every_pinned_addon_build_is_checked_for_the_kubernetes_version(session):
    from stacks.addons import addon_pins

    answer_addons(session)
    results = preflight.run_checks(dev_cfg(), session)
    pins = addon_pins(dev_cfg())
    assert {p.name for p in pins} >= {
        "vpc-cni",
        "coredns",
        "kube-proxy",
        "eks-pod-identity-agent",
        "aws-efs-csi-driver",
        "aws-fsx-csi-driver",
    }
    for pin in pins:
        line = by_check(results, f"add-on {pin.name} {pin.version}")
        assert line.status == preflight.PASS and "published for Kubernetes 1.36" in line.detail, line.line()


def test_an_addon_build_eks_does_not_publish_fails_naming_what_it_offers(session):
    from facts import versions
    from stacks.addons import addon_pins

    published = {p.name: [p.version] for p in addon_pins(dev_cfg())}
    published["coredns"] = ["v1.14.3-eksbuild.20", "v1.14.3-eksbuild.19"]
    answer_addons(session, published)
    line = by_check(preflight.run_checks(dev_cfg(), session), f"add-on coredns {versions.COREDNS_ADDON['1.36']}")
    assert line.status == preflight.FAIL
    assert "it offers v1.14.3-eksbuild.20, v1.14.3-eksbuild.19" in line.detail and "v1.14.3-eksbuild.20" in line.fix


def test_addon_checks_skip_where_the_endpoint_lacks_the_call(session):
    results = preflight.run_checks(dev_cfg(), session)
    lines = [r for r in results if r.check.startswith("add-on ")]
    assert lines and {r.status for r in lines} == {preflight.SKIP}


def test_configuration_values_are_checked_against_the_build_schema(session, monkeypatch):
    from stacks import addons

    pin = addons.AddonPin("aws-fsx-csi-driver", "v1.9.0-eksbuild.1", {"node": {"tolerateAllTaints": "yes"}})
    schema = {
        "type": "object",
        "properties": {
            "node": {
                "type": "object",
                "properties": {"tolerateAllTaints": {"type": "boolean"}},
                "additionalProperties": False,
            }
        },
    }
    answer(
        session,
        "eks",
        "DescribeAddonConfiguration",
        lambda _r: {"addonName": pin.name, "addonVersion": pin.version, "configurationSchema": json.dumps(schema)},
    )
    eks = session.client("eks", region_name="us-west-2")
    (bad,) = preflight._addon_configuration_line(eks, pin, "values")
    assert bad.status == preflight.FAIL and "node/tolerateAllTaints" in bad.detail
    good = addons.AddonPin(pin.name, pin.version, {"node": {"tolerateAllTaints": True}})
    assert preflight._addon_configuration_line(eks, good, "values")[0].status == preflight.PASS


@pytest.mark.parametrize("k8s", ["1.35", "1.36"])
def test_node_monitoring_agent_values_pass_the_builds_real_schema(session, k8s):
    # The vendored configuration.schema.json of the build pinned for the minor, through the same
    # preflight path as against EKS; a GPU group with taints of its own (one without a value).
    from facts import versions

    answer_addons(session, {"eks-node-monitoring-agent": [versions.NODE_MONITORING_AGENT_ADDON[k8s]]})
    taints = [
        {"key": "team", "value": "vision", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "", "effect": "NoExecute"},
    ]
    groups = [{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2, "taints": taints}]
    cfg = cfg_of(minimal_values(cluster={"kubernetesVersion": k8s}, gpuNodeGroups=groups))
    line = by_check(preflight.run_checks(cfg, session), "add-on eks-node-monitoring-agent configuration")
    assert line.status == preflight.PASS, line.line()


def test_node_monitoring_agent_values_with_a_wrong_key_fail_against_the_real_schema(session, monkeypatch):
    from stacks import addons

    answer_addons(session)
    monkeypatch.setattr(
        addons, "node_monitoring_agent_values", lambda cfg: {"dcgmAgent": {"toleration": [{"operator": "Exists"}]}}
    )
    line = by_check(preflight.run_checks(dev_cfg(), session), "add-on eks-node-monitoring-agent configuration")
    assert line.status == preflight.FAIL and "dcgmAgent" in line.detail and "toleration" in line.detail, line.line()


# ---------------------------------------------------------------------------------------------
# SageMaker training quotas
# ---------------------------------------------------------------------------------------------

SM_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"


def sagemaker_job(name: str, nodes: int, **extra: Any) -> dict[str, Any]:
    sm = {"outputPath": f"s3://my-training-output/{name}/", **extra.pop("sagemaker", {})}
    return {
        "name": name,
        "kind": "pytorch-elastic",
        "runtime": "sagemaker",
        "nodeGroup": "p4d",
        "nodes": nodes,
        "image": SM_IMAGE,
        "command": ["torchrun", "/opt/ml/code/train.py"],
        "sagemaker": sm,
        **extra,
    }


def answer_sagemaker_quotas(session: Any, applied: dict[str, float], defaults: dict[str, float] | None = None) -> None:
    def listing(values: dict[str, float]) -> Callable[[dict], Any]:
        def respond(request: dict):
            assert json.loads(request["body"])["ServiceCode"] == "sagemaker"
            return {
                "Quotas": [
                    {
                        "QuotaName": n,
                        "QuotaCode": f"L-{abs(hash(n)) % 10**8:08d}",
                        "Value": v,
                        "ServiceCode": "sagemaker",
                    }
                    for n, v in values.items()
                ]
            }

        return respond

    answer(session, "service-quotas", "ListServiceQuotas", listing(applied))
    answer(session, "service-quotas", "ListAWSDefaultServiceQuotas", listing(defaults or {}))


def test_sagemaker_quotas_sum_the_jobs_of_each_type_and_capacity(session):
    jobs = [
        sagemaker_job("a", 2),
        sagemaker_job("b", 1),
        sagemaker_job("c", 2, sagemaker={"spot": True, "checkpointS3Uri": "s3://my-training-output/c/ckpt/"}),
    ]
    cfg = dev_cfg(jobs=jobs)
    answer_sagemaker_quotas(
        session, {"ml.p4d.24xlarge for training job usage": 3}, {"ml.p4d.24xlarge for spot training job usage": 1}
    )
    results = preflight.run_checks(cfg, session)
    on_demand = by_check(results, "SageMaker quota 'ml.p4d.24xlarge for training job usage'")
    assert (
        on_demand.status == preflight.PASS
        and "covers the 3 instances" in on_demand.detail
        and "a: 2, b: 1" in on_demand.detail
    )
    spot = by_check(results, "SageMaker quota 'ml.p4d.24xlarge for spot training job usage'")
    assert spot.status == preflight.FAIL and "short by 1" in spot.detail
    assert "--service-code sagemaker" in spot.fix and "--desired-value 2" in spot.fix


def test_sagemaker_quota_missing_from_the_listing_is_a_skip(session):
    answer_sagemaker_quotas(session, {})
    check = by_check(preflight.run_checks(dev_cfg(jobs=[sagemaker_job("a", 2)]), session), "SageMaker quota")
    assert (
        check.status == preflight.SKIP
        and "2 instances needed" in check.detail
        and "list-service-quotas" in check.detail
    )


def test_no_sagemaker_quota_lines_without_enabled_sagemaker_jobs(session):
    jobs = [sagemaker_job("a", 2, enabled=False)]
    assert not [r for r in preflight.run_checks(dev_cfg(jobs=jobs), session) if r.check.startswith("SageMaker")]


def test_sagemaker_quota_access_denied_fails_with_the_permission(session):
    answer(session, "service-quotas", "ListServiceQuotas", lambda _r: Error("AccessDeniedException", "no"))
    answer(session, "service-quotas", "ListAWSDefaultServiceQuotas", lambda _r: {"Quotas": []})
    check = by_check(preflight.run_checks(dev_cfg(jobs=[sagemaker_job("a", 1)]), session), "SageMaker training quotas")
    assert check.status == preflight.FAIL and "servicequotas:ListServiceQuotas" in check.fix
