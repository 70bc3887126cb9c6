# `make demo` and `make test` work on a machine with only python3 and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REQUIREMENTS ?= requirements-cpu.txt

.PHONY: constraints demo test test-jobs test-gpu test-studies studies lint bench bench-smoke bench-gpu docs docs-serve docs-notebook clean

$(STAMP): setup.cfg pyproject.toml $(REQUIREMENTS) constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r $(REQUIREMENTS)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/train_ddp_standalone_example.py --world-size 2 --overwrite training.path=runs/demo

# Three workers on two cores: the tests that wait (for a timeout, a kill, a job's processes to
# start) leave a core idle that a third worker fills (337 s against 371 s, back to back).
# make test: the library in its own process and in the ranks it spawns, the command line, the
# examples; make test-jobs: whole jobs started, stopped or spread as users do it, the tests in
# tests/jobs/. Both select by the jobs mark, which tests/jobs/conftest.py gives every test there
# and tests/test_jobs_folder.py allows nowhere else. CI runs both (.ci/run).
test: $(STAMP)
	$(PY) -m pytest -q -n 3 --dist loadgroup -m "not jobs"

test-jobs: $(STAMP)
	$(PY) -m pytest -q -n 3 --dist loadgroup -m jobs

# The CUDA paths, on a machine with a GPU (skipped elsewhere, so make test passes without one).
test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu

# The physics studies (studies/: the bounds, ceilings and baselines behind the Physics page):
# their estimators against exact results. Not the product, so not in make test; CI runs it.
test-studies: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[studies]'
	$(PY) -m pytest -q -n 2 -p no:cacheprovider studies/tests

# Run the studies (several hours): STUDIES.md, then the Physics page's and README's tables.
studies: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[studies]'
	$(PY) studies/run.py

lint: $(STAMP)
	$(PY) -m pip install --quiet ruff
	$(VENV)/bin/ruff check QuantumGravPy tests bench studies examples
	$(VENV)/bin/ruff format --check QuantumGravPy tests bench studies examples

# The documentation site (mkdocs.yml, docs/), strict: a broken link or reference fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# Run the tutorial notebook again and store it, with its outputs and pictures, for the site.
docs-notebook: $(STAMP)
	$(PY) docs/scripts/notebook.py

# Every benchmark against its peers and baselines: BENCHMARKS.md and the headline tables.
bench: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) bench/report.py

# Every benchmark script on tiny inputs, to its end (CI runs it: none breaks unseen).
bench-smoke: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) bench/report.py --smoke

# Training graphs/s on a GPU against hand-written, PyG and Lightning loops, with what keeps the
# GPU waiting (bench/gpu.py: about 4 minutes on one; --quick runs anywhere in under a minute).
bench-gpu: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) bench/gpu.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache site .cache

# After a green CI on newer versions: constraints.txt from what is installed now (every extra).
constraints: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench,studies]'
	(sed -n '1,/^# no run/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
		| sed 's/+cpu$$//') > constraints.new && mv constraints.new constraints.txt
