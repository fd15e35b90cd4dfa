#!/usr/bin/env bash
# A new user's first hour, exactly as the README shows it (issue 28): a clone of this
# checkout's HEAD in a fresh directory, with ../shared beside it; the README's install-and-demo
# command (a fresh virtual environment); then the README's tutorial block, read from the README
# itself so the two cannot drift, run by bash with -e. Prints each command's wall seconds and
# the totals, and checks that the files the tutorial promises exist. Then runs the tutorial's
# `pmd` once more (into another BED), its kernels compiled by then, and prints its timing line.
#
#     scripts/first_hour.sh [WORKDIR]        (default: a new temporary directory)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(cd "$REPO/../shared" && pwd)
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
[ -e "$WORK/streambhmm" ] && { echo "$WORK/streambhmm exists: give an empty WORKDIR" >&2; exit 2; }

git clone --quiet "$REPO" "$WORK/streambhmm"
ln -s "$SHARED" "$WORK/shared"
cd "$WORK/streambhmm"

readme_block() {  # the first lines between a start and an end pattern (awk regexes), of README.md or stdin
    # reads its input to the end: an early exit would cut off a pipe feeding it (SIGPIPE under pipefail)
    awk -v start="$1" -v end="$2" 'on && $0 ~ end {on = 0; done = 1; next} on; !done && $0 ~ start {on = 1}' \
        "${3:--}"
}
INSTALL=$(grep -m1 '^    python3 -m venv .venv && . .venv/bin/activate && pip install \. && streambhmm demo$' README.md \
          | sed 's/^    //')
TUTORIAL=$(readme_block '^<!-- --8<-- \[start:tutorial\]' '^<!-- --8<-- \[end:tutorial\]' README.md \
           | readme_block '^```sh$' '^```$')
[ -n "$INSTALL" ] && [ -n "$TUTORIAL" ] || { echo "the README's install command or tutorial block is missing" >&2; exit 1; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

echo "== install and demo: $INSTALL"
t0=$(now)
bash -c "$INSTALL" > "$WORK/install.log" 2>&1 || { tail -30 "$WORK/install.log"; exit 1; }
t1=$(now)
echo "   $(elapsed "$t0" "$t1") s (log: $WORK/install.log)"

echo "== the tutorial"
# every command traced with its start time; the tutorial's own `cd "$(mktemp -d)"` is
# recorded so the outputs can be checked
cat > "$WORK/tutorial.sh" <<EOF
set -eo pipefail
. .venv/bin/activate
PS4='+\$(date +%s.%N) '
exec 9>"$WORK/trace.log"
BASH_XTRACEFD=9
set -x
$TUTORIAL
set +x
pwd > "$WORK/tutorial.dir"
EOF
t2=$(now)
bash "$WORK/tutorial.sh" > "$WORK/tutorial.log" 2>&1 || { tail -40 "$WORK/tutorial.log"; exit 1; }
t3=$(now)
echo "   $(elapsed "$t2" "$t3") s (log: $WORK/tutorial.log)"
# seconds of each streambhmm command: from its trace line to the next one's (or the end)
awk -v end="$t3" '/^\+[0-9]/ {t = substr($1, 2); if (cmd != "") printf "   %7.1f s  %s\n", t - start, cmd;
                              cmd = ""; if ($2 == "streambhmm") {start = t; $1 = ""; cmd = substr($0, 2)}}
                  END {if (cmd != "") printf "   %7.1f s  %s\n", end - start, cmd}' "$WORK/trace.log" \
    | cut -c1-150

DIR=$(cat "$WORK/tutorial.dir")
missing=0
for f in counts.zarr imr90.pmd.bed imr90.hmr.bed model.json chr21.IMR90.methylation.bw report/index.html dmr.bed \
         dmr.tsv; do
    [ -e "$DIR/$f" ] || { echo "missing: $DIR/$f" >&2; missing=1; }
done
[ "$missing" = 0 ]
echo "== total: $(elapsed "$t0" "$t3") s (install and demo $(elapsed "$t0" "$t1") s, tutorial $(elapsed "$t2" "$t3") s)"
echo "   outputs in $DIR"

PMD=$(grep -m1 '^streambhmm pmd .*--output imr90.pmd.bed' <<< "$TUTORIAL") \
    || { echo "the tutorial's pmd command is missing" >&2; exit 1; }
echo "== the tutorial's pmd again: ${PMD/imr90.pmd.bed/again.pmd.bed}"
(cd "$DIR" && . "$WORK/streambhmm/.venv/bin/activate" && ${PMD/imr90.pmd.bed/again.pmd.bed} -q) | tail -1 \
    | sed 's/^/   /'
