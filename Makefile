# Obvious targets. CI runs .ci/run.
GO ?= go

.PHONY: build test race fuzz lint bench ci

build:
	$(GO) build -o qs ./cmd/qs

test:
	$(GO) test ./...

race:
	$(GO) test -race -short ./internal/...

# Each fuzzer for FUZZTIME (default 60s).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz=FuzzDecodeBody -fuzztime=$(FUZZTIME) ./internal/wal/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeBlock -fuzztime=$(FUZZTIME) ./internal/wal/
	$(GO) test -run '^$$' -fuzz=FuzzBatchDecode -fuzztime=$(FUZZTIME) ./internal/api/httpapi/
	$(GO) test -run '^$$' -fuzz=FuzzServe -fuzztime=$(FUZZTIME) ./internal/api/memcache/

lint:
	test -z "$$(gofmt -l .)"
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

# The benchmarks of docs/benchmarks.md (needs Debian's memcached for the baseline).
bench: build
	./qs bench --spawn readlat get write --markdown

ci:
	./.ci/run
