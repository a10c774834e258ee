"""Metrics, container logs and alarms of one environment (config/observability.py).

- Metrics: an Amazon Managed Service for Prometheus workspace and an AWS managed collector
  (``AWS::APS::Scraper``) with its ENIs in the cluster's private subnets. It discovers pods through
  the EKS API and scrapes Ray's metrics port on heads and workers and the KubeRay operator's. The
  workspace is encrypted with an AWS owned key: AMP does not let a managed collector write to a
  workspace created with a customer managed key (AMP user guide, "Using an AWS managed
  collector"). The collector's in-cluster RBAC is a ClusterRole bound to the user its access
  entry maps to; AMP creates that access entry on clusters in API authentication modes.
- Logs: the container, node and performance log groups of the CloudWatch Observability add-on,
  created before the add-on (which would otherwise create them unencrypted and kept forever),
  encrypted with the platform key, retention from config.
- Alarms: AMP alerting rules (failed RayJob, RayService not ready, Serve 5xx ratio, a training
  run's goodput over the last hour, a Ray metrics target down) through the workspace's alert manager, and HyperPod's EventBridge cluster events
  at error level, to one SNS topic encrypted with the platform key.

One module because metrics, logs and alarms share the platform key's policy, the topic and the
collector's access, and the flow table proves them together.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from config import observability as obs
from config.facts import names
from config.observability import Observability
from constructs.compliance import acknowledge
from constructs.eks_cluster import PlatformEksCluster
from constructs.network import allow_log_groups

# ---------------------------------------------------------------------------------------------
# Pure functions of config: the scrape configuration, the alerting rules, the alert manager
# ---------------------------------------------------------------------------------------------

RAY_JOB = "ray"
OPERATOR_JOB = "kuberay-operator"


def scrape_configuration(observability: Observability, *, cluster_name: str) -> dict[str, Any]:
    """The collector's Prometheus configuration: Ray pods (KubeRay's "metrics" container port,
    every namespace) and the KubeRay operator pod. Pod labels become the series labels Ray's
    Grafana dashboards and KubeRay's docs use (``ray_io_cluster``, ``namespace``, ``pod``);
    every series carries ``cluster``: the EKS cluster's name."""
    interval = f"{observability.scrape_interval_seconds}s"
    pod_labels = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
    ]
    return {
        "global": {"scrape_interval": interval, "external_labels": {"cluster": cluster_name}},
        "scrape_configs": [
            {
                "job_name": RAY_JOB,
                "kubernetes_sd_configs": [{"role": "pod"}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_ray_io_node_type"],
                        "regex": "head|worker",
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": obs.RAY_METRICS_PORT_NAME,
                        "action": "keep",
                    },
                    {"source_labels": ["__meta_kubernetes_pod_label_ray_io_cluster"], "target_label": "ray_io_cluster"},
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_ray_io_node_type"],
                        "target_label": "ray_io_node_type",
                    },
                    *pod_labels,
                ],
            },
            {
                "job_name": OPERATOR_JOB,
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [names.KUBERAY_NAMESPACE]}}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                        "regex": "kuberay-operator",
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": obs.OPERATOR_METRICS_PORT_NAME,
                        "action": "keep",
                    },
                    *pod_labels,
                ],
            },
        ],
    }


def alerting_rules(observability: Observability) -> dict[str, Any]:
    """Prometheus alerting rules on KubeRay's CR metrics (kuberay_job_deployment_status,
    kuberay_service_condition_ready: ray-operator/controllers/ray/metrics at v1.7.0), Ray Serve's
    HTTP counters (the series Ray's Serve dashboard plots) and the training job's goodput gauges
    (the series the training dashboard's Goodput row plots)."""
    ratio = observability.serve_error_ratio
    window = observability.serve_error_window
    goodput_min = observability.training_goodput_min
    return {
        "groups": [
            {
                "name": "ray-platform",
                "rules": [
                    {
                        "alert": "RayJobFailed",
                        "expr": 'max by (namespace, name) (kuberay_job_deployment_status{deployment_status="Failed"}) > 0',
                        "labels": {"severity": "critical"},
                        "annotations": {"summary": "RayJob {{ $labels.namespace }}/{{ $labels.name }} failed"},
                    },
                    {
                        "alert": "RayServiceNotReady",
                        "expr": 'max by (namespace, name) (kuberay_service_condition_ready{condition="false"}) > 0',
                        "for": "10m",
                        "labels": {"severity": "critical"},
                        "annotations": {
                            "summary": "RayService {{ $labels.namespace }}/{{ $labels.name }} not ready for 10 minutes"
                        },
                    },
                    {
                        "alert": "Serve5xxRate",
                        "expr": (
                            f'sum by (application) (rate(ray_serve_num_http_error_requests_total{{error_code=~"5.."}}[{window}]))'
                            f" / sum by (application) (rate(ray_serve_num_http_requests_total[{window}]))"
                            f" > {ratio:g}"
                        ),
                        "for": "5m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": f"Serve application {{{{ $labels.application }}}}: more than {ratio:.0%} of responses are 5xx"
                        },
                    },
                    {
                        "alert": "TrainingGoodputLow",
                        "expr": f"{obs.train_goodput_promql()} < {goodput_min:g}",
                        "for": "15m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": (
                                f"Training run {{{{ $labels.{obs.TRAIN_GOODPUT_RUN_LABEL} }}}}: goodput over the last "
                                f"{obs.TRAIN_GOODPUT_WINDOW} below {goodput_min:.0%} (productive step time over wall "
                                "time; the training dashboard's Goodput row shows where the rest went)"
                            )
                        },
                    },
                    {
                        "alert": "RayMetricsTargetDown",
                        "expr": f'up{{job=~"{RAY_JOB}|{OPERATOR_JOB}"}} == 0',
                        "for": "10m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": "{{ $labels.job }} target {{ $labels.pod }} has not answered for 10 minutes"
                        },
                    },
                ],
            }
        ]
    }


def alertmanager_config(topic_arn: str, region: str) -> dict[str, Any]:
    """The Alertmanager configuration: every alert to the SNS topic (AMP user guide, "Alert manager
    configuration": an sns_configs receiver with sigv4 region)."""
    return {
        "route": {"receiver": "sns", "group_by": ["alertname", "namespace"]},
        "receivers": [
            {
                "name": "sns",
                "sns_configs": [{"topic_arn": topic_arn, "sigv4": {"region": region}, "attributes": {"source": "amp"}}],
            }
        ],
    }


def alert_manager_definition(topic_arn: str, region: str) -> str:
    """AMP's alert manager definition: a YAML document whose ``alertmanager_config`` key holds the
    whole Alertmanager configuration as one string, a literal block (AMP API reference,
    "AlertManagerDefinitionData YAML structure"; a mapping there makes AMP reject the workspace).
    The inner configuration is JSON, which is YAML; its lines are indented under the block."""
    inner = yaml_text(alertmanager_config(topic_arn, region))
    return "alertmanager_config: |\n" + "".join(f"  {line}\n" for line in inner.splitlines())


def scraper_rbac() -> list[dict[str, Any]]:
    """The collector's read access: pods (service discovery of the two pod jobs) and nothing else,
    for the user AMP's access entry maps the collector to."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": obs.SCRAPER_CLUSTER_ROLE},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": obs.SCRAPER_CLUSTER_ROLE + "-binding"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": obs.SCRAPER_CLUSTER_ROLE,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": obs.SCRAPER_USER}],
        },
    ]


def hyperpod_event_pattern(hyperpod_cluster_name: str) -> dict[str, Any]:
    """HyperPod cluster events at error level for the HyperPod cluster ``hyperpod_cluster_name`` (SageMaker guide, "SageMaker HyperPod
    cluster events reference": detail-type "SageMaker HyperPod Cluster Event")."""
    return {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker HyperPod Cluster Event"],
        "detail": {"EventDetails": {"ClusterName": [hyperpod_cluster_name], "EventLevel": ["Error"]}},
    }


def yaml_text(document: dict[str, Any]) -> str:
    """Deterministic YAML (JSON is YAML) for AMP's configuration fields."""
    return json.dumps(document, indent=2, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# The construct
# ---------------------------------------------------------------------------------------------


class PlatformObservability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        observability_config: Observability,
        name_prefix: str,
        cluster_name: str,
        hyperpod_cluster_name: str,
        cluster: PlatformEksCluster,
        vpc: ec2.IVpc,
        hyperpod_security_group: ec2.ISecurityGroup,
        key: kms.IKey,
        removal_policy: RemovalPolicy,
    ) -> None:
        """``cluster_name``: ``cluster``'s name as config derives it (literal: it names the log
        groups and labels every series); ``hyperpod_cluster_name``: the HyperPod cluster whose
        error events alarm.

        The log groups are written by the cluster's CloudWatch observability add-on (where the
        environment has it), which comes after them: its Fluent Bit must find them already
        encrypted and with their retention."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.key = key
        # The CloudWatch agent's role exists where the environment has the observability add-on.
        self.log_groups = self._log_groups(
            observability_config, cluster_name, key, removal_policy, getattr(cluster, "cloudwatch_role", None)
        )
        self.topic = self._topic(observability_config, name_prefix, key)
        self.workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            alias=f"{name_prefix}-metrics",
            alert_manager_definition=alert_manager_definition(self.topic.topic_arn, stack.region),
        )
        self.rules = aps.CfnRuleGroupsNamespace(
            self,
            "AlertRules",
            name="ray-platform",
            workspace=self.workspace.attr_arn,
            data=yaml_text(alerting_rules(observability_config)),
        )
        self.scraper_security_group, self.scraper_rules = self._scraper_network(cluster, vpc, hyperpod_security_group)
        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=f"{name_prefix}-ray",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster.cluster_arn,
                    subnet_ids=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids,
                    security_group_ids=[self.scraper_security_group.security_group_id],
                )
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=base64.b64encode(
                    yaml_text(scrape_configuration(observability_config, cluster_name=cluster_name)).encode()
                ).decode()
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=self.workspace.attr_arn)
            ),
        )
        self.rbac = cluster.manifest(self, "ScraperRbac", scraper_rbac(), overwrite=True)
        self.hyperpod_events = events.Rule(
            self,
            "HyperPodErrors",
            description=f"HyperPod cluster {hyperpod_cluster_name}: error-level cluster events (failed or replaced nodes)",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker HyperPod Cluster Event"],
                detail=hyperpod_event_pattern(hyperpod_cluster_name)["detail"],
            ),
            targets=[targets.SnsTopic(self.topic)],
        )
        cluster.install(self.rbac)
        log_agent = cluster.addons.get("amazon-cloudwatch-observability")
        if log_agent is not None:
            log_agent.node.add_dependency(*self.log_groups.values())

    # -----------------------------------------------------------------------------------------

    def _log_groups(
        self,
        observability: Observability,
        cluster: str,
        key: kms.IKey,
        removal_policy: RemovalPolicy,
        writer: iam.IRole | None,
    ) -> dict[str, logs.LogGroup]:
        # Literal names, not the groups' ARNs: the key belongs to the storage stack, and naming
        # this stack's groups there would make the two stacks reference each other.
        allow_log_groups(key, sid="AllowContainerLogGroups", names=f"{obs.container_log_group_prefix(cluster)}*")
        groups: dict[str, logs.LogGroup] = {}
        for kind in obs.CONTAINER_LOG_KINDS:
            group = logs.LogGroup(
                self,
                f"{kind.capitalize()}Logs",
                log_group_name=obs.container_log_group(cluster, kind),
                encryption_key=key,
                removal_policy=removal_policy,
            )
            # Days validated by the config model against CloudWatch Logs' allowed periods.
            group.node.default_child.retention_in_days = observability.log_retention_days  # type: ignore[union-attr]
            groups[kind] = group
        if writer is not None:
            # The add-on's Fluent Bit and agent write with this role, to these groups only.
            # CreateLogGroup: the add-on's Fluent Bit creates its group when missing (here it
            # exists, so the call answers "already exists").
            writer.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="WriteContainerLogs",
                    actions=list(obs.CONTAINER_LOG_WRITER_ACTIONS),
                    # The group's ARN with ":*" (its streams) and without (CreateLogGroup).
                    resources=[
                        arn
                        for kind, g in groups.items()
                        for arn in (
                            g.log_group_arn,
                            Stack.of(self).format_arn(
                                service="logs",
                                resource="log-group",
                                resource_name=obs.container_log_group(cluster, kind),
                                arn_format=ArnFormat.COLON_RESOURCE_NAME,
                            ),
                        )
                    ],
                )
            )
            acknowledge(
                writer,
                (
                    "NIST.800.53.R5-IAMNoInlinePolicy",
                    "The statement names this environment's container log groups only and lives beside the groups it grants.",
                ),
            )
        return groups

    def _topic(self, observability: Observability, name_prefix: str, key: kms.IKey) -> sns.Topic:
        stack = Stack.of(self)
        topic = sns.Topic(
            self,
            "Alarms",
            display_name=f"{name_prefix} platform alarms",
            master_key=key,
            enforce_ssl=True,
        )
        for email in observability.alarm_emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        for url in observability.alarm_https_endpoints:
            topic.add_subscription(subscriptions.UrlSubscription(url, protocol=sns.SubscriptionProtocol.HTTPS))
        # AMP's alert manager and EventBridge publish as services of this account.
        for service in ("aps.amazonaws.com", "events.amazonaws.com"):
            topic.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"Publish{service.split('.')[0].capitalize()}",
                    principals=[iam.ServicePrincipal(service)],
                    actions=["sns:Publish", *(("sns:GetTopicAttributes",) if service.startswith("aps") else ())],
                    resources=[topic.topic_arn],
                    conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
                )
            )
        # Both services encrypt what they publish with the topic's key. The statement is AWS's own
        # for each: "Giving Amazon Managed Service for Prometheus permission to send alert messages
        # to your Amazon SNS topic" (AMP user guide) and "Configure AWS KMS permissions for AWS
        # services" (SNS developer guide) grant kms:GenerateDataKey* and kms:Decrypt to the
        # service principal with no condition. Neither says that a publish by the service carries
        # kms:ViaService or aws:SourceAccount to KMS, and a condition the call lacks would drop
        # every alert without an error anyone sees; the account guard stays on the topic's policy
        # above, where AMP's example puts it.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowAlarmPublishers",
                principals=[iam.ServicePrincipal("aps.amazonaws.com"), iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                resources=["*"],
            )
        )
        return topic

    def _scraper_network(
        self, cluster: PlatformEksCluster, vpc: ec2.IVpc, hyperpod_group: ec2.ISecurityGroup
    ) -> tuple[ec2.SecurityGroup, list[ec2.CfnSecurityGroupIngress]]:
        """The collector's ENIs: out to the metrics ports of both node pools and to the EKS API,
        nothing else; the pools' groups admit it on exactly those ports (flows in constructs/network_flows.py)."""
        group = ec2.SecurityGroup(
            self,
            "ScraperSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="AMP managed collector ENIs: Ray and KubeRay metrics ports, EKS API",
        )
        cluster_group = cluster.cluster_security_group_id
        hyperpod = hyperpod_group.security_group_id
        specs = [
            (
                "SystemMetrics",
                cluster_group,
                obs.RAY_METRICS_PORT,
                "AMP collector to Ray heads and the KubeRay operator (metrics)",
            ),
            ("HyperPodMetrics", hyperpod, obs.RAY_METRICS_PORT, "AMP collector to Ray workers (metrics)"),
            ("EksApi", cluster_group, obs.API_PORT, "AMP collector to the EKS API (pod discovery)"),
        ]
        rules = []
        for cid, peer, port, description in specs:
            ec2.CfnSecurityGroupEgress(
                self,
                f"ScraperTo{cid}",
                group_id=group.security_group_id,
                destination_security_group_id=peer,
                ip_protocol="tcp",
                from_port=port,
                to_port=port,
                description=description,
            )
            rules.append(
                ec2.CfnSecurityGroupIngress(
                    self,
                    f"{cid}FromScraper",
                    group_id=peer,
                    source_security_group_id=group.security_group_id,
                    ip_protocol="tcp",
                    from_port=port,
                    to_port=port,
                    description=description,
                )
            )
        return group, rules
