"""The Ray workloads' namespace fences, applied by the cluster stack: its NetworkPolicies and,
with secrets to deliver, the SecretProviderClass every Ray pod mounts; with GCS fault tolerance,
the store's SecretProviderClass (the heads mount it) and the RayServices' PodDisruptionBudgets.

Both are rendered by the workloads side from the same config as the RayJob and RayServices
(``python -m manifests render network-policies|secret-provider-class``): what is applied is
what the workloads' tests validate. Only names travel through the kubectl handler, no secret value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from config.environment import EnvironmentConfig
from constructs.eks_cluster import SECRETS_STORE_DRIVER, PlatformEksCluster
from constructs.gcs_store import GcsStore
from constructs.ray_auth import RayAuthToken
from constructs.workloads_access import WorkloadsAccess
from manifests import disruption_budgets, ha, network_policy, security


@dataclass(frozen=True)
class RayNamespaceManifests:
    """The Ray namespace's fences as the workloads side renders them for one environment
    (:func:`ray_namespace_manifests`)."""

    network_policies: list[dict[str, Any]]
    # What the Ray pods' CSI volume syncs, and the SecretProviderClass that syncs it (None: nothing to sync).
    synced_secrets: tuple[security.SyncedSecret, ...]
    secret_provider_class: dict[str, Any] | None
    # GCS fault tolerance: the store's SecretProviderClass (None without it) and the RayServices' budgets.
    gcs_store_secret_provider_class: dict[str, Any] | None
    disruption_budgets: list[dict[str, Any]]


def ray_namespace_manifests(config: EnvironmentConfig) -> RayNamespaceManifests:
    secrets = tuple(security.synced_secrets(config))
    gcs = config.gcs_fault_tolerance
    return RayNamespaceManifests(
        network_policies=network_policy.render(config)["items"],
        synced_secrets=secrets,
        secret_provider_class=security.secret_provider_class(secrets, region=config.region) if secrets else None,
        gcs_store_secret_provider_class=ha.render_secret_provider_class(config) if gcs else None,
        disruption_budgets=disruption_budgets.render_disruption_budgets(config)["items"] if gcs else [],
    )


class WorkloadsSecurity(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: PlatformEksCluster,
        manifests: RayNamespaceManifests,
        workloads: WorkloadsAccess,
        ray_auth: RayAuthToken,
        gcs_store: GcsStore | None = None,
    ) -> None:
        """``manifests``: what the namespace is fenced with; ``workloads``: the Ray namespace and
        the Pod Identity association of its service account; ``ray_auth``: the Ray token the
        SecretProviderClass syncs; ``gcs_store``: the GCS store whose AUTH token the heads mount,
        where the environment has GCS fault tolerance.

        Ordering comes from ``cluster``: each manifest after the namespace, a SecretProviderClass
        also after the Secrets Store CSI driver add-on (it installs the CRD) and after what a pod
        mounting it reads: the secret and the Pod Identity association."""
        super().__init__(scope, construct_id)
        namespace = workloads.namespace
        self.network_policies = cluster.manifest(self, "NetworkPolicies", manifests.network_policies)
        cluster.requires(self.network_policies, after=[namespace])

        has_driver = SECRETS_STORE_DRIVER in cluster.addons
        self.secret_provider_class: eks.KubernetesManifest | None = None
        if manifests.secret_provider_class is not None:
            if not has_driver:
                raise ValueError(
                    f"{len(manifests.synced_secrets)} secret(s) to sync into the Ray namespace but no Secrets Store "
                    "CSI driver add-on"
                )
            self.secret_provider_class = cluster.manifest(
                self, "SecretProviderClass", [manifests.secret_provider_class]
            )
            cluster.requires(
                self.secret_provider_class,
                SECRETS_STORE_DRIVER,
                after=[namespace, ray_auth.secret, workloads.pod_identity],
            )

        # GCS fault tolerance (manifests/ha.py): without its SecretProviderClass a head
        # that mounts the store's CSI volume never starts. The budgets select RayService pods by
        # name, so they can exist before the services do.
        self.gcs_store_secret_provider_class: eks.KubernetesManifest | None = None
        self.disruption_budgets: eks.KubernetesManifest | None = None
        if manifests.gcs_store_secret_provider_class is not None:
            if not has_driver or gcs_store is None:
                raise ValueError("GCS fault tolerance needs the Secrets Store CSI driver add-on and the store's secret")
            self.gcs_store_secret_provider_class = cluster.manifest(
                self, "GcsStoreSecretProviderClass", [manifests.gcs_store_secret_provider_class]
            )
            cluster.requires(
                self.gcs_store_secret_provider_class,
                SECRETS_STORE_DRIVER,
                after=[namespace, gcs_store.secret, ray_auth.secret, workloads.pod_identity],
            )
            self.disruption_budgets = cluster.manifest(self, "DisruptionBudgets", manifests.disruption_budgets)
            cluster.requires(self.disruption_budgets, after=[namespace])
