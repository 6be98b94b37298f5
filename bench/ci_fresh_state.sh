#!/usr/bin/env bash
# Times `.ci/run` from the state a new machine of this kind starts in: undoes what an earlier
# `.ci/run` (or scripts/bootstrap) left on the machine, clones COMMIT afresh with ../shared beside
# it, and runs `CI=true .ci/run` under /usr/bin/time -v. The stage lines and the total are in
# WORKDIR/log.txt; bench/RESULTS.md, "CI wall time", records the runs.
#
#   bench/ci_fresh_state.sh [COMMIT [WORKDIR]]      (default HEAD, /tmp/ci-fresh)
#
# What it removes: the Debian packages that scripts/bootstrap installed (read from apt's history:
# the Install lines of its `apt-get install -y -q --no-install-recommends` runs) with the
# dependencies only they needed, apt's downloaded archives, /var/cache/mlprio (Slurm source trees
# and builds), what the README walkthrough installs (/usr/local/lib/mlprio, /usr/local/bin/mlprio-*,
# /etc/slurm/mlprio) and any daemon a test left running. apt's package lists stay: a new machine
# has them. Run as root, on a machine you can give back to that state; it uninstalls packages.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=$(git -C "$REPO" rev-parse "${1:-HEAD}")
WORK=${2:-/tmp/ci-fresh}
[ "$(id -u)" = 0 ] || { echo "ci_fresh_state: run as root (it removes packages)" >&2; exit 2; }
SHARED=$(cd "$REPO/../shared" 2>/dev/null && pwd) ||
  { echo "ci_fresh_state: no ../shared beside $REPO" >&2; exit 2; }

for d in slurmctld slurmd slurmdbd slurmstepd munged mariadbd mysqld; do
  pkill -x "$d" 2>/dev/null || true
done
sleep 1

mapfile -t pkgs < <(awk '
  /^Commandline: apt-get install -y -q --no-install-recommends/ { take = 1; next }
  /^Commandline:/ { take = 0 }
  take && /^Install:/ {
    sub(/^Install: /, "")
    n = split($0, parts, /\), /)
    for (i = 1; i <= n; i++) { split(parts[i], f, /[: ]/); print f[1] }
  }' /var/log/apt/history.log 2>/dev/null | sort -u)
installed=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && installed+=("$p")
done
echo "ci_fresh_state: purging ${#installed[@]} packages bootstrap installed"
if [ "${#installed[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${installed[@]}" >/tmp/ci-fresh-purge.log 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -q >>/tmp/ci-fresh-purge.log 2>&1
fi
apt-get clean
rm -rf /var/cache/mlprio /usr/local/lib/mlprio /etc/slurm/mlprio
rm -f /usr/local/bin/mlprio-*

rm -rf "$WORK"
mkdir -p "$WORK"
git clone -q "$REPO" "$WORK/main"
git -C "$WORK/main" checkout -q "$COMMIT"
ln -s "$SHARED" "$WORK/shared"
echo "ci_fresh_state: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc), commit $COMMIT"
cd "$WORK/main"
rc=0
CI=true /usr/bin/time -v bash .ci/run >"$WORK/log.txt" 2>&1 || rc=$?
grep -E '^== stage|^ *(stage|total|Elapsed)' "$WORK/log.txt" | tail -30 || true
echo "ci_fresh_state: .ci/run exited $rc (log $WORK/log.txt)"
exit "$rc"
