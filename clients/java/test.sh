#!/usr/bin/env bash
# Compiles the generated Java code and the example client with javac against
# Debian's jars, and runs them against a real batcherd built from this
# checkout: the example client (clients/java/src) and docs/clients.md's
# Java example, as written. Needs: clients/tools.sh install java.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
work=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

cp=$("$here/classpath.sh")
echo "java: compiling the generated code and the example"
javac -nowarn -encoding UTF-8 -d "$work/classes" -cp "$cp" \
	$(find "$here/gen" "$here/src" -name '*.java')

echo "java: building and starting batcherd"
(cd "$root" && "$GO" build -o "$work/batcherd" ./cmd/batcherd)
# The log exists before batcherd starts: the background job opens it
# itself, and the loop below may read it first.
: >"$work/batcherd.log"
"$work/batcherd" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 2>"$work/batcherd.log" &
pid=$!
addr=
for _ in $(seq 300); do # up to 30 s for the "listening" line
	addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$work/batcherd.log")
	[ -n "$addr" ] && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/batcherd.log"; echo "java: batcherd exited"; exit 1; }
	sleep 0.1
done
[ -n "$addr" ] || { echo "java: batcherd did not listen"; exit 1; }

passed=0 failed=0
run() { # NAME CMD...: one test
	local name=$1; shift
	if "$@" >"$work/out" 2>&1; then
		passed=$((passed + 1)); echo "--- PASS: $name"
	else
		failed=$((failed + 1)); echo "--- FAIL: $name"; sed 's/^/    /' "$work/out"
	fi
}

run Example java -cp "$work/classes:$cp" com.batcherhq.batcher.example.Example "$addr"
run ToolsExample java -cp "$work/classes:$cp" com.batcherhq.batcher.example.ToolsExample "$addr"

# docs/clients.md's Java example, as written, pointed at this batcherd.
readme_example() {
	mkdir -p "$work/readme"
	awk '/^```java$/ {on = 1; next} /^```$/ && on {exit} on' "$root/docs/clients.md" |
		sed "s/127\.0\.0\.1:50051/$addr/" >"$work/readme/Quickstart.java"
	grep -q 'class Quickstart' "$work/readme/Quickstart.java" || { echo "no Java example in docs/clients.md"; return 1; }
	javac -nowarn -d "$work/readme" -cp "$work/classes:$cp" "$work/readme/Quickstart.java"
	java -cp "$work/readme:$work/classes:$cp" Quickstart | tee "$work/readme/out"
	[ -s "$work/readme/out" ]
}
run DocsExample readme_example

echo "java: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
