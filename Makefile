.PHONY: setup test test-loaded demo lint bench

setup:
	scripts/setup.sh test

test:
	scripts/setup.sh test
	.venv/bin/ruff check mlx_notebook tests benchmarks scripts
	.venv/bin/python -m pytest -q

# The same suite with every core kept busy by another process (CI runs it once).
test-loaded:
	scripts/setup.sh test
	scripts/test_loaded.sh

demo:
	scripts/setup.sh demo
	.venv/bin/python scripts/run_demo.py notebooks/quickstart.ipynb

lint:
	.venv/bin/ruff check mlx_notebook tests benchmarks scripts
	.venv/bin/ruff format --check mlx_notebook tests benchmarks scripts

bench:
	.venv/bin/python benchmarks/bench_engine.py
