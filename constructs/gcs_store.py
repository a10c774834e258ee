"""The RayServices' GCS fault-tolerance store: ElastiCache for Valkey in the VPC's private
subnets, encrypted at rest with the platform key and in transit (TLS required), with an AUTH
token that Secrets Manager generates.

KubeRay 1.7's ``gcsFaultToleranceOptions`` (manifests/inference.py) points each
RayService head at it: ``redisAddress`` names the Kubernetes ExternalName Service created here
(the endpoint's host name exists only after deployment; the manifests are rendered before it),
``redisPassword`` a ``secretKeyRef`` to the Kubernetes Secret that the Secrets Store CSI driver
syncs from the Secrets Manager secret. CloudFormation sees the token only as a dynamic
reference (``{{resolve:secretsmanager:...}}``); neither a template nor a manifest holds it.

Only the Ray heads reach the store, on its one TLS port: it admits the heads' own security group
(constructs/ray_heads.py, EKS security groups for pods), not the system nodes' group that every
other pod there and the control plane's interfaces share. The store opens no connection of its
own. The flows are rows of constructs/network_flows.py.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct, IConstruct

from config import versions
from config.facts.names import GCS_STORE_PORT, GCS_STORE_SERVICE, WORKLOADS_NAMESPACE, gcs_store_secret_name
from config.inference import GcsFaultTolerance
from constructs.compliance import acknowledge
from constructs.eks_cluster import PlatformEksCluster
from constructs.ray_auth import grant_secret_read, token_secret

# ElastiCache AUTH tokens: 16-128 printable characters without spaces, '"', '/' or '@'
# (ElastiCache user guide, "Authenticating with the Valkey and Redis OSS AUTH command").
TOKEN_LENGTH = 64
# Every resource of the store, in every environment: nothing in it outlives the Ray clusters.
REMOVAL = RemovalPolicy.DESTROY


def gcs_store_service_manifest(address: str) -> dict[str, Any]:
    """The ExternalName Service the RayServices' ``redisAddress`` names."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": GCS_STORE_SERVICE,
            "namespace": WORKLOADS_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "hyperpod-ray", "app.kubernetes.io/component": "gcs-store"},
        },
        "spec": {"type": "ExternalName", "externalName": address},
    }


class GcsStore(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        gcs_config: GcsFaultTolerance,
        vpc: ec2.IVpc,
        client_security_group: ec2.ISecurityGroup,
        key: kms.IKey,
        readers: list[iam.IGrantable],
        cluster: PlatformEksCluster,
        namespace: IConstruct | None = None,
    ) -> None:
        """``client_security_group``: the Ray head pods' own group (constructs/ray_heads.py);
        ``readers``: who reads the AUTH token (the
        Ray pods' Pod Identity role, through the Secrets Store CSI driver); ``namespace``: the
        manifest creating the Ray namespace the store's Service goes into.

        Deleted with the stack in every environment, production included (``REMOVAL``): the store
        caches the live Ray clusters' metadata, which a redeploy rebuilds, so nothing in it is worth
        keeping, while a retained replication group, security group and subnet group would keep
        the VPC from being deleted and keep billing."""
        super().__init__(scope, construct_id)
        self.key = key
        self.port = GCS_STORE_PORT
        self.secret = token_secret(
            self,
            "AuthToken",
            name=gcs_store_secret_name(name_prefix),
            description="AUTH token of the Ray GCS fault-tolerance store (ElastiCache for Valkey)",
            key=key,
            length=TOKEN_LENGTH,
        )
        acknowledge(
            self.secret,
            (
                "AwsSolutions-SMG4",
                "ElastiCache takes a new AUTH token only through a ROTATE/SET modification and the Ray heads read it at start: a rotation is a planned change, not a scheduled Lambda.",
            ),
            (
                "NIST.800.53.R5-SecretsManagerRotationEnabled",
                "The GCS store's AUTH token changes by a planned ElastiCache modification and head restart.",
            ),
        )
        for reader in readers:
            self.grant_read(reader)

        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Ray GCS store (ElastiCache for Valkey): TLS from the Ray heads only",
            allow_all_outbound=False,
        )
        self.security_group.apply_removal_policy(REMOVAL)
        self.ingress = ec2.CfnSecurityGroupIngress(
            self,
            "FromRayHeads",
            group_id=self.security_group.security_group_id,
            source_security_group_id=client_security_group.security_group_id,
            ip_protocol="tcp",
            from_port=self.port,
            to_port=self.port,
            description="Ray head pods (GCS) and KubeRay's Redis cleanup job (their own group)",
        )
        self.subnet_group = elasticache.CfnSubnetGroup(
            self,
            "SubnetGroup",
            description="Private subnets of the Ray GCS store",
            subnet_ids=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids,
        )
        self.subnet_group.apply_removal_policy(REMOVAL)
        failover = gcs_config.replicas >= 1
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_description="Ray GCS fault tolerance of the RayServices",
            engine=versions.GCS_STORE_ENGINE,
            engine_version=versions.GCS_STORE_ENGINE_VERSION,
            cache_node_type=gcs_config.node_type,
            # KubeRay supports a standalone (non-cluster) Redis for GCS fault tolerance.
            cluster_mode="disabled",
            num_cache_clusters=1 + gcs_config.replicas,
            automatic_failover_enabled=failover,
            multi_az_enabled=failover,
            port=self.port,
            cache_subnet_group_name=self.subnet_group.ref,
            security_group_ids=[self.security_group.security_group_id],
            at_rest_encryption_enabled=True,
            kms_key_id=key.key_arn,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            # A dynamic reference: CloudFormation resolves it at deploy time; the template holds the reference only.
            auth_token=self.secret.secret_value.unsafe_unwrap(),
            snapshot_retention_limit=gcs_config.snapshot_retention_days,
            auto_minor_version_upgrade=True,
        )
        self.replication_group.apply_removal_policy(REMOVAL)
        if not failover:
            acknowledge(
                self.replication_group,
                (
                    "AwsSolutions-AEC4",
                    "A non-production environment without replicas (config inference.gcs_fault_tolerance.replicas: 0); production requires one.",
                ),
                (
                    "NIST.800.53.R5-ElasticacheRepGroupAutomaticFailover",
                    "A non-production environment without replicas; production requires one (config check).",
                ),
            )
        acknowledge(
            self.replication_group,
            (
                "NIST.800.53.R5-ElastiCacheRedisClusterAutomaticBackup",
                "The store holds the Ray clusters' live metadata, which a redeploy rebuilds; a snapshot days old describes actors and nodes long gone, so 15 days of backups would restore nothing useful.",
            ),
        )
        self.address = self.replication_group.attr_primary_end_point_address
        self.service = cluster.manifest(self, "Service", [gcs_store_service_manifest(self.address)])
        if namespace is not None:
            self.service.node.add_dependency(namespace)

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """GetSecretValue on the token's secret and kms:Decrypt of its key only through Secrets
        Manager for this secret (constructs/ray_auth.py ``grant_secret_read``)."""
        grant_secret_read(grantee, secret=self.secret, key=self.key, sid="GcsStoreToken")
