.PHONY: setup test test-loaded test-sanitized demo smoke lint docs bench

setup:
	scripts/setup.sh test

# BUSY=N runs N busy loops beside the suite (CI: half the cores; see .ci/run).
BUSY ?= 0

test:
	scripts/setup.sh test
	.venv/bin/ruff check mlx_notebook tests benchmarks scripts
	BUSY=$(BUSY) scripts/run_tests.sh

# The same, with every core kept busy by another process: what CI runs.
test-loaded:
	$(MAKE) test BUSY=$$(nproc)

# The C kernels' tests on builds with AddressSanitizer, UBSan and ThreadSanitizer.
test-sanitized:
	scripts/setup.sh test
	scripts/sanitize.sh

demo:
	scripts/setup.sh demo
	.venv/bin/python scripts/run_demo.py notebooks/quickstart.ipynb

lint:
	.venv/bin/ruff check mlx_notebook tests benchmarks scripts
	.venv/bin/ruff format --check mlx_notebook tests benchmarks scripts

# The documentation site (docs/, mkdocs.yml) into site/. --strict: any warning fails
# the build (a broken link or anchor, a docstring the API pages cannot read).
docs:
	scripts/setup.sh docs
	.venv/bin/mkdocs build --strict

bench:
	.venv/bin/python benchmarks/bench_engine.py

# The built wheel alone in a bare virtualenv: what a stranger's `pip install` gets.
smoke:
	scripts/smoke_wheel.sh
