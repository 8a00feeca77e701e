"""The mapping of every AWS resource type the stack emits onto the API calls that create it: data.

Per Pulumi type token: the botocore service, the operations (the create call first; then the calls
the provider makes for the inputs the create call does not take), and only what the mechanical
mapping does not find by itself. The mechanical mapping (infra/api_checks/aws_model.py): a Pulumi
input name (camelCase) is the API member of the same name, case-insensitively, in the first operation
that has it; a nested object is the member's structure, a list its list shape; a ``tags`` map is
the API's ``Tags`` (a map, or a list of Key/Value structures), else ``TagSpecifications[].Tags`` (EC2).

``fields``: Pulumi input path (dotted, without list indices) -> API member path (dotted; a list is
entered at its item; ``Operation:`` first names a later operation; ``@Operation``: each item of the
Pulumi list is one call of that operation; a dict: the path depends on which other input is given).
``provider_only``: Pulumi inputs no API member takes, and why. ``provider_fills``: required API
members the provider fills itself (the plan's inputs do not carry them). ``suffix``: inputs the
provider extends before the call (a name prefix: + N characters). ``not_sent``: an input's value that
the provider reads as "leave the member out". ``autoname``: the create call's member Pulumi's auto-naming
fills when the program gives no name.

Where the provider's translation is not the name's: the Terraform AWS provider (which pulumi-aws
7.x wraps), hashicorp/terraform-provider-aws internal/service/<service>/<resource>.go, the resource's
create function; pulumi-eks 4.x (nodejs/eks/cluster.ts, nodegroup.ts) for its components.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The auto-naming suffix of a name prefix: terraform-plugin-sdk helper/id/id.go, UniqueIDSuffixLength
# (a timestamp and a counter; terraform-provider-aws internal/create/naming.go uses it for name_prefix).
UNIQUE_ID_SUFFIX = 26
# Pulumi's auto-naming of a resource's `name` input when the program gives none (pulumi-aws's provider
# hooks: prov.SetAutonaming(255, "-"), pulumi-terraform-bridge): the resource's name, "-" and 7 random
# hex characters. ``Api.autoname`` names the API member it fills; the check walks that name too.
AUTONAME_SUFFIX = 8
TERRAFORM_NAMED = "the Terraform provider's unique id when none is given (terraform-<26 characters>)"


@dataclass(frozen=True)
class Api:
    service: str
    operations: tuple[str, ...]
    fields: Mapping[str, str | Mapping[str, str]] = field(default_factory=dict)
    provider_only: Mapping[str, str] = field(default_factory=dict)
    provider_fills: Mapping[str, str] = field(default_factory=dict)
    suffix: Mapping[str, int] = field(default_factory=dict)
    not_sent: Mapping[str, object] = field(default_factory=dict)
    autoname: str = ""


_SG_RULE_FIELDS: Mapping[str, str | Mapping[str, str]] = {
    # aws_vpc_security_group_{ingress,egress}_rule: one IpPermission (internal/service/ec2/vpc_security_group_rule.go,
    # expandIPPermission): its source is a CIDR range or a referenced group, the description goes with it.
    "securityGroupId": "GroupId",
    "ipProtocol": "IpPermissions.IpProtocol",
    "fromPort": "IpPermissions.FromPort",
    "toPort": "IpPermissions.ToPort",
    "cidrIpv4": "IpPermissions.IpRanges.CidrIp",
    "cidrIpv6": "IpPermissions.Ipv6Ranges.CidrIpv6",
    "prefixListId": "IpPermissions.PrefixListIds.PrefixListId",
    "referencedSecurityGroupId": "IpPermissions.UserIdGroupPairs.GroupId",
    "description": {
        "cidrIpv4": "IpPermissions.IpRanges.Description",
        "cidrIpv6": "IpPermissions.Ipv6Ranges.Description",
        "prefixListId": "IpPermissions.PrefixListIds.Description",
        "referencedSecurityGroupId": "IpPermissions.UserIdGroupPairs.Description",
    },
}
_NODEGROUP_FIELDS = {
    "nodeRoleArn": "nodeRole",  # aws_eks_node_group node_role_arn -> CreateNodegroupInput.NodeRole
    "subnetIds": "subnets",  # subnet_ids -> Subnets
}

TABLE: Mapping[str, Api] = {
    "aws:autoscaling/schedule:Schedule": Api(
        "autoscaling",
        ("PutScheduledUpdateGroupAction",),
        # autoscaling/schedule.go resourceSchedulePut: -1 means "don't include this parameter in the action"
        not_sent={"minSize": -1, "maxSize": -1, "desiredCapacity": -1},
    ),
    "aws:autoscaling/tag:Tag": Api(
        "autoscaling",
        ("CreateOrUpdateTags",),
        # aws_autoscaling_group_tag: one Tag whose ResourceId is the group (autoscaling/group_tag.go)
        fields={"tag": "Tags", "autoscalingGroupName": "Tags.ResourceId"},
    ),
    "aws:cloudwatch/dashboard:Dashboard": Api("cloudwatch", ("PutDashboard",)),
    "aws:cloudwatch/logMetricFilter:LogMetricFilter": Api(
        "logs",
        ("PutMetricFilter",),
        # cloudwatch/log_metric_filter.go (logs service), resourceMetricFilterPut: one metricTransformation
        fields={
            "name": "filterName",
            "pattern": "filterPattern",
            "metricTransformation": "metricTransformations",
            "metricTransformation.name": "metricName",
            "metricTransformation.namespace": "metricNamespace",
            "metricTransformation.value": "metricValue",
        },
    ),
    "aws:cloudwatch/metricAlarm:MetricAlarm": Api(
        "cloudwatch",
        ("PutMetricAlarm",),
        # cloudwatch/metric_alarm.go expandPutMetricAlarmInput: name -> AlarmName, metric_query -> Metrics, its
        # metric block -> MetricStat (metric_name, namespace, dimensions -> MetricStat.Metric; period, stat beside);
        # a dimensions map -> Dimension {Name, Value} items (expandMetricAlarmDimensions)
        fields={
            "name": "AlarmName",
            "metricQueries": "Metrics",
            "metricQueries.metric": "MetricStat",
            "metricQueries.metric.metricName": "Metric.MetricName",
            "metricQueries.metric.namespace": "Metric.Namespace",
            "metricQueries.metric.dimensions": "Metric.Dimensions",
        },
    ),
    "aws:cloudwatch/logGroup:LogGroup": Api(
        "logs",
        ("CreateLogGroup", "PutRetentionPolicy"),
        fields={"name": "logGroupName"},  # aws_cloudwatch_log_group name -> LogGroupName
        autoname="logGroupName",
    ),
    "aws:ec2/eip:Eip": Api("ec2", ("AllocateAddress",)),
    "aws:ec2/internetGateway:InternetGateway": Api("ec2", ("CreateInternetGateway", "AttachInternetGateway")),
    "aws:ec2/launchTemplate:LaunchTemplate": Api(
        "ec2",
        ("CreateLaunchTemplate",),
        fields={
            # ec2/ec2_launch_template.go: description -> VersionDescription; the rest is LaunchTemplateData
            # (expandRequestLaunchTemplateData), vpc_security_group_ids -> SecurityGroupIds, a network
            # interface's security_groups -> Groups.
            "description": "VersionDescription",
            "blockDeviceMappings": "LaunchTemplateData.BlockDeviceMappings",
            "capacityReservationSpecification": "LaunchTemplateData.CapacityReservationSpecification",
            "imageId": "LaunchTemplateData.ImageId",
            "instanceMarketOptions": "LaunchTemplateData.InstanceMarketOptions",
            "instanceType": "LaunchTemplateData.InstanceType",
            "metadataOptions": "LaunchTemplateData.MetadataOptions",
            "networkInterfaces": "LaunchTemplateData.NetworkInterfaces",
            "networkInterfaces.securityGroups": "Groups",
            "placement": "LaunchTemplateData.Placement",
            "tagSpecifications": "LaunchTemplateData.TagSpecifications",
            "userData": "LaunchTemplateData.UserData",
            "vpcSecurityGroupIds": "LaunchTemplateData.SecurityGroupIds",
        },
        provider_only={"updateDefaultVersion": "the provider's choice to call ModifyLaunchTemplate after an update"},
        autoname="LaunchTemplateName",
    ),
    "aws:ec2/natGateway:NatGateway": Api("ec2", ("CreateNatGateway",)),
    "aws:ec2/placementGroup:PlacementGroup": Api("ec2", ("CreatePlacementGroup",), autoname="GroupName"),
    "aws:ec2/routeTable:RouteTable": Api(
        "ec2",
        ("CreateRouteTable", "CreateRoute"),
        # ec2/vpc_route_table.go: one CreateRoute per route; cidr_block -> DestinationCidrBlock
        fields={"routes": "@CreateRoute", "routes.cidrBlock": "DestinationCidrBlock"},
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": Api("ec2", ("AssociateRouteTable",)),
    "aws:ec2/securityGroup:SecurityGroup": Api(
        "ec2",
        ("CreateSecurityGroup",),
        provider_only={"revokeRulesOnDelete": "the provider's choice at delete"},
        autoname="GroupName",
    ),
    "aws:ec2/subnet:Subnet": Api(
        "ec2",
        ("CreateSubnet", "ModifySubnetAttribute"),
        # ec2/vpc_subnet.go: map_public_ip_on_launch is set after the create, as an AttributeBooleanValue
        fields={"mapPublicIpOnLaunch": "ModifySubnetAttribute:MapPublicIpOnLaunch.Value"},
    ),
    "aws:ec2/vpc:Vpc": Api(
        "ec2",
        ("CreateVpc", "ModifyVpcAttribute"),
        # ec2/vpc_.go: the DNS attributes are set after the create, each an AttributeBooleanValue
        fields={
            "enableDnsHostnames": "ModifyVpcAttribute:EnableDnsHostnames.Value",
            "enableDnsSupport": "ModifyVpcAttribute:EnableDnsSupport.Value",
        },
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": Api("ec2", ("CreateVpcEndpoint",)),
    "aws:efs/fileSystem:FileSystem": Api(
        "efs", ("CreateFileSystem",), provider_fills={"CreationToken": TERRAFORM_NAMED}
    ),
    "aws:efs/mountTarget:MountTarget": Api("efs", ("CreateMountTarget",)),
    "aws:eks/accessEntry:AccessEntry": Api("eks", ("CreateAccessEntry",)),
    "aws:eks/addon:Addon": Api(
        "eks",
        ("CreateAddon", "UpdateAddon"),
        # eks/addon.go: resolve_conflicts_on_create -> CreateAddon's ResolveConflicts, ..._on_update -> UpdateAddon's
        fields={
            "resolveConflictsOnCreate": "resolveConflicts",
            "resolveConflictsOnUpdate": "UpdateAddon:resolveConflicts",
        },
    ),
    "aws:eks/nodeGroup:NodeGroup": Api(
        "eks", ("CreateNodegroup",), fields=_NODEGROUP_FIELDS, provider_fills={"nodegroupName": TERRAFORM_NAMED}
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": Api("eks", ("CreatePodIdentityAssociation",)),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": Api(
        "fsx", ("CreateDataRepositoryAssociation",), provider_only={"deleteDataInFilesystem": "sent at delete"}
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": Api(
        "fsx",
        ("CreateFileSystem", "DeleteFileSystem"),
        # fsx/lustre_file_system.go: the Lustre settings are LustreConfiguration's; skip_final_backup is the delete's
        fields={
            key: f"LustreConfiguration.{key}"
            for key in (
                "automaticBackupRetentionDays",
                "dailyAutomaticBackupStartTime",
                "dataCompressionType",
                "deploymentType",
                "perUnitStorageThroughput",
                "importPath",
                "exportPath",
                "weeklyMaintenanceStartTime",
                "copyTagsToBackups",
            )
        }
        | {"skipFinalBackup": "DeleteFileSystem:LustreConfiguration.SkipFinalBackup"},
        provider_fills={"FileSystemType": "LUSTRE, the resource's own type"},
    ),
    "aws:iam/role:Role": Api(
        "iam",
        ("CreateRole",),
        # iam/role.go: assume_role_policy -> AssumeRolePolicyDocument; name_prefix -> RoleName (+ the unique suffix)
        fields={"assumeRolePolicy": "AssumeRolePolicyDocument", "namePrefix": "RoleName"},
        autoname="RoleName",
        suffix={"namePrefix": UNIQUE_ID_SUFFIX},
    ),
    "aws:iam/rolePolicy:RolePolicy": Api(
        "iam",
        ("PutRolePolicy",),
        fields={"policy": "PolicyDocument", "role": "RoleName"},  # iam/role_policy.go
        autoname="PolicyName",
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": Api(
        "iam",
        ("AttachRolePolicy",),
        fields={"role": "RoleName"},  # iam/role_policy_attachment.go
    ),
    "aws:kms/alias:Alias": Api("kms", ("CreateAlias",), fields={"name": "AliasName"}),  # kms/alias.go
    "aws:kms/key:Key": Api(
        "kms",
        ("CreateKey", "ScheduleKeyDeletion"),
        # kms/key.go: deletion_window_in_days is the delete's PendingWindowInDays
        fields={"deletionWindowInDays": "ScheduleKeyDeletion:PendingWindowInDays"},
        provider_only={"enableKeyRotation": "whether the provider calls EnableKeyRotation (a call, not a member)"},
    ),
    "aws:sns/topic:Topic": Api("sns", ("CreateTopic",), autoname="Name"),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": Api(
        "ec2", ("AuthorizeSecurityGroupEgress",), fields=_SG_RULE_FIELDS
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": Api(
        "ec2", ("AuthorizeSecurityGroupIngress",), fields=_SG_RULE_FIELDS
    ),
    # pulumi-eks components (nodejs/eks/cluster.ts createCore: the aws.eks.Cluster it makes; nodegroup.ts
    # createManagedNodeGroupInternal: the aws.eks.NodeGroup).
    "eks:index:Cluster": Api(
        "eks",
        ("CreateCluster",),
        fields={
            "endpointPrivateAccess": "resourcesVpcConfig.endpointPrivateAccess",
            "endpointPublicAccess": "resourcesVpcConfig.endpointPublicAccess",
            "publicAccessCidrs": "resourcesVpcConfig.publicAccessCidrs",
            "privateSubnetIds": "resourcesVpcConfig.subnetIds",
            "publicSubnetIds": "resourcesVpcConfig.subnetIds",
            "authenticationMode": "accessConfig.authenticationMode",
            "enabledClusterLogTypes": "logging.clusterLogging.types",
            "encryptionConfigKeyArn": "encryptionConfig.provider.keyArn",
        },
        provider_only={
            "accessEntries": "the component's own access entries (CreateAccessEntry calls)",
            "corednsAddonOptions": "the component's CoreDNS add-on (a CreateAddon call)",
            "kubeProxyAddonOptions": "the component's kube-proxy add-on (a CreateAddon call)",
            "vpcCniOptions": "the component's VPC CNI add-on (a CreateAddon call)",
            "createOidcProvider": "the component's IAM OIDC provider (an IAM call)",
            "nodeAssociatePublicIpAddress": "the component's default node group (skipped)",
            "skipDefaultNodeGroup": "the component's choice",
            "skipDefaultSecurityGroups": "the component's choice",
            "vpcId": "the component's security groups (EC2 calls)",
        },
        provider_fills={"roleArn": "the component's service role", "name": "the component's name for it"},
    ),
    "eks:index:ManagedNodeGroup": Api(
        "eks",
        ("CreateNodegroup",),
        fields={"cluster": "clusterName"} | _NODEGROUP_FIELDS,
        provider_fills={"nodegroupName": "the component's name for it"},
    ),
    # The stack's own provider (providers/sagemaker_training_job.py) sends `request` as CreateTrainingJob's.
    "pulumi-python:dynamic/gputraining:SageMakerTrainingJob": Api(
        "sagemaker",
        ("CreateTrainingJob",),
        fields={"request": ""},
        provider_only={
            "region": "the client's region",
            "stopTimeoutSeconds": "the provider's wait on destroy",
            "__provider": "the provider's code",
        },
    ),
}
