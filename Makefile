# Obvious targets. CI runs .ci/run.
GO ?= go

.PHONY: build test race fuzz lint bench bench-raft ci image-static

build:
	$(GO) build -o qs ./cmd/qs

test:
	$(GO) test ./...

# The container image from a static binary built here, on an empty base
# (deploy/container/Containerfile.static): no base image to pull.
DOCKER ?= docker
image-static:
	mkdir -p deploy/container/rootfs/usr/local/bin deploy/container/rootfs/var/lib/qs
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o deploy/container/rootfs/usr/local/bin/qs ./cmd/qs
	$(DOCKER) build -f deploy/container/Containerfile.static -t qs:static deploy/container

race:
	$(GO) test -race -short ./internal/...

# Each fuzzer for FUZZTIME (default 60s).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz=FuzzDecodeBody -fuzztime=$(FUZZTIME) ./internal/wal/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeBlock -fuzztime=$(FUZZTIME) ./internal/wal/
	$(GO) test -run '^$$' -fuzz=FuzzBatchDecode -fuzztime=$(FUZZTIME) ./internal/api/httpapi/
	$(GO) test -run '^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/api/memcache/
	$(GO) test -run '^$$' -fuzz=FuzzConn -fuzztime=$(FUZZTIME) ./internal/api/memcache/
	$(GO) test -run '^$$' -fuzz=FuzzReadMessage -fuzztime=$(FUZZTIME) ./internal/repl/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeCommand -fuzztime=$(FUZZTIME) ./internal/raftroot/
	$(GO) test -run '^$$' -fuzz=FuzzServerHandshake -fuzztime=$(FUZZTIME) ./internal/clusterauth/
	$(GO) test -run '^$$' -fuzz=FuzzClientHandshake -fuzztime=$(FUZZTIME) ./internal/clusterauth/
	$(GO) test -run '^$$' -fuzz=FuzzReceiveAuthenticated -fuzztime=$(FUZZTIME) ./internal/raftroot/
	$(GO) test -run '^$$' -fuzz=FuzzGetReply -fuzztime=$(FUZZTIME) ./internal/bench/
	$(GO) test -run '^$$' -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./internal/tree/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeRecord$$ -fuzztime=$(FUZZTIME) ./internal/store/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeMeta$$ -fuzztime=$(FUZZTIME) ./internal/store/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeSegmentMeta$$ -fuzztime=$(FUZZTIME) ./internal/store/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeIDs$$ -fuzztime=$(FUZZTIME) ./internal/store/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeSummary$$ -fuzztime=$(FUZZTIME) ./internal/store/
	$(GO) test -run '^$$' -fuzz=FuzzHistTimeKey$$ -fuzztime=$(FUZZTIME) ./internal/store/
	$(GO) test -run '^$$' -fuzz=FuzzSegmentFile$$ -fuzztime=$(FUZZTIME) ./internal/store/

lint:
	test -z "$$(gofmt -l .)"
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

# The benchmarks of docs/benchmarks.md (needs Debian's memcached for the baseline).
bench: build
	./qs bench --spawn readlat get write --markdown --svg bench-out

# The HA root's figures: 12 leader kills (failover times) and writes on a
# 3-member root against a single root (docs/benchmarks.md).
bench-raft:
	QS_BENCH=1 $(GO) test -count=1 -v -run 'TestRaftKillLeaderUnderWrites|TestRaftWriteBenchmark' -timeout 30m ./tests/

ci:
	./.ci/run
