"""Fixtures shared by the integration tests."""

import pytest


@pytest.fixture(scope="session")
def cluster():
    """One real local Ray (2 CPUs, no dashboard) for every Ray test of the session; a Ray that
    was already running is used and left running."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
