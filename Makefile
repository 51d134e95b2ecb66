.PHONY: setup test demo lint bench

setup:
	scripts/setup.sh test

test:
	scripts/setup.sh test
	.venv/bin/ruff check mlx_notebook tests benchmarks scripts
	.venv/bin/python -m pytest -q

demo:
	scripts/setup.sh demo
	.venv/bin/python scripts/run_demo.py notebooks/quickstart.ipynb

lint:
	.venv/bin/ruff check mlx_notebook tests benchmarks scripts
	.venv/bin/ruff format --check mlx_notebook tests benchmarks scripts

bench:
	.venv/bin/python benchmarks/bench_engine.py
