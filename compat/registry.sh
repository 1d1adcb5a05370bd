# Sourced by the compat scripts. The npm registry is the one thing they need that this machine does not
# hold: a command that fails with one of npm's network errors (a connection refused, reset or timed out,
# a name that did not resolve, a 5xx or 429 from the registry) runs again, at most twice, after a pause.
# Any other failure fails at once, so a real problem (a peer conflict, a missing version) is never retried.
REGISTRY_ERRORS='npm (error|ERR!) (code (ECONNRESET|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ENOTFOUND|EPIPE|ESOCKETTIMEDOUT|E429|E5[0-9][0-9])|network)'

registry_retry() { # log file (the last try's output), command...
  local log="$1" attempt
  shift
  for attempt in 1 2 3; do
    if "$@" >"$log" 2>&1; then return 0; fi
    if [ "$attempt" = 3 ] || ! grep -qE "$REGISTRY_ERRORS" "$log"; then return 1; fi
    echo "compat: the npm registry failed ($(grep -oE "$REGISTRY_ERRORS" "$log" | head -n 1));" \
      "running it again in $((attempt * 15)) s: $*" >&2
    sleep $((attempt * 15))
  done
}
