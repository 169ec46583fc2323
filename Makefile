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

clean:
	rm -rf $(BIN)
