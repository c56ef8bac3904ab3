# envlock: newcomer commands. Each target sets itself up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup test lint bench demo clean test-deps mutate test-torch

$(BIN)/envlock: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

setup: $(BIN)/envlock

# The SSH tests run real sshd (Debian's openssh-server) in mount namespaces;
# the corpus builds PyYAML from its sdist against the system's libyaml; the
# shared-store tests serve a store with nginx (docs/store.md); the reflink
# tests make and loop-mount an XFS image (xfsprogs).
test-deps:
	@{ test -x /usr/sbin/sshd && test -f /usr/include/yaml.h && test -x /usr/sbin/nginx && test -x /usr/sbin/mkfs.xfs; } || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server \
	    libyaml-dev nginx-light xfsprogs >/dev/null; }

test: setup test-deps
	$(BIN)/python -m pytest -q -n 2 tests

# envlock build of a torch.utils.cpp_extension CUDAExtension against the local torch
# 2.14.1 index (tests/test_build_torch.py): minutes, so not part of `make test`.
test-torch: setup
	MAX_JOBS=2 $(BIN)/python -m pytest -q -p no:xdist -m torch_build -s tests/test_build_torch.py

lint: setup
	$(BIN)/ruff check builder tests bench demo mutation
	$(BIN)/ruff format --check builder tests bench demo mutation
	$(BIN)/mypy
	$(BIN)/mypy --strict tests

# Mutation testing of the integrity code (docs/testing.md): about 15 minutes
# on 2 cores. mutmut maps files to modules only for ./, src/ and source/
# layouts, so it runs in .mutate/ with src -> builder and tests -> tests.
mutate: setup
	rm -rf .mutate && mkdir .mutate
	cp mutation/pyproject.toml .mutate/pyproject.toml
	ln -s ../builder .mutate/src && ln -s ../tests .mutate/tests
	cd .mutate && ../$(BIN)/mutmut run --max-children 2 > mutmut-run.log 2>&1 || { tail -c 2000 mutmut-run.log; exit 1; }
	cd .mutate && ../$(BIN)/python ../mutation/score.py

bench: setup
	$(BIN)/python bench/run.py

demo: setup
	$(BIN)/python demo/run.py

clean:
	rm -rf $(VENV) demo/work bench/work .mutate
