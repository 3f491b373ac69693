# The two commands a new user runs are `make demo` and `make test` (see README.md).
# Both bootstrap what they need: a virtualenv with the Python packages (the product installed in
# place, and the test bench's command line as .venv/bin/harvester-quota-bench), and the local
# cluster binaries (etcd, Kubernetes, kwok, KubeVirt's virt-controller of every supported version,
# Harvester's own controllers of every supported version, helm) built once per machine from Go
# modules and cached under ~/.cache/harvester-quota (or $HARVESTER_QUOTA_CLUSTER_BIN if you have
# them).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH  := $(BIN)/harvester-quota-bench
PYTEST_ARGS ?=

.PHONY: all demo test lint typecheck unit integration test-scenarios bench scale cluster-bin \
        cluster-up cluster-down venv clean manifest node-bin test-realnode

all: test

$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# setuptools prints a page-long notice on every editable install; it says nothing about us.
	PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e '.[test,bench]'
	@# The test bench is not part of the distribution (pkg/testbench; see setup.py): its command
	@# line is `python -m harvester_quota.testbench`, named harvester-quota-bench in the venv.
	@printf '#!/bin/sh\nexec "%s/python" -m harvester_quota.testbench "$$@"\n' "$(abspath $(BIN))" > $(BENCH)
	@chmod +x $(BENCH)
	@touch $@

venv: $(STAMP)

cluster-bin: $(STAMP)
	$(BENCH) cluster build --kubevirt-version all --harvester all

demo: $(STAMP) cluster-bin
	$(BENCH) demo

lint: $(STAMP)
	$(BIN)/ruff check pkg tests bench
	$(BIN)/ruff format --check pkg tests bench

typecheck: $(STAMP)
	$(BIN)/mypy pkg

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: $(STAMP) cluster-bin
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

# Everything CI checks: style, types, then the whole suite (unit, integration on the local
# cluster, the real node, scenarios) in one pytest run so that its closing line counts every test.
# The real node's tests (tests/realnode) need root: node-bin builds what they need as root and
# says why not otherwise, and then pytest lists them as skipped with that reason.
test: $(STAMP) cluster-bin node-bin lint typecheck
	HARVESTER_QUOTA_REAL_NODE=1 $(BIN)/pytest tests --durations=40 $(PYTEST_ARGS)

bench: $(STAMP) cluster-bin
	$(BIN)/python -m bench

# The scale run on its own cluster (bench/SCALE.md): SIZE=small (default), full, or tiny.
SIZE ?= small
scale: $(STAMP) cluster-bin
	$(BENCH) scale --size $(SIZE) --report reports/scale/$(SIZE) $(SCALE_ARGS)

# The real node beside the kwok nodes (docs/quickstart.md, "Try it on the local cluster first"):
# as root, installs the Debian packages containerd, runc, containernetworking-plugins, iptables,
# conntrack, podman and debootstrap, builds kubelet and kube-proxy like the control plane, and
# builds the product image from deploy/Containerfile (each cached: once per machine, the image
# again when the product's sources change). Not root: builds nothing and says why. Not part of
# cluster-bin: only `make test`, test-realnode and `cluster up --real-node` need it.
node-bin: $(STAMP) cluster-bin
	$(BENCH) cluster build-node

# The image and the chart run for real (tests/realnode, which `make test` runs too) alone.
test-realnode: $(STAMP) node-bin
	HARVESTER_QUOTA_REAL_NODE=1 $(BIN)/pytest tests/realnode -v $(PYTEST_ARGS)

cluster-up: $(STAMP) cluster-bin
	$(BENCH) cluster up

cluster-down: $(STAMP)
	$(BENCH) cluster down

# deploy/harvester-quota.yaml is the Helm chart rendered with its defaults; a test keeps them equal.
manifest: $(STAMP) cluster-bin
	$(BIN)/python -m harvester_quota.testbench.localcluster.chart > deploy/harvester-quota.yaml

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
