# Two entry points a new user needs: `make render` and `make test`.
# Both create the virtualenv on first use from pyproject.toml (the one dependency list).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
STACK  ?= lab-roce
# CRDs of the pinned upstream releases, when this checkout sits beside them.
CRD_DIR ?= $(wildcard ../shared/crds)
# pytest-xdist workers, one per core (`make unit WORKERS=0` runs in this one process, e.g.
# for pdb). worksteal: an idle worker takes tests from a busy one, so a long file (the
# runbook commands, the node checks) is shared; it beat loadfile by 10 % on two cores.
WORKERS ?= auto
XDIST   := -n $(WORKERS) --dist worksteal

.PHONY: venv render runbooks test lint typecheck unit bench conformance clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpufabric needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

render: $(STAMP)
	$(BIN)/gpufabric render --stack $(STACK) --out out/$(STACK) $(if $(CRD_DIR),--crd-dir $(CRD_DIR))

# docs/runbooks/<stack>.md for every example stack (a test keeps them in sync).
runbooks: $(STAMP)
	@for f in stacks/Pulumi.*.yaml; do s=$${f#stacks/Pulumi.}; s=$${s%.yaml}; \
		$(BIN)/gpufabric runbook --stack $$s --out docs/runbooks/$$s.md || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy gpufabric components

# Everything but tests/conformance (pyproject's addopts deselect it); a test that runs past
# pytest-timeout's limit fails with its stack.
unit: $(STAMP)
	$(BIN)/pytest $(XDIST)

test: lint typecheck unit

# The real helm and kubectl over the pinned charts and upstream manifests (tests/conformance);
# skipped without them. GPUFABRIC_SHARED, GPUFABRIC_CHARTS and PATH say where they are. Not
# part of `make test`; CI (.ci/run) runs it after.
conformance: $(STAMP)
	$(BIN)/pytest $(XDIST) -m conformance tests/conformance

# Figures printed, never asserted: render against `helm template` of the same charts (paired
# runs; skipped without helm and the charts), the render's phases, the benchmarks below.
# The sweep simulation runs N = 16 to 1,024 here (a few minutes); `--full` adds 4,096.
bench: $(STAMP)
	$(BIN)/python benchmarks/render_vs_helm.py
	$(BIN)/python benchmarks/render_stress.py
	$(BIN)/python benchmarks/verify_fleet.py --hosts 1024,10000
	$(BIN)/python benchmarks/sweep_sim.py --sizes 16,64,256,1024 --fleets 2
	$(BIN)/python benchmarks/discover_fleet.py --nodes 10000

clean:
	rm -rf out .mypy_cache .ruff_cache .pytest_cache
