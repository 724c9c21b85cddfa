#!/bin/sh
# The control loop of a repository box (sandbox/repo/box.py is the host side). It runs as the box's main
# process in the task's own image, which needs only a POSIX shell, `timeout` and `head` (coreutils or
# busybox): no exec per request (podman exec is slow and leaks conmon processes), no network.
#
# Two host folders. /run/cua/in is read-only here: the host writes a request <id> there (<id>.sh, the script;
# <id>.limits, "<timeout_s> <output_bytes>"; <id>.data, a file's content), then the line "<id>" into the FIFO
# `requests`. /run/cua/out takes the answer: <id>.out, the first <output_bytes> of the script's stdout and
# stderr, then <id>.rc, its exit status, renamed into place last. The host trusts neither (box.py).
# The script's whole output goes to /run/cua-tmp, a private tmpfs of limited size: only the output is capped,
# never a file the script writes, and a background job that keeps writing holds no request up.
in=/run/cua/in
out=/run/cua/out
log=/run/cua-tmp/output
answer() {  # runs request $1 and writes its answer
  read -r seconds bytes < "$in/$1.limits"
  rm -f "$log"
  timeout -k 2 "$seconds" sh "$in/$1.sh" < /dev/null > "$log" 2>&1
  rc=$?
  # <>: whatever the command left at these names (a FIFO, a link) neither blocks the loop nor is removed;
  # the host refuses an answer that is not the plain file written here
  head -c "$bytes" "$log" 1<> "$out/$1.out"
  rm -f "$log"
  echo "$rc" 1<> "$out/$1.rc.tmp"
  mv -f "$out/$1.rc.tmp" "$out/$1.rc"
}
exec 3<>"$in/requests"  # read-write: the FIFO never reports end-of-file between requests
# the host's start script (the starting tree; R2E-Gym's harness hidden), before any request
if [ -f "$in/start.sh" ]; then answer start; fi
: > "$out/ready"
while read -r id <&3; do
  case "$id" in *[!A-Za-z0-9]* | "") continue ;; esac
  answer "$id"
done
