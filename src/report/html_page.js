(function () {
'use strict';
/*@MEMSTEP_HTML_DOM_JS@*/
var t0 = performance.now();
var NS = 'http://www.w3.org/2000/svg';
var D = JSON.parse(document.getElementById('memstep-data').textContent);

function rate(v) { return (v >= 0 ? '+' : '') + bytes(v) + '/step'; }
var PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1',
               '#ff9da7', '#9c755f', '#bab0ac'];
var STYLE = {host: '#1f77b4', peak: '#9ecae1', rss: '#2ca02c', dev: '#d62728', devpeak: '#ff9896',
             devres: '#9467bd', pinned: '#8c564b'};
var MARK = {warmup: '#555', epoch: '#999', alert: '#e6550d', fail: '#d62728', oom: '#a50f15'};

// ---- header -------------------------------------------------------------
function header() {
  var h = document.getElementById('head');
  h.appendChild(el('h1', null, 'memstep report: ' + D.path));
  var t = el('table', {'class': 'procs'});
  t.appendChild(el('tr', null, ['pid', 'rank', 'command', 'steps', 'host peak', 'host live at end',
    'RSS peak', 'device peak', 'heap growth'].map(function (c) { return el('th', null, c); })));
  D.processes.forEach(function (p) {
    var note = p.truncated ? ' (truncated)' : p.clean_exit ? '' : ' (no clean exit)';
    t.appendChild(el('tr', {'data-pid': p.pid, 'data-peak': p.peak_bytes}, [
      el('td', null, p.pid), el('td', null, p.rank), el('td', {'class': 'cmd'}, p.cmdline + note),
      el('td', {'class': 'num'}, thousands(p.steps)), el('td', {'class': 'num'}, bytes(p.peak_bytes)),
      el('td', {'class': 'num'}, bytes(p.live_bytes_end)),
      el('td', {'class': 'num'}, bytes(p.rss_peak_bytes)),
      el('td', {'class': 'num'}, p.device_peak_bytes ? bytes(p.device_peak_bytes) : ''),
      el('td', {'class': 'cls ' + p.heap_class}, p.heap_class)]));
  });
  h.appendChild(t);
}

// ---- what needs attention --------------------------------------------------
function attention() {
  var A = D.attention, items = [];
  var failed = A.gates.filter(function (g) { return !g.passed; });
  var s = section('attention', 'Needs attention');
  failed.forEach(function (g) {
    items.push(el('li', {'class': 'bad', 'data-gate': g.expression},
      ['gate failed: ', el('code', null, g.expression), ' (value ' +
       (g.metric === 'leaks' ? g.value : g.metric.indexOf('growth') >= 0 ? rate(g.value)
                                         : bytes(g.value)) + '; ' + g.detail + ')']));
  });
  A.ooms.forEach(function (o) {
    items.push(el('li', {'class': 'bad'}, 'out of memory at step ' + o.step +
      (o.stage ? ', stage ' + o.stage : '') + (o.device >= 0 ? ', device ' + o.device : '') +
      ': requested ' + bytes(o.requested) + (o.total ? ', free ' + bytes(o.free) + ' of ' +
      bytes(o.total) : '') + (A.ooms.length && D.processes.length > 1 ? ' (pid ' + o.pid + ')' : '')));
  });
  if (A.device_failure_count > 0) {
    items.push(el('li', {'class': 'bad'}, A.device_failure_count +
      ' failed device allocation' + (A.device_failure_count > 1 ? 's' : '') +
      ' (markers on the memory charts)'));
  }
  A.growth.forEach(function (g) {
    items.push(el('li', {'class': g['class'] === 'LEAK' ? 'bad' : 'warn'},
      [el('b', null, g['class']), ' ' + g.what + ' ' + rate(g.slope) + ' [95% CI ' +
       bytes(g.low) + ', ' + bytes(g.high) + ']' + (g.steps_to_limit >= 0 ? ', memory limit in ' +
       thousands(g.steps_to_limit) + ' steps' : '') + (D.processes.length > 1 ? ' (pid ' + g.pid +
       ')' : '') + ': ' + g.reason]));
  });
  A.unattributed.forEach(function (u) {
    items.push(el('li', {'class': 'bad', 'data-unattributed': u.bytes_per_step},
      [el('b', null, 'UNATTRIBUTED'), ' ' + rate(u.bytes_per_step) + ' of the exact heap growth' +
       ' is in no growing site (the sites explain ' + rate(u.attributed_per_step) + '). ' + u.hint]));
  });
  // The first alerts, the others (up to 100) folded away.
  var alerts = A.alerts.map(function (a) {
    return el('li', {'class': 'warn'}, 'alert at step ' + a.step + ': ' + a.rule +
      (a.stage ? ' (' + a.stage + ')' : '') + ' ' + bytes(a.value) + ' > ' + bytes(a.threshold) +
      (a.site_id ? ', top growing site #' + a.site_id : '') +
      (D.processes.length > 1 ? ' (pid ' + a.pid + ')' : ''));
  });
  items = items.concat(alerts.slice(0, 5));
  if (A.alert_count > 5) {
    var more = A.alert_count - 5, shown = alerts.length - 5;
    items.push(el('li', {'class': 'warn'}, el('details', null, [el('summary', null, more +
      ' more alerts' + (shown < more ? ' (the next ' + shown + ' listed here)' : '')),
      el('ul', null, alerts.slice(5))])));
  }
  A.gates.filter(function (g) { return g.passed; }).forEach(function (g) {
    items.push(el('li', {'class': 'ok'}, ['gate passed: ', el('code', null, g.expression)]));
  });
  A.warnings.forEach(function (w) { items.push(el('li', {'class': 'warn'}, 'warning: ' + w)); });
  if (!items.length) items.push(el('li', {'class': 'ok'}, 'nothing: no gate failed, no alert, ' +
                                        'no growth of the heap, RSS or device memory'));
  s.setAttribute('data-failed-gates', failed.length);
  s.setAttribute('data-alerts', A.alert_count);
  s.setAttribute('data-unattributed', A.unattributed.length);
  s.appendChild(el('ul', null, items));
}

// ---- memory over steps -----------------------------------------------------
function niceTicks(lo, hi, n) {
  var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / n)));
  [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= n) { step *= m; return true; } });
  var out = [];
  for (var v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return out;
}
function byteTicks(hi) {
  var u = 1;
  while (hi / u >= 1024) u *= 1024;
  return niceTicks(0, hi / u, 5).map(function (v) { return v * u; });
}
function chart(c, host) {
  var W = 1100, L = 80, R = 16, T = 10, B = 30;
  var box = el('div', {'class': 'chart', 'data-pid': c.pid, 'data-buckets': c.x.length,
                       'data-steps': c.steps});
  host.appendChild(box);
  box.appendChild(el('h3', null, 'pid ' + c.pid + (c.rank ? ' rank ' + c.rank : '') + ': ' +
    thousands(c.steps) + ' steps' + (c.per_bucket > 1 ? ' (one point per ' + c.per_bucket +
    ' steps: min and max of each)' : '') + (c.marker_count > c.markers.length ? '; ' +
    c.markers.length + ' of ' + c.marker_count + ' markers, spread over the run' : '')));
  var hidden = {};
  // Host memory and device memory on panels of their own (their scales differ).
  var DEVICE = {dev: 1, devpeak: 1, devres: 1};
  var panels = [{title: 'host', series: c.series.filter(function (s) { return !DEVICE[s.style]; }),
                 H: 280},
                {title: 'device', series: c.series.filter(function (s) { return DEVICE[s.style]; }),
                 H: 220}].filter(function (p) { return p.series.length; });
  var legend = el('div', {'class': 'legend'});
  var tip = el('div', {'class': 'tip'});
  panels.forEach(function (p) {
    p.svg = sv('svg', {viewBox: '0 0 ' + W + ' ' + p.H, 'class': 'plot', width: W, height: p.H,
                       'data-panel': p.title});
    p.sel = sv('rect', {y: T, height: p.H - T - B, 'class': 'sel', width: 0});
    box.appendChild(p.svg);
  });
  box.appendChild(legend);
  box.appendChild(tip);
  var peakMax = 0;
  c.series.forEach(function (s) {
    if (s.style === 'peak') s.hi.forEach(function (v) { if (v > peakMax) peakMax = v; });
    var cb = el('input', {type: 'checkbox', checked: 'checked'});
    cb.addEventListener('change', function () { hidden[s.name] = !cb.checked; draw(); });
    legend.appendChild(el('label', null, [cb, el('span', {'class': 'sw',
      style: 'background:' + (STYLE[s.style] || '#333')}), s.name]));
  });
  box.setAttribute('data-host-peak', peakMax);
  c.stages.forEach(function (name, i) {
    legend.appendChild(el('span', {'class': 'stagekey'}, [el('span', {'class': 'sw',
      style: 'background:' + PALETTE[i % PALETTE.length] + ';opacity:.35'}), 'stage ' + name]));
  });
  if (c.stages.length) legend.appendChild(el('span', {'class': 'note'},
    '(shading: the stage with the largest host peak in those steps)'));
  var last = c.last_step + 1;
  var view = [c.x[0], last];
  function xEnd(i) { return i + 1 < c.x.length ? c.x[i + 1] : last; }
  function X(step) { return L + (step - view[0]) / (view[1] - view[0]) * (W - L - R); }
  function draw() { panels.forEach(drawPanel); }
  function drawPanel(p, pi) {
    var svg = p.svg, H = p.H;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var x0 = view[0], x1 = view[1];
    var first = 0, lastI = c.x.length - 1;
    while (first < lastI && xEnd(first) <= x0) first++;
    while (lastI > first && c.x[lastI] >= x1) lastI--;
    // one point beyond each edge, so that lines reach the edges (clipped)
    first = Math.max(first - 1, 0);
    lastI = Math.min(lastI + 1, c.x.length - 1);
    var ymax = 0;
    p.series.forEach(function (s) {
      if (hidden[s.name]) return;
      for (var i = first; i <= lastI; i++) if (s.hi[i] > ymax) ymax = s.hi[i];
    });
    ymax = ymax > 0 ? ymax * 1.05 : 1;
    function Y(v) { return T + (1 - v / ymax) * (H - T - B); }
    var plot = sv('g');
    var clip = 'clip' + c.pid + '-' + pi;
    svg.appendChild(sv('defs', null, sv('clipPath', {id: clip},
      sv('rect', {x: L, y: T, width: W - L - R, height: H - T - B}))));
    plot.setAttribute('clip-path', 'url(#' + clip + ')');
    svg.appendChild(plot);
    // stage shading, consecutive buckets of one stage merged
    for (var i = first; i <= lastI && c.stage_of.length; ) {
      var st = c.stage_of[i], j = i;
      while (j + 1 <= lastI && c.stage_of[j + 1] === st) j++;
      if (st >= 0) {
        plot.appendChild(sv('rect', {x: X(c.x[i]), y: T, width: Math.max(X(xEnd(j)) - X(c.x[i]), 0.5),
          height: H - T - B, fill: PALETTE[st % PALETTE.length], opacity: 0.13}, sv('title', null,
          'stage ' + c.stages[st] + ': steps ' + c.x[i] + '-' + (xEnd(j) - 1))));
      }
      i = j + 1;
    }
    // grid and axes
    byteTicks(ymax).forEach(function (v) {
      svg.appendChild(sv('line', {x1: L, x2: W - R, y1: Y(v), y2: Y(v), 'class': 'grid'}));
      svg.appendChild(sv('text', {x: L - 6, y: Y(v) + 4, 'text-anchor': 'end'}, bytes(v)));
    });
    niceTicks(x0, x1 - 1, 8).forEach(function (v) {
      v = Math.round(v);
      svg.appendChild(sv('line', {x1: X(v), x2: X(v), y1: H - B, y2: H - B + 5, 'class': 'axis'}));
      svg.appendChild(sv('text', {x: X(v), y: H - B + 17, 'text-anchor': 'middle'}, v));
    });
    svg.appendChild(sv('text', {x: W - R, y: H - 2, 'text-anchor': 'end', 'class': 'note'}, 'step'));
    svg.appendChild(sv('text', {x: 4, y: T + 10, 'class': 'note'}, p.title));
    // series: a band from min to max, and the max as a line
    p.series.forEach(function (s) {
      if (hidden[s.name]) return;
      var color = STYLE[s.style] || '#333', line = '', band = [], lows = [], seg = false;
      for (var i = first; i <= lastI; i++) {
        if (s.hi[i] < 0) { seg = false; continue; }
        var xa = X(c.x[i]), xb = c.per_bucket > 1 ? X(xEnd(i)) : xa;
        line += (seg ? 'L' : 'M') + xa.toFixed(1) + ' ' + Y(s.hi[i]).toFixed(1);
        if (xb !== xa) line += 'L' + xb.toFixed(1) + ' ' + Y(s.hi[i]).toFixed(1);
        seg = true;
        if (s.lo[i] < s.hi[i]) {
          band.push(xa.toFixed(1) + ',' + Y(s.hi[i]).toFixed(1));
          lows.unshift(xa.toFixed(1) + ',' + Y(s.lo[i]).toFixed(1));
        }
      }
      if (band.length) {
        plot.appendChild(sv('polygon', {points: band.concat(lows).join(' '), fill: color,
                                        opacity: 0.2}));
      }
      plot.appendChild(sv('path', {d: line, stroke: color, fill: 'none', 'stroke-width': 1.5,
        'stroke-dasharray': s.style === 'peak' || s.style === 'devpeak' ? '4 2' : null,
        'data-series': s.name}));
    });
    // step markers (data-kind on the first panel only, so that each is
    // counted once): lines across the plot, or short ticks at its top when
    // more than 20 are in view
    var inView = c.markers.filter(function (m) { return m[0] >= x0 && m[0] < x1; });
    inView.forEach(function (m) {
      var y2 = inView.length > 20 ? T + 12 : H - B;
      plot.appendChild(sv('line', {x1: X(m[0]), x2: X(m[0]), y1: T, y2: y2, stroke: MARK[m[1]],
        'stroke-width': m[1] === 'epoch' ? 1 : 1.5, 'stroke-dasharray': m[1] === 'warmup' ||
        m[1] === 'epoch' ? '3 3' : null, 'class': 'marker', 'data-kind': pi === 0 ? m[1] : null},
        sv('title', null, 'step ' + m[0] + ': ' + m[2])));
    });
    svg.appendChild(sv('rect', {x: L, y: T, width: W - L - R, height: H - T - B, 'class': 'frame'}));
    svg.appendChild(p.sel);
  }
  // zoom: drag to select steps, double-click (or the button) to reset, wheel around the pointer
  var drag = null;
  function stepAt(svg, ev) {
    var r = svg.getBoundingClientRect(), px = (ev.clientX - r.left) * W / r.width;
    return view[0] + (px - L) / (W - L - R) * (view[1] - view[0]);
  }
  panels.forEach(function (p) {
    var svg = p.svg;
    svg.addEventListener('mousedown', function (ev) {
      drag = {step: stepAt(svg, ev), panel: p};
      ev.preventDefault();
    });
    svg.addEventListener('mousemove', function (ev) {
      var s = stepAt(svg, ev);
      if (drag !== null && drag.panel === p) {
        var a = Math.min(drag.step, s), b = Math.max(drag.step, s);
        p.sel.setAttribute('x', X(a));
        p.sel.setAttribute('width', Math.max(X(b) - X(a), 0));
      }
      var i = 0, lo = 0, hi = c.x.length - 1;
      while (lo <= hi) {
        var m = (lo + hi) >> 1;
        if (c.x[m] <= s) { i = m; lo = m + 1; } else hi = m - 1;
      }
      var lines = ['steps ' + c.x[i] + (xEnd(i) - 1 > c.x[i] ? '-' + (xEnd(i) - 1) : '')];
      if (c.stage_of.length && c.stage_of[i] >= 0) {
        lines.push('host peak in stage ' + c.stages[c.stage_of[i]]);
      }
      c.series.forEach(function (se) {
        if (se.hi[i] < 0) return;
        lines.push(se.name + ': ' + (se.lo[i] < se.hi[i] ? bytes(se.lo[i]) + ' .. ' : '') +
                   bytes(se.hi[i]));
      });
      tip.textContent = lines.join('\n');
      tip.style.display = 'block';
    });
    svg.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
    svg.addEventListener('dblclick', function () { zoom(c.x[0], last); });
    svg.addEventListener('wheel', function (ev) {
      ev.preventDefault();
      var s = stepAt(svg, ev), f = ev.deltaY > 0 ? 1.25 : 0.8;
      zoom(s - (s - view[0]) * f, s + (view[1] - s) * f);
    }, {passive: false});
  });
  window.addEventListener('mouseup', function (ev) {
    if (drag === null) return;
    var s = stepAt(drag.panel.svg, ev), a = Math.min(drag.step, s), b = Math.max(drag.step, s);
    drag.panel.sel.setAttribute('width', 0);
    drag = null;
    if (b - a >= 1) zoom(a, b);
  });
  function zoom(a, b) {
    a = Math.max(c.x[0], Math.floor(a));
    b = Math.min(last, Math.ceil(b));
    if (b - a < 2) b = Math.min(last, a + 2);
    if (b - a < 2) a = Math.max(c.x[0], b - 2);
    view = [a, b];
    box.setAttribute('data-view', a + '-' + (b - 1));
    draw();
  }
  var reset = el('button', null, 'reset zoom');
  reset.addEventListener('click', function () { zoom(c.x[0], last); });
  legend.appendChild(reset);
  zoom(c.x[0], last);
}
function charts() {
  var s = section('memory', 'Memory over steps', 'Exact counters at step ends (peaks within the ' +
    'step dashed). Drag to zoom into steps, scroll to zoom, double-click to reset; markers: ' +
    'warm-up end and epochs (dashed grey), alerts (orange), failed device allocations and ' +
    'out-of-memory (red).');
  if (!D.charts.length) s.appendChild(el('p', null, 'no steps recorded'));
  D.charts.forEach(function (c) { chart(c, s); });
  if (D.charts_left_out) s.appendChild(el('p', {'class': 'note'}, D.charts_left_out +
    ' more processes not drawn (see the JSON report)'));
}

// ---- stage peaks -------------------------------------------------------------
function stagePeaks() {
  var s = section('stages', 'Stage peaks', 'Largest exact peak of each stage over the steps it ' +
    'ran in (bar), and the median step\'s peak (tick).');
  s.setAttribute('data-count', D.stage_peaks.length);
  if (!D.stage_peaks.length) { s.appendChild(el('p', null, 'no stages recorded')); return; }
  var max = 0;
  D.stage_peaks.forEach(function (p) { if (p.max > max) max = p.max; });
  var many = D.processes.length > 1, RH = 22, LW = 330, W = 1100;
  var svg = sv('svg', {width: W, height: D.stage_peaks.length * RH + 6, 'class': 'bars'});
  D.stage_peaks.forEach(function (p, i) {
    var y = i * RH + 3, w = max > 0 ? p.max / max * (W - LW - 260) : 0;
    var label = p.stage + ' (' + p.kind + (many ? ', pid ' + p.pid : '') + ')';
    var g = sv('g', {'data-stage': p.stage, 'data-kind': p.kind, 'data-max': p.max, 'class': 'bar'});
    g.appendChild(sv('text', {x: LW - 8, y: y + 15, 'text-anchor': 'end'},
      label.length > 48 ? label.slice(0, 47) + '\u2026' : label));
    g.appendChild(sv('rect', {x: LW, y: y + 2, width: Math.max(w, 1), height: RH - 6,
      fill: p.kind === 'host' ? STYLE.host : STYLE.dev}, sv('title', null, label + ': max ' +
      bytes(p.max) + ' at step ' + p.step + ', median ' + bytes(p.median) + ', ' + p.steps + ' steps')));
    var mx = LW + (max > 0 ? p.median / max * (W - LW - 260) : 0);
    g.appendChild(sv('line', {x1: mx, x2: mx, y1: y, y2: y + RH - 2, stroke: '#000',
                             'stroke-width': 2}));
    g.appendChild(sv('text', {x: LW + w + 8, y: y + 15}, bytes(p.max) + ' at step ' + p.step +
      ', median ' + bytes(p.median)));
    svg.appendChild(g);
  });
  s.appendChild(svg);
}

// ---- growth table ------------------------------------------------------------
function spark(v, warm) {
  var W = 160, H = 28, max = 0;
  v.forEach(function (x) { if (x > max) max = x; });
  var svg = sv('svg', {width: W, height: H, 'class': 'spark'});
  if (!v.length) return svg;
  var pts = v.map(function (x, i) {
    return (v.length > 1 ? i / (v.length - 1) * (W - 2) + 1 : W / 2).toFixed(1) + ',' +
           (H - 2 - (max > 0 ? x / max : 0) * (H - 4)).toFixed(1);
  });
  if (warm > 0) svg.appendChild(sv('rect', {x: 0, y: 0, height: H, fill: '#eee',
    width: v.length > 1 ? Math.min(warm / (v.length - 1), 1) * (W - 2) + 1 : 0}));
  svg.appendChild(sv('polyline', {points: pts.join(' '), fill: 'none', stroke: '#c0392b',
                                  'stroke-width': 1.3}));
  return svg;
}
function growth() {
  var G = D.growth;
  var s = section('growth', 'Growing call sites', 'Sites classified LEAK or BOUNDED_GROWTH, as in ' +
    'the text report: rate with its 95% interval; the sparkline is the site\'s estimated live ' +
    'bytes at each step end (grey: warm-up).');
  s.setAttribute('data-rows', G.rows.length);
  if (!G.rows.length) s.appendChild(el('p', null, 'no call site grows after warm-up'));
  else {
    var t = el('table', {'class': 'growth'});
    t.appendChild(el('thead', null, el('tr', null, ['site', 'class', 'rate [95% CI]',
      'live at end', 'live bytes per step', 'where'].map(function (h) { return el('th', null, h); }))));
    var body = el('tbody');
    G.rows.forEach(function (r) {
      var frames = el('details', null, [el('summary', null, r.name)].concat(
        [el('pre', null, r.frames.join('\n') + '\n(' + r.reason + ')')]));
      body.appendChild(el('tr', {'data-site-id': r.id, 'data-class': r['class'],
                                 'data-slope': r.slope}, [
        el('td', {'class': 'num'}, '#' + r.id + (D.processes.length > 1 ? ' pid ' + r.pid : '')),
        el('td', {'class': 'cls ' + r['class']}, r['class'] + (r.kind !== 'host' ? ' ' + r.kind : '')),
        el('td', {'class': 'num'}, rate(r.slope) + ' [' + bytes(r.low) + ', ' + bytes(r.high) + ']' +
           (r.calibrated ? ' (calibrated)' : '')),
        el('td', {'class': 'num'}, bytes(r.live_end) +
           (r.capacity >= 0 ? ' (capacity ~' + bytes(r.capacity) + ')' : '')),
        el('td', null, spark(r.spark, r.warmup)), el('td', {'class': 'where'}, frames)]));
    });
    t.appendChild(body);
    s.appendChild(t);
  }
  if (G.lines.length) {
    s.appendChild(el('p', {'class': 'note'}, 'Python lines whose sites, summed, grow (one line ' +
      'often makes several sites: a dict and its key table, a string and its float):'));
    var lt = el('table', {'class': 'growth', id: 'python-lines'});
    lt.appendChild(el('thead', null, el('tr', null, ['line', 'class', 'rate [95% CI]',
      'live at end', 'sites'].map(function (h) { return el('th', null, h); }))));
    var lb = el('tbody');
    G.lines.forEach(function (l) {
      var where = el('details', null, [el('summary', null, (l.frames[0] || '?') +
        (l.callees ? ' (with what it calls)' : ''))].concat(
        [el('pre', null, l.frames.join('\n') + '\n(' + l.reason + ')')]));
      lb.appendChild(el('tr', {'data-class': l['class'], 'data-slope': l.slope}, [
        el('td', {'class': 'where'}, where),
        el('td', {'class': 'cls ' + l['class']}, l['class']),
        el('td', {'class': 'num'}, rate(l.slope) + ' [' + bytes(l.low) + ', ' + bytes(l.high) + ']' +
           (l.calibrated ? ' (calibrated)' : '')),
        el('td', {'class': 'num'}, bytes(l.live_end)),
        el('td', null, l.sites.map(function (id) { return '#' + id; }).join(' ') +
           (D.processes.length > 1 ? ' (pid ' + l.pid + ')' : ''))]));
    });
    lt.appendChild(lb);
    s.appendChild(lt);
  }
  var rest = [];
  if (G.more_sites) rest.push(G.more_sites + ' more growing sites (' + bytes(G.more_live_end) +
                              ' live at end)');
  G.others.forEach(function (o) {
    rest.push(o.sites + ' ' + o['class'] + ' (' + bytes(o.live_end) + ' live at end)');
  });
  if (rest.length) s.appendChild(el('p', {'class': 'note'}, 'other sites: ' + rest.join('; ')));
}

// ---- flame graphs ------------------------------------------------------------
function flames() {
  var s = section('flames', 'Live memory by stack', 'Root at the top; width = live bytes. Click ' +
    'a frame to zoom into it, click the root to zoom out. Frames below 0.2% of the total are merged.');
  var pick = el('select', {id: 'flame-pick'});
  D.flames.forEach(function (f, i) {
    pick.appendChild(el('option', {value: i}, f.title + ' (' + bytes(f.total) + ')'));
  });
  s.appendChild(pick);
  if (D.flames_left_out) s.appendChild(el('span', {'class': 'note'}, ' ' + D.flames_left_out +
    ' stage peaks not shown'));
  var box = el('div', {'class': 'flame'});
  var info = el('div', {'class': 'note flameinfo'}, '\u00a0');
  s.appendChild(box);
  s.appendChild(info);
  var W = 1100, RH = 18;
  function show(f, focus) {
    while (box.firstChild) box.removeChild(box.firstChild);
    box.setAttribute('data-total', f.total);
    box.setAttribute('data-title', f.title);
    var root = focus || f.tree, total = root[1] || 1, depth = 0;
    var path = [];
    (function find(n, trail) {
      if (n === root) { path = trail; return true; }
      return n[2].some(function (k) { return find(k, trail.concat([n])); });
    })(f.tree, []);
    function node(n, x, d, w) {
      if (w < 0.5) return;
      depth = Math.max(depth, d);
      var pct = (n[1] / f.total * 100).toFixed(2);
      var div = el('div', {'class': 'fn', title: n[0] + '\n' + bytes(n[1]) + ' (' + pct + '%)',
        style: 'left:' + x.toFixed(1) + 'px;top:' + d * RH + 'px;width:' + Math.max(w - 1, 0.5)
          .toFixed(1) + 'px;background:' + (n === f.tree ? '#c7c7c7' : color(n[0]))},
        w > 30 ? n[0] : '');
      div.addEventListener('click', function () { show(f, n === root && path.length ?
        path[path.length - 1] : n); });
      div.addEventListener('mouseenter', function () {
        info.textContent = n[0] + ': ' + bytes(n[1]) + ' (' + pct + '% of the view)';
      });
      box.appendChild(div);
      var cx = x;
      n[2].forEach(function (k) { var kw = k[1] / total * W; node(k, cx, d + 1, kw); cx += kw; });
    }
    node(root, 0, 0, W);
    box.style.height = (depth + 1) * RH + 'px';
  }
  function color(name) {
    if (name.charAt(0) === '[') return '#c7c7c7';
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return 'hsl(' + (10 + h % 45) + ',80%,' + (58 + h % 17) + '%)';
  }
  pick.addEventListener('change', function () { show(D.flames[+pick.value]); });
  if (D.flames.length) show(D.flames[0]);
}

run('header', header);
run('attention', attention);
run('charts', charts);
run('stage peaks', stagePeaks);
run('growth', growth);
run('flames', flames);
document.body.setAttribute('data-render-ms', (performance.now() - t0).toFixed(1));
document.body.setAttribute('data-loaded-ms', performance.now().toFixed(1));
finish('memstep report');
})();
