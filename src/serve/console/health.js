// The daemon's health: whether it is ready and why not, its workers and queue, what its
// activations ended with since it started (GET /v1/health), and its last hour as small charts,
// one sample every 10 s (GET /v1/health/history). Refreshed every 10 s while it is shown.

import * as api from './api.js';
import {chart} from './charts.js';
import {h, replace} from './dom.js';
import {badge, utc, when} from './format.js';

function number(label, value, id, alert) {
  return h('div', {class: ['number', alert && value > 0 ? 'alert' : null], id},
    h('div', {class: 'value'}, String(value ?? '—')), h('div', {class: 'label'}, label));
}

export function healthPage(main) {
  const status = h('p', {class: 'status', role: 'status'}, 'Loading…');
  const numbers = h('div', {class: 'numbers'});
  const charts = h('div', {class: 'charts'});
  const failed = h('div');
  replace(main, h('h1', {}, 'Health'), status, numbers, h('h2', {}, 'The last hour'), charts, failed);

  async function load() {
    try {
      const [health, history] = await Promise.all([api.get('/v1/health'), api.get('/v1/health/history')]);
      const serve = health.serve || {};
      replace(status, serve.ready ? badge('ready') : [h('span', {class: 'badge bad'}, 'not ready'), ' ', serve.not_ready_because],
        serve.draining ? [' ', badge('draining')] : null, ' since ', utc(serve.since), ' (', when(serve.since), ')');
      replace(numbers,
        number('runs queued', serve.queued_runs, 'n-queued'),
        number('runs in flight', serve.runs_in_flight, 'n-in-flight'),
        number('workers busy / live', health.workers.busy + ' / ' + health.workers.live, 'n-workers'),
        number('activations ok', health.activations.ok, 'n-ok'),
        number('activations failed', health.activations.failed, 'n-failed', true),
        number('host calls denied', health.denied_calls, 'n-denied', true),
        number('confinement violations', health.worker_confinement, 'n-confinement', true),
        number('deadline kills', health.deadline_kills, 'n-deadline', true),
        number('journal failures', health.journal_failures, 'n-journal', true));
      const s = history;
      replace(charts,
        chart('Activations per 10 s', s, [
          {key: 'activations_ok', label: 'ok', kind: 'bar', cls: 'good'},
          {key: 'activations_failed', label: 'failed', kind: 'bar', cls: 'bad'}], 'chart-activations'),
        chart('Runs queued and in flight', s, [
          {key: 'queued', label: 'queued', kind: 'line', cls: 'warn'},
          {key: 'in_flight', label: 'in flight', kind: 'line', cls: 'live'}], 'chart-queue'),
        chart('Workers', s, [
          {key: 'workers_live', label: 'live', kind: 'line', cls: 'muted'},
          {key: 'workers_busy', label: 'busy', kind: 'line', cls: 'live'}], 'chart-workers'),
        chart('Host calls per 10 s', s, [
          {key: 'calls_refused', label: 'refused', kind: 'bar', cls: 'bad'},
          {key: 'calls', label: 'all', kind: 'line', cls: 'muted'}], 'chart-calls'));
      const kinds = Object.entries(health.activations.failed_by_kind || {});
      replace(failed, kinds.length ? [h('h2', {}, 'Failed activations by kind, since the start'),
        h('table', {}, h('tbody', {}, kinds.map(([k, n]) => h('tr', {}, h('td', {}, badge(k)), h('td', {class: 'num'}, String(n))))))] : null);
    } catch (e) {
      replace(status, h('span', {class: 'error'}, e.message));
    }
  }

  load();
  const timer = setInterval(load, 10000);
  return () => clearInterval(timer);
}
