"""The Containerfile and `omni-cpu export k8s` agree: image, command, user, port, health.

No container engine runs here, so the recipe is parsed (instructions, JSON forms,
line continuations) and compared with what the export writes by default.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from urllib.parse import urlparse

import pytest
import yaml

from omni_cpu import __version__
from tests.helpers.cli import REPO, omni_cpu

RECIPE = REPO / "Containerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; comments dropped, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        found.append((keyword.upper(), arguments.strip()))
    return found


def exec_form(arguments: str) -> list[str]:
    """A JSON-array (exec form) argument list; the recipe uses no shell form here."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(word, str) for word in value)
    return value


def labels(recipe: list[tuple[str, str]]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for keyword, arguments in recipe:
        if keyword == "LABEL":
            for word in shlex.split(arguments):
                key, _, value = word.partition("=")
                pairs[key] = value
    return pairs


def last(recipe: list[tuple[str, str]], keyword: str) -> str:
    values = [arguments for word, arguments in recipe if word == keyword]
    assert values, f"the Containerfile has no {keyword}"
    return values[-1]


@pytest.fixture(scope="module")
def recipe() -> list[tuple[str, str]]:
    return instructions(RECIPE.read_text())


@pytest.fixture(scope="module")
def container(profile_file) -> dict:
    done = omni_cpu("export", "k8s", "--profile", str(profile_file[0]))  # every default
    assert done.returncode == 0, done.stderr
    deployment = next(
        doc for doc in yaml.safe_load_all(done.stdout) if doc and doc["kind"] == "Deployment"
    )
    return deployment["spec"]["template"]["spec"]["containers"][0]


def test_the_export_runs_the_images_entrypoint_as_its_command_does(recipe, container):
    # The image alone plans its cgroup (`auto`); the pod runs the mounted profile instead.
    entrypoint, command = exec_form(last(recipe, "ENTRYPOINT")), exec_form(last(recipe, "CMD"))
    assert container["command"] == entrypoint + command[:1]
    for option in ("--host", "--port"):
        assert (
            container["args"][container["args"].index(option) + 1]
            == (command[command.index(option) + 1])
        )


def test_the_exports_default_image_is_the_one_the_recipe_builds(recipe, container):
    named = labels(recipe)
    assert named["org.opencontainers.image.version"] == __version__
    assert container["image"] == f"{named['org.opencontainers.image.title']}:{__version__}"
    help_text = omni_cpu("export", "k8s", "--help", env={**os.environ, "COLUMNS": "200"}).stdout
    assert f"podman build -t {container['image']} -f Containerfile ." in help_text


def test_the_image_runs_as_the_non_root_user_the_pod_asks_for(recipe, container):
    user = last(recipe, "USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert container["securityContext"]["runAsUser"] == int(user)
    assert container["securityContext"]["runAsNonRoot"] is True


def test_port_and_health_check_agree_with_the_pods_probes(recipe, container):
    argv = exec_form(last(recipe, "CMD"))
    port = int(argv[argv.index("--port") + 1])
    assert last(recipe, "EXPOSE").split("/")[0] == str(port)
    assert container["ports"][0]["containerPort"] == port
    health = last(recipe, "HEALTHCHECK")
    command = exec_form(health[health.index("CMD ") + 4 :])
    url = urlparse(next(word for part in command for word in shlex.split(part.replace("'", " "))
                        if word.startswith("http://")))  # fmt: skip
    assert (url.hostname, url.port) == ("127.0.0.1", port)
    assert url.path == container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert "--start-period" in health  # engines load for minutes before the first 200


def test_the_runtime_is_installed_by_the_script_ci_runs(recipe):
    commands = [
        shlex.split(step)
        for keyword, arguments in recipe
        if keyword == "RUN"
        for step in arguments.split("&&")
    ]
    installs = [c for c in commands if "scripts/install-runtime.sh" in c]
    assert installs and installs[0][installs[0].index("scripts/install-runtime.sh") - 1] == "bash"
    # CI runs `make test` -> scripts/setup.sh, which calls the same script.
    text = (REPO / "scripts/setup.sh").read_text().replace("\\\n", " ")  # continued lines
    setup = [shlex.split(line, comments=True) for line in text.splitlines()]
    assert any(words[:2] == ["bash", "scripts/install-runtime.sh"] for words in setup if words)
    copied = {
        source
        for keyword, arguments in recipe
        if keyword == "COPY"
        for source in shlex.split(arguments)[1:-1]  # after --chown, before the destination
    }
    # The script, the one it sources, what it installs, and omni-cpu (it imports the pins).
    script = (REPO / "scripts/install-runtime.sh").read_text().splitlines()
    sourced = {line.split()[1] for line in script if line.startswith("source ")}
    assert sourced == {"scripts/torch-index.sh"}
    assert {"requirements", "scripts/install-runtime.sh", "omni_cpu", *sourced} <= copied


def test_the_base_is_a_build_argument_defaulting_to_the_public_python_image(recipe):
    keywords = [keyword for keyword, _ in recipe]
    base_arg = next(arguments for keyword, arguments in recipe if keyword == "ARG")
    assert keywords.index("ARG") < keywords.index("FROM")  # an ARG before FROM sets the base
    name, _, default = base_arg.partition("=")
    assert last(recipe, "FROM") == "${" + name + "}"
    assert default.startswith("docker.io/library/python:3.11")


def test_make_image_tags_the_image_the_export_names(container):
    tag = subprocess.run(
        ["bash", "scripts/image.sh", "tag"], capture_output=True, text=True, cwd=REPO
    )
    assert tag.returncode == 0, tag.stderr
    assert tag.stdout.strip() == container["image"]
    steps = {"image": ["build"], "image-test": ["build", "test"], "image-base": ["base"]}
    for target, wanted in steps.items():
        # --no-print-directory: under `make test` (CI) this make is a nested one, which
        # would print the folder it enters.
        planned = subprocess.run(
            ["make", "--no-print-directory", "-n", target], capture_output=True, text=True, cwd=REPO
        )
        assert planned.stdout.splitlines() == [f"bash scripts/image.sh {step}" for step in wanted]


@pytest.mark.parametrize("step", ["build", "test", "base"])
def test_without_a_container_engine_the_image_targets_say_so_in_one_line(step, tmp_path):
    # A PATH with the shell's tools but no podman, buildah or debootstrap.
    for tool in ("bash", "sed", "dirname", "realpath", "mktemp", "rm"):
        found = shutil.which(tool)
        assert found, tool
        (tmp_path / tool).symlink_to(found)
    done = subprocess.run(
        [str(tmp_path / "bash"), "scripts/image.sh", step],
        capture_output=True, text=True, cwd=REPO, env={"PATH": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "not installed" in line and "apt-get install" in line


def _default_command(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    """The image's ENTRYPOINT + CMD with no model mounted, an empty hub cache, no proxy."""
    recipe = instructions(RECIPE.read_text())
    argv = [*exec_form(last(recipe, "ENTRYPOINT")), *exec_form(last(recipe, "CMD"))]
    assert argv[0] == "omni-cpu"
    quiet = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return omni_cpu(
        *argv[1:], env={**quiet, "HF_HUB_CACHE": str(tmp_path / "hub"), **env}, timeout_s=60
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE keeps the hub out"),
        # A port nothing listens on: refused at once, as a network without the hub would be.
        ({"HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9"}, "the hub is unreachable"),
    ],
    ids=["offline", "hub-unreachable"],
)
def test_the_default_command_without_a_model_or_network_says_so_in_one_line(tmp_path, env, says):
    done = _default_command(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert says in lines[0] and "checkpoint folder (mounted, in a container)" in lines[0]
