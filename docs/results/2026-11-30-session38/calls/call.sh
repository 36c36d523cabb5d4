#!/usr/bin/env bash
# scratch/call.sh NAME SECONDS VAR=val ... : scripts/gpu_check.sh bounded by SECONDS, its stdout and
# logs packed into $OUT/NAME.tgz; prints the stdout's tail.
name=$1; secs=$2; shift 2
d=/tmp/o/$name; rm -rf "$d"; mkdir -p "$d"
env OUT="$d" "$@" timeout -k 10 "$secs" bash scripts/gpu_check.sh > "$d/stdout.txt" 2>&1; rc=$?
tail -n "${TAIL:-45}" "$d/stdout.txt"
tar czf "$OUT/$name.tgz" -C /tmp/o "$name"
echo "call $name rc=$rc"
