"""The plan's cost: idle and at every group's maximum, per group, from the pinned prices."""

from __future__ import annotations

import io
import json

import pytest

from facts import catalog, prices
from stacks import cost
from stacks.config import load
from stacks.config.stackfile import read_stack_config
from tests.helpers import NS, ROOT, minimal_values


def cfg_of(stack: str):
    return load(read_stack_config(stack, ROOT)[1], "gpu-training", stack)


def test_every_catalog_type_has_a_pinned_price_or_says_it_has_none():
    assert set(prices.INSTANCE_HOURLY) == set(catalog.BUILTIN)
    assert prices.INSTANCE_HOURLY["p5e.48xlarge"] is None
    assert all(v is None or v > 0 for v in prices.INSTANCE_HOURLY.values())


def test_dev_idles_without_a_gpu_node():
    c = cost.estimate(cfg_of("dev"))
    gpu = [line for line in c.lines if line.what.startswith("GPU group")]
    assert gpu and all(line.idle == 0 for line in gpu)
    # control plane, one NAT gateway and its public IPv4 address, two KMS keys (EKS secrets, EFS),
    # two system nodes with their root volumes, SCRATCH_2 FSx; the alarms (14, reading 26 metrics), the
    # three job dashboards and the queues' (docs/alerts.md), and the queue reporter's three metrics of the
    # one ClusterQueue, published every minute even when idle.
    expected_idle = 0.10 + 0.045 + 0.005 + 2 * 1.00 / 730 + 2 * (0.34 + 100 * 0.08 / 730) + 1200 * 0.140 / 730
    expected_idle += (26 * 0.10 + 4 * 3.00) / 730 + 3 * 0.30 / 730
    assert c.idle == pytest.approx(expected_idle, abs=0.005)
    # At the maximum: both GPU groups full (p3dn is spot: priced at on-demand, an upper bound).
    p4d = next(line for line in gpu if "p4d" in line.what)
    assert p4d.maximum == pytest.approx(2 * (21.95764 + 500 * 0.08 / 730), abs=0.001)
    assert any("spot" in n for n in c.notes)
    assert c.maximum > 100 > c.idle


def test_prod_idles_with_its_minimum_p4d_nodes_and_persistent_fsx():
    c = cost.estimate(cfg_of("prod"))
    p4d = next(line for line in c.lines if "GPU group p4d" in line.what)
    assert p4d.idle == pytest.approx(2 * (21.95764 + 500 * 0.08 / 730), rel=0.05)
    fsx = next(line for line in c.lines if line.what.startswith("FSx"))
    assert fsx.idle == pytest.approx(4800 * 0.210 / 730, abs=0.001)  # PERSISTENT_2 at 250 MB/s/TiB
    assert next(line for line in c.lines if line.what.startswith("NAT")).idle == pytest.approx(3 * 0.045)


def test_capacity_blocks_and_types_without_a_price_are_left_out_with_a_note():
    values = minimal_values(
        gpuNodeGroups=[
            {
                "name": "blk",
                "instanceType": "p5.48xlarge",
                "maxSize": 2,
                "capacityType": "capacity-block",
                "capacityReservationId": "cr-0123456789abcdef0",
            },
            {"name": "p5e", "instanceType": "p5e.48xlarge", "maxSize": 2},
        ]
    )
    c = cost.estimate(load(values, "gpu-training", "t"))
    assert not any("blk" in line.what for line in c.lines)
    assert any("capacity block" in n for n in c.notes) and any("no on-demand price" in n for n in c.notes)


def test_the_plan_prints_and_writes_it(dev_plan_command):
    assert dev_plan_command.code == 0
    text = dev_plan_command.stdout
    assert "Cost per hour (on-demand, us-west-2 prices of 2026-07): idle $1.11" in text
    data = json.loads((dev_plan_command.out / "cost.json").read_text())
    assert data["idlePerHour"] == cost.estimate(cfg_of("dev")).idle and data["maximumPerHour"] > data["idlePerHour"]


def test_the_pr_diff_shows_the_change_in_cost(tmp_path):
    from infra.diff import cli as plan_diff

    base, head = tmp_path / "base", tmp_path / "head"
    for folder, maximum in ((base, 100.0), (head, 144.02)):
        folder.mkdir()
        (folder / "resources.json").write_text("[]")
        (folder / "outputs.json").write_text("{}")
        (folder / "cost.json").write_text(
            json.dumps({"region": "us-west-2", "date": "2026-07", "idlePerHour": 1.08, "maximumPerHour": maximum})
        )
    out = io.StringIO()
    assert plan_diff.main([str(base), str(head)], out=out) == 0
    assert "every group at its maximum $100.00/h → $144.02/h (**+$44.02/h**)" in out.getvalue()
    assert "idle $1.08/h;" in out.getvalue()


# ----------------------------------------------------------------------------------------------
# Public IPv4, KMS keys, and what the estimate leaves out
# ----------------------------------------------------------------------------------------------


def _line(c, prefix: str):
    (line,) = [line for line in c.lines if line.what.startswith(prefix)]
    return line


def test_public_ipv4_and_kms_keys_are_priced_from_their_pins():
    assert prices.PUBLIC_IPV4_HOURLY == 0.005 and prices.KMS_KEY_MONTH == 1.00
    dev, prod = cost.estimate(cfg_of("dev")), cost.estimate(cfg_of("prod"))
    assert _line(dev, "public IPv4 addresses (1,").idle == pytest.approx(0.005)
    assert _line(prod, "public IPv4 addresses (3,").idle == pytest.approx(3 * 0.005)  # one NAT gateway per AZ
    assert _line(dev, "KMS keys (2: EKS secrets, EFS)").idle == pytest.approx(2 / 730, abs=1e-4)
    assert _line(prod, "KMS keys (3: EKS secrets, EFS, FSx)").maximum == pytest.approx(3 / 730, abs=1e-4)
    assert any("$3 from the third year" in n for n in dev.notes)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(None, id="dev"),
        pytest.param("prod", id="prod"),
        pytest.param({"efs": {"enabled": False}, "fsx": {"enabled": False}}, id="no-storage"),
        pytest.param(
            {"fsx": {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": 125, "storageCapacityGiB": 1200}},
            id="persistent-fsx",
        ),
    ],
)
def test_the_kms_keys_priced_are_the_keys_the_program_creates(values, request):
    from tests.helpers import dev_values, run_stack

    if values == "prod":
        stack, config = "prod", read_stack_config("prod", ROOT)[1]
    elif values:
        stack, config = "test", minimal_values(storage=values)
    else:
        stack, config = "dev", dev_values()
    cfg = load(config, "gpu-training", stack)
    # dev and prod: the session's shared plans (read only)
    plan = request.getfixturevalue(f"{stack}_plan") if stack in ("dev", "prod") else run_stack(config, stack=stack)
    assert len(cost.kms_keys(cfg)) == len(plan.of_type("aws:kms/key:Key"))
    nat = len(plan.of_type("aws:ec2/natGateway:NatGateway"))
    assert len(plan.of_type("aws:ec2/eip:Eip")) == nat
    assert _line(cost.estimate(cfg), "public IPv4 addresses").idle == pytest.approx(nat * prices.PUBLIC_IPV4_HOURLY)


def test_what_is_left_out_is_named():
    dev = cost.estimate(cfg_of("dev"))
    text = " | ".join(dev.omitted)
    for what in ("NAT gateway data processing", "EKS control-plane logs", "Container Insights", "EFS storage"):
        assert what in text, what
    assert "FSx backups" not in text and "SageMaker" not in text  # dev: scratch FSx, SageMaker jobs disabled
    prod = " | ".join(cost.estimate(cfg_of("prod")).omitted)
    assert "FSx backups (daily, kept 14 days, a final backup on delete)" in prod


def test_enabled_sagemaker_jobs_and_exposed_jobs_are_named_as_left_out():
    from tests.helpers import dev_values

    values = dev_values()
    for job in values[f"{NS}:jobs"]:
        if job.get("runtime") == "sagemaker":
            job["enabled"] = True
    values[f"{NS}:jobs"].append(
        {"name": "board", "kind": "tensorboard", "volume": "efs", "logPath": "logs/x", "expose": True}
    )
    c = cost.estimate(load(values, "gpu-training", "dev"))
    (sm,) = [o for o in c.omitted if o.startswith("SageMaker training jobs")]
    assert (
        "maskrcnn-sagemaker on " in sm
        and "resnet50-hybrid on " in sm
        and "x ml.p" in sm
        and "per instance-second" in sm
    )
    assert [o for o in c.omitted if o.startswith("load balancers of exposed jobs")] == [
        "load balancers of exposed jobs (board): per hour and per LCU, with their public IPv4 addresses"
    ]
    without = cost.estimate(load(dev_values(), "gpu-training", "dev"))
    assert not any(o.startswith(("SageMaker", "load balancers")) for o in without.omitted)


def test_the_plan_output_and_cost_json_list_what_is_left_out(dev_plan_command):
    assert dev_plan_command.code == 0
    text = dev_plan_command.stdout
    assert "  public IPv4 addresses (1, the NAT gateways' Elastic IPs): idle $0.01" in text
    excluded = text.split("\n  not counted (", 1)[1].split("\nTear-down", 1)[0]  # one line by name, wrapped
    assert "Container Insights" in excluded and "EKS control-plane logs" in excluded
    data = json.loads((dev_plan_command.out / "cost.json").read_text())
    assert data["omitted"] == cost.estimate(cfg_of("dev")).omitted and len(data["omitted"]) >= 4
