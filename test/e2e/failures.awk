# failures.awk: which of a go test -v log's messages say why a test failed.
# (A message is a line "    file.go:N: text" under its test's "=== NAME".)
#
# go test marks no line as a failure, and -v interleaves the parallel
# tests' messages (a "=== RUN/CONT/NAME T" line says whose lines follow).
# A message is a failure when the source line it names (file_test.go:N,
# read from SRC, the test package's directory) calls t.Errorf, t.Error,
# t.Fatalf or t.Fatal: a helper that calls them without t.Helper() names
# its own line, and a t.Fatalf is its test's last message. Heuristic
# lines (want, refused without, ...) catch what a t.Helper() reported at
# its caller's line.
#
#   awk -v SRC=dir -v MODE=stream  -v KEEP=regex: copies the lines that
#     match KEEP as they come, and after each "--- FAIL: T" line, T's
#     failures and its last 3 messages (what CI shows of a long output is
#     its start and its end; a failed test's line is near the start);
#   awk -v SRC=dir -v MODE=summary: for each failed test, its last 25
#     messages, then its failures (so that the end of the output says why).
BEGIN {
  cmd = "ls " SRC "/*_test.go"
  while ((cmd | getline f) > 0) {
    base = f; sub(/.*\//, "", base); ln = 0
    while ((getline line < f) > 0) src[base, ++ln] = line
    close(f)
  }
  heuristic = "want|refused without|was admitted|NOT REFUSED|still there|not found|[Ee]rror|panic"
}
function failure(msg,   parts) {
  if (!match(msg, /[A-Za-z0-9_]+\.go:[0-9]+: /)) return 0
  split(substr(msg, RSTART, RLENGTH - 2), parts, ":")
  # The testing package's own words (testing.go: a panic, a FailNow in
  # the wrong goroutine, a TempDir that could not be removed) fail a test.
  if (parts[1] !~ /_test\.go$/) return 1
  if (src[parts[1], parts[2]] ~ /(^|[^A-Za-z0-9_])t\.(Errorf|Error|Fatalf|Fatal)\(/) return 1
  return msg ~ heuristic ? 2 : 0
}
function report(t, last,   i, from, k) {
  if (!(t in n)) return
  k = 0
  for (i = 1; i <= n[t]; i++) if (failure(out[t, i]) == 1) { print "    !! " out[t, i] more[t, i]; k++ }
  if (k == 0) for (i = 1; i <= n[t]; i++) if (failure(out[t, i]) == 2 && ++k <= 10) print "    ?! " out[t, i] more[t, i]
  if (last == 0) return
  from = n[t] > last ? n[t] - last + 1 : 1
  print "    .. " t "'s last " (n[t] - from + 1) " of " n[t] " messages:"
  for (i = from; i <= n[t]; i++) print "       " out[t, i]
}
/^=== (RUN|CONT|NAME) / { cur = $3 }
/^=== PAUSE / || /^(FAIL|ok|PASS)/ { cur = "" }
cur != "" && /^ +[A-Za-z0-9_]+\.go:[0-9]+: / { n[cur]++; out[cur, n[cur]] = substr($0, 1, 400) }
# A message's next lines (kubectl's output under an Errorf), for its
# failures: on one line, up to 600 characters.
cur != "" && n[cur] > 0 && /^        / && !/^ +[A-Za-z0-9_]+\.go:[0-9]+: / {
  l = $0; sub(/^ +/, "", l)
  if (length(more[cur, n[cur]]) < 600) more[cur, n[cur]] = substr(more[cur, n[cur]] " ⏎ " l, 1, 600)
}
MODE == "stream" && $0 ~ KEEP { print; fflush() }
/^ *--- FAIL: / {
  failed[$3] = 1
  if (MODE == "stream") { report($3, 3); fflush() }
}
END {
  if (MODE != "summary") exit
  for (t in failed) {
    if (!(t in n)) continue
    print "---- why " t " failed: its last messages, then its failures (!! an Errorf or Fatalf line, ?! one that reads like it)"
    from = n[t] > 25 ? n[t] - 24 : 1
    for (i = from; i <= n[t]; i++) if (!failure(out[t, i])) print "       " out[t, i]
    report(t, 0)
  }
}
