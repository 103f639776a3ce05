// How the console writes times, durations and outcomes. Times are shown in UTC, as the API and
// the journal give them, with how long ago (or how far ahead) beside them.

import {h} from './dom.js';

export function utc(iso) {
  if (!iso) return '';
  return iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function span(seconds) {
  const s = Math.abs(seconds);
  if (s < 60) return Math.round(s) + ' s';
  if (s < 3600) return Math.round(s / 60) + ' min';
  if (s < 86400 * 2) return Math.round(s / 3600) + ' h';
  return Math.round(s / 86400) + ' d';
}

// "3 min ago", "in 2 h"
export function relative(iso, now = Date.now()) {
  if (!iso) return '';
  const seconds = (Date.parse(iso) - now) / 1000;
  if (Number.isNaN(seconds)) return '';
  return seconds < 0 ? span(seconds) + ' ago' : 'in ' + span(seconds);
}

// A time cell: the relative time, the exact one on hover.
export function when(iso) {
  if (!iso) return h('span', {class: 'muted'}, '—');
  return h('time', {datetime: iso, title: utc(iso)}, relative(iso));
}

export function duration(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1) return ms.toFixed(2) + ' ms';
  if (ms < 1000) return ms.toFixed(ms < 10 ? 1 : 0) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  return span(ms / 1000);
}

// A run's state and outcome as one badge: "ok", "script_error", "running", "needs_reconciliation".
export function runBadge(run) {
  const label = run.state === 'ended' ? run.outcome : run.state;
  return h('span', {class: ['badge', badgeClass(label)], 'data-state': run.state}, label || '?');
}

export function badgeClass(label) {
  if (label === 'ok' || label === 'allow' || label === 'answered' || label === 'ready') return 'good';
  if (label === 'queued' || label === 'running' || label === 'sleeping' || label === 'waiting' || label === 'retrying') return 'live';
  if (label === 'skipped' || label === 'missed' || label === 'cancelled' || label === 'interrupted' ||
      label === 'needs_approval' || label === 'started' || label === 'decided') return 'warn';
  if (label === 'needs_reconciliation') return 'alert';
  return 'bad';
}

export function badge(label) {
  return h('span', {class: ['badge', badgeClass(label)]}, label);
}
