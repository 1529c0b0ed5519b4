"""`omni-cpu serve`: vLLM-Omni's own OpenAI-compatible speech server, sized and bound by a profile.

`command` turns a profile into the exact command, environment and deploy config;
`supervisor` runs it (drain on SIGTERM, no orphan stage processes, `voices` preloaded);
`admission` is the middleware the server loads: one admission for every door `routes`
names, built of `asgi` pieces, `body` (read within bounds), `checks` (what a request's
fields must be), `stream_guard` (the WebSocket), `long_input` (long text in sentences)
and `idle` (connections that send nothing); `frame_limit` is the opt-in patch of
vLLM-Omni's speech server it loads; `server` is the server process.
Importing this package is cheap (no torch, no vLLM).
"""

from omni_cpu.serve.command import ServeOptions, ServePlan, build_serve_plan
from omni_cpu.serve.knobs import AdmissionLimits

__all__ = ["AdmissionLimits", "ServeOptions", "ServePlan", "build_serve_plan"]
