"""The IAM/KMS rows of the flow table for the platform's own roles and the services that act on
its resources: FSx, the HyperPod nodes, the system nodes, the Ray workloads, container logs,
alarms and image pulls. Each team's rows are in ``team_flows.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from config import observability as obs
from config import versions
from config.facts.names import gcs_store_secret_name, ray_auth_secret_name
from constructs.flows import AccessFlow, Principal, s3_locations
from constructs.team_flows import team_access_flows
from manifests import k8s

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig

# The VPC CNI's ENI calls on HyperPod nodes (granted in constructs/hyperpod_cluster.py) and the
# resource types they touch there; IAM's action table says which of them each action authorizes.
ENI_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
)
CNI_RESOURCE_TYPES = ("network-interface", "subnet", "security-group", "instance")


def access_flows(
    config: EnvironmentConfig, *, eni_actions: tuple[str, ...] = ("ec2:CreateNetworkInterface", *ENI_ACTIONS)
) -> list[AccessFlow]:
    s3_via = (
        ("kms:ViaService", "s3.{region}.amazonaws.com"),
        ("kms:CallerAccount", "{account}"),
        ("aws:SecureTransport", "true"),
    )
    flows = [
        AccessFlow(
            "fsx-slr-platform-key",
            "FSx's S3 service-linked role uses the platform key through S3",
            "The data repository association imports and exports checkpoints in the SSE-KMS bucket "
            "(FSx for Lustre user guide, 'Working with server-side encrypted Amazon S3 buckets').",
            "fsx-s3-service-linked-role",
            ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom", "kms:DescribeKey"),
            "platform-key",
            # Bucket keys on: the encryption context is the bucket ARN (same guide).
            context=(*s3_via, ("kms:EncryptionContext:aws:s3:arn", "{bucket_arn}")),
            target=config.bucket_names()["checkpoints"],
        ),
        AccessFlow(
            "execution-role-ebs-grant",
            "HyperPod execution role creates grants on the platform key",
            "HyperPod encrypts node EBS volumes with the platform key; scale-out, node replacement and "
            "software updates create grants (SageMaker guide, 'Customer managed AWS KMS key encryption for SageMaker HyperPod').",
            "hyperpod-execution-role",
            ("kms:CreateGrant", "kms:DescribeKey"),
            "platform-key",
            context=(
                ("kms:GrantIsForAWSResource", "true"),
                ("kms:ViaService", "sagemaker.{region}.amazonaws.com"),
                ("kms:CallerAccount", "{account}"),
            ),
        ),
        AccessFlow(
            "execution-role-scripts",
            "HyperPod execution role reads the lifecycle scripts",
            "Nodes run on_create.sh from the scripts bucket at boot.",
            "hyperpod-execution-role",
            ("kms:Decrypt",),
            "platform-key",
            context=s3_via,
        ),
        AccessFlow(
            "csi-describe-fsx",
            "FSx CSI controller describes file systems",
            "The controller validates the static volume's file system.",
            "fsx-csi-role",
            ("fsx:DescribeFileSystems",),
            "fsx-file-system",
        ),
        AccessFlow(
            "flow-logs-write",
            "VPC Flow Logs writes to its log group",
            "Flow logs of every ENI in the VPC.",
            "flow-log-role",
            ("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"),
            "flow-log-group",
        ),
        AccessFlow(
            "logs-flow-log-key",
            "CloudWatch Logs encrypts the flow log group with its key",
            "The log group is KMS-encrypted (CloudWatch Logs guide, 'Encrypt log data using AWS KMS').",
            "logs-service",
            ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"),
            "flow-log-key",
            context=(("kms:EncryptionContext:aws:logs:arn", "{log_group_arn}"),),
        ),
    ]
    # Ray token authentication: the Secrets Store CSI driver's AWS provider reads the token with
    # the pods' Pod Identity role (constructs/ray_auth.py); Secrets Manager decrypts it with the
    # secret's key on the caller's behalf, the secret's ARN as encryption context (KMS developer
    # guide, "How AWS Secrets Manager uses AWS KMS").
    secret = ray_auth_secret_name(config.name_prefix)
    flows += [
        AccessFlow(
            "workloads-ray-auth-secret",
            "Ray pods read the Ray auth token",
            "Every Ray pod mounts the token's CSI volume; KubeRay's authOptions names the Secret it syncs.",
            "workloads-role",
            ("secretsmanager:GetSecretValue",),
            "ray-auth-secret",
            target=secret,
            context=(("aws:SecureTransport", "true"),),
        ),
        AccessFlow(
            "workloads-ray-auth-key",
            "Ray pods decrypt the Ray auth token through Secrets Manager",
            "The secret is encrypted with the platform key.",
            "workloads-role",
            ("kms:Decrypt",),
            "ray-auth-secret-key",
            target=secret,
            context=(
                ("kms:ViaService", "secretsmanager.{region}.amazonaws.com"),
                ("kms:CallerAccount", "{account}"),
                ("kms:EncryptionContext:SecretARN", "{secret_arn}"),
            ),
        ),
    ]
    if config.gcs_fault_tolerance:
        # The GCS store's AUTH token reaches the heads the same way (constructs/gcs_store.py).
        gcs_secret = gcs_store_secret_name(config.name_prefix)
        flows += [
            AccessFlow(
                "workloads-gcs-store-secret",
                "Ray heads read the GCS store's AUTH token",
                "The head mounts the store's CSI volume; gcsFaultToleranceOptions.redisPassword names the Secret it syncs.",
                "workloads-role",
                ("secretsmanager:GetSecretValue",),
                "gcs-store-secret",
                target=gcs_secret,
                context=(("aws:SecureTransport", "true"),),
            ),
            AccessFlow(
                "workloads-gcs-store-key",
                "Ray heads decrypt the GCS store's AUTH token through Secrets Manager",
                "The secret is encrypted with the platform key.",
                "workloads-role",
                ("kms:Decrypt",),
                "gcs-store-secret-key",
                target=gcs_secret,
                context=(
                    ("kms:ViaService", "secretsmanager.{region}.amazonaws.com"),
                    ("kms:CallerAccount", "{account}"),
                    ("kms:EncryptionContext:SecretARN", "{secret_arn}"),
                ),
            ),
        ]
    flows += observability_access_flows()
    flows += image_pull_flows(config)
    flows += team_access_flows(config)
    flows += asset_pull_flows(config)
    for action in eni_actions:
        flows.append(
            AccessFlow(
                f"cni-{action.split(':')[1]}",
                f"VPC CNI on HyperPod nodes: {action}",
                "The VPC CNI manages ENIs and secondary IPs for pods in the HyperPod subnets.",
                "hyperpod-execution-role",
                (action,),
                "ec2",
                resource_types=CNI_RESOURCE_TYPES,
            )
        )
    for loc in s3_locations(config):
        actions = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject") if loc.write else ("s3:GetObject",)
        flows.append(
            AccessFlow(
                f"workloads-s3:{loc.bucket}/{loc.prefix}",
                f"Ray workloads {'read and write' if loc.write else 'read'} s3://{loc.bucket}/{loc.prefix}",
                f"From config {loc.source}.",
                "workloads-role",
                actions,
                "s3-object",
                target=f"{loc.bucket}/{loc.prefix}flows-probe",
                context=(("aws:SecureTransport", "true"),),
            )
        )
        flows.append(
            AccessFlow(
                f"workloads-list:{loc.bucket}/{loc.prefix}",
                f"Ray workloads list s3://{loc.bucket}/{loc.prefix}",
                f"From config {loc.source}: Ray Train and the model loaders list the prefix.",
                "workloads-role",
                ("s3:ListBucket",),
                "s3-bucket",
                target=loc.bucket,
                context=(("s3:prefix", loc.prefix), ("aws:SecureTransport", "true")),
            )
        )
        if loc.bucket == config.bucket_names()["checkpoints"]:
            kms_actions = ("kms:Decrypt", "kms:GenerateDataKey") if loc.write else ("kms:Decrypt",)
            flows.append(
                AccessFlow(
                    f"workloads-key:{loc.bucket}/{loc.prefix}",
                    f"Ray workloads use the platform key for s3://{loc.bucket}/{loc.prefix}",
                    "The checkpoint bucket is SSE-KMS with the platform key.",
                    "workloads-role",
                    kms_actions,
                    "platform-key",
                    context=(*s3_via, ("kms:EncryptionContext:aws:s3:arn", "{bucket_arn}")),
                    target=loc.bucket,
                )
            )
    return flows


def image_pull_flows(config: EnvironmentConfig) -> list[AccessFlow]:
    """With network.images_from_ecr, the node roles that pull an image through a pull-through
    cache rule (constructs/image_cache.py) may import it: the KubeRay operator on the system
    nodes, and the Serve LLM image on the system nodes (its head) and the HyperPod nodes (its
    GPU workers)."""
    if not config.network.images_from_ecr:
        return []
    pulls: list[tuple[Principal, str, str]] = [
        ("system-node-role", versions.KUBERAY_OPERATOR_IMAGE, "the KubeRay operator")
    ]
    if config.inference.llm.enabled:
        pulls += [
            ("system-node-role", k8s.RAY_LLM_IMAGE, "the Serve LLM service's head"),
            ("hyperpod-execution-role", k8s.RAY_LLM_IMAGE, "the Serve LLM service's GPU workers"),
        ]
    flows = []
    for principal, image, who in pulls:
        repository = versions.pull_through_repository(image)
        flows.append(
            AccessFlow(
                f"pull-through:{principal}:{repository}",
                f"{principal} imports {image} ({who}) through the pull-through cache",
                "The first pull of an image through a rule, and a pull after the cache's daily check of "
                "the upstream tag, creates the repository and imports the image as the puller (ECR user "
                "guide, 'IAM permissions required to sync an upstream registry').",
                principal,
                ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository"),
                "ecr-repository",
                target=repository,
            )
        )
    return flows


def asset_pull_flows(config: EnvironmentConfig) -> list[AccessFlow]:
    """The HyperPod nodes pull the CDK image assets from the CDK assets repository (review/images.py
    lists them): the workloads image (the Ray workers), and with network.images_from_ecr the NVIDIA
    device plugin, which nothing else puts in ECR."""
    from manifests import image

    images = ["the workloads image (Ray workers)"]
    if config.network.images_from_ecr and config.gpu_device_plugin_instance_types():
        images.append("the NVIDIA device plugin")
    return [
        AccessFlow(
            "asset-pull:hyperpod-execution-role",
            "hyperpod-execution-role pulls the CDK image assets: " + ", ".join(images),
            "`cdk deploy` publishes them into the CDK assets repository before the cluster stack; the "
            "kubelet of a HyperPod node pulls them with the node's execution role.",
            "hyperpod-execution-role",
            ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"),
            "ecr-repository",
            target=image.repository_name(config.account, config.region),
        )
    ]


def observability_access_flows() -> list[AccessFlow]:
    """Container logs (the add-on's Fluent Bit and agent) and alarms (AMP's alert manager and
    EventBridge to the SNS topic), constructs/observability.py."""
    flows = []
    for kind in obs.CONTAINER_LOG_KINDS:
        flows += [
            AccessFlow(
                f"cloudwatch-agent-logs:{kind}",
                f"CloudWatch Observability add-on writes the {kind} log group",
                "Fluent Bit (container and node logs) and the agent (performance events) run as the add-on's service account.",
                "cloudwatch-agent-role",
                obs.CONTAINER_LOG_WRITER_ACTIONS,
                "container-log-group",
                target=kind,
            ),
            AccessFlow(
                f"logs-container-key:{kind}",
                f"CloudWatch Logs encrypts the {kind} log group with the platform key",
                "Container logs are KMS-encrypted (CloudWatch Logs guide, 'Encrypt log data using AWS KMS').",
                "logs-service",
                ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"),
                "container-log-key",
                target=kind,
                context=(("kms:EncryptionContext:aws:logs:arn", "{log_group_arn}"),),
            ),
        ]
    publishers: tuple[tuple[Principal, str], ...] = (
        ("aps-service", "AMP's alert manager sends the alerting rules' notifications (sns_configs)."),
        ("events-service", "EventBridge forwards HyperPod's error-level cluster events."),
    )
    for principal, why in publishers:
        flows += [
            AccessFlow(
                f"{principal}-alarm-topic",
                f"{principal} publishes to the alarm topic",
                why,
                principal,
                ("sns:Publish",),
                "alarm-topic",
                context=(("aws:SourceAccount", "{account}"),),
            ),
            AccessFlow(
                f"{principal}-alarm-topic-key",
                f"{principal} encrypts messages with the alarm topic's key",
                "The topic is KMS-encrypted; SNS asks KMS on the publisher's behalf.",
                principal,
                ("kms:GenerateDataKey", "kms:Decrypt"),
                "alarm-topic-key",
                context=(("aws:SourceAccount", "{account}"), ("kms:ViaService", "sns.{region}.amazonaws.com")),
            ),
        ]
    return flows
