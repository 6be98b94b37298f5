# Writes a sacct --parsable2 dump for the refuse_xgb cluster test: 8 users over 20 days, 1,200
# jobs; root's jobs fail 85% of the time, everyone else's 3% (seeded: the same file every run).
# An XGBoost failure model trained on it can only learn "this user's history fails", so a job
# it refuses must be explained by history features.
BEGIN {
  srand(7)
  print "JobID|JobIDRaw|JobName|User|Group|Account|Partition|QOS|Submit|Start|End|Elapsed|ElapsedRaw|Timelimit|TimelimitRaw|State|ExitCode|AllocCPUS|ReqCPUS|NNodes|ReqNodes|ReqMem|ReqTRES|AllocTRES|MaxRSS"
  split("root alice bob carol dave erin frank grace", users, " ")
  t = 1700000000
  for (i = 1; i <= 1200; i++) {
    t += int(600 + rand() * 600)
    u = users[1 + int(rand() * 8)]
    limit = 10 * (1 + int(rand() * 12))            # minutes
    run = int(limit * 60 * (0.2 + 0.6 * rand()))
    fails = (u == "root") ? (rand() < 0.85) : (rand() < 0.03)
    state = fails ? "FAILED" : "COMPLETED"
    code = fails ? "1:0" : "0:0"
    if (fails) run = int(5 + rand() * 60)
    cpus = 1 + int(rand() * 4)
    printf "%d|%d|job%d|%s|users|acct|debug|normal|%s|%s|%s|%s|%d|%s|%d|%s|%s|%d|%d|1|1|1G|billing=%d,cpu=%d,mem=1G,node=1|billing=%d,cpu=%d,mem=1G,node=1|\n",
      i, i, i % 5, u, ts(t), ts(t + 30), ts(t + 30 + run), hms(run), run, hms(limit * 60), limit,
      state, code, cpus, cpus, cpus, cpus, cpus, cpus
  }
}
function ts(s) { return strftime("%Y-%m-%dT%H:%M:%S", s, 1) }
function hms(s) { return sprintf("%02d:%02d:%02d", int(s / 3600), int(s / 60) % 60, s % 60) }
