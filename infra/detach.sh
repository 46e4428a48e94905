# Sourced by the infra scripts. `detached CMD ARGS...` runs CMD with every file descriptor above 2
# that this shell inherited closed: a daemon started from a shell that holds a lock (`flock`) or
# the write end of a pipe would otherwise keep it for as long as the daemon lives, so the lock is
# never released and a reader of the pipe never sees its end. Called in a subshell already (a
# background job, `detached CMD &`), it closes them in that subshell, which then becomes CMD: a
# further subshell would leave the background job's shell waiting for CMD with the descriptors open.
detached() {
  if [ "$BASHPID" != "$$" ]; then _detach_here "$@"; else ( _detach_here "$@" ); fi
}

_detach_here() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
  if [ "$(type -t "$1")" = file ]; then exec "$@"; else "$@"; fi
}
