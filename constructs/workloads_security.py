"""The Ray workloads' namespace fences, applied by the cluster stack: its NetworkPolicies and,
with secrets to deliver, the SecretProviderClass every Ray pod mounts; with GCS fault tolerance,
the store's SecretProviderClass (the heads mount it) and the RayServices' PodDisruptionBudgets.

Both are rendered by the workloads side from the same config as the RayJob and RayServices
(``python -m workloads render network-policies|secret-provider-class``): what is applied is
what the workloads' tests validate. Only names travel through the kubectl handler, no secret value.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from config.environment import EnvironmentConfig
from workloads.common import ha, network_policy, security


class WorkloadsSecurity(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: EnvironmentConfig,
        namespace: IConstruct,
        secrets_store: IConstruct | None,
        secrets_depend_on: Sequence[IConstruct] = (),
        gcs_store_secret: IConstruct | None = None,
    ) -> None:
        """``namespace``: the manifest creating the Ray namespace. ``secrets_store``: the Secrets
        Store CSI driver add-on (it installs the SecretProviderClass CRD); None when nothing is
        synced. ``secrets_depend_on``: what must exist before a pod mounts the secrets (the
        secrets themselves, the Pod Identity association reading them). ``gcs_store_secret``: the
        GCS store's AUTH token secret, where the environment has GCS fault tolerance."""
        super().__init__(scope, construct_id)
        self.network_policies = eks.KubernetesManifest(
            self,
            "NetworkPolicies",
            cluster=cluster,  # type: ignore[arg-type]  # aws-cdk-lib types ICluster without kubectl_provider_options
            manifest=network_policy.render(config)["items"],
        )
        self.network_policies.node.add_dependency(namespace)

        self.secret_provider_class: eks.KubernetesManifest | None = None
        secrets = security.synced_secrets(config)
        if secrets:
            if secrets_store is None:
                raise ValueError(
                    f"{len(secrets)} secret(s) to sync into the Ray namespace but no Secrets Store CSI driver add-on"
                )
            self.secret_provider_class = eks.KubernetesManifest(
                self,
                "SecretProviderClass",
                cluster=cluster,  # type: ignore[arg-type]  # as above
                manifest=[security.secret_provider_class(secrets, region=config.region)],
            )
            self.secret_provider_class.node.add_dependency(namespace, secrets_store, *secrets_depend_on)

        # GCS fault tolerance (workloads/common/ha.py): without its SecretProviderClass a head
        # that mounts the store's CSI volume never starts. The budgets select RayService pods by
        # name, so they can exist before the services do.
        self.gcs_store_secret_provider_class: eks.KubernetesManifest | None = None
        self.disruption_budgets: eks.KubernetesManifest | None = None
        if config.gcs_fault_tolerance:
            if secrets_store is None or gcs_store_secret is None:
                raise ValueError("GCS fault tolerance needs the Secrets Store CSI driver add-on and the store's secret")
            self.gcs_store_secret_provider_class = eks.KubernetesManifest(
                self,
                "GcsStoreSecretProviderClass",
                cluster=cluster,  # type: ignore[arg-type]  # as above
                manifest=[ha.render_secret_provider_class(config)],
            )
            self.gcs_store_secret_provider_class.node.add_dependency(
                namespace, secrets_store, gcs_store_secret, *secrets_depend_on
            )
            self.disruption_budgets = eks.KubernetesManifest(
                self,
                "DisruptionBudgets",
                cluster=cluster,  # type: ignore[arg-type]  # as above
                manifest=ha.render_disruption_budgets(config)["items"],
            )
            self.disruption_budgets.node.add_dependency(namespace)
