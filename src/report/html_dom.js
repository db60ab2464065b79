// DOM helpers, number formatting and the drawing loop shared by the report's
// page (html_page.js) and the diff's (html_diff.js): src/report/CMakeLists.txt
// puts this file where each script says /*@MEMSTEP_HTML_DOM_JS@*/, at the top
// of its closure. Every text goes in as a text node, never parsed as HTML.

// The errors met while drawing: run() collects them (and the window's error
// event any other), finish() reports them on <body> for the tests.
var errors = [];
window.addEventListener('error', function (e) { errors.push(String(e.message)); });
function el(tag, attrs, kids) {
  var e = document.createElement(tag);
  setAttrs(e, attrs);
  append(e, kids);
  return e;
}
function sv(tag, attrs, kids) {
  var e = document.createElementNS(NS, tag);
  setAttrs(e, attrs);
  append(e, kids);
  return e;
}
function setAttrs(e, attrs) {
  for (var k in attrs || {}) {
    if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
  }
}
function append(e, kids) {
  if (kids === undefined || kids === null) return;
  if (!Array.isArray(kids)) kids = [kids];
  kids.forEach(function (k) {
    if (k === null || k === undefined) return;
    e.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
  });
}
var UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
function bytes(v) {
  if (v === null || !isFinite(v)) return '?';
  var neg = v < 0, x = Math.abs(v), u = 0;
  while (x >= 1024 && u < 5) { x /= 1024; u++; }
  var s = u === 0 ? Math.round(x) + ' B'
        : (x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0)) + ' ' + UNITS[u];
  return neg ? '-' + s : s;
}
function thousands(n) { return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ','); }
// A <section> with a title (and a note) appended to #main.
function section(id, title, note) {
  var s = el('section', {id: id}, [el('h2', null, title)]);
  if (note) s.appendChild(el('p', {'class': 'note'}, note));
  document.getElementById('main').appendChild(s);
  return s;
}
// Draws one part of the page: an exception is kept and shown in its place,
// and the other parts still draw.
function run(name, f) {
  try { f(); } catch (e) {
    errors.push(name + ': ' + e);
    document.getElementById('main').appendChild(el('p', {'class': 'bad'},
      'could not draw ' + name + ': ' + e));
  }
}
// After the last run(): <body> gets data-errors (the count), and either
// data-rendered=1 or data-error-text with an exception naming `what`.
function finish(what) {
  document.body.setAttribute('data-errors', errors.length);
  if (errors.length) {
    document.body.setAttribute('data-error-text', errors.join(' | '));
    throw new Error(what + ': ' + errors.join(' | '));
  }
  document.body.setAttribute('data-rendered', '1');
}
