// The schedules of the daemon's configuration: each with its cron expression and time zone, what
// it does when a fire finds the previous run still going, when it fires next and when it fired
// last (GET /v1/schedules); "Run now" starts one run of it at once (POST
// /v1/schedules/{name}/run), journaled like any other fire.

import * as api from './api.js';
import {confirmButton, h, replace} from './dom.js';
import {utc, when} from './format.js';

export function schedulesPage(main, session) {
  const canRun = session && session.scopes.some((s) => s === 'run' || s === 'all');
  const body = h('tbody', {id: 'schedules'});
  const status = h('p', {class: 'status', role: 'status'}, 'Loading…');
  const notice = h('p', {class: 'notice', id: 'schedule-notice', role: 'status'});
  replace(main, h('h1', {}, 'Schedules'), status, notice,
    h('table', {}, h('thead', {}, h('tr', {},
      ['Schedule', 'Flow', 'When', 'Overlap', 'Next fire', 'Last fire', 'Last run', ''].map((c) => h('th', {}, c)))), body));

  async function load() {
    try {
      const s = await api.get('/v1/schedules');
      replace(status, s.schedules.length ? '' : 'No schedule in this daemon\'s configuration (docs/serve-config.md).');
      replace(body, s.schedules.map(row));
    } catch (e) {
      replace(status, h('span', {class: 'error'}, e.message));
    }
  }

  function row(s) {
    return h('tr', {'data-schedule': s.name},
      h('td', {}, s.name),
      h('td', {}, h('a', {href: '#/flows/' + encodeURIComponent(s.flow)}, s.flow)),
      h('td', {}, h('code', {}, s.cron), ' ', h('span', {class: 'muted'}, s.timezone)),
      h('td', {}, s.overlap, s.open_runs ? h('div', {class: 'muted'}, s.open_runs + ' open') : null),
      h('td', {}, s.next_fire ? [utc(s.next_fire), h('div', {class: 'muted'}, when(s.next_fire))] : '—'),
      h('td', {}, s.last_fire ? when(s.last_fire) : '—'),
      h('td', {}, s.last_run_id ? h('a', {href: '#/runs/' + s.last_run_id}, '#' + s.last_run_id) : '—'),
      h('td', {}, canRun ? confirmButton('Run now', 'Start a run of ' + s.name + ' now?', async () => {
        try {
          const run = await api.post('/v1/schedules/' + encodeURIComponent(s.name) + '/run', {});
          const id = run && (run.id ?? run.run_id);
          replace(notice, s.name + ': started ',
            id ? h('a', {href: '#/runs/' + id, id: 'started-run'}, 'run #' + id) : 'a run', '.');
          setTimeout(load, 1000);
        } catch (e) {
          replace(notice, h('span', {class: 'error'}, s.name + ': ' + e.message));
        }
      }, {class: 'run-now'}) : h('span', {class: 'muted', title: 'the token lacks the scope run'}, 'read only')));
  }

  load();
  const timer = setInterval(load, 30000);
  return () => clearInterval(timer);
}
