"""Profiles a test spoils on purpose: a planned profile with one stage's field changed."""

from __future__ import annotations

import dataclasses
from typing import Any

from omni_cpu.profile import Profile


def with_talker(profile: Profile, **changes: Any) -> Profile:
    """`profile` with its first replica's talker (stage 0) given `changes`; the rest as it was."""
    replica = profile.replicas[0]
    talker = dataclasses.replace(replica.stages[0], **changes)
    replica = dataclasses.replace(replica, stages=(talker, *replica.stages[1:]))
    return dataclasses.replace(profile, replicas=(replica, *profile.replicas[1:]))
