# The two commands of the README's quick start are `make demo` and `make test`.
.PHONY: setup kernels demo test test-arm test-platform test-fast lint profiles bench-micro clean image image-base image-test

VENV := .venv
BIN := $(VENV)/bin
TINY := checkpoints/tiny

setup:
	bash scripts/setup.sh

# Rebuild the kernels ahead after editing omni_cpu/kernels/csrc (`make setup` builds them
# too): this CPU's module; ALL=1 every variant of this architecture, as a wheel's build does.
kernels:
	$(BIN)/python -m omni_cpu.kernels.build $(if $(ALL),--all)

# Set up, make a tiny random-weight checkpoint, plan this machine, stream speech:
# the audio starts arriving (time to first audio) long before the text is done.
demo: setup
	$(BIN)/omni-cpu probe
	[ -f $(TINY)/config.json ] || $(BIN)/omni-cpu make-checkpoint --size tiny --out $(TINY)
	mkdir -p out
	$(BIN)/omni-cpu run --model $(TINY) --deploy-profile auto --stream \
		--text "Hello from omni-cpu." --speaker ryan --max-frames 50 --out out/hello.wav

# Set up, then run the whole test suite (what CI runs): the engine-starting tests one at a
# time on one worker, everything else beside them on a second (tests/conftest.py).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup
	$(MAKE) test-platform

# The Arm kernels alone: each Arm build cross-compiled and run under qemu-aarch64 on three CPU
# models, every kernel against the x86 tests' references (also part of `make test`).
test-arm: setup
	$(BIN)/python -m pytest -q tests/kernels/test_arm_kernels.py

# The CPU platform's and runner's checks, by the command the vLLM CPU backend's docs give,
# run as written with the venv first on PATH.
test-platform:
	PATH=$(CURDIR)/$(BIN):$$PATH VLLM_TARGET_DEVICE=cpu pytest tests/platforms/test_cpu_platform.py tests/worker/test_cpu_ar_model_runner.py -m "core_model and cpu"

# The pure floors' tests (hardware facts, plan, profile, the import rules): no engine
# starts. About 80 s (1,205 tests) on a busy 2-core Xeon guest; every test
# without an engine ("not e2e and not cpu", ~2,000) took minutes (issue 47).
FAST_TESTS := tests/hardware tests/plan tests/profile tests/test_cpulist.py \
	tests/test_architecture.py tests/test_errors.py
test-fast:
	$(BIN)/python -m pytest -q -m "not e2e and not cpu" $(FAST_TESTS)

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Regenerate the example profiles and docs/planning.md's capacity table from real machines'
# dumps (tests/data/sysroots), and docs/configuration.md's table of user knobs from
# omni_cpu/envs.py (tests fail when stale); this tree's code, not the editable install's.
profiles:
	PYTHONPATH=$(CURDIR) $(BIN)/python scripts/make_example_profiles.py

# Stage micro-benchmarks on the 0.6B shapes (about 3 minutes; writes
# benchmarks/stage-micro-results.json). Needs checkpoints/0.6b.
bench-micro: setup
	[ -f checkpoints/0.6b/config.json ] || $(BIN)/omni-cpu make-checkpoint --size 0.6b --out checkpoints/0.6b
	$(BIN)/python benchmarks/stage_micro.py

# The serving image (Containerfile), tagged as `omni-cpu export k8s` names it; outside
# `make test` (the build downloads the runtime for minutes). Settings, all optional:
# BASE_IMAGE, WHEELS (a wheel folder pip also looks in), PIP_INDEX, CA_BUNDLE,
# OMNI_CPU_TORCH_INDEX, BUILD_FLAGS, CONTAINERS_CONF (scripts/image.sh says each).
# `make image-base` makes a base from Debian's packages for machines without a registry.
image:
	bash scripts/image.sh build

image-base:
	bash scripts/image.sh base

# Build, start the image with a tiny checkpoint on 127.0.0.1, send one speech request, stop.
image-test: image
	bash scripts/image.sh test

clean:
	rm -rf out .pytest_cache
