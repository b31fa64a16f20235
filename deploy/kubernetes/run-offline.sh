#!/bin/bash
# Runs the pods of these manifests on one Linux machine, without
# Kubernetes or a container engine, to check the image and the manifests
# together: the Containerfile's runtime stage on a Debian bookworm made by
# debootstrap, the HA root's three members (qs-root-0..2) and one replica,
# each in its own network namespace on a private bridge, with the
# ConfigMap's files and a cluster key in /etc/qs, the pod's command run as
# uid 10001 in a chroot. It then writes through the members, reads on the
# replica, kills the Raft leader, writes again, and checks that a node
# with another cluster key is refused.
#
#   sudo deploy/kubernetes/run-offline.sh [WORKDIR]     (default /var/tmp/qs-pods)
#
# Needs root, go, debootstrap, curl, iproute2 and python3-yaml; the first
# run downloads Debian's base packages (about 200 MB in WORKDIR/rootfs).
# Traffic stays inside the namespaces it makes (10.77.0.0/24).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:-/var/tmp/qs-pods}
IMG=$W/image
PODS=(qs-root-0 qs-root-1 qs-root-2 qs-replica-a)

cleanup() {
	pkill -f "^qs serve --config /etc/qs/" 2>/dev/null || true
	pkill -f "^/usr/local/bin/qs serve --config /etc/qs/" 2>/dev/null || true
	sleep 1
	for p in "${PODS[@]}"; do ip netns del "qsp-$p" 2>/dev/null || true; done
	ip netns del qsk 2>/dev/null || true
}
trap cleanup EXIT
cleanup
fail() { echo "FAIL: $*" >&2; exit 1; }
in_ns() { ip netns exec qsp-qs-replica-a "$@"; }

mkdir -p "$W"
[ -d "$W/rootfs" ] || debootstrap --variant=minbase bookworm "$W/rootfs" http://deb.debian.org/debian
if [ ! -d "$IMG" ]; then
	cp -a "$W/rootfs" "$W/image.new"
	# The runtime stage of deploy/container/Containerfile.
	chroot "$W/image.new" useradd --system --uid 10001 --home-dir /var/lib/qs --create-home qs
	mkdir -p "$W/image.new/etc/qs"
	mv "$W/image.new" "$IMG"
fi
touch "$IMG/etc/hosts" "$IMG/pod-cmd"
# The build stage's command.
CGO_ENABLED=0 go -C "$REPO" build -trimpath -ldflags "-s -w" -o "$IMG/usr/local/bin/qs" ./cmd/qs
QS=$IMG/usr/local/bin/qs

# Each workload's command line, as the kubelet would run it (no command:
# the image's entrypoint).
eval "$(python3 - "$REPO/deploy/kubernetes" <<'PY'
import shlex, sys, yaml
d = sys.argv[1]
for f, var in (("root.yaml", "CMD_ROOT"), ("replicas.yaml", "CMD_REPLICA")):
    for o in yaml.safe_load_all(open(f"{d}/{f}")):
        if o and o["kind"] in ("StatefulSet", "DaemonSet"):
            c = o["spec"]["template"]["spec"]["containers"][0]
            argv = c.get("command", ["/usr/local/bin/qs"]) + c.get("args", [])
            print(f"{var}={shlex.quote(' '.join(shlex.quote(a) for a in argv))}")
PY
)"

rm -rf "$W/rogue" "$W/cluster.key" "$W/other.key"
"$QS" cert key --out "$W/cluster.key" >/dev/null
"$QS" cert key --out "$W/other.key" >/dev/null
ip netns add qsk
ip netns exec qsk ip link add br0 type bridge
ip netns exec qsk ip link set br0 up
hosts="127.0.0.1 localhost"
for i in "${!PODS[@]}"; do
	p=${PODS[$i]} n=$((10 + i))
	ip netns add "qsp-$p"
	ip netns exec "qsp-$p" ip link set lo up
	ip link add "qsv$n" type veth peer name eth0 netns "qsp-$p"
	ip link set "qsv$n" netns qsk
	ip netns exec qsk ip link set "qsv$n" master br0 up
	ip netns exec "qsp-$p" ip addr add "10.77.0.$n/24" dev eth0
	ip netns exec "qsp-$p" ip link set eth0 up
	hosts+=$'\n'"10.77.0.$n $p.qs-root $p"
done
for i in "${!PODS[@]}"; do
	p=${PODS[$i]} d=$W/pods/${PODS[$i]}
	rm -rf "$d" && mkdir -p "$d/data" "$d/etc"
	python3 - "$REPO/deploy/kubernetes/configmap.yaml" "$d/etc" <<'PY'
import sys, yaml
for o in yaml.safe_load_all(open(sys.argv[1])):
    for name, body in (o or {}).get("data", {}).items():
        open(f"{sys.argv[2]}/{name}", "w").write(body)
PY
	cp "$W/cluster.key" "$d/etc/cluster.key"
	chown -R 10001:10001 "$d/data" && chgrp -R 10001 "$d/etc" && chmod 0440 "$d"/etc/*
	echo "$hosts" >"$d/hosts"
	case $p in
	qs-root-*) cmd=$CMD_ROOT ;;
	*) cmd=${CMD_REPLICA//\$(NODE_NAME)/node-a} ;;
	esac
	echo "cd /var/lib/qs && exec $cmd" >"$d/cmd"
	ip netns exec "qsp-$p" unshare --mount --propagation private /bin/sh -c "
		mount --bind $d/hosts $IMG/etc/hosts && mount --bind $d/data $IMG/var/lib/qs &&
		mount --bind $d/etc $IMG/etc/qs && mount --bind $d/cmd $IMG/pod-cmd &&
		mount -t proc proc $IMG/proc &&
		exec chroot --userspec=10001:10001 $IMG /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
			HOME=/var/lib/qs POD_NAME=$p /bin/sh /pod-cmd" >"$d/log" 2>&1 &
	disown
done

# put VALUE: through the first member that takes it.
put() {
	for _ in $(seq 1 60); do
		for n in 10 11 12; do
			if in_ns curl -sf -m 2 -X PUT --data-binary "$1" "http://10.77.0.$n:7380/v1/default/keys/greeting" >/dev/null; then
				echo "put $1 through 10.77.0.$n"
				return
			fi
		done
		sleep 0.5
	done
	fail "no member took a write"
}
# expect VALUE: on the replica, once it has applied it.
expect() {
	for _ in $(seq 1 60); do
		[ "$(in_ns curl -s -m 2 http://10.77.0.13:7380/v1/default/keys/greeting)" = "$1" ] && echo "replica reads $1" && return
		sleep 0.5
	done
	fail "the replica did not read $1"
}

put first
expect first
leader=$(in_ns curl -s http://10.77.0.10:7380/v1/default/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["raft"]["leader"])')
echo "killing the Raft leader, member $leader"
pkill -9 -f "^qs serve --config /etc/qs/root.toml --node-name qs-root-$((leader - 1)) " || fail "leader $leader not found"
put second
expect second
survivor=10.77.0.$((10 + leader % 3))
if in_ns timeout 10 "$QS" serve --data "$W/rogue" --upstream "$survivor:7390" --cluster-key "$W/other.key" \
	--http 127.0.0.1:0 --memcache 127.0.0.1:0 --repl 127.0.0.1:0 >"$W/rogue.log" 2>&1; then
	fail "a node with another cluster key started"
fi
grep -q "does not hold the cluster key" "$W/rogue.log" || fail "another cluster key: $(head -c 300 "$W/rogue.log")"
echo "a node with another cluster key is refused"
in_ns curl -s "http://$survivor:7380/metrics" | grep 'qs_clusterauth_handshakes_total{port="repl",result="bad_key"}'
echo PASS
