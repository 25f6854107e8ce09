# The two commands of the quick start are `make run` and `make test`; each does its own set-up.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test check lint typecheck unit fast build-image build-bot-image build-azurite-image build-postgres-image engine compose venv bench clean azurite kube postgres

run: build-image
	$(BIN)/cellmate start

test: check build-image build-bot-image build-azurite-image build-postgres-image azurite postgres compose
	bash scripts/run-tests.sh $(PYTEST_ARGS)

check: lint typecheck

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The layer without Docker or a cluster: logic, the fake sandbox (and the runner contract on
# it), the stand-in servers, the Docker proxy's policy (and Azurite for the cases that keep
# workspaces in Blob Storage), the bot's stores on SQLite and on a throwaway PostgreSQL, and
# the egress proxy (root: its tests make network namespaces).
# tests/storage, also Docker-free, is Azurite's own layer: `make test` runs it.
fast: venv azurite postgres
	$(BIN)/pytest -n 2 -m "not docker and not kubernetes" tests/fast tests/unit tests/proxy tests/egress tests/contract $(PYTEST_ARGS)

build-image: venv engine
	bash scripts/build-image.sh

# The images docker-compose.yml runs: the bot (and its Docker proxy), and Azurite from the
# npm package for the dev profile. Built on the host, like the sandbox image.
build-bot-image: build-image
	bash scripts/build-image.sh --bot

build-azurite-image: build-image azurite
	bash scripts/build-image.sh --azurite

# PostgreSQL 15 from Debian's packages (downloaded on the host) on the same base, for the
# Kubernetes HA overlay's database (deploy/kubernetes/ha/postgres).
build-postgres-image: venv engine
	bash scripts/build-image.sh --postgres

engine:
	bash scripts/ensure-docker.sh

# A single-node Kubernetes (../shared/k8s-kit, or K8S_KIT) with the sandbox image loaded,
# for the Kubernetes tests: `export CELLMATE_TEST_KUBECONFIG=$$(make -s kube | tail -1)`.
kube: build-image
	bash scripts/ensure-kubernetes.sh

# PostgreSQL's server binaries, for the tests' throwaway servers (the tests start and stop them).
postgres:
	bash scripts/ensure-postgres.sh >/dev/null

# Compose, to run docker-compose.yml in the tests.
compose:
	bash scripts/ensure-compose.sh >/dev/null

venv: $(VENV)/.installed

# The egress proxy's mitmproxy (the `egress` extra) pins h11<=0.14 and the OpenAI client needs
# h11>=0.16: the proxy runs in its own process and image, but its tests share this
# environment, with h11 0.16 (whose readers mitmproxy's HTTP/1 layer uses unchanged).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(BIN)/pip install --quiet --disable-pip-version-check 'mitmproxy==11.0.2'
	$(BIN)/pip install --quiet --disable-pip-version-check 'h11==0.16.0'
	touch $@

bench: build-image
	$(BIN)/python -m bench executor $(BENCH_ARGS)

clean:
	rm -rf $(VENV) out .tools .mypy_cache .ruff_cache .pytest_cache environments/jupyter/wheels build

# Azurite, Microsoft's Blob Storage emulator, for the storage tests (the tests start it).
azurite: .tools/node_modules/.bin/azurite-blob

# The registry sometimes lists a dependency's newest version a moment before it serves it
# ("No matching version found"): the install is tried three times.
.tools/node_modules/.bin/azurite-blob:
	for try in 1 2 3; do \
	  npm install --prefix .tools --no-audit --no-fund --loglevel=error azurite@3.37.0 && exit 0; \
	  echo "[cellmate] npm install of Azurite failed (try $$try of 3)" >&2; sleep 10; \
	done; exit 1
