#!/usr/bin/env python3
"""The HTML report (`memstep report --format html`) in a real browser.

Headless Chromium (Debian's `chromium`, installed by scripts/install-deps.sh)
opens the page from a file; the test reads back what the page's script wrote
into the DOM (data-* attributes, texts) and compares it with the JSON report
of the same trace; it fails on any console message of level error (uncaught
exceptions, failed loads: the page must load nothing) and on any error the
page's own error handler counted; it saves a screenshot and checks it is a
PNG of the window's size.

  html_browser_test.py MEMSTEP EXPORT_TRACE_WRITER HTML_TEST_WRITER
      the export trace (values, gates, screenshot), the hostile trace
      (names with <script>, </script>, quotes: shown as text, nothing runs)
      and a report with nothing in it
  html_browser_test.py --scale MEMSTEP EXPORT_TRACE_WRITER HTML_TEST_WRITER
      a report of 100,000 steps and 50,000 sites must render in under 3 s

A missing chromium is a failure, not a skip. MEMSTEP_HTML_OUT=DIR keeps the
pages and screenshots there.
"""

import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RENDER_LIMIT_MS = 3000
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


class Dom(html.parser.HTMLParser):
    """Every element's tag and attributes, in order, and the text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements = []
        self.text = []
        self.title = ''  # the document's <title> (SVG elements have titles too)
        self._in_title = False
        self._titles = 0

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag == 'title':
            self._titles += 1
            self._in_title = self._titles == 1

    def handle_endtag(self, tag):
        if tag == 'title':
            self._in_title = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_title:
            self.title += data

    def find(self, tag=None, **attrs):
        out = []
        for t, a in self.elements:
            if tag is not None and t != tag:
                continue
            if all(a.get(k.replace('_', '-')) == v if v is not True else k.replace('_', '-') in a
                   for k, v in attrs.items()):
                out.append(a)
        return out


def chromium():
    path = shutil.which('chromium')
    if path is None:
        print('FAIL  chromium is not installed (scripts/install-deps.sh installs it)')
        sys.exit(1)
    return path


def run_chromium(page, out_dir, extra, timeout=120):
    """Runs headless Chromium on `page`; returns (stdout, console errors, seconds)."""
    profile = tempfile.mkdtemp(dir=out_dir, prefix='profile-')
    cmd = [chromium(), '--headless=new', '--no-sandbox', '--disable-gpu',
           '--no-first-run', '--no-default-browser-check', '--disable-extensions',
           '--user-data-dir=' + profile, '--enable-logging=stderr', '--v=0'] + extra + [
           'file://' + os.path.abspath(page)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - t0
    shutil.rmtree(profile, ignore_errors=True)
    # Console messages: '[...:INFO:CONSOLE:LINE] "message", source: URL (LINE)',
    # whatever their level (Chromium logs them all at INFO): uncaught
    # exceptions, console.error, refused loads. The page logs nothing, so any
    # console message fails.
    errors = [line for line in p.stderr.splitlines() if 'CONSOLE' in line or 'Uncaught' in line]
    if p.returncode != 0:
        errors.append('chromium exited with %d: %s' % (p.returncode, p.stderr[-2000:]))
    return p.stdout, errors, seconds


def dump_dom(page, out_dir, budget_ms=5000):
    out, errors, seconds = run_chromium(
        page, out_dir, ['--virtual-time-budget=%d' % budget_ms, '--dump-dom'])
    dom = Dom()
    dom.feed(out)
    return dom, errors, seconds


def screenshot(page, out_dir, png):
    _, errors, _ = run_chromium(page, out_dir, ['--virtual-time-budget=5000',
                                                '--window-size=1400,1000', '--screenshot=' + png])
    ok = os.path.exists(png)
    data = open(png, 'rb').read() if ok else b''
    check(data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 20000,
          'screenshot %s is a PNG of %d bytes' % (png, len(data)))
    if len(data) >= 24:
        w, h = int.from_bytes(data[16:20], 'big'), int.from_bytes(data[20:24], 'big')
        check((w, h) == (1400, 1000), 'screenshot is 1400x1000 (got %dx%d)' % (w, h))
    check(not errors, 'no console errors while taking the screenshot: %s' % errors)


def memstep(binary, *args, expect=0):
    p = subprocess.run([binary, 'report'] + list(args), capture_output=True, text=True)
    check(p.returncode == expect, 'memstep report %s exits %d (got %d: %s)' %
          (' '.join(args), expect, p.returncode, p.stderr.strip()[-500:]))


def detector_self_check(out_dir):
    """The console-error check must see an uncaught exception and console.error."""
    bad = os.path.join(out_dir, 'broken.html')
    with open(bad, 'w') as f:
        f.write('<!DOCTYPE html><html><body><script>console.error("planted error");'
                'null.planted;</script></body></html>')
    _, errors, _ = run_chromium(bad, out_dir, ['--virtual-time-budget=1000', '--dump-dom'])
    check(any('planted error' in e for e in errors) and any('Uncaught' in e for e in errors),
          'the console-error check catches a planted console.error and exception (%d lines)' %
          len(errors))


def rendered(dom, errors, what):
    body = dom.find('body')
    check(bool(body) and body[0].get('data-rendered') == '1',
          '%s: the script ran to its end (data-rendered)' % what)
    check(bool(body) and body[0].get('data-errors') == '0',
          '%s: the page counted no errors (%s)' % (what, body and body[0].get('data-error-text')))
    check(not errors, '%s: no console errors: %s' % (what, errors))
    return body[0] if body else {}


def export_trace_checks(args, out_dir):
    trace = os.path.join(out_dir, 'export.trace')
    subprocess.run([args.writer, trace], check=True)
    page = os.path.join(out_dir, 'export.html')
    js = os.path.join(out_dir, 'export.json')
    gates = ['--fail-on', 'growth > 32KiB/step', '--fail-on', 'peak(forward) > 1GiB']
    memstep(args.memstep, trace, '--no-symbolize', '--format', 'html', '-o', page, *gates, expect=3)
    memstep(args.memstep, trace, '--no-symbolize', '--format', 'json', '-o', js, *gates, expect=3)
    report = json.load(open(js))
    html_text = open(page, encoding='utf-8').read()
    check(not re.search(r'(src|href)\s*=|https?://(?!www\.w3\.org/2000/svg)', html_text),
          'the page references nothing outside itself')
    dom, errors, seconds = dump_dom(page, out_dir)
    print('      chromium took %.2f s' % seconds)
    rendered(dom, errors, 'export trace')

    # What needs attention: the failed gate, the alert, the failed allocation.
    att = dom.find('section', id='attention')
    failed = sum(1 for g in report['gates'] if not g['passed'])
    check(bool(att) and att[0].get('data-failed-gates') == str(failed) and failed == 1,
          'attention: %d failed gate (JSON: %d)' % (failed, failed))
    check(bool(dom.find('li', data_gate='growth > 32KiB/step')), 'the failed gate is listed')
    check(bool(att) and att[0].get('data-alerts') == str(len(report['alerts'])),
          'attention: %d alerts as in the JSON report' % len(report['alerts']))

    # Memory over steps: the chart's host peak is the largest step peak.
    pid = report['processes'][0]['pid']
    peak = max(s['peak_bytes'] for s in report['steps'] if s['pid'] == pid)
    chart = dom.find('div', data_pid=str(pid))
    check(bool(chart) and chart[0].get('data-host-peak') == str(peak),
          'chart host peak %s = max step peak_bytes %d' % (chart and chart[0].get('data-host-peak'),
                                                           peak))
    check(bool(chart) and chart[0].get('data-steps') == str(
        sum(1 for s in report['steps'] if s['pid'] == pid)), 'chart has every step')
    check(len(dom.find('line', data_kind='alert')) == len(report['alerts']),
          'one alert marker per alert')
    check(len(dom.find('path', data_series=True)) >= 4,
          'host live, host peak, RSS and device series drawn (%d paths)' %
          len(dom.find('path', data_series=True)))

    # Stage peak bars: every host and device stage peak, with its max.
    bars = dom.find('g', **{'class': 'bar'})
    want = sorted((p['stage'], str(p['peak_bytes_max'])) for p in report['stage_peaks'])
    got = sorted((b.get('data-stage'), b.get('data-max')) for b in bars)
    check(got == want, 'stage peak bars %s = JSON stage_peaks %s' % (got, want))

    # Growth table: the LEAK site first, with its rate.
    rows = dom.find('tr', data_site_id=True)
    leaks = [s for s in report['sites'] if s['growth']['class'] in ('LEAK', 'BOUNDED_GROWTH')]
    check(len(rows) == len(leaks) and len(rows) >= 1, 'growth table: %d rows (JSON: %d growing)' %
          (len(rows), len(leaks)))
    if rows and leaks:
        top = max(leaks, key=lambda s: (s['growth']['class'] == 'LEAK', s['growth']['bytes_per_step']))
        check(rows[0].get('data-site-id') == str(top['id']) and
              rows[0].get('data-class') == top['growth']['class'],
              'top growing site #%s %s (JSON: #%d)' % (rows[0].get('data-site-id'),
                                                      rows[0].get('data-class'), top['id']))
        check(abs(float(rows[0].get('data-slope')) - top['growth']['bytes_per_step']) <=
              1e-6 * abs(top['growth']['bytes_per_step']) + 1, 'its rate is the JSON report\'s')
    check(len(dom.find('polyline')) == len(rows), 'one sparkline per growing site')

    # Flame graph: host live at the end, total = the host sites' live bytes.
    flame = dom.find('div', **{'class': 'flame'})
    host_live = round(sum(s['live_bytes_end'] for s in report['sites']
                          if s['kind'] in ('host', 'mmap')))
    check(bool(flame) and flame[0].get('data-total') == str(host_live),
          'flame graph total %s = host sites live at end %d' %
          (flame and flame[0].get('data-total'), host_live))
    check(len(dom.find('option')) == 2 + len(report['stage_peaks']),
          'flame graphs: end (host, device) and one per stage peak')
    screenshot(page, out_dir, os.path.join(out_dir, 'export.png'))
    interaction_checks(page, out_dir, report)


# Drives the page the way a user does: a harness page loads the report in an
# iframe (same origin with --allow-file-access-from-files), dispatches mouse
# events on it, and writes what the report shows after each into its own DOM.
HARNESS = '''<!DOCTYPE html><html><body>
<iframe id="f" src="%s" width="1400" height="3000"></iframe>
<script>
var f = document.getElementById('f');
function note(k, v) { document.body.setAttribute('data-' + k, String(v)); }
f.onload = function () {
  try {
    var d = f.contentDocument, w = f.contentWindow, chart = d.querySelector('div.chart');
    var svg = chart.querySelector('svg.plot'), r = svg.getBoundingClientRect();
    function at(frac) { return r.left + (80 + frac * (1100 - 96)) * r.width / 1100; }
    function fire(target, type, x) {
      target.dispatchEvent(new w.MouseEvent(type, {clientX: x, clientY: r.top + 100,
                                                   bubbles: true, deltaY: 0}));
    }
    note('view0', chart.getAttribute('data-view'));
    fire(svg, 'mousedown', at(0.25));
    fire(svg, 'mousemove', at(0.5));
    note('tip', chart.querySelector('.tip').textContent.split('\\n')[0]);
    fire(w, 'mouseup', at(0.5));
    note('view1', chart.getAttribute('data-view'));
    note('points1', svg.querySelector('path[data-series="host live"]').getAttribute('d')
                        .split(/[ML]/).length - 1);
    fire(svg, 'dblclick', at(0.5));
    note('view2', chart.getAttribute('data-view'));
    var box = d.querySelector('div.flame'), nodes = box.querySelectorAll('.fn');
    note('flame0', nodes.length);
    nodes[2].dispatchEvent(new w.MouseEvent('click', {bubbles: true}));
    note('flame1', box.querySelector('.fn').getAttribute('title').split('\\n')[0]);
    box.querySelector('.fn').dispatchEvent(new w.MouseEvent('click', {bubbles: true}));
    note('flame2', box.querySelectorAll('.fn').length);
    var pick = d.getElementById('flame-pick');
    pick.value = '1';
    pick.dispatchEvent(new w.Event('change'));
    note('flame3', box.getAttribute('data-total'));
    note('done', 1);
  } catch (e) { note('error', e); }
};
</script></body></html>'''


def interaction_checks(page, out_dir, report):
    harness = os.path.join(out_dir, 'harness.html')
    with open(harness, 'w') as f:
        f.write(HARNESS % os.path.basename(page))
    out, errors, _ = run_chromium(harness, out_dir, ['--allow-file-access-from-files',
                                                     '--virtual-time-budget=5000', '--dump-dom'])
    dom = Dom()
    dom.feed(out)
    body = dom.find('body')[0] if dom.find('body') else {}
    check(body.get('data-done') == '1', 'interactions ran (error: %s)' % body.get('data-error'))
    check(not errors, 'no console errors while interacting: %s' % errors)
    check(body.get('data-view0') == '0-39', 'the chart shows steps 0-39 first (%s)' %
          body.get('data-view0'))
    view = body.get('data-view1', '')
    check(re.fullmatch(r'(9|10)-(19|20)', view) is not None,
          'dragging over the second quarter zooms to steps ~10-19 (%s)' % view)
    check(body.get('data-points1') == '12',
          'the zoomed line has the points of those steps and one beyond each edge (%s)' %
          body.get('data-points1'))
    check(body.get('data-tip') == 'steps 20', 'hovering names the step under the pointer (%r)' %
          body.get('data-tip'))
    check(body.get('data-view2') == '0-39', 'double-click shows every step again (%s)' %
          body.get('data-view2'))
    check(int(body.get('data-flame0', '0')) >= 3, 'the flame graph has frames')
    check(body.get('data-flame1', '') not in ('', 'all'),
          'clicking a frame zooms into it (top frame now %r)' % body.get('data-flame1'))
    check(body.get('data-flame2') is not None and
          int(body.get('data-flame2')) > 0, 'clicking the top frame zooms out')
    device_live = round(sum(s['live_bytes_end'] for s in report['sites']
                            if s['kind'] not in ('host', 'mmap')))
    check(body.get('data-flame3') == str(device_live),
          'choosing the device flame graph shows the device sites\' %d bytes (%s)' %
          (device_live, body.get('data-flame3')))


def hostile_checks(args, out_dir):
    trace = os.path.join(out_dir, 'hostile.trace')
    subprocess.run([args.html_writer, 'hostile', trace], check=True)
    page = os.path.join(out_dir, 'hostile.html')
    js = os.path.join(out_dir, 'hostile.json')
    memstep(args.memstep, trace, '--format', 'html', '-o', page)
    memstep(args.memstep, trace, '--format', 'json', '-o', js)
    report = json.load(open(js))
    stage = report['stage_peaks'][0]['stage']
    function = report['sites'][0]['frames'][0]['function']
    check('</script>' in stage and '</script>' in function, 'the trace has the hostile names')
    dom, errors, _ = dump_dom(page, out_dir)
    rendered(dom, errors, 'hostile trace')
    check(len(dom.find('script')) == 2, 'only the page\'s two script elements exist')
    check(dom.title == 'memstep report: ' + trace and 'pwned' not in dom.title,
          'the stage name did not run (title %r)' % dom.title)
    text = ''.join(dom.text)
    check(stage in text, 'the stage name is shown as text')
    check(function.replace('\u2028', '') in text.replace('\u2028', ''),
          'the function name is shown as text')
    check(dom.find('g', data_stage=stage) != [], 'the stage bar carries the name unchanged')
    screenshot(page, out_dir, os.path.join(out_dir, 'hostile.png'))


def empty_checks(args, out_dir):
    page = os.path.join(out_dir, 'empty.html')
    subprocess.run([args.html_writer, 'empty', page], check=True)
    dom, errors, _ = dump_dom(page, out_dir)
    rendered(dom, errors, 'a report with no steps and no sites')
    check('no steps recorded' in ''.join(dom.text), 'it says there are no steps')


def scale_checks(args, out_dir):
    page = os.path.join(out_dir, 'scale.html')
    p = subprocess.run([args.html_writer, 'scale', '100000', '50000', page], capture_output=True,
                       text=True, check=True)
    size = os.path.getsize(page)
    print('      ' + p.stdout.strip())
    check(size < 4 << 20, 'the page of 100,000 steps and 50,000 sites is %d bytes' % size)
    # No virtual time: the clocks are real. The script runs before the load
    # event, so --dump-dom sees the drawn page.
    dom, errors, seconds = run_dump_real(page, out_dir)
    body = rendered(dom, errors, 'scale')
    loaded = float(body.get('data-loaded-ms', 'inf'))
    render = float(body.get('data-render-ms', 'inf'))
    print('      page ready %.0f ms after navigation (drawing %.0f ms); chromium ran %.2f s' %
          (loaded, render, seconds))
    check(loaded < RENDER_LIMIT_MS, 'ready in under %d ms (%.0f ms)' % (RENDER_LIMIT_MS, loaded))
    chart = dom.find('div', data_pid='1000')
    check(bool(chart) and chart[0].get('data-buckets') == '1000', 'the chart has 1,000 points')
    check(len(dom.find('tr', data_site_id=True)) == 50, '50 growing sites listed')


def run_dump_real(page, out_dir):
    out, errors, seconds = run_chromium(page, out_dir, ['--dump-dom'])
    dom = Dom()
    dom.feed(out)
    return dom, errors, seconds


def main():
    argv = sys.argv[1:]
    scale = argv[:1] == ['--scale']
    if scale:
        argv = argv[1:]
    if len(argv) != 3:
        print(__doc__)
        return 2

    class Args:
        pass

    args = Args()
    args.memstep, args.writer, args.html_writer = argv
    keep = os.environ.get('MEMSTEP_HTML_OUT')
    out_dir = keep or tempfile.mkdtemp(prefix='memstep-html-')
    os.makedirs(out_dir, exist_ok=True)
    try:
        chromium()
        if scale:
            scale_checks(args, out_dir)
        else:
            detector_self_check(out_dir)
            export_trace_checks(args, out_dir)
            hostile_checks(args, out_dir)
            empty_checks(args, out_dir)
    finally:
        if not keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    if failures:
        print('%d checks failed' % len(failures))
        return 1
    print('all checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
