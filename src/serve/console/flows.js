// The flows: each approved flow with its newest version; one flow with its manifest, every version
// with who approved or revoked it and why, and the grant diff between two versions as `basal flow
// diff` reviews it (GET /v1/flows/{name}/versions/{v}?against={u}): each host call's grant added,
// removed, widened, narrowed or changed, and the budgets raised or lowered.

import * as api from './api.js';
import {h, jsonText, replace} from './dom.js';
import {badge, utc, when} from './format.js';

export function flowsPage(main) {
  const body = h('tbody', {id: 'flows'});
  const status = h('p', {class: 'status', role: 'status'}, 'Loading…');
  replace(main, h('h1', {}, 'Flows'), status,
    h('table', {}, h('thead', {}, h('tr', {}, ['Flow', 'Version', 'Approved', 'By', ''].map((c) => h('th', {}, c)))), body));
  api.get('/v1/flows').then((f) => {
    replace(status, f.flows.length ? '' : 'No flow is approved in this store (basal flow approve).');
    replace(body, f.flows.map((flow) => h('tr', {'data-flow': flow.name},
      h('td', {}, h('a', {href: '#/flows/' + encodeURIComponent(flow.name)}, flow.name)),
      h('td', {class: 'num'}, String(flow.version)),
      h('td', {}, when(flow.approved)),
      h('td', {}, flow.approved_by),
      h('td', {}, flow.revoked ? badge('revoked') : h('a', {href: '#/runs?flow=' + encodeURIComponent(flow.name)}, 'runs')))));
  }).catch((e) => replace(status, h('span', {class: 'error'}, e.message)));
}

export function flowPage(main, name) {
  const status = h('p', {class: 'status', role: 'status'}, 'Loading…');
  const facts = h('div');
  const versions = h('tbody', {id: 'versions'});
  const diff = h('section', {id: 'diff'});
  const from = h('select', {id: 'diff-from'});
  const to = h('select', {id: 'diff-to'});
  const path = '/v1/flows/' + encodeURIComponent(name);
  replace(main,
    h('div', {class: 'page-head'}, h('h1', {}, 'Flow ', name),
      h('a', {href: '#/runs?flow=' + encodeURIComponent(name)}, 'its runs'), ' ', h('a', {href: '#/flows'}, '← all flows')),
    status, facts,
    h('h2', {}, 'Versions and approvals'),
    h('table', {}, h('thead', {}, h('tr', {}, ['Version', 'Approved', 'By', 'Note', 'Revoked'].map((c) => h('th', {}, c)))), versions),
    h('h2', {}, 'What changed between two versions'),
    h('form', {class: 'filters', id: 'diff-form', onsubmit: (event) => {
      event.preventDefault();
      compare();
    }}, h('label', {}, 'From ', from), ' ', h('label', {}, 'to ', to), ' ', h('button', {type: 'submit'}, 'Compare')),
    diff);

  async function compare() {
    replace(diff, h('p', {class: 'muted'}, 'Comparing…'));
    try {
      const v = await api.get(path + '/versions/' + to.value + api.query({against: from.value}));
      replace(diff, review(v));
    } catch (e) {
      replace(diff, h('p', {class: 'error'}, e.message));
    }
  }

  api.get(path).then((flow) => {
    replace(status);
    replace(facts, h('dl', {class: 'facts'},
      h('dt', {}, 'Newest version'), h('dd', {}, String(flow.version), flow.revoked ? [' ', badge('revoked')] : null),
      h('dt', {}, 'Source'), h('dd', {}, h('code', {}, flow.source_hash)),
      h('dt', {}, 'Manifest'), h('dd', {}, h('pre', {class: 'json', id: 'manifest'}, jsonText(flow.manifest)))));
    replace(versions, flow.versions.slice().reverse().map((v) => h('tr', {'data-version': v.version},
      h('td', {class: 'num'}, String(v.version)),
      h('td', {}, utc(v.approved), ' (', when(v.approved), ')'),
      h('td', {}, v.approved_by),
      h('td', {}, v.note),
      h('td', {}, v.revoked ? [badge('revoked'), ' ', utc(v.revoked), v.revoked_by ? ' by ' + v.revoked_by : '',
        v.revoke_note ? h('div', {class: 'muted'}, v.revoke_note) : null] : ''))));
    for (const v of flow.versions) {
      from.appendChild(h('option', {value: v.version, selected: v.version === flow.version - 1}, 'version ' + v.version));
      to.appendChild(h('option', {value: v.version, selected: v.version === flow.version}, 'version ' + v.version));
    }
    if (flow.versions.length > 1) compare();
    else replace(diff, h('p', {class: 'muted'}, 'Only one version: nothing to compare it with.'));
  }).catch((e) => replace(status, h('span', {class: 'error'}, e.message)));
}

function constraint(value) {
  return value === null || value === undefined ? h('span', {class: 'muted'}, '—') : h('pre', {class: 'json'}, jsonText(value));
}

function review(v) {
  const r = v.review;
  const grants = r.grants || [];
  const budgets = r.budgets || [];
  return [
    h('p', {id: 'diff-summary'}, 'From version ', String(v.against), ' to version ', String(v.version), ': ',
      r.same_manifest_text ? 'the same manifest. ' :
        (r.widens ? h('strong', {class: 'widens'}, 'it grants more. ') : 'it grants no more. '),
      v.source_changed ? 'The source changed.' : 'The source is the same.'),
    v.against_manifest_error ? h('p', {class: 'error'}, 'Version ', String(v.against),
      '\'s manifest does not parse with this basal; everything is shown as added: ', v.against_manifest_error) : null,
    grants.length ? h('table', {class: 'grants', id: 'grant-diff'},
      h('thead', {}, h('tr', {}, ['Host call', 'Change', 'Before', 'After', 'Per constraint'].map((c) => h('th', {}, c)))),
      h('tbody', {}, grants.map((g) => h('tr', {'data-grant': g.name, 'data-kind': g.kind},
        h('td', {}, h('code', {}, g.name)),
        h('td', {}, h('span', {class: ['badge', 'grant-' + g.kind]}, g.kind)),
        h('td', {}, constraint(g.before)),
        h('td', {}, constraint(g.after)),
        h('td', {}, (g.changes || []).map((c) => h('div', {}, h('code', {}, c.constraint), ' ', c.direction,
          c.detail ? ': ' + c.detail : '')), g.comparable === false ?
          h('div', {class: 'muted'}, 'not comparable: read before and after', g.compare_error ? ' (' + g.compare_error + ')' : '') : null))))) :
      h('p', {class: 'muted'}, 'No grant changed.'),
    budgets.length ? h('table', {class: 'budgets'},
      h('thead', {}, h('tr', {}, ['Budget', 'Before', 'After'].map((c) => h('th', {}, c)))),
      h('tbody', {}, budgets.map((b) => h('tr', {},
        h('td', {}, h('code', {}, b.name)), h('td', {class: 'num'}, String(b.before ?? '')), h('td', {class: 'num'}, String(b.after)))))) :
      h('p', {class: 'muted'}, 'No budget changed.'),
  ];
}
