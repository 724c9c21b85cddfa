# The two commands a newcomer needs: `make local` and `make test`. Everything else is for developers.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PY = $(shell bash -c 'source scripts/common.sh && trainer_python')
export PYTHONPATH := $(CURDIR)
PYTEST_ARGS ?=
# make test's pytest-xdist workers (tests/conftest.py says what runs together and what first)
TEST_WORKERS ?= 2
ARGS ?=

.PHONY: setup local test test-fast lint format bench learn view plots reap smoke-sandbox smoke-repo clean-envs

setup:  ## install whatever is missing (system packages, environments, tiny models, warm start); a no-op when done
	@bash scripts/setup.sh

local: setup  ## run the main job on the embedded default (CPU, tiny model, real sandboxes)
	@bash scripts/run_local.sh $(ARGS)

test: setup  ## the whole suite, slow real-component tests included
	@$(PY) -m ruff check .
	@$(PY) -m pytest -n $(TEST_WORKERS) --durations=30 $(PYTEST_ARGS)

test-fast: setup  ## unit tests only (no vLLM server, no containers)
	@$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

lint: setup
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .

format: setup
	@$(PY) -m ruff check --fix .
	@$(PY) -m ruff format .

bench: setup  ## benchmarks: each prints ratios against a reference measured in the same run (make learn apart)
	@for b in $(filter-out bench/learn.py,$(wildcard bench/*.py)); do echo "== $$b"; $(PY) $$b; done

learn: setup  ## GRPO on click-test at 400x300 against its warm start, held-out success per step (bench/learn.py; ~50 min on 2 cores)
	@$(PY) bench/learn.py $(ARGS)

RUN ?= outputs/cua-local
view: setup  ## trajectory viewer over a run's or an evaluation's outputs (RUN=outputs/<experiment>; PORT=8765)
	@$(PY) -m cua_agent.viewer $(RUN) $(if $(PORT),--port $(PORT),)

plots: setup  ## a run's training plots as SVG files and plots.html under RUN/plots (RUN=outputs/<experiment>)
	@$(PY) -m cua_agent.viewer.plots $(RUN)

reap:  ## remove sandboxes left behind by dead runs (all of them with ALL=1; every sandbox.docker_hosts endpoint of CONFIG=x.yaml; every sandbox machine of the Ray cluster RAY=HEAD:6379, or of CONFIG's with sandbox.backend ray)
	@$(PY) scripts/reap_sandboxes.py $(if $(ALL),--all,) $(if $(CONFIG),--config $(CONFIG),) $(if $(RAY),--ray $(RAY),)

smoke-sandbox: setup  ## the scripted oracle on every task through the docker (podman) backend
	@$(PY) scripts/smoke_sandbox.py --backend docker

smoke-repo: setup  ## the rule agent on every sample repository task (outputs/repo-smoke/report.json)
	@$(PY) -m sandbox.repo.rule_agent

clean-envs:  ## remove the cached environments and models (the next setup rebuilds them)
	@bash -c 'source scripts/common.sh && rm -rf "$$CUA_HOME/envs" "$$CUA_HOME/models"'
