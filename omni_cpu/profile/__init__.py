"""Deploy profiles: the schema, commented YAML, strict loading, vLLM-Omni deploy configs."""

from omni_cpu.profile.deploy import deploy_config_dict, stage_env
from omni_cpu.profile.model import Profile, Replica, StagePlan, Streaming
from omni_cpu.profile.reader import load_profile, parse_profile
from omni_cpu.profile.writer import dump_profile, save_profile

__all__ = [
    "Profile",
    "Replica",
    "StagePlan",
    "Streaming",
    "deploy_config_dict",
    "dump_profile",
    "load_profile",
    "parse_profile",
    "save_profile",
    "stage_env",
]
