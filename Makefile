# Quick start: `make synth` then `make test`. Every install step is here; nothing is global.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := synth

ENV ?= dev
PYTHON ?= python3
VENV := .venv
CHECKOV_VENV := .venv-checkov
STAMPS := .stamps
# The pinned Node 22 from package.json comes first: jsii and the CDK CLI run on it (Node 20,
# the machine's, is end-of-life and makes jsii print a warning banner on every run).
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export BC_SKIP_MAPPING := TRUE
export CHECKOV_RUN_SCA_PACKAGE_SCAN_V2 := false
export RAY_USAGE_STATS_ENABLED := 0
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
# jsii names the Node.js majors whose end-of-life banner is silenced (the machine runs Node 20).
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# The shared test folder (real charts and CRDs at the pinned digests) when one lies beside the
# checkout: `make review` first copies it into the artifact cache, digest-checked
# (tests/shared_artifacts.py), and renders the Helm releases offline; without it they are fetched.
HYPERPOD_RAY_SHARED ?= $(wildcard $(abspath $(CURDIR)/../shared))

APT_PACKAGES := shellcheck bats graphviz prometheus prometheus-alertmanager redis-server openssl gnupg zsh fish

TOOLING_DIRS := artifacts config sizing workloads manifests constructs stacks ops review docgen bench rigs

.PHONY: deps deps-synth lint synth gates review pipeline docs docs-site test test-static lint-shell lint-docker bats clean lock rehearse-train rehearse-serve rehearse-serve-ha rehearse

# Two installs into one venv: requirements-synth.lock (the CDK app, cdk-nag, cfn-lint, the review:
# all `make synth` needs) and requirements.lock (its superset: Ray, torch, test tools, linters) for
# `make test` and the rehearsals. The synth lock is closed (no-deps install). The full one resolves
# torch's own platform dependencies (CUDA libraries from the public index on Linux x86_64, none for
# the CPU build). TORCH_INDEX=https://download.pytorch.org/whl/cpu picks the CPU build instead:
# 2.13.0+cpu matches the lock's ==2.13.0 (PEP 440).
TORCH_INDEX ?=
PIP_INSTALL := $(VENV)/bin/pip install --quiet --disable-pip-version-check
# Synth-only installs skip byte-compiling aws-cdk-lib's ~250 service modules (most never imported;
# Python caches the ones a synth uses): about 40 % of the venv.
$(STAMPS)/venv-synth: requirements-synth.lock
	@mkdir -p $(STAMPS)
	@echo "==> Python packages for synth (requirements-synth.lock) into $(VENV)"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --no-compile --no-deps -r requirements-synth.lock
	touch $@

$(STAMPS)/venv: requirements.lock
	@mkdir -p $(STAMPS)
	@echo "==> Python packages for tests and workloads (requirements.lock) into $(VENV)"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -r requirements.lock
	@# The synth install skipped byte-compiling, and this one leaves the packages it already has
	@# (sympy, pydantic, PyYAML: what every Ray worker imports with torch and the config models).
	@# Compiled here, once: with PYTHONDONTWRITEBYTECODE=1 every process would compile them again.
	@# One file of torch's tests is Python 3.12 syntax.
	@echo "==> Byte-compiling the venv's packages"
	$(VENV)/bin/python -m compileall -q -j 0 -x '/torch/testing/_internal/py312_intrinsics\.py$$' \
	  "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null
	touch $@

$(STAMPS)/checkov: requirements-checkov.lock
	@mkdir -p $(STAMPS)
	@echo "==> checkov (requirements-checkov.lock) into $(CHECKOV_VENV)"
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements-checkov.lock
	touch $@

$(STAMPS)/node: package.json package-lock.json
	@mkdir -p $(STAMPS)
	@echo "==> CDK CLI and Node 22 (package-lock.json) via npm ci"
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(STAMPS)/apt:
	@mkdir -p $(STAMPS)
	@if ! command -v shellcheck >/dev/null || ! command -v bats >/dev/null || ! command -v dot >/dev/null || ! command -v prometheus >/dev/null || ! command -v amtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null || ! command -v redis-server >/dev/null || ! command -v openssl >/dev/null || ! command -v gpg >/dev/null || ! command -v zsh >/dev/null || ! command -v fish >/dev/null; then \
	  echo "==> Debian packages: $(APT_PACKAGES)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi
	touch $@

deps-synth: $(STAMPS)/venv-synth $(STAMPS)/checkov $(STAMPS)/node $(STAMPS)/apt
deps: deps-synth $(STAMPS)/venv

## synth: the default environment (ENV=dev) with every gate and the review outputs.
## COMPARE=PATH diffs the review against a previous cloud assembly (copy it out of cdk.out
## first); COMPARE=last keeps the previous cdk.out as .cdk.out.previous and diffs against it.
COMPARE ?=
REVIEW_PREVIOUS := .cdk.out.previous
synth: deps-synth
	@if [ "$(COMPARE)" = last ] && [ -d cdk.out ]; then rm -rf $(REVIEW_PREVIOUS) && mv cdk.out $(REVIEW_PREVIOUS); fi
	rm -rf cdk.out
	@echo "==> cdk synth -c env=$(ENV) (cdk-nag AwsSolutions + NIST 800-53 R5 run inside synth)"
	cdk synth --quiet -c env=$(ENV)
	@echo "==> placement (sizing/placement.py: every pod fits its node pool; synth fails otherwise)"
	$(VENV)/bin/python -m manifests check $(ENV)
	$(MAKE) --no-print-directory gates
	$(MAKE) --no-print-directory review

## review: report (Markdown + HTML) and architecture diagram (PNG + SVG) under cdk.out/review.
review:
	@echo "==> review report and architecture diagram"
	$(if $(HYPERPOD_RAY_SHARED),$(VENV)/bin/python -m tests.shared_artifacts $(HYPERPOD_RAY_SHARED))
	$(VENV)/bin/python -m review cdk.out $(if $(filter last,$(COMPARE)),--compare $(REVIEW_PREVIOUS),$(if $(COMPARE),--compare $(COMPARE),))

gates:
	@echo "==> cfn-lint"
	$(VENV)/bin/cfn-lint cdk.out/*.template.json
	@echo "==> checkov (cloudformation, offline)"
	$(CHECKOV_VENV)/bin/checkov --directory cdk.out --framework cloudformation --quiet --compact --skip-download
	@echo "==> all gates passed for cdk.out"

## pipeline: synth of the delivery pipeline (config/pipeline.yaml) with every environment as a
## Stage, and the same gates and review over every template of every Stage.
pipeline: deps-synth
	rm -rf cdk.out
	@echo "==> cdk synth -c pipeline=true (cdk-nag runs inside synth, Stages included)"
	cdk synth --quiet -c pipeline=true
	@echo "==> cfn-lint (pipeline and every Stage)"
	$(VENV)/bin/cfn-lint cdk.out/*.template.json cdk.out/assembly-*/*.template.json
	@echo "==> checkov (cloudformation, offline; every Stage)"
	$(CHECKOV_VENV)/bin/checkov --directory cdk.out --framework cloudformation --quiet --compact --skip-download
	$(MAKE) --no-print-directory review

## docs: regenerate the architecture diagram (docs/architecture-dev.*) from a synth.
docs: synth
	mkdir -p docs
	cp cdk.out/review/architecture-$(ENV).dot cdk.out/review/architecture-$(ENV).svg cdk.out/review/architecture-$(ENV).png docs/

## docs-site: the documentation site (mkdocs.yml) into site/, strictly: a broken link or anchor
## fails. The configuration reference in it is generated: `python -m docgen.reference`.
docs-site: $(STAMPS)/venv
	@echo "==> mkdocs build --strict (site/)"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

## test: the whole suite (.ci/run calls this). pytest runs on every core (PYTEST_WORKERS, pytest-xdist;
## the tests that start a local Ray cluster share one worker, tests/conftest.py) while the static
## checks (lint, lint-shell, bats, docs-site) run beside it into $(TEST_STATIC_LOG), printed once
## pytest ends; either failing fails `make test`. PYTEST_WORKERS=0 runs pytest in one process.
PYTEST_WORKERS ?= auto
PYTEST_ARGS ?=
TEST_STATIC_LOG := $(STAMPS)/test-static.log
# Through a variable: `make -n test` prints this recipe instead of running it (a recipe line that
# names $(MAKE) itself runs even under -n).
TEST_STATIC := $(MAKE) --no-print-directory test-static
test: deps
	@$(TEST_STATIC) >$(TEST_STATIC_LOG) 2>&1 & static=$$!; \
	trap 'kill $$static 2>/dev/null' INT TERM; \
	pytest_rc=0; \
	$(VENV)/bin/python -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS) || pytest_rc=$$?; \
	static_rc=0; wait $$static || static_rc=$$?; \
	echo "==> static checks (lint, lint-shell, bats, docs-site), run beside pytest:"; cat $(TEST_STATIC_LOG); \
	echo "==> pytest: $$( [ $$pytest_rc = 0 ] && echo passed || echo "FAILED (exit $$pytest_rc)" ); static checks: $$( [ $$static_rc = 0 ] && echo passed || echo "FAILED (exit $$static_rc)" )"; \
	[ $$pytest_rc = 0 ] && [ $$static_rc = 0 ]

## test-static: what `make test` checks besides pytest.
test-static: $(STAMPS)/venv
	$(MAKE) --no-print-directory lint lint-shell bats docs-site

## lint: ruff (lint and format check) over the tree, mypy over the Python packages (pyproject.toml).
lint:
	@echo "==> ruff check"
	$(VENV)/bin/ruff check .
	@echo "==> ruff format --check"
	$(VENV)/bin/ruff format --check .
	@echo "==> mypy ($(TOOLING_DIRS))"
	$(VENV)/bin/mypy $(TOOLING_DIRS)

lint-shell:
	@echo "==> shellcheck"
	shellcheck -x $$(git ls-files '*.sh' '*.bash' .ci/run)

## lint-docker: hadolint (pinned in requirements.lock) on the Dockerfiles of the CDK image assets.
lint-docker:
	@echo "==> hadolint"
	$(VENV)/bin/hadolint workloads/Dockerfile images/nvidia-device-plugin/Dockerfile

bats:
	@if ls tests/lifecycle_scripts/*.bats >/dev/null 2>&1; then echo "==> bats"; bats tests/lifecycle_scripts; fi

## lock: re-resolve requirements*.in into the lock files (needs the registries). The synth lock is
## resolved against the full one, so the two pin the same versions. A local build label (+cpu) is
## dropped: ==2.13.0 matches the CPU build here and the public build elsewhere.
LOCKVENV := /tmp/lockvenv
FREEZE := $(LOCKVENV)/bin/pip freeze --all --exclude pip | sed -E 's/^([^=]+==[^+]+)\+.*$$/\1/'
lock:
	rm -rf $(LOCKVENV) && $(PYTHON) -m venv $(LOCKVENV) && $(LOCKVENV)/bin/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -r requirements.in && $(FREEZE) > requirements.lock
	rm -rf $(LOCKVENV) && $(PYTHON) -m venv $(LOCKVENV) && $(LOCKVENV)/bin/pip install -q -r requirements-synth.in -c requirements.lock && $(FREEZE) | grep -v '^setuptools==' > requirements-synth.lock
	rm -rf $(LOCKVENV) && $(PYTHON) -m venv $(LOCKVENV) && $(LOCKVENV)/bin/pip install -q -r requirements-checkov.in && $(LOCKVENV)/bin/pip freeze > requirements-checkov.lock

## rehearse-train: local Ray cluster (head + 2 worker nodes, GCS 6379, dashboard 8265), the
## training job through the Jobs API, one worker node killed mid-run: continuing on fewer workers
## (shrink) and on a replacement (same-size); a summary per path, out/rehearse-train/*/loss.png.
rehearse-train: deps
	$(VENV)/bin/python -m rigs.rehearse_train

clean:
	rm -rf cdk.out site $(STAMPS) $(VENV) $(CHECKOV_VENV) node_modules

## rehearse-serve: the inference app on a local head + 2 worker Ray cluster, serving the newest
## checkpoint a training rehearsal wrote under out/ (or STORAGE=DIR [RUN=NAME]; or EXPORT=DIR, a
## Hugging Face export of one, through /v1/completions with text prompts), under a bounded
## load test with one replica killed; summary, out/rehearse-serve/latency.png.
rehearse-serve: deps
	$(VENV)/bin/python -m rigs.rehearse_serve $(if $(STORAGE),--storage $(STORAGE)) $(if $(RUN),--run $(RUN)) $(if $(EXPORT),--export $(EXPORT))

## rehearse-serve-ha: GCS fault tolerance: the inference app on a local head (GCS in a private
## redis-server) + 1 worker node under load; every process of the head SIGKILLed, a new head
## started against the same Redis; summary, out/rehearse-serve-ha/latency.png.
rehearse-serve-ha: deps
	$(VENV)/bin/python -m rigs.rehearse_serve_ha $(if $(STORAGE),--storage $(STORAGE)) $(if $(RUN),--run $(RUN))

## rehearse: the training rehearsal, then serving what it trained.
rehearse: deps
	$(MAKE) --no-print-directory rehearse-train
	$(MAKE) --no-print-directory rehearse-serve
