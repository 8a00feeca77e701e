"""The offline engine's mocks: a stable fake id and the outputs the program reads for every resource,
and the answers to its invokes (the partition, region and caller; the region's AZs and offerings
from AWS's recorded data, ``region.py``; what the stack has already made from ``deployed.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from pulumi.runtime import mocks as pulumi_mocks

from infra.offline.deployed import TOKENS, Deployed
from infra.offline.fleet import OfflineFleet
from infra.offline.region import az_offerings, region_azs

ACCOUNT_ID = "123456789012"

# Fake physical id prefixes by resource type, so ids look like what AWS would return.
_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/internetGateway:InternetGateway": "igw-",
    "aws:ec2/natGateway:NatGateway": "nat-",
    "aws:ec2/eip:Eip": "eipalloc-",
    "aws:ec2/routeTable:RouteTable": "rtb-",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce-",
    "aws:ec2/placementGroup:PlacementGroup": "pg-",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr-",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr-",
    "aws:efs/fileSystem:FileSystem": "fs-",
    "aws:efs/mountTarget:MountTarget": "fsmt-",
    "aws:efs/accessPoint:AccessPoint": "fsap-",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "fs-",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "dra-",
}


def _digest(*parts: str, n: int = 17) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:n]


def _fake_kubeconfig(cluster_name: str, region: str) -> dict[str, Any]:
    endpoint = f"https://{_digest(cluster_name, n=32).upper()}.gr7.{region}.eks.amazonaws.com"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": "TU9DSw=="}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [
            {
                "name": cluster_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--output", "json"],
                    }
                },
            }
        ],
    }


STACK_REFERENCE = "pulumi:pulumi:StackReference"
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"  # noqa: S105 (a Secret type)

# What the mocks read of a Kubernetes object (not a Helm release): the rest never reaches them.
# ... and a Secret's `type` (a token Secret is answered with its token).
IDENTITY = ("apiVersion", "kind", "metadata", "type")


def identity_only(typ: str) -> bool:
    return typ.startswith("kubernetes:") and not typ.startswith("kubernetes:helm.sh/")


class OfflineMocks(pulumi_mocks.Mocks):
    """Stable fake ids and the outputs the program reads; region facts from recorded AWS data."""

    def __init__(self, region: str, deployed: Deployed | None = None, fleet: OfflineFleet | None = None):
        self.region = region
        self.deployed = deployed or Deployed()  # what the stack already has (default: nothing, a new stack)
        self.fleet = fleet or OfflineFleet()  # the outputs of the stacks it references (a fleet's workers)

    # -- resources ------------------------------------------------------------------------
    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        typ, name, inputs = args.typ, args.name, dict(args.inputs)
        if typ == STACK_REFERENCE:
            return self._stack_reference(str(args.resource_id or inputs.get("name")))
        if args.resource_id:
            return args.resource_id, inputs
        if typ == "kubernetes:core/v1:Secret" and inputs.get("type") == SERVICE_ACCOUNT_TOKEN:
            # The token controller fills in the token, and pulumi-kubernetes waits for it on create
            # (pulumi/pulumi-kubernetes#2048): a placeholder, base64 as Secret data is.
            token = base64.b64encode(f"offline-token-{_digest(typ, name)}".encode()).decode()
            return f"{name}-{_digest(typ, name)}", {
                **{k: inputs[k] for k in IDENTITY if k in inputs},
                "data": {"token": token},
            }
        if identity_only(typ):
            # Kubernetes objects: the program reads back only their metadata (names), and a CRD's
            # schema runs to hundreds of kilobytes: hand back the identity only (sending whole
            # objects through the mock monitor again is most of what registering them costs here).
            return f"{name}-{_digest(typ, name)}", {k: inputs[k] for k in IDENTITY if k in inputs}
        rid = _ID_PREFIX.get(typ, f"{name}-") + _digest(typ, name)
        arn_service = typ.split(":")[1].split("/")[0] if ":" in typ else "unknown"
        state = dict(inputs)
        state.setdefault("arn", f"arn:aws:{arn_service}:{self.region}:{ACCOUNT_ID}:{name}/{rid}")
        state.setdefault("name", inputs.get("name") or f"{name}-{_digest(typ, name, n=7)}")
        extra = self._extra_outputs(typ, name, inputs, rid)
        state.update(extra)
        return rid, state

    def _stack_reference(self, stack: str) -> tuple[str, dict[str, Any]]:
        """A StackReference's state as the engine reads it: the stack's outputs and which are secret."""
        outputs = self.fleet.outputs.get(stack, {})
        secret = [k for k in self.fleet.secret_outputs if k in outputs]
        return stack, {"name": stack, "outputs": outputs, "secretOutputNames": secret}

    def _extra_outputs(self, typ: str, name: str, inputs: dict, rid: str) -> dict[str, Any]:
        if typ == "aws:iam/role:Role":
            role_name = inputs.get("name") or f"{name}-{_digest(typ, name, n=7)}"
            return {
                "arn": f"arn:aws:iam::{ACCOUNT_ID}:role/{role_name}",
                "name": role_name,
                "uniqueId": "AROA" + _digest(name).upper(),
            }
        if typ == "aws:kms/key:Key":
            key_id = (
                f"{_digest(name, n=8)}-{_digest(name, 'a', n=4)}-{_digest(name, 'b', n=4)}-"
                f"{_digest(name, 'c', n=4)}-{_digest(name, 'd', n=12)}"
            )
            return {"keyId": key_id, "arn": f"arn:aws:kms:{self.region}:{ACCOUNT_ID}:key/{key_id}"}
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            return {"latestVersion": 1, "defaultVersion": 1}
        if typ == "aws:ec2/securityGroup:SecurityGroup":
            return {"arn": f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:security-group/{rid}"}
        if typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            return {
                "dnsName": f"{rid}.fsx.{self.region}.amazonaws.com",
                "mountName": _digest("mount", name, n=8),
                "networkInterfaceIds": ["eni-" + _digest("eni", name)],
            }
        if typ == "aws:eks/nodeGroup:NodeGroup":
            # EKS makes one Auto Scaling group per managed node group, named eks-<group>-<uuid>.
            group = inputs.get("nodeGroupName") or name
            return {
                "resources": [
                    {
                        "autoscalingGroups": [{"name": f"eks-{group}-{_digest('asg', group, n=8)}"}],
                        "remoteAccessSecurityGroupId": "",
                    }
                ]
            }
        if typ == "aws:efs/fileSystem:FileSystem":
            return {"dnsName": f"{rid}.efs.{self.region}.amazonaws.com"}
        if typ == "eks:index:Cluster":
            cluster_name = inputs.get("name") or name
            kubeconfig = _fake_kubeconfig(cluster_name, self.region)
            oidc = f"oidc.eks.{self.region}.amazonaws.com/id/{_digest(cluster_name, n=32).upper()}"
            return {
                "kubeconfig": kubeconfig,
                "kubeconfigJson": json.dumps(kubeconfig, sort_keys=True),
                "clusterSecurityGroupId": "sg-" + _digest("cluster-sg", cluster_name),
                "nodeSecurityGroupId": "sg-" + _digest("node-sg", cluster_name),
                "oidcProviderArn": f"arn:aws:iam::{ACCOUNT_ID}:oidc-provider/{oidc}",
                "oidcProviderUrl": f"https://{oidc}",
                "oidcIssuer": oidc,
            }
        return {}

    # -- invokes --------------------------------------------------------------------------
    def call(self, args: pulumi_mocks.MockCallArgs):
        token, a = args.token, args.args
        if token == "aws:index/getPartition:getPartition":
            return {"id": "aws", "partition": "aws", "dnsSuffix": "amazonaws.com", "reverseDnsPrefix": "com.amazonaws"}
        if token == "aws:index/getRegion:getRegion":
            return {
                "id": self.region,
                "name": self.region,
                "region": self.region,
                "endpoint": f"ec2.{self.region}.amazonaws.com",
            }
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "id": ACCOUNT_ID,
                "accountId": ACCOUNT_ID,
                "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/offline",
                "userId": "AIDAOFFLINE",
            }
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            names = region_azs(self.region)
            return {
                "id": self.region,
                "names": names,
                "zoneIds": [f"{self.region[:2]}{self.region.split('-')[-1]}-az{i + 1}" for i in range(len(names))],
            }
        if token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            wanted: set[str] | None = None
            for f in a.get("filters") or []:
                if f.get("name") == "instance-type":
                    wanted = set(f.get("values") or [])
            types, locs = [], []
            for t, azs in sorted(az_offerings(self.region).items()):
                if wanted is not None and t not in wanted:
                    continue
                for az in sorted(azs):
                    types.append(t)
                    locs.append(az)
            return {
                "id": self.region,
                "instanceTypes": types,
                "locations": locs,
                "locationTypes": ["availability-zone"] * len(types),
            }
        if token in TOKENS:  # what the stack has already made (its GPU subnet)
            return self.deployed.answer(token, a, self.region)
        raise NotImplementedError(f"the offline engine has no answer for invoke {token}")
