#!/usr/bin/env bash
# Prints the classpath of the Java client: Debian bookworm's jars, one by
# one (Debian's netty-all.jar is an empty shell; the netty modules are
# separate jars). Install them with clients/tools.sh install java.
set -euo pipefail
J=/usr/share/java
jars=(
	protobuf protobuf-util gson grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
	proto-google-common-protos guava perfmark-api geronimo-annotation-1.3-spec
	netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
	netty-handler netty-handler-proxy netty-resolver netty-transport netty-transport-native-unix-common
)
cp=()
for j in "${jars[@]}"; do
	[ -f "$J/$j.jar" ] || { echo "classpath.sh: missing $J/$j.jar" >&2; exit 1; }
	cp+=("$J/$j.jar")
done
(IFS=:; echo "${cp[*]}")
