#!/usr/bin/env bash
# The Debian bookworm packages that generate and test the Python and Java
# clients, in one place.
#
#   clients/tools.sh generate       ensure protoc and the gRPC plugins are the
#                                   pinned ones; install them when missing
#                                   (as root), or fail saying what to install
#   clients/tools.sh check KIND     exit 0 when KIND's (python, java) test
#                                   toolchain is present, 1 saying what is missing
#   clients/tools.sh install KIND...  apt-get install the KINDs' packages
set -euo pipefail

# Versions the generated code is pinned to (Debian bookworm's).
PROTOC_VERSION=3.21.12
GRPC_PYTHON_VERSION=1.51.1
GRPC_JAVA_VERSION=1.41.3

pkgs_generate="protobuf-compiler libprotobuf-dev protobuf-compiler-grpc protobuf-compiler-grpc-java-plugin"
pkgs_python="python3-grpcio python3-protobuf python3-pytest python3-pip python3-setuptools python3-wheel openssl" # openssl: test_tls.py makes its certificate with it
pkgs_java="openjdk-17-jdk-headless libgrpc-java libprotobuf-java libgoogle-gson-java libgoogle-common-protos-java libguava-java libnetty-java libperfmark-java libgeronimo-annotation-1.3-spec-java"

die() { echo "clients/tools.sh: $*" >&2; exit 1; }

# installed PKG prints PKG's Debian version, or nothing.
installed() {
	dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2>/dev/null | awk '$1 == "installed" {print $2}'
}

missing() {
	local p out=()
	for p in "$@"; do [ -n "$(installed "$p")" ] || out+=("$p"); done
	echo "${out[*]:-}"
}

apt_install() {
	[ "$#" -gt 0 ] || return 0
	if [ "$(id -u)" != 0 ]; then
		die "missing Debian packages: $*; run: sudo apt-get update && sudo apt-get install -y $*"
	fi
	command -v apt-get >/dev/null || die "missing Debian packages and no apt-get: $*"
	echo "installing Debian packages: $*"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# want PKG VERSION fails unless PKG's upstream version is VERSION.
want() {
	local v
	v=$(installed "$1")
	case "$v" in
	"$2" | "$2"-* | "$2"+* | *:"$2"-* | *:"$2"+*) ;;
	*) die "$1 is $v, want $2 (Debian bookworm's): the generated code would differ" ;;
	esac
}

case "${1:-}" in
generate)
	command -v dpkg-query >/dev/null ||
		die "generating the Python and Java clients needs Debian bookworm's packages: $pkgs_generate"
	# shellcheck disable=SC2046
	apt_install $(missing $pkgs_generate)
	want protobuf-compiler "$PROTOC_VERSION"
	want protobuf-compiler-grpc "$GRPC_PYTHON_VERSION"
	want protobuf-compiler-grpc-java-plugin "$GRPC_JAVA_VERSION"
	[ "$(command -v protoc)" = /usr/bin/protoc ] ||
		die "protoc on PATH is $(command -v protoc), not Debian's /usr/bin/protoc"
	;;
check)
	kind=${2:?usage: check python|java}
	var="pkgs_$kind"
	command -v dpkg-query >/dev/null || { echo "no dpkg: cannot find Debian's $kind toolchain"; exit 1; }
	m=$(missing ${!var})
	[ -z "$m" ] || { echo "missing Debian packages: $m"; exit 1; }
	;;
install)
	shift
	all=()
	for kind in "$@"; do var="pkgs_$kind"; all+=(${!var}); done
	# shellcheck disable=SC2046
	apt_install $(missing "${all[@]}")
	;;
*)
	die "usage: $0 generate | check python|java | install python|java|generate..."
	;;
esac
