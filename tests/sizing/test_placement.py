"""Placement: node pools from config, every pod of the platform on the pool it selects, as
configured and in the worst transients; the faults of issue 18 it found (2, 3, 4, 11c).

One module because it mirrors ``sizing/placement.py`` (with the pools and pods of sizing/pods.py): the tests share its pools and fixtures.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from config import catalog, load_environment
from manifests import registry
from manifests.training import render as render_training
from sizing import placement, pods
from sizing.scheduling import Pod, Pool, Selection, cpu_millis, memory_mib, place, pod_from_spec, selects
from tests.config.config_data import config_errors as errors_of

ENVS = ("dev", "staging", "prod")


# --- What a node offers: the EKS AMI's formulas ---------------------------------------------


def test_kube_reserved_cpu_follows_the_eks_ami_bands():
    # 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % of the rest.
    assert [catalog.kube_reserved_cpu_millis(n) for n in (1, 2, 4, 8, 48, 192)] == [60, 70, 80, 90, 190, 550]


def test_the_trunk_interface_takes_one_eni_from_the_system_pods():
    """Security groups for pods (the Ray heads' group) attach a trunk ENI to every system node:
    ordinary pods keep the other ENIs' addresses."""
    assert catalog.max_pods_with_trunk("m7i.xlarge") == 3 * 14 + 2 < catalog.max_pods("m7i.xlarge")
    from config import load_environment
    from sizing.pods import system_pool

    cfg = load_environment("dev")
    assert system_pool(cfg.eks).allocatable.pods == catalog.max_pods_with_trunk(cfg.eks.system_nodes.instance_type)


def test_kube_reserved_memory_and_max_pods():
    # m7i.xlarge: 4 ENIs x 15 IPv4 -> 4 x 14 + 2 = 58 pods; 11 MiB each + 255 MiB.
    assert catalog.max_pods("m7i.xlarge") == 58
    assert catalog.kube_reserved_memory_mib(58) == 893
    # HyperPod types use their EC2 counterpart's ENIs: p5.48xlarge's default card has 2 x 50.
    assert catalog.max_pods("ml.p5.48xlarge") == 100
    with pytest.raises(KeyError, match=r"no ENI limits for instance type 'x1\.large'"):
        catalog.max_pods("x1.large")


def test_allocatable_of_a_system_node():
    a = catalog.node_allocatable("m7i.xlarge")
    # 16 GiB less the VM overhead (7.5 %), kube-reserved (893 MiB) and evictionHard (100 MiB).
    assert (a.cpu_millis, a.capacity_memory_mib, a.memory_mib, a.pods) == (3920, 15155, 15155 - 893 - 100, 58)


def test_threads_per_core_1_halves_the_vcpus():
    spec = catalog.instance_spec("ml.g5.12xlarge")
    assert (spec.vcpus_at(1), spec.vcpus_at(2)) == (24, 48)
    assert catalog.node_allocatable("ml.g5.12xlarge", threads_per_core=1).capacity_cpu_millis == 24000
    # Grace has one thread per core whatever the setting.
    assert catalog.instance_spec("ml.p6e-gb200.36xlarge").vcpus_at(2) == 144


# --- Generic pods ----------------------------------------------------------------------------


def test_quantities():
    assert [cpu_millis(q) for q in ("500m", "2", 1.5, "0.1")] == [500, 2000, 1500, 100]
    assert [memory_mib(q) for q in ("512Mi", "16Gi", "1G", "1048576")] == [512, 16384, 954, 1]
    with pytest.raises(ValueError, match="'12Gb' is not a Kubernetes memory quantity"):
        memory_mib("12Gb")


def test_pod_from_spec_reads_what_the_scheduler_reads():
    pod = pod_from_spec(
        "p",
        {
            "nodeSelector": {"a": "b"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}]}
                        ]
                    }
                }
            },
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            # Requests default to limits; an init container counts when it is larger.
            "containers": [
                {"resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
        },
        replicas=3,
    )
    assert (pod.cpu_millis, pod.memory_mib, pod.gpus, pod.replicas) == (2000, 1024, 2, 3)
    assert pod.node_selector == {"a": "b"}
    assert pod.affinity == ((("t", "In", ("x", "y")),),)
    assert pod.tolerations == (("k", "Exists", None, "NoSchedule"),)


def _pool(**kw) -> Pool:
    base = {
        "name": "p",
        "instance_type": "ml.g5.12xlarge",
        "nodes": 1,
        "allocatable": catalog.Allocatable(4000, 8192, 3, 4000, 8192),
        "gpus": 4,
        "efa": 0,
        "labels": {"t": "x"},
        "taints": (),
    }
    return Pool(**{**base, **kw})


def test_selection_by_labels_affinity_and_taints():
    tainted = _pool(taints=(("workload", "ray-serve", "NoSchedule"),))
    plain = Pod("plain", 1, 1)
    assert selects(plain, _pool()) and not selects(plain, tainted)
    assert selects(Pod("t", 1, 1, tolerations=(("workload", "Equal", "ray-serve", "NoSchedule"),)), tainted)
    assert not selects(Pod("t", 1, 1, tolerations=(("workload", "Equal", "other", "NoSchedule"),)), tainted)
    assert selects(Pod("any", 1, 1, tolerations=((None, "Exists", None, None),)), tainted)
    # A PreferNoSchedule taint does not keep a pod off.
    assert selects(plain, _pool(taints=(("soft", "", "PreferNoSchedule"),)))
    assert not selects(Pod("s", 1, 1, node_selector={"t": "y"}), _pool())
    assert selects(Pod("a", 1, 1, affinity=((("t", "In", ("x",)),),)), _pool())
    assert not selects(Pod("a", 1, 1, affinity=((("t", "NotIn", ("x",)),),)), _pool())


def test_pod_count_cpu_and_gpus_are_limits():
    pool = _pool()  # 3 pods, 4 CPUs, 4 GPUs
    assert place([pool], [Pod("small", 10, 10, replicas=3)]).misfits == []
    (misfit,) = place([pool], [Pod("small", 10, 10, replicas=4)]).misfits
    assert misfit.startswith(
        "placement (as configured): pod 'small' does not fit node pool 'p' (1 x ml.g5.12xlarge, 3 of 4 placed)"
    )
    assert misfit.endswith("the most left on one node is cpu 3.97, memory 8.0Gi, nvidia.com/gpu 4, pods 0")
    assert place([pool], [Pod("gpus", 10, 10, gpus=2, replicas=3)]).misfits != []
    assert place([pool], [Pod("cpu", 4001, 10)]).misfits != []


def test_daemonsets_take_every_node_they_select_first():
    pool = _pool(nodes=2)
    result = place([pool], [Pod("worker", 3500, 10, replicas=2), Pod("ds", 600, 10, daemonset=True)])
    assert [sorted(n.placed) for n in result.nodes] == [["ds"], ["ds"]]
    assert len(result.misfits) == 1 and "pod 'worker'" in result.misfits[0]


def test_a_pod_no_pool_selects():
    (misfit,) = place([_pool()], [Pod("lost", 1, 1, node_selector={"t": "nope"})]).misfits
    assert misfit == (
        "placement (as configured): pod 'lost' selects no node pool (nodeSelector {'t': 'nope'}, "
        "0 node-affinity term(s), 0 toleration(s)); pools: p"
    )


def test_a_daemonset_no_pool_selects_runs_no_pod():
    # Kubernetes runs a DaemonSet on the nodes it selects: none is zero pods, not a misfit.
    result = place([_pool(nodes=2)], [Pod("mps", 10, 10, node_selector={"t": "nope"}, daemonset=True)])
    assert result.misfits == [] and [n.placed for n in result.nodes] == [[], []]


def test_a_shared_selection_judges_again_what_differs_in_the_fields_selects_reads():
    """The situations share one Selection: a pod or pool alike in what ``selects`` reads is judged
    once; a pool with other labels or taints, or a pod with another selector or tolerations, is
    judged again, whatever its name."""
    shared = Selection()
    pod = Pod("w", 10, 10, node_selector={"t": "x"})
    assert place([_pool()], [pod], selection=shared).misfits == []
    (lost,) = place([_pool(labels={"t": "y"})], [pod], selection=shared).misfits
    assert "pod 'w' selects no node pool" in lost
    tainted = _pool(taints=(("workload", "ray-serve", "NoSchedule"),))
    assert "pod 'w' selects no node pool" in place([tainted], [pod], selection=shared).misfits[0]
    tolerant = Pod("w", 10, 10, node_selector={"t": "x"}, tolerations=(("workload", "Equal", "ray-serve", None),))
    assert place([tainted], [tolerant], selection=shared).misfits == []
    assert place([_pool()], [Pod("w", 10, 10, node_selector={"t": "y"})], selection=shared).misfits != []
    # Two pools alike except in labels, in one list: each keeps its own answer.
    result = place([_pool(name="a"), _pool(name="b", labels={"t": "y"})], [pod], selection=shared)
    assert [n.placed for n in result.nodes] == [["w"], []]


@pytest.mark.parametrize("n_groups", [1, 40])
def test_situations_with_a_shared_selection_place_as_separate_ones(monkeypatch, tmp_path, n_groups):
    """Every situation of a many-group config (bench/synth_bench.py's) places each pod on the same
    node, with the same misfits, as when each pod's pools are judged afresh in each situation."""
    from bench.synth_bench import groups_config
    from config.facts import names

    groups_config(tmp_path, n_groups)
    env = load_environment(f"groups{n_groups}", tmp_path)
    # More than the system nodes hold, and a pod no pool selects: misfits to compare too.
    extra = [Pod(f"filler-{i}", 900, 2048, node_selector=dict(names.SYSTEM_NODE_SELECTOR)) for i in range(8)]
    extra.append(Pod("nowhere", 1, 1, node_selector={"t": "nope"}))

    def outcome() -> list:
        return [
            (
                p.situation,
                p.misfits,
                [(n.pool.name, n.index, n.placed, n.cpu, n.memory, n.gpus, n.pods) for n in p.nodes],
            )
            for p in placement.situations(env, extra, plan=registry.plan_of(env))
        ]

    shared = outcome()

    class Afresh(Selection):
        def pools_of(self, pods, pool_list):
            return [tuple(i for i, q in enumerate(pool_list) if selects(pod, q)) for pod in pods]

    monkeypatch.setattr(placement, "Selection", Afresh)
    assert outcome() == shared
    # As configured, each group losing a node (and a RayService upgrade where the config has one).
    assert len(shared) >= 1 + n_groups
    assert all(
        any("filler" in m for m in misfits) and any("'nowhere'" in m for m in misfits) for _, misfits, _ in shared
    )


# --- The platform's pods, as rendered --------------------------------------------------------


def _kuberay_pods(manifest: dict) -> list[Pod]:
    """The pods KubeRay creates from a RayJob or RayService: head (plus the autoscaler container
    it adds when in-tree autoscaling is on), workers at their maximum, and a submitter pod when a
    RayJob runs in K8sJobMode, KubeRay's default (read from submitterPodTemplate when given)."""
    from config.facts import addons

    spec = manifest["spec"]
    cluster = spec.get("rayClusterSpec") or spec["rayClusterConfig"]
    head = dict(cluster["headGroupSpec"]["template"]["spec"])
    if cluster.get("enableInTreeAutoscaling"):
        head["containers"] = head["containers"] + [{"resources": addons.RAY_AUTOSCALER_SIDECAR_RESOURCES}]
    pods = [pod_from_spec("head", head)]
    pods += [
        pod_from_spec("worker", wg["template"]["spec"], replicas=wg["maxReplicas"])
        for wg in cluster["workerGroupSpecs"]
    ]
    if "rayClusterSpec" in spec and spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
        pods.append(pod_from_spec("submitter", (spec.get("submitterPodTemplate") or {"spec": {}})["spec"]))
    return pods


def _rendered(env) -> list[tuple[str, Pod]]:
    """The pods of every workload the environment deploys, as the registry renders them."""
    out = []
    for w, _ in registry.deployed(env):
        m = w.render(env)
        out += [(f"{m['kind']} {m['metadata']['name']}", p) for p in _kuberay_pods(m)]
    return out


def _scheduling(pod: Pod) -> tuple:
    return (
        pod.cpu_millis,
        pod.memory_mib,
        pod.gpus,
        pod.efa,
        dict(pod.node_selector),
        pod.affinity,
        set(pod.tolerations),
        pod.replicas,
    )


@pytest.mark.parametrize("name", ENVS)
def test_the_checked_pods_are_the_rendered_pods(name):
    env = load_environment(name)
    checked = {p.name: p for p in placement.platform_pods(env, plan=registry.plan_of(env))}
    rendered = _rendered(env)
    # RayJob (HTTPMode: no submitter pod): head, workers; each RayService: head, workers; the
    # export RayJob: its head alone; the pretokenize and batch RayJobs: head, workers.
    optional = 2 * env.inference.llm.enabled + 2 * (env.pretokenize is not None) + 2 * (env.batch_inference is not None)
    assert len(rendered) == 5 + optional
    assert {n for n in checked if n.startswith(("RayJob ", "RayService "))} == {f"{w} {p.name}" for w, p in rendered}
    for workload, pod in rendered:
        assert _scheduling(pod) == _scheduling(checked[f"{workload} {pod.name}"]), f"{workload} {pod.name}"


@pytest.mark.parametrize("name", ENVS)
def test_the_addon_pods_are_the_ones_the_constructs_write(name):
    from constructs import hyperpod_dependencies as deps

    from constructs.kuberay import kuberay_operator_values

    env = load_environment(name)
    checked = {p.name: p for p in placement.platform_pods(env, plan=registry.plan_of(env))}
    (agent,) = [m for m in deps.health_monitoring_agent_manifests(env) if m["kind"] == "DaemonSet"]
    written = {
        "health-monitoring-agent": pod_from_spec("x", agent["spec"]["template"]["spec"], daemonset=True),
        # The charts put these values into their pod templates (the charts' own tests check it).
        "nvidia-device-plugin": pod_from_spec(
            "x",
            {**deps.nvidia_device_plugin_values(env), "containers": [{"resources": deps.DEVICE_PLUGIN_RESOURCES}]},
            daemonset=True,
        ),
        "kuberay-operator": pod_from_spec(
            "x",
            {
                **kuberay_operator_values(env.eks),
                "containers": [{"resources": kuberay_operator_values(env.eks)["resources"]}],
            },
        ),
    }
    for pod_name, pod in written.items():
        c = checked[pod_name]
        assert (pod.cpu_millis, pod.memory_mib, dict(pod.node_selector), pod.affinity, set(pod.tolerations)) == (
            c.cpu_millis,
            c.memory_mib,
            dict(c.node_selector),
            c.affinity,
            set(c.tolerations),
        ), pod_name


@pytest.mark.parametrize("name", ENVS)
def test_the_secrets_store_daemonsets_run_wherever_ray_pods_run(name):
    """Every Ray pod mounts the token's CSI volume: the driver and the AWS provider must run on
    every pool a Ray pod selects (tainted HyperPod GPU groups included), with the tolerations
    the add-on is configured with, and their requests are counted there."""
    from config.facts import addons

    env = load_environment(name)
    assert env.eks.ray_token_auth
    config_values = addons.secrets_store_configuration()
    assert config_values["tolerations"] == config_values["secrets-store-csi-driver"]["linux"]["tolerations"]
    checked = {p.name: p for p in placement.platform_pods(env, plan=registry.plan_of(env))}
    stores = [checked[n] for n in addons.SECRETS_STORE_DAEMONSETS]
    assert [(p.cpu_millis, p.memory_mib) for p in stores] == [(70, 140), (50, 100)]
    ray_pods = [p for n, p in checked.items() if n.startswith(("RayJob ", "RayService "))]
    pools = pods.pools(env)
    ray_pools = {pool.name for pool in pools for p in ray_pods if selects(p, pool)}
    # prod's serving group carries a NoSchedule taint (config/prod.yaml): the case that matters.
    assert any(pool.taints for pool in pools if pool.name in ray_pools) == (name == "prod")
    for store in stores:
        assert store.daemonset
        assert ray_pools <= {pool.name for pool in pools if selects(store, pool)}, store.name
    # With the switch off they are not installed, so not counted.
    off = env.model_copy(update={"eks": env.eks.model_copy(update={"ray_token_auth": False})})
    assert not set(addons.SECRETS_STORE_DAEMONSETS) & {p.name for p in pods.daemonsets(off)}


@pytest.mark.parametrize("name", ENVS)
def test_every_environment_places_every_pod(name):
    env = load_environment(name)
    assert placement.check_against(env, plan=registry.plan_of(env)) == []
    results = placement.situations(env, plan=registry.plan_of(env))
    assert [r.situation for r in results][:2] == ["as configured", "RayService upgrade"]
    assert all(r.misfits == [] for r in results)


# --- The faults ------------------------------------------------------------------------------


def test_ray_heads_fit_a_dev_system_node():
    # Fault 18.2: heads asked for 4 CPU / 16Gi; an m7i.xlarge offers 3.92 CPU / 13.8 GiB.
    env = load_environment("dev")
    node = pods.system_pool(env.eks).allocatable
    heads = [p for w, p in _rendered(env) if p.name == "head"]
    assert len(heads) == 3  # training, generation, export
    for head in heads:
        assert head.cpu_millis <= node.cpu_millis and head.memory_mib <= node.memory_mib


def test_training_workers_ask_for_the_vcpus_threads_per_core_leaves():
    # Fault 18.3: dev's ml.g5.12xlarge with threads_per_core 1 has 24 vCPUs, not the catalog's 48.
    env = load_environment("dev")
    assert env.hyperpod.group("gpu-workers").threads_per_core == 1
    (worker,) = [p for w, p in _rendered(env) if w.startswith("RayJob") and p.name == "worker"]
    node = catalog.node_allocatable("ml.g5.12xlarge", threads_per_core=1)
    assert worker.cpu_millis <= node.cpu_millis < 24000


def test_p5_workers_ask_for_no_more_memory_than_the_node_offers():
    # Fault 18.4: 2016Gi asked of an ml.p5.48xlarge whose allocatable is about 1893 GiB.
    env = load_environment("prod")
    (worker,) = [p for w, p in _rendered(env) if w.startswith("RayJob train-") and p.name == "worker"]
    free_cpu, free_mem = pods.free_per_node(env, env.hyperpod.group("train-p5"))
    assert worker.memory_mib <= free_mem < catalog.node_allocatable("ml.p5.48xlarge").memory_mib
    assert worker.cpu_millis <= free_cpu
    assert (worker.gpus, worker.efa) == (8, 32)


def test_training_and_serving_must_fit_their_shared_group_at_once():
    # Fault 18.11c: dev's training filled gpu-workers, leaving no GPU for the generation service.
    errors = errors_of("dev", lambda d: d["training"].pop("num_workers"))
    assert errors[0] == (
        "placement (as configured): pod 'RayService hpray-dev-generate worker' does not fit node pool "
        "'gpu-workers' (2 x ml.g5.12xlarge, 0 of 2 placed): it requests cpu 3, memory 42.0Gi, "
        "nvidia.com/gpu 1; a node's allocatable is cpu 23.87, memory 169.3Gi, pods 737, nvidia.com/gpu 4, "
        "vpc.amazonaws.com/efa 1; the most left on one node is cpu 0.105, memory 0.5Gi, nvidia.com/gpu 0, "
        "pods 727"
    )


def test_a_node_replacement_must_leave_room_for_the_services_minimum():
    # Training on one whole node and serving on the other fit until HyperPod replaces the
    # serving node: the service's one replica then finds no GPU.
    errors = errors_of("dev", lambda d: d["training"].update(num_workers=4))
    assert len(errors) == 1
    assert errors[0].startswith(
        "placement (HyperPod replacing a node of gpu-workers): pod 'RayService hpray-dev-generate worker' "
        "does not fit node pool 'gpu-workers' (1 x ml.g5.12xlarge, 0 of 1 placed)"
    )


def test_a_rayservice_upgrade_must_fit_the_system_nodes():
    # Staging on two m7i.xlarge, without its data and batch jobs: the Ray heads (both RayJobs',
    # both services' twice) fit as configured, not during an upgrade of both services.
    def mutate(d):
        d["eks"]["system_nodes"] = {"instance_type": "m7i.xlarge", "desired_size": 2, "min_size": 2, "max_size": 4}
        d.pop("pretokenize", None)
        d.pop("batch_inference", None)

    errors = errors_of("staging", mutate)
    assert errors == [
        f"placement (RayService upgrade): pod 'RayJob {job} head' does not fit node pool 'system' "
        f"(2 x m7i.xlarge, 0 of 1 placed): it requests cpu 1, memory {memory}; a node's allocatable is cpu 3.92, "
        "memory 13.8Gi, pods 44; the most left on one node is cpu 0.675, memory 4.6Gi, pods 36"
        for job, memory in (("export-gpt-bytes", "8.0Gi"), ("train-gpt-bytes", "4.0Gi"))
    ]


def test_system_type_without_facts_is_a_clear_error():
    errors = errors_of("dev", lambda d: d["eks"]["system_nodes"].update(instance_type="c7g.xlarge"))
    assert errors == [
        "eks.system_nodes.instance_type: no hardware facts for instance type 'c7g.xlarge' in "
        "config/catalog.py; add its vCPUs, memory and ENI limits to config/catalog.py and "
        "config/eni_limits.json (the placement check needs them)"
    ]


def test_make_synth_prints_the_placement_table():
    out = subprocess.run(
        [sys.executable, "-m", "manifests", "check", "dev"], capture_output=True, text=True, check=True
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "Placement of dev: every pod on the node pool it selects (used / allocatable)"
    assert (
        "  [as configured] gpu-workers (2 x ml.g5.12xlarge): cpu 18.53 / 47.74, memory 169.6Gi / 338.7Gi, gpus 4 / 8"
        in lines
    )
    bad = subprocess.run([sys.executable, "-m", "manifests", "check", "nope"], capture_output=True, text=True)
    assert bad.returncode == 1 and "unknown environment 'nope'" in bad.stderr and bad.stdout == ""


def test_rendered_chart_pods_take_the_place_of_the_built_ones():
    # How the Helm chart renderer feeds its pods: a DaemonSet too large for a GPU node's left-over
    # CPU (prod's training workers take every CPU the DaemonSets leave) is reported by name.
    env = load_environment("prod")
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
        "tolerations": [{"operator": "Exists"}],
    }
    big = pod_from_spec("nvidia-device-plugin", spec, daemonset=True)
    problems = placement.check_against(env, [big], plan=registry.plan_of(env))
    assert problems[0].startswith(
        "placement (as configured): pod 'RayJob train-llama-7b-fineweb worker' does not fit node pool 'train-p5'"
    )
    assert (
        placement.check_against(
            env,
            [
                pod_from_spec(
                    "nvidia-device-plugin",
                    {
                        "containers": [{"resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}],
                        "tolerations": [{"operator": "Exists"}],
                    },
                    daemonset=True,
                )
            ],
            plan=registry.plan_of(env),
        )
        == []
    )


@pytest.mark.parametrize("name", ENVS)
def test_every_rendered_chart_pod_fits(name):
    # The KubeRay operator and the device plugins as the real `helm template` of the pinned charts
    # renders them (constructs/chart_pods.py), in place of the pods built from the values.
    from constructs.chart_pods import chart_pods, scheduling_pods

    env = load_environment(name)
    rendered = scheduling_pods(chart_pods(env))
    assert {"kuberay-operator", "nvidia-device-plugin", "aws-efa-k8s-device-plugin"} <= {p.name for p in rendered}
    assert placement.check_against(env, rendered, plan=registry.plan_of(env)) == []
    # Each rendered pod is placed where Kubernetes would run it: a Deployment's replicas, a
    # DaemonSet on every node it selects (the MPS control daemon on none: no node is labelled
    # nvidia.com/mps.capable).
    for result in placement.situations(env, rendered, plan=registry.plan_of(env)):
        placed: dict[str, int] = {}
        for pool in result.pools:
            for pod_name, count in result.pods_on(pool).items():
                placed[pod_name] = placed.get(pod_name, 0) + count
        for pod in rendered:
            expected = sum(p.nodes for p in result.pools if selects(pod, p)) if pod.daemonset else pod.replicas
            assert placed.get(pod.name, 0) == expected, (result.situation, pod.name)
        mps = next(p for p in rendered if p.name == "nvidia-device-plugin-mps-control-daemon")
        assert placed.get(mps.name, 0) == 0
        assert placed["nvidia-device-plugin"] == sum(p.nodes for p in result.pools if p.gpus)


@pytest.mark.parametrize(
    ("name", "worker_nodes", "cpu", "memory"),
    [("dev", 1, "1", "4Gi"), ("staging", 1, "1", "4Gi"), ("prod", 4, "4", "16Gi")],
)
def test_the_training_head_is_sized_for_its_worker_nodes(name, worker_nodes, cpu, memory):
    # Fault 27.9: prod's head (GCS, dashboard, job supervisor, driver and the Train controller
    # for 4 worker nodes holding 32 Ray Train workers) asked 1 CPU / 4 GiB like a small cluster's.
    env = load_environment(name)
    job = render_training(env)
    assert len(job["spec"]["rayClusterSpec"]["workerGroupSpecs"]) == 1
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["maxReplicas"] == worker_nodes
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert head == {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}
    # The placement check places the same head (test_the_checked_pods_are_the_rendered_pods).
    (checked,) = [
        p
        for p in placement.platform_pods(env, plan=registry.plan_of(env))
        if p.name == f"RayJob train-{env.training.run_name} head"
    ]
    assert (checked.cpu_millis, checked.memory_mib) == (int(cpu) * 1000, int(memory[:-2]) * 1024)


def test_the_training_head_rule():
    """One CPU and 4 GiB per worker node, from one up to Ray's large-cluster head (8 CPUs, 32 GB)."""
    assert [(h.cpus, h.memory_gib) for h in map(pods.training_head, [0, 1, 2, 4, 7, 8, 9, 500])] == [
        (1, 4),
        (1, 4),
        (2, 8),
        (4, 16),
        (7, 28),
        (8, 32),
        (8, 32),
        (8, 32),
    ]


def test_a_training_head_too_big_for_the_system_nodes_is_a_placement_error():
    # Prod on 8 p5 nodes: Ray's large-cluster head (8 CPUs, 32 GiB) needs more than an
    # m7i.2xlarge system node offers.
    errors = errors_of("prod", lambda d: d["hyperpod"]["instance_groups"][0].update(instance_count=8))
    assert errors[0] == (
        "placement (as configured): pod 'RayJob train-llama-7b-fineweb head' does not fit node pool 'system' "
        "(3 x m7i.2xlarge, 0 of 1 placed): it requests cpu 8, memory 32.0Gi; a node's allocatable is cpu 7.91, "
        "memory 28.6Gi, pods 44; the most left on one node is cpu 7.665, memory 28.4Gi, pods 38"
    )
    # Larger system nodes hold it.
    from config import parse_environment
    from tests.config.config_data import env_data

    data = env_data("prod")
    data["hyperpod"]["instance_groups"][0]["instance_count"] = 8
    data["eks"]["system_nodes"]["instance_type"] = "m7i.4xlarge"
    env = parse_environment(data, source="prod.yaml")
    assert placement.check_against(env, plan=registry.plan_of(env)) == []
