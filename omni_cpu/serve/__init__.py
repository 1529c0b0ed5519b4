"""`omni-cpu serve`: vLLM-Omni's own OpenAI-compatible speech server, sized and bound by a profile.

`plan` turns a profile into the exact command, environment and deploy config;
`supervisor` runs it (drain on SIGTERM, no orphan stage processes); `admission`
is the middleware the server loads to bound load. Importing this package is cheap
(no torch, no vLLM).
"""

from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.plan import ServePlan, build_serve_plan

__all__ = ["AdmissionLimits", "ServePlan", "build_serve_plan"]
