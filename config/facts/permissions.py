"""The IAM actions each ``hpray`` command calls (read-only), for the operator's role policy, and
what each job command does in Kubernetes.

A fact both sides read: the CDK app grants a team's Role what the job commands need
(constructs/team_access.py, constructs/team_flows.py) and the CLI makes those calls, so the table
sits in the bottom layer rather than in ops/. tests/ops/test_ops_permissions.py records the calls the commands actually make and checks them
against these lists, so the lists (and the README table) cannot drift from the code.
"""

PREFLIGHT = (
    "sts:GetCallerIdentity",
    "servicequotas:ListServiceQuotas",
    "servicequotas:ListAWSDefaultServiceQuotas",
    "ec2:DescribeAvailabilityZones",
    "eks:DescribeClusterVersions",
    "eks:DescribeAddonVersions",
    "cloudformation:DescribeStacks",
    "ec2:DescribeVpcs",
)
# With network.images_from_ecr, preflight and status also check the Docker Hub credential (the
# secret network.docker_hub_credential_secret_arn names: scope GetSecretValue to it) and the
# pull-through cache rules (ops/images.py).
IMAGES = (
    "secretsmanager:GetSecretValue",
    "ecr:DescribePullThroughCacheRules",
    "ecr:ValidatePullThroughCacheRule",
)
STATUS = (
    "sts:GetCallerIdentity",
    "sagemaker:DescribeCluster",
    "sagemaker:ListClusterNodes",
    "eks:DescribeCluster",
    "cloudformation:DescribeStacks",
    "fsx:DescribeFileSystems",
)
# status and submit reach Kubernetes with an EKS token (a presigned sts:GetCallerIdentity, which
# needs no permission) after eks:DescribeCluster; Kubernetes access comes from an EKS access entry.
# Every command that calls a head's Jobs API or dashboard (following a job's driver log: submit,
# submit job, logs; dashboard) reads the Ray token (eks.ray_token_auth) from its Secrets Manager
# secret <name_prefix>/ray-auth-token, encrypted with the platform key (kms:Decrypt is Secrets
# Manager's call on the caller's behalf): scope both to that secret and key.
RAY_TOKEN = ("secretsmanager:GetSecretValue", "kms:Decrypt")
# submit training also reads its dataset's manifest (training.dataset_path) in the checkpoint
# bucket's copy: s3:GetObject (HeadObject), decrypted with the platform key.
SUBMIT = ("eks:DescribeCluster", "s3:GetObject", "kms:Decrypt", *RAY_TOKEN)
# submit job uploads the working directory to jobs/<job>/ of the checkpoint bucket (config/facts/jobs.py):
# HeadObject (allowed by s3:GetObject) skips an upload of identical code; the bucket's SSE-KMS key
# needs kms:GenerateDataKey for the put. Scope both to that prefix and key.
SUBMIT_JOB = ("eks:DescribeCluster", "s3:GetObject", "s3:PutObject", "kms:GenerateDataKey", *RAY_TOKEN)
# jobs, stop, resume: Kubernetes only; logs also reads the Ray token (see the README for the verbs).
JOBS = ("eks:DescribeCluster", *RAY_TOKEN)
DASHBOARD = ("eks:DescribeCluster", *RAY_TOKEN)
# images pin-base makes no AWS call: it asks Docker Hub's registry API and edits workloads/Dockerfile.
# upgrade plan reads the add-on builds EKS offers for the target (printed without them when
# denied); --apply also reads the cluster and its upgrade insights.
UPGRADE_PLAN = ("eks:DescribeAddonVersions",)
# teardown finds the Ray heads' security group and waits for its branch interfaces (read-only on
# AWS); in Kubernetes it lists and deletes the Ray objects (K8S_TEARDOWN).
TEARDOWN = ("ec2:DescribeSecurityGroups", "ec2:DescribeNetworkInterfaces")
UPGRADE_APPLY = ("eks:DescribeCluster", "eks:ListInsights", "eks:DescribeAddonVersions")

# Kubernetes: what each job command does in the one namespace it acts on (``--namespace``), as
# (API group, resource, verb). A team's Role (constructs/team_access.py) grants what these need
# and nothing on Secrets; the flow checks (review/rbac.py) evaluate it for every team. The pod
# ``portforward`` of the Python client is a websocket GET: Kubernetes authorizes it as ``get``,
# and from 1.35 (AuthorizePodWebsocketUpgradeCreatePermission) also as ``create``.
PORT_FORWARD = (("", "pods/portforward", "get"), ("", "pods/portforward", "create"))
K8S_JOBS = (("ray.io", "rayjobs", "list"),)
K8S_LOGS = (("ray.io", "rayjobs", "get"), ("", "pods", "list"), *PORT_FORWARD)
K8S_DASHBOARD = (
    ("ray.io", "rayjobs", "get"),
    ("ray.io", "rayjobs", "list"),
    ("ray.io", "rayservices", "get"),
    ("ray.io", "rayservices", "list"),
    ("", "pods", "list"),
    *PORT_FORWARD,
)
K8S_SUBMIT_JOB = (
    ("ray.io", "rayjobs", "get"),
    ("ray.io", "rayjobs", "create"),
    # --name of a finished job: deleted, then created again (ops/submit.py apply).
    ("ray.io", "rayjobs", "delete"),
    ("", "pods", "list"),
    ("", "events", "list"),
    *PORT_FORWARD,
)
K8S_STOP = (("ray.io", "rayjobs", "get"), ("ray.io", "rayjobs", "patch"), ("ray.io", "rayjobs", "delete"))
K8S_RESUME = (("ray.io", "rayjobs", "get"), ("ray.io", "rayjobs", "patch"))
K8S_TEARDOWN = tuple(
    ("ray.io", plural, verb) for plural in ("rayjobs", "rayservices", "rayclusters") for verb in ("list", "delete")
)
K8S_JOB_COMMANDS = {
    "jobs": K8S_JOBS,
    "logs": K8S_LOGS,
    "dashboard": K8S_DASHBOARD,
    "submit job": K8S_SUBMIT_JOB,
    "stop": K8S_STOP,
    "resume": K8S_RESUME,
}
