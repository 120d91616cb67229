# sweeperd: `make demo` and `make test` set up everything they need on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := redis-server redis-tools prometheus systemd gcc libc6-dev python3-venv  # redis-server --sentinel runs the Sentinels
MISSING := $(strip $(foreach tool,redis-server redis-cli promtool prometheus systemd-analyze gcc,\
	$(if $(shell command -v $(tool) 2>/dev/null),,$(tool))))
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMAGE_CACHE ?= /var/cache/sweeperd-images
IMAGE_PACKAGES := buildah debootstrap iproute2
IMAGE_TOOLS_MISSING := $(strip $(foreach tool,buildah debootstrap ip,\
	$(if $(shell command -v $(tool) 2>/dev/null),,$(tool))))

.PHONY: all system module venv demo test pytest lint format bench clean
.PHONY: image-system image image-test image-clean systemd-system systemd-test
all: test

system:  ## Debian packages: installed only when a tool is missing (needs root)
ifneq ($(MISSING),)
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_PACKAGES)
endif

module:  ## the reference module, module/emq_stalled.so
	$(MAKE) -C module

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: system module venv  ## a throwaway server, stalled leases, the daemon sweeping them
	$(VENV)/bin/sweeperd demo

test: system module venv lint pytest  ## everything CI runs

# Six workers on two cores (the scenarios mostly wait on servers): 6:40 with two, 5:01 with four,
# 4:20 with six; a file's tests on one worker, so a module's topology is started once.
# The suite runs on Redis 7.0 and Valkey 9.1; SWEEPERD_TEST_SERVERS=redis (or valkey) runs one.
pytest:  ## the suite, with line and branch coverage (subprocesses included) printed at the end
	$(PY) -m pytest -n 6 --dist loadfile --cov --cov-report=term

lint:  ## ruff, mypy --strict, and the wings' import contracts (import-linter)
	$(VENV)/bin/ruff check sweeperd tests bench
	$(VENV)/bin/ruff format --check sweeperd tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

format:
	$(VENV)/bin/ruff format sweeperd tests bench
	$(VENV)/bin/ruff check --fix sweeperd tests bench

bench: system module venv  ## the verb, the executors, the fan-out, a mass stall, the epoch reads, the recovery latency, 100,000 queues (and three replicas sharing them), the audit, the live fleet and what tracking costs an idle server, measured
	$(PY) bench/bench_verb.py
	$(PY) bench/bench_executors.py
	$(PY) bench/bench_fanout.py
	$(PY) bench/bench_mass.py
	$(PY) bench/bench_epochs.py --runs 2
	$(PY) bench/bench_scale.py
	$(PY) bench/bench_replicas.py
	$(PY) bench/bench_latency.py
	$(PY) bench/bench_audit.py
	$(PY) bench/bench_live.py
	$(PY) bench/bench_tracking.py

clean:
	$(MAKE) -C module clean
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

image-system:  ## buildah, debootstrap and ip: installed only when one is missing (needs root)
ifneq ($(IMAGE_TOOLS_MISSING),)
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(IMAGE_PACKAGES)
endif

image: image-system  ## sweeperd:$(VERSION), sweeperd-redis-module:$(VERSION): buildah, local stand-in bases
	deploy/images/build.sh $(VERSION) $(IMAGE_CACHE)

image-test: image venv  ## the images run by buildah, in a network namespace of their own
	$(VENV)/bin/ruff check deploy/images
	$(VENV)/bin/ruff format --check deploy/images
	$(VENV)/bin/mypy deploy/images
	$(VENV)/bin/hadolint --failure-threshold info deploy/images/*.Containerfile
	unshare --net sh -c 'ip link set lo up && exec $(PY) -m pytest deploy/images'

# The unit under a real systemd: PID 1 of a bookworm booted in namespaces of its own, over the
# rootfs `make image` caches (debootstrap'd once) with systemd, Redis and Python added (cached too).
SYSTEMD_TOOLS_MISSING := $(strip $(foreach tool,debootstrap unshare nsenter pivot_root,\
	$(if $(shell command -v $(tool) 2>/dev/null),,$(tool))))

systemd-system:  ## debootstrap (and util-linux): installed only when one is missing (needs root)
ifneq ($(SYSTEMD_TOOLS_MISSING),)
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap util-linux
endif

systemd-test: system systemd-system module venv  ## start, credential, watchdog, reload, stop under systemd
	$(VENV)/bin/ruff check deploy/systemd
	$(VENV)/bin/ruff format --check deploy/systemd
	$(VENV)/bin/mypy deploy/systemd
	rootfs=$$(deploy/systemd/rootfs.sh $(IMAGE_CACHE)) && SWEEPERD_SYSTEMD_ROOTFS=$$rootfs \
		$(PY) -m pytest -p no:xdist -p no:cacheprovider -v -s --durations=0 deploy/systemd

image-clean:  ## the images, the stand-ins and the cached rootfs
	-buildah --storage-driver vfs rmi sweeperd:$(VERSION) sweeperd-redis-module:$(VERSION) \
		python:3.11-slim-bookworm gcc:12-bookworm redis:7.2-bookworm sweeperd-standin/bookworm:minbase
	rm -rf $(IMAGE_CACHE)
