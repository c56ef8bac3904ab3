# envlock: newcomer commands. Each target sets itself up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup test lint bench demo clean test-deps

$(BIN)/envlock: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

setup: $(BIN)/envlock

# The SSH tests run real sshd (Debian's openssh-server) in mount namespaces;
# the corpus builds PyYAML from its sdist against the system's libyaml.
test-deps:
	@{ test -x /usr/sbin/sshd && test -f /usr/include/yaml.h; } || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server libyaml-dev >/dev/null; }

test: setup test-deps
	$(BIN)/python -m pytest -q -n 2 tests

lint: setup
	$(BIN)/ruff check builder tests bench demo
	$(BIN)/ruff format --check builder tests bench demo
	$(BIN)/mypy

bench: setup
	$(BIN)/python bench/run.py

demo: setup
	$(BIN)/python demo/run.py

clean:
	rm -rf $(VENV) demo/work bench/work
