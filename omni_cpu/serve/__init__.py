"""`omni-cpu serve`: vLLM-Omni's own OpenAI-compatible speech server, sized and bound by a profile.

`serve_plan` turns a profile into the exact command, environment and deploy config;
`supervisor` runs it (drain on SIGTERM, no orphan stage processes); `admission`
is the middleware the server loads to bound load; `frame_limit` is the opt-in
patch of vLLM-Omni's speech server it loads; `server_main` is the server process.
Importing this package is cheap (no torch, no vLLM).
"""

from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.serve_plan import ServePlan, build_serve_plan

__all__ = ["AdmissionLimits", "ServePlan", "build_serve_plan"]
