"""providers/sagemaker_training_job.py: the dynamic provider that starts a SageMaker training job
without waiting for the run, and on delete stops it, waits, deletes it and removes the network
interfaces it left in its subnets.

moto answers CreateTrainingJob/DescribeTrainingJob, STS and all of EC2's network-interface calls,
but not StopTrainingJob or DeleteTrainingJob, every job it creates is at once ``Completed``, it
takes a second job of a name without complaint, and none of its interfaces is requester-managed or
ever in use. The tests that need a job to go through InProgress -> Stopping -> Stopped inject
``FakeSageMaker`` through the functions' ``client`` factory and keep moto's EC2 for the interfaces;
the tests of what moto cannot do (SageMaker's own interfaces, EC2's "in use" answers, a name taken)
use botocore's Stubber, which checks every request and answer against the service's API model.
"""

from __future__ import annotations

import datetime
import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from facts import catalog
from jobs.registry import JOB_KINDS
from jobs.sagemaker import FileSystemTarget
from providers import network_interfaces
from providers import sagemaker_training_job as provider

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's account
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/gpu-training-maskrcnn-sm"
JOB_NAME = "maskrcnn-sm-1-0a1b2c3d"
NOT_FOUND_MESSAGE = "Requested resource not found."  # what SageMaker answers for a job that does not exist


def _client_error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


def _arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}"


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------


class Network:
    """A VPC with the job's subnet and security group, plus another of each."""

    def __init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.subnet = self._subnet("10.0.1.0/24")
        self.other_subnet = self._subnet("10.0.2.0/24")
        self.sg = self._group("maskrcnn-sm-job")
        self.other_sg = self._group("cluster-nodes")

    def _subnet(self, cidr: str) -> str:
        return self.ec2.create_subnet(VpcId=self.vpc, CidrBlock=cidr, AvailabilityZone=f"{REGION}a")["Subnet"][
            "SubnetId"
        ]

    def _group(self, name: str) -> str:
        return self.ec2.create_security_group(GroupName=name, Description=name, VpcId=self.vpc)["GroupId"]

    def interface(self, subnet: str, groups: list[str]) -> str:
        return self.ec2.create_network_interface(SubnetId=subnet, Groups=groups)["NetworkInterface"][
            "NetworkInterfaceId"
        ]

    def attached_interface(self, subnet: str, groups: list[str]) -> tuple[str, str, str]:
        """An interface attached to an instance as its second one: (interface, attachment, instance)."""
        eni = self.interface(subnet, groups)
        instance = self.ec2.run_instances(
            ImageId="ami-12345678", InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1, SubnetId=subnet
        )["Instances"][0]["InstanceId"]
        attachment = self.ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=instance, DeviceIndex=1)[
            "AttachmentId"
        ]
        return eni, attachment, instance

    def interface_ids(self) -> set[str]:
        found = self.ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [self.vpc]}])[
            "NetworkInterfaces"
        ]
        return {e["NetworkInterfaceId"] for e in found}


@pytest.fixture
def network(aws) -> Network:
    return Network()


class FakeSageMaker:
    """A SageMaker client with scripted answers; ``calls`` records every call in order.

    ``statuses``: what successive DescribeTrainingJob calls answer, the last one repeated (an
    exception in it is raised); ``create_errors``: raised by successive CreateTrainingJob calls."""

    def __init__(self, statuses: list[Any] | None = None, create_errors: list[Exception] | None = None):
        self.statuses: list[Any] = list(statuses or [])
        self.create_errors = list(create_errors or [])
        self.calls: list[tuple[str, Any]] = []

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        self.calls.append(("create", request["TrainingJobName"]))
        if self.create_errors:
            raise self.create_errors.pop(0)
        self.statuses = ["InProgress"]
        return {"TrainingJobArn": _arn(request["TrainingJobName"])}

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        self.calls.append(("describe", status if isinstance(status, str) else "error"))
        if isinstance(status, Exception):
            raise status
        return {
            "TrainingJobName": TrainingJobName,
            "TrainingJobArn": _arn(TrainingJobName),
            "TrainingJobStatus": status,
        }

    def stop_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        self.calls.append(("stop", TrainingJobName))
        return {}

    def delete_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        self.calls.append(("delete", TrainingJobName))
        # As SageMaker does: the job is Deleting for a while, then gone (and its name free).
        self.statuses = ["Deleting", _client_error("ValidationException", NOT_FOUND_MESSAGE, "DescribeTrainingJob")]
        return {}

    def add_tags(self, ResourceArn: str, Tags: list[dict[str, str]]) -> dict[str, Any]:
        self.calls.append(("add_tags", (ResourceArn, Tags)))
        return {}

    def delete_tags(self, ResourceArn: str, TagKeys: list[str]) -> dict[str, Any]:
        self.calls.append(("delete_tags", (ResourceArn, TagKeys)))
        return {}

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


class Spy:
    """A boto3 client that records the calls made through it (name, kwargs) and passes them on."""

    def __init__(self, client: Any):
        self._client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return method(*args, **kwargs)

        return call


def factory(sm: Any, ec2: Any = None) -> tuple[Callable[[str, str], Any], list[tuple[str, str]]]:
    """The ``client`` argument: ``sm`` for SageMaker, ``ec2`` (default: moto's) for EC2; also
    the (service, region) pairs asked for."""
    asked: list[tuple[str, str]] = []

    def client(service: str, region: str) -> Any:
        asked.append((service, region))
        if service == "sagemaker":
            return sm
        assert service == "ec2", service
        return ec2 if ec2 is not None else boto3.client("ec2", region_name=region)

    return client, asked


class Clock:
    """``time.monotonic`` that moves only when the code under test sleeps."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if len(self.sleeps) >= 10_000:
            raise AssertionError("still sleeping after 10000 polls")
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The provider's ``time`` replaced, in its module and in the network-interface clean-up's (only
    there, not for boto3 or moto)."""
    c = Clock()
    for module in (provider, network_interfaces):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


def maskrcnn_request(security_groups: list[str], subnets: list[str]) -> dict[str, Any]:
    """CreateTrainingJob's request of the docs' Mask R-CNN example (2 x ml.p4d.24xlarge, FSx + EFS)."""
    spec = JOB_KINDS["mpi"].model_validate(
        {
            "name": "maskrcnn-sm",
            "kind": "mpi",
            "runtime": "sagemaker",
            "nodeGroup": "p4d",
            "nodes": 2,
            "image": "763104351884.dkr.ecr.us-west-2.amazonaws.com/"
            "tensorflow-training:2.18.0-gpu-py310-cu125-ubuntu22.04-sagemaker",
            "command": ["python", "/opt/ml/input/data/efs/code/maskrcnn/train.py"],
            "args": ["--data_dir", "/opt/ml/input/data/fsx/coco", "--images_per_gpu", "4", "--epochs", "24"],
            "activeDeadlineSeconds": 172800,
            "volumes": [
                {"name": "fsx", "mountPath": "/opt/ml/input/data/fsx", "readOnly": True},
                {"name": "efs", "mountPath": "/opt/ml/input/data/efs"},
            ],
            "sagemaker": {
                "outputPath": "s3://my-training-output/maskrcnn/",
                "checkpointS3Uri": "s3://my-training-output/maskrcnn/checkpoints/",
            },
        }
    )
    instance = catalog.get_sagemaker("ml.p4d.24xlarge")
    assert instance is not None
    job = spec.sagemaker_job(instance, REGION, "gpu-training/test")
    file_systems = {
        "fsx": FileSystemTarget("FSxLustre", "fs-0123456789abcdef0", "abcdefgh"),
        "efs": FileSystemTarget("EFS", "fs-0fedcba9876543210"),
    }
    return job.create_request(ROLE_ARN, security_groups, subnets, file_systems)


# ---------------------------------------------------------------------------------------------
# create_job
# ---------------------------------------------------------------------------------------------


def test_create_job_starts_the_job_in_the_given_region(network):
    request = maskrcnn_request([network.sg], [network.subnet])
    name = request["TrainingJobName"]

    out = provider.create_job(request, REGION, sleep=lambda _: pytest.fail("no retry expected"))

    sm = boto3.client("sagemaker", region_name=REGION)
    job = sm.describe_training_job(TrainingJobName=name)
    assert out == {"arn": job["TrainingJobArn"], "status": job["TrainingJobStatus"]}
    assert out["arn"] == _arn(name)
    assert job["ResourceConfig"]["InstanceType"] == "ml.p4d.24xlarge"
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert job["VpcConfig"] == {"SecurityGroupIds": [network.sg], "Subnets": [network.subnet]}
    assert job["RoleArn"] == ROLE_ARN
    assert [c["ChannelName"] for c in job["InputDataConfig"]] == ["fsx", "efs"]
    # The region argument, not AWS_DEFAULT_REGION (eu-central-1), decides where the job runs.
    assert boto3.client("sagemaker", region_name="eu-central-1").list_training_jobs()["TrainingJobSummaries"] == []


@pytest.mark.parametrize(
    "message",
    [
        "Could not assume role arn:aws:iam::123456789012:role/gpu-training-maskrcnn-sm. Please ensure that the "
        "role exists and allows principal 'sagemaker.amazonaws.com' to assume the role.",
        'Unauthorized to List objects under S3 URL "s3://my-training-output/maskrcnn/checkpoints/"',
        "Access denied for repository: tensorflow-training in registry ID: 763104351884. Please "
        "check if your ECR repository and image exist and role has permissions.",
    ],
)
def test_create_job_retries_while_the_role_propagates(message, clock):
    sm = FakeSageMaker(create_errors=[_client_error("ValidationException", message, "CreateTrainingJob")] * 2)
    client, asked = factory(sm)

    out = provider.create_job({"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep)

    assert out == {"arn": _arn(JOB_NAME), "status": "InProgress"}
    assert sm.names() == ["create", "create", "create", "describe"]
    assert clock.sleeps == [provider.POLL_SECONDS, provider.POLL_SECONDS]
    assert asked == [("sagemaker", REGION)]


@pytest.mark.parametrize(
    "code, message",
    [
        ("ValidationException", "Instance type ml.p4d.24xlarge is not supported by algorithm tensorflow-training"),
        (
            "ResourceLimitExceeded",
            "The account-level service limit 'ml.p4d.24xlarge for training job usage' is 0 Instances",
        ),
    ],
)
def test_create_job_raises_other_errors_at_once(code, message, clock):
    error = _client_error(code, message, "CreateTrainingJob")
    sm = FakeSageMaker(create_errors=[error])
    client, _ = factory(sm)

    with pytest.raises(ClientError) as raised:
        provider.create_job({"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep)

    assert raised.value is error
    assert sm.names() == ["create"]
    assert clock.sleeps == []


def test_create_job_waits_while_the_name_is_still_taken_by_a_job_being_deleted(clock):
    """A replacement deletes the old job first; its name is taken until the deletion is done."""
    taken = _client_error(
        "ResourceInUse", "Training job names must be unique within an AWS account and region", "CreateTrainingJob"
    )
    gone = _client_error("ValidationException", NOT_FOUND_MESSAGE, "DescribeTrainingJob")
    sm = FakeSageMaker(statuses=["Deleting", gone], create_errors=[taken, taken])
    client, _ = factory(sm)

    out = provider.create_job({"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep)

    # Each time the name is taken it asks by whom: the old job, still Deleting, then no one yet.
    assert sm.calls == [
        ("create", JOB_NAME),
        ("describe", "Deleting"),
        ("create", JOB_NAME),
        ("describe", "error"),
        ("create", JOB_NAME),
        ("describe", "InProgress"),
    ]
    assert out["status"] == "InProgress"
    assert clock.sleeps == [provider.POLL_SECONDS] * 2


def test_create_job_hands_boto3_integers_where_pulumi_gives_floats(clock):
    """Pulumi's provider host gives a dynamic provider every number as a float (protobuf Struct)."""
    from google.protobuf import json_format, struct_pb2

    struct = struct_pb2.Struct()
    struct.update(
        {
            "TrainingJobName": JOB_NAME,
            "ResourceConfig": {"InstanceCount": 2, "VolumeSizeInGB": 100},
            "Tags": [{"Key": "run", "Value": "1"}],
        }
    )
    as_pulumi_gives_it = json_format.MessageToDict(struct)
    assert as_pulumi_gives_it["ResourceConfig"]["InstanceCount"] == 2.0 and isinstance(
        as_pulumi_gives_it["ResourceConfig"]["InstanceCount"], float
    )
    seen: list[dict[str, Any]] = []

    class Recording(FakeSageMaker):
        def create_training_job(self, **request: Any) -> dict[str, Any]:
            seen.append(request)
            return super().create_training_job(**request)

    client, _ = factory(Recording())
    provider.create_job(as_pulumi_gives_it, REGION, client=client, sleep=clock.sleep)

    (request,) = seen
    assert request["ResourceConfig"] == {"InstanceCount": 2, "VolumeSizeInGB": 100}
    assert all(type(v) is int for v in request["ResourceConfig"].values())
    assert request["Tags"] == [{"Key": "run", "Value": "1"}]


def test_create_job_gives_up_on_propagation_after_its_deadline(clock):
    message = f"Could not assume role {ROLE_ARN}"
    sm = FakeSageMaker(create_errors=[_client_error("ValidationException", message, "CreateTrainingJob")] * 100)
    client, _ = factory(sm)

    with pytest.raises(ClientError, match="Could not assume role"):
        provider.create_job({"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep)

    # Retried every POLL_SECONDS until PROPAGATION_SECONDS had passed, then the error itself.
    assert len(clock.sleeps) == provider.PROPAGATION_SECONDS // provider.POLL_SECONDS
    assert sm.names() == ["create"] * (len(clock.sleeps) + 1)


# ---------------------------------------------------------------------------------------------
# delete_job
# ---------------------------------------------------------------------------------------------


class JobInterfaces:
    """The network: the job's leftovers (one attached, one not) and interfaces that must stay."""

    def __init__(self, net: Network):
        self.net = net
        self.attached, self.attachment, self.instance = net.attached_interface(net.subnet, [net.sg])
        self.detached = net.interface(net.subnet, [net.sg])
        self.other_group = net.interface(net.subnet, [net.other_sg])  # same subnet, another group
        self.other_subnet = net.interface(net.other_subnet, [net.sg])  # the job's group, another subnet
        self.before = net.interface_ids()  # the instance's own primary interface included

    @property
    def job(self) -> set[str]:
        return {self.attached, self.detached}


@pytest.fixture
def interfaces(network) -> JobInterfaces:
    return JobInterfaces(network)


def _delete(sm: FakeSageMaker, net: Network, clock: Clock, timeout: int = 3600) -> tuple[list[str], Spy]:
    ec2 = Spy(net.ec2)
    client, asked = factory(sm, ec2)
    deleted = provider.delete_job(JOB_NAME, REGION, [net.sg], [net.subnet], timeout, client=client, sleep=clock.sleep)
    assert set(asked) <= {("sagemaker", REGION), ("ec2", REGION)}
    return deleted, ec2


def test_delete_job_stops_a_running_job_waits_deletes_it_then_its_interfaces(interfaces, clock):
    net = interfaces.net
    sm = FakeSageMaker(statuses=["InProgress", "Stopping", "Stopping", "Stopped"])

    deleted, ec2 = _delete(sm, net, clock)

    assert sm.calls == [
        ("describe", "InProgress"),
        ("stop", JOB_NAME),
        ("describe", "Stopping"),
        ("describe", "Stopping"),
        ("describe", "Stopped"),
        ("delete", JOB_NAME),
        ("describe", "Deleting"),
        ("describe", "error"),  # gone: its name is free again
    ]
    assert clock.sleeps == [provider.POLL_SECONDS] * 5
    assert sorted(deleted) == sorted(interfaces.job)
    assert net.interface_ids() == interfaces.before - interfaces.job
    assert {interfaces.other_group, interfaces.other_subnet} <= net.interface_ids()
    # The attached one was force-detached before it was deleted (moto would delete it attached).
    names = [(name, kwargs) for name, kwargs in ec2.calls if name != "describe_network_interfaces"]
    assert ("detach_network_interface", {"AttachmentId": interfaces.attachment, "Force": True}) in names
    detach = names.index(("detach_network_interface", {"AttachmentId": interfaces.attachment, "Force": True}))
    assert names.index(("delete_network_interface", {"NetworkInterfaceId": interfaces.attached})) > detach
    assert len([n for n, _ in names if n == "detach_network_interface"]) == 1


@pytest.mark.parametrize("status", ["Completed", "Failed", "Stopped"])
def test_delete_job_of_a_finished_job_deletes_it_without_stopping(status, interfaces, clock):
    sm = FakeSageMaker(statuses=[status])

    deleted, _ = _delete(sm, interfaces.net, clock)

    assert sm.calls == [("describe", status), ("delete", JOB_NAME), ("describe", "Deleting"), ("describe", "error")]
    assert clock.sleeps == [provider.POLL_SECONDS] * 2
    assert sorted(deleted) == sorted(interfaces.job)


def test_delete_job_waits_for_a_job_already_stopping_without_stopping_it_again(interfaces, clock):
    sm = FakeSageMaker(statuses=["Stopping", "Stopped"])

    _delete(sm, interfaces.net, clock)

    assert sm.names() == ["describe", "describe", "delete", "describe", "describe"]


def test_delete_job_of_a_job_that_is_gone_still_cleans_its_interfaces(interfaces, clock):
    sm = FakeSageMaker(statuses=[_client_error("ValidationException", NOT_FOUND_MESSAGE, "DescribeTrainingJob")])

    deleted, _ = _delete(sm, interfaces.net, clock)

    assert sm.names() == ["describe"]
    assert sorted(deleted) == sorted(interfaces.job)
    assert interfaces.net.interface_ids() == interfaces.before - interfaces.job


def test_delete_job_tolerates_the_job_vanishing_before_its_delete(interfaces, clock):
    class Vanishing(FakeSageMaker):
        def delete_training_job(self, TrainingJobName: str) -> dict[str, Any]:
            super().delete_training_job(TrainingJobName)
            raise _client_error("ValidationException", NOT_FOUND_MESSAGE, "DeleteTrainingJob")

    sm = Vanishing(statuses=["Completed"])

    deleted, _ = _delete(sm, interfaces.net, clock)

    assert sm.names() == ["describe", "delete", "describe", "describe"]
    assert sorted(deleted) == sorted(interfaces.job)


def test_delete_job_raises_other_describe_errors(interfaces, clock):
    error = _client_error(
        "AccessDeniedException",
        "User is not authorized to perform: sagemaker:DescribeTrainingJob",
        "DescribeTrainingJob",
    )
    sm = FakeSageMaker(statuses=[error])

    with pytest.raises(ClientError) as raised:
        _delete(sm, interfaces.net, clock)

    assert raised.value is error
    assert interfaces.net.interface_ids() == interfaces.before  # nothing deleted


def test_delete_job_times_out_while_the_job_stays_stopping(interfaces, clock):
    net = interfaces.net
    sm = FakeSageMaker(statuses=["InProgress", "Stopping"])
    client, asked = factory(sm, Spy(net.ec2))

    with pytest.raises(TimeoutError) as raised:
        provider.delete_job(JOB_NAME, REGION, [net.sg], [net.subnet], 60, client=client, sleep=clock.sleep)

    assert JOB_NAME in str(raised.value)
    assert "Stopping" in str(raised.value)
    assert "delete" not in sm.names()
    assert sm.names().count("stop") == 1
    # Polled until the deadline had passed (at most one poll late), and no longer.
    assert clock.now - 1000.0 > 60
    assert clock.now - 1000.0 <= 60 + provider.POLL_SECONDS
    assert ("ec2", REGION) not in asked
    assert net.interface_ids() == interfaces.before


def test_delete_interfaces_without_group_or_subnets_deletes_nothing():
    def no_client(service: str, region: str) -> Any:
        raise AssertionError(f"no {service} client is needed")

    assert provider.delete_interfaces(REGION, [], ["subnet-0123456789abcdef0"], client=no_client) == []
    assert provider.delete_interfaces(REGION, ["sg-0123456789abcdef0"], [], client=no_client) == []


# What moto's EC2 hides: its detach is immediate, and nothing else deletes interfaces concurrently.
# Terraform's aws_sagemaker_training_job delete, which the module mirrors, waits for the detachment
# (waitNetworkInterfaceDetached) and ignores InvalidNetworkInterfaceID.NotFound / InvalidAttachmentID.NotFound.


class SlowDetach(Spy):
    """EC2 as it behaves: DetachNetworkInterface only starts the detachment, and DeleteNetworkInterface
    answers InvalidNetworkInterface.InUse until it has finished; here it has once the caller has
    looked again (a DescribeNetworkInterfaces after the detach). ``attached`` maps attachment IDs
    to their interfaces."""

    def __init__(self, client: Any, attached: dict[str, str]):
        super().__init__(client)
        self.attached = attached
        self.detaching: set[str] = set()
        # Every DescribeNetworkInterfaces, a waiter's included.
        client.meta.events.register("before-call.ec2.DescribeNetworkInterfaces", self.waited)

    def waited(self, *_: Any, **__: Any) -> None:
        self.detaching.clear()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = super().__getattr__(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            eni = kwargs.get("NetworkInterfaceId")
            if name == "delete_network_interface" and eni in self.detaching:
                raise _client_error(
                    "InvalidNetworkInterface.InUse", f"Interface: [{eni}] in use.", "DeleteNetworkInterface"
                )
            out = method(*args, **kwargs)
            if name == "detach_network_interface":
                self.detaching.add(self.attached[kwargs["AttachmentId"]])
            return out

        return call


def test_delete_interfaces_waits_for_a_detachment_before_deleting(interfaces, clock):
    net = interfaces.net
    ec2 = SlowDetach(net.ec2, {interfaces.attachment: interfaces.attached})
    client, _ = factory(None, ec2)
    warnings: list[str] = []

    deleted = provider.delete_interfaces(
        REGION, [net.sg], [net.subnet], client=client, sleep=clock.sleep, warn=warnings.append
    )

    assert sorted(deleted) == sorted(interfaces.job)
    assert net.interface_ids() == interfaces.before - interfaces.job
    # The delete right after the detach was "in use": one pause, a fresh look, and it went.
    assert clock.sleeps == [provider.ENI_FIRST_PAUSE]
    assert [name for name, _ in ec2.calls].count("detach_network_interface") == 1
    assert warnings == []


class RacingCleanup(Spy):
    """SageMaker removes its own interfaces after the job ends, at the same time as the provider:
    one interface listed by DescribeNetworkInterfaces is gone by the time it is deleted."""

    def __init__(self, client: Any, gone: str):
        super().__init__(client)
        self.gone: str | None = gone

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = super().__getattr__(name)
        if name != "describe_network_interfaces":
            return method

        def call(**kwargs: Any) -> Any:
            out = method(**kwargs)
            if self.gone:
                self._client.delete_network_interface(NetworkInterfaceId=self.gone)
                self.gone = None
            return out

        return call


def test_delete_interfaces_ignores_an_interface_deleted_meanwhile(interfaces, clock):
    net = interfaces.net
    client, _ = factory(None, RacingCleanup(net.ec2, gone=interfaces.detached))
    warnings: list[str] = []

    deleted = provider.delete_interfaces(
        REGION, [net.sg], [net.subnet], client=client, sleep=clock.sleep, warn=warnings.append
    )

    assert deleted == [interfaces.attached]
    assert net.interface_ids() == interfaces.before - interfaces.job
    assert warnings == [] and clock.sleeps == []


# ---------------------------------------------------------------------------------------------
# TrainingJobProvider
# ---------------------------------------------------------------------------------------------


def _props(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "request": {
            "TrainingJobName": JOB_NAME,
            "RoleArn": ROLE_ARN,
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
            "VpcConfig": {
                "SecurityGroupIds": ["sg-0123456789abcdef0"],
                "Subnets": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
            },
        },
        "region": REGION,
        "stopTimeoutSeconds": 3600,
        "arn": _arn(JOB_NAME),
        "status": "InProgress",
    }
    props.update(changes)
    return props


def test_diff_of_identical_props_is_no_change():
    result = provider.TrainingJobProvider().diff(JOB_NAME, _props(), _props())

    assert result.changes is False
    assert result.replaces == []


def test_diff_of_a_changed_request_replaces_the_job_deleting_the_old_one_first():
    olds = _props()
    news = _props(
        request={
            **olds["request"],
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4, "VolumeSizeInGB": 100},
        }
    )

    result = provider.TrainingJobProvider().diff(JOB_NAME, olds, news)

    assert result.changes is True
    assert result.replaces == ["request"]
    assert result.delete_before_replace is True


def test_diff_of_a_changed_region_replaces_the_job():
    result = provider.TrainingJobProvider().diff(JOB_NAME, _props(), _props(region="us-east-1"))

    assert result.changes is True
    assert result.replaces == ["region"]
    assert result.delete_before_replace is True


def test_delete_reads_the_group_and_subnets_from_the_request(monkeypatch: pytest.MonkeyPatch):
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(provider, "delete_job", lambda *args, **kwargs: seen.append((*args, kwargs)))

    # Pulumi hands numbers back as floats.
    provider.TrainingJobProvider().delete(JOB_NAME, _props(stopTimeoutSeconds=5400.0))

    # An unconfigured provider (configure is Pulumi's) uses boto3's standard chain.
    assert seen == [
        (
            JOB_NAME,
            REGION,
            ["sg-0123456789abcdef0"],
            ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
            5400,
            {"client": provider._client},
        )
    ]
    assert isinstance(seen[0][4], int)


def test_delete_of_a_job_outside_a_vpc_cleans_no_interfaces(monkeypatch: pytest.MonkeyPatch):
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(provider, "delete_job", lambda *args, **kwargs: seen.append(args))
    props = _props()
    del props["request"]["VpcConfig"]

    provider.TrainingJobProvider().delete(JOB_NAME, props)

    assert seen == [(JOB_NAME, REGION, [], [], 3600)]


def test_create_and_read_against_moto(network):
    request = maskrcnn_request([network.sg], [network.subnet])
    name = request["TrainingJobName"]
    props = {"request": request, "region": REGION, "stopTimeoutSeconds": 3600, "arn": None, "status": None}
    p = provider.TrainingJobProvider()

    created = p.create(props)

    assert created.id == name
    assert created.outs is not None
    assert created.outs["arn"] == _arn(name)
    assert (
        created.outs["status"]
        == boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)[
            "TrainingJobStatus"
        ]
    )
    assert {k: created.outs[k] for k in ("request", "region", "stopTimeoutSeconds")} == {
        k: props[k] for k in ("request", "region", "stopTimeoutSeconds")
    }

    read = p.read(name, {**props, "status": "stale"})

    assert read.id == name
    assert read.outs is not None
    assert read.outs["status"] == created.outs["status"]
    assert read.outs["arn"] == created.outs["arn"]


def test_read_of_a_vanished_job_keeps_it_with_status_missing(monkeypatch: pytest.MonkeyPatch):
    """Returning no ID would make Pulumi drop the job from the state, and the next `pulumi up` would
    start a new full training run under the same name without showing anything but a create."""
    sm = FakeSageMaker(statuses=[_client_error("ValidationException", NOT_FOUND_MESSAGE, "DescribeTrainingJob")])
    monkeypatch.setattr(provider, "_client", lambda service, region: sm)
    props = _props(status="Completed")

    read = provider.TrainingJobProvider().read(JOB_NAME, props)

    assert read.id == JOB_NAME
    assert read.outs == {**props, "status": provider.MISSING}  # the last known request and ARN kept
    assert read.inputs is None  # the inputs stay what the program gave


def test_read_raises_on_other_errors_instead_of_calling_the_job_missing(monkeypatch: pytest.MonkeyPatch):
    denied = _client_error(
        "AccessDeniedException",
        "User is not authorized to perform: sagemaker:DescribeTrainingJob",
        "DescribeTrainingJob",
    )
    monkeypatch.setattr(provider, "_client", lambda service, region: FakeSageMaker(statuses=[denied]))

    with pytest.raises(ClientError) as raised:
        provider.TrainingJobProvider().read(JOB_NAME, _props())

    assert raised.value is denied


def test_diff_of_a_missing_job_is_a_replacement_that_deletes_first():
    news = {**_props(), "arn": None, "status": None}  # what the program registers

    result = provider.TrainingJobProvider().diff(JOB_NAME, _props(status=provider.MISSING), news)

    assert result.changes is True and result.replaces == ["status"] and result.delete_before_replace is True


@pytest.mark.parametrize("status", ["InProgress", "Completed", "Failed", "Stopped", "Deleting", provider.UNKNOWN])
def test_diff_ignores_the_status_of_a_job_that_exists(status):
    news = {**_props(), "arn": None, "status": None}

    result = provider.TrainingJobProvider().diff(JOB_NAME, _props(status=status), news)

    assert result.changes is False and result.replaces == []


def test_diff_of_a_tag_change_alone_updates_in_place():
    olds = _props()
    news = _props(request={**olds["request"], "Tags": [{"Key": "team", "Value": "ml"}]})

    result = provider.TrainingJobProvider().diff(JOB_NAME, olds, news)

    assert result.changes is True and result.replaces == []


def test_update_changes_the_tags_of_the_running_job(monkeypatch: pytest.MonkeyPatch):
    sm = FakeSageMaker(statuses=["InProgress"])
    monkeypatch.setattr(provider, "_client", lambda service, region: sm)
    olds = _props(
        request={**_props()["request"], "Tags": [{"Key": "env", "Value": "dev"}, {"Key": "old", "Value": "x"}]}
    )
    news = _props(
        request={**olds["request"], "Tags": [{"Key": "env", "Value": "prod"}, {"Key": "team", "Value": "ml"}]}
    )

    result = provider.TrainingJobProvider().update(JOB_NAME, olds, news)

    arn = olds["arn"]
    assert sm.calls == [
        ("delete_tags", (arn, ["old"])),
        ("add_tags", (arn, [{"Key": "env", "Value": "prod"}, {"Key": "team", "Value": "ml"}])),
    ]
    assert (
        result.outs["request"]["Tags"] == news["request"]["Tags"]
        and result.outs["arn"] == arn
        and result.outs["status"] == "InProgress"
    )


def test_diff_of_a_request_not_known_yet_is_a_replacement():
    """In a preview, a request built from a resource being replaced is unknown as a whole."""
    from pulumi.runtime import rpc

    result = provider.TrainingJobProvider().diff(JOB_NAME, _props(), _props(request=rpc.UNKNOWN))

    assert result.changes is True and result.replaces == ["request"] and result.delete_before_replace is True


def test_the_job_is_created_from_the_request_as_pulumi_serializes_it(network):
    """The path of a real `pulumi up`: the inputs go through Pulumi's wire format (rpc, protobuf:
    every number comes back a float) and the provider through its pickling, then create runs as
    Pulumi's dynamic-provider host calls it (pulumi/dynamic/__main__.py's Create: deserialize the
    properties, unpickle the provider, create), with boto3 validating every parameter, on moto.
    (That module starts a gRPC server when imported, so its three steps are taken here.)"""
    import asyncio
    import base64

    import dill
    from pulumi.dynamic.dynamic import serialize_provider
    from pulumi.runtime import rpc

    request = maskrcnn_request([network.sg], [network.subnet])
    props = {
        "__provider": serialize_provider(provider.TrainingJobProvider()),
        "request": request,
        "region": REGION,
        "stopTimeoutSeconds": 3600,
    }
    loop = asyncio.new_event_loop()
    try:
        struct = loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()

    received = rpc.deserialize_properties(struct)
    assert isinstance(received["request"]["ResourceConfig"]["InstanceCount"], float)  # what the provider gets
    host_provider = dill.loads(base64.b64decode(received["__provider"]))
    result = host_provider.create(received)

    assert result.id == request["TrainingJobName"]
    job = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=request["TrainingJobName"]
    )
    assert result.outs["status"] == job["TrainingJobStatus"] and result.outs["arn"] == job["TrainingJobArn"]
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert job["StoppingCondition"]["MaxRuntimeInSeconds"] == request["StoppingCondition"]["MaxRuntimeInSeconds"]


def _through_the_wire(props: dict[str, Any]) -> dict[str, Any]:
    """Properties as the provider gets them back from Pulumi: through rpc and protobuf (numbers
    become floats), as stored in the state or sent by the program."""
    import asyncio

    from pulumi.runtime import rpc

    loop = asyncio.new_event_loop()
    try:
        struct = loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()
    return dict(rpc.deserialize_properties(struct))


def test_a_job_gone_at_aws_is_kept_shown_as_a_replacement_and_destroyed_without_error(
    interfaces, monkeypatch: pytest.MonkeyPatch
):
    """The whole life of a job deleted behind Pulumi's back: refresh keeps it (``Missing``), the next
    preview shows a replacement to approve instead of a quiet create, and a destroy succeeds."""
    net = interfaces.net
    inputs = {
        "request": maskrcnn_request([net.sg], [net.subnet]),
        "region": REGION,
        "stopTimeoutSeconds": 3600,
        "arn": None,
        "status": None,
    }
    p = provider.TrainingJobProvider()
    created = p.create(_through_the_wire(inputs))  # on moto
    assert created.outs is not None
    state = _through_the_wire(created.outs)
    # Deleted in the console, say: SageMaker no longer knows the name.
    gone = FakeSageMaker(statuses=[_client_error("ValidationException", NOT_FOUND_MESSAGE, "DescribeTrainingJob")])
    monkeypatch.setattr(
        provider,
        "_client",
        lambda service, region: gone if service == "sagemaker" else boto3.client(service, region_name=region),
    )

    refreshed = p.read(created.id, state)  # `pulumi refresh`, or the refresh of `refresh: always`
    assert refreshed.id == created.id and refreshed.outs is not None
    state = _through_the_wire(refreshed.outs)
    assert (
        state["status"] == provider.MISSING
        and state["arn"] == created.outs["arn"]
        and state["request"] == _through_the_wire(inputs)["request"]
    )

    preview = p.diff(created.id, state, _through_the_wire(inputs))  # the next `pulumi preview` / `up`
    assert preview.changes is True and preview.replaces == ["status"] and preview.delete_before_replace is True

    p.delete(created.id, state)  # `pulumi destroy`, or the replacement's delete: no error
    assert gone.names() == ["describe", "describe"]  # nothing to stop or delete
    assert net.interface_ids() == interfaces.before - interfaces.job


# ---------------------------------------------------------------------------------------------
# The network-interface clean-up, against what EC2 answers for interfaces SageMaker holds
# (Stubber: every request and answer checked against EC2's API model)
# ---------------------------------------------------------------------------------------------

SG, SUBNET = "sg-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60718"
ENI_FILTERS = [{"Name": "group-id", "Values": [SG]}, {"Name": "subnet-id", "Values": [SUBNET]}]
SAGEMAKER_REQUESTER = "AROAEXAMPLEROLEID0001:SageMaker"


def _eni(
    eni_id: str, status: str = "available", managed: bool = False, attachment: dict[str, Any] | None = None
) -> dict[str, Any]:
    eni: dict[str, Any] = {
        "NetworkInterfaceId": eni_id,
        "Status": status,
        "SubnetId": SUBNET,
        "Groups": [{"GroupId": SG, "GroupName": "maskrcnn-sm-sagemaker"}],
        "RequesterManaged": managed,
        "InterfaceType": "interface",
    }
    if managed:
        eni["RequesterId"] = SAGEMAKER_REQUESTER
    if attachment:
        eni["Attachment"] = attachment
    return eni


class StubbedEc2:
    """A real EC2 client whose answers are scripted (and checked against the API model)."""

    def __init__(self) -> None:
        self.client = boto3.client("ec2", region_name=REGION)
        self.stub = Stubber(self.client)

    def lists(self, *enis: dict[str, Any], token: str | None = None, after: str | None = None) -> None:
        expected: dict[str, Any] = {"Filters": ENI_FILTERS, **({"NextToken": after} if after else {})}
        self.stub.add_response(
            "describe_network_interfaces",
            {"NetworkInterfaces": list(enis), **({"NextToken": token} if token else {})},
            expected,
        )

    def deletes(self, eni_id: str, error: tuple[str, str] | None = None) -> None:
        if error:
            self.stub.add_client_error(
                "delete_network_interface", error[0], error[1], 400, expected_params={"NetworkInterfaceId": eni_id}
            )
        else:
            self.stub.add_response("delete_network_interface", {}, {"NetworkInterfaceId": eni_id})

    def run(self, clock: Clock, timeout: int = provider.ENI_SECONDS) -> tuple[list[str], list[str]]:
        warnings: list[str] = []
        client, _ = factory(None, self.client)
        with self.stub:
            deleted = provider.delete_interfaces(
                REGION,
                [SG],
                [SUBNET],
                client=client,
                sleep=clock.sleep,
                warn=warnings.append,
                job=JOB_NAME,
                timeout_seconds=timeout,
            )
            self.stub.assert_no_pending_responses()
        return deleted, warnings


def in_use(eni_id: str) -> tuple[str, str]:
    return "InvalidParameterValue", f"Network interface '{eni_id}' is currently in use."


def test_delete_interfaces_leaves_sagemakers_own_attached_interface_to_sagemaker_and_deletes_it_once_released(
    aws, clock
):
    """A requester-managed interface cannot be detached by the account (EC2 user guide,
    requester-managed-eni): no DetachNetworkInterface, only a look again until SageMaker has let go."""
    eni = "eni-0aaaaaaaaaaaaaaa1"
    attached = {
        "AttachmentId": "ela-attach-0aaaaaaaaaaaaaaa1",
        "InstanceOwnerId": "amazon-aws",
        "Status": "attached",
        "DeviceIndex": 1,
    }
    ec2 = StubbedEc2()
    ec2.lists(_eni(eni, "in-use", managed=True, attachment=attached))
    ec2.lists(_eni(eni, "in-use", managed=True, attachment={**attached, "Status": "detaching"}))
    ec2.lists(_eni(eni, "available", managed=True))
    ec2.deletes(eni)

    deleted, warnings = ec2.run(clock)

    assert deleted == [eni] and warnings == []
    assert clock.sleeps == [provider.ENI_FIRST_PAUSE, provider.ENI_FIRST_PAUSE * 2]


def test_delete_interfaces_tries_an_interface_in_use_again_with_growing_pauses(aws, clock):
    eni = "eni-0bbbbbbbbbbbbbbb1"
    ec2 = StubbedEc2()
    for _ in range(2):
        ec2.lists(_eni(eni))
        ec2.deletes(eni, in_use(eni))
    ec2.lists(_eni(eni))
    ec2.deletes(eni, ("InvalidNetworkInterface.InUse", f"Interface: [{eni}] in use."))
    ec2.lists(_eni(eni))
    ec2.deletes(eni)

    deleted, warnings = ec2.run(clock)

    assert deleted == [eni] and warnings == []
    assert clock.sleeps == [5, 10, 20]


def test_delete_interfaces_waits_when_ec2_refuses_the_account_an_interface_sagemaker_manages(aws, clock):
    """OperationNotPermitted / AuthFailure on an interface SageMaker manages: it is SageMaker's to
    remove, and it does (the interface is gone at the next look)."""
    eni = "eni-0ccccccccccccccc1"
    ec2 = StubbedEc2()
    ec2.lists(_eni(eni, managed=True))
    ec2.deletes(eni, ("OperationNotPermitted", f"You are not allowed to manage '{eni}'."))
    ec2.lists(_eni(eni, managed=True))
    ec2.deletes(eni, ("AuthFailure", "You do not have permission to access the specified resource."))
    ec2.lists()

    deleted, warnings = ec2.run(clock)

    assert deleted == [] and warnings == []
    assert clock.sleeps == [5, 10]


def test_delete_interfaces_gives_up_at_its_deadline_with_a_warning_not_an_error(aws, clock):
    eni = "eni-0ddddddddddddddd1"
    ec2 = StubbedEc2()
    for _ in range(5):  # at 0, 5, 15, 35 and 75 s: the deadline (60 s) has passed at the fifth
        ec2.lists(_eni(eni))
        ec2.deletes(eni, in_use(eni))

    deleted, warnings = ec2.run(clock, timeout=60)

    assert deleted == []
    assert clock.sleeps == [5, 10, 20, 40]
    (warning,) = warnings
    assert JOB_NAME in warning and eni in warning and "currently in use" in warning and "after 60 s" in warning
    assert SG in warning and "pulumi destroy" in warning


def test_delete_interfaces_warns_about_other_errors_and_still_deletes_the_rest(aws, clock):
    denied, fine = "eni-0eeeeeeeeeeeeee01", "eni-0eeeeeeeeeeeeee02"
    ec2 = StubbedEc2()
    ec2.lists(_eni(denied), token="page-2")  # two pages
    ec2.lists(_eni(fine), after="page-2")
    ec2.deletes(denied, ("UnauthorizedOperation", "You are not authorized to perform this operation."))
    ec2.deletes(fine)

    deleted, warnings = ec2.run(clock)

    assert deleted == [fine]
    assert clock.sleeps == []  # a refusal is not waited out
    (warning,) = warnings
    assert denied in warning and "UnauthorizedOperation" in warning and fine not in warning


def test_delete_interfaces_warns_when_it_cannot_list_them(aws, clock):
    ec2 = StubbedEc2()
    ec2.stub.add_client_error(
        "describe_network_interfaces",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.",
        403,
        expected_params={"Filters": ENI_FILTERS},
    )

    deleted, warnings = ec2.run(clock)

    assert deleted == []
    (warning,) = warnings
    assert "could not list" in warning and "UnauthorizedOperation" in warning


def test_delete_interfaces_deletes_an_interface_whose_attachment_is_already_gone(aws, clock):
    eni = "eni-0fffffffffffffff1"
    attachment = {
        "AttachmentId": "eni-attach-0fffffffffffffff1",
        "InstanceOwnerId": ACCOUNT,
        "Status": "attached",
        "DeviceIndex": 1,
    }
    ec2 = StubbedEc2()
    ec2.lists(_eni(eni, "in-use", attachment=attachment))
    ec2.stub.add_client_error(
        "detach_network_interface",
        "InvalidAttachmentID.NotFound",
        f"The attachment ID '{attachment['AttachmentId']}' does not exist",
        400,
        expected_params={"AttachmentId": attachment["AttachmentId"], "Force": True},
    )
    ec2.deletes(eni)

    deleted, warnings = ec2.run(clock)

    assert deleted == [eni] and warnings == []


def test_delete_job_whose_interfaces_stay_still_succeeds(interfaces, clock):
    net = interfaces.net
    sm = FakeSageMaker(statuses=["Completed"])
    stuck = interfaces.detached

    class Stuck(Spy):
        def __getattr__(self, name: str) -> Callable[..., Any]:
            method = super().__getattr__(name)

            def call(**kwargs: Any) -> Any:
                if name == "delete_network_interface" and kwargs["NetworkInterfaceId"] == stuck:
                    raise _client_error(*in_use(stuck), "DeleteNetworkInterface")
                return method(**kwargs)

            return call

    client, _ = factory(sm, Stuck(net.ec2))
    warnings: list[str] = []

    deleted = provider.delete_job(
        JOB_NAME, REGION, [net.sg], [net.subnet], 3600, client=client, sleep=clock.sleep, warn=warnings.append
    )

    assert deleted == [interfaces.attached]
    assert net.interface_ids() == interfaces.before - {interfaces.attached}
    (warning,) = warnings
    assert stuck in warning and "in use" in warning
    # Tried for ENI_SECONDS after the job was gone (two POLL_SECONDS of its delete), and no longer.
    waited = sum(clock.sleeps) - 2 * provider.POLL_SECONDS
    assert provider.ENI_SECONDS <= waited <= provider.ENI_SECONDS + provider.ENI_LONGEST_PAUSE


# ---------------------------------------------------------------------------------------------
# Pickling: the provider is in every stack's state by reference
# ---------------------------------------------------------------------------------------------

# `__provider` as the state of every stack with a SageMaker job holds it: serialize_provider(
# TrainingJobProvider()) (pulumi 3.272.0, dill), base64. It names the class by module path and class
# name, nothing more, and `pulumi destroy` and `pulumi refresh` unpickle it without running the
# program. If this test fails because the module or class moved or was renamed, move it back: every
# existing stack would fail to refresh or destroy its jobs (or leave a module at the old path that
# imports the class, and keep this test). See the provider module's docstring for why by reference.
STATE_PROVIDER = "gASVPwAAAAAAAACMIHByb3ZpZGVycy5zYWdlbWFrZXJfdHJhaW5pbmdfam9ilIwTVHJhaW5pbmdKb2JQcm92aWRlcpSTlCmBlC4="
PINNED = ("providers.sagemaker_training_job", "TrainingJobProvider")


def _globals(blob: bytes) -> set[tuple[str, str]]:
    """The (module, name) pairs a pickle imports."""
    import pickletools

    found, strings = set(), []
    for op, arg, _ in pickletools.genops(blob):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.add((strings[-2], strings[-1]))
        elif op.name == "GLOBAL":
            module, name = str(arg).split(" ", 1)
            found.add((module, name))
    return found


def test_the_provider_a_state_holds_still_loads_as_this_class():
    import base64

    import dill

    assert _globals(base64.b64decode(STATE_PROVIDER)) == {PINNED}
    loaded = dill.loads(base64.b64decode(STATE_PROVIDER))
    assert type(loaded) is provider.TrainingJobProvider
    assert loaded._clients is None  # configured in the provider host, never pickled


def test_the_provider_is_pickled_as_a_reference_to_this_module_and_class_only():
    import base64

    from pulumi.dynamic.dynamic import serialize_provider

    assert _globals(base64.b64decode(serialize_provider(provider.TrainingJobProvider()))) == {PINNED}
    assert (provider.TrainingJobProvider.__module__, provider.TrainingJobProvider.__qualname__) == PINNED
    # The resource type is in every URN: changing it would replace every job.
    assert provider.SageMakerTrainingJob._resource_type_name == "dynamic/gputraining:SageMakerTrainingJob"


# ---------------------------------------------------------------------------------------------
# The AWS identity: the stack's AWS provider config (aws:profile, aws:assumeRoles, keys)
# ---------------------------------------------------------------------------------------------

DEPLOY_ROLE = "arn:aws:iam::222222222222:role/deploy"
AUDIT_ROLE = "arn:aws:iam::111111111111:role/platform/jump"


def test_the_settings_follow_the_aws_providers_config_as_pulumi_passes_it():
    roles = [
        {
            "roleArn": AUDIT_ROLE,
            "sessionName": "ci-run-42",
            "externalId": "ext-1234",
            "duration": "1h30m",
            "policyArns": ["arn:aws:iam::aws:policy/ReadOnlyAccess"],
            "tags": {"team": "ml"},
            "transitiveTagKeys": ["team"],
        },
        {"roleArn": DEPLOY_ROLE},
    ]
    # Objects and lists reach a provider as their JSON text (config.Value.Value in the engine).
    config = {
        "aws:region": "us-west-2",
        "aws:profile": "ml",
        "aws:assumeRoles": json.dumps(roles),
        "aws:stsRegion": "us-east-1",
    }

    settings = provider.AwsSettings.from_config(config.get)

    assert settings.profile == "ml" and settings.sts_region == "us-east-1" and settings.access_key is None
    first, second = (r.request() for r in settings.assume_roles)
    assert first == {
        "RoleArn": AUDIT_ROLE,
        "RoleSessionName": "ci-run-42",
        "ExternalId": "ext-1234",
        "DurationSeconds": 5400,
        "PolicyArns": [{"arn": "arn:aws:iam::aws:policy/ReadOnlyAccess"}],
        "Tags": [{"Key": "team", "Value": "ml"}],
        "TransitiveTagKeys": ["team"],
    }
    assert second == {"RoleArn": DEPLOY_ROLE, "RoleSessionName": provider.DEFAULT_SESSION_NAME}
    # Both are requests STS's AssumeRole takes.
    import botocore.session
    import botocore.validate

    shape = botocore.session.get_session().get_service_model("sts").operation_model("AssumeRole").input_shape
    for request in (first, second):
        botocore.validate.validate_parameters(request, shape)


def test_keys_from_the_config_are_never_shown():
    settings = provider.AwsSettings.from_config(
        {"aws:accessKey": "AKIAEXAMPLEKEY000001", "aws:secretKey": "s3cr3t/value", "aws:token": "tok3n"}.get
    )

    assert settings.access_key == "AKIAEXAMPLEKEY000001" and settings.secret_key == "s3cr3t/value"
    assert (
        "s3cr3t" not in repr(settings)
        and "AKIAEXAMPLEKEY000001" not in repr(settings)
        and "tok3n" not in repr(settings)
    )


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("1h", 3600),
        ("15m", 900),
        ("1h30m", 5400),
        ("900s", 900),
        ("1.5h", 5400),
        ("12h", 43200),
        ("1d", None),
        ("h", None),
        ("1h 30m", None),
        ("", None),
        (3600, None),
    ],
)
def test_durations_read_as_the_aws_provider_reads_them(text, seconds):
    assert provider.duration_seconds(text) == seconds


@pytest.mark.parametrize(
    "config, key, words",
    [
        (
            {"aws:assumeRole": '{"roleArn": "arn:aws:iam::222222222222:role/deploy"}'},
            "aws:assumeRole",
            "aws:assumeRoles",
        ),
        (
            {"aws:assumeRoleWithWebIdentity": '{"roleArn": "arn:aws:iam::222222222222:role/ci"}'},
            "aws:assumeRoleWithWebIdentity",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        ),
        ({"aws:sharedConfigFiles": '["/etc/aws/config"]'}, "aws:sharedConfigFiles", "AWS_CONFIG_FILE"),
        (
            {"aws:sharedCredentialsFiles": '["/etc/aws/credentials"]'},
            "aws:sharedCredentialsFiles",
            "AWS_SHARED_CREDENTIALS_FILE",
        ),
        ({"aws:endpoints": '[{"sagemaker": "http://localhost:4566"}]'}, "aws:endpoints", "AWS_ENDPOINT_URL_SAGEMAKER"),
        ({"aws:accessKey": "AKIAEXAMPLEKEY000001"}, "aws:secretKey", "required with aws:accessKey"),
        ({"aws:profile": ""}, "aws:profile", "non-empty string"),
        ({"aws:assumeRoles": '{"roleArn": "arn:aws:iam::222222222222:role/deploy"}'}, "aws:assumeRoles", "not a list"),
        (
            {"aws:assumeRoles": '[{"roleArn": "deploy"}]'},
            "aws:assumeRoles[0].roleArn",
            "'deploy' is not an IAM role ARN",
        ),
        ({"aws:assumeRoles": '[{"sessionName": "ci"}]'}, "aws:assumeRoles[0].roleArn", "required"),
        (
            {"aws:assumeRoles": '[{"roleArn": "arn:aws:iam::222222222222:role/d", "duration": "13h"}]'},
            "aws:assumeRoles[0].duration",
            "15m to 12h",
        ),
        (
            {"aws:assumeRoles": '[{"roleArn": "arn:aws:iam::222222222222:role/d", "externalId": "x"}]'},
            "aws:assumeRoles[0].externalId",
            "2-1224",
        ),
        (
            {"aws:assumeRoles": '[{"roleArn": "arn:aws:iam::222222222222:role/d", "sessionName": "a b"}]'},
            "aws:assumeRoles[0].sessionName",
            "'a b'",
        ),
        (
            {"aws:assumeRoles": '[{"roleArn": "arn:aws:iam::222222222222:role/d", "rolearn": "x"}]'},
            "aws:assumeRoles[0]",
            "unknown field(s) rolearn",
        ),
        (
            {"aws:assumeRoles": '[{"roleArn": "arn:aws:iam::222222222222:role/d", "tags": ["a"]}]'},
            "aws:assumeRoles[0].tags",
            "map of strings",
        ),
    ],
)
def test_settings_the_provider_cannot_follow_are_one_problem_naming_their_key(config, key, words):
    from facts.problems import ConfigError

    with pytest.raises(ConfigError) as raised:
        provider.AwsSettings.from_config(config.get)

    (problem,) = raised.value.problems
    assert problem.key == key and words in problem.message


def test_endpoints_of_other_services_are_fine():
    assert (
        provider.AwsSettings.from_config({"aws:endpoints": '[{"s3": "http://localhost:4566"}]'}.get)
        == provider.AwsSettings()
    )


def test_the_profile_wins_over_environment_keys_as_in_the_aws_provider(
    aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import os

    config = tmp_path / "aws-config"
    config.write_text(
        "[profile ml]\naws_access_key_id = AKIAPROFILEML0000001\naws_secret_access_key = from-the-profile\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))

    def access_key(settings: provider.AwsSettings) -> str:
        return str(provider.Clients(settings).session(REGION).get_credentials().get_frozen_credentials().access_key)

    assert access_key(provider.AwsSettings(profile="ml")) == "AKIAPROFILEML0000001"
    assert access_key(provider.AwsSettings()) == os.environ["AWS_ACCESS_KEY_ID"]  # the environment's (moto's)
    assert access_key(provider.AwsSettings(access_key="AKIAKEYSFROMCONFIG01", secret_key="x")) == "AKIAKEYSFROMCONFIG01"


def test_an_unknown_profile_is_a_problem_of_aws_profile(aws):
    from facts.problems import ConfigError

    with pytest.raises(ConfigError) as raised:
        provider.Clients(provider.AwsSettings(profile="nope"))("sagemaker", REGION)

    assert raised.value.problems[0].key == "aws:profile" and "'nope'" in raised.value.problems[0].message


class AssumeRoleSpy:
    """Records every STS AssumeRole: its request and the access key it was signed with, and the key it handed out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        import botocore.client

        self.calls: list[dict[str, Any]] = []
        original = botocore.client.BaseClient._make_api_call
        spy = self

        def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            out = original(client, operation, params)
            if operation == "AssumeRole":
                signer = client._request_signer._credentials.get_frozen_credentials()
                spy.calls.append(
                    {**params, "signed with": signer.access_key, "handed out": out["Credentials"]["AccessKeyId"]}
                )
            return out

        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)


def test_the_roles_are_assumed_in_turn_each_with_the_credentials_of_the_one_before(
    aws, monkeypatch: pytest.MonkeyPatch
):
    import os

    spy = AssumeRoleSpy(monkeypatch)
    settings = provider.AwsSettings(
        assume_roles=(
            provider.AssumeRole(AUDIT_ROLE, external_id="ext-1234", duration_seconds=900),
            provider.AssumeRole(DEPLOY_ROLE),
        )
    )
    clients = provider.Clients(settings)

    identity = clients("sts", REGION).get_caller_identity()

    assert identity["Arn"] == f"arn:aws:sts::222222222222:assumed-role/deploy/{provider.DEFAULT_SESSION_NAME}"
    first, second = spy.calls
    assert (first["RoleArn"], first["ExternalId"], first["DurationSeconds"], first["signed with"]) == (
        AUDIT_ROLE,
        "ext-1234",
        900,
        os.environ["AWS_ACCESS_KEY_ID"],
    )
    assert (second["RoleArn"], second["signed with"]) == (DEPLOY_ROLE, first["handed out"])
    # The clients share the session, and its credentials refresh themselves (a destroy can outlast them).
    assert clients("sagemaker", REGION) is clients("sagemaker", REGION)
    assert len(spy.calls) == 2
    assert clients.session(REGION).get_credentials().method == "assume-role"


def _configure_as_the_provider_host_does(p: provider.TrainingJobProvider, config: dict[str, Any]) -> None:
    """What Pulumi does with the stack config: the engine sends every key with its namespace, objects
    as JSON text and secrets marked secret (GetPackageConfig in pkg/resource/deploy/target.go); the
    host (pulumi/dynamic/__main__.py Configure and get_provider) deserializes and unwraps them,
    unpickles the provider and calls `configure`. (That module starts a gRPC server when imported,
    so its steps are taken here.)"""
    from google.protobuf import struct_pb2
    from pulumi import dynamic
    from pulumi.runtime import rpc

    struct = struct_pb2.Struct()
    struct.update(config)
    raw = {k: rpc.unwrap_rpc_secret(v) for k, v in rpc.deserialize_properties(struct).items()}
    p.configure(dynamic.ConfigureRequest(config=dynamic.Config(raw_config=raw, project_name="gpu-training")))


def _secret(value: str) -> dict[str, str]:
    from pulumi.runtime import rpc

    return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}


def test_a_configured_provider_starts_the_job_as_the_stacks_assumed_role_and_stores_none_of_it(
    network, monkeypatch: pytest.MonkeyPatch
):
    spy = AssumeRoleSpy(monkeypatch)
    p = provider.TrainingJobProvider()
    _configure_as_the_provider_host_does(
        p,
        {
            "aws:region": REGION,
            "aws:accessKey": "AKIASTACKCONFIG00001",
            "aws:secretKey": _secret("stack-secret-key"),
            "aws:assumeRoles": json.dumps([{"roleArn": DEPLOY_ROLE, "externalId": "ext-1234"}]),
            "gpu-training:gpuAvailabilityZone": "auto",
        },
    )
    request = maskrcnn_request([network.sg], [network.subnet])
    props = {"request": request, "region": REGION, "stopTimeoutSeconds": 3600, "arn": None, "status": None}

    created = p.create(props)

    (call,) = spy.calls
    assert (
        call["RoleArn"] == DEPLOY_ROLE
        and call["ExternalId"] == "ext-1234"
        and call["signed with"] == "AKIASTACKCONFIG00001"
    )
    assert created.id == request["TrainingJobName"] and created.outs is not None
    assert set(created.outs) == set(props)  # nothing of the identity goes into the state
    assert "stack-secret-key" not in json.dumps(created.outs) and "AKIASTACKCONFIG00001" not in json.dumps(created.outs)
    read = p.read(created.id, created.outs)
    assert read.outs is not None and read.outs["status"] == created.outs["status"]
    assert len(spy.calls) == 1  # one session for both calls


def test_a_provider_without_the_stack_config_refuses_to_guess_the_identity():
    """A Pulumi CLI before 3.139.0 passes a dynamic provider none of the stack config: aws:profile
    and aws:assumeRoles would be silently ignored, and a destroy could look in the wrong account."""
    from facts.problems import ConfigError

    with pytest.raises(ConfigError) as raised:
        _configure_as_the_provider_host_does(provider.TrainingJobProvider(), {})

    assert raised.value.problems[0].key == "aws:region" and "3.139.0" in raised.value.problems[0].message


def test_a_setting_the_provider_cannot_follow_stops_it_at_configure():
    from facts.problems import ConfigError

    with pytest.raises(ConfigError) as raised:
        _configure_as_the_provider_host_does(
            provider.TrainingJobProvider(),
            {"aws:region": REGION, "aws:assumeRole": json.dumps({"roleArn": DEPLOY_ROLE})},
        )

    assert [p.key for p in raised.value.problems] == ["aws:assumeRole"]


# ---------------------------------------------------------------------------------------------
# A started job is always recorded
# ---------------------------------------------------------------------------------------------


class DescribeFails(FakeSageMaker):
    """CreateTrainingJob works; DescribeTrainingJob then fails ``failures`` times."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        out = super().create_training_job(**request)
        throttled = _client_error("ThrottlingException", "Rate exceeded", "DescribeTrainingJob")
        self.statuses = [throttled] * self.failures + ["InProgress"]
        return out


def test_create_job_records_a_started_job_even_when_describe_keeps_failing(clock):
    sm = DescribeFails(failures=100)
    client, _ = factory(sm)
    warnings: list[str] = []

    out = provider.create_job(
        {"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep, warn=warnings.append
    )

    assert out == {"arn": _arn(JOB_NAME), "status": provider.UNKNOWN}  # the ARN from CreateTrainingJob's answer
    assert sm.names() == ["create"] + ["describe"] * provider.DESCRIBE_TRIES
    assert clock.sleeps == [provider.POLL_SECONDS] * (provider.DESCRIBE_TRIES - 1)
    (warning,) = warnings
    assert JOB_NAME in warning and "Rate exceeded" in warning and "pulumi refresh" in warning


def test_create_job_describes_again_after_a_failure(clock):
    sm = DescribeFails(failures=1)
    client, _ = factory(sm)

    out = provider.create_job({"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep, warn=pytest.fail)

    assert out == {"arn": _arn(JOB_NAME), "status": "InProgress"}
    assert sm.names() == ["create", "describe", "describe"]


def test_the_provider_returns_the_job_when_describe_fails_so_pulumi_records_it(monkeypatch: pytest.MonkeyPatch):
    sm = DescribeFails(failures=100)
    monkeypatch.setattr(provider, "_client", lambda service, region: sm)
    monkeypatch.setattr(provider, "POLL_SECONDS", 0)

    created = provider.TrainingJobProvider().create(_props(arn=None, status=None))

    assert created.id == JOB_NAME and created.outs is not None and created.outs["status"] == provider.UNKNOWN


def _described(request: dict[str, Any], status: str, **changes: Any) -> dict[str, Any]:
    """DescribeTrainingJob's answer for a job started with ``request``."""
    job = {
        "TrainingJobName": request["TrainingJobName"],
        "TrainingJobArn": _arn(request["TrainingJobName"]),
        "ModelArtifacts": {
            "S3ModelArtifacts": (
                f"{request['OutputDataConfig']['S3OutputPath']}{request['TrainingJobName']}/output/model.tar.gz"
            )
        },
        "TrainingJobStatus": status,
        "SecondaryStatus": "Training" if status == "InProgress" else status,
        "StoppingCondition": request["StoppingCondition"],
        "CreationTime": datetime.datetime(2026, 11, 2, 9, 30, tzinfo=datetime.UTC),
        **{
            k: request[k]
            for k in ("RoleArn", "AlgorithmSpecification", "ResourceConfig", "VpcConfig", "OutputDataConfig")
        },
    }
    job.update(changes)
    return job


def _name_taken(request: dict[str, Any], described: dict[str, Any]) -> tuple[Any, Stubber]:
    sm = boto3.client("sagemaker", region_name=REGION)
    stub = Stubber(sm)
    message = (
        "Training job names must be unique within an AWS account and region, and a training "
        f"job with this name already exists ({described['TrainingJobArn']})"
    )
    stub.add_client_error("create_training_job", "ResourceInUse", message, 400, expected_params=request)
    stub.add_response("describe_training_job", described, {"TrainingJobName": request["TrainingJobName"]})
    return sm, stub


@pytest.mark.parametrize("status", ["InProgress", "Completed"])
def test_create_job_takes_over_a_job_of_its_name_and_request_instead_of_a_second_run(aws, clock, status):
    """The name is the stack's and the spec's: a job under it that runs this very request is this
    run (botocore retried a create whose first answer was lost, or a state lost the job)."""
    request = maskrcnn_request([SG], [SUBNET])
    sm, stub = _name_taken(request, _described(request, status))
    warnings: list[str] = []

    with stub:
        out = provider.create_job(request, REGION, client=factory(sm)[0], sleep=clock.sleep, warn=warnings.append)
        stub.assert_no_pending_responses()

    assert out == {"arn": _arn(request["TrainingJobName"]), "status": status}
    assert clock.sleeps == []
    (warning,) = warnings
    assert request["TrainingJobName"] in warning and "bump its `run`" in warning


def test_create_job_refuses_a_job_of_its_name_running_another_request(aws, clock):
    request = maskrcnn_request([SG], [SUBNET])
    other_role = "arn:aws:iam::123456789012:role/gpu-training-maskrcnn-sm-old"
    sm, stub = _name_taken(request, _described(request, "Completed", RoleArn=other_role))

    with stub, pytest.raises(RuntimeError) as raised:
        provider.create_job(request, REGION, client=factory(sm)[0], sleep=clock.sleep, warn=pytest.fail)

    message = str(raised.value)
    assert (
        request["TrainingJobName"] in message
        and "RoleArn" in message
        and "delete-training-job" in message
        and "`run`" in message
    )


def test_create_job_asks_again_when_it_cannot_tell_who_holds_its_name(aws, clock):
    request = maskrcnn_request([SG], [SUBNET])
    sm = boto3.client("sagemaker", region_name=REGION)
    stub = Stubber(sm)
    taken = "Training job names must be unique within an AWS account and region"
    stub.add_client_error("create_training_job", "ResourceInUse", taken, 400, expected_params=request)
    stub.add_client_error(
        "describe_training_job",
        "ThrottlingException",
        "Rate exceeded",
        400,
        expected_params={"TrainingJobName": request["TrainingJobName"]},
    )
    stub.add_client_error("create_training_job", "ResourceInUse", taken, 400, expected_params=request)
    stub.add_response(
        "describe_training_job", _described(request, "InProgress"), {"TrainingJobName": request["TrainingJobName"]}
    )
    warnings: list[str] = []

    with stub:
        out = provider.create_job(request, REGION, client=factory(sm)[0], sleep=clock.sleep, warn=warnings.append)
        stub.assert_no_pending_responses()

    assert out["status"] == "InProgress" and len(warnings) == 1
    assert clock.sleeps == [provider.POLL_SECONDS]
