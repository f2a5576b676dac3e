#!/usr/bin/env bash
# The HTML report in a real browser: headless Chromium loads the fixture report's page
# (written by tests/render_html_fixture.cpp, $AMPCHECK_HTML_FIXTURE) from a file; the
# three plots must be in the DOM with content, and no script error may be recorded
# (window.onerror writes them to <body data-errors>) or logged on the console. A negative
# control, the same page with a deliberate script error, proves that both checks can fail.
set -u
work=${WORK:?set WORK to a scratch directory}
fixture=${AMPCHECK_HTML_FIXTURE:?set AMPCHECK_HTML_FIXTURE to the ampcheck_render_html_fixture binary}
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
  if [[ -n ${CI+set} ]]; then
    echo "FAIL: chromium not installed, and CI must run the browser test (scripts/bootstrap.sh installs it)"
    exit 1
  fi
  echo "SKIPPED: chromium not installed (scripts/bootstrap.sh installs it)"
  exit 0
fi
if [[ ! -x $fixture ]]; then
  echo "FAIL: $fixture is not built (ninja ampcheck_render_html_fixture in the build directory)"
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# load NAME PAGE: the DOM after load in $work/NAME.dom, Chromium's log in $work/NAME.log.
load() {
  local name=$1 page=$2
  # Chromium's own state stays in $WORK: profile, config, cache, crash dumps.
  HOME="$work/home" XDG_CONFIG_HOME="$work/home/config" XDG_CACHE_HOME="$work/home/cache" \
    timeout 120 "$chromium" --headless=new --no-sandbox --disable-gpu --no-first-run \
    --no-default-browser-check --disable-extensions --disable-background-networking \
    --user-data-dir="$work/profile-$name" --enable-logging=stderr --v=0 \
    --dump-dom "file://$page" >"$work/$name.dom" 2>"$work/$name.log"
  local rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q '</html>' "$work/$name.dom"; then
    fail "chromium exit $rc on $page, no DOM; its log:"; tail -20 "$work/$name.log"
    return 1
  fi
}
console_errors() { grep -E 'Uncaught|ERROR:CONSOLE|Failed to load resource' "$1" || true; }

if ! "$fixture" "$work/report.html"; then
  echo "FAIL: $fixture could not write $work/report.html"
  exit 1
fi
# check_page NAME PAGE: the plots are in the DOM with content and nothing erred.
check_page() {
  local name=$1 page=$2 id content svg errors
  load "$name" "$page" || return 0
  # Each plot's <svg> must hold what it plots: series polylines, heatmap cells.
  for check in 'loss-curve:<polyline' 'loss-scale:<polyline' 'exponent-heatmap:class="cell"'; do
    id=${check%%:*} content=${check#*:}
    svg=$(perl -0ne 'print $1 if /(<svg[^>]*\bid="'"$id"'".*?<\/svg>)/s' "$work/$name.dom")
    if [[ -z $svg ]]; then
      fail "$name: no <svg id=\"$id\"> in the DOM"
    elif ! grep -qF -- "$content" <<<"$svg"; then
      fail "$name: <svg id=\"$id\"> has no $content"
    else
      echo "ok: <svg id=\"$id\"> with $(grep -oF -- "$content" <<<"$svg" | wc -l) × $content"
    fi
  done
  if grep -q 'data-errors=' "$work/$name.dom"; then
    fail "script errors recorded: $(grep -o 'data-errors="[^"]*"' "$work/$name.dom")"
  else
    echo "ok: no script error recorded"
  fi
  errors=$(console_errors "$work/$name.log")
  if [[ -n $errors ]]; then fail "console errors:"; echo "$errors"; else echo "ok: no console error"; fi
}

check_page fixture "$work/report.html"
# And the page the CLI writes for a real run.
if [[ -n ${AMPCHECK:-} ]]; then
  if "$AMPCHECK" run --model mlp --level O2 --steps 30 --quiet --html "$work/run.html" >/dev/null; then
    check_page run "$work/run.html"
  else
    fail "ampcheck run --html failed"
  fi
fi

# Negative control: a page with a script error must trip both checks.
sed 's#</body>#<script>ampcheck_deliberately_undefined();</script></body>#' "$work/report.html" >"$work/broken.html"
if load broken "$work/broken.html"; then
  if grep -q 'data-errors="[^"]*ampcheck_deliberately_undefined' "$work/broken.dom"; then
    echo "ok: negative control: the error was recorded in data-errors"
  else
    fail "negative control: a script error was not recorded in data-errors"
  fi
  if console_errors "$work/broken.log" | grep -q ampcheck_deliberately_undefined; then
    echo "ok: negative control: the error was seen on the console"
  else
    fail "negative control: a script error was not seen in chromium's console log"
  fi
fi
echo "html chromium e2e: $fails failed"
[[ $fails -eq 0 ]]
