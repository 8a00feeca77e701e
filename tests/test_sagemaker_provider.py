"""providers/sagemaker_training_job.py: the dynamic provider that starts a SageMaker training job
without waiting for the run, and on delete stops it, waits, deletes it and removes the network
interfaces it left in its subnets.

moto answers CreateTrainingJob/DescribeTrainingJob and all of EC2's network-interface calls, but
not StopTrainingJob or DeleteTrainingJob, and every job it creates is at once ``Completed``. The
tests that need a job to go through InProgress -> Stopping -> Stopped inject ``FakeSageMaker``
through the functions' ``client`` factory and keep moto's EC2 for the interfaces.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Optional

import boto3
import pytest
from botocore.exceptions import ClientError

from facts import catalog
from jobs.registry import JOB_KINDS
from jobs.sagemaker import FileSystemTarget
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
        return self.ec2.create_subnet(VpcId=self.vpc, CidrBlock=cidr, AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]

    def _group(self, name: str) -> str:
        return self.ec2.create_security_group(GroupName=name, Description=name, VpcId=self.vpc)["GroupId"]

    def interface(self, subnet: str, groups: list[str]) -> str:
        return self.ec2.create_network_interface(SubnetId=subnet, Groups=groups)["NetworkInterface"]["NetworkInterfaceId"]

    def attached_interface(self, subnet: str, groups: list[str]) -> tuple[str, str, str]:
        """An interface attached to an instance as its second one: (interface, attachment, instance)."""
        eni = self.interface(subnet, groups)
        instance = self.ec2.run_instances(ImageId="ami-12345678", InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0][
            "InstanceId"
        ]
        attachment = self.ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=instance, DeviceIndex=1)["AttachmentId"]
        return eni, attachment, instance

    def interface_ids(self) -> set[str]:
        found = self.ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [self.vpc]}])["NetworkInterfaces"]
        return {e["NetworkInterfaceId"] for e in found}


@pytest.fixture
def network(aws) -> Network:
    return Network()


class FakeSageMaker:
    """A SageMaker client with scripted answers; ``calls`` records every call in order.

    ``statuses``: what successive DescribeTrainingJob calls answer, the last one repeated (an
    exception in it is raised); ``create_errors``: raised by successive CreateTrainingJob calls."""

    def __init__(self, statuses: Optional[list[Any]] = None, create_errors: Optional[list[Exception]] = None):
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
        return {"TrainingJobName": TrainingJobName, "TrainingJobArn": _arn(TrainingJobName), "TrainingJobStatus": status}

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
    """The provider module's ``time`` replaced (only there, not for boto3 or moto)."""
    c = Clock()
    monkeypatch.setattr(provider, "time", types.SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
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
            "image": "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.18.0-gpu-py310-cu125-ubuntu22.04-sagemaker",
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
        "Could not assume role arn:aws:iam::123456789012:role/gpu-training-maskrcnn-sm. Please ensure that the role exists and allows principal 'sagemaker.amazonaws.com' to assume the role.",
        'Unauthorized to List objects under S3 URL "s3://my-training-output/maskrcnn/checkpoints/"',
        "Access denied for repository: tensorflow-training in registry ID: 763104351884. Please check if your ECR repository and image exist and role has permissions.",
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
        ("ResourceLimitExceeded", "The account-level service limit 'ml.p4d.24xlarge for training job usage' is 0 Instances"),
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
    taken = _client_error("ResourceInUse", "Training job names must be unique within an AWS account and region", "CreateTrainingJob")
    sm = FakeSageMaker(create_errors=[taken, taken])
    client, _ = factory(sm)

    out = provider.create_job({"TrainingJobName": JOB_NAME}, REGION, client=client, sleep=clock.sleep)

    assert sm.names() == ["create", "create", "create", "describe"]
    assert out["status"] == "InProgress"
    assert clock.sleeps == [provider.POLL_SECONDS] * 2


def test_create_job_hands_boto3_integers_where_pulumi_gives_floats(clock):
    """Pulumi's provider host gives a dynamic provider every number as a float (protobuf Struct)."""
    from google.protobuf import json_format, struct_pb2

    struct = struct_pb2.Struct()
    struct.update({"TrainingJobName": JOB_NAME, "ResourceConfig": {"InstanceCount": 2, "VolumeSizeInGB": 100}, "Tags": [{"Key": "run", "Value": "1"}]})
    as_pulumi_gives_it = json_format.MessageToDict(struct)
    assert as_pulumi_gives_it["ResourceConfig"]["InstanceCount"] == 2.0 and isinstance(as_pulumi_gives_it["ResourceConfig"]["InstanceCount"], float)
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
    error = _client_error("AccessDeniedException", "User is not authorized to perform: sagemaker:DescribeTrainingJob", "DescribeTrainingJob")
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


# Real bugs of delete_interfaces (moto's EC2 hides both: its detach is immediate, and nothing else
# deletes interfaces concurrently). Terraform's aws_sagemaker_training_job delete, which the module
# says it mirrors, waits for the detachment (waitNetworkInterfaceDetached) and ignores
# InvalidNetworkInterfaceID.NotFound / InvalidAttachmentID.NotFound.


class SlowDetach(Spy):
    """EC2 as it behaves: DetachNetworkInterface only starts the detachment, and DeleteNetworkInterface
    answers InvalidNetworkInterface.InUse until it has finished; here it has once the caller has
    waited for it (a DescribeNetworkInterfaces or a sleep after the detach). ``attached`` maps
    attachment IDs to their interfaces."""

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
                raise _client_error("InvalidNetworkInterface.InUse", f"Interface: [{eni}] in use.", "DeleteNetworkInterface")
            out = method(*args, **kwargs)
            if name == "detach_network_interface":
                self.detaching.add(self.attached[kwargs["AttachmentId"]])
            return out

        return call


def test_delete_interfaces_waits_for_a_detachment_before_deleting(interfaces, monkeypatch: pytest.MonkeyPatch):
    net = interfaces.net
    ec2 = SlowDetach(net.ec2, {interfaces.attachment: interfaces.attached})
    monkeypatch.setattr("time.sleep", ec2.waited)  # a wait through time.sleep (a waiter's, too) finishes it
    client, _ = factory(None, ec2)

    deleted = provider.delete_interfaces(REGION, [net.sg], [net.subnet], client=client)

    assert sorted(deleted) == sorted(interfaces.job)
    assert net.interface_ids() == interfaces.before - interfaces.job


class RacingCleanup(Spy):
    """SageMaker removes its own interfaces after the job ends, at the same time as the provider:
    one interface listed by DescribeNetworkInterfaces is gone by the time it is deleted."""

    def __init__(self, client: Any, gone: str):
        super().__init__(client)
        self.gone: Optional[str] = gone

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


def test_delete_interfaces_ignores_an_interface_deleted_meanwhile(interfaces):
    net = interfaces.net
    client, _ = factory(None, RacingCleanup(net.ec2, gone=interfaces.detached))

    provider.delete_interfaces(REGION, [net.sg], [net.subnet], client=client)

    assert net.interface_ids() == interfaces.before - interfaces.job


# ---------------------------------------------------------------------------------------------
# TrainingJobProvider
# ---------------------------------------------------------------------------------------------


def _props(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "request": {
            "TrainingJobName": JOB_NAME,
            "RoleArn": ROLE_ARN,
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
            "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]},
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
    news = _props(request={**olds["request"], "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4, "VolumeSizeInGB": 100}})

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

    assert seen == [(JOB_NAME, REGION, ["sg-0123456789abcdef0"], ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"], 5400, {})]
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
    assert created.outs["status"] == boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)["TrainingJobStatus"]
    assert {k: created.outs[k] for k in ("request", "region", "stopTimeoutSeconds")} == {k: props[k] for k in ("request", "region", "stopTimeoutSeconds")}

    read = p.read(name, {**props, "status": "stale"})

    assert read.id == name
    assert read.outs is not None
    assert read.outs["status"] == created.outs["status"]
    assert read.outs["arn"] == created.outs["arn"]


def test_read_of_a_deleted_job_reports_it_gone(monkeypatch: pytest.MonkeyPatch):
    sm = FakeSageMaker(statuses=[_client_error("ValidationException", NOT_FOUND_MESSAGE, "DescribeTrainingJob")])
    monkeypatch.setattr(provider, "_client", lambda service, region: sm)

    read = provider.TrainingJobProvider().read(JOB_NAME, _props())

    assert read.id is None
    assert read.outs == {}


def test_diff_of_a_tag_change_alone_updates_in_place():
    olds = _props()
    news = _props(request={**olds["request"], "Tags": [{"Key": "team", "Value": "ml"}]})

    result = provider.TrainingJobProvider().diff(JOB_NAME, olds, news)

    assert result.changes is True and result.replaces == []


def test_update_changes_the_tags_of_the_running_job(monkeypatch: pytest.MonkeyPatch):
    sm = FakeSageMaker(statuses=["InProgress"])
    monkeypatch.setattr(provider, "_client", lambda service, region: sm)
    olds = _props(request={**_props()["request"], "Tags": [{"Key": "env", "Value": "dev"}, {"Key": "old", "Value": "x"}]})
    news = _props(request={**olds["request"], "Tags": [{"Key": "env", "Value": "prod"}, {"Key": "team", "Value": "ml"}]})

    result = provider.TrainingJobProvider().update(JOB_NAME, olds, news)

    arn = olds["arn"]
    assert sm.calls == [("delete_tags", (arn, ["old"])), ("add_tags", (arn, [{"Key": "env", "Value": "prod"}, {"Key": "team", "Value": "ml"}]))]
    assert result.outs["request"]["Tags"] == news["request"]["Tags"] and result.outs["arn"] == arn and result.outs["status"] == "InProgress"


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
    props = {"__provider": serialize_provider(provider.TrainingJobProvider()), "request": request, "region": REGION, "stopTimeoutSeconds": 3600}
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
    job = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=request["TrainingJobName"])
    assert result.outs["status"] == job["TrainingJobStatus"] and result.outs["arn"] == job["TrainingJobArn"]
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert job["StoppingCondition"]["MaxRuntimeInSeconds"] == request["StoppingCondition"]["MaxRuntimeInSeconds"]
