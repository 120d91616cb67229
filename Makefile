# sweeperd: `make demo` and `make test` set up everything they need on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := redis-server prometheus systemd
MISSING := $(strip $(foreach tool,redis-server promtool prometheus systemd-analyze,\
	$(if $(shell command -v $(tool) 2>/dev/null),,$(tool))))

.PHONY: all system module venv demo test pytest lint format bench clean
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

pytest:  ## the suite, with line and branch coverage (subprocesses included) printed at the end
	$(PY) -m pytest --cov --cov-report=term

lint:
	$(VENV)/bin/ruff check sweeperd tests bench
	$(VENV)/bin/ruff format --check sweeperd tests bench
	$(VENV)/bin/mypy

format:
	$(VENV)/bin/ruff format sweeperd tests bench
	$(VENV)/bin/ruff check --fix sweeperd tests bench

bench: system module venv  ## the verb, the executors, the fan-out and a mass stall, measured
	$(PY) bench/bench_verb.py
	$(PY) bench/bench_executors.py
	$(PY) bench/bench_fanout.py
	$(PY) bench/bench_mass.py

clean:
	$(MAKE) -C module clean
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
