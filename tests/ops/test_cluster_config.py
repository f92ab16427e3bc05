"""cluster.yaml and the Serve config agree: every replica the config may start fits a node."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from serve_app.application import DEFAULT_CONFIG, deployment_options, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster() -> dict:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


@pytest.fixture(scope="module")
def serve_config() -> dict:
    return load_config(DEFAULT_CONFIG)


def max_replicas(opts: dict) -> int:
    auto = opts.get("autoscaling_config")
    if auto:
        return int(auto.get("max_replicas", 1))
    n = opts.get("num_replicas", 1)
    return 1 if n in (None, "auto") else int(n)


def needs(opts: dict) -> tuple[float, float]:
    actor = opts.get("ray_actor_options") or {}
    return float(actor.get("num_cpus", 1)), float(actor.get("num_gpus", 0))


def test_cluster_yaml_is_a_valid_launcher_config(cluster):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(dict(cluster)))  # Ray's own schema check
    assert cluster["provider"]["type"] == "aws"
    types = cluster["available_node_types"]
    assert cluster["head_node_type"] in types
    assert any(t["resources"].get("GPU", 0) >= 1 for t in types.values()), "no GPU worker type"
    assert any(t["resources"].get("CPU", 0) >= 4 for t in types.values()), "no CPU worker type"
    setup = " ".join(cluster["setup_commands"])
    assert "pip install" in setup and "[gpu]" not in setup  # no CPU+GPU onnxruntime mix
    gpu_types = [t for t in types.values() if t["resources"].get("GPU", 0) >= 1]
    for node_type in gpu_types:  # GPU workers swap to onnxruntime-gpu alone, verified
        assert any("gpu_install.sh" in c for c in node_type["worker_setup_commands"])
    assert any("ray start --head" in c for c in cluster["head_start_ray_commands"])
    assert any("--address=$RAY_HEAD_IP" in c for c in cluster["worker_start_ray_commands"])


def test_serve_config_is_valid_and_complete(serve_config):
    ServeDeploySchema.model_validate(serve_config)
    opts = deployment_options(serve_config)
    assert {"Ingress", "Embedder", "Retriever"} <= set(opts)
    for name, o in opts.items():
        assert "max_ongoing_requests" in o, name
        assert "num_replicas" in o or "autoscaling_config" in o, name
        assert "ray_actor_options" in o, name
    assert opts["Ingress"]["graceful_shutdown_timeout_s"] > 0
    assert "user_config" in opts["Embedder"]


def test_every_replica_fits_some_node_type_and_the_cluster_holds_them_all(cluster, serve_config):
    types = {
        name: t
        for name, t in cluster["available_node_types"].items()
        if name != cluster["head_node_type"] or t.get("max_workers", 0) > 0
    }
    total_cpu = sum(t["resources"].get("CPU", 0) * t["max_workers"] for t in types.values())
    total_gpu = sum(t["resources"].get("GPU", 0) * t["max_workers"] for t in types.values())
    want_cpu = want_gpu = 0.0
    for name, o in deployment_options(serve_config).items():
        cpu, gpu = needs(o)
        fits = [
            t
            for t, spec in types.items()
            if spec["resources"].get("CPU", 0) >= cpu and spec["resources"].get("GPU", 0) >= gpu
        ]
        assert fits, f"{name} asks {cpu} CPU / {gpu} GPU per replica; no node type has it"
        want_cpu += cpu * max_replicas(o)
        want_gpu += gpu * max_replicas(o)
    assert want_cpu <= total_cpu and want_gpu <= total_gpu
    # The documented GPU variant of the Embedder (num_gpus: 1) fits the GPU worker type,
    # with all GPU workers holding one replica each.
    gpu_types = [t for t in types.values() if t["resources"].get("GPU", 0) >= 1]
    assert sum(math.floor(t["resources"]["GPU"]) * t["max_workers"] for t in gpu_types) >= 1
