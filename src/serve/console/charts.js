// Small charts drawn as inline SVG: no chart library, nothing but rectangles, polylines and text.
// A chart is a 300 x 90 box scaled to its cell, its horizontal axis the hour that ends at the
// newest sample (one slot per sample interval), its vertical scale set by the largest value.

import {h, svg} from './dom.js';
import {utc} from './format.js';

const W = 300;
const H = 90;
const PAD_TOP = 12;
const PAD_BOTTOM = 14;

// `history`: GET /v1/health/history ({interval_ms, capacity, samples: [{at, ...}], oldest first}).
// `series`: [{key, label, kind: 'bar' | 'line', cls}]; the bars of several series stack.
export function chart(title, history, series, id) {
  const samples = history.samples;
  const slots = Math.max(history.capacity, 1);
  const last = samples.length ? samples[samples.length - 1] : null;
  const end = last ? Date.parse(last.at) : Date.now();
  const start = end - slots * history.interval_ms;
  const slot = W / slots;
  // The slot a sample covers: the interval that ends at its time.
  const x = (p) => ((Date.parse(p.at) - start) / history.interval_ms - 1) * slot;
  const bars = series.filter((s) => s.kind === 'bar');
  const lines = series.filter((s) => s.kind !== 'bar');
  const stacked = samples.map((p) => bars.reduce((sum, s) => sum + (p[s.key] || 0), 0));
  const top = Math.max(1, ...stacked, ...lines.flatMap((s) => samples.map((p) => p[s.key] || 0)));
  const plot = H - PAD_TOP - PAD_BOTTOM;
  const y = (v) => PAD_TOP + plot - (v / top) * plot;
  const shapes = [];
  for (const p of samples) {
    let base = 0;
    for (const s of bars) {
      const v = p[s.key] || 0;
      if (v > 0) {
        shapes.push(svg('rect', {x: Math.max(x(p), 0).toFixed(2), y: y(base + v).toFixed(2), width: Math.max(slot, 0.8).toFixed(2),
          height: (y(base) - y(base + v)).toFixed(2), class: s.cls}, svg('title', {}, utc(p.at) + ': ' + v + ' ' + s.label)));
      }
      base += v;
    }
  }
  for (const s of lines) {
    const points = samples.map((p) => Math.max(x(p) + slot / 2, 0).toFixed(2) + ',' + y(p[s.key] || 0).toFixed(2)).join(' ');
    if (samples.length === 1) shapes.push(svg('circle', {cx: W - slot / 2, cy: y(last[s.key] || 0), r: 1.5, class: ['dot', s.cls]}));
    else if (samples.length) shapes.push(svg('polyline', {points, class: ['line', s.cls]}));
  }
  const clock = (ms) => new Date(ms).toISOString().slice(11, 16);
  return h('figure', {class: 'chart', id},
    h('figcaption', {}, title, ' ', h('span', {class: 'legend'}, series.map((s) =>
      h('span', {class: ['key', s.cls]}, s.label, last ? ' ' + (last[s.key] ?? 0) : '')))),
    svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'plot', role: 'img', 'aria-label': title},
      svg('line', {x1: 0, x2: W, y1: y(0), y2: y(0), class: 'axis'}),
      svg('text', {x: 2, y: PAD_TOP - 2, class: 'scale'}, String(top)),
      svg('text', {x: 2, y: H - 2, class: 'scale'}, clock(start) + 'Z'),
      svg('text', {x: W - 2, y: H - 2, class: 'scale end'}, clock(end) + 'Z'),
      shapes));
}
