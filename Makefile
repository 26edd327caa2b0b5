# One task runner for the README, CI and developers.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements/dev.txt requirements/base.txt pyproject.toml | cksum | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000
DEMO_EMAIL ?= owner@example.com
PYTEST_ARGS ?=
export RETASC_PUBLIC_URL ?= http://$(HOST):$(PORT)

.PHONY: install run serve test test-postgres lint fmt migrations-check bench bench-quick bench-scaled bench-servers bench-profile drills clean

$(STAMP):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements/dev.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

## Run the server in the embedded mode: migrations, a demo org, then Daphne.
run: install
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py relink_chains
	$(BIN)/python manage.py bootstrap --org Demo --project DEMO --email $(DEMO_EMAIL) --reuse-key $(if $(NEW_KEY),--new-key)
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/daphne -b $(HOST) -p $(PORT) retasc.asgi:application

## Daphne only (no demo bootstrap).
serve: install
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py relink_chains
	$(BIN)/daphne -b $(HOST) -p $(PORT) retasc.asgi:application

## The whole test suite (SQLite unless DATABASE_URL is set).
test: install
	$(BIN)/python manage.py makemigrations --check --dry-run -v0 --settings=retasc.settings.test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-postgres: install
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/retasc} REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/15} $(MAKE) test

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

migrations-check: install
	$(BIN)/python manage.py makemigrations --check --dry-run --settings=retasc.settings.test

## Benchmarks and fault drills (PostgreSQL on 127.0.0.1:5432, see docs/benchmarks.md).
bench: install
	$(BIN)/python -m bench.work_loop --json-out var/bench-work-loop.json
	$(BIN)/python -m bench.scaling --json-out var/bench-scaling.json

bench-quick: install
	$(BIN)/python -m bench.work_loop --quick --agents 1,8,32 --no-embedded

# N web processes behind nginx (needs nginx, pgbench and Redis: REDIS_URL or db 0).
bench-scaled: install
	$(BIN)/python -m bench.work_loop --no-single --processes 1,2,3 --scaled-agents 32,128 --rounds 2 --json-out var/bench-scaled.json

bench-servers: install
	$(BIN)/python -m bench.work_loop --no-single --processes 2 --servers daphne,uvicorn --scaled-agents 32 --rounds 2 --json-out var/bench-servers.json

bench-profile: install
	$(BIN)/python -m bench.profile_claim --cprofile 30

drills: install
	$(BIN)/python -m bench.drills

clean:
	rm -rf $(VENV) var
