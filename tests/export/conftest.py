"""A deploy profile of a two-node machine, for the exports' tests."""

from __future__ import annotations

import pytest

from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.profile import save_profile
from tests.helpers.machines import machine


@pytest.fixture(scope="session")
def profile_file(tmp_path_factory):
    big = machine({0: list(range(12)), 1: list(range(12, 24))}, smt=2)
    profile = plan_profile(big, footprint_for_model("0.6b"), PlanOptions(reserve=1))
    path = tmp_path_factory.mktemp("k8s") / "deploy.yaml"
    save_profile(profile, path)
    return path, profile
