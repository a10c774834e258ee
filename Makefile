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

APT_PACKAGES := shellcheck bats graphviz

.PHONY: deps synth gates review pipeline docs test lint-shell lint-docker bats clean lock rehearse-train rehearse-serve rehearse

$(STAMPS)/venv: requirements.lock
	@mkdir -p $(STAMPS)
	@echo "==> Python packages (requirements.lock) into $(VENV)"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements.lock
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
	@if ! command -v shellcheck >/dev/null || ! command -v bats >/dev/null || ! command -v dot >/dev/null; then \
	  echo "==> Debian packages: $(APT_PACKAGES)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi
	touch $@

deps: $(STAMPS)/venv $(STAMPS)/checkov $(STAMPS)/node $(STAMPS)/apt

## synth: the default environment (ENV=dev) with every gate and the review outputs.
## COMPARE=PATH diffs the review against a previous cloud assembly (copy it out of cdk.out
## first); COMPARE=last keeps the previous cdk.out as .cdk.out.previous and diffs against it.
COMPARE ?=
REVIEW_PREVIOUS := .cdk.out.previous
synth: deps
	@if [ "$(COMPARE)" = last ] && [ -d cdk.out ]; then rm -rf $(REVIEW_PREVIOUS) && mv cdk.out $(REVIEW_PREVIOUS); fi
	rm -rf cdk.out
	@echo "==> cdk synth -c env=$(ENV) (cdk-nag AwsSolutions + NIST 800-53 R5 run inside synth)"
	cdk synth --quiet -c env=$(ENV)
	$(MAKE) --no-print-directory gates
	$(MAKE) --no-print-directory review

## review: report (Markdown + HTML) and architecture diagram (PNG + SVG) under cdk.out/review.
review:
	@echo "==> review report and architecture diagram"
	$(VENV)/bin/python -m review cdk.out $(if $(filter last,$(COMPARE)),--compare $(REVIEW_PREVIOUS),$(if $(COMPARE),--compare $(COMPARE),))

gates:
	@echo "==> cfn-lint"
	$(VENV)/bin/cfn-lint cdk.out/*.template.json
	@echo "==> checkov (cloudformation, offline)"
	$(CHECKOV_VENV)/bin/checkov --directory cdk.out --framework cloudformation --quiet --compact --skip-download
	@echo "==> all gates passed for cdk.out"

## pipeline: synth of the delivery pipeline (config/pipeline.yaml) with every environment as a
## Stage, and the same gates and review over every template of every Stage.
pipeline: deps
	rm -rf cdk.out
	@echo "==> cdk synth -c pipeline=true (cdk-nag runs inside synth, Stages included)"
	cdk synth --quiet -c pipeline=true
	@echo "==> cfn-lint (pipeline and every Stage)"
	$(VENV)/bin/cfn-lint cdk.out/*.template.json cdk.out/assembly-*/*.template.json
	@echo "==> checkov (cloudformation, offline; every Stage)"
	$(CHECKOV_VENV)/bin/checkov --directory cdk.out --framework cloudformation --quiet --compact --skip-download
	$(MAKE) --no-print-directory review

## docs: regenerate the README's architecture diagram (docs/architecture-dev.*) from a synth.
docs: synth
	mkdir -p docs
	cp cdk.out/review/architecture-$(ENV).dot cdk.out/review/architecture-$(ENV).svg cdk.out/review/architecture-$(ENV).png docs/

## test: the whole suite (.ci/run calls this).
test: deps
	$(VENV)/bin/python -m pytest
	$(MAKE) --no-print-directory lint-shell lint-docker bats

lint-shell:
	@echo "==> shellcheck"
	shellcheck -x $$(git ls-files '*.sh' '*.bash' .ci/run)

## lint-docker: hadolint (pinned in requirements.lock) on the workloads image's Dockerfile.
lint-docker:
	@echo "==> hadolint"
	$(VENV)/bin/hadolint workloads/Dockerfile

bats:
	@if ls tests/lifecycle_scripts/*.bats >/dev/null 2>&1; then echo "==> bats"; bats tests/lifecycle_scripts; fi

## lock: re-resolve requirements*.in into the lock files (needs the registries).
lock:
	rm -rf /tmp/lockvenv && $(PYTHON) -m venv /tmp/lockvenv && /tmp/lockvenv/bin/pip install -q -r requirements.in && /tmp/lockvenv/bin/pip freeze > requirements.lock
	rm -rf /tmp/lockvenv && $(PYTHON) -m venv /tmp/lockvenv && /tmp/lockvenv/bin/pip install -q -r requirements-checkov.in && /tmp/lockvenv/bin/pip freeze > requirements-checkov.lock

## rehearse-train: local Ray cluster (head + 2 worker nodes, GCS 6379, dashboard 8265), the
## training job through the Jobs API, one worker node killed mid-run; prints a summary and
## writes out/rehearse-train/loss.png.
rehearse-train: deps
	$(VENV)/bin/python -m workloads.training.rehearsal

clean:
	rm -rf cdk.out $(STAMPS) $(VENV) $(CHECKOV_VENV) node_modules

## rehearse-serve: the inference app on a local head + 2 worker Ray cluster, serving the newest
## checkpoint a training rehearsal wrote under out/ (or STORAGE=DIR [RUN=NAME]), under a bounded
## load test with one replica killed; summary, out/rehearse-serve/latency.png.
rehearse-serve: deps
	$(VENV)/bin/python -m workloads.inference.rehearse $(if $(STORAGE),--storage $(STORAGE)) $(if $(RUN),--run $(RUN))

## rehearse: the training rehearsal, then serving what it trained.
rehearse: deps
	$(MAKE) --no-print-directory rehearse-train
	$(MAKE) --no-print-directory rehearse-serve
