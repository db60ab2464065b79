// DOM helpers and byte formatting shared by the report's page (html_page.js)
// and the diff's (html_diff.js): src/report/CMakeLists.txt puts this file
// where each script says /*@MEMSTEP_HTML_DOM_JS@*/, inside its closure.
// Every text goes in as a text node, never parsed as HTML.
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
