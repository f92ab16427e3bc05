"""deployments/kuberay/rayservice.yaml runs the packaged Serve application on KubeRay.

The manifest is generated (``python -m deployments.kuberay.generate``); these checks keep
it in step with serve_app/serve_config.yaml and keep its promises: secrets from a
Secret, the dashboard inside the cluster, every replica placeable on a worker group.
"""

from __future__ import annotations

import copy
import math

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from deployments.kuberay import generate
from serve_app.application import DEFAULT_CONFIG, deployment_options, load_config
from tests.ops.test_cluster_config import max_replicas, needs


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(generate.OUT.read_text())


@pytest.fixture(scope="module")
def serve_v2(manifest) -> dict:
    return yaml.safe_load(manifest["spec"]["serveConfigV2"])


def containers(manifest: dict) -> dict[str, dict]:
    cluster = manifest["spec"]["rayClusterConfig"]
    groups = {"head": cluster["headGroupSpec"]}
    groups |= {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    return {name: g["template"]["spec"]["containers"][0] for name, g in groups.items()}


def test_the_file_is_what_the_generator_writes():
    assert generate.SERVE_CONFIG == DEFAULT_CONFIG
    assert generate.OUT.read_text() == generate.render(), (
        "run `python -m deployments.kuberay.generate` after changing serve_app/serve_config.yaml"
    )


def test_serve_config_v2_is_the_packaged_application(serve_v2):
    ServeDeploySchema.model_validate(serve_v2)
    packaged = load_config(DEFAULT_CONFIG)
    assert serve_v2["applications"][0]["import_path"] == "serve_app.application:app"
    # Exactly the cluster changes the generator names, nothing else.
    assert serve_v2["http_options"]["host"] == "0.0.0.0"
    embedder = deployment_options(serve_v2)["Embedder"]["ray_actor_options"]
    assert embedder["num_gpus"] == 1
    # The GPU Embedder embeds search queries too (issue 23): every replica of the app,
    # the Ingress and Retriever on the CPU group included, gets the setting.
    app_env = serve_v2["applications"][0]["runtime_env"]["env_vars"]
    assert app_env["MEMSERVE_QUERY_EMBED"] == "embedder"
    undone = copy.deepcopy(serve_v2)
    undone["http_options"]["host"] = packaged["http_options"]["host"]
    for app in undone["applications"]:
        app["runtime_env"]["env_vars"].pop("MEMSERVE_QUERY_EMBED")
        if not app["runtime_env"]["env_vars"]:
            del app["runtime_env"]["env_vars"]
        if not app["runtime_env"]:
            del app["runtime_env"]
    for d in undone["applications"][0]["deployments"]:
        if d["name"] == "Embedder":
            d["ray_actor_options"] = deployment_options(packaged)["Embedder"]["ray_actor_options"]
    assert undone == packaged


def test_database_url_and_keys_come_from_a_secret(manifest):
    for group, c in containers(manifest).items():
        env = {e["name"]: e for e in c["env"]}
        for name in ("MEMSERVE_DATABASE_URL", "MEMSERVE_BOOTSTRAP_KEY", "MEMSERVE_ADMIN_KEY"):
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == generate.SECRET, (group, name)
        secrets = [e for n, e in env.items() if n.endswith(("_KEY", "_URL"))]
        assert all("value" not in e for e in secrets), group  # no literal secret in the file


def test_the_dashboard_is_not_exposed_outside_the_cluster(manifest):
    spec = manifest["spec"]
    head = spec["rayClusterConfig"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP" and head["enableIngress"] is False
    assert spec["serveService"]["spec"]["type"] == "ClusterIP"
    assert [p["port"] for p in spec["serveService"]["spec"]["ports"]] == [8000]
    exposed = [v for k, v in walk(manifest) if k in ("type", "serviceType")]
    assert not {"LoadBalancer", "NodePort"} & set(exposed)
    assert not [v for k, v in walk(manifest) if k in ("nodePort", "hostPort") or v == 8265]


def walk(node: object):
    """Every (key, value) pair in a YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def _cpus(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_every_replica_fits_a_worker_group(manifest, serve_v2):
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # no replicas there
    groups = {}
    for g in cluster["workerGroupSpecs"]:
        limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
        groups[g["groupName"]] = (
            _cpus(limits["cpu"]),
            float(limits.get("nvidia.com/gpu", 0)),
            g["maxReplicas"],
        )
    assert set(groups) == {"cpu", "gpu"} and groups["gpu"][1] >= 1 and groups["cpu"][1] == 0
    want_cpu = want_gpu = 0.0
    for name, o in deployment_options(serve_v2).items():
        cpu, gpu = needs(o)
        fits = [g for g, (c, gp, _) in groups.items() if cpu <= c and gpu <= gp]
        assert fits, f"{name} ({cpu} CPU, {gpu} GPU) fits no worker group"
        want_cpu += cpu * max_replicas(o)
        want_gpu += gpu * max_replicas(o)
    assert want_cpu <= sum(c * n for c, _, n in groups.values())
    assert want_gpu <= sum(gp * n for _, gp, n in groups.values())
    # The replica that asks for a GPU embeds on it.
    gpu_env = {e["name"]: e.get("value") for e in containers(manifest)["gpu"]["env"]}
    assert gpu_env["MEMSERVE_EMBED_DEVICE"] == "cuda"
    assert math.isclose(needs(deployment_options(serve_v2)["Embedder"])[1], 1)
