"""The typed stack config: every validation error names its key, the bad value and what is allowed;
all problems are reported together; a valid config gets the documented defaults."""

from __future__ import annotations

import json
import re

import pytest

from facts import catalog, versions
from infra import offline
from stacks import config as stack_config
from stacks.config import ConfigError, Problem, decode_config_values, load
from tests.helpers import NS, dev_values, minimal_values

P4D = "p4d.24xlarge"
RESERVATION = "cr-0123456789abcdef0"


def _load(values):
    return load(values, "gpu-training", "test")


def _problems(values) -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        _load(values)
    problems = info.value.problems
    assert problems, "ConfigError must carry at least one problem"
    assert all(isinstance(p, Problem) for p in problems)
    return problems


def _only_problem(values, key: str) -> str:
    """The one problem ``values`` has: it must be about ``key``. Returns its message."""
    problems = _problems(values)
    assert [p.key for p in problems] == [key], problems
    return problems[0].message


def _group(**fields):
    return {"name": "g", "instanceType": P4D, **fields}


def _groups(*groups):
    """gpuNodeGroups with a valid first group, so index [1] is the one under test."""
    return minimal_values(gpuNodeGroups=[_group(name="ok")] + list(groups))


def _assert_mentions(message: str, *parts: str) -> None:
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


# ----------------------------------------------------------------------------------------------
# Instance types and EFA
# ----------------------------------------------------------------------------------------------


def test_unknown_gpu_instance_type_lists_the_gpu_types():
    msg = _only_problem(_groups(_group(name="b", instanceType="p9.96xlarge")), f"{NS}:gpuNodeGroups[b].instanceType")
    _assert_mentions(msg, "'p9.96xlarge'", *catalog.GPU_TYPES)


def test_cpu_type_for_a_gpu_group_is_rejected():
    msg = _only_problem(
        minimal_values(gpuNodeGroups=[_group(instanceType="c5.2xlarge")]), f"{NS}:gpuNodeGroups[g].instanceType"
    )
    _assert_mentions(msg, "'c5.2xlarge'", "GPU", P4D)


def test_unknown_system_instance_type_lists_the_system_types():
    msg = _only_problem(
        minimal_values(systemNodeGroup={"instanceType": "c9.mega"}), f"{NS}:systemNodeGroup.instanceType"
    )
    _assert_mentions(msg, "'c9.mega'", *catalog.SYSTEM_TYPES)


def test_gpu_type_for_the_system_group_is_rejected():
    msg = _only_problem(minimal_values(systemNodeGroup={"instanceType": P4D}), f"{NS}:systemNodeGroup.instanceType")
    _assert_mentions(msg, f"'{P4D}'", "GPU type", *catalog.SYSTEM_TYPES)


def test_efa_asked_for_on_a_type_without_efa():
    msg = _only_problem(
        minimal_values(gpuNodeGroups=[_group(instanceType="p3.8xlarge", efa=True)]), f"{NS}:gpuNodeGroups[g].efa"
    )
    _assert_mentions(msg, "true", "p3.8xlarge", "no EFA")
    allowed = msg.split("EFA types are", 1)[1]
    listed = {t.strip() for t in allowed.split(",")}
    assert listed == {t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported}
    assert "p3.8xlarge" not in listed


def test_efa_false_on_a_type_without_efa_is_fine():
    cfg = _load(minimal_values(gpuNodeGroups=[_group(instanceType="p3.8xlarge", efa=False)]))
    assert cfg.gpu_node_groups[0].efa_enabled is False


# ----------------------------------------------------------------------------------------------
# Scaling
# ----------------------------------------------------------------------------------------------


def test_gpu_group_min_greater_than_max():
    msg = _only_problem(
        _groups(_group(name="b", minSize=3, desiredSize=3, maxSize=2)), f"{NS}:gpuNodeGroups[b].minSize"
    )
    _assert_mentions(msg, "3", "maxSize 2")


def test_system_group_min_greater_than_max():
    msg = _only_problem(
        minimal_values(systemNodeGroup={"minSize": 5, "desiredSize": 5, "maxSize": 4}), f"{NS}:systemNodeGroup.minSize"
    )
    _assert_mentions(msg, "5", "maxSize 4")


@pytest.mark.parametrize("desired", [5, 0])
def test_gpu_group_desired_outside_min_max(desired):
    msg = _only_problem(
        _groups(_group(name="b", minSize=1, desiredSize=desired, maxSize=3)), f"{NS}:gpuNodeGroups[b].desiredSize"
    )
    _assert_mentions(msg, str(desired), "1..3")


def test_system_group_desired_outside_min_max():
    msg = _only_problem(
        minimal_values(systemNodeGroup={"minSize": 2, "desiredSize": 9, "maxSize": 4}),
        f"{NS}:systemNodeGroup.desiredSize",
    )
    _assert_mentions(msg, "9", "2..4")


def test_system_group_max_size_zero_is_rejected():
    msg = _only_problem(
        minimal_values(systemNodeGroup={"minSize": 0, "desiredSize": 0, "maxSize": 0}), f"{NS}:systemNodeGroup.maxSize"
    )
    _assert_mentions(msg, "0", "greater than or equal to 1")


# ----------------------------------------------------------------------------------------------
# Network
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "not-a-cidr", "10.0.0.1/16", "300.0.0.0/16"])
def test_invalid_vpc_cidr(cidr):
    msg = _only_problem(minimal_values(network={"vpcCidr": cidr}), f"{NS}:network.vpcCidr")
    _assert_mentions(msg, repr(cidr), "IPv4 CIDR")


def test_ipv6_vpc_cidr_is_rejected():
    msg = _only_problem(minimal_values(network={"vpcCidr": "fd00::/56"}), f"{NS}:network.vpcCidr")
    _assert_mentions(msg, "'fd00::/56'", "IPv4")


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "10.0.0.0/29"])
def test_vpc_cidr_size_outside_what_aws_allows(cidr):
    msg = _only_problem(minimal_values(network={"vpcCidr": cidr}), f"{NS}:network.vpcCidr")
    _assert_mentions(msg, repr(cidr), "/16 to /28")


def test_public_vpc_cidr_is_rejected():
    msg = _only_problem(minimal_values(network={"vpcCidr": "8.8.0.0/16"}), f"{NS}:network.vpcCidr")
    _assert_mentions(msg, "'8.8.0.0/16'", "private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


@pytest.mark.parametrize("cidr", ["127.0.0.0/16", "169.254.0.0/16"])
def test_special_purpose_ranges_are_not_accepted_as_private_vpc_cidrs(cidr):
    _only_problem(minimal_values(network={"vpcCidr": cidr}), f"{NS}:network.vpcCidr")


def test_vpc_cidr_too_small_for_the_subnets():
    values = minimal_values(network={"vpcCidr": "10.0.0.0/18", "availabilityZoneCount": 2, "privateSubnetPrefix": 19})
    msg = _only_problem(values, f"{NS}:network.vpcCidr")
    # 2 private /19 subnets + 1 /19 for the public subnets; a /18 holds only 2 of them.
    _assert_mentions(msg, "'10.0.0.0/18'", "too small", "2 AZs", "need 3", "/19", "holds 2", "privateSubnetPrefix")


def test_vpc_cidr_just_big_enough_is_accepted():
    cfg = _load(
        minimal_values(network={"vpcCidr": "10.0.0.0/17", "availabilityZoneCount": 3, "privateSubnetPrefix": 19})
    )
    assert cfg.network.vpc_cidr == "10.0.0.0/17"
    assert cfg.network.availability_zone_count == 3


def test_bad_nat_gateway_mode_names_the_choices():
    msg = _only_problem(minimal_values(network={"natGateways": "many"}), f"{NS}:network.natGateways")
    _assert_mentions(msg, "'many'", "single", "perAz")


# ----------------------------------------------------------------------------------------------
# Cluster
# ----------------------------------------------------------------------------------------------


def test_unsupported_kubernetes_version():
    msg = _only_problem(minimal_values(cluster={"kubernetesVersion": "1.29"}), f"{NS}:cluster.kubernetesVersion")
    _assert_mentions(msg, "'1.29'", *versions.KUBERNETES_SUPPORTED)


@pytest.mark.parametrize("version", versions.KUBERNETES_SUPPORTED)
def test_every_supported_kubernetes_version_is_accepted(version):
    assert _load(minimal_values(cluster={"kubernetesVersion": version})).cluster.kubernetes_version == version


def test_endpoint_public_and_private_both_off():
    values = minimal_values(cluster={"endpointPublicAccess": False, "endpointPrivateAccess": False})
    msg = _only_problem(values, f"{NS}:cluster.endpointPrivateAccess")
    _assert_mentions(msg, "false", "endpointPublicAccess")


def test_bad_public_access_cidr():
    msg = _only_problem(
        minimal_values(cluster={"endpointPublicAccessCidrs": ["0.0.0.0/0", "1.2.3.4/40"]}),
        f"{NS}:cluster.endpointPublicAccessCidrs[1]",
    )
    _assert_mentions(msg, "'1.2.3.4/40'", "CIDR")


@pytest.mark.parametrize("arn", ["admin", "arn:aws:iam::12345:role/Admin", "arn:aws:s3:::bucket"])
def test_bad_admin_principal_arn(arn):
    values = minimal_values(cluster={"adminPrincipals": ["arn:aws:iam::123456789012:role/Ok", arn]})
    msg = _only_problem(values, f"{NS}:cluster.adminPrincipals[1]")
    _assert_mentions(msg, repr(arn), "arn:aws:iam::123456789012:role/")


def test_admin_principal_listed_twice():
    arn = "arn:aws:iam::123456789012:role/Admin"
    msg = _only_problem(minimal_values(cluster={"adminPrincipals": [arn, arn]}), f"{NS}:cluster.adminPrincipals")
    _assert_mentions(msg, "twice")


@pytest.mark.parametrize("days", [10, 0, 366])
def test_bad_log_retention(days):
    msg = _only_problem(minimal_values(cluster={"logRetentionDays": days}), f"{NS}:cluster.logRetentionDays")
    _assert_mentions(msg, str(days), "1, 3, 5, 7, 14, 30", "365", "3653")


def test_bad_cluster_name():
    msg = _only_problem(minimal_values(cluster={"name": "-my cluster"}), f"{NS}:cluster.name")
    _assert_mentions(msg, "'-my cluster'", "letters, digits")


# ----------------------------------------------------------------------------------------------
# GPU node groups: names, capacity, placement, labels, taints
# ----------------------------------------------------------------------------------------------


def test_duplicate_node_group_names():
    msg = _only_problem(_groups(_group(name="ok", instanceType="p5.48xlarge")), f"{NS}:gpuNodeGroups[1].name")
    _assert_mentions(msg, "'ok'", "gpuNodeGroups[0]", "unique")


@pytest.mark.parametrize("name", ["P4D", "gpu_a", "-a", "a" * 33])
def test_invalid_node_group_name(name):
    msg = _only_problem(minimal_values(gpuNodeGroups=[_group(name=name)]), f"{NS}:gpuNodeGroups[0].name")
    _assert_mentions(msg, repr(name), "lower-case letters", "32")


def test_missing_node_group_name_is_required():
    msg = _only_problem(minimal_values(gpuNodeGroups=[{"instanceType": P4D}]), f"{NS}:gpuNodeGroups[0].name")
    _assert_mentions(msg, "required")


def test_capacity_block_without_reservation_id():
    values = _groups(_group(name="b", instanceType="p5.48xlarge", capacityType="capacity-block"))
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[b].capacityReservationId")
    _assert_mentions(msg, "required", "capacity-block", "cr-")


@pytest.mark.parametrize("rid", ["cr-XYZ", "0123456789abcdef0", "cr-0123456789abcdef0123"])
def test_bad_capacity_reservation_id(rid):
    values = minimal_values(gpuNodeGroups=[_group(capacityType="capacity-block", capacityReservationId=rid)])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].capacityReservationId")
    _assert_mentions(msg, repr(rid), "cr-0123456789abcdef0")


def test_reservation_with_spot_is_rejected():
    values = minimal_values(gpuNodeGroups=[_group(capacityType="spot", capacityReservationId=RESERVATION)])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].capacityReservationId")
    _assert_mentions(msg, "spot")


def test_unknown_capacity_type_names_the_choices():
    msg = _only_problem(
        minimal_values(gpuNodeGroups=[_group(capacityType="reserved")]), f"{NS}:gpuNodeGroups[g].capacityType"
    )
    _assert_mentions(msg, "'reserved'", "on-demand", "spot", "capacity-block")


def test_existing_placement_group_without_name():
    values = minimal_values(gpuNodeGroups=[_group(placementGroup={"mode": "existing"})])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].placementGroup.name")
    _assert_mentions(msg, "required", "existing")


def test_placement_group_name_without_existing_mode():
    values = minimal_values(gpuNodeGroups=[_group(placementGroup={"mode": "none", "name": "team-pg"})])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].placementGroup.name")
    _assert_mentions(msg, "'team-pg'", "existing", "'none'")


def test_create_placement_group_with_a_reservation():
    values = minimal_values(
        gpuNodeGroups=[_group(capacityReservationId=RESERVATION, placementGroup={"mode": "create"})]
    )
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].placementGroup.mode")
    _assert_mentions(msg, "'create'", "reservation", "'none'", "'existing'")


@pytest.mark.parametrize("label", ["kubernetes.io/role", "k8s.io/x", "eks.amazonaws.com/nodegroup", "-bad", "a/b/c"])
def test_invalid_label_keys(label):
    values = minimal_values(gpuNodeGroups=[_group(labels={"team": "vision", label: "x"})])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].labels.{label}")
    _assert_mentions(msg, repr(label), "label key", "kubernetes.io")


def test_label_key_under_a_kubernetes_io_subdomain_is_rejected():
    values = minimal_values(gpuNodeGroups=[_group(labels={"node-role.kubernetes.io/gpu": "true"})])
    _only_problem(values, f"{NS}:gpuNodeGroups[g].labels.node-role.kubernetes.io/gpu")


def test_invalid_label_value():
    values = minimal_values(gpuNodeGroups=[_group(labels={"team": "vision team!"})])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].labels.team")
    _assert_mentions(msg, "'vision team!'", "label value")


def test_taint_on_nvidia_gpu_is_rejected():
    values = _groups(
        _group(name="b", taints=[{"key": "dedicated", "value": "x"}, {"key": "nvidia.com/gpu", "value": "true"}])
    )
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[b].taints[1].key")
    _assert_mentions(msg, "'nvidia.com/gpu'", "every GPU group", "extra taints")


def test_bad_taint_effect_names_the_choices():
    values = minimal_values(gpuNodeGroups=[_group(taints=[{"key": "dedicated", "effect": "NoWay"}])])
    msg = _only_problem(values, f"{NS}:gpuNodeGroups[g].taints[0].effect")
    _assert_mentions(msg, "'NoWay'", "NoSchedule", "NoExecute", "PreferNoSchedule")


# ----------------------------------------------------------------------------------------------
# Keys, namespaces, types
# ----------------------------------------------------------------------------------------------


def test_unknown_top_level_key_lists_the_allowed_keys():
    msg = _only_problem(minimal_values(**{f"{NS}:foo": "bar"}), f"{NS}:foo")
    _assert_mentions(msg, "unknown key", *stack_config.SECTIONS)


def test_unknown_nested_key():
    msg = _only_problem(minimal_values(network={"vpcCidrr": "10.0.0.0/16"}), f"{NS}:network.vpcCidrr")
    _assert_mentions(msg, "unknown key", "'vpcCidrr'")


def test_unknown_key_in_a_node_group():
    msg = _only_problem(_groups(_group(name="b", maxsize=3)), f"{NS}:gpuNodeGroups[b].maxsize")
    _assert_mentions(msg, "unknown key", "'maxsize'")


def test_unknown_nested_key_lists_the_allowed_keys_when_none_is_close():
    msg = _only_problem(minimal_values(network={"subnets": 3}), f"{NS}:network.subnets")
    _assert_mentions(msg, "availabilityZoneCount", "privateSubnetPrefix", "natGateways", "vpcCidr")
    assert "did you mean" not in msg


def test_unknown_namespace():
    msg = _only_problem(minimal_values(**{"gpu-trainig:network": {}}), "gpu-trainig:network")
    _assert_mentions(msg, "'gpu-trainig'", f"{NS}:*", "aws:region")


def test_provider_namespaces_are_tolerated():
    cfg = _load(minimal_values(**{"aws:profile": "dev", "kubernetes:context": "x", "pulumi:tags": {"a": "b"}}))
    assert cfg.region == "us-west-2"


def test_string_that_is_not_a_number_for_max_size():
    msg = _only_problem(_groups(_group(name="b", maxSize="lots")), f"{NS}:gpuNodeGroups[b].maxSize")
    _assert_mentions(msg, "'lots'", "integer")


@pytest.mark.parametrize(
    "section,key,expected",
    [
        ("network", f"{NS}:network", "dictionary"),
        ("cluster", f"{NS}:cluster", "dictionary"),
        ("systemNodeGroup", f"{NS}:systemNodeGroup", "dictionary"),
        ("tags", f"{NS}:tags", "map of strings"),
    ],
)
def test_list_where_a_map_is_expected(section, key, expected):
    msg = _only_problem(minimal_values(**{section: ["a", "b"]}), key)
    _assert_mentions(msg, '["a", "b"]', expected)


def test_list_where_a_map_is_expected_inside_a_group():
    msg = _only_problem(minimal_values(gpuNodeGroups=[_group(labels=["team=vision"])]), f"{NS}:gpuNodeGroups[g].labels")
    _assert_mentions(msg, '["team=vision"]', "dictionary")


def test_map_where_the_node_group_list_is_expected():
    msg = _only_problem(minimal_values(gpuNodeGroups={"p4d": _group()}), f"{NS}:gpuNodeGroups")
    _assert_mentions(msg, "list of node groups")


def test_node_group_that_is_not_a_map():
    msg = _only_problem(_groups("p4d.24xlarge"), f"{NS}:gpuNodeGroups[1]")
    _assert_mentions(msg, "'p4d.24xlarge'", "dictionary")


def test_tags_with_non_string_values_name_the_tag_and_say_to_quote():
    msg = _only_problem(minimal_values(tags={"env": "dev", "cost": 12}), f"{NS}:tags.cost")
    _assert_mentions(msg, "12", "expected a string", "put the value in quotes")
    assert '"12"' not in msg  # the hint does not invent the text: YAML may have read 12 from 0x0C or 1_2
    msg = _only_problem(minimal_values(tags={"backup": False}), f"{NS}:tags.backup")
    _assert_mentions(msg, "boolean", "put the value in quotes")


# ----------------------------------------------------------------------------------------------
# Region and AZ
# ----------------------------------------------------------------------------------------------


def test_missing_region():
    msg = _only_problem(minimal_values(**{"aws:region": None}), "aws:region")
    _assert_mentions(msg, "required", "us-west-2")


@pytest.mark.parametrize("region", ["uswest2", "US-WEST-2", "us-west", "us-west-2a"])
def test_bad_region(region):
    msg = _only_problem(minimal_values(**{"aws:region": region}), "aws:region")
    _assert_mentions(msg, repr(region), "us-west-2")


@pytest.mark.parametrize("az", ["west-b", "us-west-2", "US-WEST-2B", "usw2-az1"])
def test_bad_az_name(az):
    msg = _only_problem(minimal_values(gpuAvailabilityZone=az), f"{NS}:gpuAvailabilityZone")
    _assert_mentions(msg, repr(az), "'auto'", "us-west-2b")


def test_az_outside_the_region():
    msg = _only_problem(minimal_values(gpuAvailabilityZone="us-east-1a"), f"{NS}:gpuAvailabilityZone")
    _assert_mentions(msg, "'us-east-1a'", "'us-west-2'", "'auto'")


def test_az_in_the_region_is_accepted():
    assert _load(minimal_values(gpuAvailabilityZone="us-west-2c")).gpu_availability_zone == "us-west-2c"


# ----------------------------------------------------------------------------------------------
# Every problem at once
# ----------------------------------------------------------------------------------------------


def test_problems_in_different_sections_and_groups_are_reported_together():
    values = minimal_values(
        **{
            "aws:region": None,
            f"{NS}:foo": 1,
            "network": {"vpcCidr": "10.0.0.0/33"},
            "cluster": {"kubernetesVersion": "1.29", "logRetentionDays": 10},
            "systemNodeGroup": {"instanceType": P4D},
            "gpuNodeGroups": [
                _group(name="a", instanceType="p3.8xlarge", efa=True),
                _group(name="b", maxSize="lots"),
                _group(name="a", minSize=4, maxSize=2),
            ],
        }
    )
    with pytest.raises(ConfigError) as info:
        _load(values)
    keys = sorted(p.key for p in info.value.problems)
    assert keys == sorted(
        [
            "aws:region",
            f"{NS}:foo",
            f"{NS}:network.vpcCidr",
            f"{NS}:cluster.kubernetesVersion",
            f"{NS}:cluster.logRetentionDays",
            f"{NS}:systemNodeGroup.instanceType",
            f"{NS}:gpuNodeGroups[0].efa",
            f"{NS}:gpuNodeGroups[b].maxSize",
            f"{NS}:gpuNodeGroups[2].name",
            f"{NS}:gpuNodeGroups[2].minSize",
        ]
    )
    # The exception's text lists every problem, one per line, with its key.
    text = str(info.value)
    assert f"({len(keys)} problem(s))" in text
    for p in info.value.problems:
        assert f"  - {p.key}: {p.message}" in text


# ----------------------------------------------------------------------------------------------
# Valid configs and defaults
# ----------------------------------------------------------------------------------------------


def test_minimal_config_defaults():
    cfg = _load(minimal_values())
    assert cfg.project == "gpu-training" and cfg.stack == "test"
    assert cfg.region == "us-west-2"
    assert cfg.cluster_name == "gpu-training-test"
    assert cfg.gpu_availability_zone == "auto"
    assert cfg.cluster.kubernetes_version == versions.KUBERNETES_DEFAULT
    assert cfg.cluster.endpoint_public_access is True and cfg.cluster.endpoint_private_access is True
    assert cfg.network.vpc_cidr == "10.0.0.0/16"
    assert cfg.network.availability_zone_count == 2
    assert cfg.network.private_subnet_prefix == 19
    assert cfg.network.nat_gateways == "single"
    assert cfg.system_node_group.instance_type == "c5.2xlarge"
    (g,) = cfg.gpu_node_groups
    assert g.capacity_type == "on-demand"
    assert g.capacity_reservation_id is None
    assert g.disk_size_gib == 500


@pytest.mark.parametrize(
    "instance_type", ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p3dn.24xlarge"]
)
def test_efa_on_by_default_with_every_catalog_interface_and_a_new_placement_group(instance_type):
    (g,) = _load(minimal_values(gpuNodeGroups=[_group(instanceType=instance_type)])).gpu_node_groups
    assert g.efa is None
    assert g.efa_enabled is True
    assert g.efa_interfaces == catalog.BUILTIN[instance_type].efa_interfaces > 0
    assert g.placement.mode == "create" and g.placement.name is None


def test_p4d_defaults_to_four_efa_interfaces():
    (g,) = _load(minimal_values()).gpu_node_groups
    assert (g.efa_enabled, g.efa_interfaces, g.placement.mode) == (True, 4, "create")


def test_efa_group_with_a_reservation_gets_no_new_placement_group():
    values = minimal_values(
        gpuNodeGroups=[
            _group(instanceType="p5.48xlarge", capacityType="capacity-block", capacityReservationId=RESERVATION)
        ]
    )
    (g,) = _load(values).gpu_node_groups
    assert g.efa_enabled is True and g.efa_interfaces == 32
    assert g.placement.mode == "none"


def test_efa_off_gives_no_interfaces_and_no_placement_group():
    (g,) = _load(minimal_values(gpuNodeGroups=[_group(efa=False)])).gpu_node_groups
    assert (g.efa_enabled, g.efa_interfaces, g.placement.mode) == (False, 0, "none")


def test_type_without_efa_defaults_to_efa_off():
    (g,) = _load(minimal_values(gpuNodeGroups=[_group(instanceType="p3.16xlarge")])).gpu_node_groups
    assert (g.efa_enabled, g.efa_interfaces, g.placement.mode) == (False, 0, "none")


def test_explicit_placement_group_wins():
    values = minimal_values(
        gpuNodeGroups=[_group(capacityReservationId=RESERVATION, placementGroup={"mode": "existing", "name": "res-pg"})]
    )
    (g,) = _load(values).gpu_node_groups
    assert (g.placement.mode, g.placement.name) == ("existing", "res-pg")


def test_dev_stack_config_is_valid():
    cfg = _load(dev_values())
    assert [g.name for g in cfg.gpu_node_groups] == ["p4d", "p3dn"]
    assert cfg.network.vpc_cidr == "10.20.0.0/16"
    assert cfg.gpu_group("p3dn").capacity_type == "spot"
    assert cfg.gpu_group("p4d").efa_interfaces == catalog.BUILTIN["p4d.24xlarge"].efa_interfaces
    assert cfg.gpu_group("nope") is None


def test_config_is_frozen():
    cfg = _load(minimal_values())
    with pytest.raises(Exception):
        cfg.region = "eu-west-1"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------
# Values as the engine passes them
# ----------------------------------------------------------------------------------------------


def test_decode_config_values_parses_json_text_and_leaves_scalars_as_text():
    flat = {
        "aws:region": "us-west-2",
        f"{NS}:network": '{"vpcCidr": "10.1.0.0/16", "availabilityZoneCount": 3}',
        f"{NS}:gpuNodeGroups": '[{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 3}]',
        f"{NS}:gpuAvailabilityZone": "auto",
        "x:count": "3",
        "x:flag": "true",
        "x:number": "1.5",
        "x:notjson": "[not json",
        "x:already": {"a": 1},
    }
    out = decode_config_values(flat)
    assert out[f"{NS}:network"] == {"vpcCidr": "10.1.0.0/16", "availabilityZoneCount": 3}
    assert out[f"{NS}:gpuNodeGroups"] == [{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 3}]
    assert out["aws:region"] == "us-west-2"
    assert out[f"{NS}:gpuAvailabilityZone"] == "auto"
    assert out["x:count"] == "3" and out["x:flag"] == "true" and out["x:number"] == "1.5"
    assert out["x:notjson"] == "[not json"
    assert out["x:already"] == {"a": 1}
    assert set(out) == set(flat)


def test_engine_wire_form_round_trips_to_the_same_config():
    values = dev_values()
    flat = offline.flat_config(values)
    assert all(isinstance(v, str) for v in flat.values())
    assert json.loads(flat[f"{NS}:gpuNodeGroups"]) == values[f"{NS}:gpuNodeGroups"]
    assert _load(decode_config_values(flat)) == _load(values)


def test_numeric_text_is_accepted_for_sizes():
    values = minimal_values(
        gpuNodeGroups=[_group(minSize="1", desiredSize="2", maxSize="3")],
        systemNodeGroup={"minSize": "2", "desiredSize": "2", "maxSize": "5"},
        cluster={"logRetentionDays": "14", "endpointPrivateAccess": "true"},
    )
    cfg = _load(decode_config_values(offline.flat_config(values)))
    g = cfg.gpu_node_groups[0]
    assert (g.min_size, g.desired_size, g.max_size) == (1, 2, 3)
    assert isinstance(g.max_size, int)
    assert cfg.system_node_group.max_size == 5
    assert cfg.cluster.log_retention_days == 14
    assert cfg.cluster.endpoint_private_access is True


def test_numeric_text_still_goes_through_the_range_checks():
    msg = _only_problem(
        minimal_values(gpuNodeGroups=[_group(minSize="3", desiredSize="3", maxSize="2")]),
        f"{NS}:gpuNodeGroups[g].minSize",
    )
    _assert_mentions(msg, "3", "maxSize 2")


def test_problem_and_error_text():
    p = Problem("k", "m")
    assert str(p) == "k: m" and repr(p) == "Problem('k', 'm')"
    err = ConfigError([p, Problem("k2", "m2")])
    assert re.search(r"invalid stack config \(2 problem\(s\)\):\n  - k: m\n  - k2: m2$", str(err))


def test_unset_desired_size_follows_min_size():
    cfg = load(
        minimal_values(
            gpuNodeGroups=[{"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 1, "maxSize": 3}],
            systemNodeGroup={"minSize": 3, "maxSize": 5},
        ),
        "gpu-training",
        "t",
    )
    assert cfg.gpu_node_groups[0].desired_size == 1
    assert cfg.system_node_group.desired_size == 3
    # An explicit desiredSize still wins, and is still checked.
    msg = _only_problem(
        minimal_values(
            gpuNodeGroups=[
                {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 1, "desiredSize": 5, "maxSize": 3}
            ]
        ),
        f"{NS}:gpuNodeGroups[p4d].desiredSize",
    )
    _assert_mentions(msg, "5", "1..3")


def test_bad_taint_value_and_reserved_taint_key():
    values = minimal_values(
        gpuNodeGroups=[
            _group(taints=[{"key": "dedicated", "value": "bad value!"}, {"key": "node.kubernetes.io/x", "value": "y"}])
        ]
    )
    with pytest.raises(ConfigError) as err:
        load(values, "gpu-training", "t")
    keys = {p.key: p.message for p in err.value.problems}
    assert "'bad value!'" in keys[f"{NS}:gpuNodeGroups[g].taints[0].value"]
    assert "kubernetes.io" in keys[f"{NS}:gpuNodeGroups[g].taints[1].key"]


def test_region_that_does_not_exist_is_refused_before_anything_runs():
    msg = _only_problem(minimal_values(**{"aws:region": "us-west-9"}), "aws:region")
    _assert_mentions(msg, "'us-west-9'", "us-west-2")


def test_s3_link_on_scratch_1_is_refused():
    values = minimal_values(
        storage={"fsx": {"deploymentType": "SCRATCH_1", "storageCapacityGiB": 1200, "s3": {"bucket": "data"}}}
    )
    msg = _only_problem(values, f"{NS}:storage.fsx.s3")
    _assert_mentions(msg, "SCRATCH_1", "SCRATCH_2", "PERSISTENT_2")


def test_known_regions_are_botocores_ec2_regions():
    """known_regions reads botocore's endpoint file directly (fast); it must name the same regions
    a botocore session lists for EC2."""
    import botocore.session

    from stacks.config.cross_checks import known_regions

    session = botocore.session.get_session()
    expected = {
        r for p in session.get_available_partitions() for r in session.get_available_regions("ec2", partition_name=p)
    }
    assert known_regions() == expected and "us-west-2" in expected
