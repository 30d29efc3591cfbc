# replay-kernel: every target bootstraps its own virtual environment from the
# package registries, so a fresh machine with nothing but python3 can run them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv test lint typecheck unit demo fuzz clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,examples,scale]'
	touch $(STAMP)

venv: $(STAMP)  ## create .venv and install the package with its extras (dev, examples, scale)

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check kernel tests examples bench

typecheck: $(STAMP)  ## mypy --strict over kernel/ and tests/
	$(BIN)/mypy --strict kernel tests

unit: $(STAMP)  ## pytest with the bounded Hypothesis profile
	$(BIN)/pytest -q -p no:cacheprovider

test: lint typecheck unit  ## everything CI runs

demo: $(STAMP)  ## the reference scenario and the main job (kernel run), end to end
	$(BIN)/python examples/build_example_chain.py --check
	$(BIN)/kernel digest examples/replay/chain.json
	mkdir -p out
	# Each example holds one tampered attempt on purpose: the verdict is
	# integrity (exit 3, README "Exit codes"); any other exit fails the demo.
	$(BIN)/kernel replay examples/replay/bundle.json --out out/outcomes.jsonl; \
	  test $$? -eq 3
	@echo "outcomes (JSON Lines, run order): out/outcomes.jsonl"
	$(BIN)/python examples/build_e2e_bundle.py --check
	rm -rf runs/e2e  # kernel run refuses a non-empty work directory: start fresh
	$(BIN)/kernel run examples/e2e/bundle.json --work-dir runs/e2e --out out/e2e-outcomes.jsonl; \
	  test $$? -eq 3
	@echo "main job outcomes (JSON Lines, run order): out/e2e-outcomes.jsonl; certification runs: runs/e2e/"

fuzz: $(STAMP)  ## long property runs (Hypothesis profile "deep")
	HYPOTHESIS_PROFILE=deep $(BIN)/pytest -q -p no:cacheprovider

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis

# External verifier protocol examples (seed 003): real producer/checker pairs.
# The manifest pins absolute paths and hashes of this machine, so it is
# generated into build/external; runs land in runs/external (both ignored).
EXTERNAL_RUNS := runs/external
.PHONY: examples-external
examples-external: $(STAMP)  ## run the SMT (z3 -> cvc5) and SAT (CaDiCaL DRAT -> RUP/RAT) examples
	$(BIN)/python examples/external/make_manifest.py build/external
	$(BIN)/kernel check identity build/external/manifest.json sat-php --repo examples/external > /dev/null
	$(BIN)/kernel check run build/external/manifest.json smt-abs --repo examples/external \
	  --job examples/external/jobs/smt-abs.json --run-root $(EXTERNAL_RUNS)
	$(BIN)/kernel check run build/external/manifest.json sat-php --repo examples/external \
	  --job examples/external/jobs/sat-php.json --run-root $(EXTERNAL_RUNS)
	$(BIN)/kernel check run build/external/manifest.json smt-abs-false --repo examples/external \
	  --job examples/external/jobs/smt-abs-false.json --run-root $(EXTERNAL_RUNS); \
	  test $$? -eq 1  # a false claim is BLOCKED (exit 1), never PASS

# Side-by-side benchmarks (bench/): variants interleaved over many rounds,
# reported as ratios with their spread; results are kept in BENCHMARKS.md.
.PHONY: bench
bench: $(STAMP)  ## interleaved benchmarks: canonical_json, strict parse, replay, start-up (ratios, ~1-2 min)
	$(BIN)/python -m bench

# Runs of any size through the command line (bench/_stream.py): kernel bundle
# --layout stream, then kernel replay, per size; CPU, peak RSS, ratios.
SCALE_SIZES ?= 1000 10000 100000
.PHONY: scale
scale: $(STAMP)  ## kernel bundle + kernel replay on bundle streams of SCALE_SIZES attempts
	$(BIN)/python -m bench._stream $(SCALE_SIZES)
