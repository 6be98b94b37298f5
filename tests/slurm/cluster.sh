#!/usr/bin/env bash
# A throw-away Slurm cluster on 127.0.0.1 for the plugin tests: its own munged (own key and
# socket), slurmctld and slurmd on non-default ports, state and logs in one temp dir, the mlprio
# plugins loaded from the build tree. Source it, call cluster_start PARAMS, and cluster_stop runs
# from an EXIT trap whatever happens (every daemon is stopped by the PID it wrote; every wait is
# bounded). Used by cluster_test.sh and bench/plugin_sbatch_latency.sh.
#   MLPRIO_BUILD    build dir holding lib/slurm/*.so and bin/mlprio_slurm_testmodel (required)
#   CLUSTER_PLUGINS 1 (default) loads both plugins, 0 loads neither (baseline for the bench),
#                   js loads job_submit/mlprio alone (no site factor plugin)
#   CLUSTER_EXTRA_CONF lines appended to slurm.conf (e.g. MaxJobCount=20000 for a load bench)
#   CLUSTER_SCHED_INCLUDE a file of scheduling lines (PriorityType, PriorityWeight*,
#                   SchedulerType/Parameters, the mlprio plugin lines) that slurm.conf Includes
#                   instead of writing its own: the file a deployed-stack replay reads, loaded
#                   unchanged (CLUSTER_PLUGINS and cluster_start's PARAMS are then unused)
#   CL_NODE_CPUS    CPUs the node declares (default: this machine's); more than the machine has
#                   needs SlurmdParameters=config_overrides in CLUSTER_EXTRA_CONF (jobs that
#                   only sleep, to build a queue)
#   CL_PLUGIN_DIR   where slurmctld finds the mlprio plugins (default $MLPRIO_BUILD/lib/slurm)
#   CLUSTER_DBD     1 adds accounting: a private mariadbd (own datadir, socket and port in the
#                   temp dir, run as root), slurmdbd on its own DbdPort, the cluster registered
#                   with sacctmgr, PriorityCalcPeriod=1 (minute, the least);
#                   (AccountingStoragePass names the private munge socket for the slurmdbd
#                   connection); 0 (default) keeps AccountingStorageType=accounting_storage/none
#   MLPRIO_SLURM_PREFIX a Slurm installed from source (scripts/slurm-build-install), e.g.
#                   /var/cache/mlprio/slurm-26.05.3-install: its daemons and commands are used
#                   instead of Debian's (PATH, PluginDir), and the plugins default to the ones
#                   compiled for its version, $MLPRIO_BUILD/lib/slurm-X.Y.Z (scripts/slurm-matrix)

SKIP=77
CL_DIR=""
# Which Slurm: Debian's (default) or one installed from source under MLPRIO_SLURM_PREFIX.
if [ -n "${MLPRIO_SLURM_PREFIX:-}" ]; then
  CL_SBIN="$MLPRIO_SLURM_PREFIX/sbin"
  CL_SLURM_PLUGINS="$MLPRIO_SLURM_PREFIX/lib/slurm"
  export PATH="$MLPRIO_SLURM_PREFIX/bin:$MLPRIO_SLURM_PREFIX/sbin:$PATH"
  CL_SLURM_VERSION=$("$CL_SBIN/slurmctld" -V 2>/dev/null | awk '{print $NF}')
  : "${CL_PLUGIN_DIR:=$MLPRIO_BUILD/lib/slurm-$CL_SLURM_VERSION}"
else
  CL_SBIN=/usr/sbin
  CL_SLURM_PLUGINS=/usr/lib/x86_64-linux-gnu/slurm-wlm
  CL_SLURM_VERSION=$(/usr/sbin/slurmctld -V 2>/dev/null | awk '{print $NF}')
  : "${CL_PLUGIN_DIR:=$MLPRIO_BUILD/lib/slurm}"
fi
# Four consecutive ports (slurmctld, slurmd, slurmdbd, mariadb). Unless CL_PORT_BASE is given,
# a free block is picked at random among CL_PORT_BLOCKS blocks from CL_PORT_FIRST (default: all
# of 20000-29999) so a leftover daemon or a second test run on the same machine cannot collide
# with this one; ctest gives each lane of cluster tests its own part of that range.
_ports_free() {
  local p
  for p in "$1" $(($1 + 1)) $(($1 + 2)) $(($1 + 3)); do
    if command -v ss >/dev/null 2>&1; then
      [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ] || return 1
    else
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && return 1
    fi
  done
  return 0
}
if [ -z "${CL_PORT_BASE:-}" ]; then
  for _try in $(seq 50); do
    CL_PORT_BASE=$((${CL_PORT_FIRST:-20000} + (RANDOM % ${CL_PORT_BLOCKS:-2500}) * 4))
    _ports_free "$CL_PORT_BASE" && break
  done
fi

cluster_skip_unless_possible() {
  if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (slurmd/munged run as root here)"; exit $SKIP; fi
  local bins="munged slurmctld slurmd sbatch sprio scontrol"
  [ "${CLUSTER_DBD:-0}" = 1 ] && bins="$bins slurmdbd sacctmgr sacct mariadbd mariadb mariadb-install-db"
  for b in $bins; do
    command -v "$b" >/dev/null 2>&1 || [ -x "$CL_SBIN/$b" ] ||
      { echo "SKIP: $b not installed (run scripts/bootstrap)"; exit $SKIP; }
  done
  # A cluster without the plugins (CLUSTER_PLUGINS=0: the bench's baseline, the README walkthrough
  # before its build step) does not need them built.
  [ "${CLUSTER_PLUGINS:-1}" = 0 ] || [ -f "$CL_PLUGIN_DIR/site_factor_mlprio.so" ] ||
    { echo "SKIP: plugins not built in $CL_PLUGIN_DIR"; exit $SKIP; }
}

# Wait up to $1 seconds for command "$2..." to succeed.
wait_for() {
  local t=$1; shift
  local end=$(( $(date +%s) + t ))
  while [ "$(date +%s)" -le "$end" ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

# Running and not a zombie (daemons re-parent to a PID 1 that may never reap them).
_alive() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
  [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

_kill_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null)
  _alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do _alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}

cluster_stop() {
  [ -n "$CL_DIR" ] || return 0
  _kill_pidfile "$CL_DIR/slurmd.pid"
  _kill_pidfile "$CL_DIR/slurmctld.pid"
  _kill_pidfile "$CL_DIR/slurmdbd.pid"
  _kill_pidfile "$CL_DIR/mariadb.pid"
  _kill_pidfile "$CL_DIR/munged.pid"
  # From 23.11 "scontrol reconfigure" starts slurmctld and slurmd again under new PIDs; a slurmd
  # that had not written its new PID yet when the test ended outlived it (found after the scope
  # and jobcomp_loop cases on 26.05.3). Whatever still runs with this cluster's slurm.conf, a
  # path no other cluster uses, is stopped too.
  local conf="$CL_DIR/slurm.conf"
  if pgrep -f -- "-f $conf" >/dev/null; then
    pkill -TERM -f -- "-f $conf" 2>/dev/null
    for _ in $(seq 50); do pgrep -f -- "-f $conf" >/dev/null || break; sleep 0.1; done
    pkill -KILL -f -- "-f $conf" 2>/dev/null
  fi
  if [ -n "${KEEP_CLUSTER_DIR:-}" ]; then echo "cluster dir kept: $CL_DIR"; else rm -rf "$CL_DIR"; fi
  CL_DIR=""
}

# Writes slurm.conf with site factor parameters $1.
cluster_write_conf() {
  # Slurm refuses a PluginDir entry that does not exist: the build's plugin folder is listed only
  # once it is there (a cluster without the plugins may start before they are built).
  local plugin_dir_extra=""
  [ -d "$CL_PLUGIN_DIR" ] && plugin_dir_extra=":$CL_PLUGIN_DIR"
  local params=$1 plugins="" acct="AccountingStorageType=accounting_storage/none" none_plugins=""
  if [ "${CLUSTER_DBD:-0}" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((CL_PORT_BASE + 2))
AccountingStoragePass=$CL_DIR/munge.sock
JobAcctGatherType=jobacct_gather/none"
    # The least recalculation period, for the tests; a scheduling file keeps its own.
    [ -z "${CLUSTER_SCHED_INCLUDE:-}" ] && acct="$acct
PriorityCalcPeriod=1"
  fi
  if [ "${CLUSTER_PLUGINS:-1}" = 1 ]; then
    plugins="PrioritySiteFactorPlugin=site_factor/mlprio
PrioritySiteFactorParameters=$params
JobSubmitPlugins=mlprio"
  elif [ "${CLUSTER_PLUGINS:-1}" = js ]; then
    plugins="PrioritySiteFactorParameters=$params
JobSubmitPlugins=mlprio"
  fi
  # switch/none and task/none are gone from newer releases (the default is then no plugin).
  [ -f "$CL_SLURM_PLUGINS/switch_none.so" ] && none_plugins="SwitchType=switch/none"
  [ -f "$CL_SLURM_PLUGINS/task_none.so" ] && none_plugins="$none_plugins
TaskPlugin=task/none"
  local sched="SchedulerType=sched/backfill
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightFairshare=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
$plugins"
  [ -n "${CLUSTER_SCHED_INCLUDE:-}" ] && sched="Include $CLUSTER_SCHED_INCLUDE"
  cat > "$CL_DIR/slurm.conf" <<CONF
ClusterName=mlpriotest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CL_PORT_BASE
SlurmdPort=$((CL_PORT_BASE + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$CL_DIR/munge.sock
CredType=cred/munge
StateSaveLocation=$CL_DIR/state
SlurmdSpoolDir=$CL_DIR/spool
SlurmctldPidFile=$CL_DIR/slurmctld.pid
SlurmdPidFile=$CL_DIR/slurmd.pid
SlurmctldLogFile=$CL_DIR/slurmctld.log
SlurmdLogFile=$CL_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PluginDir=$CL_SLURM_PLUGINS${plugin_dir_extra}
ProctrackType=proctrack/linuxproc
MpiDefault=none
$none_plugins
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc=$CL_DIR/jobcomp.log
$acct
$sched
NodeName=mlprionode NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=${CL_NODE_CPUS:-$(nproc)} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=mlprionode Default=YES MaxTime=INFINITE State=UP
PartitionName=hold Nodes=mlprionode MaxTime=INFINITE State=DOWN
PartitionName=short Nodes=mlprionode MaxTime=30 State=DOWN
PartitionName=deftime Nodes=mlprionode DefaultTime=10 MaxTime=INFINITE State=DOWN
${CLUSTER_EXTRA_CONF:-}
CONF
}

# MariaDB (as root, datadir/socket/port in $CL_DIR) and slurmdbd, the cluster registered. Needs
# munged up. Returns 1 with the logs printed when anything does not come up in time.
_dbd_start() {
  local dbport=$((CL_PORT_BASE + 3)) sock="$CL_DIR/mysql.sock" pw
  pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  mkdir -p "$CL_DIR/db"
  mariadb-install-db --no-defaults --user=root --datadir="$CL_DIR/db" \
    --auth-root-authentication-method=normal --skip-test-db >"$CL_DIR/mariadb-install.out" 2>&1 ||
    { echo "mariadb-install-db failed:"; tail -20 "$CL_DIR/mariadb-install.out"; return 1; }
  /usr/sbin/mariadbd --no-defaults --user=root --datadir="$CL_DIR/db" --socket="$sock" \
    --port="$dbport" --bind-address=127.0.0.1 --pid-file="$CL_DIR/mariadb.pid" \
    --log-error="$CL_DIR/mariadb.err" --skip-name-resolve --innodb-buffer-pool-size=64M \
    >"$CL_DIR/mariadb.out" 2>&1 &
  wait_for 30 mariadb --no-defaults -S "$sock" -u root -e "SELECT 1" ||
    { echo "mariadbd not answering:"; tail -20 "$CL_DIR/mariadb.err"; return 1; }
  mariadb --no-defaults -S "$sock" -u root -e "
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    { echo "cannot create the slurm DB user"; return 1; }
  # slurmdbd reads slurmdbd.conf from the folder of SLURM_CONF; it must be mode 600.
  (umask 077; cat > "$CL_DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$CL_DIR/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((CL_PORT_BASE + 2))
SlurmUser=root
PidFile=$CL_DIR/slurmdbd.pid
LogFile=$CL_DIR/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=$pw
StorageLoc=slurm_acct_db
CONF
  )
  /usr/sbin/slurmdbd >"$CL_DIR/slurmdbd.out" 2>&1 ||
    { echo "slurmdbd failed:"; cat "$CL_DIR/slurmdbd.out"; tail -20 "$CL_DIR/slurmdbd.log"; return 1; }
  wait_for 30 sacctmgr -n list cluster ||
    { echo "slurmdbd not answering:"; tail -20 "$CL_DIR/slurmdbd.log"; return 1; }
  sacctmgr -i add cluster mlpriotest >"$CL_DIR/sacctmgr.out" 2>&1 ||
    { echo "sacctmgr add cluster failed:"; cat "$CL_DIR/sacctmgr.out"; return 1; }
  return 0
}

# cluster_start PARAMS: everything up and the node idle, or returns 1 (logs printed).
cluster_start() {
  CL_DIR=$(mktemp -d /tmp/mlprio-slurm.XXXXXX)
  chmod 755 "$CL_DIR"
  mkdir -p "$CL_DIR/state" "$CL_DIR/spool"
  export SLURM_CONF="$CL_DIR/slurm.conf"
  cluster_write_conf "$1"
  dd if=/dev/urandom of="$CL_DIR/munge.key" bs=1024 count=1 status=none
  chmod 600 "$CL_DIR/munge.key"
  /usr/sbin/munged --force --socket="$CL_DIR/munge.sock" --key-file="$CL_DIR/munge.key" \
    --pid-file="$CL_DIR/munged.pid" --log-file="$CL_DIR/munged.log" \
    --seed-file="$CL_DIR/munged.seed" >"$CL_DIR/munged.out" 2>&1 ||
    { echo "munged failed:"; cat "$CL_DIR/munged.out" "$CL_DIR/munged.log" 2>/dev/null; return 1; }
  wait_for 10 test -S "$CL_DIR/munge.sock" || { echo "munged socket missing"; return 1; }
  if [ "${CLUSTER_DBD:-0}" = 1 ]; then _dbd_start || return 1; fi
  "$CL_SBIN/slurmctld" -c -f "$SLURM_CONF" >"$CL_DIR/slurmctld.out" 2>&1 ||
    { echo "slurmctld failed:"; cat "$CL_DIR/slurmctld.out"; tail -30 "$CL_DIR/slurmctld.log"; return 1; }
  wait_for 20 scontrol ping || { echo "slurmctld not answering:"; tail -30 "$CL_DIR/slurmctld.log"; return 1; }
  "$CL_SBIN/slurmd" -N mlprionode -f "$SLURM_CONF" >"$CL_DIR/slurmd.out" 2>&1 ||
    { echo "slurmd failed:"; cat "$CL_DIR/slurmd.out"; tail -30 "$CL_DIR/slurmd.log"; return 1; }
  wait_for 30 sh -c 'sinfo -h -n mlprionode -p debug -o %t | grep -Eq "^idle"' ||
    { echo "node not idle:"; sinfo; tail -20 "$CL_DIR/slurmd.log"; return 1; }
  return 0
}

cluster_alive() {
  [ -f "$CL_DIR/slurmctld.pid" ] && kill -0 "$(cat "$CL_DIR/slurmctld.pid")" 2>/dev/null &&
    scontrol ping >/dev/null 2>&1
}

# Site factor of a job as sprio shows it.
site_of() { sprio -h -j "$1" -o "%S" 2>/dev/null | tr -d ' '; }
