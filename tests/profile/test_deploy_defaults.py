"""The vLLM-Omni settings profile/deploy.py copies equal the installed deploy/qwen3_tts.yaml.

omni-cpu writes complete deploy configs (no `base_config`), so the values it does
not plan are copies of vLLM-Omni's own. A version bump that changes one of them
fails here instead of drifting silently. The file is read from the installed
vllm_omni package without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from omni_cpu.plan import costs
from omni_cpu.profile.deploy import CONNECTOR, CONNECTOR_DEFAULTS, STAGE_DEFAULTS

_SPEC = importlib.util.find_spec("vllm_omni")
pytestmark = pytest.mark.skipif(
    _SPEC is None, reason="vllm-omni is not installed (scripts/install-runtime.sh)"
)


@pytest.fixture(scope="module")
def upstream() -> dict[str, Any]:
    assert _SPEC is not None and _SPEC.submodule_search_locations
    folder = Path(next(iter(_SPEC.submodule_search_locations)))
    return yaml.safe_load((folder / "deploy" / "qwen3_tts.yaml").read_text())


def test_connector_defaults_are_vllm_omnis(upstream):
    extra = upstream["connectors"][CONNECTOR]["extra"]
    assert {key: extra[key] for key in CONNECTOR_DEFAULTS} == CONNECTOR_DEFAULTS


@pytest.mark.parametrize("stage_id", sorted(STAGE_DEFAULTS))
def test_stage_defaults_are_vllm_omnis(upstream, stage_id):
    (stage,) = [s for s in upstream["stages"] if s["stage_id"] == stage_id]
    copied = STAGE_DEFAULTS[stage_id]
    assert {key: stage[key] for key in copied} == copied


def test_the_planned_left_context_is_the_decoders_window(upstream):
    extra = upstream["connectors"][CONNECTOR]["extra"]
    assert extra["codec_left_context_frames"] == costs.CODEC_LEFT_CONTEXT_FRAMES
