#!/bin/sh
# Fails when a committed object under bpf/obj is not byte-identical to what
# its sources compile to now, i.e. someone changed C and did not run `make bpf`.
# Byte identity holds because the build is deterministic for a given clang
# (checked by building twice); a different clang version also fails here,
# which is intended: the committed object must come from the pinned compiler.
set -eu
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

make -s OBJDIR="$tmp/a" bpf >/dev/null
make -s OBJDIR="$tmp/b" bpf >/dev/null

status=0
for prog in "$@"; do
	if ! cmp -s "$tmp/a/$prog.o" "$tmp/b/$prog.o"; then
		echo "verify: $prog.o: clang output is not deterministic" >&2
		status=1
	fi
	if ! cmp -s "$tmp/a/$prog.o" "obj/$prog.o"; then
		echo "verify: bpf/obj/$prog.o is stale: run 'make -C bpf' and commit it" >&2
		status=1
	fi
done
[ $status -eq 0 ] && echo "verify: bpf objects up to date ($*)"
exit $status
