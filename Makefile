# Every command a user runs; each calls a script of scripts/.
.PHONY: run stop test test-citus test-contract test-dashboard bench-ingest bench-profile bench-capacity bench-report bench-projector bench-rebuild bench-scale bench-client bench-citus bench-json bench-cardinality migrations web smoke-test suites fault-crash fault-db fault-overload fault-clients fuzz fuzz-http test-storage

run:            ## set up everything and serve on 127.0.0.1:8080
	scripts/run.sh

stop:           ## stop the PostgreSQL cluster `make run` started (in .local/pg)
	scripts/stop.sh

test:           ## the whole test suite against a PostgreSQL it starts itself
	scripts/test.sh

test-citus:     ## the tracker on Citus: a coordinator and two workers on loopback (needs the citus extension; not in make test)
	scripts/test-citus.sh

test-contract:  ## the running server against docs/openapi.yaml (every status, then schemathesis)
	scripts/test-contract.sh

test-dashboard: ## the dashboard in a headless Chromium against a tracker with known events
	scripts/test-dashboard.sh

bench-ingest:   ## ingest benchmark: psql \copy baseline vs the tracker
	scripts/bench-ingest.sh

bench-profile:  ## where a request's CPU time goes in tracker serve, against a bare SwiftNIO server
	scripts/bench-profile.sh

bench-report:   ## report benchmark: 10 M events, report p50 vs exact full scans in PostgreSQL and DuckDB, rebuild rate, projector lag
	scripts/bench-report.sh

bench-projector: ## projector alone vs ingestion: events/s, CPU, WAL and statements per event
	scripts/bench-projector.sh

bench-rebuild:  ## tracker rebuild of 10 M events: events/s vs a binary COPY of the log, phases, CPU
	scripts/bench-rebuild.sh

bench-scale:    ## 50 M events (EVENTS=…): ingest vs the empty log, rebuild vs 10 M, report p50, lag, event_ids
	scripts/bench-scale.sh $(EVENTS)

bench-capacity: ## CPU time and bytes per event, for sizing (docs/SCALING.md)
	scripts/bench-capacity.sh

bench-client:   ## TrackerClient: events/s one client process hands over and delivers, its memory
	scripts/bench-client.sh

bench-citus:    ## the cost of distribution: ingest, projection, rebuild and reports on Citus (1 + 2 nodes here) vs one node
	scripts/bench-citus.sh

bench-cardinality: ## 100 000 clicks on one ad unit vs on 40 000 ad units and 100 000 asset keys: disk, peak RSS, time to reports
	scripts/bench-cardinality.sh $(CLICKS)

bench-json:     ## the hand-written JSON bodies (receipt, error, report) against JSONEncoder
	scripts/bench-json.sh

migrations:     ## re-embed sql/*.sql into the binary after editing a migration
	scripts/embed-migrations.sh

web:            ## re-embed docs/openapi.yaml and web/dashboard/ into the binary after editing them
	scripts/embed-web.sh

smoke-test:     ## the container image end to end with Podman (root; see docs/DEPLOY.md)
	deploy/smoke-test

# Fault-injection, hostile-client, fuzz and storage suites (docs/RELIABILITY.md). Each runs
# its documented long form; MODE=short runs the form that `make test` runs.
MODE ?= long

suites:         ## every suite below in its short form (what make test runs after swift test)
	scripts/suites.sh short

fault-crash:    ## crash loop: SIGKILL at random moments under a retrying load (long: 120 cycles)
	scripts/suites.sh $(MODE) crash

fault-db:       ## PostgreSQL stopped, frozen, locked, out of disk, async commit, failover (long: 24 restarts)
	scripts/suites.sh $(MODE) db

fault-overload: ## 10 x the sustainable rate: 503/429, bounded memory and latency (long: 120 s)
	scripts/suites.sh $(MODE) overload

fault-clients:  ## slowloris, stalled uploads, idle and flooding connections, size limits (ulimit -n 1024)
	scripts/suites.sh $(MODE) clients

fuzz:           ## libFuzzer over BatchDecoder.decode and ReportQuery.parse (long: 10 M executions each; .build-fuzz)
	scripts/suites.sh $(MODE) fuzz

fuzz-http:      ## mutational HTTP client: 2xx or 4xx with the JSON error shape, never 5xx or a hang (long: 600 s)
	scripts/suites.sh $(MODE) fuzz-http

test-storage:   ## byte-exact round trips of hostile text into the log and out through reports
	scripts/suites.sh $(MODE) storage
