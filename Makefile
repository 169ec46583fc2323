# Fibril build and test entry points. `make test` is what CI runs.
GO ?= go
BIN := bin
PKGS := ./...
TEST_TIMEOUT ?= 15m

.PHONY: all build run test test-go test-typescript test-short vet fuzz soak bench cluster cluster-stop clean

all: build

build:
	$(GO) build -o $(BIN)/fibril ./cmd/fibril
	$(GO) build -o $(BIN)/fibrilctl ./cmd/fibrilctl

# Starts one node on embedded defaults: data in ./fibril-data,
# clients on 127.0.0.1:7420, HTTP on 127.0.0.1:7480.
run: build
	$(BIN)/fibril serve

vet:
	$(GO) vet $(PKGS)

# Every test, under the race detector, with the short versions of the
# fault and soak cases; then the TypeScript SDK's.
test: test-go test-typescript

test-go: vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# The TypeScript SDK's tests (sdk/typescript: codec, SDK, and the
# conformance suite through its codec) against four local nodes that
# conformance/nodes starts on free ports and stops when npm exits.
NPM ?= npm
test-typescript:
	cd sdk/typescript && $(NPM) ci --no-audit --no-fund
	$(GO) run ./conformance/nodes -- sh -c 'cd sdk/typescript && $(NPM) test'

# Short fuzzing of every decoder and parser (FUZZTIME per target). Seed
# corpora live in each package's testdata/fuzz or in the targets
# themselves, and run as plain tests in make test.
FUZZTIME ?= 10s
FUZZ_PKGS := ./wire ./storage/log ./access ./cluster ./cluster/rafttransport ./actors
fuzz:
	@for pkg in $(FUZZ_PKGS); do \
		for target in $$($(GO) test $$pkg -list '^Fuzz' | grep '^Fuzz'); do \
			echo "== $$pkg $$target"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

# Long acceptance runs: 20 process kills, 200 power losses, storage
# failures, checkpoint crashes, a minute of garbage frames, a 1M-message
# backlog and the ten-minute sustained run (about 25 min here; the sustained
# run keeps its whole history and needs about 12 GiB free); then the cluster
# fault classes, 20 trials each (30 SIGKILL; with 15, a wiped follower then
# the owner's SIGKILL, and 16, a follower down past its owner's compaction),
# the compound schedules and the pause and cut-off failover-time classes
# (11-13, about 50 min) and the
# one-hour mixed schedule (about 3 h more; the process classes need root and
# iproute2). Prints the
# summary tables; docs/durability.md says how to write the cluster one there.
SOAK_TIMEOUT ?= 4h
soak:
	FIBRIL_SOAK=1 $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) -v ./acceptance

clean:
	rm -rf $(BIN)

CLUSTER_CONFIG ?= testdata/cluster/three-nodes.json
CLUSTER_NODES := node1 node2 node3
CLUSTER_SETTLE_SECONDS ?= 1

# Starts the three nodes of the example cluster config in the background
# and returns once each serves clients (at most 30 s each; a node that
# exits or stays silent fails the target with its log's tail). A node
# prints its ready line only once every listener is bound; the target then
# waits CLUSTER_SETTLE_SECONDS and checks that every node is still alive.
# Logs: cluster-data/<node>.log; PIDs: cluster-data/<node>.pid.
cluster: build
	@mkdir -p cluster-data
	@for node in $(CLUSTER_NODES); do \
		pidfile=cluster-data/$$node.pid; \
		if [ -f $$pidfile ] && kill -0 $$(cat $$pidfile) 2>/dev/null; then \
			echo "$$node already running (pid $$(cat $$pidfile))"; continue; \
		fi; \
		nohup $(BIN)/fibril serve --config $(CLUSTER_CONFIG) --node $$node \
			>cluster-data/$$node.log 2>&1 </dev/null & \
		echo $$! >$$pidfile; \
		echo "started $$node (pid $$(cat $$pidfile), log cluster-data/$$node.log)"; \
	done
	@for node in $(CLUSTER_NODES); do \
		pid=$$(cat cluster-data/$$node.pid); \
		for i in $$(seq 300); do \
			grep -q "^fibril: serving clients" cluster-data/$$node.log 2>/dev/null && break; \
			kill -0 $$pid 2>/dev/null || break; \
			sleep 0.1; \
		done; \
		if ! grep -q "^fibril: serving clients" cluster-data/$$node.log 2>/dev/null; then \
			echo "$$node (pid $$pid) is not serving; the end of cluster-data/$$node.log:"; \
			tail -n 20 cluster-data/$$node.log; exit 1; \
		fi; \
	done
	@sleep $(CLUSTER_SETTLE_SECONDS)
	@for node in $(CLUSTER_NODES); do \
		pid=$$(cat cluster-data/$$node.pid); \
		if ! kill -0 $$pid 2>/dev/null; then \
			echo "$$node (pid $$pid) said it serves, then exited; the end of cluster-data/$$node.log:"; \
			tail -n 20 cluster-data/$$node.log; exit 1; \
		fi; \
	done
	@echo "cluster serving clients (addresses in $(CLUSTER_CONFIG)); stop it with make cluster-stop"

# Stops the nodes started by `make cluster`, by their recorded PIDs.
cluster-stop:
	@for node in $(CLUSTER_NODES); do \
		pidfile=cluster-data/$$node.pid; \
		[ -f $$pidfile ] || continue; \
		pid=$$(cat $$pidfile); \
		if kill $$pid 2>/dev/null; then \
			for i in $$(seq 50); do kill -0 $$pid 2>/dev/null || break; sleep 0.1; done; \
			if kill -0 $$pid 2>/dev/null; then echo "$$node (pid $$pid) still running after 5 s; sending KILL"; kill -9 $$pid; fi; \
			echo "stopped $$node (pid $$pid)"; \
		fi; \
		rm -f $$pidfile; \
	done
