"""The local Ray node offers the CPUs the Serve config's replicas may scale to."""

from __future__ import annotations

from serve_app.application import deployment_options, load_config, max_cpus


def test_max_cpus_counts_every_replica_a_deployment_may_scale_to() -> None:
    options = {
        "A": {"autoscaling_config": {"max_replicas": 3}, "ray_actor_options": {"num_cpus": 0.5}},
        "B": {"num_replicas": 2, "ray_actor_options": {"num_cpus": 2}},
        "C": {},  # Serve's defaults: one replica, one CPU
    }
    assert max_cpus(options) == 1.5 + 4 + 1


def test_the_shipped_config_fits_what_the_launcher_offers() -> None:
    """More than the old fixed 4 logical CPUs once the Retriever autoscales too: the
    launcher now offers max(cores, 4, this), so no replica of the config stays pending."""
    assert max_cpus(deployment_options(load_config())) > 4
