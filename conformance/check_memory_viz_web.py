#!/usr/bin/env python3
"""Opens gpumem's snapshot pickles in torch's web viewer, MemoryViz.js, in headless Chromium.

    python3 conformance/check_memory_viz_web.py MEMORYVIZ_JS D3_JS SNAPSHOT.pickle...

MEMORYVIZ_JS is torch's torch/utils/viz/MemoryViz.js and D3_JS is d3@5's dist/d3.js from the npm
registry (scripts/check-memory-viz-web.sh finds both, outside the repository). MemoryViz.js
imports d3@5, d3-axis@1, d3-scale@1, d3-zoom@1 and d3-brush@1 from cdn.skypack.dev; a temporary
copy takes them from d3@5's bundle instead (which holds d3-axis 1, d3-zoom 1, d3-brush 1 and
d3-scale 2), so that nothing leaves this machine. For every snapshot and every view the viewer
offers (the keys of its `kinds` table), a page built like torch 2.15.0's
`torch.cuda._memory_viz._format_viz` page (the pickle padded to a multiple of 3 bytes, base64,
`add_local_files(files, view)`) is served on 127.0.0.1 and opened through chromedriver, spoken to
in the W3C WebDriver protocol. The view must draw: polygons for the timelines, rectangles for the
allocator state history, with no NaN in their coordinates. Then the page is used as a person
would: the pointer goes over the drawn shapes (which formats their stack frames), and in the state
history every event of the list is clicked (up to 300, evenly spread), which redraws the memory
at that event. No script error may occur: window.onerror, unhandled promise rejections and
console.error are collected by a script that runs before the viewer. Prints one line per
snapshot and view; exits 1 naming the snapshot and view of every failure.

Needs python3's standard library, Debian's chromium and chromium-driver (or the programs named
by WORKBOOK_CHROMIUM and WORKBOOK_CHROMEDRIVER). No torch.
"""

import base64
import functools
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# The import lines of MemoryViz.js, and what the temporary copy says instead: the same names,
# taken from the d3@5 bundle that the page loads first (window.d3).
IMPORTS = {
    'import * as d3 from "https://cdn.skypack.dev/d3@5";': "const d3 = window.d3;",
    'import {axisLeft} from "https://cdn.skypack.dev/d3-axis@1";': "const {axisLeft} = window.d3;",
    'import {scaleLinear} from "https://cdn.skypack.dev/d3-scale@1";':
        "const {scaleLinear} = window.d3;",
    'import {zoom, zoomIdentity} from "https://cdn.skypack.dev/d3-zoom@1";':
        "const {zoom, zoomIdentity} = window.d3;",
    'import {brushX} from "https://cdn.skypack.dev/d3-brush@1";': "const {brushX} = window.d3;",
}

# Runs before anything else on the page: every script error goes into window.__errors.
COLLECT_ERRORS = """
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(
  'error: ' + e.message + ' at ' + e.filename + ':' + e.lineno + ':' + e.colno));
window.addEventListener('unhandledrejection', e => window.__errors.push(
  'unhandled rejection: ' + (e.reason && e.reason.stack ? e.reason.stack : String(e.reason))));
const console_error = console.error;
console.error = (...args) => {
  window.__errors.push('console.error: ' + args.map(String).join(' '));
  console_error(...args);
};
"""

# torch 2.15.0's _memory_viz_template, with MemoryViz.js taken from this folder.
PAGE = """<!DOCTYPE html>
<html>
<head>
<script>{collect}</script>
<script src="d3.js"></script>
</head>
<body>
<script type="module">
import {{add_local_files}} from "./MemoryViz.js"
const local_files = {snapshot}
add_local_files(local_files, {view})
window.__loaded = true;
</script>
</body>
"""

# What the visible view drew: counts, and any NaN in the shapes' coordinates.
MEASURE = """
const view = arguments[0];
const div = [...document.querySelectorAll('body > div')].find(d =>
  (d.getAttribute('style') || '').startsWith('display: float'));
const options = sel => [...sel.options].map(o => o.text);
const selects = [...document.querySelectorAll('body > select')];
const result = {
  loaded: window.__loaded === true,
  errors: window.__errors,
  views: selects.length > 1 ? options(selects[1]) : [],
  view_value: selects.length > 1 ? selects[1].value : null,
  devices: selects.length > 2 ? options(selects[2]) : [],
  found: !!div,
};
if (!div) return result;
const nan = [...div.querySelectorAll('polygon, rect')].filter(e =>
  ['points', 'x', 'y', 'width', 'height'].some(a => (e.getAttribute(a) || '').includes('NaN')));
result.nan = nan.length;
const svgs = div.querySelectorAll('svg');
result.svgs = svgs.length;
if (view === 'Allocator State History') {
  result.rects = svgs.length ? svgs[0].querySelectorAll('g rect').length : 0;
  const events = [...div.querySelectorAll(':scope > div > div > pre')];
  result.events = events.length;
  result.highlighted = events.filter(p =>
    (p.getAttribute('style') || '').includes('background-color')).length;
} else {
  result.polygons = svgs.length ? svgs[0].querySelectorAll('polygon').length : 0;
  result.ticks = svgs.length ? svgs[0].querySelectorAll('g.tick').length : 0;
  result.minimap = svgs.length > 1 ? svgs[1].querySelectorAll('polygon').length : 0;
}
return result;
"""

# Uses the view as a person would; returns how many shapes and events it touched.
INTERACT = """
const view = arguments[0];
const div = [...document.querySelectorAll('body > div')].find(d =>
  (d.getAttribute('style') || '').startsWith('display: float'));
const fire = (el, type) => el.dispatchEvent(new MouseEvent(type, {bubbles: true, view: window}));
const spread = (list, n) => list.length <= n ? list :
  Array.from({length: n}, (_, i) => list[Math.floor(i * (list.length - 1) / (n - 1))]);
let hovered = 0, clicked = 0;
if (view === 'Allocator State History') {
  const events = [...div.querySelectorAll(':scope > div > div > pre')];
  for (const p of spread(events, 300)) { fire(p, 'mousedown'); clicked++; }
  for (const r of spread([...div.querySelectorAll('svg g rect')], 50)) {
    fire(r, 'mouseover'); fire(r, 'mouseleave'); hovered++;
  }
  for (const p of spread(events, 20)) { fire(p, 'mouseover'); fire(p, 'mouseleave'); hovered++; }
} else {
  const plot = div.querySelector('svg');
  for (const p of spread([...plot.querySelectorAll('polygon')], 100)) {
    fire(p, 'mouseover'); fire(p, 'mousedown'); fire(p, 'mouseleave'); hovered++;
  }
}
return {hovered, clicked};
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(env, name):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        sys.exit(f"{name} not found: install Debian's chromium and chromium-driver, or set {env}")
    return path


class WebDriver:
    """A chromedriver process and one headless Chromium session, in the W3C protocol."""

    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen(
            [program("WORKBOOK_CHROMEDRIVER", "chromedriver"), f"--port={self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.call("GET", "/status")["ready"]:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                self.process.kill()
                sys.exit("chromedriver did not answer within 30 s")
            time.sleep(0.1)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900"]
        options = {"args": args, "binary": program("WORKBOOK_CHROMIUM", "chromium")}
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                         method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.load(response)["value"]
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"WebDriver {method} {path}: {e.read().decode()[:500]}") from None

    def open(self, url):
        self.call("POST", f"/session/{self.session}/url", {"url": url})

    def run(self, script, *args):
        return self.call("POST", f"/session/{self.session}/execute/sync",
                         {"script": script, "args": list(args)})

    def close(self):
        try:
            self.call("DELETE", f"/session/{self.session}")
        finally:
            self.process.kill()
            self.process.wait()


def viewer_copy(source, folder):
    """Writes MemoryViz.js into folder with its imports taken from window.d3; returns its views."""
    with open(source, encoding="utf-8") as f:
        text = f.read()
    for line, local in IMPORTS.items():
        if text.count(line) != 1:
            sys.exit(f"{source}: expected the import line {line!r} once; is this MemoryViz.js?")
        text = text.replace(line, local)
    if "https://" in "".join(l for l in text.splitlines() if l.startswith("import")):
        sys.exit(f"{source}: imports something besides d3 from the network")
    kinds = re.search(r"^const kinds = \{\n(.*?)^\};", text, re.S | re.M)
    if not kinds:
        sys.exit(f"{source}: no `const kinds = {{...}};` table of views found")
    views = re.findall(r"^  '([^']+)':", kinds.group(1), re.M)
    with open(os.path.join(folder, "MemoryViz.js"), "w", encoding="utf-8") as f:
        f.write(text)
    return views


def page_for(pickle_path, view):
    """torch 2.15.0's _format_viz page for one snapshot and view."""
    with open(pickle_path, "rb") as f:
        buffer = f.read()
    buffer += b"\x00" * (3 - len(buffer) % 3)
    files = json.dumps([{"name": "snapshot.pickle",
                         "base64": base64.b64encode(buffer).decode("utf-8")}])
    return PAGE.format(collect=COLLECT_ERRORS, snapshot=files, view=repr(view))


def measure_until(driver, view, ready, seconds=60):
    """Measures the page until ready(result) or the time is up; returns the last result."""
    deadline = time.monotonic() + seconds
    while True:
        result = driver.run(MEASURE, view)
        if result["errors"] or result.get("nan") or ready(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def check_view(driver, base_url, folder, pickle_path, view, index):
    """Opens one snapshot in one view; returns (ok, description)."""
    name = f"page-{index}.html"
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(page_for(pickle_path, view))
    driver.open(f"{base_url}/{name}")
    state_history = view == "Allocator State History"

    def drawn(r):
        if not (r["loaded"] and r["found"]):
            return False
        if state_history:
            return r["rects"] > 0 and r["highlighted"] == 1
        return r["polygons"] > 1 and r["minimap"] > 0 and r["ticks"] > 0

    result = measure_until(driver, view, drawn)
    problems = []
    if not result["loaded"]:
        problems.append("the page's module script did not finish (MemoryViz.js or d3 not loaded)")
    elif not result["found"]:
        problems.append(f"no view shown (the view selector offers {result['views']})")
    elif not drawn(result):
        problems.append("the view drew nothing within 60 s")
    if result["loaded"] and result["view_value"] != view:
        problems.append(f"the view selector shows {result['view_value']!r}")
    if result.get("nan"):
        problems.append(f"{result['nan']} shapes with NaN coordinates")
    touched = {}
    if not problems and not result["errors"]:
        touched = driver.run(INTERACT, view)
        after = measure_until(driver, view, drawn, seconds=10)
        if after.get("nan"):
            problems.append(f"{after['nan']} shapes with NaN coordinates after using the view")
        result["errors"] = after["errors"]
    problems += result["errors"]
    if state_history:
        drew = (f"{result.get('rects', 0)} rects (segments and blocks), "
                f"{result.get('events', 0)} events listed")
    else:
        drew = (f"{result.get('polygons', 0)} polygons, {result.get('ticks', 0)} axis ticks, "
                f"{result.get('minimap', 0)} minimap polygon")
    if touched:
        drew += (f"; {touched['hovered']} shapes hovered"
                 + (f", {touched['clicked']} events clicked" if touched["clicked"] else ""))
    return not problems, drew + ("" if not problems else "; " + "; ".join(problems))


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[1])
    source, d3, *snapshots = sys.argv[1:]
    folder = tempfile.mkdtemp(prefix="memoryviz-")
    failures = []
    try:
        views = viewer_copy(source, folder)
        shutil.copy(d3, os.path.join(folder, "d3.js"))
        print(f"MemoryViz.js offers {len(views)} views: {', '.join(views)}")
        handler = functools.partial(QuietHandler, directory=folder)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base_url = f"http://127.0.0.1:{server.server_address[1]}"
        driver = WebDriver()
        try:
            index = 0
            for path in snapshots:
                for view in views:
                    index += 1
                    ok, detail = check_view(driver, base_url, folder, path, view, index)
                    label = f"{os.path.basename(path)} × {view}"
                    print(f"{'ok  ' if ok else 'FAIL'} {label}: {detail}", flush=True)
                    if not ok:
                        failures.append(label)
        finally:
            driver.close()
            server.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failed: {'; '.join(failures)}")
        sys.exit(1)
    print(f"all {len(snapshots) * len(views)} snapshot views rendered with no script error")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the temporary folder; JavaScript as text/javascript; no request log."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript"}

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    main()
