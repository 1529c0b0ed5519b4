"""The container image the repo's Containerfile builds, as the exports name and run it.

Light on purpose (the CLI imports it to render help): tests/export/test_image.py
parses the Containerfile and checks that its entrypoint, user and port are these.
"""

from __future__ import annotations

from omni_cpu import __version__

# podman build -t omni-cpu:<version> -f Containerfile .
IMAGE = f"omni-cpu:{__version__}"
# The image's ENTRYPOINT + the first word of its CMD.
SERVE_COMMAND = ("omni-cpu", "serve")
# The image's non-root user (USER in the Containerfile).
IMAGE_USER_ID = 1000
# Its home (useradd --create-home): ~/.cache and ~/.config of vLLM, torch, vLLM-Omni.
IMAGE_HOME = "/home/omni"
# `serve --port` in the image's CMD, EXPOSE and its HEALTHCHECK.
DEFAULT_PORT = 8000
HEALTH_PATH = "/health"
