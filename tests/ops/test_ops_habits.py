"""The habits of kubectl and the Ray CLI (issue 37): a default environment ($HPRAY_ENV, or the
context file `hpray env use NAME` writes), suggestions for a mistyped command or environment, and
-o json|yaml|wide."""

from __future__ import annotations

import io

from ops.cli import main


def run(argv, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err, prog="hpray", **kwargs)
    return code, out.getvalue(), err.getvalue()


def refuse(*_a, **_k):
    raise AssertionError("a dry run made a client")


def test_env_use_sets_the_default_and_hpray_env_and_env_override_it(tmp_path, monkeypatch):
    code, out, err = run(["submit", "training", "--dry-run"], aws_factory=refuse, kube_factory=refuse)
    assert code == 2
    assert err == (
        "error: the following arguments are required: --env\n"
        "fix:   pass --env NAME, set HPRAY_ENV=NAME, or make one the default: hpray env use NAME\n"
    )
    assert run(["env"]) == (
        0,
        "no default environment: pass --env NAME, set HPRAY_ENV, or run hpray env use NAME\n",
        "",
    )
    code, out, err = run(["env", "use", "staging"])
    context = tmp_path / "xdg-config" / "hpray" / "context"
    assert (code, out, err) == (
        0,
        f"default environment: staging (written to {context}; $HPRAY_ENV and --env override it)\n",
        "",
    )
    assert context.read_text() == "staging\n"
    assert run(["env"]) == (0, f"staging (from {context})\n", "")
    code, out, _ = run(["submit", "training", "--dry-run"], aws_factory=refuse, kube_factory=refuse)
    assert code == 0 and "222222222222.dkr.ecr" in out  # staging's account
    monkeypatch.setenv("HPRAY_ENV", "dev")
    assert run(["env"]) == (0, "dev (from $HPRAY_ENV)\n", "")
    code, out, _ = run(["submit", "training", "--dry-run"], aws_factory=refuse, kube_factory=refuse)
    assert code == 0 and "111111111111.dkr.ecr" in out  # dev's
    code, out, _ = run(["submit", "training", "--dry-run", "--env", "prod"], aws_factory=refuse, kube_factory=refuse)
    assert code == 0 and "333333333333.dkr.ecr" in out  # prod's
    code, out, _ = run(["env", "list"])
    assert out.splitlines()[:3] == ["* dev", "  prod", "  staging"]


def test_a_mistyped_environment_or_command_gets_a_suggestion(monkeypatch):
    code, _, err = run(["env", "use", "stagin"])
    assert code == 2
    assert err.splitlines()[0] == (
        "error: env use: unknown environment 'stagin'; did you mean 'staging'? (known: dev, prod, staging)"
    )
    monkeypatch.setenv("HPRAY_ENV", "prd")
    code, _, err = run(["jobs"])
    assert code == 2
    assert err.splitlines()[0] == (
        "error: $HPRAY_ENV: unknown environment 'prd'; did you mean 'prod'? (known: dev, prod, staging)"
    )
    code, _, err = run(["stauts", "--env", "dev"])
    assert code == 2 and err.splitlines()[0].endswith("; did you mean 'status'?")
    code, _, err = run(["status", "--env", "stagin"])
    assert code == 2 and err.splitlines()[0].endswith("; did you mean 'staging'?")
    code, _, err = run(["submit", "trainig", "--env", "dev"])
    assert code == 2 and err.splitlines()[0].endswith("; did you mean 'training'?")


def test_output_json_yaml_and_wide(monkeypatch):
    """-o json is --json; -o yaml the same data as YAML; -o wide more columns (jobs)."""
    import json

    import yaml

    from tests.ops.fakes import rayjob

    class Kube:
        def list_ray(self, kind, namespace=None):
            return [rayjob("running", name="hello")]

    common = {"aws_factory": lambda c, p: None, "kube_factory": lambda a, c, args: Kube(), "token_fn": lambda *a: None}
    code, as_json, _ = run(["jobs", "--env", "dev", "-o", "json"], **common)
    assert code == 0
    assert run(["jobs", "--env", "dev", "--json"], **common)[1] == as_json
    code, as_yaml, _ = run(["jobs", "--env", "dev", "-o", "yaml"], **common)
    assert code == 0 and yaml.safe_load(as_yaml) == json.loads(as_json)
    code, wide, _ = run(["jobs", "--env", "dev", "-o", "wide"], **common)
    header = wide.splitlines()[0].split()
    assert code == 0 and header[-5:] == ["KIND", "RAY", "CLUSTER", "SUSPENDED", "REASON"]
    assert "REASON" not in run(["jobs", "--env", "dev"], **common)[1].splitlines()[0]
    code, _, err = run(["jobs", "--env", "dev", "-o", "xml"], **common)
    assert code == 2 and "invalid choice: 'xml' (choose from 'json', 'yaml', 'wide')" in err


def test_stop_job_stops_the_ray_job_as_ray_job_stop():
    """`stop NAME --job`: the job-level stop (POST /api/jobs/ID/stop on the head's dashboard, with
    the token), beside the cluster-level one (suspend); nothing is suspended or deleted."""
    from tests.ops.fakes import head_pod, rayjob

    calls = []

    class Kube:
        def get_ray(self, kind, namespace, name):
            return rayjob("running", name="hello")

        def list_pods(self, namespace, selector):
            return [head_pod("hello-x7k2p")] if selector == "ray.io/cluster=hello-x7k2p,ray.io/node-type=head" else []

        def pod_http_post(self, namespace, pod, port, path, headers=None):
            calls.append((namespace, pod, port, path, headers))
            return 200, b'{"stopped": true}'

        def patch_ray(self, *a):
            raise AssertionError("--job suspends nothing")

        def delete_ray(self, *a):
            raise AssertionError("--job deletes nothing")

    code, out, err = run(
        ["stop", "hello", "--env", "dev", "--job"],
        aws_factory=lambda c, p: None,
        kube_factory=lambda a, c, args: Kube(),
        token_fn=lambda kube, ns, head: "tok",
    )
    assert (code, err) == (0, "")
    assert calls == [
        (
            "ray-workloads",
            "hello-x7k2p-head-8xk2q",
            8265,
            "/api/jobs/hello-9vq4s/stop",
            {"x-ray-authorization": "Bearer tok"},
        )
    ]
    assert out.startswith("stopped Ray job hello-9vq4s of RayJob ray-workloads/hello (as `ray job stop`)")
    code, _, err = run(["stop", "hello", "--env", "dev", "--job", "--delete"], aws_factory=refuse, kube_factory=refuse)
    assert code == 2 and "not allowed with argument" in err


def test_describe_pods_and_logs_of_a_rayservice():
    """describe, pods and logs take a RayService as they take a RayJob (issue 37): its state,
    applications and pods; its log is its head's."""
    from ops.errors import NotFoundError
    from tests.ops.fakes import head_pod, rayservice

    service = rayservice(True, name="hpray-dev-generate")
    cluster = "hpray-dev-generate-raycluster-abcde"

    class Kube:
        def get_ray(self, kind, namespace, name):
            if kind == "RayService" and name == "hpray-dev-generate":
                return service
            raise NotFoundError(f"{kind} {name}: not found")

        def list_pods(self, namespace, selector):
            return [head_pod(cluster)] if selector == f"ray.io/cluster={cluster}" else []

        def list_events(self, namespace, selector):
            return []

        def read_pod_log(self, namespace, pod, **kwargs):
            assert pod == f"{cluster}-head-8xk2q"
            return "serve controller up\n"

    common = {"aws_factory": lambda c, p: None, "kube_factory": lambda a, c, args: Kube(), "token_fn": lambda *a: None}
    code, out, err = run(["describe", "hpray-dev-generate", "--env", "dev"], **common)
    assert (code, err) == (0, "")
    assert out.splitlines()[:3] == [
        "Name:          ray-workloads/hpray-dev-generate (RayService)",
        "State:         Running, ready",
        "Applications:  llm: RUNNING",
    ]
    code, out, _ = run(["pods", "hpray-dev-generate", "--env", "dev"], **common)
    assert code == 0 and f"{cluster}-head-8xk2q" in out
    assert run(["logs", "hpray-dev-generate", "--env", "dev"], **common)[:2] == (0, "serve controller up\n")
    code, _, err = run(["describe", "nope", "--env", "dev"], **common)
    assert code == 4 and "RayServices" in err
