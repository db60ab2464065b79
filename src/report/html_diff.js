(function () {
'use strict';
// memstep diff --format html: draws the memstep.diff/1 JSON of the page
// (html_diff.cc) with DOM calls only (every text through text nodes: names
// from the traces are never parsed as HTML). Every compared value's cell
// carries data-base / data-new / data-delta (the JSON's numbers) for tests.
/*@MEMSTEP_HTML_DOM_JS@*/
var D = JSON.parse(document.getElementById('memstep-data').textContent);
var NS = 'http://www.w3.org/2000/svg';

function count(v) {
  if (v === null || !isFinite(v)) return '?';
  return Math.abs(v) >= 100 ? thousands(v) : String(+v.toPrecision(4));
}
function fmt(v, unit) {
  if (unit === 'count') return count(v);
  if (unit === 'bytes/step') return bytes(v) + '/step';
  if (unit === 'count/step') return count(v) + '/step';
  return bytes(v);
}
function percent(p) {
  if (p === null) return '+inf %';
  return (p >= 0 ? '+' : '') + p.toFixed(1) + ' %';
}
// Three cells: BASE, NEW, change; the change cell is coloured by its sign
// (more memory is worse).
function valueCells(v, unit, name) {
  var d = v['new'] - v.base;
  var change = v.base === v['new'] ? 'same'
             : (d > 0 ? '+' : '-') + fmt(Math.abs(d), unit) + ' (' + percent(v.percent) + ')';
  var attrs = {'class': 'num', 'data-name': name, 'data-base': v.base, 'data-new': v['new'],
               'data-delta': v.delta};
  return [el('td', {'class': 'num'}, fmt(v.base, unit)), el('td', {'class': 'num'}, fmt(v['new'], unit)),
          el('td', Object.assign(attrs, {'class': 'num ' + (d > 0 ? 'up' : d < 0 ? 'down' : '')}),
             change)];
}
function table(id, heads, rows) {
  var t = el('table', {id: id}, [el('thead', null, el('tr', null, heads.map(function (h) {
    return el('th', null, h);
  })))]);
  var body = el('tbody');
  rows.forEach(function (r) { body.appendChild(r); });
  t.appendChild(body);
  return t;
}
function presence(x) {
  return !x.in_base ? 'only in NEW' : !x.in_new ? 'only in BASE' : '';
}

// ---- header and gates ------------------------------------------------------
function header() {
  var h = document.getElementById('head');
  h.appendChild(el('h1', null, 'memstep diff'));
  h.appendChild(el('p', {id: 'runs'}, [
    el('b', null, 'BASE '), el('span', {id: 'base-path'}, D.base.path),
    D.base.selection ? ' (' + D.base.selection + ')' : '', el('br'),
    el('b', null, 'NEW '), el('span', {id: 'new-path'}, D['new'].path),
    D['new'].selection ? ' (' + D['new'].selection + ')' : '']));
}
function attention() {
  var s = section('attention', 'Gates', D.gates.length ? null :
                  'No gate given (memstep diff --fail-on EXPR: docs/cli.md).');
  var failed = D.gates.filter(function (g) { return !g.passed; }).length;
  document.body.setAttribute('data-gates-failed', failed);
  if (!D.gates.length) return;
  s.appendChild(el('p', {'class': failed ? 'bad' : ''}, failed + ' of ' + D.gates.length +
                     ' gate' + (D.gates.length === 1 ? '' : 's') + ' failed'));
  var ul = el('ul');
  D.gates.forEach(function (g) {
    var value = g.value === null ? '+inf %' : g.unit === '%' ? percent(g.value)
              : fmt(g.value, g.unit);
    ul.appendChild(el('li', {'class': g.passed ? 'ok' : 'bad', 'data-gate': g.expression,
                             'data-passed': g.passed ? '1' : '0', 'data-value': g.value},
                      [el('b', null, g.passed ? 'pass ' : 'FAIL '), g.expression,
                       el('span', {'class': 'note'}, '  value ' + value + '; ' + g.detail)]));
  });
  s.appendChild(ul);
}

// ---- processes: peaks and per-step growth -----------------------------------
function processes() {
  var s = section('processes', 'Processes',
                  'Exact heap counters of each process, matched by rank (else by pid order).');
  var rows = [];
  var metrics = [['steps', 'steps', 'count'], ['peak_bytes', 'heap peak', 'bytes'],
                 ['live_bytes_end', 'heap live at end', 'bytes'],
                 ['growth_bytes_per_step', 'heap growth', 'bytes/step'],
                 ['rss_peak_bytes', 'RSS peak', 'bytes'],
                 ['alloc_bytes_per_step', 'allocated', 'bytes/step'],
                 ['alloc_count_per_step', 'allocations', 'count/step'],
                 ['device_peak_bytes', 'device peak', 'bytes']];
  D.processes.forEach(function (p) {
    var label = p.key + ' (pid ' + (p.in_base ? p.base_pid : '-') + ' \u2192 ' +
                (p.in_new ? p.new_pid : '-') + ')';
    rows.push(el('tr', {'class': 'group'}, el('th', {colspan: 4},
                                               [label, ' ', el('span', {'class': 'note'},
                                                               presence(p))])));
    metrics.forEach(function (m) {
      var v = p[m[0]];
      if (m[0] === 'device_peak_bytes' && v.base === 0 && v['new'] === 0) return;
      var name = m[1] + (m[0] === 'growth_bytes_per_step' ?
                         ' (' + (p.base_class || '-') + ' \u2192 ' + (p.new_class || '-') + ')' : '');
      rows.push(el('tr', {'data-process': p.key, 'data-metric': m[0]},
                   [el('td', null, name)].concat(valueCells(v, m[2], m[0]))));
    });
  });
  s.appendChild(table('processes-table', ['', 'BASE', 'NEW', 'change'], rows));
}

// ---- stage peaks: a table and paired bars ------------------------------------
function stages() {
  if (!D.stages.length) return;
  var s = section('stages', 'Stage peaks',
                  'Largest peak of each stage over the steps (exact), BASE above NEW.');
  var max = 1;
  D.stages.forEach(function (st) {
    max = Math.max(max, st.peak_bytes_max.base, st.peak_bytes_max['new']);
  });
  var rows = D.stages.map(function (st, i) {
    var name = st.process + '  ' + st.stage + (st.kind === 'device' ? ' [device ' + st.device + ']' : '');
    var w = 220, h = 22;
    var bars = sv('svg', {'class': 'plot', width: w, height: h, viewBox: '0 0 ' + w + ' ' + h}, [
      sv('rect', {x: 0, y: 2, height: 8, width: (w * st.peak_bytes_max.base / max).toFixed(1),
                  fill: '#9ecae1'}),
      sv('rect', {x: 0, y: 12, height: 8, width: (w * st.peak_bytes_max['new'] / max).toFixed(1),
                  fill: '#1f77b4'})]);
    return el('tr', {'data-stage': st.stage, 'data-process': st.process, 'data-kind': st.kind,
                     'data-device': st.device, 'data-index': i},
              [el('td', null, [name, ' ', el('span', {'class': 'note'}, presence(st))])]
                .concat(valueCells(st.peak_bytes_max, 'bytes', 'peak_bytes_max'))
                .concat(valueCells(st.peak_bytes_median, 'bytes', 'peak_bytes_median'))
                .concat([el('td', null, bars)]));
  });
  s.appendChild(table('stages-table', ['stage', 'max BASE', 'max NEW', 'max change',
                                       'median BASE', 'median NEW', 'median change', ''], rows));
  s.appendChild(el('p', {'class': 'legend'}, [
    el('span', {'class': 'sw', style: 'background:#9ecae1'}), 'BASE ',
    el('span', {'class': 'sw', style: 'background:#1f77b4'}), 'NEW']));
}

// ---- call sites ------------------------------------------------------------------
// "function  file:line", or the module and offset (or the address) unsymbolized.
function frame(f) {
  var name = f['function'] || (f.module ? f.module + '+' + f.module_offset : f.ip);
  return name + (f.file ? '  ' + f.file + ':' + f.line : '');
}
function sites() {
  var s = section('sites', 'Call sites',
                  'Matched by their symbolized stacks; largest change (growth \u00d7 100 steps + ' +
                  'live at the end) first.');
  if (D.sites_left_out > 0) {
    s.appendChild(el('p', {'class': 'note', id: 'sites-left-out'},
                     D.sites_left_out + ' more sites with smaller changes are left out (--top).'));
  }
  if (!D.sites.length) { s.appendChild(el('p', null, 'No call site.')); return; }
  var rows = D.sites.map(function (x, i) {
    var kind = x.kind === 'host' ? '' : ' [' + x.kind + (x.kind === 'mmap' ? '' : ', device ' + x.device) + ']';
    var ids = (x.base_id ? '#' + x.base_id : '-') + ' \u2192 ' + (x.new_id ? '#' + x.new_id : '-');
    var frames = el('details', null, [el('summary', null, x.frames.length ? frame(x.frames[0]) : '?'),
                                      el('pre', null, x.frames.map(frame).join('\n'))]);
    return el('tr', {'data-index': i, 'data-status': x.status, 'data-process': x.process},
              [el('td', {'class': 'num'}, String(i + 1)),
               el('td', {'class': 'status ' + x.status}, x.status),
               el('td', null, x.process + ', site ' + ids + kind),
               el('td', null, (x.base_class || '-') + ' \u2192 ' + (x.new_class || '-'))]
                .concat(valueCells(x.growth_bytes_per_step, 'bytes/step', 'growth_bytes_per_step'))
                .concat(valueCells(x.live_bytes_end, 'bytes', 'live_bytes_end'))
                .concat([el('td', {'class': 'where'}, frames)]));
  });
  s.appendChild(table('sites-table', ['', 'status', 'site', 'class', 'growth BASE', 'growth NEW',
                                      'growth change', 'live BASE', 'live NEW', 'live change',
                                      'where'], rows));
}

function warnings() {
  if (!D.warnings.length) return;
  var s = section('warnings', 'Warnings');
  var ul = el('ul');
  D.warnings.forEach(function (w) { ul.appendChild(el('li', null, w)); });
  s.appendChild(ul);
}

run('header', header);
run('gates', attention);
run('processes', processes);
run('stages', stages);
run('sites', sites);
run('warnings', warnings);
finish('memstep diff');
})();
