# Every command a user runs; each calls a script of scripts/.
.PHONY: run test test-contract test-dashboard bench-ingest bench-capacity bench-report bench-client migrations web smoke-test

run:            ## set up everything and serve on 127.0.0.1:8080
	scripts/run.sh

test:           ## the whole test suite against a PostgreSQL it starts itself
	scripts/test.sh

test-contract:  ## the running server against docs/openapi.yaml (every status, then schemathesis)
	scripts/test-contract.sh

test-dashboard: ## the dashboard in a headless Chromium against a tracker with known events
	scripts/test-dashboard.sh

bench-ingest:   ## ingest benchmark: psql \copy baseline vs the tracker
	scripts/bench-ingest.sh

bench-report:   ## report benchmark: 10 M events, report p50 vs full scans, rebuild rate, projector lag
	scripts/bench-report.sh

bench-capacity: ## CPU time and bytes per event, for sizing (docs/SCALING.md)
	scripts/bench-capacity.sh

bench-client:   ## TrackerClient: events/s one client process hands over and delivers, its memory
	scripts/bench-client.sh

migrations:     ## re-embed sql/*.sql into the binary after editing a migration
	scripts/embed-migrations.sh

web:            ## re-embed docs/openapi.yaml and web/dashboard/ into the binary after editing them
	scripts/embed-web.sh

smoke-test:     ## the container image end to end with Podman (root; see docs/DEPLOY.md)
	deploy/smoke-test
