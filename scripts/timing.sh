# Step timing for the test scripts (sourced by test-all, test-ffi, test-redis,
# test-server and test-python): `lap NAME` stops the clock of the step running
# and starts NAME's; `print_times TITLE RC` prints how long each step took. A
# script calls print_times from its own EXIT trap, so the table is printed
# whether it passed or failed, and a slow CI run shows where its time went.
# Sourcing it also sets an ERR trap that names the command that stopped the
# script: under `set -e` a failing check otherwise ends the run without a word.
TIMES=()
CURRENT=""
STARTED=$SECONDS
lap() {
  if [ -n "$CURRENT" ]; then TIMES+=("$(printf '%5d s  %s' $((SECONDS - STARTED)) "$CURRENT")"); fi
  CURRENT="$*"
  STARTED=$SECONDS
}
print_times() {
  lap ""
  printf '\n%s time per step (exit %d, %d s in all)\n' "$1" "$2" "$SECONDS"
  printf '%s\n' "${TIMES[@]}"
}
trap 'echo "${0##*/}: line $LINENO: \`$BASH_COMMAND\` failed (exit $?)" >&2' ERR
