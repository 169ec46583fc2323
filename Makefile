# Fibril build and test entry points. `make test` is what CI runs.
GO ?= go
BIN := bin
PKGS := ./...
TEST_TIMEOUT ?= 15m

.PHONY: all build run test test-short vet fuzz soak bench cluster cluster-stop clean

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
# fault and soak cases.
test: vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# Short fuzzing of every decoder (FUZZTIME per target). Seed corpora live in
# each package's testdata/fuzz and run as plain tests in make test.
FUZZTIME ?= 10s
fuzz:
	@for target in $$($(GO) test ./wire -list '^Fuzz' | grep '^Fuzz'); do \
		echo "== wire $$target"; \
		$(GO) test ./wire -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) || exit 1; \
	done
	@for target in $$($(GO) test ./storage/log -list '^Fuzz' | grep '^Fuzz'); do \
		echo "== storage/log $$target"; \
		$(GO) test ./storage/log -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

clean:
	rm -rf $(BIN)

CLUSTER_CONFIG ?= testdata/cluster/three-nodes.json
CLUSTER_NODES := node1 node2 node3

# Starts the three nodes of the example cluster config in the background.
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
