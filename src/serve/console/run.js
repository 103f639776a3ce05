// One run: what started it, its state and outcome, its input and result or error; the timeline of
// its host calls as the journal holds them (each call's decision and the rule behind it, its
// effect class and state, when it started and how long it took, its arguments and answer); the
// lines it logged; and, for a durable run that waits for an operator, the actions the API allows
// (resolve a call in doubt, resume, cancel). A run that still runs is followed live (GET /v1/tail).

import * as api from './api.js';
import {confirmButton, h, jsonText, replace, svg} from './dom.js';
import {badge, duration, runBadge, utc, when} from './format.js';

const CALLS_PAGE = 200;
// Pages of calls loaded at once; past them a button loads more (a run may hold a great many).
const CALL_PAGES_AT_ONCE = 5;
// A run not ended: followed live, and cancellable. (sleeping, waiting, retrying: durable runs parked, issue 26.)
const WAITING = new Set(['queued', 'running', 'interrupted', 'needs_reconciliation', 'sleeping', 'waiting', 'retrying']);

function field(label, ...value) {
  return [h('dt', {}, label), h('dd', {}, ...value)];
}

function pre(value, attrs = {}) {
  return h('pre', {class: 'json', ...attrs}, jsonText(value));
}

export function runPage(main, id, session) {
  const canRun = session && session.scopes.some((s) => s === 'run' || s === 'all');
  let stopped = false;
  let stopStream = null;
  let reloadTimer = null;
  const head = h('div', {id: 'run-head'});
  const actions = h('section', {id: 'run-actions', class: 'actions', hidden: true});
  const callsBody = h('tbody', {id: 'calls'});
  const more = h('div', {class: 'pager'});
  const logs = h('div', {class: 'logs', id: 'logs'});
  const status = h('p', {class: 'status', role: 'status'}, 'Loading…');
  replace(main,
    h('div', {class: 'page-head'}, h('h1', {}, 'Run #' + id), h('a', {href: '#/runs'}, '← all runs')),
    status, head, actions,
    h('h2', {}, 'Host calls'),
    h('table', {class: 'calls'},
      h('thead', {}, h('tr', {}, ['#', 'Host call', 'Decision', 'Rule', 'Effect', 'State', 'Timeline', 'Took', 'Arguments and answer']
        .map((c) => h('th', {}, c)))),
      callsBody),
    more,
    h('h2', {}, 'Logs'), logs);

  let run = null;
  let calls = [];

  async function load() {
    try {
      run = await api.get('/v1/runs/' + id);
      if (stopped) return;
      replace(status);
      showHead();
      showActions();
      calls = [];
      await loadCalls(0);
      follow();
    } catch (e) {
      if (!stopped) replace(status, h('span', {class: 'error'}, e.message));
    }
  }

  function showHead() {
    const error = run.error ? [h('strong', {}, run.error.kind || 'error'), ': ', run.error.message || ''] : null;
    replace(head, h('dl', {class: 'facts'},
      field('Flow', h('a', {href: '#/flows/' + encodeURIComponent(run.flow)}, run.flow)),
      field('Trigger', run.trigger),
      field('State', runBadge(run), run.durable ? [' ', h('span', {class: 'tag'}, 'durable'),
        run.resumes ? ' resumed ' + (run.resumes === 1 ? 'once' : run.resumes + ' times') : '',
        run.attempt > 1 ? ', attempt ' + run.attempt : ''] : null),
      // A parked run (sleeping, waiting, retrying): when it wakes, and the event it waits for.
      run.wakes ? field('Wakes', h('span', {id: 'run-wakes'}, utc(run.wakes))) : null,
      run.waiting_for ? field('Waits for', h('span', {id: 'run-waiting-for'}, 'the event ' + run.waiting_for.event,
        run.waiting_for.key ? ' with key ' + run.waiting_for.key : '')) : null,
      field('Created', utc(run.created), ' (', when(run.created), ')'),
      run.started ? field('Started', utc(run.started)) : null,
      run.ended ? field('Ended', utc(run.ended)) : null,
      run.duration_ms !== undefined ? field('Took', duration(run.duration_ms), ' wall, ', duration(run.cpu_ms), ' CPU') : null,
      run.activation_id ? field('Activation', String(run.activation_id)) : null,
      run.idempotency_key ? field('Idempotency key', run.idempotency_key) : null,
      error ? field('Error', h('span', {class: 'error', id: 'run-error'}, error)) : null,
      run.detail ? field(run.state === 'ended' ? 'Detail' : 'Why it waits', why(run.detail)) : null,
      field('Input', pre(run.input, {id: 'run-input'})),
      'result' in run ? field('Result', pre(run.result, {id: 'run-result'})) : null));
  }

  function act(path, body) {
    return async () => {
      try {
        await api.post('/v1/runs/' + id + path, body());
        await load();
      } catch (e) {
        replace(status, h('span', {class: 'error'}, e.message));
      }
    };
  }

  function showActions() {
    replace(actions);
    actions.hidden = !WAITING.has(run.state);
    if (actions.hidden) return;
    actions.appendChild(h('h2', {}, 'Operator actions'));
    if (!canRun) {
      actions.appendChild(h('p', {class: 'muted'}, 'This session\'s token lacks the scope run: it can look, not act.'));
      return;
    }
    if (run.state === 'needs_reconciliation' && run.detail && Array.isArray(run.detail.in_doubt)) {
      actions.appendChild(h('p', {}, run.detail.message || 'These calls may or may not have happened; say what became of each.'));
      for (const call of run.detail.in_doubt) actions.appendChild(resolveForm(call));
    }
    if (run.state === 'interrupted') {
      const newest = h('input', {type: 'checkbox', id: 'newest-version'});
      actions.appendChild(h('p', {},
        confirmButton('Resume', 'Resume run #' + id + '?', act('/resume', () => (newest.checked ? {newest_version: true} : {}))),
        ' ', h('label', {}, newest, ' under the flow\'s newest version')));
    }
    actions.appendChild(h('p', {}, confirmButton('Cancel run', 'Cancel run #' + id + '? It ends cancelled.',
      act('/cancel', () => ({})), {class: 'danger', id: 'cancel-run'})));
  }

  function resolveForm(call) {
    const value = h('textarea', {rows: 3, cols: 60, placeholder: 'the answer, as JSON (e.g. {"status": 200})'});
    const message = h('input', {type: 'text', size: 50, placeholder: 'the error message'});
    const note = h('input', {type: 'text', size: 50, placeholder: 'a note for the journal (optional)'});
    const withNote = (body) => (note.value ? {...body, note: note.value} : body);
    return h('div', {class: 'resolve', 'data-call': call.call},
      h('h3', {}, 'Call ', String(call.call), ': ', call.name, ' ', badge(call.effect || 'external')),
      pre(call.args),
      h('p', {}, 'It happened and answered: ', value, ' ',
        confirmButton('Record the answer', 'Record this answer for call ' + call.call + '?', async () => {
          let parsed;
          try {
            parsed = JSON.parse(value.value);
          } catch {
            replace(status, h('span', {class: 'error'}, 'The answer is not JSON: write it as JSON ("text", 42, {...}).'));
            return;
          }
          await act('/resolve', () => withNote({call: call.call, result: parsed}))();
        })),
      h('p', {}, 'It failed: ', message, ' ',
        confirmButton('Record the failure', 'Record that call ' + call.call + ' failed?',
          act('/resolve', () => withNote({call: call.call, error: message.value || 'failed'})))),
      h('p', {}, 'It did not happen: ',
        confirmButton('Run it again', 'Run call ' + call.call + ' again?', act('/resolve', () => withNote({call: call.call, retry: true})))),
      h('p', {}, note));
  }

  async function loadCalls(after, pages = CALL_PAGES_AT_ONCE) {
    let cursor = after;
    for (let i = 0; i < pages; i++) {
      const page = await api.get('/v1/runs/' + id + '/calls' + api.query({after: cursor, limit: CALLS_PAGE}));
      if (stopped) return;
      calls = calls.concat(page.calls);
      cursor = page.next;
      if (cursor === null) break;
    }
    showCalls();
    replace(more, cursor === null ? null : h('button', {type: 'button', onclick: () => loadCalls(cursor)},
      'Load more calls (' + calls.length + ' shown)'));
  }

  function showCalls() {
    const starts = calls.map((c) => Date.parse(c.started));
    const t0 = run.started ? Date.parse(run.started) : Math.min(...starts);
    const ends = calls.map((c) => (c.ended ? Date.parse(c.ended) : Date.now()));
    const t1 = Math.max(run.ended ? Date.parse(run.ended) : Date.now(), ...ends, t0 + 1);
    const span = t1 - t0;
    replace(callsBody, calls.length ? calls.map((c, i) => {
      const x = ((starts[i] - t0) / span) * 100;
      const w = Math.max(((ends[i] - starts[i]) / span) * 100, 0.6);
      const answer = 'error' in c ? c.error : c.result;
      return h('tr', {'data-call': c.call_id, 'data-decision': c.decision, class: c.decision !== 'allow' ? 'refused' : null},
        h('td', {class: 'num'}, String(c.call_id)),
        h('td', {}, h('code', {}, c.name)),
        h('td', {}, badge(c.decision)),
        h('td', {title: c.reason}, c.rule, c.reason && c.reason !== c.rule ? h('div', {class: 'muted'}, c.reason) : null),
        h('td', {}, c.effect),
        h('td', {}, badge(c.state)),
        h('td', {class: 'timeline', title: '+' + duration(starts[i] - t0) + ' from the start'},
          svg('svg', {viewBox: '0 0 100 10', preserveAspectRatio: 'none', class: 'bar'},
            svg('rect', {x: Math.min(x, 99.4).toFixed(2), y: 1, width: w.toFixed(2), height: 8, class: 'decision-' + c.decision}))),
        h('td', {class: 'num'}, duration(c.ms)),
        h('td', {}, h('details', {},
          h('summary', {}, summary(c.args)),
          h('div', {class: 'muted'}, 'arguments'), pre(c.args),
          answer !== undefined ? [h('div', {class: 'muted'}, 'error' in c ? 'error' : 'result'), pre(answer)] : null)));
    }) : h('tr', {}, h('td', {colspan: 9, class: 'muted'}, run.activation_id ? 'No host calls.' : 'Not started yet.')));
    const lines = calls.filter((c) => c.name === 'log' && c.args && typeof c.args === 'object');
    replace(logs, lines.length ? lines.map((c) => logLine(c.args.level, c.args.message, c.started)) :
      h('p', {class: 'muted'}, 'Nothing logged.'));
  }

  function follow() {
    if (stopStream || !WAITING.has(run.state)) return;
    const mine = (data) => String(data.run_id) === String(id);
    const reload = (data) => {
      if (!mine(data)) return;
      clearTimeout(reloadTimer);
      reloadTimer = setTimeout(load, 500);
    };
    stopStream = api.stream('/v1/tail' + api.query({flow: run.flow}), {
      log: (data) => {
        if (!mine(data)) return;
        if (logs.querySelector('p.muted')) replace(logs);
        logs.appendChild(logLine(data.level, data.message, new Date().toISOString()));  // as it arrives
      },
      call: reload,
      activation_start: reload,
      activation_end: (data) => {
        if (!mine(data)) return;
        stopStream();
        stopStream = null;
        reload(data);
      },
    }, () => {});
  }

  load();
  return () => {
    stopped = true;
    clearTimeout(reloadTimer);
    if (stopStream) stopStream();
  };
}

// A durable run's state detail: the calls in doubt are shown with their actions below, so only
// the message here; an interruption as a time.
function why(detail) {
  if (detail && Array.isArray(detail.in_doubt)) return detail.message || detail.in_doubt.length + ' calls in doubt';
  if (detail && detail.interrupted_us) {
    return 'interrupted at ' + utc(new Date(detail.interrupted_us / 1000).toISOString()) +
      (detail.activation ? ' (activation ' + detail.activation + ')' : '');
  }
  return pre(detail);
}

function summary(args) {
  const text = JSON.stringify(args) ?? '';
  return text.length > 80 ? text.slice(0, 80) + '…' : text;
}

function logLine(level, message, at) {
  return h('div', {class: ['log', 'level-' + (level || 'log')]},
    h('span', {class: 'muted'}, utc(at || '').slice(11), ' '),
    h('span', {class: 'level'}, level || 'log'), ' ',
    h('span', {class: 'message'}, typeof message === 'string' ? message : JSON.stringify(message)));
}
