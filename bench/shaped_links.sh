# Sourced by the shaped-link benchmarks (peer_shaped.sh, lm_over_slow_links.sh): N peer network
# namespaces shoalb-p0..p{N-1} (10.77.0.1..N), each joined to a bridge in shoalb-hub by a veth
# pair shaped with tc tbf: UP on the peer's end (its uplink), DOWN on the hub's (its downlink).
# netem is absent from this kernel, so no delay is added. Needs root and iproute2; one CURVE
# key per peer in $KEYS (allow-list $KEYS/allow). shaped_setup N UP DOWN; shaped_cleanup.
SHAPED_N=0
KEYS=""
shaped_cleanup() {
  # The processes started in our namespaces, and only those (deleting a namespace kills none).
  for ((i = 0; i < SHAPED_N; i++)); do
    ip netns pids "shoalb-p$i" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "shoalb-p$i" 2>/dev/null || true
  done
  ip netns del shoalb-hub 2>/dev/null || true
  [ -z "$KEYS" ] || rm -rf "$KEYS"
  KEYS=""
}
shaped_setup() {  # N UP DOWN
  SHAPED_N=$1
  local up=$2 down=$3
  shaped_cleanup
  KEYS="$(mktemp -d)"
  ip netns add shoalb-hub
  ip netns exec shoalb-hub ip link add br0 type bridge
  ip netns exec shoalb-hub ip link set br0 up
  for ((i = 0; i < SHAPED_N; i++)); do
    local ns="shoalb-p$i"
    ip netns add "$ns"
    ip link add "veth$i" netns "$ns" type veth peer name "hub$i" netns shoalb-hub
    ip netns exec "$ns" ip addr add "10.77.0.$((i + 1))/24" dev "veth$i"
    ip netns exec "$ns" ip link set "veth$i" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec shoalb-hub ip link set "hub$i" master br0
    ip netns exec shoalb-hub ip link set "hub$i" up
    ip netns exec "$ns" tc qdisc add dev "veth$i" root tbf rate "$up" burst 64kb latency 2s
    ip netns exec shoalb-hub tc qdisc add dev "hub$i" root tbf rate "$down" burst 256kb latency 2s
    "$BIN/shoal-keygen" "$KEYS/p$i" >/dev/null 2>&1
  done
  mkdir "$KEYS/allow"
  cp "$KEYS"/p*.pub "$KEYS/allow/"
}
