#!/usr/bin/env python3
"""`memstep diff BASE NEW --format html` in a real browser.

Two runs written by diff_html_writer (NEW holds a bigger forward peak, keeps
more per step and leaks at a new call site; a stage is named with markup and
</script>) are compared with two gates (one passes, one fails: exit 3, the
page still written). Headless Chromium (Debian's `chromium`, installed by
scripts/install-deps.sh) opens the page from a file; the test reads back what
the page's script wrote into the DOM (data-* attributes of every compared
value, the gates' results) and compares it with `memstep diff --format json`
of the same runs; it fails on any console message (uncaught exceptions,
refused loads: the page loads nothing) and on any error the page's own error
handler counted; the hostile stage name shows as text and runs nothing; it
saves a screenshot and checks it is a PNG of the window's size.

  html_diff_browser_test.py MEMSTEP DIFF_HTML_WRITER

A missing chromium is a failure, not a skip. MEMSTEP_HTML_OUT=DIR keeps the
page and the screenshot there.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import html_browser_test as hbt  # noqa: E402  (Dom, run_chromium, screenshot, check)

check = hbt.check
GATES = ['peak(forward) > +50%', 'peak(forward) > +500%']
HOSTILE = "</script><script>document.title='pwned'</script><b>&amp;\"'</b>"


def diff(memstep, base, new, fmt, out, expect):
    p = subprocess.run([memstep, 'diff', base, new, '--no-symbolize', '--format', fmt, '-o', out] +
                       [a for g in GATES for a in ('--fail-on', g)],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == expect, 'memstep diff --format %s exits %d (got %d: %s)' %
          (fmt, expect, p.returncode, p.stderr.strip()[-500:]))
    return p


def num(attrs, key):
    v = attrs.get(key)
    return None if v is None else float(v)


def same(a, b):
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def value_cells(dom, row_attrs):
    """The value cells (data-name) that follow each row element matching row_attrs."""
    out = []
    current = None
    for tag, a in dom.elements:
        if tag == 'tr':
            current = a if all(a.get(k) == v for k, v in row_attrs.items()) else None
        elif tag == 'td' and current is not None and 'data-name' in a:
            out.append((current, a))
    return out


def compare(what, cells, expected):
    """cells: [(row, td)]; expected: {(row key, name): {base, new, delta}}."""
    check(len(cells) == len(expected), '%s: %d values in the page, %d in the JSON' %
          (what, len(cells), len(expected)))
    bad = []
    for key, td in cells:
        e = expected.get(key)
        if e is None or not (same(num(td, 'data-base'), e['base']) and
                             same(num(td, 'data-new'), e['new']) and
                             same(num(td, 'data-delta'), e['delta'])):
            bad.append((key, td, e))
    check(not bad, '%s: every value in the page equals the JSON (%d differ: %s)' %
          (what, len(bad), bad[:3]))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    memstep, writer = sys.argv[1:]
    keep = os.environ.get('MEMSTEP_HTML_OUT')
    out_dir = keep or tempfile.mkdtemp(prefix='memstep-diff-html-')
    os.makedirs(out_dir, exist_ok=True)
    try:
        hbt.chromium()
        base, new = os.path.join(out_dir, 'base.trace'), os.path.join(out_dir, 'new.trace')
        subprocess.run([writer, base, new], check=True)
        page, js = os.path.join(out_dir, 'diff.html'), os.path.join(out_dir, 'diff.json')
        diff(memstep, base, new, 'html', page, 3)
        diff(memstep, base, new, 'json', js, 3)
        with open(js) as f:
            d = json.load(f)
        with open(page) as f:
            html = f.read()
        check('http://' not in html.replace('http://www.w3.org/2000/svg', '') and
              'https://' not in html, 'the page names no URL (self-contained)')
        check("default-src 'none'" in html, "the page's CSP forbids every load")
        start = html.index('id="memstep-data">') + len('id="memstep-data">')
        data = html[start:html.index('</script>', start)]
        check('<' not in data and '>' not in data, 'the embedded data has no < or > (escaped)')
        embedded = json.loads(data)
        check(embedded.pop('sites_left_out') == 0 and embedded == d,
              'the embedded data is the JSON of --format json')

        dom, errors, seconds = hbt.dump_dom(page, out_dir)
        print('      chromium took %.2f s' % seconds)
        body = hbt.rendered(dom, errors, 'diff page')

        # Gates at the top: the first section, results as in the JSON.
        sections = [a.get('id') for t, a in dom.elements if t == 'section']
        check(sections[:1] == ['attention'], 'the gates come first (sections: %s)' % sections)
        failed = sum(1 for g in d['gates'] if not g['passed'])
        check(failed == 1 and len(d['gates']) == 2, 'the JSON has one of two gates failed')
        check(body.get('data-gates-failed') == str(failed), 'the page counts %d failed gate' %
              failed)
        page_gates = {a['data-gate']: a for a in dom.find('li') if 'data-gate' in a}
        for g in d['gates']:
            a = page_gates.get(g['expression'], {})
            check(a.get('data-passed') == ('1' if g['passed'] else '0') and
                  same(num(a, 'data-value'), g['value']),
                  'gate %r: %s, value %s as in the JSON' % (g['expression'],
                                                            'pass' if g['passed'] else 'FAIL',
                                                            g['value']))

        # Processes: every metric of every process.
        expected = {}
        for p in d['processes']:
            for m, v in p.items():
                if isinstance(v, dict) and 'delta' in v:
                    if m == 'device_peak_bytes' and v['base'] == 0 and v['new'] == 0:
                        continue
                    expected[(p['key'], m)] = v
        cells = [((row['data-process'], td['data-name']), td)
                 for row, td in value_cells(dom, {}) if row.get('data-metric')]
        compare('processes', cells, expected)
        growth = d['processes'][0]['growth_bytes_per_step']
        check(growth['new'] > growth['base'], 'NEW grows faster than BASE (%s)' % growth)

        # Stage peaks.
        expected = {}
        for i, s in enumerate(d['stages']):
            for m in ('peak_bytes_max', 'peak_bytes_median'):
                expected[(str(i), m)] = s[m]
        cells = [((row['data-index'], td['data-name']), td)
                 for row, td in value_cells(dom, {}) if 'data-stage' in row]
        compare('stage peaks', cells, expected)
        stages = [a.get('data-stage') for a in dom.find('tr') if 'data-stage' in a]
        check(HOSTILE in stages, 'the hostile stage name is in the page as data, verbatim')
        check(HOSTILE in ''.join(dom.text), 'the hostile stage name shows as text')
        check(len(dom.find('script')) == 2, 'no script element but the page\'s two (%d)' %
              len(dom.find('script')))
        check('pwned' not in dom.title, 'nothing from the trace ran (title %r)' % dom.title)
        # The page's own <b>: BASE, NEW and one per gate; the name's <b> is text.
        check(len(dom.find('b')) == 2 + len(d['gates']),
              'markup from the trace is not markup (%d <b> elements)' % len(dom.find('b')))

        # Call sites: the new leak is there, every value as in the JSON.
        expected = {}
        for i, s in enumerate(d['sites']):
            for m in ('growth_bytes_per_step', 'live_bytes_end'):
                expected[(str(i), m)] = s[m]
        cells = [((row['data-index'], td['data-name']), td)
                 for row, td in value_cells(dom, {}) if 'data-status' in row]
        compare('call sites', cells, expected)
        statuses = [a.get('data-status') for a in dom.find('tr') if 'data-status' in a]
        check('new' in statuses and statuses == [s['status'] for s in d['sites']],
              'the sites in the JSON order, a new one among them (%s)' % statuses)

        hbt.screenshot(page, out_dir, os.path.join(out_dir, 'diff.png'))
    finally:
        if not keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    if hbt.failures:
        print('%d checks failed' % len(hbt.failures))
        return 1
    print('all checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
