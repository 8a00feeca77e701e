"""Every external version the stack deploys, pinned in one place, with the reason for each choice.

Nothing else in the project types a version. Components receive these values as arguments from
the stack blueprint, so a bump is one line here plus whatever the tests say about it.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Kubernetes / EKS
# ---------------------------------------------------------------------------------------------

# Versions in EKS standard support on 2026-11-22: 1.35 (to 2027-03-27) and 1.36 (to 2027-08-02).
# 1.34 leaves standard support on 2026-12-02 and older ones bill extended support, so new
# environments cannot start on them. 1.37 is added once EKS lists it (`aws eks
# describe-cluster-versions`) and the add-ons below have builds for it.
KUBERNETES_SUPPORTED = ("1.35", "1.36")
KUBERNETES_DEFAULT = "1.36"

# EKS managed add-ons. kube-proxy must match the Kubernetes minor and CoreDNS is built per minor;
# the other add-ons serve every supported minor. Each is a build EKS resolved or published for
# these minors in 2026 (see the README's version section for how to bump).
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
KUBE_PROXY_ADDON = {
    "1.35": "v1.35.3-eksbuild.18",
    "1.36": "v1.36.0-eksbuild.21",
}

# AMI type of GPU node groups: the AL2023 NVIDIA AMI carries the NVIDIA driver, container toolkit,
# fabric manager and the EFA kernel module (AL2 AMIs are out of support).
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
