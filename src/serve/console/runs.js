// The runs page: every run of the store, newest first, a page at a time, filtered by flow,
// outcome, state, trigger and age (GET /v1/runs), kept up to date by the live tail (GET
// /v1/tail): on the newest page a run that starts or ends shows at once; on an older page the
// console counts what is new instead of moving the rows under the reader.

import * as api from './api.js';
import {h, replace} from './dom.js';
import {duration, runBadge, when} from './format.js';

export const PAGE_SIZE = 50;

// What GET /v1/runs filters by (docs/api.md); a value it does not know is its 400, shown as such.
const STATES = ['', 'queued', 'running', 'ended', 'interrupted', 'needs_reconciliation', 'sleeping', 'waiting', 'retrying'];
const OUTCOMES = ['ok', 'script_error', 'budget_exhausted', 'deadline', 'protocol_violation', 'worker_crashed',
  'worker_confinement', 'worker_refused', 'spawn_failed', 'journal_error', 'invalid_input', 'cancelled', 'abandoned',
  'diverged', 'missed', 'skipped', 'resume_exhausted'];
// ?since= takes a duration back from now.
const AGES = [['', 'any time'], ['1h', 'the last hour'], ['1d', 'the last day'], ['7d', 'the last week']];

export function runsPage(main, params) {
  const filter = {
    flow: params.get('flow') || '',
    outcome: params.get('outcome') || '',
    state: params.get('state') || '',
    trigger: params.get('trigger') || '',
    age: params.get('age') || '',
  };
  // The cursors of the pages before this one: [] on the newest page.
  const cursors = [];
  let cursor = null;
  let next = null;
  let fresh = 0;
  let stopped = false;
  let refreshTimer = null;

  const flowSelect = h('select', {name: 'flow', id: 'filter-flow'}, h('option', {value: ''}, 'every flow'));
  const form = h('form', {class: 'filters', id: 'run-filters', onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const q = new URLSearchParams();
    for (const key of ['flow', 'outcome', 'state', 'trigger', 'age']) if (data.get(key)) q.set(key, data.get(key));
    const target = '#/runs' + (q.toString() ? '?' + q : '');
    if (location.hash === target) load(); else location.hash = target;
  }},
  h('label', {}, 'Flow ', flowSelect),
  h('label', {}, 'Outcome ', h('input', {name: 'outcome', id: 'filter-outcome', list: 'outcomes', value: filter.outcome,
    size: 14, placeholder: 'any'})),
  h('datalist', {id: 'outcomes'}, OUTCOMES.map((o) => h('option', {value: o}))),
  h('label', {}, 'State ', h('select', {name: 'state', id: 'filter-state'},
    STATES.map((s) => h('option', {value: s, selected: s === filter.state}, s || 'any')))),
  h('label', {}, 'Trigger ', h('input', {name: 'trigger', id: 'filter-trigger', value: filter.trigger, size: 16,
    placeholder: 'api, webhook, schedule:NAME'})),
  h('label', {}, 'Since ', h('select', {name: 'age', id: 'filter-age'},
    AGES.map(([v, label]) => h('option', {value: v, selected: v === filter.age}, label)))),
  h('button', {type: 'submit'}, 'Filter'),
  ' ', h('a', {href: '#/runs', class: 'clear'}, 'clear'));

  const live = h('span', {class: 'live-status', id: 'live-status'}, '');
  const banner = h('p', {class: 'banner', id: 'new-runs', hidden: true});
  const body = h('tbody', {id: 'runs'});
  const pager = h('div', {class: 'pager'});
  const status = h('p', {class: 'status', role: 'status'});
  replace(main,
    h('div', {class: 'page-head'}, h('h1', {}, 'Runs'), live),
    form, banner, status,
    h('table', {class: 'runs'},
      h('thead', {}, h('tr', {}, ['Run', 'Flow', 'Trigger', 'State', 'Created', 'Duration', 'Error'].map((c) => h('th', {}, c)))),
      body),
    pager);

  api.get('/v1/flows').then((f) => {
    const names = f.flows.map((flow) => flow.name);
    // A flow with runs and no approval (an agent's codemode scripts) can be in the address too.
    if (filter.flow && !names.includes(filter.flow)) names.push(filter.flow);
    for (const name of names) flowSelect.appendChild(h('option', {value: name, selected: name === filter.flow}, name));
  }).catch(() => {});

  async function load() {
    replace(status, 'Loading…');
    try {
      const page = await api.get('/v1/runs' + api.query({
        flow: filter.flow, outcome: filter.outcome, state: filter.state, trigger: filter.trigger,
        since: filter.age, cursor, limit: PAGE_SIZE,
      }));
      if (stopped) return;
      next = page.next;
      replace(body, page.runs.map(row));
      replace(status, page.runs.length ? '' : 'No runs match.');
      replace(pager,
        h('button', {type: 'button', id: 'newer', disabled: cursors.length === 0, onclick: () => {
          cursor = cursors.pop() ?? null;
          load();
        }}, '← Newer'),
        h('span', {class: 'muted', id: 'page-number'}, ' page ' + (cursors.length + 1) + ' '),
        h('button', {type: 'button', id: 'older', disabled: !next, onclick: () => {
          cursors.push(cursor);
          cursor = next;
          load();
        }}, 'Older →'));
      if (cursors.length === 0) {
        fresh = 0;
        banner.hidden = true;
      }
    } catch (e) {
      if (!stopped) replace(status, h('span', {class: 'error'}, e.message));
    }
  }

  function row(run) {
    const error = run.error ? (run.error.kind ? run.error.kind + ': ' : '') + (run.error.message || '') : '';
    return h('tr', {'data-run': run.id},
      h('td', {}, h('a', {href: '#/runs/' + run.id}, '#' + run.id)),
      h('td', {}, h('a', {href: '#/flows/' + encodeURIComponent(run.flow)}, run.flow)),
      h('td', {}, run.trigger),
      h('td', {}, runBadge(run), run.durable ? h('span', {class: 'tag', title: 'a durable run'}, 'durable') : null),
      h('td', {}, when(run.created)),
      h('td', {class: 'num'}, duration(run.duration_ms)),
      h('td', {class: 'error-text', title: error}, error.length > 120 ? error.slice(0, 120) + '…' : error));
  }

  // Live: each activation that starts or ends (of the flow filtered for, if any).
  const onEvent = () => {
    if (cursors.length > 0) {
      fresh += 1;
      replace(banner, fresh + ' activations started or ended since this page was loaded: ',
        h('a', {href: '#/runs?' + new URLSearchParams(Object.entries(filter).filter(([, v]) => v)), id: 'to-newest'},
          'show the newest runs'));
      banner.hidden = false;
      return;
    }
    // Several events in a burst make one reload.
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(load, 300);
  };
  let connections = 0;
  const stopStream = api.stream('/v1/tail' + api.query({flow: filter.flow}), {
    activation_start: onEvent,
    activation_end: onEvent,
    // What happened while the stream was down is not told again: the page is read anew.
    open: () => {
      if (connections++ > 0) onEvent();
    },
  }, (isLive, text) => replace(live, h('span', {class: ['dot', isLive ? 'live' : null]}), ' ' + text));

  load();
  return () => {
    stopped = true;
    stopStream();
    clearTimeout(refreshTimer);
  };
}
