# replay-kernel: every target bootstraps its own virtual environment from the
# package registries, so a fresh machine with nothing but python3 can run them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv test lint typecheck unit demo interrupts interrupts-loop fuzz clean package node sandbox-tools vectors schemas

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# Extras, named for what they do: certify (z3 + cvc5, the SMT pair `kernel run`
# certifies with), sat (python-sat, the SAT example only), scale (Dask), dev
# (ruff, mypy, pytest, Hypothesis, jsonschema, in-toto, import-linter), attest (cryptography:
# kernel attest). pyproject.toml holds compatible
# ranges; constraints.txt holds the exact releases CI installs. Node.js is
# needed only by the conformance-vector tests (they fail with node_missing
# without it), so a machine without apt-get can still run the demo.
EXTRAS := dev,certify,sat,scale,attest

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	command -v node > /dev/null || $(MAKE) node || echo 'warning: no node; make test will fail (node_missing)' >&2
	touch $(STAMP)

venv: $(STAMP)  ## create .venv and install the package with its extras (dev, certify, sat, scale, attest)

# The conformance vectors (vectors/) are recomputed by an independent Node.js
# implementation with no npm dependencies; Debian's nodejs package is enough.
node:  ## install Node.js from Debian (apt-get) when it is missing
	@command -v node > /dev/null && exit 0; \
	  if command -v apt-get > /dev/null; then \
	    SUDO=$$(test "$$(id -u)" -eq 0 || echo sudo); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs; \
	  fi; \
	  command -v node > /dev/null || { echo "error: node_missing: the conformance vectors need Node.js (install the nodejs package)" >&2; exit 1; }

# Every producer and checker step runs in a bubblewrap sandbox (ADR 0018); the
# main job's certification requires it, so `make demo` needs bwrap. strace is
# for the test that takes a census of the files a checker step opens. Both
# come from Debian, like Node.js; the kernel looks for them in /usr/bin and
# /bin only.
sandbox-tools:  ## install bubblewrap and strace from Debian (apt-get) when missing
	@test -x /usr/bin/bwrap -a -x /usr/bin/strace && exit 0; \
	  if command -v apt-get > /dev/null; then \
	    SUDO=$$(test "$$(id -u)" -eq 0 || echo sudo); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap strace; \
	  fi; \
	  test -x /usr/bin/bwrap || { echo "error: sandbox_unavailable: install bubblewrap (Debian's bubblewrap package)" >&2; exit 1; }; \
	  test -x /usr/bin/strace || { echo "error: strace_missing: the census test needs strace (Debian's strace package)" >&2; exit 1; }

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check kernel tests examples bench vectors

typecheck: $(STAMP)  ## mypy --strict over kernel/, tests/ and bench/
	$(BIN)/mypy --strict kernel tests bench

# Two passes: everything not marked serial on PYTEST_WORKERS processes, then the
# serial tests (time bounds, signals at chosen moments) alone. See tests/conftest.py.
PYTEST_WORKERS ?= 2
unit: $(STAMP) sandbox-tools  ## pytest with the bounded Hypothesis profile (parallel pass, then the serial tests alone)
	$(BIN)/pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) -m 'not serial' --durations=20
	$(BIN)/pytest -q -p no:cacheprovider -m serial --durations=20

test: lint typecheck unit  ## everything CI runs

demo: $(STAMP) sandbox-tools  ## the reference scenario and the main job (kernel run), end to end
	$(BIN)/python examples/build_example_chain.py --check
	$(BIN)/kernel digest examples/replay/chain.json
	mkdir -p out
	@echo; echo '== 1. an honest run (kernel replay): the shipped draft, every attempt classified: PASS (exit 0)'
	$(BIN)/kernel bundle examples/drafts/marbles.json --manifest builtin.v1 -o out/marbles.json
	$(BIN)/kernel replay out/marbles.json --out out/marbles-outcomes.jsonl
	@echo; echo '== 2. the scenario (kernel replay): attempt 7 tampered with on purpose; expect it caught: FAIL integrity (exit 3)'
	@$(BIN)/kernel replay examples/replay/bundle.json --out out/outcomes.jsonl; code=$$?; \
	  test $$code -eq 3 || { echo "demo: FAILED: the tampered attempt must give exit 3, got $$code" >&2; exit 1; }
	@echo; echo '== 3. an honest main job (kernel run): the draft sealed for certified.v1, certified by z3 -> cvc5: PASS (exit 0)'
	$(BIN)/kernel bundle examples/drafts/marbles.json --manifest certified.v1 -o out/marbles-certified.json
	rm -rf runs/marbles runs/e2e  # kernel run refuses a non-empty work directory: start fresh
	$(BIN)/kernel run out/marbles-certified.json --work-dir runs/marbles --out out/marbles-run-outcomes.jsonl
	@echo; echo '== 4. the main job scenario (kernel run): attempt 5 tampered with on purpose; expect it caught: FAIL integrity (exit 3)'
	$(BIN)/python examples/build_e2e_bundle.py --check
	@$(BIN)/kernel run examples/e2e/bundle.json --work-dir runs/e2e --out out/e2e-outcomes.jsonl; code=$$?; \
	  test $$code -eq 3 || { echo "demo: FAILED: the tampered attempt must give exit 3, got $$code" >&2; exit 1; }
	@echo; echo 'demo: OK, every verdict as expected:'
	@echo '  honest runs    PASS (exit 0), every attempt classified by its authorities (the kernel run certified by z3 -> cvc5):'
	@echo '                 out/marbles-outcomes.jsonl, out/marbles-run-outcomes.jsonl (certification runs: runs/marbles/)'
	@echo '  tampered runs  the tampered attempt caught (candidate_identity_mismatch, exit 3), the others classified:'
	@echo '                 out/outcomes.jsonl, out/e2e-outcomes.jsonl (certification runs: runs/e2e/)'

interrupts: $(STAMP) sandbox-tools  ## SIGINT/SIGTERM to kernel run and kernel replay on a pool and on Dask, 40 tries each at varied moments; a launching kernel SIGKILLed at 200 moments per containment level
	KERNEL_INTERRUPT_TRIES=$${KERNEL_INTERRUPT_TRIES:-40} KERNEL_LAUNCH_KILLS=$${KERNEL_LAUNCH_KILLS:-200} $(BIN)/pytest -q -p no:cacheprovider tests/test_cli_interrupts.py tests/test_containment.py -k 'interrupted or signal or killed_at_any_moment'

# Every signal, kill and race test (issue 35, item 11), INTERRUPT_LOOPS times in
# a row, each test once a round (the tests' own inner loops cut to one try),
# stopping at the first failure: a flake shows as a round number.
SIGNAL_TESTS := tests/test_cli_interrupts.py tests/test_cli_start_up_interrupts.py tests/test_cli_newcomer.py tests/test_cli_run_resume.py \
  tests/test_containment.py tests/test_containment_probe.py tests/test_evidence_limits.py tests/test_evidence_store.py \
  tests/test_evidence_store_run.py tests/test_external_process.py tests/test_orchestrate_cluster.py \
  tests/test_orchestrate_driver.py tests/test_orchestrate_no_shared_fs.py tests/test_orchestrate_scale.py tests/test_pool_results.py tests/test_pool_spawn_signals.py \
  tests/test_redteam_external.py tests/test_replay_sharded.py tests/test_run_sharded.py \
  tests/test_shard_workers.py tests/test_signals_in_finalizers.py
SIGNAL_K := kill or signal or sigterm or sigint or ctrl_c or interrupt or dies or dying or lost or forged_self_consistent
INTERRUPT_LOOPS ?= 50
interrupts-loop: $(STAMP) sandbox-tools  ## every signal, kill and race test INTERRUPT_LOOPS (50) times in a row, stopping at the first failure (hours)
	@for i in $$(seq 1 $(INTERRUPT_LOOPS)); do echo "== round $$i of $(INTERRUPT_LOOPS)"; \
	  KERNEL_INTERRUPT_TRIES=1 KERNEL_LAUNCH_KILLS=20 $(BIN)/pytest -q -p no:cacheprovider -x \
	    $(SIGNAL_TESTS) -k '$(SIGNAL_K)' || { echo "interrupts-loop: round $$i failed" >&2; exit 1; }; \
	done; echo "interrupts-loop: $(INTERRUPT_LOOPS) rounds passed"

fuzz: $(STAMP)  ## long property runs (Hypothesis profile "deep"; the checker tests widen their corpora)
	HYPOTHESIS_PROFILE=deep $(BIN)/pytest -q -p no:cacheprovider

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis build/package dist

vectors: $(STAMP)  ## regenerate vectors/ and recompute them with the Node.js implementation
	$(BIN)/python vectors/generate.py
	node vectors/conformance.mjs

schemas: $(STAMP)  ## regenerate the JSON Schemas in schemas/ from the attrs records
	$(BIN)/kernel schema --write schemas

# Build the sdist and wheel, check their metadata with twine, install the wheel
# (with the certify extra) into a fresh venv and run the installed console script.
PKG_VENV := build/package/venv
package: $(STAMP)  ## build sdist + wheel into dist/, twine check, install the wheel in a fresh venv
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[release]'
	rm -rf dist build/package
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(PYTHON) -m venv $(PKG_VENV)
	$(PKG_VENV)/bin/python -m pip install --quiet -c constraints.txt "$$(ls dist/*.whl)[certify]"
	cd build/package && venv/bin/kernel --help > /dev/null && venv/bin/kernel schema --list > /dev/null
	cd build/package && venv/bin/python -c "import kernel, kernel.replay, kernel.verification; print('installed', kernel.__version__)"

# External verifier protocol examples (seed 003): real producer/checker pairs.
# The manifest pins absolute paths and hashes of this machine, so it is
# generated into build/external; runs land in runs/external (both ignored).
EXTERNAL_RUNS := runs/external
.PHONY: examples-external
examples-external: $(STAMP) sandbox-tools  ## run the SMT (z3 -> cvc5) and SAT (CaDiCaL DRAT -> RUP/RAT) examples
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
bench: $(STAMP) sandbox-tools  ## issue 10's seven targets, issue 21's store and issue 22's sharded replay side by side, one table of ratios (~30-50 min, of which target 9's three rounds ~25), then issue 36's two-node runs (root; ~40 min more at TWO_NODE_ATTEMPTS=1000000; BENCHMARKS.md)
	@mkdir -p build
	$(BIN)/python -m bench --targets --markdown --json build/bench-targets.json
	$(MAKE) --no-print-directory bench-two-nodes bench-two-nodes-replay

.PHONY: bench-groups
bench-groups: $(STAMP) sandbox-tools  ## the detailed interleaved comparisons: canonical_json, strict parse, replay, start-up (~2-4 min)
	$(BIN)/python -m bench

.PHONY: bench-recheck
bench-recheck: $(STAMP) sandbox-tools  ## kernel run with and without --recheck-returned, 20 certifications on 2 workers, 3 interleaved rounds (~1 min)
	$(BIN)/python -m bench._recheck 3 20

.PHONY: bench-two-nodes
bench-two-nodes: $(STAMP) sandbox-tools  ## 200 certifications on two separate workers (own mount and network namespaces, root) against a local Dask cluster of 2, 2 interleaved rounds; transfer bytes and time per certification (~4 min)
	$(BIN)/python -m bench._two_nodes 200 2

.PHONY: bench-two-nodes-replay
TWO_NODE_ATTEMPTS ?= 1000000
bench-two-nodes-replay: $(STAMP) sandbox-tools  ## kernel replay of TWO_NODE_ATTEMPTS (1,000,000) attempts on two separate workers, peak RSS of the driver; a local Dask cluster of 2 beside it (~35 min here at 1M; 100,000: ~6 min)
	$(BIN)/python -m bench._two_nodes_replay $(TWO_NODE_ATTEMPTS)

.PHONY: bench-parallel
bench-parallel: $(STAMP) sandbox-tools  ## 200 real checks: serial against process pools and Dask of 1, 2, 4 workers, 3 full rounds (~10-25 min)
	$(BIN)/python -m bench --parallel

DRAT_TRIM_COMMIT = effa1dcce85c878236f8313133dff1a2b766cd7c
build/drat-trim/drat-trim:  # benchmark only: never a runtime dependency, never committed
	git clone https://github.com/marijnheule/drat-trim build/drat-trim
	git -C build/drat-trim checkout $(DRAT_TRIM_COMMIT)
	gcc build/drat-trim/drat-trim.c -std=c99 -O2 -o build/drat-trim/drat-trim

.PHONY: drat-trim
drat-trim: build/drat-trim/drat-trim  ## build drat-trim from its public source (the DRAT benchmark's reference)

.PHONY: bench-drat
bench-drat: $(STAMP) build/drat-trim/drat-trim  ## the DRAT checker against drat-trim and dratify's pure-Python engine (ratios, ~30 min)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench --drat

# Runs of any size through the command line (bench/_stream.py): kernel bundle
# --layout stream, then kernel replay, per size; CPU, peak RSS, ratios.
SCALE_SIZES ?= 1000 10000 100000
.PHONY: scale
scale: $(STAMP)  ## kernel bundle + kernel replay on bundle streams of SCALE_SIZES attempts
	$(BIN)/python -m bench._stream $(SCALE_SIZES)

# The same through kernel replay --workers N (issue 22): peak RSS and wall of
# the whole process tree (the command and its pool workers, reaped by it).
SCALE_SHARDED_SIZES ?= 1000000
SCALE_WORKERS ?= 2
.PHONY: scale-sharded
scale-sharded: $(STAMP)  ## kernel bundle + kernel replay --workers SCALE_WORKERS on SCALE_SHARDED_SIZES attempts
	$(BIN)/python -m bench._stream --workers $(SCALE_WORKERS) $(SCALE_SHARDED_SIZES)

# What each part of a step's sandbox adds per step (issue 34): the allow-list
# view, the syscall filter and, as root, the step uid, against the old view.
.PHONY: bench-sandbox
bench-sandbox: $(STAMP) sandbox-tools  ## per-step cost of the sandbox's parts, interleaved rounds (~10 s)
	$(BIN)/python -m bench._sandbox_parts --rounds 40

# Per-shard overhead: kernel replay --workers 1 at several shard sizes against serial.
.PHONY: bench-shards
bench-shards: $(STAMP)  ## per-shard overhead of sharded replay by shard size (10,000 attempts)
	$(BIN)/python -m bench._sharded --shards 10000

# Mutation testing (issue 12.6, RELIABILITY.md): mutmut 3 over kernel/replay,
# kernel/verification and kernel/external/_receipt.py, configured in
# pyproject.toml [tool.mutmut] (which tests run for which module). Mutants and
# results live in mutants/ (ignored). The target starts from an empty mutants/:
# mutmut 3 never refreshes the unmutated files it copied there, so a stale copy
# would test old code. MUTATE_CHILDREN bounds the parallel test processes.
MUTATE_CHILDREN ?= 2
.PHONY: mutate
mutate: $(STAMP)  ## mutation testing with mutmut (figures in RELIABILITY.md; ~25 min on 2 shared cores)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[mutate]'
	rm -rf mutants
	$(BIN)/mutmut run --max-children $(MUTATE_CHILDREN)
	$(BIN)/python tests/mutation_report.py
