"""Metrics, logs and alarms of the platform (constructs/observability.py builds them).

Metrics: an Amazon Managed Service for Prometheus workspace fed by an AWS managed collector
(``AWS::APS::Scraper``) that scrapes Ray's metrics ports and the KubeRay operator. Logs: the
CloudWatch Observability add-on's Fluent Bit ships every container's log to log groups this app
creates first, KMS-encrypted with the platform key and kept ``log_retention_days``. Alarms: AMP
alerting rules and a HyperPod EventBridge rule notify one KMS-encrypted SNS topic.

The pure facts shared by the construct, the NetworkPolicies and the review live here too, so
that infra and workloads name one port and one log group layout.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from config import catalog
from config.base import Frozen
from config.fields import log_retention_days

# KubeRay adds a container port named "metrics" (8080) to every Ray container and starts Ray with
# --metrics-export-port=8080 (ray-operator/controllers/ray/common/pod.go and utils/constant.go,
# DefaultMetricsPort, at the pinned v1.7.0). Serve's and Train's metrics go through the same port.
RAY_METRICS_PORT = 8080
RAY_METRICS_PORT_NAME = "metrics"
# The operator chart's container port "http" (8080) serves /metrics (values.yaml metrics.enabled).
OPERATOR_METRICS_PORT = 8080
OPERATOR_METRICS_PORT_NAME = "http"
# AMP's managed collector scrapes every 30 s at most often (Amazon CloudWatch user guide,
# "Scraper configuration", Limitations; review/engines.py checks the synthesized configuration).
MIN_SCRAPE_INTERVAL_SECONDS = 30
# The EKS API's HTTPS port: the collector discovers pods through the API server.
API_PORT = 443

# Log groups of the amazon-cloudwatch-observability add-on: Fluent Bit writes container logs to
# "application", node and kubelet logs to "dataplane" and "host"; the agent writes Container
# Insights performance events to "performance" (CloudWatch user guide, "Send logs to CloudWatch
# Logs" for Container Insights). Created by this app so that KMS and retention are its own.
CONTAINER_LOG_KINDS = ("application", "dataplane", "host", "performance")
# What the add-on's agent and Fluent Bit do on those groups, and all they may do on log groups.
CONTAINER_LOG_WRITER_ACTIONS = (
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "logs:DescribeLogStreams",
)

# The Kubernetes user the managed collector's access entry maps to, and the ClusterRole bound to
# it (Amazon Managed Service for Prometheus user guide, "Configuring your Amazon EKS cluster").
SCRAPER_USER = "aps-collector-user"
SCRAPER_CLUSTER_ROLE = "aps-collector-role"

# The training job's goodput gauges (workloads/training/goodput.py sets them through Ray's metrics
# API, which prefixes "ray_" for Prometheus), labelled like Ray Train's own series with the run's
# name (``ray_train_run_name``, the training dashboard's TrainRunName variable) and the bucket.
TRAIN_GOODPUT_SECONDS = "train_goodput_seconds"
TRAIN_GOODPUT_RATIO = "train_goodput_ratio"
TRAIN_GOODPUT_RUN_LABEL = "ray_train_run_name"
TRAIN_GOODPUT_BUCKETS = ("productive", "redone", "checkpoint", "startup", "waiting", "other")
# The training job's model-quality gauges (workloads/training/reporter.py sets them on rank 0 at
# every report through Ray's metrics API, prefixed "ray_" for Prometheus, labelled with
# TRAIN_GOODPUT_RUN_LABEL): the report's metric key to the gauge's name. The validation ones
# come with training.eval_every_steps; the gradient norm (before clipping) always.
TRAIN_QUALITY_GAUGES: dict[str, str] = {
    "loss": "train_loss",
    "grad_norm": "train_grad_norm",
    "val_loss": "train_validation_loss",
    "val_perplexity": "train_validation_perplexity",
    "val_bits_per_byte": "train_validation_bits_per_byte",
}
# The job's measured throughput (workloads/training/reporter.py, rank 0, each report), labelled
# with the run's name like the goodput gauges: tokens/s per GPU and MFU against the GPU's dense
# bf16 peak (config/catalog.py). Set only on GPU workers.
TRAIN_TOKENS_PER_S_PER_GPU = "train_tokens_per_s_per_gpu"
TRAIN_MFU = "train_mfu"
# The window of the goodput alert and of the dashboard's windowed goodput.
TRAIN_GOODPUT_WINDOW = "1h"
# The Serve error-rate alert's rate() window: 5 minutes, longer at slow scrapes. rate() needs two
# samples inside its window, and a window of exactly two intervals holds two only when the scrapes
# line up with it: four intervals (Prometheus' own rule of thumb for rate windows) always hold
# three or more, also with a late scrape.
SERVE_ERROR_WINDOW_SECONDS = 300
SAMPLES_PER_RATE_WINDOW = 4


def duration(seconds: int) -> str:
    """A Prometheus duration: whole minutes as ``Nm``, else ``Ns``."""
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def seconds_of(text: str) -> int:
    """Seconds of a Prometheus duration of one unit (``30s``, ``5m``, ``1h``)."""
    return int(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


def prometheus_name(ray_metric: str) -> str:
    """The Prometheus series name of a metric set through ``ray.util.metrics``."""
    return f"ray_{ray_metric}"


def train_goodput_promql(window: str = TRAIN_GOODPUT_WINDOW, selector: str = "") -> str:
    """Each run's goodput over the last ``window``: productive seconds gained over wall seconds
    gained. ``max by`` keeps one series per run and bucket where a restarted rank 0's gauges
    overlap a dead one's; ``selector`` adds label matchers (the dashboard's variables)."""
    run = TRAIN_GOODPUT_RUN_LABEL
    series = prometheus_name(TRAIN_GOODPUT_SECONDS)
    extra = f", {selector}" if selector else ""

    def gained(matchers: str) -> str:
        return f"sum by ({run}) (max by ({run}, bucket) (delta({series}{{{matchers}}}[{window}])))"

    productive = 'bucket="productive"' + extra
    return f"{gained(productive)} / {gained(selector)}"


_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
_HTTPS_RE = re.compile(r"^https://[A-Za-z0-9.-]+\.[A-Za-z]{2,}(:\d{1,5})?(/\S*)?$")


def container_log_group(cluster_name: str, kind: str) -> str:
    return f"/aws/containerinsights/{cluster_name}/{kind}"


def container_log_group_prefix(cluster_name: str) -> str:
    return f"/aws/containerinsights/{cluster_name}/"


class Observability(Frozen):
    """Where metrics, logs and alarms go."""

    log_retention_days: int = Field(
        default=30,
        description="Retention of the container log groups (/aws/containerinsights/<cluster>/*); a CloudWatch Logs retention period.",
        json_schema_extra={"enum": list(catalog.LOG_RETENTION_DAYS)},
    )
    scrape_interval_seconds: int = Field(
        default=MIN_SCRAPE_INTERVAL_SECONDS,
        ge=MIN_SCRAPE_INTERVAL_SECONDS,
        le=300,
        description="How often the managed collector scrapes Ray and the KubeRay operator, seconds; AMP's managed collector takes 30 at least.",
    )
    alarm_emails: list[str] = Field(
        default_factory=list,
        description="Email addresses subscribed to the alarm topic (each confirms by mail). A production environment needs at least one subscriber here or in alarm_https_endpoints.",
    )
    alarm_https_endpoints: list[str] = Field(
        default_factory=list,
        description="HTTPS endpoints subscribed to the alarm topic: a paging or incident service's Amazon SNS integration URL (PagerDuty, Opsgenie, ...), which confirms the subscription itself.",
    )
    serve_error_ratio: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Serve 5xx responses over all responses, per application over 5 minutes (or four scrape intervals, when longer), above which the Serve5xxRate alert fires.",
    )

    training_goodput_min: float = Field(
        default=0.7,
        gt=0,
        lt=1,
        description=(
            "A training run's goodput (productive step time over wall time, workloads/training/goodput.py) "
            "over the last hour below which the TrainingGoodputLow alert fires. 0.7: an hour with one node "
            "loss, HyperPod's node replacement and the restart (about 10 minutes) plus half a checkpoint "
            "interval redone stays above it; repeated failures, a wait for nodes or checkpoint stalls that "
            "take a third of the hour fire."
        ),
    )

    _retention = field_validator("log_retention_days")(classmethod(lambda cls, v: log_retention_days(v)))

    @property
    def serve_error_window(self) -> str:
        """The Serve5xxRate alert's rate() window: five minutes, or four scrapes when longer."""
        return duration(max(SERVE_ERROR_WINDOW_SECONDS, SAMPLES_PER_RATE_WINDOW * self.scrape_interval_seconds))

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, v: list[str]) -> list[str]:
        bad = [e for e in v if not _EMAIL_RE.match(e)]
        if bad:
            raise ValueError(f"{', '.join(repr(e) for e in bad)}: not an email address; expected name@example.com")
        return list(dict.fromkeys(v))

    @field_validator("alarm_https_endpoints")
    @classmethod
    def _https(cls, v: list[str]) -> list[str]:
        bad = [u for u in v if not _HTTPS_RE.match(u)]
        if bad:
            raise ValueError(
                f"{', '.join(repr(u) for u in bad)}: not an HTTPS URL; expected https://host/path "
                "(Amazon SNS delivers to HTTPS endpoints only)"
            )
        return list(dict.fromkeys(v))

    def subscriber_errors(self, *, production: bool) -> list[str]:
        """A production environment's alerts must reach someone: at least one subscriber."""
        if production and not (self.alarm_emails or self.alarm_https_endpoints):
            return [
                "observability.alarm_emails: a production environment needs at least one alarm subscriber; "
                "list an email address here or an HTTPS endpoint in observability.alarm_https_endpoints"
            ]
        return []
